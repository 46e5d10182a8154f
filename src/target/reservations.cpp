// SPDX-License-Identifier: Apache-2.0
#include "target/reservations.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/log.hpp"

namespace nvtcp::target {

using wire::ReservationNotice;
using wire::ReservationType;
using nvme::Status;
namespace sc = nvme::sc;

namespace {

std::string hex_of(const Reservations::HostId& h) {
  std::string s;
  for (uint8_t b : h) s += fmt::format("{:02x}", b);
  return s;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Exactly 32 hex digits (no sign, no spaces: what hex_of writes).
bool host_of(const nlohmann::json& v, Reservations::HostId& h) {
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() != 32) return false;
  for (size_t i = 0; i < 16; ++i) {
    const int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    h[i] = uint8_t(hi << 4 | lo);
  }
  return true;
}

bool valid_type(uint64_t t) { return t >= 1 && t <= 6; }

bool all_registrants(ReservationType t) {
  return t == ReservationType::WriteExclusiveAllRegistrants || t == ReservationType::ExclusiveAccessAllRegistrants;
}

// The largest state file a namespace with max_registrants registrants writes (about 80
// bytes a registrant, pretty-printed), with room to spare; anything larger is not ours.
uint64_t max_state_bytes(uint32_t max_registrants) { return 4096 + uint64_t(max_registrants) * 160; }

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash + 1);
}

// A rename or unlink is durable only once its directory is synced.
std::string sync_directory(const std::string& path) {
  const std::string dir = directory_of(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return fmt::format("cannot open directory '{}': {}", dir, strerror(errno));
  const bool synced = ::fsync(dfd) == 0;
  const int saved = errno;
  ::close(dfd);
  if (!synced) return fmt::format("cannot sync directory '{}': {}", dir, strerror(saved));
  return {};
}

bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

}  // namespace

// Each Reservations object's versions start in a range of their own: a connection's access
// cache is kept by NSID, and a namespace removed and another added at that NSID (RPC) must
// not match a decision cached for the old one.
static uint64_t fresh_version_base() {
  static std::atomic<uint64_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed) << 32;
}

Reservations::Reservations(std::string persist_path, uint32_t max_registrants)
    : path_(std::move(persist_path)),
      max_registrants_(std::clamp<uint32_t>(max_registrants, 1, kMaxRegistrantsCeiling)) {
  version_.store(fresh_version_base(), std::memory_order_relaxed);
}

Reservations::~Reservations() {
  {
    std::lock_guard lk(persist_mu_);
    stopping_ = true;
  }
  persist_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

bool Reservations::ptpl() const {
  std::lock_guard lk(mu_);
  return ptpl_;
}

uint32_t Reservations::generation() const {
  std::lock_guard lk(mu_);
  return generation_;
}

ReservationType Reservations::type() const {
  std::lock_guard lk(mu_);
  return type_;
}

size_t Reservations::registrant_count() const {
  std::lock_guard lk(mu_);
  return registrants_.size();
}

void Reservations::set_before_write_hook(std::function<void()> hook) {
  std::lock_guard lk(persist_mu_);
  before_write_hook_ = std::move(hook);
}

Reservations::Registrant* Reservations::find(const HostId& host) {
  for (auto& r : registrants_)
    if (r.host == host) return &r;
  return nullptr;
}

const Reservations::Registrant* Reservations::find(const uint8_t* host) const {
  for (const auto& r : registrants_)
    if (std::memcmp(r.host.data(), host, 16) == 0) return &r;
  return nullptr;
}

// With an "all registrants" type every registrant holds the reservation.
bool Reservations::holds(const Registrant& r) const {
  if (type_ == ReservationType::None) return false;
  return all_registrants(type_) || holder_ == r.host;
}

void Reservations::set_reservation(ReservationType t, const HostId& holder) {
  type_ = t;
  holder_ = holder;
  type_seen_.store(uint8_t(t), std::memory_order_release);
}

void Reservations::clear_reservation() {
  type_ = ReservationType::None;
  holder_ = {};
  type_seen_.store(0, std::memory_order_release);
}

// Releasing a "registrants only" or "all registrants" reservation tells the other
// registrants, whose access it changed.
void Reservations::released_notices(const HostId& by, std::vector<Notice>& notices) const {
  for (const auto& r : registrants_)
    if (r.host != by) notices.push_back({r.host, ReservationNotice::ReservationReleased});
}

void Reservations::unregister(size_t index, const HostId& by, std::vector<Notice>& notices) {
  const bool was_holder = holds(registrants_[index]);
  const ReservationType t = type_;
  registrants_.erase(registrants_.begin() + long(index));
  if (!was_holder) return;
  if (all_registrants(t)) {
    if (registrants_.empty()) clear_reservation();  // the last holder left
    return;
  }
  clear_reservation();
  if (t == ReservationType::WriteExclusiveRegistrantsOnly || t == ReservationType::ExclusiveAccessRegistrantsOnly)
    released_notices(by, notices);
}

// One pass (erase_if), not an erase per match: preempting thousands of registrants that
// share a key must not be quadratic.
bool Reservations::preempt_key(uint64_t key, const HostId& by, std::vector<Notice>& notices) {
  bool any = false, holder_left = false;
  const ReservationType t = type_;
  std::erase_if(registrants_, [&](const Registrant& r) {
    if (r.key != key || r.host == by) return false;
    holder_left = holder_left || holds(r);
    notices.push_back({r.host, ReservationNotice::RegistrationPreempted});
    any = true;
    return true;
  });
  if (!holder_left) return any;
  if (all_registrants(t)) {
    if (registrants_.empty()) clear_reservation();
    return any;
  }
  clear_reservation();
  if (t == ReservationType::WriteExclusiveRegistrantsOnly || t == ReservationType::ExclusiveAccessRegistrantsOnly)
    released_notices(by, notices);
  return any;
}

uint64_t Reservations::changed(Access access, bool persistence_changed) {
  // Connections' cached access decisions (AccessCache) are for the version they saw.
  if (access == Access::MayHaveChanged) version_.fetch_add(1, std::memory_order_release);
  if (registrants_.size() < max_registrants_) full_reported_ = false;
  if (path_.empty() || !(ptpl_ || persistence_changed)) return 0;
  return ++state_ticket_;
}

Reservations::Outcome Reservations::finish(Status st, uint64_t ticket) {
  if (ticket) request_write(ticket);
  return {st, ticket};
}

Status Reservations::wait_for(const Outcome& o) {
  if (!o.status.ok() || wait_durable(o.durable_ticket)) return o.status;
  return sc::InternalError;  // the writer logged why
}

Reservations::Outcome Reservations::apply_register(const HostId& host, uint32_t cdw10,
                                                   const wire::ReservationRegisterData& d,
                                                   std::vector<Notice>& notices) {
  const uint32_t action = cdw10 & 0x7, cptpl = cdw10 >> 30;
  const bool iekey = cdw10 & wire::kResvIgnoreExistingKey;
  if (action > uint32_t(wire::RegisterAction::Replace) || cptpl == 1 ||
      (cptpl == wire::kCptplOn && !ptpl_capable()))
    return {sc::InvalidField};
  uint64_t ticket = 0;
  {
    std::lock_guard lk(mu_);
    Registrant* me = find(host);
    // A key replaced, or a registration repeated, changes no one's access (keys are checked
    // by reservation commands only); a registrant added or removed does.
    Access access = Access::MayHaveChanged;
    switch (static_cast<wire::RegisterAction>(action)) {
      case wire::RegisterAction::Register:
        if (me) {
          if (me->key != d.nrkey) return {sc::ReservationConflict};  // registered with another key
          access = Access::Unchanged;
        } else {
          if (registrants_.size() >= max_registrants_) {
            // NVMe names no status for a full registrant table; SPDK's target answers
            // Internal Device Error when its table is full (nvmf_ns_reservation_register),
            // and so do we: not Reservation Conflict, which tells a host its key is wrong.
            if (!full_reported_)
              log::warn("reservations{}: {} registrants, the limit (max_registrants_per_namespace): Register "
                        "from host {} and any other new host fails with Internal Error until one unregisters",
                        path_.empty() ? "" : fmt::format(" '{}'", path_), registrants_.size(), hex_of(host));
            full_reported_ = true;
            return {sc::InternalError};
          }
          registrants_.push_back({host, d.nrkey});
        }
        break;
      case wire::RegisterAction::Unregister:
        if (!me || (!iekey && me->key != d.crkey)) return {sc::ReservationConflict};
        unregister(size_t(me - registrants_.data()), host, notices);
        break;
      case wire::RegisterAction::Replace:
        if (!me || (!iekey && me->key != d.crkey)) return {sc::ReservationConflict};
        me->key = d.nrkey;
        access = Access::Unchanged;
        break;
    }
    const bool was = ptpl_;
    if (cptpl == wire::kCptplOn) ptpl_ = true;
    if (cptpl == wire::kCptplOff) ptpl_ = false;
    ++generation_;
    ticket = changed(access, was != ptpl_);
  }
  return finish(sc::Success, ticket);
}

Reservations::Outcome Reservations::apply_acquire(const HostId& host, uint32_t cdw10,
                                                  const wire::ReservationAcquireData& d,
                                                  std::vector<Notice>& notices) {
  const uint32_t action = cdw10 & 0x7;
  const uint8_t rtype = uint8_t(cdw10 >> 8);
  if ((cdw10 & wire::kResvIgnoreExistingKey) || !valid_type(rtype) ||
      action > uint32_t(wire::AcquireAction::PreemptAndAbort))
    return {sc::InvalidField};
  const auto want = ReservationType(rtype);
  uint64_t ticket = 0;
  {
    std::unique_lock lk(mu_);
    Registrant* me = find(host);
    if (!me || me->key != d.crkey) return {sc::ReservationConflict};
    if (action == uint32_t(wire::AcquireAction::Acquire)) {
      if (type_ != ReservationType::None) {
        // The holder asking again for what it holds changes nothing.
        return {holds(*me) && type_ == want ? sc::Success : sc::ReservationConflict};
      }
      set_reservation(want, host);
      ticket = changed(Access::MayHaveChanged);
      lk.unlock();  // the writer's lock is never taken under mu_
      return finish(sc::Success, ticket);
    }
    // Preempt, and preempt and abort: new commands of the preempted hosts are refused; with
    // Abort, their commands still waiting to reach the device end too (record_abort).
    const ReservationType was = type_;
    const size_t first_notice = notices.size();
    if (type_ == ReservationType::None) {
      if (!preempt_key(d.prkey, host, notices)) return {sc::ReservationConflict};
    } else if (all_registrants(type_)) {
      if (d.prkey == 0) {
        set_reservation(want, host);  // the new holder first, so no one else gains access
        std::erase_if(registrants_, [&](const Registrant& r) {
          if (r.host == host) return false;
          notices.push_back({r.host, ReservationNotice::RegistrationPreempted});
          return true;
        });
      } else if (!preempt_key(d.prkey, host, notices)) {
        return {sc::ReservationConflict};
      }
    } else if (holder_ == host) {
      set_reservation(want, host);  // a holder changes its type
      if (was != want) released_notices(host, notices);
    } else if (const Registrant* h = find(holder_.data()); h && d.prkey == h->key) {
      set_reservation(want, host);
      preempt_key(d.prkey, host, notices);
      if (was != want) released_notices(host, notices);
    } else if (d.prkey != 0) {
      if (!preempt_key(d.prkey, host, notices)) return {sc::ReservationConflict};
    } else {
      return {sc::InvalidField};
    }
    ++generation_;
    if (action == uint32_t(wire::AcquireAction::PreemptAndAbort)) {
      std::vector<PreemptAborts::HostId> preempted;
      for (size_t i = first_notice; i < notices.size(); ++i)
        if (notices[i].type == ReservationNotice::RegistrationPreempted) preempted.push_back(notices[i].host);
      aborts_.record(preempted);
    }
    ticket = changed(Access::MayHaveChanged);
  }
  return finish(sc::Success, ticket);
}

void PreemptAborts::record(const std::vector<HostId>& hosts) {
  if (hosts.empty()) return;
  std::lock_guard lk(mu_);
  const uint64_t epoch = epoch_.load(std::memory_order_relaxed) + 1;
  for (const HostId& h : hosts) {
    auto it = std::find_if(at_.begin(), at_.end(), [&](const auto& e) { return e.first == h; });
    if (it != at_.end()) it->second = epoch;
    else at_.emplace_back(h, epoch);
  }
  // Published after the entries: a reader that sees the new epoch finds them under the lock.
  epoch_.store(epoch, std::memory_order_release);
}

bool PreemptAborts::aborted_since(const uint8_t* host, uint64_t epoch) const {
  if (epoch_.load(std::memory_order_acquire) == epoch) return false;
  std::lock_guard lk(mu_);
  for (const auto& [h, at] : at_)
    if (at > epoch && std::memcmp(h.data(), host, h.size()) == 0) return true;
  return false;
}

Reservations::Outcome Reservations::apply_release(const HostId& host, uint32_t cdw10,
                                                  const wire::ReservationReleaseData& d,
                                                  std::vector<Notice>& notices) {
  const uint32_t action = cdw10 & 0x7;
  const uint8_t rtype = uint8_t(cdw10 >> 8);
  if ((cdw10 & wire::kResvIgnoreExistingKey) || action > uint32_t(wire::ReleaseAction::Clear))
    return {sc::InvalidField};
  uint64_t ticket = 0;
  {
    std::lock_guard lk(mu_);
    Registrant* me = find(host);
    if (!me || me->key != d.crkey) return {sc::ReservationConflict};
    if (action == uint32_t(wire::ReleaseAction::Clear)) {
      for (const auto& r : registrants_)
        if (r.host != host) notices.push_back({r.host, ReservationNotice::ReservationPreempted});
      registrants_.clear();
      clear_reservation();
      ++generation_;
    } else {
      if (!holds(*me)) return {sc::Success};  // nothing of this host's to release
      if (uint8_t(type_) != rtype) return {sc::InvalidField};
      const ReservationType was = type_;
      clear_reservation();
      if (was != ReservationType::WriteExclusive && was != ReservationType::ExclusiveAccess)
        released_notices(host, notices);
    }
    ticket = changed(Access::MayHaveChanged);
  }
  return finish(sc::Success, ticket);
}

Status Reservations::do_register(const HostId& host, uint32_t cdw10, const wire::ReservationRegisterData& d,
                                 std::vector<Notice>& notices) {
  return wait_for(apply_register(host, cdw10, d, notices));
}

Status Reservations::acquire(const HostId& host, uint32_t cdw10, const wire::ReservationAcquireData& d,
                             std::vector<Notice>& notices) {
  return wait_for(apply_acquire(host, cdw10, d, notices));
}

Status Reservations::release(const HostId& host, uint32_t cdw10, const wire::ReservationReleaseData& d,
                             std::vector<Notice>& notices) {
  return wait_for(apply_release(host, cdw10, d, notices));
}

Status Reservations::report(bool extended, uint8_t* buf, uint32_t len) const {
  if (!extended) return sc::HostIdInconsistentFormat;
  if (len < sizeof(wire::ReservationStatusExtHeader)) return sc::InvalidField;
  std::memset(buf, 0, len);
  std::lock_guard lk(mu_);
  auto* h = reinterpret_cast<wire::ReservationStatusExtHeader*>(buf);
  h->gen = generation_;
  h->rtype = uint8_t(type_);
  // Every registrant, whether or not its entry fits the buffer; max_registrants_ (at most
  // kMaxRegistrantsCeiling) keeps it within the 16-bit field.
  static_assert(kMaxRegistrantsCeiling <= 0xFFFF, "REGCTL is 16 bits");
  h->regctl = uint16_t(registrants_.size());
  h->ptpls = ptpl_ ? 1 : 0;
  const size_t room = (len - sizeof(*h)) / sizeof(wire::RegisteredControllerExt);
  const size_t n = std::min(room, registrants_.size());
  auto* e = reinterpret_cast<wire::RegisteredControllerExt*>(buf + sizeof(*h));
  for (size_t i = 0; i < n; ++i, ++e) {
    const Registrant& r = registrants_[i];
    e->cntlid = 0xFFFF;
    e->rcsts = holds(r) ? 1 : 0;  // O(1): a search per entry made this quadratic
    e->rkey = r.key;
    std::memcpy(e->hostid, r.host.data(), 16);
  }
  return sc::Success;
}

bool Reservations::allowed(const uint8_t* host, bool read_group, bool write_group, AccessCache& cache) const {
  if (!held()) return true;
  if (cache.version != version_.load(std::memory_order_acquire)) {
    // Decided once per change of the reservation state, not per command: the lock is taken
    // here only after a reservation command.
    std::lock_guard lk(mu_);
    cache.read = decide(host, true, false);
    cache.write = decide(host, false, true);
    cache.version = version_.load(std::memory_order_relaxed);
  }
  return (!read_group || cache.read) && (!write_group || cache.write);
}

bool Reservations::decide(const uint8_t* host, bool read_group, bool write_group) const {
  if (type_ == ReservationType::None) return true;
  const Registrant* me = find(host);
  if (me && holds(*me)) return true;
  if (!all_registrants(type_) && std::memcmp(holder_.data(), host, 16) == 0) return true;
  const bool registered = me != nullptr;
  switch (type_) {
    case ReservationType::WriteExclusive: return !write_group;
    case ReservationType::ExclusiveAccess: return !read_group && !write_group;
    case ReservationType::WriteExclusiveRegistrantsOnly:
    case ReservationType::WriteExclusiveAllRegistrants: return !write_group || registered;
    case ReservationType::ExclusiveAccessRegistrantsOnly:
    case ReservationType::ExclusiveAccessAllRegistrants: return (!read_group && !write_group) || registered;
    case ReservationType::None: break;
  }
  return true;
}

bool Reservations::set_ptpl(bool on, std::string& err) {
  const Outcome o = apply_ptpl(on, err);
  if (!o.status.ok()) return false;
  if (o.durable_ticket && !wait_durable(o.durable_ticket)) {
    err = fmt::format("cannot write the reservation state '{}' (see the log)", path_);
    return false;
  }
  return true;
}

Reservations::Outcome Reservations::apply_ptpl(bool on, std::string& err) {
  if (!ptpl_capable()) {
    err = "persistence through power loss needs a file namespace";
    return {nvme::sc::InvalidField, 0};
  }
  uint64_t ticket = 0;
  {
    std::lock_guard lk(mu_);
    const bool was = ptpl_;
    ptpl_ = on;
    ticket = changed(Access::Unchanged, was != on);
  }
  return finish(nvme::sc::Success, ticket);
}

void Reservations::request_write(uint64_t ticket) {
  if (!ticket) return;
  {
    std::lock_guard lk(persist_mu_);
    requested_ticket_ = std::max(requested_ticket_, ticket);
    if (!writer_.joinable() && !stopping_) {
      try {
        writer_ = std::thread([this] { writer_loop(); });
        pthread_setname_np(writer_.native_handle(), "nvtcp-resv");
      } catch (const std::system_error& e) {
        // No thread (the process is out of them): the command fails with Internal Error
        // rather than the reactor with an exception; the next change tries again.
        log::error("reservations '{}': cannot start the writer thread: {}", path_, e.what());
        attempted_ticket_ = requested_ticket_;
        durable_cv_.notify_all();
      }
    }
  }
  persist_cv_.notify_one();
}

bool Reservations::written(uint64_t ticket, bool& durable) {
  std::lock_guard lk(persist_mu_);
  if (ticket != 0 && attempted_ticket_ < ticket) return false;
  durable = ticket == 0 || durable_ticket_ >= ticket;
  return true;
}

bool Reservations::wait_durable(uint64_t ticket) {
  if (ticket == 0) return true;
  std::unique_lock lk(persist_mu_);
  durable_cv_.wait(lk, [&] { return attempted_ticket_ >= ticket; });
  // A later state that reached the disk includes this one's change (or what replaced it).
  return durable_ticket_ >= ticket;
}

// One writer per namespace: it waits for a ticket newer than the last it wrote, takes the
// latest state under mu_ (a copy, bounded by max_registrants_), lets go of mu_, and writes.
// Every ticket issued before the copy is covered by that one write.
void Reservations::writer_loop() {
  std::unique_lock lk(persist_mu_);
  for (;;) {
    persist_cv_.wait(lk, [&] { return stopping_ || requested_ticket_ > attempted_ticket_; });
    if (requested_ticket_ <= attempted_ticket_) return;  // stopping, and nothing left to write
    const std::function<void()> hook = before_write_hook_;
    lk.unlock();
    Snapshot s;
    {
      std::lock_guard state(mu_);
      s.ticket = state_ticket_;
      s.ptpl = ptpl_;
      s.generation = generation_;
      s.type = type_;
      s.holder = holder_;
      s.registrants = registrants_;
    }
    if (hook) hook();
    const std::string err = write_state(s);
    if (err.empty()) persist_writes_.fetch_add(1, std::memory_order_relaxed);
    else log::error("reservations: {}", err);
    lk.lock();
    attempted_ticket_ = std::max(attempted_ticket_, s.ticket);
    if (err.empty()) durable_ticket_ = std::max(durable_ticket_, s.ticket);
    durable_cv_.notify_all();
  }
}

std::string Reservations::write_state(const Snapshot& s) const {
  if (!s.ptpl) {
    // Persistence off: the file goes, so the next start does not restore a stale state.
    if (::unlink(path_.c_str()) != 0 && errno != ENOENT)
      return fmt::format("cannot remove '{}': {}", path_, strerror(errno));
    return sync_directory(path_);
  }
  nlohmann::json j;
  j["version"] = 1;
  j["generation"] = s.generation;
  j["type"] = uint8_t(s.type);
  j["holder"] = hex_of(s.holder);
  auto& regs = j["registrants"] = nlohmann::json::array();
  for (const auto& r : s.registrants) regs.push_back({{"host", hex_of(r.host)}, {"key", r.key}});
  const std::string text = j.dump(1) + "\n", tmp = path_ + ".tmp";
  // The temporary name is predictable, so whatever sits there (a file a crash left, or a
  // symlink someone planted) is removed first (unlink removes a link, never its target) and
  // the file is created with O_EXCL|O_NOFOLLOW: if anything appears in between, the open
  // fails instead of writing through it.
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT)
    return fmt::format("cannot remove the stale '{}': {}", tmp, strerror(errno));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fmt::format("cannot create '{}': {}", tmp, strerror(errno));
  const bool written = write_all(fd, text) && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!written) {
    ::unlink(tmp.c_str());
    return fmt::format("cannot write '{}': {}", tmp, strerror(saved));
  }
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return fmt::format("cannot rename '{}' to '{}': {}", tmp, path_, strerror(e));
  }
  return sync_directory(path_);
}

std::string Reservations::load() {
  if (path_.empty()) return {};
  // From here on every refusal turns persistence off for this namespace (and leaves the
  // file alone for the operator to look at); the rest of the target starts as usual.
  auto refuse = [this](std::string why) {
    std::string msg = fmt::format("'{}': {}; persistence through power loss is off for this namespace", path_, why);
    path_.clear();
    return msg;
  };
  // O_NOFOLLOW: a symlink is refused, not followed; O_NONBLOCK: a FIFO does not block the
  // start waiting for a writer; then fstat decides (regular files only).
  const int fd = ::open(path_.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return {};  // never persisted, or persistence turned off
    if (errno == ELOOP) return refuse("a symbolic link");
    return refuse(fmt::format("cannot open: {}", strerror(errno)));
  }
  struct stat sb{};
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    return refuse("not a regular file");
  }
  const uint64_t cap = max_state_bytes(max_registrants_);
  if (uint64_t(sb.st_size) > cap) {
    ::close(fd);
    return refuse(fmt::format("{} bytes, more than the {} a state of at most {} registrants takes", sb.st_size, cap,
                              max_registrants_));
  }
  // Read at most cap + 1 bytes, whatever fstat said (the file may grow meanwhile).
  std::string text(size_t(cap) + 1, '\0');
  size_t got = 0;
  for (;;) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return refuse(fmt::format("cannot read: {}", strerror(e)));
    }
    if (n == 0) break;
    got += size_t(n);
    if (got == text.size()) break;
  }
  ::close(fd);
  if (got > cap) return refuse(fmt::format("more than {} bytes", cap));
  text.resize(got);

  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return refuse("not a reservation state (JSON object)");
  auto unsigned_at = [&](const char* key, uint64_t max, uint64_t& out) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_number_unsigned() || it->get<uint64_t>() > max) return false;
    out = it->get<uint64_t>();
    return true;
  };
  uint64_t version = 0, type = 0, generation = 0;
  if (!unsigned_at("version", 1, version) || version != 1) return refuse("unknown version");
  if (!unsigned_at("type", 6, type)) return refuse("bad reservation type");
  if (!unsigned_at("generation", UINT32_MAX, generation)) return refuse("bad generation");
  HostId holder{};
  if (!j.contains("holder") || !host_of(j["holder"], holder)) return refuse("bad holder");
  const auto regs = j.find("registrants");
  if (regs == j.end() || !regs->is_array()) return refuse("no registrant list");
  if (regs->size() > max_registrants_)
    return refuse(fmt::format("{} registrants, more than max_registrants_per_namespace ({})", regs->size(),
                              max_registrants_));
  std::vector<Registrant> loaded;
  loaded.reserve(regs->size());
  for (const auto& r : *regs) {
    Registrant reg{};
    if (!r.is_object() || !r.contains("host") || !host_of(r["host"], reg.host)) return refuse("bad registrant host");
    if (!r.contains("key") || !r["key"].is_number_unsigned()) return refuse("bad registrant key");
    reg.key = r["key"].get<uint64_t>();
    loaded.push_back(reg);
  }
  // One registration per host; a holder that is a registrant: what this code writes.
  std::vector<HostId> hosts;
  hosts.reserve(loaded.size());
  for (const auto& r : loaded) hosts.push_back(r.host);
  std::sort(hosts.begin(), hosts.end());
  if (std::adjacent_find(hosts.begin(), hosts.end()) != hosts.end()) return refuse("a host registered twice");
  const auto t = ReservationType(type);
  if (t != ReservationType::None) {
    if (all_registrants(t) ? loaded.empty() : !std::binary_search(hosts.begin(), hosts.end(), holder))
      return refuse("a reservation whose holder is not registered");
  }
  std::lock_guard lk(mu_);
  registrants_ = std::move(loaded);
  generation_ = uint32_t(generation);
  ptpl_ = true;
  if (valid_type(type)) set_reservation(t, holder);
  version_.fetch_add(1, std::memory_order_release);
  log::info("reservations restored from '{}': {} registrant(s), type {}", path_, registrants_.size(), type);
  return {};
}

}  // namespace nvtcp::target

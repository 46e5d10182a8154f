#include "target/reservations.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/log.hpp"

namespace nvtcp::target {

using wire::ReservationNotice;
using wire::ReservationType;
using wire::Status;
namespace sc = wire::sc;

namespace {

std::string hex_of(const Reservations::HostId& h) {
  std::string s;
  for (uint8_t b : h) s += fmt::format("{:02x}", b);
  return s;
}

bool host_of(const std::string& s, Reservations::HostId& h) {
  if (s.size() != 32) return false;
  for (size_t i = 0; i < 16; ++i) {
    unsigned v = 0;
    if (std::sscanf(s.c_str() + 2 * i, "%2x", &v) != 1) return false;
    h[i] = uint8_t(v);
  }
  return true;
}

bool valid_type(uint8_t t) { return t >= 1 && t <= 6; }

}  // namespace

Reservations::Reservations(std::string persist_path) : path_(std::move(persist_path)) {}

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

bool Reservations::all_registrants_type() const {
  return type_ == ReservationType::WriteExclusiveAllRegistrants ||
         type_ == ReservationType::ExclusiveAccessAllRegistrants;
}

// With an "all registrants" type every registrant holds the reservation.
bool Reservations::is_holder(const HostId& host) const {
  if (type_ == ReservationType::None) return false;
  if (all_registrants_type()) return find(host.data()) != nullptr;
  return holder_ == host;
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
  const HostId leaving = registrants_[index].host;
  const bool was_holder = is_holder(leaving);
  const ReservationType t = type_;
  registrants_.erase(registrants_.begin() + long(index));
  if (!was_holder) return;
  if (t == ReservationType::WriteExclusiveAllRegistrants || t == ReservationType::ExclusiveAccessAllRegistrants) {
    if (registrants_.empty()) clear_reservation();  // the last holder left
    return;
  }
  clear_reservation();
  if (t == ReservationType::WriteExclusiveRegistrantsOnly || t == ReservationType::ExclusiveAccessRegistrantsOnly)
    released_notices(by, notices);
}

bool Reservations::preempt_key(uint64_t key, const HostId& by, std::vector<Notice>& notices) {
  bool any = false;
  for (size_t i = 0; i < registrants_.size();) {
    if (registrants_[i].key != key || registrants_[i].host == by) {
      ++i;
      continue;
    }
    const HostId gone = registrants_[i].host;
    unregister(i, by, notices);
    notices.push_back({gone, ReservationNotice::RegistrationPreempted});
    any = true;
  }
  return any;
}

Status Reservations::do_register(const HostId& host, uint32_t cdw10, const wire::ReservationRegisterData& d,
                                 std::vector<Notice>& notices) {
  const uint32_t action = cdw10 & 0x7, cptpl = cdw10 >> 30;
  const bool iekey = cdw10 & wire::kResvIgnoreExistingKey;
  if (action > uint32_t(wire::RegisterAction::Replace) || cptpl == 1 ||
      (cptpl == wire::kCptplOn && !ptpl_capable()))
    return sc::InvalidField;
  std::lock_guard lk(mu_);
  Registrant* me = find(host);
  switch (static_cast<wire::RegisterAction>(action)) {
    case wire::RegisterAction::Register:
      if (me) {
        if (me->key != d.nrkey) return sc::ReservationConflict;  // registered with another key
      } else {
        registrants_.push_back({host, d.nrkey});
      }
      break;
    case wire::RegisterAction::Unregister:
      if (!me || (!iekey && me->key != d.crkey)) return sc::ReservationConflict;
      unregister(size_t(me - registrants_.data()), host, notices);
      break;
    case wire::RegisterAction::Replace:
      if (!me || (!iekey && me->key != d.crkey)) return sc::ReservationConflict;
      me->key = d.nrkey;
      break;
  }
  if (cptpl == wire::kCptplOn) ptpl_ = true;
  if (cptpl == wire::kCptplOff) ptpl_ = false;
  ++generation_;
  if (cptpl == wire::kCptplOff && ptpl_capable()) ::unlink(path_.c_str());
  if (std::string err = commit(); !err.empty()) {
    log::error("reservations: {}", err);
    return sc::InternalError;
  }
  return sc::Success;
}

Status Reservations::acquire(const HostId& host, uint32_t cdw10, const wire::ReservationAcquireData& d,
                             std::vector<Notice>& notices) {
  const uint32_t action = cdw10 & 0x7;
  const uint8_t rtype = uint8_t(cdw10 >> 8);
  if ((cdw10 & wire::kResvIgnoreExistingKey) || !valid_type(rtype) ||
      action > uint32_t(wire::AcquireAction::PreemptAndAbort))
    return sc::InvalidField;
  const auto want = ReservationType(rtype);
  std::lock_guard lk(mu_);
  Registrant* me = find(host);
  if (!me || me->key != d.crkey) return sc::ReservationConflict;
  if (action == uint32_t(wire::AcquireAction::Acquire)) {
    if (type_ == ReservationType::None) {
      set_reservation(want, host);
    } else if (!is_holder(host) || type_ != want) {
      return sc::ReservationConflict;
    }
    if (std::string err = commit(); !err.empty()) {
      log::error("reservations: {}", err);
      return sc::InternalError;
    }
    return sc::Success;
  }
  // Preempt, and preempt and abort (the commands the preempted hosts have in flight were
  // admitted before; they are not aborted, and new ones are refused).
  const ReservationType was = type_;
  if (type_ == ReservationType::None) {
    if (!preempt_key(d.prkey, host, notices)) return sc::ReservationConflict;
  } else if (all_registrants_type()) {
    if (d.prkey == 0) {
      set_reservation(want, host);  // the new holder first, so no one else gains access
      for (size_t i = 0; i < registrants_.size();) {
        if (registrants_[i].host == host) {
          ++i;
          continue;
        }
        notices.push_back({registrants_[i].host, ReservationNotice::RegistrationPreempted});
        registrants_.erase(registrants_.begin() + long(i));
      }
    } else if (!preempt_key(d.prkey, host, notices)) {
      return sc::ReservationConflict;
    }
  } else if (holder_ == host) {
    set_reservation(want, host);  // a holder changes its type
    if (was != want) released_notices(host, notices);
  } else if (const Registrant* h = find(holder_.data()); h && d.prkey == h->key) {
    set_reservation(want, host);
    preempt_key(d.prkey, host, notices);
    if (was != want) released_notices(host, notices);
  } else if (d.prkey != 0) {
    if (!preempt_key(d.prkey, host, notices)) return sc::ReservationConflict;
  } else {
    return sc::InvalidField;
  }
  ++generation_;
  if (std::string err = commit(); !err.empty()) {
    log::error("reservations: {}", err);
    return sc::InternalError;
  }
  return sc::Success;
}

Status Reservations::release(const HostId& host, uint32_t cdw10, const wire::ReservationReleaseData& d,
                             std::vector<Notice>& notices) {
  const uint32_t action = cdw10 & 0x7;
  const uint8_t rtype = uint8_t(cdw10 >> 8);
  if ((cdw10 & wire::kResvIgnoreExistingKey) || action > uint32_t(wire::ReleaseAction::Clear))
    return sc::InvalidField;
  std::lock_guard lk(mu_);
  Registrant* me = find(host);
  if (!me || me->key != d.crkey) return sc::ReservationConflict;
  if (action == uint32_t(wire::ReleaseAction::Clear)) {
    for (const auto& r : registrants_)
      if (r.host != host) notices.push_back({r.host, ReservationNotice::ReservationPreempted});
    registrants_.clear();
    clear_reservation();
    ++generation_;
  } else {
    if (!is_holder(host)) return sc::Success;  // nothing of this host's to release
    if (uint8_t(type_) != rtype) return sc::InvalidField;
    const ReservationType was = type_;
    clear_reservation();
    if (was != ReservationType::WriteExclusive && was != ReservationType::ExclusiveAccess)
      released_notices(host, notices);
  }
  if (std::string err = commit(); !err.empty()) {
    log::error("reservations: {}", err);
    return sc::InternalError;
  }
  return sc::Success;
}

Status Reservations::report(bool extended, uint8_t* buf, uint32_t len) const {
  if (!extended) return sc::HostIdInconsistentFormat;
  if (len < sizeof(wire::ReservationStatusExtHeader)) return sc::InvalidField;
  std::memset(buf, 0, len);
  std::lock_guard lk(mu_);
  auto* h = reinterpret_cast<wire::ReservationStatusExtHeader*>(buf);
  h->gen = generation_;
  h->rtype = uint8_t(type_);
  h->regctl = uint16_t(registrants_.size());
  h->ptpls = ptpl_ ? 1 : 0;
  uint32_t off = sizeof(*h);
  for (const auto& r : registrants_) {
    if (off + sizeof(wire::RegisteredControllerExt) > len) break;  // the count says how many exist
    auto* e = reinterpret_cast<wire::RegisteredControllerExt*>(buf + off);
    e->cntlid = 0xFFFF;
    e->rcsts = is_holder(r.host) ? 1 : 0;
    e->rkey = r.key;
    std::memcpy(e->hostid, r.host.data(), 16);
    off += sizeof(*e);
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
  HostId h;
  std::memcpy(h.data(), host, 16);
  if (is_holder(h)) return true;
  const bool registered = find(host) != nullptr;
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
  if (!ptpl_capable()) {
    err = "persistence through power loss needs a file namespace";
    return false;
  }
  std::lock_guard lk(mu_);
  ptpl_ = on;
  if (!on) {
    ::unlink(path_.c_str());
    return true;
  }
  err = persist();
  return err.empty();
}

std::string Reservations::commit() {
  // Connections' cached access decisions (AccessCache) are for the version they saw.
  version_.fetch_add(1, std::memory_order_release);
  return persist();
}

std::string Reservations::persist() const {
  if (!ptpl_ || path_.empty()) return {};
  nlohmann::json j;
  j["version"] = 1;
  j["generation"] = generation_;
  j["type"] = uint8_t(type_);
  j["holder"] = hex_of(holder_);
  auto& regs = j["registrants"] = nlohmann::json::array();
  for (const auto& r : registrants_) regs.push_back({{"host", hex_of(r.host)}, {"key", r.key}});
  const std::string text = j.dump(1) + "\n", tmp = path_ + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return fmt::format("cannot write '{}': {}", tmp, strerror(errno));
  const bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), path_.c_str()) != 0)
    return fmt::format("cannot write '{}': {}", path_, strerror(errno));
  const std::string dir = path_.find('/') == std::string::npos ? "." : path_.substr(0, path_.rfind('/') + 1);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

std::string Reservations::load() {
  if (path_.empty()) return {};
  std::ifstream in(path_);
  if (!in) return {};  // never persisted, or persistence turned off
  std::lock_guard lk(mu_);
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.at("version").get<int>() != 1) return fmt::format("'{}': unknown version", path_);
    const uint8_t t = j.at("type").get<uint8_t>();
    if (t != 0 && !valid_type(t)) return fmt::format("'{}': reservation type {}", path_, t);
    HostId holder{};
    if (!host_of(j.at("holder").get<std::string>(), holder)) return fmt::format("'{}': bad holder", path_);
    registrants_.clear();
    for (const auto& r : j.at("registrants")) {
      Registrant reg{};
      if (!host_of(r.at("host").get<std::string>(), reg.host)) return fmt::format("'{}': bad host", path_);
      reg.key = r.at("key").get<uint64_t>();
      registrants_.push_back(reg);
    }
    generation_ = j.at("generation").get<uint32_t>();
    ptpl_ = true;
    if (t != 0) set_reservation(ReservationType(t), holder);
    version_.fetch_add(1, std::memory_order_release);
  } catch (const std::exception& e) {
    return fmt::format("'{}': {}", path_, e.what());
  }
  log::info("reservations restored from '{}': {} registrant(s), type {}", path_, registrants_.size(),
            uint8_t(type_));
  return {};
}

}  // namespace nvtcp::target

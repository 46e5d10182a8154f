// SPDX-License-Identifier: Apache-2.0
// Get Log Page's logs (log_pages.hpp), one function each, and the window a read takes.
#include "target/log_pages.hpp"

#include <algorithm>
#include <cstring>

#include "reactor/reactor.hpp"
#include "target/command_queue.hpp"
#include "target/identify.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

namespace {
// A log of one fixed-size structure, zeroed: the page holds it and nothing else.
template <class Log>
Log* fresh_page(std::vector<uint8_t>& page) {
  page.assign(sizeof(Log), 0);
  return reinterpret_cast<Log*>(page.data());
}
}  // namespace

Controller& LogPages::ctrl() const { return *q_.controller(); }

Status LogPages::build(const Sqe& sqe, uint32_t len, Window& w) {
  Controller& c = ctrl();
  const bool discovery = c.subsys_.is_discovery();
  // What a successful read of this log takes away; applied only once the read is known to
  // succeed and its data has a buffer to go in (delivered), never while the log is being built.
  pending_ = {};
  page_.clear();
  Status st;
  switch (static_cast<LogPageId>(sqe.cdw10 & 0xFF)) {
    case LogPageId::SupportedLogPages:
      if (!discovery) supported_log_pages();
      break;
    case LogPageId::Ana:
      if (!discovery && c.subsys_.ana_reporting() && c.port_) ana(sqe);
      break;
    case LogPageId::CommandEffects:
      if (!discovery) st = command_effects(sqe);
      break;
    case LogPageId::Error: error_information(); break;
    case LogPageId::SmartHealth:
      if (!discovery) st = smart_health(sqe);
      break;
    case LogPageId::FirmwareSlot:
      if (!discovery) firmware_slot();
      break;
    case LogPageId::ChangedNamespaces:
      if (discovery) break;
      c.changed_ns_.build(page_);
      pending_.what = Consume::ChangedNamespaces;  // once read, the list starts again (as nvmet)
      break;
    case LogPageId::ReservationNotification:
      if (!discovery) reservation_notification();
      break;
    case LogPageId::Discovery:
      if (discovery) discovery_log();
      break;
  }
  if (!st.ok()) return st;
  return window(sqe, len, w);
}

Status LogPages::window(const Sqe& sqe, uint32_t len, Window& w) {
  if (page_.empty()) return sc::InvalidLogPage;
  // A read that fails takes nothing away: the notice, the changed-namespace list and the
  // masked event stay until a read that succeeds. A notice is read once whatever RAE says
  // (the next read gives the next one); RAE keeps the list and the event's mask.
  const uint64_t offset = (uint64_t(sqe.cdw13) << 32) | sqe.cdw12;
  if (offset >= page_.size() || (offset & 3)) return sc::InvalidField;
  pending_.retain_event = sqe.cdw10 & kLogRetainAsyncEvent;
  pending_.lid = static_cast<LogPageId>(sqe.cdw10 & 0xFF);
  pending_.valid = true;
  // Past the end of the log the host gets zeros.
  const uint32_t copy = uint32_t(std::min<uint64_t>(len, page_.size() - offset));
  w = {page_.data() + offset, copy, len - copy};
  return sc::Success;
}

// (A read that waited for buffer memory runs again and builds the log anew; a read that found
// none fails: either way nothing was lost on the way.)
void LogPages::delivered() {
  if (!pending_.valid) return;
  const Pending p = pending_;
  pending_ = {};
  Controller& c = ctrl();
  if (p.what == Consume::ReservationNotice && !c.resv_notices_.empty()) c.resv_notices_.erase(c.resv_notices_.begin());
  if (p.what == Consume::ChangedNamespaces && !p.retain_event) {
    c.changed_ns_.clear();
  }
  if (!p.retain_event) c.unmask_event_for_log(p.lid);
}

void LogPages::supported_log_pages() {
  Controller& c = ctrl();
  auto* l = fresh_page<SupportedLogPagesLog>(page_);
  for (LogPageId id : {LogPageId::SupportedLogPages, LogPageId::Error, LogPageId::SmartHealth,
                       LogPageId::FirmwareSlot, LogPageId::ChangedNamespaces, LogPageId::CommandEffects,
                       LogPageId::ReservationNotification})
    l->lid[uint8_t(id)] = kLogSupported;
  if (c.subsys_.ana_reporting()) l->lid[uint8_t(LogPageId::Ana)] = kLogSupported;
}

void LogPages::ana(const Sqe& sqe) {
  Controller& c = ctrl();
  // Each group that has a namespace, ascending, with its state through this controller's
  // port and (unless RGO) its NSIDs; CHGCNT counts that port's changes.
  const bool groups_only = sqe.cdw10 & kLogAnaReturnGroupsOnly;
  std::vector<Namespace*> nss = c.subsys_.namespaces();
  std::erase_if(nss, [&c](const Namespace* ns) { return !c.find_namespace(ns->nsid); });  // masked from this host
  // The groups of the namespaces this host sees: a group of masked namespaces only would tell
  // it they exist.
  std::vector<uint32_t> groups;
  for (const Namespace* ns : nss) groups.push_back(ns->anagrpid.load(std::memory_order_relaxed));
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  const uint64_t chgcnt = c.port_->change_count.load(std::memory_order_relaxed);
  page_.assign(sizeof(AnaLogHeader) + groups.size() * sizeof(AnaGroupDescriptor) +
                   (groups_only ? 0 : nss.size() * sizeof(uint32_t)),
               0);
  AnaLogHeader h{};
  h.chgcnt = chgcnt;
  h.ngrps = uint16_t(groups.size());
  std::memcpy(page_.data(), &h, sizeof(h));
  size_t off = sizeof(h);
  for (uint32_t g : groups) {
    AnaGroupDescriptor d{};
    d.anagrpid = g;
    d.chgcnt = chgcnt;
    d.state = uint8_t(c.port_->state(g));
    const size_t desc_off = off;
    off += sizeof(d);
    if (!groups_only)
      for (const Namespace* ns : nss)
        if (ns->anagrpid == g) {
          std::memcpy(page_.data() + off, &ns->nsid, sizeof(uint32_t));
          off += sizeof(uint32_t);
          ++d.nnsids;
        }
    std::memcpy(page_.data() + desc_off, &d, sizeof(d));
  }
}

Status LogPages::command_effects(const Sqe& sqe) {
  if ((sqe.cdw14 >> 24) != kCsiNvm) {
    return sc::InvalidField;
  }
  auto* e = fresh_page<CommandEffectsLog>(page_);
  for (AdminOpcode op : {AdminOpcode::GetLogPage, AdminOpcode::Identify, AdminOpcode::Abort,
                         AdminOpcode::SetFeatures, AdminOpcode::GetFeatures, AdminOpcode::AsyncEventRequest,
                         AdminOpcode::KeepAlive})
    e->admin[uint8_t(op)] = kEffectsCsupp;
  e->io[uint8_t(IoOpcode::Flush)] = kEffectsCsupp;
  e->io[uint8_t(IoOpcode::Read)] = kEffectsCsupp;
  e->io[uint8_t(IoOpcode::Verify)] = kEffectsCsupp;
  e->io[uint8_t(IoOpcode::Compare)] = kEffectsCsupp;
  for (IoOpcode op : {IoOpcode::ReservationRegister, IoOpcode::ReservationReport, IoOpcode::ReservationAcquire,
                      IoOpcode::ReservationRelease})
    e->io[uint8_t(op)] = kEffectsCsupp;
  // Deallocated blocks read as zeros (DLFEAT), so Dataset Management changes content too.
  for (IoOpcode op : {IoOpcode::Write, IoOpcode::WriteZeroes, IoOpcode::DatasetManagement, IoOpcode::Copy})
    e->io[uint8_t(op)] = kEffectsCsupp | kEffectsLbcc;
  return sc::Success;
}

void LogPages::error_information() {
  Controller& c = ctrl();
  // Newest first; slots never used are zero (error count 0: an invalid entry).
  page_.assign(Controller::kErrorLogEntries * sizeof(ErrorLogEntry), 0);
  std::lock_guard lk(c.errors_mu_);
  const uint64_t n = std::min<uint64_t>(c.error_count_, Controller::kErrorLogEntries);
  for (uint64_t i = 0; i < n; ++i)
    std::memcpy(page_.data() + i * sizeof(ErrorLogEntry),
                &c.errors_[(c.error_count_ - 1 - i) % Controller::kErrorLogEntries], sizeof(ErrorLogEntry));
}

Status LogPages::smart_health(const Sqe& sqe) {
  Controller& c = ctrl();
  // Controller-wide for NSID 0 and FFFFFFFFh, else one namespace's (LPA bit 0).
  const Namespace* ns = nullptr;
  if (sqe.nsid != 0 && sqe.nsid != kNsidAll) {
    ns = c.find_namespace(sqe.nsid);
    if (!ns) {
      return sc::InvalidNamespace;
    }
  }
  auto* s = fresh_page<SmartLog>(page_);
  const QueueStats::Totals t = c.io_queues.totals(ns);
  const uint64_t reads = t.reads, writes = t.writes, rbytes = t.read_bytes, wbytes = t.write_bytes;
  s->temperature = 0;  // a software device has no temperature sensor
  s->avail_spare = 100;
  s->spare_thresh = 10;
  // Data units are thousands of 512-byte units, rounded up.
  put_u128(s->data_units_read, (rbytes / 512 + 999) / 1000);
  put_u128(s->data_units_written, (wbytes / 512 + 999) / 1000);
  put_u128(s->host_reads, reads);
  put_u128(s->host_writes, writes);
  put_u128(s->power_cycles, 1);
  uint64_t errors = 0;
  {
    std::lock_guard lk(c.errors_mu_);
    errors = c.error_count_;
  }
  put_u128(s->num_err_log_entries, errors);
  put_u128(s->power_on_hours, (reactor::monotonic_ns() - c.target_.start_ns) / 3600000000000ull);
  return sc::Success;
}

void LogPages::firmware_slot() {
  auto* f = fresh_page<FirmwareSlotLog>(page_);
  f->afi = 1;
  put_padded(f->frs[0], 8, kFirmwareRevision);
}

void LogPages::reservation_notification() {
  Controller& c = ctrl();
  // One notice per read, the oldest; an empty log when none is queued.
  page_.assign(sizeof(ReservationNotificationLog), 0);
  if (!c.resv_notices_.empty()) {
    ReservationNotificationLog n = c.resv_notices_.front();
    n.available = uint8_t(std::min<size_t>(c.resv_notices_.size() - 1, 0xFF));
    std::memcpy(page_.data(), &n, sizeof(n));
    pending_.what = Consume::ReservationNotice;
  }
}

void LogPages::discovery_log() {
  const uint32_t n = discovery_entries(nullptr, 0);
  page_.assign(n, 0);
  discovery_entries(page_.data(), n);
}

uint32_t LogPages::discovery_entries(uint8_t* buf, uint32_t cap) {
  const Controller& c = ctrl();
  // Entries: every subsystem this host may use, on every listener, then this discovery
  // subsystem itself on every listener (subtype 3, "current discovery subsystem").
  std::vector<std::pair<const Subsystem*, const Listener*>> entries;
  const auto subsystems = c.target_.subsystems();
  const auto listeners = c.target_.listeners();
  for (const auto& s : subsystems) {
    if (!s->hosts().allowed(c.hostnqn_)) continue;
    // Only the ports this host may use: TLS ports for a host with a PSK, plain ones for one
    // without (a TLS listener admits PSK holders only).
    for (const auto& l : listeners)
      if (s->listeners().reachable_through(l.portid) && s->hosts().channel_allowed(c.hostnqn_, l.tls_required))
        entries.emplace_back(s.get(), &l);
  }
  for (const auto& l : listeners) entries.emplace_back(c.target_.discovery.get(), &l);
  uint32_t total = uint32_t(sizeof(DiscoveryLogHeader) + entries.size() * sizeof(DiscoveryLogEntry));
  if (!buf || cap < total) return total;
  auto* h = reinterpret_cast<DiscoveryLogHeader*>(buf);
  h->genctr = c.target_.genctr.load();
  h->numrec = entries.size();
  h->recfmt = 0;
  auto* e = reinterpret_cast<DiscoveryLogEntry*>(buf + sizeof(DiscoveryLogHeader));
  for (const auto& [s, l] : entries) {
    // A wildcard listener cannot be dialled as such: the host is told the address it reached
    // this discovery controller on, as the Linux target does.
    const bool substitute = l->wildcard && !c.local_address_.empty();
    const std::string& traddr = substitute ? c.local_address_ : l->address;
    const bool ipv6 = substitute ? c.local_address_.find(':') != std::string::npos : l->ipv6;
    e->trtype = kTrtypeTcp;
    e->adrfam = ipv6 ? kAdrfamIpv6 : kAdrfamIpv4;
    e->subtype = s->is_discovery() ? kSubtypeCurrentDiscovery : kSubtypeNvme;
    // Secure channel "required" on a TLS listener; else "not specified", as Linux nvmet says
    // (libnvme turns TLS on for an entry that says "required" or "not required").
    e->treq = kTreqDisableSqFlow | (l->tls_required ? kTreqRequired : 0);
    e->portid = l->portid;
    e->cntlid = kDynamicCntlid;
    e->asqsz = 32;
    put_padded(e->trsvcid, sizeof(e->trsvcid), std::to_string(l->port));
    put_string(e->subnqn, sizeof(e->subnqn), s->nqn());
    put_padded(e->traddr, sizeof(e->traddr), traddr);
    e->eflags = 0;  // no duplicate-returned-information or explicit-persistent-connection flags, as nvmet
    e->tsas[0] = l->tls_required ? kTcpSectypeTls13 : kTcpSectypeNone;
    ++e;
  }
  return total;
}

}  // namespace nvtcp::target

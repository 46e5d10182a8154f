// SPDX-License-Identifier: Apache-2.0
// Asynchronous events on the admin thread: the Asynchronous Event Requests kept outstanding, and
// what the run loop does about each event between reactor turns.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "host/controller_state.hpp"
#include "host/namespace_scan.hpp"
#include "nvtcp/log_pages.hpp"
#include "util/log.hpp"
#include "wire/commands.hpp"
#include "wire/features.hpp"

namespace nvtcp::host {

using namespace nvtcp::wire;

namespace {
const char* async_event_type_name(uint8_t type) {
  switch (AsyncEventType(type)) {
    case AsyncEventType::Error: return "error";
    case AsyncEventType::SmartHealth: return "SMART / health";
    case AsyncEventType::Notice: return "notice";
    case AsyncEventType::IoCommandSpecific: return "I/O command set specific";
  }
  return type == 7 ? "vendor specific" : "reserved type";
}
}  // namespace

bool Controller::State::start_events(HostError& err) {
  ev = Events{};
  if (discovery) return true;
  const auto* id = reinterpret_cast<const IdentifyController*>(ident_now);
  // ANA change notices only from a controller that reports ANA (CMIC bit 3) and announces them.
  const uint32_t ana_notices = (id->cmic & kCmicAna) ? (id->oaes & kAecAnaChange) : 0;
  const uint32_t notices = (id->oaes & kAecNamespaceAttribute) | ana_notices;
  uint32_t aec = notices | kAecSmartWarningsDefined;
  Completion c = admin_sync(cmd::set_features(kFeatureAsyncEventConfig, aec), nullptr, 0, false);
  if (!c.status.ok() && admin_up() && notices) {
    aec = notices;  // a controller may take only what OAES lists
    c = admin_sync(cmd::set_features(kFeatureAsyncEventConfig, aec), nullptr, 0, false);
  }
  if (!admin_up()) {
    err = HostError::make(HostError::Kind::Transport, "admin queue lost while enabling asynchronous events");
    return false;
  }
  if (!c.status.ok())
    log::warn("{}: Set Features (Asynchronous Event Configuration {:#x}): {}; namespace changes will be seen "
              "only at a reconnect or rescan_namespaces()",
              trid.subnqn, aec, status_name(c.status));
  else if (!notices)
    log::info("{}: the controller sends no namespace attribute notices (OAES {:#x}); namespace changes will be "
              "seen only at a reconnect or rescan_namespaces()",
              trid.subnqn, uint32_t(id->oaes));
  // As many as AERL allows (several events can then be reported at once), but never more
  // than an eighth of the admin queue: the rest is for commands. Linux keeps one.
  ev.aers_wanted = std::max<uint32_t>(1, std::min<uint32_t>(id->aerl + 1u, admin->depth() / 8));
  submit_aers();
  return true;
}

void Controller::State::submit_aers() {
  while (ev.aers_outstanding < ev.aers_wanted && admin_up()) {
    if (!admin->submit(cmd::async_event_request(), nullptr, 0, false, on_aer, this).ok()) break;
    ++ev.aers_outstanding;
  }
}

void Controller::State::aer_completed(const Completion& c) {
  if (ev.aers_outstanding) --ev.aers_outstanding;
  if (!c.status.ok()) {
    // A path error: the connection is going (the next association asks again). Any other
    // status would only come back again: not asking again is what the Linux host does too,
    // so this request is not replaced when the others are.
    if (c.status != sc::TransportError) {
      if (ev.aers_wanted) --ev.aers_wanted;
      log::warn("{}: Asynchronous Event Request failed: {}; {} left outstanding", trid.subnqn,
                status_name(c.status), ev.aers_outstanding);
    }
    return;
  }
  // Not asked again here: service_events() does once the event is handled. A controller
  // answering every request at once would otherwise fill a backlog as fast as the network
  // allows, and the admin thread would spend itself on it.
  const uint8_t type = c.dw0 & 0x7, info = (c.dw0 >> 8) & 0xFF;
  const uint8_t lid = (c.dw0 >> 16) & 0xFF;
  if (type == uint8_t(AsyncEventType::Notice) && info == kAsyncNoticeNamespaceChanged) {
    ev.ns_changed = true;
  } else if (type == uint8_t(AsyncEventType::Notice) && info == kAsyncNoticeAnaChange) {
    ev.ana_changed = true;
  } else if (type == uint8_t(AsyncEventType::IoCommandSpecific) &&
             lid == uint8_t(LogPageId::ReservationNotification)) {
    // The notices are the application's (a cluster manager reads them with get_log_page);
    // reading them here would lose them. The type stays masked until it does.
    log::info("{}: reservation notice waiting in log page 0x80", trid.subnqn);
  } else if (ev.to_clear.push(c.dw0) == detail::EventBacklog::Push::Dropped &&
             detail::is_power_of_two(ev.to_clear.dropped())) {
    log::warn("{}: {} asynchronous events dropped: {} different ones already wait for their log page to be read",
              trid.subnqn, ev.to_clear.dropped(), ev.to_clear.size());
  }
}

void Controller::State::clear_event(uint32_t dw0) {
  const uint8_t type = dw0 & 0x7, info = (dw0 >> 8) & 0xFF, lid = (dw0 >> 16) & 0xFF;
  alignas(8) uint8_t buf[sizeof(SmartLog)] = {};
  const uint32_t len = lid == uint8_t(LogPageId::SmartHealth) ? sizeof(SmartLog) : sizeof(ErrorLogEntry);
  Completion c = admin_sync(cmd::get_log_page(lid, kNsidAll, len, 0, false), buf, len, false);
  std::string what;
  if (!c.status.ok()) {
    what = fmt::format("; reading log page {:#04x}: {}", lid, status_name(c.status));
  } else if (lid == uint8_t(LogPageId::Error)) {
    const auto* e = reinterpret_cast<const ErrorLogEntry*>(buf);  // the newest: the log lists newest first
    what = fmt::format(": error {} on queue {} command {}: {} (namespace {}, LBA {})", e->error_count, e->sqid,
                       e->cid, status_name(Status::from_cqe(e->status)), e->nsid, e->lba);
  } else if (lid == uint8_t(LogPageId::SmartHealth)) {
    const auto* h = reinterpret_cast<const SmartLog*>(buf);
    what = fmt::format(": critical warning {:#04x}, temperature {} K, spare {}%", h->critical_warning,
                       uint16_t(h->temperature), h->avail_spare);
  }
  // The log page is read every time (that is what lets the controller report the event again);
  // the line is written only as EventLogLimiter allows, so a flood costs a few lines.
  const uint64_t reports = ev.log_limit.note(dw0, now_ns());
  if (reports == 0) return;
  const std::string times =
      reports > 1 ? fmt::format(" (reported {} times; logged again at {})", reports, reports * 2) : std::string();
  log::warn("{}: asynchronous event {:#010x} ({}, information {:#04x}, log page {:#04x}){}{}", trid.subnqn, dw0,
            async_event_type_name(type), info, lid, what, times);
}

bool Controller::State::rescan_after_notice(HostError& err) {
  std::vector<uint8_t> log(kChangedNamespacesMax * 4);
  const uint32_t len = uint32_t(log.size());
  Completion c = admin_sync(cmd::get_log_page(uint8_t(LogPageId::ChangedNamespaces), kNsidAll, len, 0, false), log.data(),
                            len, false);
  bool all = true;
  std::vector<uint32_t> listed;
  if (c.status.ok()) listed = detail::parse_changed_namespaces(log.data(), len, all);
  else if (admin_up()) log::warn("{}: reading the changed-namespace log: {}", trid.subnqn, status_name(c.status));
  all = all || listed.empty();
  // One line per notice, as EventLogLimiter allows: a controller sending notice after notice
  // costs a rescan each (at the host's pace) but not a line each.
  constexpr uint32_t kNotice = uint32_t(AsyncEventType::Notice) | (uint32_t(kAsyncNoticeNamespaceChanged) << 8) |
                               (uint32_t(LogPageId::ChangedNamespaces) << 16);
  if (const uint64_t reports = ev.log_limit.note(kNotice, now_ns()))
    log::info("{}: namespace attribute notice{}: rescanning {}", trid.subnqn,
              reports > 1 ? fmt::format(" ({} so far)", reports) : std::string(),
              all ? std::string("every namespace") : fmt::format("namespace(s) {}", fmt::join(listed, ", ")));
  return scan_namespaces(all ? nullptr : &listed, true, err);
}

void Controller::State::service_events() {
  while (!stop.load(std::memory_order_relaxed) && admin_up()) {
    HostError e;
    uint32_t dw0 = 0;
    if (ev.to_clear.pop(dw0)) {
      clear_event(dw0);
    } else if (ev.ana_changed) {
      ev.ana_changed = false;
      if (!refresh_ana(e)) log::warn("{}: reading the ANA log: {}", trid.subnqn, e.message);
    } else if (ev.ns_changed) {
      ev.ns_changed = false;
      if (!rescan_after_notice(e)) log::warn("{}: namespace rescan failed: {}", trid.subnqn, e.message);
    } else if (!rescan_waiters.empty()) {
      auto waiters = std::move(rescan_waiters);  // callers from now on wait for the next scan
      rescan_waiters.clear();
      const bool ok = scan_namespaces(nullptr, true, e);
      for (auto& w : waiters) w->finish(ok ? HostError() : e);
    } else {
      // Every event reported so far is handled: only now ask for the next ones.
      submit_aers();
      return;
    }
  }
}

bool Controller::State::refresh_ana(HostError& err) {
  const auto* id = reinterpret_cast<const IdentifyController*>(ident_now);
  if (discovery || !(id->cmic & kCmicAna)) return true;
  // Header, one descriptor per group and one NSID per namespace, as many as the controller
  // says it may have; at most 64 KiB (the admin queue's in-flight data stays small).
  const uint64_t want = sizeof(AnaLogHeader) + uint64_t(std::max(id->anagrpmax, id->nanagrpid)) *
                                                   sizeof(AnaGroupDescriptor) + uint64_t(id->nn) * 4;
  const uint32_t len = uint32_t(std::clamp<uint64_t>((want + 3) & ~3ull, 4096, 64 << 10));
  std::vector<uint8_t> log(len);
  Completion c = admin_sync(cmd::get_log_page(uint8_t(LogPageId::Ana), kNsidAll, len, 0, false), log.data(), len,
                            false);
  if (!c.status.ok()) {
    if (!admin_up()) {
      err = HostError::make(HostError::Kind::Transport, "admin queue lost while reading log 0Ch");
      return false;
    }
    log::warn("{}: reading the ANA log (0Ch): {}; path states stay as they were", trid.subnqn, status_name(c.status));
    return true;
  }
  std::vector<uint8_t> states;
  uint32_t groups = 0;
  std::string why;
  if (!detail::parse_ana_log(log.data(), len, states, groups, why)) {
    log::warn("{}: {}; path states stay as they were", trid.subnqn, why);
    return true;
  }
  for (uint32_t n = 1; n < states.size(); ++n) {
    const uint8_t before = ana->reported(n) ? uint8_t(ana->state(n)) : 0;
    if (before == states[n] || !states[n] || !before) continue;  // unchanged, or its first report
    log::info("{} {}:{}: namespace {} ANA state {} -> {}", trid.subnqn, trid.traddr, trid.trsvcid, n,
              ana_state_name(AnaState(before)), ana_state_name(AnaState(states[n])));
  }
  ana->publish(states);
  return true;
}

}  // namespace nvtcp::host

// SPDX-License-Identifier: Apache-2.0
#include "target/controller.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"
#include "reactor/reactor.hpp"
#include "util/log.hpp"
#include "wire/fabrics.hpp"
#include "wire/features.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

namespace {
constexpr uint8_t kCapTimeout500ms = 15;  // CAP.TO: 7.5 s to become ready

// Whether an enable with this CC can be honoured.
bool cc_supported(uint32_t cc, bool discovery) {
  const uint32_t css = (cc >> 4) & 0x7, mps = (cc >> 7) & 0xF, ams = (cc >> 11) & 0x7;
  const uint32_t iosqes = (cc >> 16) & 0xF, iocqes = (cc >> 20) & 0xF;
  if (css != 0 || mps != 0 || ams != 0) return false;  // CAP: NVM command set, 4 KiB pages, round robin
  // A discovery controller has no I/O queues: some hosts leave the entry sizes 0.
  return discovery || (iosqes == 6 && iocqes == 4);
}
}  // namespace

Controller::Controller(TargetState& target, Subsystem& subsys, uint16_t cntlid, std::string hostnqn,
                       const uint8_t hostid[16], uint32_t kato_ms, const reactor::Clock& clock)
    : io_queues(target.config.max_io_queues, subsys.max_namespaces() + 1),
      target_(target),
      subsys_(subsys),
      subsys_keep_(subsys.weak_from_this().lock()),
      cntlid_(cntlid),
      hostnqn_(std::move(hostnqn)),
      kato_ms_(effective_kato_ms(kato_ms)),
      connect_kato_ms_(kato_ms_),
      clock_(clock) {
  std::memcpy(hostid_, hostid, 16);
  // By NSID, for every namespace the subsystem may come to hold (they come and go live).
  ns_slots_ = subsys.max_namespaces() + 1;
  resv_masks_.reset(new std::atomic<uint32_t>[ns_slots_]);
  for (uint32_t i = 0; i < ns_slots_; ++i) resv_masks_[i].store(0, std::memory_order_relaxed);
  hidden_.reset(new std::atomic<bool>[ns_slots_]);  // set for the namespaces there are as it joins (add_controller)
  for (uint32_t i = 0; i < ns_slots_; ++i) hidden_[i].store(false, std::memory_order_relaxed);
  touch();
}

std::atomic<uint32_t>* Controller::resv_mask(uint32_t nsid) const {
  return find_namespace(nsid) ? &resv_masks_[nsid] : nullptr;
}

Controller::~Controller() = default;

bool Controller::post_abort(uint16_t sqid, uint16_t cid, uint16_t abort_cid) {
  const IoQueueTable::Entry to = io_queues.find(sqid);
  if (!to.queue) return false;
  to.reactor->post([weak = weak_from_this(), sqid, cid, abort_cid, queue = to.queue] {
    auto self = weak.lock();
    if (!self) return;
    const bool aborted = self->io_queues.abort(sqid, queue, cid);
    std::lock_guard admin_lock(self->admin_mu_);
    if (!self->admin_reactor_) return;
    self->admin_reactor_->post([weak, abort_cid, aborted] {
      if (auto c = weak.lock(); c && c->event_sink_) c->event_sink_->abort_done(abort_cid, aborted);
    });
  });
  return true;
}

Status Controller::property_get(uint32_t offset, bool eight, uint64_t& value) {
  switch (offset) {
    case prop::CAP:
      if (!eight) return sc::InvalidField;
      value = prop::make_cap(uint16_t(target_.config.max_queue_depth - 1), kCapTimeout500ms);
      return sc::Success;
    case prop::VS: value = kVersion; break;
    case prop::CC: value = cc_; break;
    case prop::CSTS: value = csts_.load(); break;
    case prop::NSSR: value = 0; break;
    default: return sc::InvalidField;
  }
  return eight ? sc::InvalidField : sc::Success;
}

// CC as the NVMe base specification's controller reset and shutdown rules and the Linux
// target have it: an enable with a CC we cannot honour sets CSTS.CFS instead of RDY; CC.EN
// 1 -> 0 resets (not ready: I/O queues answer Command Sequence Error, new ones may not
// connect); a shutdown notice first makes the namespaces' caches durable (SHST 01b while the
// connection flushes, see PropertySetResult::flush_for_shutdown), then reports SHST 10b with
// RDY clear, and the host must reset before enabling again.
Controller::PropertySetResult Controller::property_set(uint32_t offset, bool eight, uint64_t value) {
  PropertySetResult res;
  if (eight || offset != prop::CC) {  // CC is the only writable property we have
    res.status = sc::InvalidField;
    return res;
  }
  const uint32_t old = cc_;
  const uint32_t cc = uint32_t(value);
  cc_ = cc;
  uint32_t csts = csts_.load();
  const bool en = cc & prop::kCcEnable, was_en = old & prop::kCcEnable;
  if (en && !was_en) {
    csts = cc_supported(cc, subsys_.is_discovery()) ? prop::kCstsReady : prop::kCstsFatal;
    if (!(csts & prop::kCstsReady))
      log::warn("controller {} of {}: CC {:#x} cannot be honoured (MPS, AMS, CSS or queue entry sizes); CSTS.CFS set",
                cntlid_, subsys_.nqn(), cc);
  } else if (!en && was_en) {
    csts = 0;
    cc_ = cc & ~prop::kCcShnMask;
  }
  if ((cc & prop::kCcShnMask) && !(old & prop::kCcShnMask) && en) {
    csts = (csts & ~(prop::kCstsReady | prop::kCstsShstMask)) | prop::kCstsShstProcessing;
    res.flush_for_shutdown = true;
  } else if (!(cc & prop::kCcShnMask) && (old & prop::kCcShnMask)) {
    csts &= ~prop::kCstsShstMask;
  }
  csts_.store(csts);
  return res;
}

void Controller::shutdown_complete() {
  csts_.store((csts_.load() & ~prop::kCstsShstMask) | prop::kCstsShstComplete);
}

uint32_t Controller::effective_kato_ms(uint32_t asked_ms) const {
  return asked_ms == 0 && subsys_.is_discovery() ? target_.config.discovery_kato_ms : asked_ms;
}

void Controller::record_error(uint16_t sqid, const Sqe& sqe, Status st) {
  ErrorLogEntry e{};
  e.sqid = sqid;
  e.cid = sqe.cid;
  e.status = st.to_cqe();  // as the completion carried it (phase tag bit 0 left clear)
  e.pel = 0xFFFF;          // no parameter singled out
  e.nsid = sqe.nsid;
  const auto opc = static_cast<IoOpcode>(sqe.opc);
  if (sqid != 0 && (opc == IoOpcode::Read || opc == IoOpcode::Write || opc == IoOpcode::WriteZeroes))
    e.lba = (uint64_t(sqe.cdw11) << 32) | sqe.cdw10;
  e.trtype = kTrtypeTcp;
  std::lock_guard lk(errors_mu_);
  e.error_count = ++error_count_;
  errors_[(error_count_ - 1) % kErrorLogEntries] = e;
}

// Asynchronous events.

void Controller::attach_admin_queue(reactor::Reactor* r, AdminQueueSink* sink) {
  event_sink_ = sink;
  std::lock_guard lk(admin_mu_);
  admin_reactor_ = r;
}

void Controller::detach_admin_queue() {
  event_sink_ = nullptr;
  std::lock_guard lk(admin_mu_);
  admin_reactor_ = nullptr;
}

void Controller::raise(AsyncEventType type, uint8_t info, LogPageId lid, uint32_t nsid) {
  // The event runs on the admin queue's reactor: the event state has one owner. A
  // controller whose admin queue is gone reports nothing (and keeps no reactor alive).
  std::lock_guard lk(admin_mu_);
  if (!admin_reactor_) return;
  admin_reactor_->post([weak = weak_from_this(), type, info, lid, nsid] {
    if (auto self = weak.lock()) self->queue_event(type, info, lid, nsid);
  });
}

void Controller::raise_device_error() {
  if (device_error_posted_.exchange(true, std::memory_order_acq_rel)) return;
  std::lock_guard lk(admin_mu_);
  if (!admin_reactor_) {
    device_error_posted_.store(false, std::memory_order_release);
    return;
  }
  admin_reactor_->post([weak = weak_from_this()] {
    auto self = weak.lock();
    if (!self) return;
    self->device_error_posted_.store(false, std::memory_order_release);
    self->queue_event(AsyncEventType::Error, kAsyncErrorTransientInternal, LogPageId::Error, 0);
  });
}

// The asynchronous events a host may enable (feature 0Bh): SMART critical warnings and the
// notices Identify OAES announces; anything else is refused, as nvmet does.
uint32_t Controller::async_events_supported() const {
  if (subsys_.is_discovery()) return kAecDiscoveryLogChange;
  return kAecSmartWarnings | kAecNamespaceAttribute | (subsys_.ana_reporting() ? kAecAnaChange : 0);
}

bool Controller::event_enabled(AsyncEventType type, LogPageId lid) const {
  switch (type) {
    case AsyncEventType::Error: return true;  // error events cannot be turned off
    case AsyncEventType::SmartHealth: return async_event_config_ & kAecSmartWarnings;
    case AsyncEventType::Notice:
      return async_event_config_ & (lid == LogPageId::Ana         ? kAecAnaChange
                                    : lid == LogPageId::Discovery ? kAecDiscoveryLogChange
                                                                  : kAecNamespaceAttribute);
    case AsyncEventType::IoCommandSpecific: return true;  // reservation notices: feature 83h decides
  }
  return false;
}

Controller::EventSlot* Controller::slot_in(std::array<EventSlot, kEventLogs.size()>& slots, LogPageId lid) {
  for (size_t i = 0; i < kEventLogs.size(); ++i)
    if (kEventLogs[i] == lid) return &slots[i];
  return nullptr;
}

void Controller::queue_event(AsyncEventType type, uint8_t info, LogPageId lid, uint32_t nsid) {
  if (dead.load(std::memory_order_relaxed)) return;
  if (lid == LogPageId::ChangedNamespaces) {
    // The list records every change, reported or not, until the host reads it.
    changed_ns_.add(nsid);
  }
  if (!event_enabled(type, lid)) return;
  EventSlot* slot = slot_in(events_, lid);
  if (!slot) {
    log::error("controller {} of {}: an event cleared by log 0x{:02x} has no slot; dropped", cntlid_, subsys_.nqn(),
               uint8_t(lid));
    return;
  }
  EventSlot& e = *slot;
  if (e.masked || e.pending) return;  // one report per kind until its log is read
  e.pending = true;
  e.type = type;
  e.info = info;
  log::debug("controller {} of {}: asynchronous event type {} info 0x{:02x} (log 0x{:02x})", cntlid_, subsys_.nqn(),
             uint8_t(type), info, uint8_t(lid));
  if (event_sink_) event_sink_->deliver_async_events();
}

bool Controller::take_async_event(uint32_t& dw0) {
  for (size_t i = 0; i < events_.size(); ++i) {
    EventSlot& e = events_[i];
    if (!e.pending) continue;
    e.pending = false;
    e.masked = true;
    dw0 = async_event_dw0(e.type, e.info, kEventLogs[i]);
    return true;
  }
  return false;
}

void Controller::unmask_event_for_log(LogPageId lid) {
  if (EventSlot* e = slot_in(events_, lid)) e->masked = false;
}

bool Controller::set_arrival(uint16_t portid, std::string local_address) {
  local_address_ = std::move(local_address);
  portid_ = portid;
  if (subsys_.is_discovery()) return subsys_.listeners().reachable_through(portid);
  port_ = subsys_.listeners().port(portid);
  return port_ != nullptr;
}

void Controller::add_reservation_notice(ReservationNotice type, uint32_t nsid) {
  std::atomic<uint32_t>* mask = resv_mask(nsid);
  if (!mask || (mask->load(std::memory_order_relaxed) & (1u << uint8_t(type)))) return;  // masked (82h)
  std::lock_guard lk(admin_mu_);
  if (!admin_reactor_) return;
  admin_reactor_->post([weak = weak_from_this(), type, nsid] {
    auto self = weak.lock();
    if (!self || self->dead.load(std::memory_order_relaxed)) return;
    ReservationNotificationLog n{};
    n.count = ++self->resv_notice_count_;
    if (n.count == 0) n.count = ++self->resv_notice_count_;  // 0 means "no notice"
    n.type = uint8_t(type);
    n.nsid = nsid;
    if (self->resv_notices_.size() == kMaxReservationNotices) self->resv_notices_.erase(self->resv_notices_.begin());
    self->resv_notices_.push_back(n);
    self->queue_event(AsyncEventType::IoCommandSpecific, kAsyncIoReservationLog, LogPageId::ReservationNotification, 0);
  });
}

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
#include "engine/app_controller.hpp"

#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include <fmt/format.h>

#include "nvtcp/identify.hpp"
#include "shm/region.hpp"
#include "util/log.hpp"
#include "wire/fabrics.hpp"
#include "wire/features.hpp"

namespace nvtcp::engine {

using nvme::AdminOpcode;
using nvme::Sqe;
using nvme::Status;
namespace sc = nvme::sc;
namespace prop = nvme::prop;

namespace {
constexpr uint32_t kAerLimit = 4;           // AERL 3: four held at once
constexpr uint32_t kMaxAdminTransfer = 1u << 20;
constexpr uint32_t kIdentifyBytes = 4096;
constexpr uint32_t kOacsDoorbellBufferConfig = 1u << 8;
constexpr uint8_t kFeatureInterruptCoalescing = 0x08;

using shm::detail::load_acquire;
using shm::detail::store_release;

// Zeroes a queue pair's words and rings: the state a queue starts from (the CQ phase tag
// of the first pass is 1, so a zeroed CQ holds no completion).
void clear_queue(const shm::QueueMemory& m) {
  std::memset(m.words, 0, sizeof(shm::QueueWords));
  std::memset(m.sq, 0, size_t(m.sq_size) * sizeof(nvme::Sqe));
  std::memset(m.cq, 0, size_t(m.cq_size) * sizeof(nvme::Cqe));
}
}  // namespace

AppController::AppController(shm::Attachment at, Backend& backend, uint16_t cntlid, uint32_t io_queues_max,
                             AdminLimits limits)
    : at_(std::move(at)),
      backend_(backend),
      cntlid_(cntlid),
      io_queues_max_(std::min(io_queues_max, at_.layout().queue_pairs - 1)),
      io_queues_granted_(io_queues_max_),
      admin_(at_.queue_pair(0), 0),
      io_(io_queues_max_ + 1),
      limits_(limits) {
  limits_.max_in_flight = std::max<uint32_t>(limits_.max_in_flight, 1);
  const auto* id = reinterpret_cast<const nvme::IdentifyController*>(backend_.remote_identify());
  shm::ControllerRegisters& r = at_.registers();
  // CAP: MQES, contiguous queues required, TO 15 s, the NVM command set; DSTRD 0 and
  // MPSMIN 4 KiB.
  r.cap = prop::make_cap(uint16_t(at_.layout().queue_entries - 1), 30);
  r.vs = id->ver;
  set_csts(0);
}

AppController::~AppController() = default;

std::string AppController::name() const {
  return fmt::format("application pid {} (controller {})", at_.peer_pid(), cntlid_);
}

uint32_t AppController::csts() const { return load_acquire(at_.registers().csts); }
void AppController::set_csts(uint32_t v) { store_release(at_.registers().csts, v); }

uint32_t AppController::live_io_queues() const {
  return uint32_t(std::count_if(io_.begin(), io_.end(), [](const IoQueue& q) {
    return q.state == QueueState::Running || q.state == QueueState::Stopping;
  }));
}

// The one place an I/O queue changes state. None -> CqOnly (Create CQ) -> Running (Create
// SQ) -> Stopping (Delete SQ, reset, fault, detach) -> CqOnly (its CQ stays) or None; a
// CQ alone is deleted or dropped by a reset: CqOnly -> None.
void AppController::set_queue_state(uint16_t qid, QueueState to) {
  IoQueue& q = io_[qid];
  const QueueState from = q.state;
  const bool legal = (from == QueueState::None && to == QueueState::CqOnly) ||
                     (from == QueueState::CqOnly && (to == QueueState::Running || to == QueueState::None)) ||
                     (from == QueueState::Running && to == QueueState::Stopping) ||
                     (from == QueueState::Stopping && (to == QueueState::CqOnly || to == QueueState::None));
  assert(legal && "illegal I/O queue state change");
  if (!legal) log::error("engine: {}: I/O queue {}: illegal state change {} -> {}", name(), qid, int(from), int(to));
  q.state = to;
}

void AppController::abandon_queues() {
  for (uint16_t qid = 1; qid < io_.size(); ++qid) {
    IoQueue& q = io_[qid];
    q.deleting = false;
    if (q.state == QueueState::Running) set_queue_state(qid, QueueState::Stopping);
    // A queue already stopping (a Delete I/O SQ under way) is asked again, the harsher way:
    // its answers would go to a CQ nobody reads any more.
    if (q.state == QueueState::Stopping) backend_.stop_io_queue(*this, qid, true);
  }
}

void AppController::on_kick() {
  if (detached_) return;
  const uint32_t cc = load_acquire(at_.registers().cc);
  const uint32_t changed = cc ^ cc_seen_;
  cc_seen_ = cc;
  if (changed & prop::kCcEnable) {
    if ((cc & prop::kCcEnable) && !enabled_ && !disabling_) enable();
    else if (!(cc & prop::kCcEnable) && enabled_) begin_disable(false);
  }
  const uint32_t shn = (cc >> prop::kCcShnShift) & 3;
  if (enabled_ && !disabling_ && shn != 0 && !shutdown_pending_ && (csts() & prop::kCstsShstMask) == 0)
    begin_disable(true);
  if (enabled_ && !disabling_ && !faulted_) process_admin();
}

void AppController::enable() {
  ++epoch_;  // answers to commands of before the reset are dropped
  admin_ = shm::EngineQueuePair(at_.queue_pair(0), 0);
  admin_backlog_.clear();
  held_aers_.clear();
  waiting_.reset();
  io_queues_granted_ = io_queues_max_;
  queues_requested_ = false;
  coalescing_ = 0;  // features return to their defaults with a reset
  async_event_config_ = 0;
  // A new association: the application scans every namespace anyway.
  changed_ns_.clear();
  ns_notice_pending_ = ns_notice_masked_ = false;
  enabled_ = true;
  faulted_ = false;
  set_csts(prop::kCstsReady);
  log::info("engine: {} enabled ({} I/O queue pairs of up to {} entries)", name(), io_queues_max_,
            at_.layout().queue_entries);
}

// CC.EN 1 -> 0 (a reset), or a shutdown notice: every I/O queue stops. A reset drops what
// is in flight (the application gave up on it); a shutdown lets it finish.
void AppController::begin_disable(bool shutdown_notice) {
  if (shutdown_notice) {
    shutdown_pending_ = true;
    set_csts(csts() | prop::kCstsShstProcessing);
  } else {
    disabling_ = true;
    held_aers_.clear();
    admin_backlog_.clear();
    waiting_.reset();  // fetched before the reset: dropped with the rest of the admin queue
  }
  if (!shutdown_notice) {
    abandon_queues();
    for (uint16_t qid = 1; qid < io_.size(); ++qid)
      if (io_[qid].state == QueueState::CqOnly) set_queue_state(qid, QueueState::None);
  } else {
    for (uint16_t qid = 1; qid < io_.size(); ++qid) {
      if (io_[qid].state != QueueState::Running) continue;
      set_queue_state(qid, QueueState::Stopping);
      backend_.stop_io_queue(*this, qid, false);  // a shutdown lets what is in flight finish
    }
  }
  finish_disable_if_done();
}

void AppController::finish_disable_if_done() {
  if (live_io_queues() > 0) return;
  if (shutdown_pending_) {
    shutdown_pending_ = false;
    set_csts((csts() & ~prop::kCstsShstMask) | prop::kCstsShstComplete);
    log::info("engine: {}: shutdown complete", name());
  }
  if (!disabling_) return;
  for (uint16_t qid = 1; qid < io_.size(); ++qid)
    if (io_[qid].state == QueueState::CqOnly) set_queue_state(qid, QueueState::None);
  clear_queue(at_.queue_pair(0));
  disabling_ = false;
  enabled_ = false;
  faulted_ = false;
  set_csts(0);
  log::info("engine: {} reset", name());
  // The application may have set CC.EN again while the reset drained.
  cc_seen_ = load_acquire(at_.registers().cc);
  if (cc_seen_ & prop::kCcEnable) enable();
}

void AppController::fatal(const std::string& why) {
  if (faulted_) return;
  faulted_ = true;
  log::warn("engine: {}: {}; the controller is stopped (CSTS.CFS) until the application resets it", name(), why);
  set_csts(csts() | prop::kCstsFatal);
  abandon_queues();
}

void AppController::detach() {
  if (detached_) return;
  detached_ = true;
  waiting_.reset();
  abandon_queues();
  for (uint16_t qid = 1; qid < io_.size(); ++qid)
    if (io_[qid].state == QueueState::CqOnly) set_queue_state(qid, QueueState::None);
}

void AppController::io_queue_stopped(uint16_t qid, shm::EngineQueuePair::CqPosition cq) {
  if (qid == 0 || qid >= io_.size() || io_[qid].state != QueueState::Stopping) return;
  IoQueue& q = io_[qid];
  q.cq = cq;
  if (q.deleting && !detached_) {
    q.deleting = false;
    set_queue_state(qid, QueueState::CqOnly);
    complete(q.delete_cid, sc::Success);
    flush_admin_cq();
  } else {
    set_queue_state(qid, disabling_ || detached_ ? QueueState::None : QueueState::CqOnly);
  }
  if (!detached_) finish_disable_if_done();
}

void AppController::io_queue_faulted(uint16_t qid) {
  if (detached_) return;
  fatal(fmt::format("I/O queue {}: impossible doorbell value", qid));
}

// Room for one more command of this application: its answers fit the admin CQ backlog, and
// it has a forwarded command to spare. The buffer budget is looked at when a command needs
// one (most need none); a command that has to wait for it is the one held in waiting_.
bool AppController::admin_room() const {
  return !waiting_ && admin_backlog_.size() < kAerLimit + 16 && forwarded_.size() < limits_.max_in_flight;
}

void AppController::resume_admin() {
  if (!waiting_ || detached_ || !enabled_ || disabling_ || faulted_) return;
  const Sqe s = *waiting_;
  waiting_.reset();
  execute_guarded(s);
  if (!waiting_) process_admin();
}

void AppController::process_admin() {
  flush_admin_cq();
  Sqe s;
  // Admin commands run one at a time; a full admin CQ, the application's forwarded commands
  // at their limit, or a command waiting for buffer budget stop fetching: the SQ head stays
  // until there is room (the application sees its SQ entries still unfetched).
  for (int pass = 0; pass < 2; ++pass) {
    while (admin_room() && admin_.fetch(s)) execute_guarded(s);
    if (admin_.fault() != shm::EngineQueuePair::Fault::None) {
      fatal("admin queue: impossible doorbell value");
      return;
    }
    if (pass == 0) admin_.want_sq_notice();  // then look once more: a tail just published
  }
}

void AppController::complete(uint16_t cid, Status st, uint32_t dw0) {
  if (detached_ || disabling_) return;
  nvme::Cqe c{};
  c.cid = cid;
  c.dw0 = dw0;
  c.status = st.to_cqe(!st.ok());
  admin_backlog_.push_back(c);
  flush_admin_cq();
}

void AppController::flush_admin_cq() {
  bool posted = false;
  while (!admin_backlog_.empty() && admin_.cq_space() > 0) {
    admin_.post(admin_backlog_.front());
    admin_backlog_.pop_front();
    posted = true;
  }
  if (!admin_backlog_.empty()) admin_.want_cq_notice();
  // The admin queue always interrupts through vector 0 (an application that polls ignores it).
  if (posted && !at_.vector_fds().empty()) shm::signal_fd(at_.vector_fds()[0]);
}

uint8_t* AppController::admin_data(const Sqe& sqe, uint32_t len, Status& st) {
  shm::DataSpan d = shm::resolve_data(sqe, at_.data(), at_.layout().data_bytes, len);
  st = d.status;
  return d.data;
}

// Whatever a command's execution throws (an allocation, say) fails that command alone; an
// exception never reaches the engine's loop, which serves every other application.
void AppController::execute_guarded(const Sqe& sqe) {
  try {
    execute(sqe);
  } catch (const std::exception& e) {
    log::warn("engine: {}: admin opcode {:02x}h failed: {}", name(), sqe.opc, e.what());
    try {
      complete(sqe.cid, sc::InternalError);
    } catch (const std::exception&) {
      fatal("no memory to answer an admin command");
    }
  }
}

void AppController::get_log_page(const Sqe& sqe) {
  const uint8_t lid = uint8_t(sqe.cdw10);
  const uint32_t lsp = (sqe.cdw10 >> 8) & 0x7F;
  const uint64_t numd = (uint64_t(sqe.cdw10 >> 16) | (uint64_t(sqe.cdw11 & 0xFFFF) << 16)) + 1;
  if (numd * 4 > kMaxAdminTransfer) return complete(sqe.cid, sc::InvalidField);
  // Logs whose reading changes them for every other reader of the shared controller.
  constexpr uint8_t kLogTelemetryHostInitiated = 0x07, kLogPersistentEvent = 0x0D,
                    kLogReservationNotification = 0x80;
  if (lid == kLogReservationNotification) {
    log::debug("engine: {}: Get Log Page {:02x}h refused: reading it takes entries from every application", name(),
               lid);
    return complete(sqe.cid, sc::InvalidLogPage);
  }
  if ((lid == kLogTelemetryHostInitiated || lid == kLogPersistentEvent) && lsp != 0) {
    log::debug("engine: {}: Get Log Page {:02x}h with LSP {:x}h refused: it would change the log for every "
               "application", name(), lid, lsp);
    return complete(sqe.cid, sc::InvalidField);
  }
  if (lid == uint8_t(nvme::LogPageId::ChangedNamespaces)) return changed_namespaces_log(sqe, uint32_t(numd * 4));
  // Retain Asynchronous Event (RAE, CDW10 bit 15) always: one application reading a log
  // must not clear an event for the others.
  Sqe log = sqe;
  log.cdw10 |= 1u << 15;
  forward(log, uint32_t(numd * 4), false);
}

// This application's own list: reading it (RAE cleared) empties it and lets the next change
// be reported, for this application alone.
void AppController::changed_namespaces_log(const Sqe& sqe, uint32_t len) {
  const uint64_t offset = uint64_t(sqe.cdw12) | uint64_t(sqe.cdw13) << 32;
  if (offset >= wire::ChangedNamespaceList::kLogBytes || (offset & 3)) return complete(sqe.cid, sc::InvalidField);
  Status st;
  uint8_t* out = admin_data(sqe, len, st);
  if (!st.ok()) return complete(sqe.cid, st);
  changed_ns_.build(bounce_);
  // Past the end of the log the application gets zeros.
  const uint32_t copy = uint32_t(std::min<uint64_t>(len, bounce_.size() - offset));
  std::memcpy(out, bounce_.data() + offset, copy);
  std::memset(out + copy, 0, len - copy);
  if (!(sqe.cdw10 & nvme::kLogRetainAsyncEvent)) {
    changed_ns_.clear();
    ns_notice_masked_ = false;
  }
  complete(sqe.cid, sc::Success);
}

void AppController::namespace_changed(uint32_t nsid) {
  if (detached_) return;
  changed_ns_.add(nsid);  // every change is listed, reported or not, until the log is read
  if (!(async_event_config_ & wire::kAecNamespaceAttribute) || ns_notice_masked_) return;
  ns_notice_pending_ = true;
  deliver_events();
}

void AppController::deliver_events() {
  if (!ns_notice_pending_ || held_aers_.empty() || !enabled_ || disabling_ || faulted_) return;
  const uint16_t cid = held_aers_.front();
  held_aers_.erase(held_aers_.begin());
  ns_notice_pending_ = false;
  ns_notice_masked_ = true;
  log::debug("engine: {}: namespace attribute notice", name());
  complete(cid, sc::Success,
           nvme::async_event_dw0(nvme::AsyncEventType::Notice, nvme::kAsyncNoticeNamespaceChanged,
                                 nvme::LogPageId::ChangedNamespaces));
}

void AppController::execute(const Sqe& sqe) {
  if (sqe.flags & nvme::kSqeFlagsFuseMask) return complete(sqe.cid, sc::InvalidField);
  switch (static_cast<AdminOpcode>(sqe.opc)) {
    case AdminOpcode::Identify: return identify(sqe);
    case AdminOpcode::GetLogPage: return get_log_page(sqe);
    case AdminOpcode::GetFeatures: return features(sqe, false);
    case AdminOpcode::SetFeatures: return features(sqe, true);
    case AdminOpcode::AsyncEventRequest:
      // Held until there is an event to report; a reset drops them.
      if (held_aers_.size() >= kAerLimit) return complete(sqe.cid, sc::AerLimitExceeded);
      held_aers_.push_back(sqe.cid);
      return deliver_events();
    case AdminOpcode::KeepAlive: return complete(sqe.cid, sc::Success);
    case AdminOpcode::Abort: return complete(sqe.cid, sc::Success, 1);  // dw0 bit 0: not aborted
    case AdminOpcode::DoorbellBufferConfig: return complete(sqe.cid, sc::Success);
    case AdminOpcode::CreateIoCq: return create_cq(sqe);
    case AdminOpcode::CreateIoSq: return create_sq(sqe);
    case AdminOpcode::DeleteIoSq: return delete_sq(sqe);
    case AdminOpcode::DeleteIoCq: return delete_cq(sqe);
    default:
      // Fabrics (7Fh), Namespace Management/Attachment, Format NVM, Sanitize, Firmware,
      // Directive Send, Security Send, ...: not this controller's to send to the shared one.
      log::debug("engine: {}: admin opcode {:02x}h is not supported", name(), sqe.opc);
      return complete(sqe.cid, sc::InvalidOpcode);
  }
}

void AppController::create_cq(const Sqe& sqe) {
  const uint16_t qid = uint16_t(sqe.cdw10);
  const uint32_t entries = (sqe.cdw10 >> 16) + 1;
  const bool contiguous = sqe.cdw11 & 1, ien = (sqe.cdw11 >> 1) & 1;
  const uint32_t iv = sqe.cdw11 >> 16;
  if (qid == 0 || qid > io_queues_granted_ || io_[qid].state != QueueState::None)
    return complete(sqe.cid, sc::InvalidQueueIdentifier);
  if (entries < 2 || entries > at_.layout().queue_entries) return complete(sqe.cid, sc::InvalidQueueSize);
  if (!contiguous) return complete(sqe.cid, sc::InvalidField);
  if (ien && iv >= at_.vector_fds().size()) return complete(sqe.cid, sc::InvalidInterruptVector);
  IoQueue& q = io_[qid];
  q.cq_entries = entries;
  q.vector = ien ? int(iv) : -1;
  q.cq = {};
  shm::QueueMemory m = at_.queue_pair(qid);
  std::memset(m.cq, 0, size_t(entries) * sizeof(nvme::Cqe));
  store_release(m.words->cq_head, 0);  // a new CQ starts at slot 0 with phase 1
  store_release(m.words->cq_event_idx, 0);
  set_queue_state(qid, QueueState::CqOnly);
  complete(sqe.cid, sc::Success);
}

void AppController::create_sq(const Sqe& sqe) {
  const uint16_t qid = uint16_t(sqe.cdw10);
  const uint32_t entries = (sqe.cdw10 >> 16) + 1;
  const bool contiguous = sqe.cdw11 & 1;
  const uint16_t cqid = uint16_t(sqe.cdw11 >> 16);
  if (qid == 0 || qid > io_queues_granted_) return complete(sqe.cid, sc::InvalidQueueIdentifier);
  if (io_[qid].state != QueueState::None && io_[qid].state != QueueState::CqOnly)
    return complete(sqe.cid, sc::InvalidQueueIdentifier);
  if (cqid == 0 || cqid > io_queues_granted_ || io_[cqid].state == QueueState::None)
    return complete(sqe.cid, sc::CompletionQueueInvalid);
  if (cqid != qid) {
    // Each SQ has a CQ of its own here (a queue pair is the unit an engine core carries).
    log::debug("engine: {}: SQ {} on CQ {}: shared completion queues are not supported", name(), qid, cqid);
    return complete(sqe.cid, sc::CompletionQueueInvalid);
  }
  if (entries < 2 || entries > at_.layout().queue_entries) return complete(sqe.cid, sc::InvalidQueueSize);
  if (!contiguous) return complete(sqe.cid, sc::InvalidField);
  IoQueue& q = io_[qid];
  shm::QueueMemory m = at_.queue_pair(qid);
  // The SQ doorbell of a new SQ is 0 (the CQ's words are the CQ's, set when it was made).
  store_release(m.words->sq_tail, 0);
  store_release(m.words->sq_event_idx, 0);
  m.sq_size = entries;
  m.cq_size = q.cq_entries;
  const int vector_fd = q.vector >= 0 ? at_.vector_fds()[size_t(q.vector)] : -1;
  if (!backend_.start_io_queue(*this, qid, m, vector_fd, q.cq)) return complete(sqe.cid, sc::InternalError);
  q.sq_entries = entries;
  set_queue_state(qid, QueueState::Running);
  complete(sqe.cid, sc::Success);
}

void AppController::delete_sq(const Sqe& sqe) {
  const uint16_t qid = uint16_t(sqe.cdw10);
  if (qid == 0 || qid >= io_.size() || io_[qid].state != QueueState::Running)
    return complete(sqe.cid, sc::InvalidQueueIdentifier);
  IoQueue& q = io_[qid];
  q.deleting = true;
  q.delete_cid = sqe.cid;
  set_queue_state(qid, QueueState::Stopping);
  backend_.stop_io_queue(*this, qid, false);  // answered in io_queue_stopped()
}

void AppController::delete_cq(const Sqe& sqe) {
  const uint16_t qid = uint16_t(sqe.cdw10);
  if (qid == 0 || qid >= io_.size() || io_[qid].state == QueueState::None)
    return complete(sqe.cid, sc::InvalidQueueIdentifier);
  if (io_[qid].state != QueueState::CqOnly) return complete(sqe.cid, sc::InvalidQueueDeletion);
  set_queue_state(qid, QueueState::None);
  complete(sqe.cid, sc::Success);
}

void AppController::identify(const Sqe& sqe) {
  Status st;
  uint8_t* out = admin_data(sqe, kIdentifyBytes, st);
  if (!st.ok()) return complete(sqe.cid, st);
  if ((sqe.cdw10 & 0xFF) != 0x01) return forward(sqe, kIdentifyBytes, false);
  // The remote controller's structure, as a controller with memory queues shows it: this
  // controller's ID, SGL data blocks, Doorbell Buffer Config among the optional admin
  // commands (the only one here), no keep-alive, and no fabrics attributes.
  bounce_.assign(backend_.remote_identify(), backend_.remote_identify() + kIdentifyBytes);
  auto* id = reinterpret_cast<nvme::IdentifyController*>(bounce_.data());
  id->cntlid = cntlid_;
  id->cntrltype = 1;  // I/O controller
  id->oacs = kOacsDoorbellBufferConfig;
  id->aerl = kAerLimit - 1;
  id->oaes = wire::kAecNamespaceAttribute;  // the only event passed on (see the header)
  id->acl = 3;
  id->kas = 0;
  id->maxcmd = 0;
  id->sgls = 1;       // SGLs supported, no alignment requirement
  std::memset(bounce_.data() + 1792, 0, 256);  // NVMe over Fabrics attributes: none here
  std::memcpy(out, bounce_.data(), kIdentifyBytes);
  complete(sqe.cid, sc::Success);
}

void AppController::features(const Sqe& sqe, bool set) {
  const uint8_t fid = uint8_t(sqe.cdw10);
  const uint32_t sel = (sqe.cdw10 >> 8) & 7;
  auto answer = [&](uint32_t current, uint32_t caps) {
    if (set) return complete(sqe.cid, sc::Success, current);
    if (sel == wire::kSelSupportedCapabilities) return complete(sqe.cid, sc::Success, caps);
    return complete(sqe.cid, sc::Success, current);
  };
  switch (fid) {
    case wire::kFeatureNumberOfQueues: {
      if (set) {
        const uint32_t nsqr = sqe.cdw11 & 0xFFFF, ncqr = sqe.cdw11 >> 16;
        if (nsqr == 0xFFFF || ncqr == 0xFFFF) return complete(sqe.cid, sc::InvalidField);
        if (queues_requested_ || std::any_of(io_.begin(), io_.end(), [](const IoQueue& q) {
              return q.state != QueueState::None;
            }))
          return complete(sqe.cid, sc::CommandSequenceError);
        queues_requested_ = true;
        io_queues_granted_ = std::min(std::max(nsqr, ncqr) + 1, io_queues_max_);
      }
      const uint32_t n = io_queues_granted_ - 1;
      return answer(n | (n << 16), 0);
    }
    case kFeatureInterruptCoalescing:
      if (set) {
        coalescing_ = sqe.cdw11 & 0xFFFF;
        backend_.set_coalescing(*this, coalescing_);
      }
      return answer(coalescing_, wire::kFeatureCapChangeable);
    case wire::kFeatureAsyncEventConfig:
      if (set) {
        async_event_config_ = sqe.cdw11;
        // Enabled with changes already listed: they are reported now, as a controller does.
        if ((async_event_config_ & wire::kAecNamespaceAttribute) && !changed_ns_.empty() && !ns_notice_masked_)
          ns_notice_pending_ = true;
        complete(sqe.cid, sc::Success, async_event_config_);
        return deliver_events();
      }
      return answer(async_event_config_, wire::kFeatureCapChangeable);
    case wire::kFeatureKeepAliveTimer:
      // The engine keeps the remote controller alive; this controller needs no keep-alive.
      if (set) return complete(sqe.cid, sc::InvalidField);
      return answer(0, 0);
    default: {
      // Others are the remote controller's, which every application of the engine shares: one
      // may read them, none may change them for the others.
      if (set) {
        log::debug("engine: {}: Set Features {:02x}h refused: the remote controller is shared", name(), fid);
        return complete(sqe.cid, sc::InvalidField);
      }
      uint32_t len = 0;
      if ((sqe.flags & nvme::kSqeFlagsPsdtMask) == nvme::kSqeFlagsPsdtSgl) len = std::min(sqe.sgl.length, 4096u);
      return forward(sqe, len, false);
    }
  }
}

// Admin commands may complete in any order: a forwarded one answers when the remote
// controller does, and the admin queue goes on meanwhile.
// The command's buffer comes from the engine's budget and this application's share of it;
// when either is held by commands in flight, the command waits (waiting_) and the admin SQ
// is not fetched until resume_admin().
void AppController::forward(const Sqe& sqe, uint32_t len, bool to_controller) {
  Status st;
  uint8_t* app = len ? admin_data(sqe, len, st) : nullptr;
  if (!st.ok()) return complete(sqe.cid, st);
  const uint64_t charge = AdminBufferPool::charge(len);
  if (charge > limits_.max_buffer_bytes) {
    log::debug("engine: {}: admin opcode {:02x}h moves {} bytes, beyond its {} bytes of admin buffers", name(),
               sqe.opc, len, limits_.max_buffer_bytes);
    return complete(sqe.cid, sc::InvalidField);
  }
  AdminBuffer data;
  AdminBufferPool::Take taken = AdminBufferPool::Take::Wait;
  if (admin_buffer_bytes_ + charge <= limits_.max_buffer_bytes) taken = backend_.admin_buffers().take(len, data);
  switch (taken) {
    case AdminBufferPool::Take::Taken: break;
    case AdminBufferPool::Take::Wait:
      // Some buffer is in flight (this application's, or the engine's whole budget is):
      // this command goes once one comes back.
      waiting_ = sqe;
      return;
    case AdminBufferPool::Take::TooLarge:
      log::debug("engine: {}: admin opcode {:02x}h moves {} bytes, beyond the engine's admin buffers", name(),
                 sqe.opc, len);
      return complete(sqe.cid, sc::InvalidField);
    case AdminBufferPool::Take::NoMemory:
      log::warn("engine: {}: no memory for the {} bytes of admin opcode {:02x}h", name(), len, sqe.opc);
      return complete(sqe.cid, sc::InternalError);
  }
  if (to_controller && len) std::memcpy(data.data(), app, len);
  Sqe remote = sqe;
  remote.flags = 0;
  std::memset(&remote.sgl, 0, sizeof(remote.sgl));
  const uint64_t tag = (uint64_t(epoch_) << 40) | next_tag_++;
  forwarded_[tag] = Forwarded{sqe.cid, to_controller ? nullptr : app, len, charge};
  admin_buffer_bytes_ += charge;
  admin_in_flight_peak_ = std::max(admin_in_flight_peak_, uint32_t(forwarded_.size()));
  backend_.forward_admin(*this, remote, std::move(data), to_controller, tag);
}

void AppController::admin_forwarded(uint64_t tag, const host::Completion& c, AdminBuffer data) {
  auto it = forwarded_.find(tag);
  if (it == forwarded_.end()) return;
  const Forwarded f = it->second;
  forwarded_.erase(it);
  admin_buffer_bytes_ -= f.charged;
  if (detached_ || disabling_ || !enabled_) return;
  // Answered after a reset: nobody asks any more (but its room is free again below).
  if (uint32_t(tag >> 40) == epoch_) {
    if (c.status.ok() && f.app_data && f.len && data.data())
      std::memcpy(f.app_data, data.data(), std::min(f.len, data.size()));
    complete(f.cid, c.status, c.dw0);
  }
  data.reset();  // its bytes are free for the next command
  // A forwarded command less: the admin SQ may be fetched again.
  if (faulted_) return;
  if (waiting_) resume_admin();
  else process_admin();
}

}  // namespace nvtcp::engine

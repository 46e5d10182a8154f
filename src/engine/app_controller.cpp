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
      admin_(at_.queue_pair(0), 0),
      io_(io_queues_max_ + 1),
      commands_(*this, io_queues_max_),
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
  commands_.reset_features(io_queues_max_);
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
  commands_.execute_guarded(s);
  if (!waiting_) process_admin();
}

void AppController::process_admin() {
  flush_admin_cq();
  Sqe s;
  // Admin commands run one at a time; a full admin CQ, the application's forwarded commands
  // at their limit, or a command waiting for buffer budget stop fetching: the SQ head stays
  // until there is room (the application sees its SQ entries still unfetched).
  for (int pass = 0; pass < 2; ++pass) {
    while (admin_room() && admin_.fetch(s)) commands_.execute_guarded(s);
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



void AppController::namespace_changed(uint32_t nsid) {
  if (detached_) return;
  changed_ns_.add(nsid);  // every change is listed, reported or not, until the log is read
  if (!(commands_.async_event_config() & wire::kAecNamespaceAttribute) || ns_notice_masked_) return;
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

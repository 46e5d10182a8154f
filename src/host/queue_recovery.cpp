// SPDX-License-Identifier: Apache-2.0
#include "host/queue_recovery.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "host/queue_pair_impl.hpp"
#include "util/log.hpp"

namespace nvtcp::host::detail {

QueueRecovery::QueueRecovery(QueuePairImpl& qp, std::shared_ptr<ControllerLink> link, Outage::Limits limits)
    : qp_(qp), link_(std::move(link)), outage_(limits) {
  tick_.recovery = this;
  tick_.fn = on_tick;
}

QueueRecovery::~QueueRecovery() { qp_.reactor_.cancel_timer(&tick_); }

bool QueueRecovery::can_reconnect() const {
  return link_ && qp_.p_.ctrl_loss_tmo_ms > 0 && associated_before_ && !qp_.failed() &&
         link_->link_state() != ControllerLink::LinkState::Deleted;
}

void QueueRecovery::disconnect(const std::string& why, bool reset_controller) {
  const QueueParams& p = qp_.p_;
  const uint64_t t = qp_.now();
  if (qp_.state_ == QueueState::Ready)
    log::warn("{}:{} qid {}: {}; reconnecting (ctrl_loss_tmo {} ms)", p.trid.traddr, p.trid.trsvcid, p.qid, why,
              p.ctrl_loss_tmo_ms);
  else
    log::info("{}:{} qid {}: reconnect attempt failed: {}", p.trid.traddr, p.trid.trsvcid, p.qid, why);
  outage_.lost(t);
  qp_.set_state(QueueState::Disconnected);
  qp_.rx_req_ = nullptr;
  qp_.conn_.close();
  qp_.conn_.abort_connect();
  for (auto& r : qp_.pool_) {
    if (r.state != HostRequest::State::OnWire) continue;
    if (r.cid == p.depth) {  // this attempt's Connect: dropped with it
      r.set_state(HostRequest::State::Free);
      continue;
    }
    r.set_state(HostRequest::State::Held);
    ++r.retries;
  }
  if (reset_controller && link_) link_->request_reset(generation_, why);
}

void QueueRecovery::associated() {
  const QueueParams& p = qp_.p_;
  if (link_) generation_ = link_->generation();
  uint32_t held = 0;
  for (auto& r : qp_.pool_) held += r.state == HostRequest::State::Held;
  if (associated_before_) {
    ++reconnects_;
    log::info("{}:{} qid {}: reconnected to controller {} after {} ms; sending {} held commands again",
              p.trid.traddr, p.trid.trsvcid, p.qid, qp_.cntlid_, outage_.elapsed_ms(qp_.now()), held);
  }
  associated_before_ = true;
  outage_.ended();
  // Held commands go out again (NVMe does not order commands, so the order is free), except
  // those that have already been in flight on too many lost connections.
  for (auto& r : qp_.pool_) {
    if (r.state != HostRequest::State::Held || qp_.state_ != QueueState::Ready) continue;
    if (r.retries > p.max_retries) {
      log::warn("{}:{} qid {}: cid {} failed after {} attempts", p.trid.traddr, p.trid.trsvcid, p.qid, r.cid,
                unsigned(r.retries));
      Completion c;
      c.status = r.timed_out ? nvme::sc::HostAbortedCommand : nvme::sc::TransportError;
      qp_.finish(&r, c);
      continue;
    }
    r.timed_out = false;
    qp_.send_command(&r);
  }
}

void QueueRecovery::arm_tick() {
  const QueueParams& p = qp_.p_;
  bool recovery = link_ && p.ctrl_loss_tmo_ms > 0;
  const bool connecting = qp_.conn_.unwaited_first_connect();
  if (!recovery && !p.io_timeout_ms && !connecting) return;
  // Often enough to honour the shortest of the timeouts to within a quarter of it.
  uint64_t period = 100;
  if (p.io_timeout_ms) period = std::min<uint64_t>(period, p.io_timeout_ms / 4);
  if (recovery) period = std::min<uint64_t>(period, std::max<uint32_t>(p.reconnect_delay_ms, 1) / 4);
  // The tick is a real-time wake-up; what it decides reads the queue's clock. On a test's fake
  // clock it comes every millisecond of real time, so a step is acted on at the stepped time
  // exactly (not at the next period boundary of fake time, which a step may jump past).
  qp_.reactor_.arm_timer(&tick_, p.clock->poll_period_ns(std::max<uint64_t>(period, 2) * kNsPerMs));
}

void QueueRecovery::on_tick(reactor::Timer* t) { static_cast<TickTimer*>(t)->recovery->tick(); }

void QueueRecovery::tick() {
  if (qp_.failed()) return;
  uint64_t t = qp_.now();
  if (qp_.conn_.unwaited_first_connect()) {
    // A start()ed first connect: bounded here as run_until() bounds a waited one.
    qp_.conn_.check_unwaited_deadline(t);
    if (!qp_.failed()) arm_tick();
    return;
  }
  if (qp_.state_ == QueueState::Ready) {
    // Another queue (or the admin queue) lost its connection and the controller was reset:
    // this connection belongs to the old association.
    if (link_ && qp_.p_.ctrl_loss_tmo_ms && link_->generation() != generation_)
      disconnect("the controller was reset", false);
    else if (qp_.p_.io_timeout_ms) check_timeouts(t);
  }
  if (!qp_.failed() && qp_.state_ != QueueState::Ready && associated_before_) {
    t = qp_.now();  // after any disconnect() above, which started the outage
    reconnect_step(t);
  }
  if (!qp_.failed()) arm_tick();
}

void QueueRecovery::reconnect_step(uint64_t t) {
  const QueueParams& p = qp_.p_;
  qp_.conn_.release_closed();
  bool lost = !link_ || link_->link_state() == ControllerLink::LinkState::Deleted;
  if (lost || outage_.ctrl_loss_passed(t)) {
    qp_.fail_for_good(HostError::make(
        HostError::Kind::Timeout,
        fmt::format("no connection for {} ms: controller lost (ctrl_loss_tmo)", outage_.elapsed_ms(t))));
    return;
  }
  if (qp_.state_ != QueueState::Disconnected && qp_.conn_.attempt_overdue(t))
    qp_.fail(HostError::make(HostError::Kind::Timeout, "reconnect attempt timed out"));
  if (qp_.state_ != QueueState::Disconnected || qp_.conn_.socket() != SocketState::None) return;
  if (outage_.fast_io_fail_due(t)) {
    log::warn("{}:{} qid {}: fast_io_fail_tmo ({} ms) passed: failing held and new I/O until reconnected",
              p.trid.traddr, p.trid.trsvcid, p.qid, p.fast_io_fail_tmo_ms);
    qp_.end_outstanding();
  }
  // Reconnect once the controller itself is back (its generation moved on).
  if (link_->link_state() == ControllerLink::LinkState::Live && link_->generation() != generation_ &&
      outage_.attempt_due(t)) {
    qp_.p_.cntlid = link_->link_cntlid();
    HostError err;
    if (!qp_.conn_.start_connect(err)) {  // still Disconnected: the next attempt comes after the delay
      log::warn("{}:{} qid {}: reconnect: {}", p.trid.traddr, p.trid.trsvcid, p.qid, err.message);
    }
  }
}

void QueueRecovery::check_timeouts(uint64_t t) {
  const QueueParams& p = qp_.p_;
  const uint64_t limit = uint64_t(p.io_timeout_ms) * kNsPerMs;
  // The Connect slot has no Abort: it belongs to the connection being set up.
  for (auto& r : qp_.pool_) {
    if (r.state != HostRequest::State::OnWire || r.untimed) continue;
    const bool can_abort = link_ && r.cid != p.depth;
    switch (command_timeout_step({r.sent_ns, r.abort_sent, r.abort_ns}, t, limit, can_abort)) {
      case TimeoutStep::None: continue;
      case TimeoutStep::Abort:
        // First ask the controller to abort it; the queue stays up.
        r.abort_sent = true;
        r.abort_ns = t;
        log::warn("{}:{} qid {}: cid {} not completed after {} ms; sending Abort", p.trid.traddr, p.trid.trsvcid,
                  p.qid, r.cid, p.io_timeout_ms);
        link_->abort_command(p.qid, r.cid);
        continue;
      case TimeoutStep::Reset:
        // Still nothing: the connection cannot be trusted any more. Reset (or fail) it.
        r.timed_out = true;
        qp_.fail(HostError::make(HostError::Kind::Timeout,
                                 fmt::format("cid {} not completed after {} ms{}", r.cid, (t - r.sent_ns) / kNsPerMs,
                                             r.abort_sent ? " and an Abort" : "")));
        return;
    }
  }
}

}  // namespace nvtcp::host::detail

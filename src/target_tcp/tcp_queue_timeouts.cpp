// SPDX-License-Identifier: Apache-2.0
// What a target queue's deadlines do when they fall due: see tcp_queue_timeouts.hpp.
#include "target_tcp/tcp_queue_timeouts.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "target/queue_limits.hpp"
#include "target_tcp/tcp_queue.hpp"
#include "util/log.hpp"

namespace nvtcp::target {

const TcpRequest* TcpQueueTimeouts::stalled_write(uint64_t now, uint64_t& next_due) const {
  // Checked on the connection's H2CData deadline, not per I/O: a scan of the slots.
  next_due = UINT64_MAX;
  const uint64_t limit = uint64_t(q_.target_.config.h2c_data_timeout_ms) * 1000000ull;
  if (limit == 0) return nullptr;
  for (const auto& r : q_.pool_.slots())
    if (r->state() == TcpRequest::State::AwaitingH2C && r->rx_next < r->r2t_next) {
      const uint64_t asked = r->r2t_sent_ns[(r->rx_next / q_.target_.config.max_h2c_data) % TcpRequest::kMaxR2T];
      if (now > asked && now - asked > limit) return r.get();
      next_due = std::min(next_due, asked + limit + 1);
    }
  return nullptr;
}

// Responses queued and none of them taken by the host since send_timeout_ms ago. Progress
// is seen only here: the stall is counted from the check that first found the queue still.
bool TcpQueueTimeouts::send_stalled(uint64_t now, uint64_t& next_due) {
  const uint64_t limit = uint64_t(q_.target_.config.send_timeout_ms) * 1000000ull;
  if (q_.stream_->queued_bytes() == 0 || q_.stream_->sent_bytes() != sent_seen_ || send_progress_ns_ == 0) {
    sent_seen_ = q_.stream_->sent_bytes();
    send_progress_ns_ = now;
  } else if (limit != 0 && now > send_progress_ns_ && now - send_progress_ns_ > limit) {
    return true;
  }
  next_due = limit != 0 && q_.stream_->queued_bytes() != 0 ? send_progress_ns_ + limit + 1 : UINT64_MAX;
  return false;
}

void TcpQueueTimeouts::on_icreq_deadline(uint64_t) {
  if (q_.state_ == TcpQueue::State::AwaitICReq)
    q_.close(fmt::format("no ICReq within {} ms", q_.target_.config.icreq_timeout_ms));
}

void TcpQueueTimeouts::on_connect_deadline(uint64_t) {
  if (q_.state_ != TcpQueue::State::Ready) return;
  if (!q_.commands_.connected()) q_.close("no Connect after ICReq");
  else if (!q_.commands_.authenticated())
    q_.close(fmt::format("not authenticated within {} ms of Connect", q_.target_.config.icreq_timeout_ms));
}

void TcpQueueTimeouts::on_term_req_linger(uint64_t) {
  q_.terminator_.closing();
  q_.stream_->close();  // the peer did not take our TermReq in time
}

uint64_t TcpQueueTimeouts::poll_period() const {
  uint64_t period = kControllerPollNs;
  const Controller* ctrl = q_.commands_.controller();
  if (q_.commands_.qid() == 0 && ctrl && ctrl->kato_ms())
    period = std::min<uint64_t>(period, uint64_t(ctrl->kato_ms()) * 250000ull);
  return period;
}

void TcpQueueTimeouts::arm_check(Deadline d, uint64_t now, uint64_t due) {
  q_.deadlines_.arm_at(d, std::min(due, now + poll_period()));
}

// Each check below stops (and is not armed again) once the connection is closing: a check
// that closes it ends the others due at the same time.
void TcpQueueTimeouts::on_keep_alive_check(uint64_t now) {
  if (!q_.live()) return;
  Controller& ctrl = *q_.commands_.controller();
  // The controller stamps commands with the clock it got from this queue: KATO is measured on it.
  if (ctrl.keep_alive_expired(now)) {
    log::warn("{}: keep-alive timeout ({} ms) on controller {}", q_.link_.peer, ctrl.kato_ms(), ctrl.cntlid());
    q_.commands_.end_controller("keep-alive timeout");
    q_.close("keep-alive timeout");
    return;
  }
  arm_check(Deadline::KeepAlive, now, ctrl.keep_alive_deadline());
}

void TcpQueueTimeouts::on_controller_poll(uint64_t) {
  if (!q_.live()) return;
  if (q_.commands_.controller()->dead.load(std::memory_order_relaxed)) {
    q_.close("its controller was torn down");
    return;
  }
  q_.send_share_.apply();  // its address's share of the kernel's send buffers moved
  q_.deadlines_.arm(Deadline::ControllerPoll, poll_period());
}

void TcpQueueTimeouts::on_send_stall_check(uint64_t now) {
  if (!q_.live()) return;
  uint64_t due = UINT64_MAX;
  if (send_stalled(now, due)) {
    log::warn("{}: the host has not read its responses ({} bytes queued) for {} ms; closing the connection",
              q_.link_.peer, q_.stream_->queued_bytes(), q_.target_.config.send_timeout_ms);
    q_.close("send timeout");
    return;
  }
  arm_check(Deadline::SendStall, now, due);
}

void TcpQueueTimeouts::on_h2c_data_check(uint64_t now) {
  if (!q_.live()) return;
  uint64_t due = UINT64_MAX;
  if (const TcpRequest* r = stalled_write(now, due)) {
    log::warn("{}: no H2CData for cid {} (qid {}) within {} ms of asking for it; closing the connection",
              q_.link_.peer, r->sqe.cid, q_.commands_.qid(), q_.target_.config.h2c_data_timeout_ms);
    q_.close("H2CData timeout");
    return;
  }
  arm_check(Deadline::H2CData, now, due);
}

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
// What one NVMe/TCP target queue does when each of its deadlines falls due (TcpQueue holds the
// DeadlineSet that says when): the host's ICReq and Connect that never came, its keep-alive, a
// controller torn down elsewhere, responses the host does not read, data an R2T asked for that
// does not come, and the linger of a C2HTermReq. Checked on a timer per connection, never per I/O.
#pragma once
#include <cstdint>

#include "target_tcp/tcp_request.hpp"

namespace nvtcp::target {

class TcpQueue;

class TcpQueueTimeouts {
 public:
  // The connection's deadlines, each with its own handler (run in this order when several
  // fall due together). ICReq: the host has icreq_timeout_ms from accept to send its ICReq;
  // Connect: and its Connect, by the same deadline. On a connected queue, at least every
  // poll_period(): ControllerPoll (its controller was torn down elsewhere; its address's send
  // buffer share moved), and, each also at
  // the instant it would expire (arm_check()), KeepAlive (admin queue: the host's KATO),
  // SendStall (the host reads no responses), H2CData (the host owes data an R2T asked for).
  // TermReqLinger: how long a C2HTermReq gets to leave before the socket closes.
  enum class Deadline : uint8_t { ICReq, Connect, KeepAlive, ControllerPoll, SendStall, H2CData, TermReqLinger, kCount };

  explicit TcpQueueTimeouts(TcpQueue& queue) : q_(queue) {}
  TcpQueueTimeouts(const TcpQueueTimeouts&) = delete;
  TcpQueueTimeouts& operator=(const TcpQueueTimeouts&) = delete;

  void on_icreq_deadline(uint64_t now);
  void on_connect_deadline(uint64_t now);
  void on_keep_alive_check(uint64_t now);
  void on_controller_poll(uint64_t now);
  void on_send_stall_check(uint64_t now);
  void on_h2c_data_check(uint64_t now);
  void on_term_req_linger(uint64_t now);

 private:
  // How often a connected queue runs its checks: kControllerPollNs, or a quarter of KATO on an
  // admin queue whose KATO is shorter.
  uint64_t poll_period() const;
  // Arms check d for due, the instant its condition holds if nothing changes meanwhile (so a
  // timeout ends the connection when it expires, not up to a period later), but no later
  // than poll_period() from now: what a check cannot foresee (a Set Features that shortens
  // KATO, a new R2T) is noticed within a period.
  void arm_check(Deadline d, uint64_t now, uint64_t due);
  // A request whose H2CData the host has owed for over h2c_data_timeout_ms, if any; else
  // next_due is when the first of the owed data will be late (UINT64_MAX: none is owed).
  const TcpRequest* stalled_write(uint64_t now, uint64_t& next_due) const;
  // Whether the send queue has not moved for over send_timeout_ms; else next_due is when it
  // will have been still for that long if it does not move (UINT64_MAX: it is empty).
  bool send_stalled(uint64_t now, uint64_t& next_due);

  TcpQueue& q_;
  uint64_t sent_seen_ = 0;         // stream bytes sent at the last periodic check
  uint64_t send_progress_ns_ = 0;  // when the send queue was last empty or moving
};

}  // namespace nvtcp::target

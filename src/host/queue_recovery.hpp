// SPDX-License-Identifier: Apache-2.0
// What one host queue does when its connection is lost, apart from its data path: hold its
// commands, send them again on the next association (up to max_retries connections each),
// reconnect once the controller has been reset (ControllerLink), fail held I/O at
// fast_io_fail_tmo and give up at ctrl_loss_tmo. And the queue's periodic tick that drives this,
// bounds an unwaited first connect and times commands out (Abort, then reset). The tick is the
// only timer: nothing here runs per I/O.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "host/timing.hpp"
#include "reactor/reactor.hpp"

namespace nvtcp::host::detail {

class QueuePairImpl;
class ControllerLink;

class QueueRecovery {
 public:
  // link: the controller, for queues that reconnect with it (nullptr: this connection alone).
  QueueRecovery(QueuePairImpl& qp, std::shared_ptr<ControllerLink> link, Outage::Limits limits);
  ~QueueRecovery();
  QueueRecovery(const QueueRecovery&) = delete;
  QueueRecovery& operator=(const QueueRecovery&) = delete;

  // Whether a lost connection is held and reconnected (else the queue fails).
  bool can_reconnect() const;
  // Holds the commands on the wire, closes the connection and (reset_controller) asks the
  // controller to reset the association.
  void disconnect(const std::string& why, bool reset_controller);
  // A new association is up: held commands go out again.
  void associated();
  // The queue is given up: the outage (if any) is over with it.
  void given_up() { outage_.ended(); }
  // fast_io_fail_tmo has passed in the current outage: new I/O is refused until the next association.
  bool fast_failing() const { return outage_.fast_failing(); }
  // Every connecting state is passed both on the first connection and on each reconnect; only
  // this tells them apart (a failed first connect is final and returned to the caller, a failed
  // reconnect attempt is retried).
  bool associated_before() const { return associated_before_; }
  uint32_t reconnects() const { return reconnects_; }
  void arm_tick();

 private:
  static void on_tick(reactor::Timer* t);
  void tick();
  // Disconnected: give up, fail held I/O, or start the next attempt, as the outage's time says.
  void reconnect_step(uint64_t now_ns);
  void check_timeouts(uint64_t now_ns);

  QueuePairImpl& qp_;
  std::shared_ptr<ControllerLink> link_;
  uint32_t generation_ = 0;       // the controller association this connection belongs to
  uint32_t reconnects_ = 0;
  bool associated_before_ = false;
  // From a lost connection to the next association. outage_.fast_failing() belongs to the
  // outage, not to a state: it holds through every reconnect attempt's connecting states until Ready.
  Outage outage_;
  struct TickTimer : reactor::Timer {
    QueueRecovery* recovery = nullptr;
  } tick_;
};

}  // namespace nvtcp::host::detail

// SPDX-License-Identifier: Apache-2.0
// Test-only ways into a live controller, for the integration tests (they link the internal
// libraries). Nothing here is in include/nvtcp, and libnvtcp.map exports none of it: an
// application cannot reach it, and the public ABI does not change with it.
#pragma once
#include <functional>

#include "reactor/clock.hpp"

namespace nvtcp::host {
class Controller;
}

namespace nvtcp::host::detail {

// Gives the controllers that Controller::connect() makes on this thread, while the seam lives,
// another clock than the real one: a test's reactor::FakeClock. The controller, its admin queue
// and every I/O queue pair it creates then time everything by it (keep-alive, command and admin
// timeouts, reconnect delay, ctrl_loss_tmo, fast_io_fail_tmo); the clock must outlive them.
//
// A thread-local scope rather than an option, so that ControllerOptions (public, part of the
// ABI) does not change and the clock is set before the admin thread starts.
class ControllerSeam {
 public:
  explicit ControllerSeam(const reactor::Clock& clock);
  ~ControllerSeam();
  ControllerSeam(const ControllerSeam&) = delete;
  ControllerSeam& operator=(const ControllerSeam&) = delete;

  const reactor::Clock& clock() const { return clock_; }
  // The seam in force on this thread, or nullptr (Controller::connect() asks).
  static ControllerSeam* current();

  // Returns once the admin thread of the last controller connected under this seam has seen
  // the clock as it reads now, everywhere it waits on it: every timer it had armed has fired
  // (on a fake clock none waits longer than reactor::kFakeClockPollNs of real time), then one
  // more reactor turn has begun, so its loops have read the clock again and have started on
  // what the timers found. What is due at the current time is then done or under way; what is
  // not due has not happened. "Started" only: work that runs the reactor itself (recover()
  // closing the old admin queue) may still be going on, so whatever it schedules must be timed
  // from a reading taken before it (recover() dates the next attempt from the loss).
  // False if the thread does not answer within timeout_ms (it has ended).
  bool settle_admin(int timeout_ms = 10000) const;

 private:
  friend class nvtcp::host::Controller;
  const reactor::Clock& clock_;
  ControllerSeam* outer_ = nullptr;
  // Set by Controller::connect(): runs fn on the controller's admin thread (false: it is gone).
  std::function<bool(std::function<void()>)> post_to_admin_;
};

}  // namespace nvtcp::host::detail

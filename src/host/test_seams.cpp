// SPDX-License-Identifier: Apache-2.0
#include "host/test_seams.hpp"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "reactor/reactor.hpp"

namespace nvtcp::host::detail {

namespace {
thread_local ControllerSeam* t_seam = nullptr;
}  // namespace

ControllerSeam::ControllerSeam(const reactor::Clock& clock) : clock_(clock), outer_(t_seam) { t_seam = this; }
ControllerSeam::~ControllerSeam() { t_seam = outer_; }
ControllerSeam* ControllerSeam::current() { return t_seam; }

bool ControllerSeam::settle_admin(int timeout_ms) const {
  if (!post_to_admin_) return false;
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    bool ok = false;
    uint64_t since_ns = 0;  // real time of the first hop, on the admin thread: after the caller's step
    bool fired = false;     // a turn began kFakeClockPollNs after since_ns
  };
  auto w = std::make_shared<Wait>();
  // A task that posts itself again each turn until a turn began kFakeClockPollNs after the first
  // hop: every timer armed before that hop (a fake clock's poll period at most) has then fired,
  // in this turn or an earlier one, and read the clock as the caller left it (the posted phase
  // runs after the timers of its turn). One turn more, so that what the admin thread does
  // between turns about what they found (recover() after a failed admin queue) has begun, and
  // its loops (wait_ms, admin_sync), which read the clock between turns, have read it too.
  struct Hop {
    std::shared_ptr<Wait> w;
    std::function<bool(std::function<void()>)> post;
    void end(bool ok) const {
      {
        std::lock_guard lk(w->mu);
        w->done = true;
        w->ok = ok;
      }
      w->cv.notify_all();
    }
    void operator()() const {
      const reactor::Reactor* r = reactor::Reactor::current();
      if (!r) return end(false);
      if (!w->since_ns) {
        w->since_ns = reactor::monotonic_ns();
      } else if (w->fired) {
        return end(true);
      } else if (r->now_ns() >= w->since_ns + reactor::kFakeClockPollNs) {
        w->fired = true;
      }
      if (!post(*this)) end(false);
    }
  };
  if (!post_to_admin_(Hop{w, post_to_admin_})) return false;
  std::unique_lock lk(w->mu);
  if (!w->cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return w->done; })) return false;
  return w->ok;
}

}  // namespace nvtcp::host::detail

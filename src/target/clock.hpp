// Where a target connection reads the time for its deadlines: the monotonic clock in
// production; tests substitute a clock they step, so that timing logic (ICReq and Connect
// deadlines, keep-alive, H2C data timeouts, send stalls) is tested without sleeping.
#pragma once
#include <cstdint>

#include "reactor/reactor.hpp"

namespace nvtcp::target {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t now_ns() const = 0;
};

// reactor::monotonic_ns(): the clock the reactor's timers read.
class MonotonicClock final : public Clock {
 public:
  uint64_t now_ns() const override { return reactor::monotonic_ns(); }
  static const MonotonicClock& instance() {
    static const MonotonicClock clock;
    return clock;
  }
};

}  // namespace nvtcp::target

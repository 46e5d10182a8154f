// SPDX-License-Identifier: Apache-2.0
#include "reactor/clock.hpp"

#include "reactor/reactor.hpp"

namespace nvtcp::reactor {

uint64_t Clock::turn_ns(const Reactor&) const { return now_ns(); }

namespace {
class MonotonicClock final : public Clock {
 public:
  uint64_t now_ns() const override { return monotonic_ns(); }
  uint64_t turn_ns(const Reactor& r) const override { return r.now_ns(); }
};
}  // namespace

const Clock& monotonic_clock() {
  static const MonotonicClock clock;
  return clock;
}

}  // namespace nvtcp::reactor

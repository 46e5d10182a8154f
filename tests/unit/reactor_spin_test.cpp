// SPDX-License-Identifier: Apache-2.0
// A spinning reactor's manners on a shared core: one that spins on empty turns hands its
// core to whatever else is runnable there now and then (sched_yield), so that a peer it
// waits for on the same CPU (a target and an offload engine) is not held off for a whole
// time slice; one that sleeps in io_uring never needs to. No timings are asserted: the
// counters say whether it yielded at all.
#include <gtest/gtest.h>

#include <chrono>

#include "reactor/reactor.hpp"

namespace nvtcp::reactor::reactor_spin_test {
namespace {

ReactorOptions with_poll(PollMode mode) {
  ReactorOptions o = ReactorOptions::defaults();
  o.poll = mode;
  o.sqpoll = false;
  return o;
}

TEST(ReactorSpin, ABusyReactorWithNothingToDoYieldsItsCore) {
  Reactor r(64, with_poll(PollMode::Busy));
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (r.stats().spin_yields == 0 && std::chrono::steady_clock::now() < give_up) r.run_once(0);
  EXPECT_GT(r.stats().spin_yields, 0u);
}

TEST(ReactorSpin, ABusyReactorYieldsAtMostOncePerSpinInterval) {
  // Ten thousand empty turns take far longer than nothing, and far less than ten thousand
  // intervals: a yield on every turn would cost a system call each.
  Reactor r(64, with_poll(PollMode::Busy));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10000; ++i) r.run_once(0);
  const auto spun_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
  EXPECT_LE(r.stats().spin_yields, uint64_t(spun_ns.count()) / 10'000 + 1);
}

TEST(ReactorSpin, AnInterruptDrivenReactorNeverYields) {
  Reactor r(64, with_poll(PollMode::Interrupt));
  for (int i = 0; i < 1000; ++i) r.run_once(0);
  EXPECT_EQ(r.stats().spin_yields, 0u);
}

}  // namespace
}  // namespace nvtcp::reactor::reactor_spin_test

// SPDX-License-Identifier: Apache-2.0
// The host's time-based decisions stepped on a FakeClock, no sockets and no sleeping. These are
// the decisions the Reconnect.* and KeepAlive.* integration tests reach through real time:
// there they show the wiring end to end with wide margins; here each boundary is exact.
#include "host/timing.hpp"

#include <gtest/gtest.h>

#include "nvtcp/properties.hpp"
#include "reactor/clock.hpp"
#include "reactor/reactor.hpp"

namespace host_timing_test {

namespace {

// The host's timing rules are what this file tests: all of them, by their own names.
using namespace nvtcp::host::detail;
using nvtcp::reactor::FakeClock;
using nvtcp::reactor::monotonic_clock;

// Reconnect.CtrlLossTmoFailsHeldCommands (ctrl_loss_tmo 600 ms, nobody comes back): the
// controller is lost exactly when ctrl_loss_tmo has passed since the first loss, however many
// attempts failed in between.
TEST(HostTiming, CtrlLossTmoCountsFromTheFirstLoss) {
  FakeClock clock;
  Outage o({.ctrl_loss_tmo_ms = 600, .fast_io_fail_tmo_ms = -1, .reconnect_delay_ms = 100});
  EXPECT_FALSE(o.ongoing());
  EXPECT_FALSE(o.ctrl_loss_passed(clock.now_ns()));  // no outage, nothing to give up
  o.lost(clock.now_ns());
  const uint64_t first = clock.now_ns();
  for (int attempt = 0; attempt < 5; ++attempt) {
    clock.step_ms(100);
    EXPECT_FALSE(o.ctrl_loss_passed(clock.now_ns())) << attempt;
    o.lost(clock.now_ns());  // a failed reconnect attempt does not restart the outage
  }
  clock.step_ms(99);
  EXPECT_FALSE(o.ctrl_loss_passed(clock.now_ns()));
  clock.step_ms(1);
  EXPECT_TRUE(o.ctrl_loss_passed(clock.now_ns()));
  EXPECT_EQ(o.elapsed_ms(clock.now_ns()), (clock.now_ns() - first) / kNsPerMs);
  // A new association ends the outage: the next loss counts from zero again.
  o.ended();
  EXPECT_FALSE(o.ctrl_loss_passed(clock.now_ns()));
  o.lost(clock.now_ns());
  clock.step_ms(599);
  EXPECT_FALSE(o.ctrl_loss_passed(clock.now_ns()));
}

// Reconnect.FastIoFailThenRecover (fast_io_fail_tmo 300 ms): held I/O fails once, at 300 ms;
// new I/O is refused from then until the next association.
TEST(HostTiming, FastIoFailFiresOncePerOutage) {
  FakeClock clock;
  Outage o({.ctrl_loss_tmo_ms = 20000, .fast_io_fail_tmo_ms = 300, .reconnect_delay_ms = 100});
  o.lost(clock.now_ns());
  clock.step_ms(299);
  EXPECT_FALSE(o.fast_io_fail_due(clock.now_ns()));
  EXPECT_FALSE(o.fast_failing());
  clock.step_ms(1);
  EXPECT_TRUE(o.fast_io_fail_due(clock.now_ns()));
  EXPECT_TRUE(o.fast_failing());
  clock.step_ms(1000);
  EXPECT_FALSE(o.fast_io_fail_due(clock.now_ns()));  // once: held I/O has already been failed
  EXPECT_TRUE(o.fast_failing());
  o.ended();  // reconnected: I/O flows again
  EXPECT_FALSE(o.fast_failing());
  o.lost(clock.now_ns());
  EXPECT_FALSE(o.fast_io_fail_due(clock.now_ns()));
  clock.step_ms(300);
  EXPECT_TRUE(o.fast_io_fail_due(clock.now_ns()));  // a new outage fails its I/O again
}

TEST(HostTiming, FastIoFailOffHoldsIoUntilCtrlLoss) {
  FakeClock clock;
  Outage o({.ctrl_loss_tmo_ms = 1000, .fast_io_fail_tmo_ms = -1, .reconnect_delay_ms = 100});
  o.lost(clock.now_ns());
  clock.step_ms(999);
  EXPECT_FALSE(o.fast_io_fail_due(clock.now_ns()));
  EXPECT_FALSE(o.ctrl_loss_passed(clock.now_ns()));
  clock.step_ms(1);
  EXPECT_FALSE(o.fast_io_fail_due(clock.now_ns()));
  EXPECT_TRUE(o.ctrl_loss_passed(clock.now_ns()));
}

TEST(HostTiming, ReconnectAttemptsComeOneDelayApart) {
  FakeClock clock;
  Outage o({.ctrl_loss_tmo_ms = 20000, .fast_io_fail_tmo_ms = -1, .reconnect_delay_ms = 250});
  o.lost(clock.now_ns());
  EXPECT_FALSE(o.attempt_due(clock.now_ns()));
  clock.step_ms(249);
  EXPECT_FALSE(o.attempt_due(clock.now_ns()));
  clock.step_ms(1);
  EXPECT_TRUE(o.attempt_due(clock.now_ns()));
  EXPECT_FALSE(o.attempt_due(clock.now_ns()));  // the next one is a delay later
  clock.step_ms(250);
  EXPECT_TRUE(o.attempt_due(clock.now_ns()));
  // An attempt that fails counts as a loss: the delay starts again from it.
  clock.step_ms(10);
  o.lost(clock.now_ns());
  clock.step_ms(249);
  EXPECT_FALSE(o.attempt_due(clock.now_ns()));
  clock.step_ms(1);
  EXPECT_TRUE(o.attempt_due(clock.now_ns()));
}

// What a command's timeout calls for once the clock has moved on by ms.
TimeoutStep step_after(FakeClock& clock, int ms, const CommandTimes& c, uint64_t limit_ns, bool can_abort) {
  clock.step_ms(ms);
  return command_timeout_step(c, clock.now_ns(), limit_ns, can_abort);
}

// Reconnect.IoTimeoutAbortsThenResets (io_timeout 300 ms): an Abort after 300 ms, a reset 300 ms
// after the Abort if the command still has not completed.
TEST(HostTiming, IoTimeoutAbortsThenResets) {
  FakeClock clock;
  const uint64_t limit = 300 * kNsPerMs;
  CommandTimes c{clock.now_ns(), false, 0};
  EXPECT_EQ(step_after(clock, 299, c, limit, true), TimeoutStep::None);
  ASSERT_EQ(step_after(clock, 1, c, limit, true), TimeoutStep::Abort);
  c.abort_sent = true;
  c.abort_ns = clock.now_ns();
  EXPECT_EQ(step_after(clock, 299, c, limit, true), TimeoutStep::None);  // the Abort's time
  EXPECT_EQ(step_after(clock, 1, c, limit, true), TimeoutStep::Reset);
}

// Reconnect.IoTimeoutWithoutReconnectFailsTheCommand and the Connect slot: with no admin queue to
// ask for an Abort, the first timeout resets (or fails) the connection at once.
TEST(HostTiming, IoTimeoutWithoutAbortResetsAtOnce) {
  FakeClock clock;
  const uint64_t limit = 200 * kNsPerMs;
  CommandTimes c{clock.now_ns(), false, 0};
  EXPECT_EQ(step_after(clock, 199, c, limit, false), TimeoutStep::None);
  EXPECT_EQ(step_after(clock, 1, c, limit, false), TimeoutStep::Reset);
}

// KeepAlive.* and HostTarget's keep-alive test idle for several KATOs on real time: what they
// rely on is this interval.
TEST(HostTiming, KeepAliveInterval) {
  EXPECT_EQ(keep_alive_interval_ms(1000, 0), 500u);  // half the timeout: one late packet is no loss
  EXPECT_EQ(keep_alive_interval_ms(500, 0), 250u);
  EXPECT_EQ(keep_alive_interval_ms(1000, 100), 100u);  // as configured
  EXPECT_EQ(keep_alive_interval_ms(1, 0), 1u);          // never a zero-length timer
}

TEST(HostTiming, ShutdownWaitFollowsRtd3eThenCapTo) {
  const uint64_t cap_to_2s = uint64_t(4) << 24;  // CAP.TO in 500 ms units
  EXPECT_EQ(shutdown_timeout_ms(3'000'000, cap_to_2s), 3000u);  // RTD3E, when reported, wins
  EXPECT_EQ(shutdown_timeout_ms(1'500'001, 0), 1501u);          // rounded up to whole ms
  EXPECT_EQ(shutdown_timeout_ms(0, cap_to_2s), 2000u);          // else CAP.TO
  EXPECT_EQ(shutdown_timeout_ms(0, 0), kMinShutdownWaitMs);     // a controller that reports nothing
  EXPECT_EQ(shutdown_timeout_ms(0, uint64_t(0xFF) << 24), kMaxShutdownWaitMs);  // 127.5 s: capped
  EXPECT_EQ(shutdown_timeout_ms(~0u, 0), kMaxShutdownWaitMs);
}

TEST(HostTiming, RealClockAgreesWithTheReactor) {
  // Per-command stamps come from the reactor's turn time, checks from now_ns(): one timebase.
  nvtcp::reactor::Reactor r(8);
  r.run_once(0);
  const uint64_t before = nvtcp::reactor::monotonic_ns();
  const uint64_t turn = monotonic_clock().turn_ns(r);
  const uint64_t after = monotonic_clock().now_ns();
  EXPECT_LE(turn, before);
  EXPECT_LE(before, after);
  FakeClock fake(42);
  EXPECT_EQ(fake.turn_ns(r), 42u);
}

TEST(HostTiming, WaitsOnAFakeClockReReadItEveryMillisecond) {
  // The real clock lets a waiter sleep the whole delay; a fake one, which a test steps without
  // waking anyone, is looked at again after at most kFakeClockPollNs.
  using nvtcp::reactor::kFakeClockPollNs;
  EXPECT_EQ(monotonic_clock().poll_period_ns(5 * kNsPerMs), 5 * kNsPerMs);
  FakeClock fake;
  EXPECT_EQ(fake.poll_period_ns(5 * kNsPerMs), kFakeClockPollNs);
  EXPECT_EQ(fake.poll_period_ns(kFakeClockPollNs / 2), kFakeClockPollNs / 2);
}

}  // namespace

}  // namespace host_timing_test

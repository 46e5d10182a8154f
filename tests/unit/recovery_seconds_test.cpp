// SPDX-License-Identifier: Apache-2.0
// The one conversion of recovery options from seconds (nvme-cli's units) to ControllerOptions,
// which the CLI, the engine's configuration and the fio engine all call: its rounding, its
// ranges, and that a refusal leaves the options alone.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "nvtcp/host.hpp"

namespace recovery_seconds_test {

namespace {

using nvtcp::host::apply_recovery_seconds;
using nvtcp::host::ControllerOptions;
using nvtcp::host::RecoverySeconds;

// The five options apply_recovery_seconds sets, in the order RecoverySeconds lists them
// (ctrl_loss_tmo, reconnect_delay, fast_io_fail_tmo, keep_alive_tmo, io_timeout): compared
// in one check that prints them all when any differs.
using Ms = std::tuple<uint32_t, uint32_t, int32_t, uint32_t, uint32_t>;
Ms ms_of(const ControllerOptions& o) {
  return {o.ctrl_loss_tmo_ms, o.reconnect_delay_ms, o.fast_io_fail_tmo_ms, o.kato_ms, o.io_timeout_ms};
}
void set_ms(ControllerOptions& o, const Ms& ms) {
  std::tie(o.ctrl_loss_tmo_ms, o.reconnect_delay_ms, o.fast_io_fail_tmo_ms, o.kato_ms, o.io_timeout_ms) = ms;
}

TEST(RecoverySeconds, EmptyLeavesEveryOptionAsItIs) {
  ControllerOptions o;
  set_ms(o, Ms(7, 8, 9, 10, 11));
  std::string err;
  ASSERT_TRUE(apply_recovery_seconds({}, o, err)) << err;
  EXPECT_EQ(ms_of(o), Ms(7, 8, 9, 10, 11));
}

TEST(RecoverySeconds, SecondsBecomeMillisecondsRoundedToTheNearest) {
  ControllerOptions o;
  const RecoverySeconds s{.ctrl_loss_tmo = 600, .reconnect_delay = 0.25, .fast_io_fail_tmo = 1.0004,
                          .keep_alive_tmo = 30, .io_timeout = 2.0006};
  std::string err;
  ASSERT_TRUE(apply_recovery_seconds(s, o, err)) << err;
  EXPECT_EQ(ms_of(o), Ms(600'000, 250, 1000, 30'000, 2001));
}

TEST(RecoverySeconds, ZeroMeansOffExceptForTheReconnectDelay) {
  ControllerOptions o;
  RecoverySeconds s;
  s.ctrl_loss_tmo = 0;   // no reconnect
  s.keep_alive_tmo = 0;  // no keep-alive
  s.io_timeout = 0;      // no timeout
  s.fast_io_fail_tmo = -1;
  std::string err;
  ASSERT_TRUE(apply_recovery_seconds(s, o, err)) << err;
  EXPECT_EQ(o.ctrl_loss_tmo_ms, 0u);
  EXPECT_EQ(o.kato_ms, 0u);
  EXPECT_EQ(o.io_timeout_ms, 0u);
  EXPECT_EQ(o.fast_io_fail_tmo_ms, -1);

  // A zero delay would retry in a tight loop: refused, and a delay under half a millisecond
  // is 1 ms rather than 0.
  RecoverySeconds zero;
  zero.reconnect_delay = 0;
  EXPECT_FALSE(apply_recovery_seconds(zero, o, err));
  EXPECT_NE(err.find("reconnect_delay"), std::string::npos) << err;
  RecoverySeconds tiny;
  tiny.reconnect_delay = 0.0001;
  ASSERT_TRUE(apply_recovery_seconds(tiny, o, err)) << err;
  EXPECT_EQ(o.reconnect_delay_ms, 1u);
}

TEST(RecoverySeconds, OutOfRangeIsRefusedByNameAndChangesNothing) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* name;
    std::optional<double> RecoverySeconds::*field;
    double value;
  };
  const Case cases[] = {
      {"ctrl_loss_tmo", &RecoverySeconds::ctrl_loss_tmo, -1},  // nvme-cli's "forever" is not offered
      {"ctrl_loss_tmo", &RecoverySeconds::ctrl_loss_tmo, 1e6 + 1},
      {"reconnect_delay", &RecoverySeconds::reconnect_delay, -2},
      {"fast_io_fail_tmo", &RecoverySeconds::fast_io_fail_tmo, -0.5},
      {"fast_io_fail_tmo", &RecoverySeconds::fast_io_fail_tmo, -2},
      {"keep_alive_tmo", &RecoverySeconds::keep_alive_tmo, nan},
      {"io_timeout", &RecoverySeconds::io_timeout, inf},
  };
  for (const Case& c : cases) {
    ControllerOptions o;
    RecoverySeconds s;
    s.ctrl_loss_tmo = 5;  // valid, and must not be applied either when another value is refused
    s.*c.field = c.value;
    std::string err;
    EXPECT_FALSE(apply_recovery_seconds(s, o, err)) << c.name << " = " << c.value;
    EXPECT_NE(err.find(c.name), std::string::npos) << err;
    EXPECT_EQ(o.ctrl_loss_tmo_ms, ControllerOptions{}.ctrl_loss_tmo_ms) << c.name;
    EXPECT_EQ(o.fast_io_fail_tmo_ms, ControllerOptions{}.fast_io_fail_tmo_ms) << c.name;
  }
  // The largest accepted value still fits the options' milliseconds.
  ControllerOptions o;
  RecoverySeconds s;
  s.ctrl_loss_tmo = 1e6;
  s.fast_io_fail_tmo = 1e6;
  std::string err;
  ASSERT_TRUE(apply_recovery_seconds(s, o, err)) << err;
  EXPECT_EQ(o.ctrl_loss_tmo_ms, 1'000'000'000u);
  EXPECT_EQ(o.fast_io_fail_tmo_ms, 1'000'000'000);
}

}  // namespace

}  // namespace recovery_seconds_test

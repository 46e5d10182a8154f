// SPDX-License-Identifier: Apache-2.0
// Keep-alive: a host that stops sending Keep Alive loses its controller after KATO, and
// the target frees everything that controller held.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "test_target.hpp"

namespace keep_alive_test {

using namespace nvtcp;

// Real time on purpose: this is the end-to-end view (the host library's queue pair sees its
// connection end and fails new I/O). When expiry falls due, to the millisecond, is tested on a
// stepped clock in tests/unit/connection_deadlines_test.cpp; the waits here allow 6 x KATO.
TEST(KeepAlive, SilentHostLosesItsControllerAfterKato) {
  test::RunningTarget t;
  host::ControllerOptions o;
  o.kato_ms = 500;
  o.keep_alive_interval_ms = 60000;  // effectively never: the target must notice
  std::string err;
  auto ctrl = host::Controller::connect(t.trid(), o, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  auto& sub = *t.target().state().subsystems()[0];
  EXPECT_EQ(sub.controller_count(), 1u);
  // Expiry tears the controller down; its I/O queue is closed too.
  EXPECT_TRUE(test::wait_for([&] { return sub.controller_count() == 0; }, 3000));
  EXPECT_TRUE(test::wait_for([&] {
    qp->process_completions(1000);
    return qp->failed();
  }, 3000));
  std::vector<uint8_t> buf(512);
  EXPECT_NE(qp->read(2, 0, 1, buf.data(), nullptr, nullptr), 0);
}

// Real time on purpose: what keeps the controller alive here is the host library's own Keep
// Alive timer, across two KATOs. That any admin command (Keep Alive among them) starts KATO
// again on the target is tested on a stepped clock in tests/unit/connection_deadlines_test.cpp.
TEST(KeepAlive, HostThatSendsKeepAliveStays) {
  test::RunningTarget t;
  host::ControllerOptions o;
  // The default interval, KATO/2: a Keep Alive every second against a KATO of 2 s, so only a
  // thread kept off a CPU for a whole second on a loaded machine would fail this.
  o.kato_ms = 2000;
  std::string err;
  auto ctrl = host::Controller::connect(t.trid(), o, err);
  ASSERT_TRUE(ctrl) << err;
  // Real time on purpose: what is tested is that the host's timer keeps a real target's KATO
  // timer from firing, two timeouts long. The interval the host picks is stepped on a fake
  // clock in HostTiming.KeepAliveInterval, and when a live controller sends it in
  // HostSteppedClock.KeepAliveGoesOutAtTheInterval; here only the margin (1 s of 2) matters.
  std::this_thread::sleep_for(std::chrono::milliseconds(4500));
  EXPECT_EQ(t.target().state().subsystems()[0]->controller_count(), 1u);
  EXPECT_FALSE(ctrl->failed());
}

}  // namespace keep_alive_test

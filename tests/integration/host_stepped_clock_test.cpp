// SPDX-License-Identifier: Apache-2.0
// The host's timing on a stepped clock, against a real target: a live controller and queue pair
// get a reactor::FakeClock before they connect (detail::ControllerSeam), and each timeout,
// delay and interval is checked at its boundary, 1 ms before (not yet) and 1 ms after (done).
// The pure decisions are unit-tested in tests/unit/host_timing_test.cpp; the same flows on real
// time, with wide margins, stay in reconnect_test.cpp and keep_alive_test.cpp.
//
// How a step is seen: the host's waits on a fake clock re-read it at least every
// reactor::kFakeClockPollNs of real time (Clock::poll_period_ns). settle() does that for this
// thread's reactor (the I/O queue pair's) and ControllerSeam::settle_admin() for the admin
// thread: after them, whatever is due at the clock's reading has been decided. What it leads to
// over the network is then waited for (done) or checked by an admin command sent after it on
// the same connection (not done: the Identify's answer shows nothing went before it).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "auth/keys.hpp"
#include "fault_proxy.hpp"
#include "host_recovery.hpp"
#include "host/queue_pair_impl.hpp"
#include "host/test_seams.hpp"
#include "nvtcp/host.hpp"
#include "nvtcp/identify.hpp"
#include "reactor/clock.hpp"
#include "reactor/reactor.hpp"
#include "test_target.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::test::host_stepped_clock_test {
namespace {

using namespace recovery;

using host::Completion;
using host::ControllerOptions;
using host::QueuePair;
using host::detail::ControllerSeam;
using host::detail::QueueState;
using reactor::FakeClock;

// A command capsule without in-capsule data or digests, as Keep Alive, Abort and Identify go out.
constexpr uint64_t kCmdBytes = sizeof(wire::CapsuleCmdHeader);

// Runs this thread's reactor (the queue pair's) until every timer armed before the call has
// fired: on a fake clock none is armed for longer than kFakeClockPollNs of real time, and the
// last turn below starts that long after the call.
void settle(QueuePair& qp) {
  const uint64_t since = reactor::monotonic_ns();
  while (reactor::monotonic_ns() < since + reactor::kFakeClockPollNs) qp.process_completions(200);
  qp.process_completions(0);
}

// Host-to-target bytes of admin connection `conn` once an Identify sent now has been answered:
// the answer shows every command the host sent on it before the Identify has passed the proxy.
uint64_t admin_bytes_through_identify(host::Controller& c, const FaultProxy& p, int conn) {
  alignas(8) uint8_t id[nvme::kIdentifyLen];
  Completion cpl = c.identify(uint8_t(nvme::Cns::Controller), 0, id);
  EXPECT_TRUE(cpl.status.ok()) << nvme::status_name(cpl.status);
  return p.bytes(conn, Direction::ToTarget);
}

// Queue pairs of this process that are connecting or connected (not waiting to reconnect,
// not failed): the admin queue exists only from a reconnect attempt on.
uint32_t queue_pairs_connecting_or_ready() {
  uint32_t n = 0;
  for (QueueState s : {QueueState::Idle, QueueState::TcpConnecting, QueueState::AwaitICResp, QueueState::AwaitConnect,
                       QueueState::Ready})
    n += host::detail::queue_pairs_in_state(s);
  return n;
}

// A re-authentication whose commands get no answer gives up at 30 s of the queue's clock (no
// io_timeout set), fails the connection (no reconnect here) and says why, rather than holding the
// caller for ever.
TEST(HostSteppedClock, ReauthenticationGivesUpOnAControllerThatStopsAnswering) {
  const std::string key = "DHHC-1:00:AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAl7OaH:";
  const std::string host = "nqn.2026-12.io.nvtcp:reauth-stepped";
  target::TargetConfig cfg = default_config();
  auto& sc = cfg.subsystems.at(0);
  sc.allow_any_host = false;
  sc.hosts = {host};
  auto secret = std::make_shared<auth::DhchapSecret>();
  std::string err;
  ASSERT_TRUE(auth::parse_dhchap_secret(key, *secret, err)) << err;
  sc.host_keys[host].dhchap = secret;
  RunningTarget t(cfg);
  FaultProxy proxy(t.port());
  FakeClock clk;
  ControllerSeam seam(clk);
  ControllerOptions o;
  o.hostnqn = host;
  o.kato_ms = 0;
  o.dhchap_secret = key;
  HostSession s;
  ASSERT_TRUE(open_session(via(proxy.port()), o, 4, s));
  ASSERT_EQ(proxy.accepted(), 2u);  // 0: admin, 1: the queue pair
  proxy.stall(1, Direction::ToTarget, true);
  std::atomic<bool> stop{false};
  std::thread stepper([&] {
    while (!stop) {
      clk.step_ms(1000);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  const int rc = s.qp->reauthenticate(err);
  stop = true;
  stepper.join();
  EXPECT_EQ(rc, -EIO) << err;
  EXPECT_NE(err.find("Authentication Send"), std::string::npos) << err;
  EXPECT_TRUE(s.qp->failed()) << "the connection was given up";
}

// Keep Alive goes out when the controller's clock reaches the interval, and not before: counted
// as command capsules on the admin connection, with an Identify after each step as the marker.
TEST(HostSteppedClock, KeepAliveGoesOutAtTheInterval) {
  RunningTarget t;
  FaultProxy proxy(t.port());
  FakeClock clk;
  ControllerSeam seam(clk);
  ControllerOptions o;
  o.kato_ms = 30000;  // the target's KATO runs on real time: far beyond this test's length
  o.keep_alive_interval_ms = 1000;
  std::string err;
  auto ctrl = host::Controller::connect(via(proxy.port()), o, err);
  ASSERT_TRUE(ctrl) << err;
  ASSERT_EQ(proxy.accepted(), 1u);
  uint64_t before = admin_bytes_through_identify(*ctrl, proxy, 0);
  for (int round = 0; round < 2; ++round) {
    clk.step_ms(999);  // the interval counts from the last Keep Alive, 1 ms past the last due time
    ASSERT_TRUE(seam.settle_admin());
    uint64_t now = admin_bytes_through_identify(*ctrl, proxy, 0);
    EXPECT_EQ(now - before, kCmdBytes) << "round " << round << ": a Keep Alive went out before the interval";
    before = now;
    clk.step_ms(2);
    ASSERT_TRUE(seam.settle_admin());
    now = admin_bytes_through_identify(*ctrl, proxy, 0);
    EXPECT_EQ(now - before, 2 * kCmdBytes) << "round " << round << ": no Keep Alive at the interval";
    before = now;
  }
  EXPECT_TRUE(ctrl->live());
}

// io_timeout on a command the target never sees: an Abort at io_timeout, a reset io_timeout after
// the Abort, the reconnect reconnect_delay after the reset, and the command completes on the new
// connection.
TEST(HostSteppedClock, IoTimeoutAbortsThenResetsThenReconnectsAfterTheDelay) {
  RunningTarget t;
  FaultProxy proxy(t.port());
  FakeClock clk;
  ControllerSeam seam(clk);
  ControllerOptions o = recovering_options();
  o.io_timeout_ms = 300;
  HostSession s;
  ASSERT_TRUE(open_session(via(proxy.port()), o, 8, s));
  auto& ctrl = s.ctrl;
  auto& qp = s.qp;
  ASSERT_EQ(proxy.accepted(), 2u);  // 0: admin, 1: the queue pair
  proxy.stall(1, Direction::ToTarget, true);
  std::vector<uint8_t> buf(4096, 0xEE);
  Outcome out;
  uint64_t admin_before = admin_bytes_through_identify(*ctrl, proxy, 0);
  ASSERT_EQ(qp->read(1, 0, 8, buf.data(), Outcome::cb, &out), 0);  // on the wire at the clock's reading

  clk.step_ms(299);
  settle(*qp);
  ASSERT_TRUE(seam.settle_admin());
  uint64_t admin_now = admin_bytes_through_identify(*ctrl, proxy, 0);
  EXPECT_EQ(admin_now - admin_before, kCmdBytes) << "an Abort before io_timeout";
  admin_before = admin_now;

  clk.step_ms(2);  // 301: Abort
  settle(*qp);
  ASSERT_TRUE(seam.settle_admin());
  admin_now = admin_bytes_through_identify(*ctrl, proxy, 0);
  EXPECT_EQ(admin_now - admin_before, 2 * kCmdBytes) << "no Abort at io_timeout";
  EXPECT_TRUE(qp->connected());
  EXPECT_EQ(out.done, 0);

  clk.step_ms(299);  // 600: io_timeout after the Abort is at 601
  settle(*qp);
  ASSERT_TRUE(seam.settle_admin());
  EXPECT_TRUE(qp->connected()) << "reset before io_timeout had passed since the Abort";
  EXPECT_EQ(ctrl->resets(), 0u);
  EXPECT_TRUE(ctrl->live());

  clk.step_ms(2);  // 602: reset
  settle(*qp);
  EXPECT_FALSE(qp->connected());
  ASSERT_TRUE(seam.settle_admin());
  EXPECT_EQ(ctrl->resets(), 1u);
  EXPECT_FALSE(ctrl->live());
  EXPECT_EQ(out.done, 0);  // held for the next connection

  // The admin thread reconnects reconnect_delay (100 ms) after the reset, on the same clock.
  EXPECT_EQ(queue_pairs_connecting_or_ready(), 0u);
  clk.step_ms(99);
  settle(*qp);
  ASSERT_TRUE(seam.settle_admin());
  EXPECT_EQ(queue_pairs_connecting_or_ready(), 0u) << "a reconnect attempt before reconnect_delay";
  EXPECT_EQ(proxy.accepted(), 2u);
  clk.step_ms(2);
  ASSERT_TRUE(wait_for([&] { return ctrl->live(); }, 10000));
  // The I/O queue's own delay (counted from its loss, the same step) has passed too: it
  // reconnects and the held read completes on the new connection.
  ASSERT_TRUE(poll_until(*qp, [&] { return out.done == 1; }, 10000));
  EXPECT_TRUE(out.st.ok()) << nvme::status_name(out.st);
  EXPECT_EQ(buf[0], 0);  // the null namespace reads zeros
  EXPECT_EQ(qp->reconnects(), 1u);
  EXPECT_EQ(ctrl->resets(), 1u);
}

// Without reconnect the timed-out command ends as aborted by the host, at io_timeout after its
// Abort and not before, and the queue pair fails.
TEST(HostSteppedClock, IoTimeoutWithoutReconnectFailsTheCommand) {
  RunningTarget t;
  FaultProxy proxy(t.port());
  FakeClock clk;
  ControllerSeam seam(clk);
  ControllerOptions o;  // ctrl_loss_tmo 0: no reconnect
  o.io_timeout_ms = 200;
  HostSession s;
  ASSERT_TRUE(open_session(via(proxy.port()), o, 8, s));
  auto& qp = s.qp;
  proxy.stall(1, Direction::ToTarget, true);
  std::vector<uint8_t> buf(4096);
  Outcome out;
  uint64_t admin_before = admin_bytes_through_identify(*s.ctrl, proxy, 0);
  ASSERT_EQ(qp->read(1, 0, 8, buf.data(), Outcome::cb, &out), 0);
  clk.step_ms(199);
  settle(*qp);
  ASSERT_TRUE(seam.settle_admin());
  uint64_t admin_now = admin_bytes_through_identify(*s.ctrl, proxy, 0);
  EXPECT_EQ(admin_now - admin_before, kCmdBytes) << "an Abort before io_timeout";
  admin_before = admin_now;
  clk.step_ms(2);  // 201: the Abort
  settle(*qp);
  ASSERT_TRUE(seam.settle_admin());
  admin_now = admin_bytes_through_identify(*s.ctrl, proxy, 0);
  EXPECT_EQ(admin_now - admin_before, 2 * kCmdBytes) << "no Abort at io_timeout";
  clk.step_ms(198);  // 399
  settle(*qp);
  EXPECT_EQ(out.done, 0);
  EXPECT_FALSE(qp->failed());
  EXPECT_TRUE(qp->connected());
  clk.step_ms(2);  // 401: io_timeout since the Abort
  ASSERT_TRUE(poll_until(*qp, [&] { return out.done == 1; }, 10000));
  EXPECT_EQ(out.st, nvme::sc::HostAbortedCommand);
  EXPECT_TRUE(qp->failed());
  EXPECT_EQ(qp->read(1, 0, 8, buf.data(), Outcome::cb, &out), -ENOTCONN);
}

// Nobody comes back: held commands fail with a path error at ctrl_loss_tmo after the loss, and
// not before; the queue pair fails and refuses new I/O; the controller gives up at its first
// reconnect attempt past ctrl_loss_tmo.
TEST(HostSteppedClock, CtrlLossTmoFailsHeldCommands) {
  auto target = std::make_unique<RunningTarget>();
  FakeClock clk;
  ControllerSeam seam(clk);
  ControllerOptions o = recovering_options();
  o.ctrl_loss_tmo_ms = 600;
  HostSession s;
  ASSERT_TRUE(open_session(via(target->port()), o, 8, s));
  auto& ctrl = s.ctrl;
  auto& qp = s.qp;
  target.reset();
  // The loss is noticed on real sockets while the clock stands still: it dates from now.
  ASSERT_TRUE(poll_until(*qp, [&] { return !qp->connected() && !ctrl->live(); }, 10000));
  std::vector<uint8_t> buf(4096);
  Outcome out;
  ASSERT_EQ(qp->read(2, 0, 8, buf.data(), Outcome::cb, &out), 0);  // held for a reconnect
  for (int ms = 0; ms < 599; ms += 100) {  // attempts every reconnect_delay, all refused
    clk.step_ms(std::min(100, 599 - ms));
    settle(*qp);
    ASSERT_TRUE(seam.settle_admin());
  }
  EXPECT_EQ(out.done, 0) << "held I/O failed before ctrl_loss_tmo";
  EXPECT_FALSE(qp->failed());
  EXPECT_FALSE(ctrl->failed());
  clk.step_ms(2);  // 601
  settle(*qp);
  EXPECT_EQ(out.done, 1);
  EXPECT_EQ(out.st, nvme::sc::TransportError);
  EXPECT_TRUE(qp->failed());
  EXPECT_EQ(qp->read(2, 0, 8, buf.data(), Outcome::cb, &out), -ENOTCONN);
  // The controller decides at its attempts (every reconnect_delay): the next one is at most a
  // delay away, and an attempt that is still running when the clock moves only moves it later.
  for (int i = 0; i < 20 && !ctrl->failed(); ++i) {
    clk.step_ms(100);
    ASSERT_TRUE(seam.settle_admin());
    wait_for([&] { return ctrl->failed(); }, 50);
  }
  EXPECT_TRUE(ctrl->failed());
}

// fast_io_fail_tmo: while the target is unreachable, held I/O fails at fast_io_fail_tmo after the
// loss and not before, and new I/O is refused; once the target is reachable again the queue
// reconnects and I/O flows.
TEST(HostSteppedClock, FastIoFailThenRecover) {
  RunningTarget t;
  FaultProxy proxy(t.port());
  FakeClock clk;
  ControllerSeam seam(clk);
  ControllerOptions o = recovering_options();
  o.fast_io_fail_tmo_ms = 300;
  HostSession s;
  ASSERT_TRUE(open_session(via(proxy.port()), o, 8, s));
  auto& ctrl = s.ctrl;
  auto& qp = s.qp;
  std::vector<uint8_t> buf(4096);
  Outcome out;
  proxy.refuse(true);
  proxy.stall(-1, Direction::ToHost, true);  // the read below stays unanswered
  ASSERT_EQ(qp->read(2, 0, 8, buf.data(), Outcome::cb, &out), 0);
  proxy.cut_all();
  ASSERT_TRUE(poll_until(*qp, [&] { return !qp->connected(); }, 10000));  // the loss, at the clock's reading
  clk.step_ms(299);
  settle(*qp);
  EXPECT_EQ(out.done, 0) << "held I/O failed before fast_io_fail_tmo";
  clk.step_ms(2);
  settle(*qp);
  EXPECT_EQ(out.done, 1);
  EXPECT_EQ(out.st, nvme::sc::TransportError);
  EXPECT_FALSE(qp->failed());
  EXPECT_EQ(qp->read(2, 0, 8, buf.data(), Outcome::cb, &out), -ENOTCONN);
  proxy.stall(-1, Direction::ToHost, false);
  proxy.refuse(false);
  // The next attempts (every reconnect_delay) find the target again.
  for (int i = 0; i < 50 && !qp->connected(); ++i) {
    clk.step_ms(100);
    ASSERT_TRUE(seam.settle_admin());
    poll_until(*qp, [&] { return qp->connected(); }, 50);
  }
  ASSERT_TRUE(qp->connected());
  EXPECT_TRUE(ctrl->live());
  ASSERT_EQ(qp->read(2, 0, 8, buf.data(), Outcome::cb, &out), 0);
  ASSERT_TRUE(poll_until(*qp, [&] { return out.done == 2; }, 10000));
  EXPECT_TRUE(out.st.ok()) << nvme::status_name(out.st);
}

// An admin command that is never answered resets the controller at admin_timeout and not
// before; the controller and its I/O queue come back.
TEST(HostSteppedClock, AdminTimeoutResetsTheController) {
  RunningTarget t;
  FaultProxy proxy(t.port());
  FakeClock clk;
  ControllerSeam seam(clk);
  ControllerOptions o = recovering_options();
  o.admin_timeout_ms = 300;
  HostSession s;
  ASSERT_TRUE(open_session(via(proxy.port()), o, 8, s));
  auto& ctrl = s.ctrl;
  auto& qp = s.qp;
  proxy.stall(0, Direction::ToHost, true);
  const uint64_t before = proxy.bytes(0, Direction::ToTarget);
  // The Identify waits for its answer: another thread sends it while this one steps the clock.
  auto identify = std::async(std::launch::async, [&] {
    alignas(8) uint8_t id[nvme::kIdentifyLen];
    return ctrl->identify(uint8_t(nvme::Cns::Controller), 0, id);
  });
  ASSERT_TRUE(proxy.wait_until([&](const FaultProxy& p) { return p.bytes(0, Direction::ToTarget) > before; }, 10000));
  clk.step_ms(299);
  ASSERT_TRUE(seam.settle_admin());
  EXPECT_EQ(identify.wait_for(std::chrono::seconds(0)), std::future_status::timeout) << "ended before admin_timeout";
  EXPECT_EQ(ctrl->resets(), 0u);
  EXPECT_TRUE(ctrl->live());
  clk.step_ms(2);
  ASSERT_TRUE(seam.settle_admin());
  EXPECT_EQ(ctrl->resets(), 1u);
  ASSERT_EQ(identify.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_FALSE(identify.get().status.ok());
  // The reconnect comes reconnect_delay after the reset.
  clk.step_ms(101);
  ASSERT_TRUE(wait_for([&] { return ctrl->live(); }, 10000));
  alignas(8) uint8_t id[nvme::kIdentifyLen];
  Completion c = ctrl->identify(uint8_t(nvme::Cns::Controller), 0, id);
  EXPECT_TRUE(c.status.ok()) << nvme::status_name(c.status);
  // The I/O queue belonged to the old association: it notices at its next tick, and reconnects
  // reconnect_delay after that.
  for (int i = 0; i < 50 && !(qp->reconnects() >= 1 && qp->connected()); ++i) {
    clk.step_ms(100);
    poll_until(*qp, [&] { return qp->reconnects() >= 1 && qp->connected(); }, 50);
  }
  ASSERT_TRUE(qp->reconnects() >= 1 && qp->connected());
  std::vector<uint8_t> buf(4096);
  Outcome out;
  ASSERT_EQ(qp->read(1, 0, 8, buf.data(), Outcome::cb, &out), 0);
  ASSERT_TRUE(poll_until(*qp, [&] { return out.done == 1; }, 10000));
  EXPECT_TRUE(out.st.ok()) << nvme::status_name(out.st);
}

}  // namespace
}  // namespace nvtcp::test::host_stepped_clock_test

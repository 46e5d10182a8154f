// SPDX-License-Identifier: Apache-2.0
// The host's multipath against the nvtcp target with one subsystem on two listeners (ANA
// reporting on): both optimized paths carry I/O in turn; ANA states set on the target move the
// I/O (optimized first, non-optimized only when no optimized path is up, none through an
// inaccessible one); a listener cut while verified writes and reads run loses no command and
// gives the application no error, and the path comes back by itself once the listener does;
// with no path at all, commands wait for one (or fail after no_path_timeout_ms); the paths of
// the discovery log; a path that could not connect at first joins later; a path whose namespace
// is another (same NQN, another NGUID) never joins; a target that answers ANA statuses while
// its log says optimized bounces a command only max_failovers times; a path that comes back
// connects its queue while the other paths' I/O goes on.
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>

#include "../support/fault_proxy.hpp"
#include "nvtcp/multipath.hpp"
#include "reactor/reactor.hpp"
#include "test_devices.hpp"
#include "test_target.hpp"

namespace nvtcp::test::multipath_test {
namespace {

using host::MultipathController;
using host::MultipathOptions;
using host::MultipathQueuePair;
using nvme::AnaState;

constexpr uint32_t kRamNs = 2;  // 64 MiB of 512-byte blocks
constexpr uint32_t kSlotBlocks = 8;
constexpr uint32_t kSlotBytes = kSlotBlocks * 512;

target::TargetConfig two_listener_config() {
  target::TargetConfig cfg = default_config();
  cfg.listeners.push_back({"127.0.0.1", 0});
  cfg.subsystems[0].ana_reporting = true;
  return cfg;
}

host::ControllerOptions path_options() {
  host::ControllerOptions o;
  o.reconnect_delay_ms = 100;
  o.ctrl_loss_tmo_ms = 120000;
  o.connect_timeout_ms = 2000;
  return o;
}

// Keeps up to qd commands outstanding over slots [0, slots) of the RAM namespace: a write of
// each slot's pattern for `seed`, or a read compared with it. `between` runs every poll (the
// test's chance to change the target mid-run); the run ends when every slot is done.
struct IoRun {
  MultipathQueuePair& qp;
  uint32_t slots = 256;
  uint32_t qd = 16;
  uint64_t errors = 0;        // completions with an error status
  uint64_t mismatches = 0;    // reads that came back different
  nvme::Status first_error;

  struct Slot {
    IoRun* run;
    uint32_t index;
    bool write;
    uint64_t seed;
    std::vector<uint8_t> buf;
  };

  bool go(bool write, uint64_t seed, const std::function<void(uint32_t done)>& between = {}) {
    std::vector<Slot> s(slots);
    uint32_t next = 0, done = 0, inflight = 0;
    auto cb = [](void* ctx, const host::Completion& c) {
      auto* sl = static_cast<Slot*>(ctx);
      IoRun& r = *sl->run;
      if (!c.status.ok()) {
        if (!r.errors++) r.first_error = c.status;
      } else if (!sl->write && sl->buf != pattern(kSlotBytes, sl->seed * 1000 + sl->index)) {
        ++r.mismatches;
      }
      sl->buf.clear();
      sl->buf.shrink_to_fit();
      sl->seed = ~0ull;  // marks it done
    };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (done < slots && std::chrono::steady_clock::now() < deadline) {
      while (next < slots && inflight < qd) {
        Slot& sl = s[next];
        sl = {this, next, write, seed, write ? pattern(kSlotBytes, seed * 1000 + next) : std::vector<uint8_t>(kSlotBytes)};
        const int rc = write ? qp.write(kRamNs, uint64_t(next) * kSlotBlocks, kSlotBlocks, sl.buf.data(), cb, &sl)
                             : qp.read(kRamNs, uint64_t(next) * kSlotBlocks, kSlotBlocks, sl.buf.data(), cb, &sl);
        if (rc == -EBUSY) break;
        EXPECT_EQ(rc, 0);
        if (rc) return false;
        ++next;
        ++inflight;
      }
      const int n = qp.process_completions(1000);
      inflight -= uint32_t(n);
      done += uint32_t(n);
      if (between) between(done);
    }
    EXPECT_EQ(done, slots) << "commands never completed";
    return done == slots;
  }
};

class Multipath : public ::testing::Test {
 protected:
  void SetUp() override { t_ = std::make_unique<RunningTarget>(two_listener_config()); }
  host::TransportId trid(size_t listener) const {
    host::TransportId t = t_->trid(kTestNqn, kRamNs);
    t.trsvcid = t_->port(listener);
    return t;
  }
  std::unique_ptr<MultipathController> connect(MultipathOptions mo = {}) {
    std::string err;
    auto mp = MultipathController::connect({trid(0), trid(1)}, path_options(), mo, err);
    EXPECT_TRUE(mp) << err;
    return mp;
  }
  std::string set(size_t listener, AnaState s) {
    return t_->target().live_config().set_ana_state(kTestNqn, "127.0.0.1", t_->port(listener), 0, s);
  }
  // Waits until the host's controller on path i has read the state from log 0Ch.
  static bool host_sees(MultipathController& mp, size_t i, AnaState s) {
    return wait_for([&] { return mp.path(i, kRamNs).ana == s; }, 10000);
  }
  // Reads every slot back and counts which path took them.
  static void reads(MultipathQueuePair& qp, uint64_t seed, uint64_t& on0, uint64_t& on1) {
    const uint64_t a = qp.path_commands(0), b = qp.path_commands(1);
    IoRun run{qp};
    run.slots = 64;
    ASSERT_TRUE(run.go(false, seed));
    EXPECT_EQ(run.errors, 0u) << nvme::status_name(run.first_error);
    EXPECT_EQ(run.mismatches, 0u);
    on0 = qp.path_commands(0) - a;
    on1 = qp.path_commands(1) - b;
  }
  std::unique_ptr<RunningTarget> t_;
};

TEST_F(Multipath, BothOptimizedPathsCarryIoInTurnAndEitherReadsWhatTheOtherWrote) {
  auto mp = connect();
  ASSERT_TRUE(mp);
  ASSERT_EQ(mp->path_count(), 2u);
  std::string err;
  auto qp = mp->create_io_qpair(32, err);
  ASSERT_TRUE(qp) << err;
  EXPECT_EQ(qp->block_size(kRamNs), 512u);
  for (size_t i = 0; i < 2; ++i) {
    const host::PathStatus ps = mp->path(i, kRamNs);
    EXPECT_TRUE(ps.connected);
    EXPECT_EQ(ps.ana, AnaState::Optimized);
    // The controllers report ANA: the host read log 0Ch on each.
    auto c = mp->controller(i);
    ASSERT_TRUE(c);
    EXPECT_TRUE(c->identify_controller().cmic & nvme::kCmicAna);
    EXPECT_GE(c->ana_generation(), 1u);
  }
  // Both controllers are the same host to the subsystem.
  EXPECT_EQ(mp->controller(0)->hostnqn(), mp->controller(1)->hostnqn());
  EXPECT_NE(mp->controller(0)->cntlid(), mp->controller(1)->cntlid());
  IoRun run{*qp};
  ASSERT_TRUE(run.go(true, 1));
  EXPECT_EQ(run.errors, 0u);
  uint64_t on0 = 0, on1 = 0;
  reads(*qp, 1, on0, on1);
  // Round-robin: one path, then the other (a split command would count once per path).
  EXPECT_GE(on0, 31u);
  EXPECT_GE(on1, 31u);
  EXPECT_EQ(qp->failovers(), 0u);
  EXPECT_EQ(qp->outstanding(), 0u);
}

TEST_F(Multipath, IoFollowsTheAnaStatesTheTargetSets) {
  auto mp = connect();
  ASSERT_TRUE(mp);
  std::string err;
  auto qp = mp->create_io_qpair(32, err);
  ASSERT_TRUE(qp) << err;
  IoRun run{*qp};
  run.slots = 64;
  ASSERT_TRUE(run.go(true, 2));
  uint64_t on0 = 0, on1 = 0;

  ASSERT_EQ(set(0, AnaState::Inaccessible), "");
  ASSERT_TRUE(host_sees(*mp, 0, AnaState::Inaccessible));
  reads(*qp, 2, on0, on1);
  EXPECT_EQ(on0, 0u) << "I/O went to an inaccessible path";
  EXPECT_GE(on1, 64u);

  // Non-optimized on 0, optimized on 1: the optimized one takes it all.
  ASSERT_EQ(set(0, AnaState::NonOptimized), "");
  ASSERT_TRUE(host_sees(*mp, 0, AnaState::NonOptimized));
  reads(*qp, 2, on0, on1);
  EXPECT_EQ(on0, 0u);
  EXPECT_GE(on1, 64u);

  // No optimized path left: the non-optimized one serves.
  ASSERT_EQ(set(1, AnaState::Inaccessible), "");
  ASSERT_TRUE(host_sees(*mp, 1, AnaState::Inaccessible));
  reads(*qp, 2, on0, on1);
  EXPECT_GE(on0, 64u);
  EXPECT_EQ(on1, 0u);

  // Both optimized again: both in turn.
  ASSERT_EQ(set(0, AnaState::Optimized), "");
  ASSERT_EQ(set(1, AnaState::Optimized), "");
  ASSERT_TRUE(host_sees(*mp, 0, AnaState::Optimized));
  ASSERT_TRUE(host_sees(*mp, 1, AnaState::Optimized));
  reads(*qp, 2, on0, on1);
  EXPECT_GE(on0, 31u);
  EXPECT_GE(on1, 31u);
}

TEST_F(Multipath, CommandsOnAPathThatTurnsInaccessibleMoveWithoutAnError) {
  auto mp = connect();
  ASSERT_TRUE(mp);
  std::string err;
  auto qp = mp->create_io_qpair(32, err);
  ASSERT_TRUE(qp) << err;
  IoRun run{*qp};
  run.slots = 2048;
  run.qd = 32;
  // States flip while 32 writes are outstanding; every write must still succeed.
  int step = 0;
  ASSERT_TRUE(run.go(true, 3, [&](uint32_t done) {
    if (done > 256 && step == 0) {
      ++step;
      EXPECT_EQ(set(0, AnaState::Inaccessible), "");
    } else if (done > 1024 && step == 1) {
      ++step;
      EXPECT_EQ(set(0, AnaState::Optimized), "");
      EXPECT_EQ(set(1, AnaState::Change), "");
    }
  }));
  EXPECT_EQ(run.errors, 0u) << nvme::status_name(run.first_error);
  ASSERT_EQ(set(1, AnaState::Optimized), "");
  IoRun check{*qp};
  check.slots = 2048;
  check.qd = 32;
  ASSERT_TRUE(check.go(false, 3));
  EXPECT_EQ(check.errors, 0u) << nvme::status_name(check.first_error);
  EXPECT_EQ(check.mismatches, 0u);
}

TEST_F(Multipath, ACutListenerLosesNoCommandAndItsPathComesBackByItself) {
  auto mp = connect();
  ASSERT_TRUE(mp);
  std::string err;
  auto qp = mp->create_io_qpair(32, err);
  ASSERT_TRUE(qp) << err;
  const uint16_t port0 = t_->port(0);
  IoRun run{*qp};
  run.slots = 4096;
  bool cut = false;
  uint64_t on1_at_cut = 0;
  ASSERT_TRUE(run.go(true, 4, [&](uint32_t done) {
    if (!cut && done > 512) {
      cut = true;
      on1_at_cut = qp->path_commands(1);
      EXPECT_EQ(t_->target().live_config().remove_listener(kTestNqn, "127.0.0.1", port0), "");
    }
  }));
  ASSERT_TRUE(cut);
  EXPECT_EQ(run.errors, 0u) << nvme::status_name(run.first_error);
  EXPECT_GT(qp->path_commands(1), on1_at_cut + 1024) << "the live path did not take the I/O over";
  RecordProperty("failovers", std::to_string(qp->failovers()));
  EXPECT_TRUE(wait_for([&] { return !mp->path(0, kRamNs).connected; }, 5000));

  IoRun check{*qp};
  check.slots = 4096;
  ASSERT_TRUE(check.go(false, 4));
  EXPECT_EQ(check.errors, 0u) << nvme::status_name(check.first_error);
  EXPECT_EQ(check.mismatches, 0u);

  // The listener comes back on its port: the path reconnects by itself and takes I/O again.
  target::ListenerConfig lc;
  lc.port = port0;
  ASSERT_EQ(t_->target().live_config().add_listener(kTestNqn, lc), "");
  ASSERT_TRUE(wait_for([&] { return mp->path(0, kRamNs).connected; }, 20000));
  uint64_t on0 = 0, on1 = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (on0 == 0 && std::chrono::steady_clock::now() < until) reads(*qp, 4, on0, on1);
  EXPECT_GT(on0, 0u) << "the path that came back takes no I/O";
  EXPECT_GE(mp->path(0, kRamNs).resets, 1u);
}

TEST_F(Multipath, WithNoPathCommandsWaitForOneOrFailAfterNoPathTimeout) {
  MultipathOptions mo;
  auto mp = connect(mo);
  ASSERT_TRUE(mp);
  std::string err;
  auto qp = mp->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  const uint16_t p0 = t_->port(0), p1 = t_->port(1);
  ASSERT_EQ(t_->target().live_config().remove_listener(kTestNqn, "127.0.0.1", p0), "");
  ASSERT_EQ(t_->target().live_config().remove_listener(kTestNqn, "127.0.0.1", p1), "");
  ASSERT_TRUE(wait_for([&] { return !mp->path(0, kRamNs).connected && !mp->path(1, kRamNs).connected; }, 5000));

  std::vector<uint8_t> buf(512);
  struct Done {
    bool done = false;
    nvme::Status st;
  } d;
  auto cb = [](void* ctx, const host::Completion& c) {
    static_cast<Done*>(ctx)->done = true;
    static_cast<Done*>(ctx)->st = c.status;
  };
  ASSERT_EQ(qp->read(kRamNs, 0, 1, buf.data(), cb, &d), 0);
  for (int i = 0; i < 200 && !d.done; ++i) qp->process_completions(1000);
  EXPECT_FALSE(d.done) << "completed with no path: " << nvme::status_name(d.st);
  EXPECT_EQ(qp->waiting(), 1u);
  target::ListenerConfig lc;
  lc.port = p1;
  ASSERT_EQ(t_->target().live_config().add_listener(kTestNqn, lc), "");
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!d.done && std::chrono::steady_clock::now() < until) qp->process_completions(1000);
  ASSERT_TRUE(d.done);
  EXPECT_TRUE(d.st.ok()) << nvme::status_name(d.st);

  // With a no-path timeout, a command that finds no path fails with a path error once it passes.
  qp.reset();
  mp.reset();
  mo.no_path_timeout_ms = 200;
  host::TransportId only = trid(0);
  only.trsvcid = p1;  // the port it was given back (port(1) counts configured listeners only)
  mp = MultipathController::connect({only}, path_options(), mo, err);
  ASSERT_TRUE(mp) << err;
  qp = mp->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  ASSERT_EQ(t_->target().live_config().remove_listener(kTestNqn, "127.0.0.1", p1), "");
  ASSERT_TRUE(wait_for([&] { return !mp->path(0, kRamNs).connected; }, 5000));
  d = {};
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(qp->read(kRamNs, 0, 1, buf.data(), cb, &d), 0);
  while (!d.done && std::chrono::steady_clock::now() < t0 + std::chrono::seconds(10)) qp->process_completions(1000);
  ASSERT_TRUE(d.done);
  EXPECT_EQ(d.st, nvme::sc::TransportError);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
}

// Every path's controller lost for good (ctrl_loss_tmo passed): no path has a queue, yet the
// thread's reactor still turns in process_completions(), so whatever else it carries goes on
// (a ublk device's block requests come in on it, and its stop needs them answered).
TEST_F(Multipath, WithEveryPathLostTheThreadsReactorStillTurns) {
  host::ControllerOptions o = path_options();
  o.ctrl_loss_tmo_ms = 300;
  MultipathOptions mo;
  mo.path_retry_ms = 60000;  // the lost paths stay without a controller for the test
  std::string err;
  auto mp = MultipathController::connect({trid(0), trid(1)}, o, mo, err);
  ASSERT_TRUE(mp) << err;
  auto qp = mp->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  const uint16_t p0 = t_->port(0), p1 = t_->port(1);
  ASSERT_EQ(t_->target().live_config().remove_listener(kTestNqn, "127.0.0.1", p0), "");
  ASSERT_EQ(t_->target().live_config().remove_listener(kTestNqn, "127.0.0.1", p1), "");
  auto lost = [&](size_t i) {
    auto c = mp->controller(i);
    return !c || c->failed();
  };
  ASSERT_TRUE(wait_for([&] { return lost(0) && lost(1); }, 10000))
      << "the paths' controllers were not given up after ctrl_loss_tmo";
  for (int i = 0; i < 20; ++i) qp->process_completions(1000);  // lets the lost queues go
  reactor::Reactor* r = reactor::Reactor::current();
  ASSERT_NE(r, nullptr);
  bool ran = false;
  r->post([&] { ran = true; });
  for (int i = 0; i < 5 && !ran; ++i) qp->process_completions(1000);
  EXPECT_TRUE(ran) << "the thread's reactor stood still while no path had a queue";
}

TEST_F(Multipath, TheDiscoveryLogGivesEveryPath) {
  host::TransportId d = trid(0);
  std::string err;
  auto mp = MultipathController::connect_discovered(d, kTestNqn, path_options(), {}, err);
  ASSERT_TRUE(mp) << err;
  ASSERT_EQ(mp->path_count(), 2u);
  std::vector<uint16_t> ports{mp->path(0, kRamNs).trid.trsvcid, mp->path(1, kRamNs).trid.trsvcid};
  std::sort(ports.begin(), ports.end());
  std::vector<uint16_t> want{t_->port(0), t_->port(1)};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(ports, want);
  EXPECT_EQ(mp->path(0, kRamNs).trid.nsid, kRamNs);
  EXPECT_FALSE(MultipathController::connect_discovered(d, "nqn.2026-11.io.nvtcp:nobody", path_options(), {}, err));
  EXPECT_NE(err.find("no TCP path"), std::string::npos) << err;
}

TEST_F(Multipath, APathThatCouldNotConnectJoinsOnceItsListenerIsUp) {
  const uint16_t later = unused_port();
  ASSERT_NE(later, 0);
  host::TransportId late = trid(0);
  late.trsvcid = later;
  MultipathOptions mo;
  mo.path_retry_ms = 100;
  std::string err;
  auto mp = MultipathController::connect({late, trid(1)}, path_options(), mo, err);
  ASSERT_TRUE(mp) << err;
  EXPECT_FALSE(mp->controller(0));
  auto qp = mp->create_io_qpair(16, err);
  ASSERT_TRUE(qp) << err;
  IoRun run{*qp};
  run.slots = 64;
  ASSERT_TRUE(run.go(true, 5));
  EXPECT_EQ(run.errors, 0u);
  uint64_t on0 = 0, on1 = 0;
  reads(*qp, 5, on0, on1);
  EXPECT_EQ(on0, 0u);
  target::ListenerConfig lc;
  lc.port = later;
  ASSERT_EQ(t_->target().live_config().add_listener(kTestNqn, lc), "");
  ASSERT_TRUE(wait_for([&] { return mp->path(0, kRamNs).connected; }, 20000));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (on0 == 0 && std::chrono::steady_clock::now() < until) reads(*qp, 5, on0, on1);
  EXPECT_GT(on0, 0u);
  // Every path must name the same subsystem.
  host::TransportId other = trid(0);
  other.subnqn = "nqn.2026-11.io.nvtcp:other";
  EXPECT_FALSE(MultipathController::connect({trid(0), other}, path_options(), mo, err));
  EXPECT_NE(err.find("two subsystems"), std::string::npos) << err;
}

// A path that joins late gets its queue while the application's thread goes on with its I/O:
// B's listener is reached through a proxy that refuses connections at first, then lets B's
// controller connect and holds back the target's answer to B's I/O queue (its ICResp). Commands
// keep completing on A meanwhile (a queue connected on this thread, as before, would have held
// the thread for the whole connect timeout, 30 s here, then given up on that connection); once
// the answer is let through, that same connection becomes B's queue and takes I/O.
TEST_F(Multipath, APathThatComesBackConnectsItsQueueWithoutHoldingUpTheOthers) {
  FaultProxy proxy(t_->port(1));
  proxy.refuse(true);
  host::TransportId b = trid(1);
  b.trsvcid = proxy.port();
  host::ControllerOptions o = path_options();
  o.connect_timeout_ms = 30000;
  MultipathOptions mo;
  mo.path_retry_ms = 50;
  std::string err;
  auto mp = MultipathController::connect({trid(0), b}, o, mo, err);
  ASSERT_TRUE(mp) << err;
  EXPECT_FALSE(mp->controller(1));
  auto qp = mp->create_io_qpair(16, err);
  ASSERT_TRUE(qp) << err;
  IoRun run{*qp};
  run.slots = 64;
  ASSERT_TRUE(run.go(true, 8));

  // B's controller connects (its admin queue is the last connection the proxy took); this
  // thread does not poll meanwhile, so B has no I/O queue yet, and the next connection the
  // proxy takes is that queue's: the target's answers on it are held back.
  proxy.refuse(false);
  ASSERT_TRUE(wait_for([&] { return mp->path(1, kRamNs).connected; }, 20000));
  int admin = -1;
  for (int i = 0; i < 4096; ++i)
    if (proxy.bytes(i, Direction::ToTarget) > 0) admin = i;
  ASSERT_GE(admin, 0);
  const int ioq = admin + 1;
  proxy.stall(ioq, Direction::ToHost, true);
  ASSERT_TRUE(wait_for([&] {
    (void)qp->process_completions(1000);
    return proxy.bytes(ioq, Direction::ToTarget) > 0;  // its ICReq went out
  }, 20000));

  // While B's queue waits for its ICResp, A serves everything.
  uint64_t on0 = 0, on1 = 0;
  reads(*qp, 8, on0, on1);
  EXPECT_GE(on0, 64u);
  EXPECT_EQ(on1, 0u);
  EXPECT_EQ(proxy.bytes(ioq, Direction::ToHost), 0u);

  // Let the answer through: that connection is B's queue, and B takes I/O.
  proxy.stall(ioq, Direction::ToHost, false);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (on1 == 0 && std::chrono::steady_clock::now() < until) reads(*qp, 8, on0, on1);
  EXPECT_GT(on1, 0u);
  EXPECT_GT(proxy.bytes(ioq, Direction::ToHost), 0u);
  EXPECT_EQ(proxy.bytes(ioq + 1, Direction::ToTarget), 0u) << "B's queue was connected again on another connection";
  EXPECT_EQ(qp->failovers(), 0u);
}

// The same returning path whose queue never hears back: its connect, started without waiting,
// ends at connect_timeout_ms like a waited one, and the path tries again on a new connection,
// which is answered and becomes its queue. A's I/O goes on throughout.
TEST_F(Multipath, AReturningPathsQueueThatNeverConnectsTimesOutAndIsTriedAgain) {
  FaultProxy proxy(t_->port(1));
  proxy.refuse(true);
  host::TransportId b = trid(1);
  b.trsvcid = proxy.port();
  host::ControllerOptions o = path_options();
  o.connect_timeout_ms = 300;
  MultipathOptions mo;
  mo.path_retry_ms = 50;
  std::string err;
  auto mp = MultipathController::connect({trid(0), b}, o, mo, err);
  ASSERT_TRUE(mp) << err;
  auto qp = mp->create_io_qpair(16, err);
  ASSERT_TRUE(qp) << err;
  IoRun run{*qp};
  run.slots = 64;
  ASSERT_TRUE(run.go(true, 12));
  proxy.refuse(false);
  ASSERT_TRUE(wait_for([&] { return mp->path(1, kRamNs).connected; }, 20000));
  int admin = -1;
  for (int i = 0; i < 4096; ++i)
    if (proxy.bytes(i, Direction::ToTarget) > 0) admin = i;
  ASSERT_GE(admin, 0);
  const int ioq = admin + 1;
  proxy.stall(ioq, Direction::ToHost, true);  // this one never gets its ICResp
  uint64_t on0 = 0, on1 = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (on1 == 0 && std::chrono::steady_clock::now() < until) reads(*qp, 12, on0, on1);
  EXPECT_GT(on1, 0u) << "B never took I/O";
  EXPECT_EQ(proxy.bytes(ioq, Direction::ToHost), 0u);
  EXPECT_GT(proxy.bytes(ioq + 1, Direction::ToHost), 0u) << "B's queue was not tried again on a new connection";
  EXPECT_EQ(qp->failovers(), 0u);
}

// A second target with the same subsystem NQN but another namespace 2 (its own NGUID): writes
// through it would land on the wrong data, so its path never joins, at connect or on retry.
TEST_F(Multipath, APathWhoseNamespaceIsAnotherIsRefused) {
  target::TargetConfig cfg = default_config();
  cfg.subsystems[0].namespaces[1].nguid = "00112233445566778899aabbccddeeff";
  RunningTarget impostor(cfg);
  MultipathOptions mo;
  mo.path_retry_ms = 50;
  std::string err;
  auto mp = MultipathController::connect({trid(0), impostor.trid(kTestNqn, kRamNs)}, path_options(), mo, err);
  ASSERT_TRUE(mp) << err;
  EXPECT_TRUE(mp->controller(0));
  EXPECT_FALSE(mp->controller(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // several retries
  EXPECT_FALSE(mp->controller(1));
  auto qp = mp->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  uint64_t on0 = 0, on1 = 0;
  IoRun run{*qp};
  run.slots = 64;
  ASSERT_TRUE(run.go(true, 6));
  EXPECT_EQ(run.errors, 0u);
  reads(*qp, 6, on0, on1);
  EXPECT_EQ(on1, 0u);
}

}  // namespace
}  // namespace nvtcp::test::multipath_test

namespace nvtcp::test::multipath_test {
namespace {

// A target that contradicts itself: through both listeners log 0Ch says optimized, and every
// Read of namespace kLiarNs is answered with ANA Inaccessible. Each answer holds that path
// back until its controller has read the log again, which says optimized again, so the
// command would go round for ever; max_failovers ends it with the status the path gave.
class MultipathAgainstALyingTarget : public Multipath {
 protected:
  static constexpr uint32_t kLiarNs = 4;
  virtual bool reports_ana() const { return true; }
  void SetUp() override {
    target::TargetConfig cfg = two_listener_config();
    cfg.subsystems[0].ana_reporting = reports_ana();
    target::NamespaceConfig liar{kLiarNs, "null", 64ull << 20, "", 512};
    liar.name = "liar";
    cfg.subsystems[0].namespaces.push_back(liar);
    t_ = std::make_unique<RunningTarget>(
        cfg, [this](const target::NamespaceConfig& nc, std::string&) -> std::unique_ptr<backend::BlockDevice> {
          if (nc.name != "liar") return nullptr;
          auto d = std::make_unique<RefusingReadDevice>(nc.size, nvme::sc::AnaInaccessible);
          dev_ = d.get();
          return d;
        });
  }
  // One read of the lying namespace: its status, after process_completions delivered it.
  static nvme::Status read_liar(MultipathQueuePair& qp) {
    std::vector<uint8_t> buf(512);
    nvme::Status st;
    bool done = false;
    struct Ctx {
      nvme::Status* st;
      bool* done;
    } ctx{&st, &done};
    EXPECT_EQ(qp.read(kLiarNs, 0, 1, buf.data(),
                      [](void* c, const host::Completion& cpl) {
                        auto* x = static_cast<Ctx*>(c);
                        *x->st = cpl.status;
                        *x->done = true;
                      },
                      &ctx),
              0);
    EXPECT_TRUE(wait_for([&] { (void)qp.process_completions(1000); return done; }, 30000)) << "the read never ended";
    return st;
  }
  // A queue pair over both paths with that bound (mp_ keeps their controller).
  std::unique_ptr<MultipathQueuePair> queue_pair(int32_t max_failovers) {
    MultipathOptions mo;
    mo.max_failovers = max_failovers;
    mp_ = connect(mo);
    if (!mp_) return nullptr;
    std::string err;
    auto qp = mp_->create_io_qpair(32, err);
    EXPECT_TRUE(qp) << err;
    EXPECT_TRUE(dev_);
    return qp;
  }
  RefusingReadDevice* dev_ = nullptr;
  std::unique_ptr<MultipathController> mp_;
};

TEST_F(MultipathAgainstALyingTarget, ACommandRefusedOnEveryPathEndsAfterMaxFailoversWithThePathsStatus) {
  auto qp = queue_pair(6);
  ASSERT_TRUE(qp && dev_);

  const nvme::Status st = read_liar(*qp);
  EXPECT_EQ(st, nvme::sc::AnaInaccessible) << nvme::status_name(st);
  // Sent once, then moved six times, each time to a path whose log said optimized again.
  EXPECT_EQ(dev_->refused.load(), 7u);
  EXPECT_EQ(qp->failovers(), 6u);
  EXPECT_EQ(qp->failovers_exhausted(), 1u);
  EXPECT_EQ(qp->path_commands(0) + qp->path_commands(1), 7u);
  EXPECT_GE(qp->path_commands(0), 1u);
  EXPECT_GE(qp->path_commands(1), 1u);
  EXPECT_EQ(qp->outstanding(), 0u);
  // Both paths still say optimized, and the honest namespace is served through them.
  EXPECT_EQ(mp_->path(0, kRamNs).ana, AnaState::Optimized);
  EXPECT_EQ(mp_->path(1, kRamNs).ana, AnaState::Optimized);
  IoRun run{*qp};
  run.slots = 64;
  ASSERT_TRUE(run.go(true, 7));
  EXPECT_EQ(run.errors, 0u) << nvme::status_name(run.first_error);
  uint64_t on0 = 0, on1 = 0;
  reads(*qp, 7, on0, on1);
  EXPECT_EQ(qp->failovers(), 6u);
}

TEST_F(MultipathAgainstALyingTarget, WithNoFailoversAllowedTheFirstPathsStatusIsTheAnswer) {
  auto qp = queue_pair(0);
  ASSERT_TRUE(qp && dev_);
  EXPECT_EQ(read_liar(*qp), nvme::sc::AnaInaccessible);
  EXPECT_EQ(dev_->refused.load(), 1u);
  EXPECT_EQ(qp->failovers(), 0u);
  EXPECT_EQ(qp->failovers_exhausted(), 1u);
}

// The same lie from a subsystem that does not report ANA: its controllers never read log 0Ch,
// so an ANA status must not hold their path back (nothing would ever lift it, and the command
// would wait for a path for ever); it moves the command, as a lost connection does.
class MultipathAgainstALyingTargetWithoutAna : public MultipathAgainstALyingTarget {
 protected:
  bool reports_ana() const override { return false; }
};

TEST_F(MultipathAgainstALyingTargetWithoutAna, AnaStatusesMoveTheCommandWithoutHoldingThePath) {
  auto qp = queue_pair(6);
  ASSERT_TRUE(qp && dev_);
  EXPECT_EQ(mp_->controller(0)->ana_generation(), 0u);
  EXPECT_EQ(read_liar(*qp), nvme::sc::AnaInaccessible);
  EXPECT_EQ(dev_->refused.load(), 7u);
  EXPECT_EQ(qp->failovers(), 6u);
  EXPECT_EQ(qp->failovers_exhausted(), 1u);
  // Neither path was held: the honest namespace goes on through both.
  IoRun run{*qp};
  run.slots = 64;
  ASSERT_TRUE(run.go(true, 11));
  EXPECT_EQ(run.errors, 0u) << nvme::status_name(run.first_error);
  uint64_t on0 = 0, on1 = 0;
  reads(*qp, 11, on0, on1);
  EXPECT_GT(on0, 0u);
  EXPECT_GT(on1, 0u);
}

}  // namespace
}  // namespace nvtcp::test::multipath_test

// SPDX-License-Identifier: Apache-2.0
// Features that meet on one command: an I/O command of host A waits (for its namespace's rate
// limit, for the write fence a fused Compare and Write owns, as a fused pair, between the steps
// of a Dataset Management, for its data to arrive, for a turn of its reactor with room in the
// budget of work), and while it waits the world changes (an
// Abort, a reservation Preempt or Preempt and Abort by host B, A's path made inaccessible, the
// namespace masked from A, removed, removed and added again at its NSID, A's queue torn down,
// A's controller lost to keep-alive). Whatever it waited for, it must resume into the world as
// it is now: it ends with the status that world gives it, nothing of it reaches the device, it
// holds nothing (the fence, a place in a line), and host B's writes go on.
//
// The command layer runs with no socket (fake_command_transport.hpp); the rate limit's clock and
// the reactor's turns are the test's, so nothing here depends on how fast the machine is.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "fake_command_transport.hpp"
#include "nvtcp/log_pages.hpp"
#include "nvtcp/properties.hpp"
#include "target/bdevs.hpp"
#include "target/subsystem.hpp"
#include "wire/commands.hpp"
#include "wire/fabrics.hpp"
#include "wire/reservations.hpp"

namespace wait_composition_test {

using namespace nvtcp;
using namespace nvtcp::wire;
using test::command_layer::Bytes;
using test::command_layer::FakeTransport;
using test::command_layer::S;
using test::command_layer::with_sgl;

constexpr const char* kNqn = "nqn.2026-12.io.nvtcp:wait-composition";
constexpr const char* kHostA = "nqn.2026-12.io.nvtcp:host-a";
constexpr const char* kHostB = "nqn.2026-12.io.nvtcp:host-b";
constexpr uint8_t kIdA[16] = {0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa, 0xa};
constexpr uint8_t kIdB[16] = {0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb, 0xb};
constexpr uint32_t kNsid = 1;
constexpr uint64_t kBlock = 8;  // the block A's waiting command is about
constexpr uint64_t kKeyA = 0xA, kKeyB = 0xB;

// Where A's command waits when the world changes.
enum class Wait { QosWrite, QosRead, FenceWrite, FusedQos, FusedFence, DsmSteps, DataInFlight, TurnWrite };
// What changes.
enum class Change {
  Abort,
  Preempt,
  PreemptAndAbort,
  AnaInaccessible,
  Unmask,
  Remove,
  RemoveAndAddAgain,
  QueueTeardown,
  KeepAliveExpiry
};

const char* name(Wait w) {
  switch (w) {
    case Wait::QosWrite: return "QosWrite";
    case Wait::QosRead: return "QosRead";
    case Wait::FenceWrite: return "FenceWrite";
    case Wait::FusedQos: return "FusedQos";
    case Wait::FusedFence: return "FusedFence";
    case Wait::DsmSteps: return "DsmSteps";
    case Wait::DataInFlight: return "DataInFlight";
    case Wait::TurnWrite: return "TurnWrite";
  }
  return "?";
}
const char* name(Change c) {
  switch (c) {
    case Change::Abort: return "Abort";
    case Change::Preempt: return "Preempt";
    case Change::PreemptAndAbort: return "PreemptAndAbort";
    case Change::AnaInaccessible: return "AnaInaccessible";
    case Change::Unmask: return "Unmask";
    case Change::Remove: return "Remove";
    case Change::RemoveAndAddAgain: return "RemoveAndAddAgain";
    case Change::QueueTeardown: return "QueueTeardown";
    case Change::KeepAliveExpiry: return "KeepAliveExpiry";
  }
  return "?";
}

target::TargetConfig config() {
  target::TargetConfig cfg;
  cfg.listeners.push_back({"127.0.0.1", 4420});  // portid 1: host A's path
  cfg.listeners.push_back({"127.0.0.1", 4421});  // portid 2: host B's
  target::SubsystemConfig sub;
  sub.nqn = kNqn;
  sub.ana_reporting = true;
  target::NamespaceConfig ns{kNsid, "ram", 1u << 20, "", 512};
  ns.name = "ram-wait";
  ns.no_auto_visible = true;
  ns.visible_hosts = {kHostA, kHostB};
  sub.namespaces.push_back(ns);
  cfg.subsystems.push_back(sub);
  return cfg;
}

struct Host {
  std::unique_ptr<FakeTransport> admin, io;
  uint16_t cntlid = 0;
};

class WaitFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = config();
    ASSERT_EQ(target::finalize_config(cfg_), "");
    state_ = std::make_unique<target::TargetState>();
    ASSERT_EQ(target::build_state(cfg_, *state_), "");
    ASSERT_NO_FATAL_FAILURE(bring_up(a_, kIdA, kHostA, 1));
    ASSERT_NO_FATAL_FAILURE(bring_up(b_, kIdB, kHostB, 2));
    sub_ = &a_.admin->commands().controller()->subsystem();
    ns_ = sub_->find_namespace(kNsid);
    ASSERT_NE(ns_, nullptr);
  }
  void TearDown() override {
    // The queues go first: the namespaces they hold (a removed one too) outlive them.
    a_ = {};
    b_ = {};
    if (fence_held_) ns_->fence.release();
    removed_.clear();
    state_.reset();
  }

  void bring_up(Host& h, const uint8_t (&id)[16], const char* hostnqn, uint16_t portid) {
    h.admin = std::make_unique<FakeTransport>(reactor_, set_, *state_, clock_);
    h.io = std::make_unique<FakeTransport>(reactor_, set_, *state_, clock_);
    h.admin->set_portid(portid);
    h.io->set_portid(portid);
    h.admin->run(cmd::connect(0, 31, 0), connect_data(id, kDynamicCntlid, hostnqn));
    ASSERT_TRUE(h.admin->completed.back()->status.ok()) << status_name(h.admin->completed.back()->status);
    h.cntlid = uint16_t(h.admin->cqes.back().dw0);
    done(*h.admin);
    h.admin->run(with_sgl(cmd::property_set(prop::CC, prop::kCcEnableNvm), 1, 0));
    ASSERT_TRUE(done(*h.admin).ok());
    h.admin->run(with_sgl(cmd::set_number_of_queues(4, 4), 2, 0));
    ASSERT_TRUE(done(*h.admin).ok());
    h.io->run(cmd::connect(1, 31, 0), connect_data(id, h.cntlid, hostnqn));
    ASSERT_TRUE(done(*h.io).ok()) << status_name(h.io->completed.back()->status);
  }
  static Bytes connect_data(const uint8_t (&id)[16], uint16_t cntlid, const char* hostnqn) {
    return test::command_layer::bytes_of(cmd::connect_data(id, cntlid, kNqn, hostnqn));
  }
  // The last completion of q: its status, the command released.
  static Status done(FakeTransport& q) { return test::command_layer::last_status(q); }
  // The status q answered cid with, if it has.
  static bool answered(const FakeTransport& q, uint16_t cid, Status& st) {
    for (const Cqe& c : q.cqes)
      if (c.cid == cid) {
        st = Status::from_cqe(c.status);
        return true;
      }
    return false;
  }

  static Sqe block_io(IoOpcode opc, uint16_t cid, uint64_t slba) {
    return with_sgl(cmd::block_range(opc, kNsid, slba, 1), cid, 512, kSglDataBlockOffset);
  }
  static Sqe reservation(IoOpcode opc, uint16_t cid, uint32_t cdw10, uint32_t len) {
    Sqe s = with_sgl(Sqe{}, cid, len, kSglDataBlockOffset);
    s.opc = uint8_t(opc);
    s.nsid = kNsid;
    s.cdw10 = cdw10;
    return s;
  }
  static constexpr uint32_t kWriteExclusive = uint32_t(ReservationType::WriteExclusive) << 8;
  void register_key(FakeTransport& io, uint16_t cid, uint64_t key) {
    const ReservationRegisterData d{0, key};
    io.run(reservation(IoOpcode::ReservationRegister, cid, uint32_t(RegisterAction::Register), sizeof(d)),
           test::command_layer::bytes_of(d));
    ASSERT_TRUE(done(io).ok());
  }

  // The rate limit's clock moves on by slices, and the reactor runs long enough each time for
  // the waits' timers (armed on its own clock, for a slice or less) to fire.
  void run_for_ms(int ms) {
    for (int i = 0; i < ms; ++i) {
      clock_.step_ms(1);
      reactor_.run_once(1'100);  // microseconds
      reactor_.run_once(0);
    }
  }
  // Host B writes `fill` to kBlock and reads it back (both must succeed).
  void b_writes_and_reads_back(uint8_t fill) {
    b_.io->run(block_io(IoOpcode::Write, 300, kBlock), Bytes(512, fill));
    run_for_ms(3);
    Status st;
    ASSERT_TRUE(answered(*b_.io, 300, st)) << "host B's write was held";
    EXPECT_TRUE(st.ok()) << status_name(st);
    b_.io->run(with_sgl(cmd::block_range(IoOpcode::Read, kNsid, kBlock, 1), 301, 512));
    run_for_ms(3);
    ASSERT_TRUE(answered(*b_.io, 301, st)) << "host B's read was held";
    EXPECT_TRUE(st.ok()) << status_name(st);
    EXPECT_EQ(b_.io->sent.back(), Bytes(512, fill)) << "host A's command reached the block after all";
  }

  reactor::Reactor reactor_;
  reactor::FakeClock clock_;
  target::ReactorCommands set_;
  target::TargetConfig cfg_;
  std::unique_ptr<target::TargetState> state_;
  std::vector<std::unique_ptr<target::Namespace>> removed_;
  target::Subsystem* sub_ = nullptr;
  target::Namespace* ns_ = nullptr;
  bool fence_held_ = false;  // the test owns the fence, as a fused operation of another host would
  reactor::Completion line_ahead_[8] = {};  // TurnWrite: others' commands (no-ops) ahead of A's
  Host a_, b_;
};

class WaitComposition : public WaitFixture, public ::testing::WithParamInterface<std::tuple<Wait, Change>> {};

// The status host A's waiting command (or, for a fused pair, its Compare) ends with.
Status expected_status(Wait w, Change c) {
  switch (c) {
    case Change::Abort: return sc::AbortRequested;
    case Change::Preempt:
      // Write Exclusive lets every host read; the rest is A's write group.
      return w == Wait::QosRead ? sc::Success : sc::ReservationConflict;
    case Change::PreemptAndAbort: return sc::AbortedPreempt;
    case Change::AnaInaccessible: return sc::AnaInaccessible;
    case Change::Unmask:
    case Change::Remove:
    case Change::RemoveAndAddAgain: return sc::InvalidNamespace;
    case Change::QueueTeardown:
    case Change::KeepAliveExpiry: break;  // no answer: the queue is gone
  }
  return sc::Success;
}

TEST_P(WaitComposition, AWaitingCommandResumesIntoTheWorldAsItIsNow) {
  const auto [wait, change] = GetParam();
  FakeTransport& a = *a_.io;
  b_writes_and_reads_back(0x11);
  const bool reservations = change == Change::Preempt || change == Change::PreemptAndAbort;
  if (reservations) {
    // A holds Write Exclusive; B is registered, so that it can preempt A.
    ASSERT_NO_FATAL_FAILURE(register_key(a, 10, kKeyA));
    ASSERT_NO_FATAL_FAILURE(register_key(*b_.io, 10, kKeyB));
    const ReservationAcquireData acq{kKeyA, 0};
    a.run(reservation(IoOpcode::ReservationAcquire, 11, uint32_t(AcquireAction::Acquire) | kWriteExclusive,
                      sizeof(acq)),
          test::command_layer::bytes_of(acq));
    ASSERT_TRUE(done(a).ok());
  }

  // A's command starts waiting.
  const bool qos = wait == Wait::QosWrite || wait == Wait::QosRead || wait == Wait::FusedQos;
  if (qos) {
    ns_->qos.set({.rw_ios_per_sec = 1000});  // one I/O a millisecond: the first takes the slice
    a.run(with_sgl(cmd::block_range(IoOpcode::Read, kNsid, 0, 1), 19, 512));
    ASSERT_TRUE(done(a).ok());
  }
  if (wait == Wait::FenceWrite || wait == Wait::FusedFence) {
    ASSERT_TRUE(ns_->fence.try_own());
    fence_held_ = true;
  }
  if (wait == Wait::TurnWrite) {
    // A light queue and a heavy one on the reactor, and this turn's budget spent by another's
    // large command.
    using Load = target::ReactorCommands::Load;
    set_.queue_load(Load::Idle, Load::Light, reactor_.now_ns());
    set_.queue_load(Load::Idle, Load::Heavy, reactor_.now_ns());
    ASSERT_TRUE(set_.take_turn(reactor_.turn(), reactor_.now_ns(), target::ReactorCommands::kTurnBytes));
    // Others' commands wait in the line ahead of A's, one a turn: A's waits while the change
    // (an Abort goes through the reactor) reaches it.
    for (auto& f : line_ahead_) {
      f.fn = [](reactor::Completion*, int, uint32_t) {};
      set_.wait_for_turn(reactor_, &f, target::ReactorCommands::kTurnBytes);
    }
  }
  constexpr uint16_t kCid = 20, kWriteCid = 21;
  target::Command* cmd = nullptr;
  switch (wait) {
    case Wait::QosWrite:
    case Wait::FenceWrite: cmd = a.run(block_io(IoOpcode::Write, kCid, kBlock), Bytes(512, 0xAA)); break;
    case Wait::QosRead: cmd = a.run(with_sgl(cmd::block_range(IoOpcode::Read, kNsid, kBlock, 1), kCid, 512)); break;
    case Wait::FusedQos:
    case Wait::FusedFence: {
      Sqe cmp = block_io(IoOpcode::Compare, kCid, kBlock);
      cmp.flags |= kSqeFlagsFuseFirst;
      cmd = a.run(cmp, Bytes(512, 0x11));  // matches what B wrote
      Sqe wr = block_io(IoOpcode::Write, kWriteCid, kBlock);
      wr.flags |= kSqeFlagsFuseSecond;
      a.run(wr, Bytes(512, 0xAA));
      break;
    }
    case Wait::DsmSteps: {
      // Three ranges: the first deallocates now, the others wait for the next turns.
      DsmRange ranges[3] = {{0, 1, kBlock + 1}, {0, 1, kBlock + 2}, {0, 1, kBlock}};
      Bytes list(sizeof(ranges));
      std::memcpy(list.data(), ranges, sizeof(ranges));
      cmd = a.run(with_sgl(cmd::deallocate(kNsid, 3), kCid, sizeof(ranges), kSglDataBlockOffset), list);
      break;
    }
    case Wait::DataInFlight: break;  // below: the change happens while the data travels
    case Wait::TurnWrite: {           // 32 KiB: more than a write that never waits
      constexpr uint32_t kBlocks = 64;
      cmd = a.run(with_sgl(cmd::block_range(IoOpcode::Write, kNsid, kBlock, kBlocks), kCid, kBlocks * 512),
                  Bytes(kBlocks * 512, 0xAA), true);
      break;
    }
  }
  const int device_ops_before = a.device_ops();
  const S waiting_in = wait == Wait::QosWrite || wait == Wait::QosRead || wait == Wait::FusedQos ? S::AwaitingQos
                       : wait == Wait::DsmSteps                                                 ? S::BetweenSteps
                       : wait == Wait::TurnWrite                                                ? S::AwaitingTurn
                                                                                                : S::AwaitingFence;
  if (wait != Wait::DataInFlight) {
    ASSERT_NE(cmd, nullptr);
    ASSERT_EQ(cmd->state(), waiting_in) << target::command_state_name(cmd->state());
  }

  // The world changes.
  auto apply = [&] {
    switch (change) {
      case Change::Abort:
        a_.admin->run(with_sgl(cmd::abort(1, kCid), 90, 0));
        for (int i = 0; i < 20 && a_.admin->completed.empty(); ++i) reactor_.run_once(0);
        ASSERT_FALSE(a_.admin->completed.empty());
        EXPECT_EQ(a_.admin->cqes.back().dw0 & 1, 0u) << "the Abort says it did not abort the command";
        break;
      case Change::Preempt:
      case Change::PreemptAndAbort: {
        const ReservationAcquireData acq{kKeyB, kKeyA};
        const auto action = change == Change::Preempt ? AcquireAction::Preempt : AcquireAction::PreemptAndAbort;
        b_.io->run(reservation(IoOpcode::ReservationAcquire, 12, uint32_t(action) | kWriteExclusive, sizeof(acq)),
                   test::command_layer::bytes_of(acq));
        ASSERT_TRUE(done(*b_.io).ok());
        break;
      }
      case Change::AnaInaccessible: sub_->set_ana_state(1, 0, nvme::AnaState::Inaccessible); break;
      case Change::Unmask: ASSERT_EQ(sub_->set_namespace_visible(kNsid, kHostA, false), 0); break;
      case Change::Remove: removed_.push_back(sub_->detach_namespace(kNsid)); break;
      case Change::RemoveAndAddAgain: {
        removed_.push_back(sub_->detach_namespace(kNsid));
        target::NamespaceConfig nc = cfg_.subsystems[0].namespaces[0];
        nc.name = "ram-again";
        std::string err;
        auto device = backend::make_ram(1u << 20, 512, 1, err);
        ASSERT_TRUE(device) << err;
        auto again = target::make_namespace(cfg_, kNqn, nc, std::move(device), err);
        ASSERT_TRUE(again) << err;
        ASSERT_TRUE(sub_->add_namespace(std::move(again)));
        break;
      }
      case Change::QueueTeardown: a_.io.reset(); break;
      case Change::KeepAliveExpiry: a_.admin->commands().end_controller("keep-alive timeout (test)"); break;
    }
  };
  if (wait == Wait::DataInFlight) {
    a.while_data_travels = [&] { ASSERT_NO_FATAL_FAILURE(apply()); };
    if (change == Change::QueueTeardown || change == Change::Abort) GTEST_SKIP() << "the transport's to end";
    cmd = a.run(with_sgl(cmd::block_range(IoOpcode::Write, kNsid, kBlock, 1), kCid, 512), Bytes(512, 0xAA), true);
  } else {
    ASSERT_NO_FATAL_FAILURE(apply());
  }

  // What A waited for comes (the next slices, the fence let go, the next turns).
  if (fence_held_) {
    ns_->fence.release();
    fence_held_ = false;
  }
  run_for_ms(5);

  const Status want = expected_status(wait, change);
  if (change == Change::QueueTeardown) {
    EXPECT_FALSE(ns_->fence.owned()) << "a torn-down queue's fused pair still owns the fence";
  } else if (change == Change::KeepAliveExpiry) {
    EXPECT_FALSE(a.closed_why.empty()) << "the queue of a lost controller stays open";
    EXPECT_EQ(a.device_ops(), device_ops_before) << "the queue of a lost controller reached the device";
    a_.io.reset();  // the transport finishes closing: what its commands held goes
  } else {
    Status got;
    ASSERT_TRUE(answered(a, kCid, got)) << "host A's command was never answered";
    EXPECT_EQ(got, want) << "got " << status_name(got) << ", want " << status_name(want);
    if (want.ok()) {
      EXPECT_GT(a.device_ops(), device_ops_before);
    } else if (wait == Wait::DsmSteps && change == Change::Abort) {
      // The Abort reaches the I/O queue through its reactor, behind the no-op that starts the
      // next range: that range may run first; the one after it does not.
      EXPECT_LE(a.device_ops(), device_ops_before + 1) << "the aborted Dataset Management went on";
    } else {
      EXPECT_EQ(a.device_ops(), device_ops_before) << "host A's command reached the device after the change";
    }
    if (wait == Wait::FusedQos || wait == Wait::FusedFence) {
      Status wr;
      ASSERT_TRUE(answered(a, kWriteCid, wr)) << "the fused Write was never answered";
      EXPECT_EQ(wr, sc::FailedFusedCommand) << status_name(wr);
    }
  }
  EXPECT_EQ(ns_->fence.writers_waiting(), 0u) << "a write still counts as waiting for the fence";
  EXPECT_FALSE(ns_->fence.owned()) << "the fence is still owned";

  // Host B's writes go on, and A's data is not what the block holds (where B can still reach it).
  ns_->qos.set({});
  if (change != Change::Remove && change != Change::RemoveAndAddAgain) {
    ASSERT_NO_FATAL_FAILURE(b_writes_and_reads_back(0x22));
    run_for_ms(10);  // nothing of A's lands late
    b_.io->run(with_sgl(cmd::block_range(IoOpcode::Read, kNsid, kBlock, 1), 302, 512));
    Status st;
    ASSERT_TRUE(answered(*b_.io, 302, st));
    EXPECT_EQ(b_.io->sent.back(), Bytes(512, 0x22)) << "host A's write landed late over host B's";
  }
}

// A fused pair that waits for its slice of a rate limit owns nothing yet: with a limit on reads
// only, host A's pair queued behind A's own reads holds back no write of host B (which no limit
// slows), and once its slice comes the pair runs and matches.
TEST_F(WaitFixture, AFusedPairWaitingForItsSliceHoldsNoOtherHostsWrite) {
  FakeTransport& a = *a_.io;
  ns_->qos.set({.r_mbytes_per_sec = 1});  // 1 MiB/s of reads: 1,048 bytes a slice
  // Two reads take this slice and the next (each overdraws; the debt is paid from the next).
  a.run(with_sgl(cmd::block_range(IoOpcode::Read, kNsid, 0, 8), 30, 4096));
  ASSERT_TRUE(done(a).ok());
  target::Command* queued = a.run(with_sgl(cmd::block_range(IoOpcode::Read, kNsid, 0, 8), 31, 4096));
  ASSERT_EQ(queued->state(), S::AwaitingQos);
  Sqe cmp = block_io(IoOpcode::Compare, 32, kBlock);
  cmp.flags |= kSqeFlagsFuseFirst;
  target::Command* pair = a.run(cmp, Bytes(512, 0));
  Sqe wr = block_io(IoOpcode::Write, 33, kBlock);
  wr.flags |= kSqeFlagsFuseSecond;
  a.run(wr, Bytes(512, 0x5a));
  ASSERT_EQ(pair->state(), S::AwaitingQos) << target::command_state_name(pair->state());
  EXPECT_FALSE(ns_->fence.owned()) << "the pair owns the fence while it waits for its slice";

  // B writes another block at once, in this very turn.
  b_.io->run(block_io(IoOpcode::Write, 40, kBlock + 4), Bytes(512, 0x77));
  Status st;
  ASSERT_TRUE(answered(*b_.io, 40, st)) << "host B's write waits behind host A's fused pair";
  EXPECT_TRUE(st.ok());

  run_for_ms(30);  // A's read and then the pair get their slices
  ASSERT_TRUE(answered(a, 32, st)) << "the fused Compare never ran";
  EXPECT_TRUE(st.ok()) << status_name(st);
  ASSERT_TRUE(answered(a, 33, st));
  EXPECT_TRUE(st.ok()) << status_name(st);
  EXPECT_FALSE(ns_->fence.owned());
  ns_->qos.set({});
  b_.io->run(with_sgl(cmd::block_range(IoOpcode::Read, kNsid, kBlock, 1), 41, 512));
  EXPECT_EQ(b_.io->sent.back(), Bytes(512, 0x5a)) << "the pair's Write did not land";
}

// Preempt and Abort completes once the writes on the device when it took effect have ended (as
// nvmet waits for them): after it, no write of the preempted host lands over the new holder's.
// A write on the device is stood in for by a count in the namespace's fence, as a device that
// has not answered yet leaves it.
TEST_F(WaitFixture, APreemptAndAbortCompletesOnceTheWritesInFlightHaveEnded) {
  ASSERT_NO_FATAL_FAILURE(register_key(*a_.io, 10, kKeyA));
  ASSERT_NO_FATAL_FAILURE(register_key(*b_.io, 10, kKeyB));
  const ReservationAcquireData mine{kKeyA, 0};
  a_.io->run(reservation(IoOpcode::ReservationAcquire, 11, uint32_t(AcquireAction::Acquire) | kWriteExclusive,
                         sizeof(mine)),
             test::command_layer::bytes_of(mine));
  ASSERT_TRUE(done(*a_.io).ok());
  bool waiting = false;
  ASSERT_TRUE(ns_->fence.begin_write(set_.index(), waiting));  // host A's write, still on the device
  const ReservationAcquireData acq{kKeyB, kKeyA};
  target::Command* preempt = b_.io->run(
      reservation(IoOpcode::ReservationAcquire, 12, uint32_t(AcquireAction::PreemptAndAbort) | kWriteExclusive,
                  sizeof(acq)),
      test::command_layer::bytes_of(acq));
  run_for_ms(3);
  Status st;
  EXPECT_FALSE(answered(*b_.io, 12, st)) << "Preempt and Abort completed with a preempted write in flight";
  EXPECT_EQ(preempt->state(), S::AwaitingFence);
  ns_->fence.end_write(set_.index());  // the device answers
  run_for_ms(2);
  ASSERT_TRUE(answered(*b_.io, 12, st)) << "Preempt and Abort still waits once the write has ended";
  EXPECT_TRUE(st.ok()) << status_name(st);
  EXPECT_FALSE(ns_->fence.owned());
  ASSERT_NO_FATAL_FAILURE(b_writes_and_reads_back(0x33));
}

// Write Zeroes and Deallocate reach the device one by one and count against the I/O limit (as
// reads and writes do), though they move no data: 1 MiB Write Zeroes no longer run unlimited
// under rw_ios_per_sec.
TEST_F(WaitFixture, WriteZeroesAndDeallocateCountAgainstTheIoLimit) {
  FakeTransport& a = *a_.io;
  ns_->qos.set({.rw_ios_per_sec = 1000});
  a.run(with_sgl(cmd::block_range(IoOpcode::WriteZeroes, kNsid, 0, 8), 50, 0));
  ASSERT_TRUE(done(a).ok()) << "the slice's one I/O goes at once";
  target::Command* wz = a.run(with_sgl(cmd::block_range(IoOpcode::WriteZeroes, kNsid, 0, 8), 51, 0));
  EXPECT_EQ(wz->state(), S::AwaitingQos) << "a second Write Zeroes in the same slice went";
  DsmRange range{0, 8, 16};
  Bytes list(sizeof(range));
  std::memcpy(list.data(), &range, sizeof(range));
  target::Command* dsm = a.run(with_sgl(cmd::deallocate(kNsid, 1), 52, sizeof(range), kSglDataBlockOffset), list);
  EXPECT_EQ(dsm->state(), S::AwaitingQos) << "a Deallocate went past the I/O limit";
  run_for_ms(3);
  Status st;
  ASSERT_TRUE(answered(a, 51, st));
  EXPECT_TRUE(st.ok());
  ASSERT_TRUE(answered(a, 52, st));
  EXPECT_TRUE(st.ok());
  ns_->qos.set({});
}

// What the device reads for a Verify, a Compare or a Copy counts against a read limit, as a Read
// does: with the slice spent, each waits for the next.
TEST_F(WaitFixture, VerifyCompareAndCopyReadsCountAgainstTheReadLimit) {
  FakeTransport& a = *a_.io;
  ns_->qos.set({.r_mbytes_per_sec = 1});  // 1,048 bytes a slice: one 4 KiB read overdraws it
  a.run(with_sgl(cmd::block_range(IoOpcode::Read, kNsid, 0, 8), 60, 4096));
  ASSERT_TRUE(done(a).ok()) << "the slice's first read goes at once";
  target::Command* verify = a.run(with_sgl(cmd::block_range(IoOpcode::Verify, kNsid, 0, 8), 61, 0));
  EXPECT_EQ(verify->state(), S::AwaitingQos) << "a Verify read past the read limit";
  target::Command* compare = a.run(block_io(IoOpcode::Compare, 62, kBlock), Bytes(512, 0));
  EXPECT_EQ(compare->state(), S::AwaitingQos) << "a Compare read past the read limit";
  CopySourceRange range{};
  range.slba = 0;
  range.nlb = 7;
  Sqe copy = with_sgl(cmd::block_range(IoOpcode::Copy, kNsid, 64, 1), 63, sizeof(range), kSglDataBlockOffset);
  copy.cdw12 = 0;  // one range, format 0h
  Bytes list(sizeof(range));
  std::memcpy(list.data(), &range, sizeof(range));
  target::Command* copied = a.run(copy, list);
  EXPECT_EQ(copied->state(), S::AwaitingQos) << "a Copy read its source past the read limit";
  run_for_ms(60);
  for (uint16_t cid : {61, 62, 63}) {
    Status st;
    ASSERT_TRUE(answered(a, cid, st)) << "cid " << cid << " never went";
    EXPECT_TRUE(st.ok()) << "cid " << cid << ": " << status_name(st);
  }
  ns_->qos.set({});
}

INSTANTIATE_TEST_SUITE_P(
    EveryPair, WaitComposition,
    ::testing::Combine(::testing::Values(Wait::QosWrite, Wait::QosRead, Wait::FenceWrite, Wait::FusedQos,
                                         Wait::FusedFence, Wait::DsmSteps, Wait::DataInFlight, Wait::TurnWrite),
                       ::testing::Values(Change::Abort, Change::Preempt, Change::PreemptAndAbort,
                                         Change::AnaInaccessible, Change::Unmask, Change::Remove,
                                         Change::RemoveAndAddAgain, Change::QueueTeardown,
                                         Change::KeepAliveExpiry)),
    [](const ::testing::TestParamInfo<std::tuple<Wait, Change>>& p) {
      return std::string(name(std::get<0>(p.param))) + "_" + name(std::get<1>(p.param));
    });

}  // namespace wait_composition_test

// SPDX-License-Identifier: Apache-2.0
// The command layer without a transport: fabrics, admin and NVM handlers run on Commands that a
// fake CommandTransport carries (no socket, no PDUs, no copy of the TCP queue's request life).
// The fake implements the seam only (parse, a buffer, the host's data, execute; complete,
// need_buffer, abort lookup; release) and records every call; the device, the steps, the
// worker and the holds are the command layer's own code. The reactor runs only when the test
// asks: the next steps of Copy and Dataset Management and the timers wait for it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "connection_test_state.hpp"
#include "fake_command_transport.hpp"
#include "nvtcp/identify.hpp"
#include "nvtcp/properties.hpp"
#include "target/command_queue.hpp"
#include "target/subsystem.hpp"
#include "wire/changed_namespaces.hpp"
#include "wire/commands.hpp"
#include "wire/fabrics.hpp"
#include "wire/features.hpp"
#include "wire/reservations.hpp"

namespace command_queue_test {

using namespace nvtcp;
using namespace nvtcp::wire;
using S = target::Command::State;
using Bytes = std::vector<uint8_t>;

namespace {

constexpr const char* kNqn = "nqn.2026-12.io.nvtcp:command-queue";
constexpr const char* kHostNqn = "nqn.2026-12.io.nvtcp:command-queue-host";
constexpr uint8_t kHostId[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

target::TargetState& state() {
  static target::TargetState* s = test::make_connection_test_state(kNqn, [](target::TargetConfig&) {});
  return *s;
}

// The fake transport on this file's target state unless a test names another.
class FakeTransport final : public test::command_layer::FakeTransport {
 public:
  FakeTransport(reactor::Reactor& r, target::ReactorCommands& shared, target::TargetState& ts = state(),
                const reactor::Clock& clock = reactor::monotonic_clock())
      : test::command_layer::FakeTransport(r, shared, ts, clock) {}
};
using test::command_layer::bytes_of;
using test::command_layer::with_sgl;

Bytes connect_bytes(uint16_t cntlid, const uint8_t (&hostid)[16] = kHostId, const char* hostnqn = kHostNqn) {
  const ConnectData d = cmd::connect_data(hostid, cntlid, kNqn, hostnqn);
  Bytes b(sizeof(d));
  std::memcpy(b.data(), &d, sizeof(d));
  return b;
}

class CommandQueueTest : public ::testing::Test {
 protected:
  // The last command's status, its request released for the next one.
  Status last_status(FakeTransport& q) { return test::command_layer::last_status(q); }
  // An admin queue with an enabled controller (and I/O queues granted), as a host brings it up.
  void bring_up_admin(FakeTransport& admin, const uint8_t (&hostid)[16] = kHostId, const char* hostnqn = kHostNqn) {
    admin.run(cmd::connect(0, 31, 0), connect_bytes(kDynamicCntlid, hostid, hostnqn));
    ASSERT_TRUE(admin.completed.back()->status.ok()) << status_name(admin.completed.back()->status);
    cntlid = uint16_t(admin.cqes.back().dw0);
    ASSERT_TRUE(last_status(admin).ok());
    admin.run(with_sgl(cmd::property_set(prop::CC, prop::kCcEnableNvm), 1, 0));
    ASSERT_TRUE(last_status(admin).ok());
    admin.run(with_sgl(cmd::set_number_of_queues(4, 4), 2, 0));
    ASSERT_TRUE(last_status(admin).ok());
  }
  void bring_up_io(FakeTransport& io, const uint8_t (&hostid)[16] = kHostId, const char* hostnqn = kHostNqn) {
    io.run(cmd::connect(1, 31, 0), connect_bytes(cntlid, hostid, hostnqn));
    ASSERT_TRUE(last_status(io).ok());
  }

  reactor::Reactor reactor_;
  target::ReactorCommands set_;
  uint16_t cntlid = 0;
};

Sqe rw(IoOpcode opc, uint16_t cid, uint32_t nsid, uint64_t slba, uint32_t nlb, uint32_t len,
       uint8_t sgl = kSglTransportDataBlock) {
  return with_sgl(cmd::block_range(opc, nsid, slba, nlb), cid, len, sgl);
}

}  // namespace

TEST_F(CommandQueueTest, InTlsTheConnectMustNameThePsksHostAndSubsystem) {
  // The PSK identity says who the session is for; a Connect for another host or subsystem is
  // refused, whatever else allows it.
  for (const std::string& identity :
       {std::string("NVMe0R01 nqn.2026-12.io.nvtcp:someone-else ") + kNqn,
        std::string("NVMe0R01 ") + kHostNqn + " nqn.2026-12.io.nvtcp:other-subsystem",
        std::string("NVMe1R01 ") + kHostNqn + " nqn.2026-12.io.nvtcp:other-subsystem AAAA="}) {
    FakeTransport admin(reactor_, set_);
    admin.set_tls_identity(identity);
    admin.run(cmd::connect(0, 31, 0), connect_bytes(kDynamicCntlid));
    EXPECT_EQ(last_status(admin), sc::ConnectInvalidHost) << identity;
    EXPECT_FALSE(admin.commands().connected());
  }
  for (const std::string& identity : {std::string("NVMe0R01 ") + kHostNqn + " " + kNqn,
                                      std::string("NVMe1R02 ") + kHostNqn + " " + kNqn + " c29tZSBkaWdlc3Q="}) {
    FakeTransport admin(reactor_, set_);
    admin.set_tls_identity(identity);
    admin.run(cmd::connect(0, 31, 0), connect_bytes(kDynamicCntlid));
    EXPECT_TRUE(last_status(admin).ok()) << identity;
  }
}

TEST_F(CommandQueueTest, ConnectMakesAControllerOnceAndRefusesWhatItCannotServe) {
  FakeTransport admin(reactor_, set_);
  // No data: Connect's 1024 bytes come in the capsule.
  admin.run(cmd::connect(0, 31, 0));
  EXPECT_EQ(last_status(admin), sc::DataSglLengthInvalid);
  // An unknown subsystem: the offset of SUBNQN in the data, with the data bit.
  ConnectData d = cmd::connect_data(kHostId, kDynamicCntlid, "nqn.2026-12.io.nvtcp:nowhere", kHostNqn);
  admin.run(cmd::connect(0, 31, 0), bytes_of(d));
  EXPECT_EQ(admin.cqes.back().dw0, offsetof(ConnectData, subnqn) | (1u << 16));
  EXPECT_EQ(last_status(admin), sc::ConnectInvalidParameters);
  EXPECT_FALSE(admin.commands().connected());
  // Nothing but Connect runs before it.
  admin.run(with_sgl(cmd::keep_alive(), 3, 0));
  EXPECT_EQ(last_status(admin), sc::CommandSequenceError);

  admin.run(cmd::connect(0, 31, 0), connect_bytes(kDynamicCntlid));
  EXPECT_TRUE(admin.completed.back()->status.ok());
  EXPECT_NE(admin.cqes.back().dw0, 0u);  // the controller's ID
  admin.release(admin.completed.back());
  EXPECT_TRUE(admin.commands().connected());
  EXPECT_EQ(admin.commands().sqsize(), 32u);
  admin.run(cmd::connect(0, 31, 0), connect_bytes(kDynamicCntlid));
  EXPECT_EQ(last_status(admin), sc::CommandSequenceError);
  // The CQE's SQ head counts the commands taken since the queue exists: the Connect that made
  // it, and the one refused now.
  EXPECT_EQ(admin.cqes.back().sqhd, 2u);
}

TEST_F(CommandQueueTest, PropertiesEnableTheControllerAndAdminCommandsNeedIt) {
  FakeTransport admin(reactor_, set_);
  admin.run(cmd::connect(0, 31, 0), connect_bytes(kDynamicCntlid));
  ASSERT_TRUE(last_status(admin).ok());
  admin.run(with_sgl(cmd::identify(uint8_t(Cns::Controller)), 1, kIdentifyLen));
  EXPECT_EQ(last_status(admin), sc::CommandSequenceError) << "a controller that is not enabled answers nothing";
  admin.run(with_sgl(cmd::property_set(prop::CC, prop::kCcEnableNvm), 2, 0));
  ASSERT_TRUE(last_status(admin).ok());
  admin.run(with_sgl(cmd::property_get(prop::CSTS, false), 3, 0));
  EXPECT_EQ(admin.cqes.back().dw0 & 1, 1u) << "CSTS.RDY";
  ASSERT_TRUE(last_status(admin).ok());
  // Property Set on an I/O queue is not a command there.
  FakeTransport io(reactor_, set_);
  cntlid = admin.commands().controller()->cntlid();
  admin.run(with_sgl(cmd::set_number_of_queues(2, 2), 4, 0));
  ASSERT_TRUE(last_status(admin).ok());
  bring_up_io(io);
  io.run(with_sgl(cmd::property_get(prop::CSTS, false), 5, 0));
  EXPECT_EQ(last_status(io), sc::InvalidOpcode);
}

TEST_F(CommandQueueTest, IdentifyFillsFourKibAndChecksItsSgl) {
  FakeTransport admin(reactor_, set_);
  ASSERT_NO_FATAL_FAILURE(bring_up_admin(admin));
  admin.run(with_sgl(cmd::identify(uint8_t(Cns::Controller)), 10, kIdentifyLen));
  ASSERT_TRUE(admin.completed.back()->status.ok());
  ASSERT_EQ(admin.sent.back().size(), kIdentifyLen);
  IdentifyController id;
  std::memcpy(&id, admin.sent.back().data(), sizeof(id));
  EXPECT_EQ(id.cntlid, cntlid);
  EXPECT_EQ(std::string(id.subnqn, strnlen(id.subnqn, sizeof(id.subnqn))), kNqn);
  admin.release(admin.completed.back());
  // Data for the host travels in a transport data block, within MDTS.
  admin.run(with_sgl(cmd::identify(uint8_t(Cns::Controller)), 11, kIdentifyLen, kSglDataBlockOffset));
  EXPECT_EQ(last_status(admin), sc::SglDescriptorTypeInvalid);
  admin.run(with_sgl(cmd::identify(uint8_t(Cns::Controller)), 12, state().config.mdts_bytes + 4096));
  EXPECT_EQ(last_status(admin), sc::InvalidField);
  admin.run(with_sgl(cmd::identify(uint8_t(Cns::Controller)), 13, 512));
  EXPECT_EQ(last_status(admin), sc::DataSglLengthInvalid);
  EXPECT_EQ(admin.device_ops(), 0);
}

TEST_F(CommandQueueTest, ALogPageLargerThanItsBufferAsksForOneAndIsBuiltAgain) {
  FakeTransport admin(reactor_, set_);
  ASSERT_NO_FATAL_FAILURE(bring_up_admin(admin));
  // A fresh slot has no buffer: the log's size is known once it is built, so the handler asks
  // for a buffer and runs again; the window past the log's end is zeros.
  const uint32_t window = 16384;
  admin.drop_idle_buffers();  // Connect's data buffer, among others
  admin.run(with_sgl(cmd::get_log_page(uint8_t(LogPageId::SmartHealth), kNsidAll, window), 20, window));
  ASSERT_TRUE(admin.completed.back()->status.ok());
  EXPECT_EQ(admin.buffer_requests, 1);
  EXPECT_EQ(admin.sent.back().size(), window);
  EXPECT_GE(admin.completed.back()->buf_cap, 512u) << "a buffer the size of the log";
  EXPECT_LT(admin.completed.back()->buf_cap, window) << "not of the window";
  admin.release(admin.completed.back());
  // A Get Log Page whose length and SGL disagree fails before anything is built.
  Sqe bad = with_sgl(cmd::get_log_page(uint8_t(LogPageId::SmartHealth), kNsidAll, 512), 21, 1024);
  admin.run(bad);
  EXPECT_EQ(last_status(admin), sc::DataSglLengthInvalid);
}

// A changed-namespace list goes once a read of it is delivered, not when another command
// with data is: a Get Features answered while the log's read waits for its buffer leaves the
// list for that read.
TEST_F(CommandQueueTest, ALogReadThatWaitsForItsBufferKeepsItsListWhileOtherDataIsSent) {
  FakeTransport admin(reactor_, set_);
  ASSERT_NO_FATAL_FAILURE(bring_up_admin(admin));
  admin.commands().controller()->subsystem().notify_namespace_changed(1);
  reactor_.run_once(1'000'000);  // the notice reaches the controller on its admin queue's reactor
  admin.drop_idle_buffers();
  admin.hold_next_buffer_request = true;
  const uint32_t len = wire::ChangedNamespaceList::kLogBytes;
  auto first_nsid = [&] {
    uint32_t nsid = ~0u;
    std::memcpy(&nsid, admin.sent.back().data(), 4);
    return nsid;
  };
  admin.run(with_sgl(cmd::get_log_page(uint8_t(LogPageId::ChangedNamespaces), kNsidAll, len), 30, len));
  ASSERT_EQ(admin.waiting_for_buffer.size(), 1u);
  ASSERT_TRUE(admin.completed.empty());
  // Meanwhile the host reads its Host Identifier (data from a buffer of its own).
  admin.run(with_sgl(cmd::get_features(kFeatureHostIdentifier, kSelCurrent, 0, 1), 31, 16), {});
  ASSERT_TRUE(last_status(admin).ok());
  admin.give_held_buffers();
  ASSERT_EQ(admin.completed.size(), 1u);
  ASSERT_TRUE(admin.completed.back()->status.ok());
  EXPECT_EQ(first_nsid(), 1u) << "the list was taken by the Get Features";
  admin.release(admin.completed.back());
  admin.completed.clear();
  // Delivered once, it is gone.
  admin.run(with_sgl(cmd::get_log_page(uint8_t(LogPageId::ChangedNamespaces), kNsidAll, len), 32, len));
  ASSERT_TRUE(admin.completed.back()->status.ok());
  EXPECT_EQ(first_nsid(), 0u);
}

TEST_F(CommandQueueTest, SetFeaturesTakesItsDataInTheCapsuleOrByR2T) {
  FakeTransport admin(reactor_, set_);
  ASSERT_NO_FATAL_FAILURE(bring_up_admin(admin));
  const Bytes behavior(kHostBehaviorLen, 0);
  Sqe set = with_sgl(cmd::set_features(kFeatureHostBehaviorSupport, 0), 30, kHostBehaviorLen, kSglDataBlockOffset);
  admin.run(set, behavior);
  EXPECT_TRUE(last_status(admin).ok());
  EXPECT_EQ(admin.r2t_transfers, 0);
  set = with_sgl(cmd::set_features(kFeatureHostBehaviorSupport, 0), 31, kHostBehaviorLen);
  admin.run(set, behavior, true);
  EXPECT_TRUE(last_status(admin).ok());
  EXPECT_EQ(admin.r2t_transfers, 1);
  // In the capsule, the data must be all of it.
  set = with_sgl(cmd::set_features(kFeatureHostBehaviorSupport, 0), 32, kHostBehaviorLen, kSglDataBlockOffset);
  admin.run(set, Bytes(kHostBehaviorLen / 2, 0));
  EXPECT_EQ(last_status(admin), sc::DataSglLengthInvalid);
}

TEST_F(CommandQueueTest, ReadsAndWritesGoToTheDeviceAndComeBackWithTheirData) {
  FakeTransport admin(reactor_, set_), io(reactor_, set_);
  ASSERT_NO_FATAL_FAILURE(bring_up_admin(admin));
  ASSERT_NO_FATAL_FAILURE(bring_up_io(io));
  Bytes data(1024);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 7 + 1);
  io.run(rw(IoOpcode::Write, 40, test::kConnRamNsid, 8, 2, 1024), data, true);
  EXPECT_TRUE(last_status(io).ok());
  io.run(rw(IoOpcode::Read, 41, test::kConnRamNsid, 8, 2, 1024));
  ASSERT_TRUE(io.completed.back()->status.ok());
  EXPECT_EQ(io.sent.back(), data);
  io.release(io.completed.back());
  // Compare: equal, then one byte off.
  io.run(rw(IoOpcode::Compare, 42, test::kConnRamNsid, 8, 2, 1024, kSglDataBlockOffset), data);
  EXPECT_TRUE(last_status(io).ok());
  data[700] ^= 1;
  io.run(rw(IoOpcode::Compare, 43, test::kConnRamNsid, 8, 2, 1024, kSglDataBlockOffset), data);
  EXPECT_EQ(last_status(io), sc::CompareFailure);
  EXPECT_EQ(io.device_ops(), 4);
  // Checks before the device: the SGL's length, the range, MDTS, the namespace.
  io.run(rw(IoOpcode::Read, 44, test::kConnRamNsid, 8, 2, 512));
  EXPECT_EQ(last_status(io), sc::DataSglLengthInvalid);
  io.run(rw(IoOpcode::Read, 45, test::kConnRamNsid, (4u << 20) / 512 - 1, 2, 1024));
  EXPECT_EQ(last_status(io), sc::LbaOutOfRange);
  const uint32_t too_long = state().config.mdts_bytes / 512 + 1;
  io.run(rw(IoOpcode::Read, 46, test::kConnRamNsid, 0, too_long, too_long * 512));
  EXPECT_EQ(last_status(io), sc::InvalidField);
  io.run(rw(IoOpcode::Read, 47, 9, 0, 1, 512));
  EXPECT_EQ(last_status(io), sc::InvalidNamespace);
  io.run(rw(IoOpcode::Write, 48, test::kConnRamNsid, 0, 1, 512, kSglDataBlockOffset), Bytes(256, 0));
  EXPECT_EQ(last_status(io), sc::DataSglLengthInvalid) << "in-capsule data shorter than the write";
  EXPECT_EQ(io.device_ops(), 4) << "nothing that failed its checks reached the device";
}

TEST_F(CommandQueueTest, VerifyReadsAndSendsNothingWriteZeroesZeroes) {
  FakeTransport admin(reactor_, set_), io(reactor_, set_);
  ASSERT_NO_FATAL_FAILURE(bring_up_admin(admin));
  ASSERT_NO_FATAL_FAILURE(bring_up_io(io));
  io.run(rw(IoOpcode::Write, 50, test::kConnRamNsid, 100, 1, 512, kSglDataBlockOffset), Bytes(512, 0xee));
  EXPECT_TRUE(last_status(io).ok());
  io.run(rw(IoOpcode::Verify, 51, test::kConnRamNsid, 100, 1, 0));
  ASSERT_TRUE(io.completed.back()->status.ok());
  EXPECT_TRUE(io.sent.back().empty());
  io.release(io.completed.back());
  io.run(rw(IoOpcode::WriteZeroes, 52, test::kConnRamNsid, 100, 1, 0));
  EXPECT_TRUE(last_status(io).ok());
  io.run(rw(IoOpcode::Read, 53, test::kConnRamNsid, 100, 1, 512));
  EXPECT_EQ(io.sent.back(), Bytes(512, 0));
  EXPECT_TRUE(last_status(io).ok());
}

TEST_F(CommandQueueTest, DatasetManagementAndCopyTakeOneRangePerStep) {
  FakeTransport admin(reactor_, set_), io(reactor_, set_);
  ASSERT_NO_FATAL_FAILURE(bring_up_admin(admin));
  ASSERT_NO_FATAL_FAILURE(bring_up_io(io));
  // Three source blocks, each its own pattern, gathered at 200..202 by one Copy of three ranges.
  for (uint32_t b = 0; b < 3; ++b) {
    io.run(rw(IoOpcode::Write, uint16_t(60 + b), test::kConnRamNsid, 10 + 5 * b, 1, 512, kSglDataBlockOffset),
           Bytes(512, uint8_t(0xa0 + b)));
    ASSERT_TRUE(last_status(io).ok());
  }
  CopySourceRange ranges[3] = {};
  for (uint32_t b = 0; b < 3; ++b) {
    ranges[b].slba = 10 + 5 * b;
    ranges[b].nlb = 0;
  }
  Sqe copy = with_sgl(cmd::block_range(IoOpcode::Copy, test::kConnRamNsid, 200, 1), 63, sizeof(ranges),
                      kSglDataBlockOffset);
  copy.cdw12 = 3 - 1;  // NR, 0's based; format 0h
  Bytes list(sizeof(ranges));
  std::memcpy(list.data(), ranges, sizeof(ranges));
  target::Command* r = io.run(copy, list);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->state(), S::BetweenSteps) << "the next range waits for the next turn";
  EXPECT_EQ(io.command_count(S::BetweenSteps), 1u);
  EXPECT_EQ(io.run_next_steps(), 1u);
  EXPECT_EQ(io.run_next_steps(), 1u);
  EXPECT_EQ(io.run_next_steps(), 1u);  // the last step finds no range left and completes
  EXPECT_EQ(io.run_next_steps(), 0u);
  EXPECT_TRUE(last_status(io).ok());
  for (uint32_t b = 0; b < 3; ++b) {
    io.run(rw(IoOpcode::Read, uint16_t(70 + b), test::kConnRamNsid, 200 + b, 1, 512));
    EXPECT_EQ(io.sent.back(), Bytes(512, uint8_t(0xa0 + b))) << "block " << b;
    EXPECT_TRUE(last_status(io).ok());
  }
  // Deallocate two ranges (an empty one between them is skipped); an Abort between the steps
  // ends it at the next one.
  DsmRange dsm[3] = {{0, 1, 200}, {0, 0, 0}, {0, 1, 201}};
  Sqe dealloc = with_sgl(cmd::deallocate(test::kConnRamNsid, 3), 74, sizeof(dsm), kSglDataBlockOffset);
  Bytes dsm_list(sizeof(dsm));
  std::memcpy(dsm_list.data(), dsm, sizeof(dsm));
  r = io.run(dealloc, dsm_list);
  ASSERT_EQ(r->state(), S::BetweenSteps);
  // As the I/O queue's reactor runs an Abort the controller posted to it.
  EXPECT_TRUE(io.commands().controller()->io_queues.find(1).queue->abort_command(74));
  EXPECT_EQ(io.run_next_steps(), 1u);
  EXPECT_EQ(last_status(io), sc::AbortRequested);
  io.run(rw(IoOpcode::Read, 75, test::kConnRamNsid, 201, 1, 512));
  EXPECT_EQ(io.sent.back(), Bytes(512, 0xa1)) << "the range after the abort is left alone";
  EXPECT_TRUE(last_status(io).ok());
  // A range outside the namespace fails the whole command before any step.
  dsm[0].slba = (4u << 20) / 512;
  std::memcpy(dsm_list.data(), dsm, sizeof(dsm));
  const int ops = io.device_ops();
  io.run(with_sgl(cmd::deallocate(test::kConnRamNsid, 3), 76, sizeof(dsm), kSglDataBlockOffset), dsm_list);
  EXPECT_EQ(last_status(io), sc::LbaOutOfRange);
  EXPECT_EQ(io.device_ops(), ops);
}

TEST_F(CommandQueueTest, AFusedCompareNotFollowedByItsWriteFailsAndTheNextCommandRuns) {
  FakeTransport admin(reactor_, set_), io(reactor_, set_);
  ASSERT_NO_FATAL_FAILURE(bring_up_admin(admin));
  ASSERT_NO_FATAL_FAILURE(bring_up_io(io));
  Sqe cmp = rw(IoOpcode::Compare, 80, test::kConnRamNsid, 0, 1, 512, kSglDataBlockOffset);
  cmp.flags |= kSqeFlagsFuseFirst;
  target::Command* first = io.run(cmp, Bytes(512, 0));
  EXPECT_EQ(first->state(), S::AwaitingFusedPartner);
  EXPECT_TRUE(io.completed.empty());
  io.run(rw(IoOpcode::Read, 81, test::kConnRamNsid, 0, 1, 512));
  ASSERT_EQ(io.completed.size(), 2u);
  EXPECT_EQ(io.completed[0], first);
  EXPECT_EQ(io.completed[0]->status, sc::MissingFusedCommand);
  EXPECT_TRUE(io.completed[1]->status.ok()) << "the command after it runs as itself";
  // A pair on the same blocks: the Compare matches, the Write lands.
  io.release(io.completed[0]);
  io.release(io.completed[1]);
  io.completed.clear();
  cmp.cid = 82;
  io.run(cmp, Bytes(512, 0));
  Sqe wr = rw(IoOpcode::Write, 83, test::kConnRamNsid, 0, 1, 512, kSglDataBlockOffset);
  wr.flags |= kSqeFlagsFuseSecond;
  io.run(wr, Bytes(512, 0x5a));
  ASSERT_EQ(io.completed.size(), 2u);
  EXPECT_TRUE(io.completed[0]->status.ok());
  EXPECT_TRUE(io.completed[1]->status.ok());
  io.release(io.completed[0]);
  io.release(io.completed[1]);
  io.run(rw(IoOpcode::Read, 84, test::kConnRamNsid, 0, 1, 512));
  EXPECT_EQ(io.sent.back(), Bytes(512, 0x5a));
}

TEST_F(CommandQueueTest, AnAbortOfAnIoCommandIsHeldUntilItsQueueAnswers) {
  FakeTransport admin(reactor_, set_), io(reactor_, set_);
  ASSERT_NO_FATAL_FAILURE(bring_up_admin(admin));
  ASSERT_NO_FATAL_FAILURE(bring_up_io(io));
  // The I/O queue answers on its reactor, which this test has not run yet.
  target::Command* abort = admin.run(with_sgl(cmd::abort(1, 99), 90, 0));
  EXPECT_EQ(abort->state(), S::HeldAbort);
  EXPECT_EQ(admin.command_count(S::HeldAbort), 1u);
  admin.run(with_sgl(cmd::async_event_request(), 91, 0));
  EXPECT_EQ(admin.command_count(S::HeldAer), 1u);
  for (int i = 0; i < 20 && admin.completed.empty(); ++i) reactor_.run_once(1'000'000);
  ASSERT_EQ(admin.completed.size(), 1u);
  EXPECT_EQ(admin.completed.back(), abort);
  EXPECT_EQ(admin.cqes.back().cid, 90u);
  EXPECT_EQ(admin.cqes.back().dw0, 1u) << "nothing was aborted: cid 99 is not there";
}

// A read that waits for its namespace's rate limit (bdev_set_qos_limit) can be aborted: it ends
// Command Abort Requested at once, the Abort says so, and the read behind it keeps its place and
// goes with the next slice. The limit's clock is the test's: time moves only when it says.
TEST_F(CommandQueueTest, AReadWaitingForItsRateLimitCanBeAborted) {
  reactor::FakeClock clock;
  FakeTransport admin(reactor_, set_), io(reactor_, set_, state(), clock);
  ASSERT_NO_FATAL_FAILURE(bring_up_admin(admin));
  ASSERT_NO_FATAL_FAILURE(bring_up_io(io));
  target::Namespace* ns = admin.commands().controller()->subsystem().find_namespace(test::kConnRamNsid);
  ASSERT_NE(ns, nullptr);
  ns->qos.set({.rw_ios_per_sec = 1000});  // one operation a millisecond
  struct NoLimitAfter {
    target::Namespace* ns;
    ~NoLimitAfter() { ns->qos.set({}); }  // the namespace is shared with the other tests
  } reset{ns};

  target::Command* first = io.run(rw(IoOpcode::Read, 10, test::kConnRamNsid, 0, 1, 512));
  ASSERT_EQ(io.completed.size(), 1u) << "the slice's one read goes at once";
  EXPECT_TRUE(io.completed.back()->status.ok());
  io.release(first);
  target::Command* held = io.run(rw(IoOpcode::Read, 11, test::kConnRamNsid, 1, 1, 512));
  target::Command* next = io.run(rw(IoOpcode::Read, 12, test::kConnRamNsid, 2, 1, 512));
  EXPECT_EQ(held->state(), S::AwaitingQos);
  EXPECT_EQ(next->state(), S::AwaitingQos);

  target::Command* abort = admin.run(with_sgl(cmd::abort(1, 11), 90, 0));
  for (int i = 0; i < 20 && admin.completed.empty(); ++i) reactor_.run_once(1'000'000);
  ASSERT_EQ(admin.completed.size(), 1u);
  EXPECT_EQ(admin.completed.back(), abort);
  EXPECT_EQ(admin.cqes.back().dw0 & 1, 0u) << "the waiting read was not aborted";
  ASSERT_EQ(io.completed.size(), 2u);
  EXPECT_EQ(io.completed.back(), held);
  EXPECT_EQ(io.completed.back()->status, sc::AbortRequested);
  EXPECT_EQ(next->state(), S::AwaitingQos) << "the read behind it went without a slice of its own";

  clock.step_ms(1);
  for (int i = 0; i < 20 && io.completed.size() < 3; ++i) reactor_.run_once(1'000'000);
  ASSERT_EQ(io.completed.size(), 3u) << "the read behind the aborted one did not go with the next slice";
  EXPECT_EQ(io.completed.back(), next);
  EXPECT_TRUE(next->status.ok());
  EXPECT_EQ(io.command_count(S::AwaitingQos), 0u);
}

// A reservation change that must survive power loss (CPTPL) completes once its state file is
// written: the namespace's writer thread writes it, and the queue looks again on its reactor's
// timer, which this test runs only when it wants the answer.
TEST_F(CommandQueueTest, AReservationThatMustPersistWaitsForItsStateFile) {
  char dir_template[] = "/tmp/nvtcp-cq-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  {
    // State files sit next to a regular file's image, which must be there first.
    FILE* f = fopen((dir + "/ns1.img").c_str(), "w");
    ASSERT_NE(f, nullptr);
    fclose(f);
    std::filesystem::resize_file(dir + "/ns1.img", 1u << 20);
  }
  target::TargetConfig cfg;
  cfg.listeners.push_back({"127.0.0.1", 4420});
  target::SubsystemConfig sub;
  sub.nqn = kNqn;
  sub.namespaces.push_back({1, "file", 1u << 20, dir + "/ns1.img", 512});
  cfg.subsystems.push_back(sub);
  ASSERT_EQ(target::finalize_config(cfg), "");
  auto ts = std::make_unique<target::TargetState>();
  ASSERT_EQ(target::build_state(cfg, *ts), "");
  {
    FakeTransport admin(reactor_, set_, *ts), io(reactor_, set_, *ts);
    ASSERT_NO_FATAL_FAILURE(bring_up_admin(admin));
    ASSERT_NO_FATAL_FAILURE(bring_up_io(io));
    const ReservationRegisterData d{0, 0x1234};
    Sqe reg = with_sgl(Sqe{}, 100, sizeof(d), kSglDataBlockOffset);
    reg.opc = uint8_t(IoOpcode::ReservationRegister);
    reg.nsid = 1;
    reg.cdw10 = uint32_t(RegisterAction::Register) | kCptplOn << 30;
    target::Command* r = io.run(reg, bytes_of(d));
    EXPECT_EQ(r->state(), S::AwaitingDurable) << status_name(r->status);
    EXPECT_EQ(io.command_count(S::AwaitingDurable), 1u);
    EXPECT_TRUE(io.completed.empty());
    for (int i = 0; i < 2000 && io.completed.empty(); ++i) reactor_.run_once(1000);
    ASSERT_EQ(io.completed.size(), 1u);
    EXPECT_TRUE(io.completed.back()->status.ok());
    EXPECT_TRUE(std::filesystem::exists(dir + "/ns1.img.nvtcp-resv")) << "the state file is there when it completes";
  }
  ts.reset();
  std::filesystem::remove_all(dir);
}

// A write whose data comes by R2T is checked again once the data is in: a reservation another
// host took meanwhile refuses it, though its parse was allowed.
TEST_F(CommandQueueTest, AReservationTakenWhileAWritesDataTravelsRefusesTheWrite) {
  constexpr uint8_t kOtherHostId[16] = {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9};
  constexpr const char* kOtherHostNqn = "nqn.2026-12.io.nvtcp:command-queue-other-host";
  FakeTransport admin(reactor_, set_), io(reactor_, set_), other_admin(reactor_, set_), other(reactor_, set_);
  ASSERT_NO_FATAL_FAILURE(bring_up_admin(admin));
  ASSERT_NO_FATAL_FAILURE(bring_up_io(io));
  ASSERT_NO_FATAL_FAILURE(bring_up_admin(other_admin, kOtherHostId, kOtherHostNqn));
  ASSERT_NO_FATAL_FAILURE(bring_up_io(other, kOtherHostId, kOtherHostNqn));
  auto resv = [](IoOpcode opc, uint16_t cid, uint32_t cdw10, const Bytes& data) {
    Sqe s = with_sgl(Sqe{}, cid, uint32_t(data.size()), kSglDataBlockOffset);
    s.opc = uint8_t(opc);
    s.nsid = test::kConnRamNsid;
    s.cdw10 = cdw10;
    return s;
  };
  const ReservationRegisterData key{0, 0x77};
  other.run(resv(IoOpcode::ReservationRegister, 110, uint32_t(RegisterAction::Register), bytes_of(key)),
            bytes_of(key));
  ASSERT_TRUE(last_status(other).ok());
  io.while_data_travels = [&] {
    const ReservationAcquireData acq{0x77, 0};
    const uint32_t write_exclusive = uint32_t(ReservationType::WriteExclusive) << 8;
    other.run(resv(IoOpcode::ReservationAcquire, 111, uint32_t(AcquireAction::Acquire) | write_exclusive,
                   bytes_of(acq)),
              bytes_of(acq));
  };
  io.run(rw(IoOpcode::Write, 112, test::kConnRamNsid, 0, 1, 512), Bytes(512, 3), true);
  EXPECT_TRUE(last_status(other).ok()) << "the other host holds the reservation";
  EXPECT_EQ(last_status(io), sc::ReservationConflict);
  EXPECT_EQ(io.device_ops(), 0);
  // Released again, the next write goes through.
  io.while_data_travels = nullptr;
  const ReservationReleaseData rel{0x77};
  other.run(resv(IoOpcode::ReservationRelease, 113, uint32_t(ReservationType::WriteExclusive) << 8, bytes_of(rel)),
            bytes_of(rel));
  ASSERT_TRUE(last_status(other).ok());
  target::Command* w = io.run(rw(IoOpcode::Write, 114, test::kConnRamNsid, 0, 1, 512), Bytes(512, 3), true);
  ASSERT_EQ(w->state(), S::Idle) << target::command_state_name(w->state()) << " " << status_name(w->status);
  ASSERT_EQ(io.completed.back(), w) << "it completed";
  EXPECT_TRUE(last_status(io).ok());
}

}  // namespace command_queue_test

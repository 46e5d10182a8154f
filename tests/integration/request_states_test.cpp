// SPDX-License-Identifier: Apache-2.0
// The target's per-state counts of requests (Target::request_states: the transport's states)
// and of their commands (Target::command_states: the command layer's), read while commands are
// in given states and after they are done: a command whose R2T is outstanding is counted in
// AwaitingH2C, and once a workload is answered every request is back in Free and every command
// Idle; a command still in the device when its host goes away is counted until the device lets
// it go.
#include "raw_session.hpp"
#include "test_devices.hpp"

namespace nvtcp::test::request_states_test {
namespace {

using S = target::TcpRequest::State;
using C = target::Command::State;

uint32_t outside_free(const target::RequestStateCounts& c) {
  uint32_t n = 0;
  for (size_t s = 0; s < c.size(); ++s)
    if (S(s) != S::Free) n += c[s];
  return n;
}

uint32_t outside_idle(const target::CommandStateCounts& c) {
  uint32_t n = 0;
  for (size_t s = 0; s < c.size(); ++s)
    if (C(s) != C::Idle) n += c[s];
  return n;
}

std::string describe(const target::RequestStateCounts& c) {
  std::string out;
  for (size_t s = 0; s < c.size(); ++s) out += fmt::format("{} {}; ", target::request_state_name(S(s)), c[s]);
  return out;
}

std::string describe(const target::CommandStateCounts& c) {
  std::string out;
  for (size_t s = 0; s < c.size(); ++s) out += fmt::format("{} {}; ", target::command_state_name(C(s)), c[s]);
  return out;
}

TEST(RequestStates, AnOutstandingR2TIsCountedInAwaitingH2C) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  const Sqe w = rw_sqe(IoOpcode::Write, io.cid(), kRamNsid, 0, 128, 65536);  // over in-capsule: R2T
  ASSERT_TRUE(io.send_capsule(w));
  Bytes p;
  ASSERT_TRUE(io.read_pdu(p));
  ASSERT_EQ(read_as<CommonHeader>(p).type, uint8_t(PduType::R2T));
  const auto r2t = read_as<R2TPdu>(p);

  target::RequestStateCounts c = t.target().request_states();
  EXPECT_EQ(c[size_t(S::AwaitingH2C)], 1u) << describe(c);
  EXPECT_EQ(outside_free(c), 1u) << describe(c);

  ASSERT_TRUE(io.c.send(h2c_data_pdu(w.cid, r2t.ttag, r2t.r2to, Bytes(r2t.r2tl, 0x3C), true)));
  Cqe cqe{};
  ASSERT_TRUE(io.read_response(w.cid, cqe));
  EXPECT_TRUE(ok(cqe));
  // The response is out; its request goes back to Free once the stream lets go of it.
  EXPECT_TRUE(wait_for([&] { return outside_free(c = t.target().request_states()) == 0; }, 2000)) << describe(c);
  EXPECT_EQ(c[size_t(S::AwaitingH2C)], 0u);
}

TEST(RequestStates, AfterAWorkloadEveryRequestIsFree) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  // Rounds of 16 commands in flight at once: in-capsule writes and reads, mixed.
  for (int round = 0; round < 20; ++round) {
    std::vector<uint16_t> cids;
    for (int i = 0; i < 16; ++i) {
      const uint64_t slba = uint64_t(i) * 8;
      Sqe s = i % 2 ? rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, slba, 8, 4096)
                    : rw_sqe(IoOpcode::Write, io.cid(), kRamNsid, slba, 8, 4096, kSglDataBlockOffset);
      ASSERT_TRUE(io.send_capsule(s, i % 2 ? Bytes{} : Bytes(4096, uint8_t(round))));
      cids.push_back(s.cid);
    }
    for (uint16_t cid : cids) {
      Cqe cqe{};
      ASSERT_TRUE(io.read_response(cid, cqe));
      ASSERT_TRUE(ok(cqe)) << "cid " << cid;
    }
  }
  target::RequestStateCounts c{};
  EXPECT_TRUE(wait_for([&] { return outside_free(c = t.target().request_states()) == 0; }, 2000)) << describe(c);
  // Both queues' pools: the admin queue's and the I/O queue's 32 entries (SQSIZE 31).
  EXPECT_GE(c[size_t(S::Free)], 32u) << describe(c);
  uint32_t pools = 0;
  for (const auto& ci : t.target().connection_info()) pools += uint32_t(ci.pool_bytes / sizeof(target::TcpRequest));
  EXPECT_EQ(c[size_t(S::Free)], pools) << describe(c);
  const target::CommandStateCounts cc = t.target().command_states();
  EXPECT_EQ(outside_idle(cc), 0u) << describe(cc);
  EXPECT_EQ(cc[size_t(C::Idle)], pools) << describe(cc);
}

TEST(RequestStates, ACommandInTheDeviceIsCountedAfterItsHostLeft) {
  target::TargetConfig cfg = default_config();
  cfg.subsystems[0].namespaces = {{2, "ram", 64u << 20, "", 512}};
  GatedDevice* dev = nullptr;
  RunningTarget t(cfg, gated_devices(dev));
  Session admin;
  auto io = std::make_unique<Session>();
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, *io));
  const DsmRange range{0, 8, 0};
  Sqe dsm = raw_sqe(cmd::deallocate(2, 1), io->cid(), sizeof(range), kSglDataBlockOffset);
  ASSERT_TRUE(io->send_capsule(dsm, bytes_of(range)));
  ASSERT_TRUE(wait_for([&] { return dev->held() == 1; }, 5000)) << "the Deallocate never reached the device";
  target::RequestStateCounts c = t.target().request_states();
  EXPECT_EQ(outside_free(c), 1u) << describe(c);
  EXPECT_EQ(c[size_t(S::Executing)], 1u) << describe(c);
  target::CommandStateCounts cc = t.target().command_states();
  EXPECT_EQ(cc[size_t(C::InDevice)], 1u) << describe(cc);

  // The host goes away: its queue closes, but its request is still in the device and is counted.
  io.reset();
  ASSERT_TRUE(wait_for([&] { return t.target().connection_info().size() == 1; }, 5000)) << "the I/O queue stays open";
  c = t.target().request_states();
  EXPECT_EQ(outside_free(c), 1u) << "a request in the device vanished from the counts with its host: "
                                 << describe(c);
  cc = t.target().command_states();
  EXPECT_EQ(cc[size_t(C::InDevice)], 1u) << describe(cc);
  // The device lets go: the closed connection frees itself, and only the admin queue's pool is left.
  dev->release_one();
  EXPECT_TRUE(wait_for([&] { return outside_free(c = t.target().request_states()) == 0; }, 5000)) << describe(c);
  uint32_t pools = 0;
  for (const auto& ci : t.target().connection_info()) pools += uint32_t(ci.pool_bytes / sizeof(target::TcpRequest));
  EXPECT_TRUE(wait_for([&] { return (c = t.target().request_states())[size_t(S::Free)] == pools; }, 5000))
      << describe(c);
}

}  // namespace
}  // namespace nvtcp::test::request_states_test

namespace nvtcp::test::request_states_test {
namespace {

// Namespace 1 a NULL device (zero-copy reads: the data of many reads can sit in a send queue
// without buffers), namespace 2 a GatedDevice (holds a Deallocate in the device), the rest RAM.
target::DeviceFactory null_and_gated(GatedDevice*& gated) {
  return [&gated](const target::NamespaceConfig& nc, std::string& err) -> std::unique_ptr<backend::BlockDevice> {
    if (nc.nsid == 1) return backend::make_null(nc.size, nc.block_size);
    if (nc.nsid == kRamNsid) {
      auto d = std::make_unique<GatedDevice>(nc.size);
      gated = d.get();
      return d;
    }
    return backend::make_ram(nc.size, nc.block_size, 1, err);
  };
}

}  // namespace

// Requests held in every state a request or its command can wait in, each counted there: the
// two tables say where each is. (Running is never held: a handler moves its command on before
// it returns. BetweenSteps lasts until the reactor's next turn, HeldAbort until the I/O queue's
// reactor answers, AwaitingDurable until a state file is written, OnWorker until a worker is
// done: tests/unit/command_queue_test.cpp holds those below the transport, where the test owns
// the reactor.)
TEST(RequestStates, EveryStateARequestWaitsInIsCountedWhileItWaits) {
  target::TargetConfig cfg = default_config();
  // One 1 MiB buffer per connection fits, a second does not: the second R2T write waits.
  cfg.max_connection_buffer_memory = 3u << 19;
  cfg.max_send_queue_bytes = 0;  // reads the host does not take stay Sending, none held back
  GatedDevice* gated = nullptr;
  RunningTarget t(cfg, null_and_gated(gated));
  Session admin1, io1, admin2, io2, admin3, io3;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin1, io1));
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin2, io2));
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin3, io3));
  target::RequestStateCounts expected{};
  target::CommandStateCounts expected_commands{};

  // HeldAer: an Asynchronous Event Request, no event.
  Sqe aer{};
  aer.opc = uint8_t(AdminOpcode::AsyncEventRequest);
  aer.flags = kSqeFlagsPsdtSgl;
  aer.cid = admin1.cid();
  ASSERT_TRUE(admin1.send_capsule(aer));
  expected[size_t(S::Executing)] += 1;
  expected_commands[size_t(C::HeldAer)] = 1;

  // AwaitingH2C: a 1 MiB write whose R2T the host does not answer; NeedBuffer: a second one,
  // with no memory for it; Queued: a read behind them (commands run in arrival order).
  constexpr uint32_t kMiB = 1u << 20;
  const Sqe w1 = rw_sqe(IoOpcode::Write, io1.cid(), 3, 0, kMiB / 4096, kMiB);
  ASSERT_TRUE(io1.send_capsule(w1));
  Bytes p;
  ASSERT_TRUE(io1.read_pdu(p));
  ASSERT_EQ(read_as<CommonHeader>(p).type, uint8_t(PduType::R2T));
  ASSERT_TRUE(io1.send_capsule(rw_sqe(IoOpcode::Write, io1.cid(), 3, 1024, kMiB / 4096, kMiB)));
  ASSERT_TRUE(io1.send_capsule(rw_sqe(IoOpcode::Read, io1.cid(), 3, 0, 1, 4096)));
  expected[size_t(S::AwaitingH2C)] = 1;
  expected[size_t(S::NeedBuffer)] = 1;
  expected[size_t(S::Queued)] = 1;

  // InDevice: a Deallocate the device holds, counted in its namespace's fence. AwaitingFence:
  // a fused Compare that owns the fence and waits for that write to drain, and a plain write
  // held by the fence. AwaitingFusedPartner: the fused Write, waiting for its Compare.
  const DsmRange range{0, 8, 5000};
  ASSERT_TRUE(io2.send_capsule(raw_sqe(cmd::deallocate(kRamNsid, 1), io2.cid(), sizeof(range), kSglDataBlockOffset),
                               bytes_of(range)));
  ASSERT_TRUE(wait_for([&] { return gated->held() == 1; }, 5000)) << "the Deallocate never reached the device";
  Sqe cmp = rw_sqe(IoOpcode::Compare, io2.cid(), kRamNsid, 10, 1, 512, kSglDataBlockOffset);
  cmp.flags |= kSqeFlagsFuseFirst;
  Sqe fw = rw_sqe(IoOpcode::Write, io2.cid(), kRamNsid, 10, 1, 512, kSglDataBlockOffset);
  fw.flags |= kSqeFlagsFuseSecond;
  ASSERT_TRUE(io2.send_capsule(cmp, Bytes(512, 0)));
  ASSERT_TRUE(io2.send_capsule(fw, Bytes(512, 0)));
  ASSERT_TRUE(io2.send_capsule(rw_sqe(IoOpcode::Write, io2.cid(), kRamNsid, 20, 1, 512, kSglDataBlockOffset),
                               Bytes(512, 1)));
  expected[size_t(S::Executing)] += 4;
  expected_commands[size_t(C::InDevice)] = 1;
  expected_commands[size_t(C::AwaitingFence)] = 2;
  expected_commands[size_t(C::AwaitingFusedPartner)] = 1;

  // ReceivingCapsule: a capsule whose in-capsule data is still on its way.
  const Bytes partial = capsule_pdu(rw_sqe(IoOpcode::Write, io2.cid(), 3, 64, 1, 4096, kSglDataBlockOffset),
                                    Bytes(4096, 2), false, false);
  ASSERT_TRUE(io2.c.send(Bytes(partial.begin(), partial.begin() + 72 + 100)));
  expected[size_t(S::ReceivingCapsule)] = 1;

  // Sending: 30 reads of 1 MiB the host does not read: what the socket cannot take stays in
  // the send queue, and its requests with it.
  Bytes reads;
  for (int i = 0; i < 30; ++i) {
    const Bytes c = capsule_pdu(rw_sqe(IoOpcode::Read, io3.cid(), 1, 0, kMiB / 512, kMiB), {}, false, false);
    reads.insert(reads.end(), c.begin(), c.end());
  }
  ASSERT_TRUE(io3.c.send(reads));

  // The six admin and I/O queues' pools hold nothing else.
  target::RequestStateCounts c{};
  target::CommandStateCounts cc{};
  const bool held = wait_for(
      [&] {
        c = t.target().request_states();
        cc = t.target().command_states();
        for (size_t s = 0; s < c.size(); ++s)
          if (S(s) != S::Free && S(s) != S::Sending && c[s] != expected[s]) return false;
        for (size_t s = 0; s < cc.size(); ++s)
          if (C(s) != C::Idle && cc[s] != expected_commands[s]) return false;
        return c[size_t(S::Sending)] >= 1;
      },
      10000);
  EXPECT_TRUE(held) << describe(c) << describe(cc);
  for (size_t s = 0; s < c.size(); ++s) {
    if (S(s) == S::Free) continue;
    if (S(s) == S::Sending) EXPECT_GE(c[s], 1u) << "reads whose data waits for the socket";
    else EXPECT_EQ(c[s], expected[s]) << target::request_state_name(S(s));
  }
  for (size_t s = 0; s < cc.size(); ++s) {
    if (C(s) == C::Idle) continue;
    EXPECT_EQ(cc[s], expected_commands[s]) << target::command_state_name(C(s));
  }

  // The device lets go: the fused pair and the write behind it run, and are answered.
  gated->release_one();
  Cqe cqe{};
  ASSERT_TRUE(io2.read_response(uint16_t(cmp.cid - 1), cqe));
  EXPECT_TRUE(ok(cqe));
  ASSERT_TRUE(io2.read_response(cmp.cid, cqe));
  EXPECT_TRUE(ok(cqe));
  ASSERT_TRUE(io2.read_response(fw.cid, cqe));
  EXPECT_TRUE(ok(cqe));
  ASSERT_TRUE(io2.read_response(uint16_t(fw.cid + 1), cqe));
  EXPECT_TRUE(ok(cqe));
}

}  // namespace nvtcp::test::request_states_test

// The target's per-state request counts (Target::request_states), read while commands are
// in given states and after they are done: a command whose R2T is outstanding is counted in
// AwaitingH2C, and once a workload is answered every request is back in Free; a command still
// in the device when its host goes away is counted until the device lets it go.
#include "raw_session.hpp"
#include "test_devices.hpp"

namespace nvtcp::test {
namespace {

using S = target::Request::State;

uint32_t outside_free(const target::RequestStateCounts& c) {
  uint32_t n = 0;
  for (size_t s = 0; s < c.size(); ++s)
    if (S(s) != S::Free) n += c[s];
  return n;
}

std::string describe(const target::RequestStateCounts& c) {
  std::string out;
  for (size_t s = 0; s < c.size(); ++s) out += fmt::format("{} {}; ", target::request_state_name(S(s)), c[s]);
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
  for (const auto& ci : t.target().connection_info()) pools += uint32_t(ci.pool_bytes / sizeof(target::Request));
  EXPECT_EQ(c[size_t(S::Free)], pools) << describe(c);
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

  // The host goes away: its queue closes, but its request is still in the device and is counted.
  io.reset();
  ASSERT_TRUE(wait_for([&] { return t.target().connection_info().size() == 1; }, 5000)) << "the I/O queue stays open";
  c = t.target().request_states();
  EXPECT_EQ(outside_free(c), 1u) << "a request in the device vanished from the counts with its host: "
                                 << describe(c);
  // The device lets go: the closed connection frees itself, and only the admin queue's pool is left.
  dev->release_one();
  EXPECT_TRUE(wait_for([&] { return outside_free(c = t.target().request_states()) == 0; }, 5000)) << describe(c);
  uint32_t pools = 0;
  for (const auto& ci : t.target().connection_info()) pools += uint32_t(ci.pool_bytes / sizeof(target::Request));
  EXPECT_TRUE(wait_for([&] { return (c = t.target().request_states())[size_t(S::Free)] == pools; }, 5000))
      << describe(c);
}

}  // namespace
}  // namespace nvtcp::test

// SPDX-License-Identifier: Apache-2.0
// Fused Compare and Write on the wire (what VMware's ATS and cluster lock managers send): a
// Compare marked first and a Write marked second, the Write done only when the Compare
// matched, atomic against every other write to the namespace from any reactor; and each
// broken pair with its status.
#include <atomic>
#include <climits>
#include <mutex>
#include <thread>

#include "raw_session.hpp"
#include "test_devices.hpp"

namespace nvtcp::test::fused_test {
namespace {

constexpr uint64_t kLba = 50;

Sqe fused(IoOpcode opc, uint16_t cid, uint64_t lba, uint8_t fuse) {
  Sqe s = rw_sqe(opc, cid, kRamNsid, lba, 1, 512, kSglDataBlockOffset);
  s.flags |= fuse;
  return s;
}

Bytes block_of(uint64_t v) {
  Bytes b(512, 0);
  std::memcpy(b.data(), &v, sizeof(v));
  return b;
}

// Sends the pair back to back and reads both answers.
AssertionResult compare_and_write(Session& io, uint64_t lba, const Bytes& expect, const Bytes& next, Cqe& cmp,
                                  Cqe& wr) {
  const Sqe c = fused(IoOpcode::Compare, io.cid(), lba, kSqeFlagsFuseFirst);
  const Sqe w = fused(IoOpcode::Write, io.cid(), lba, kSqeFlagsFuseSecond);
  if (auto r = io.send_capsule(c, expect); !r) return r;
  if (auto r = io.send_capsule(w, next); !r) return r;
  if (auto r = io.read_response(c.cid, cmp); !r) return r;
  return io.read_response(w.cid, wr);
}

Bytes read_block(Session& io, uint64_t lba) {
  Cqe cqe{};
  Bytes data;
  EXPECT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, lba, 1, 512), {}, cqe, &data));
  EXPECT_TRUE(ok(cqe));
  return data;
}

// Block kLba set to 1; a pair that expects 1 writes 2; one that expects 1 again fails and
// writes nothing.
void match_then_mismatch(Session& io) {
  Cqe cqe{}, cmp{}, wr{};
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Write, io.cid(), kRamNsid, kLba, 1, 512, kSglDataBlockOffset),
                         block_of(1), cqe));
  ASSERT_TRUE(ok(cqe));
  ASSERT_TRUE(compare_and_write(io, kLba, block_of(1), block_of(2), cmp, wr));
  EXPECT_TRUE(ok(cmp));
  EXPECT_TRUE(ok(wr));
  EXPECT_EQ(read_block(io, kLba), block_of(2));
  ASSERT_TRUE(compare_and_write(io, kLba, block_of(1), block_of(3), cmp, wr));
  EXPECT_TRUE(status_is(cmp, uint8_t(Sct::Media), sc::CompareFailure.value & 0xFF));
  EXPECT_TRUE(status_is(wr, 0, sc::FailedFusedCommand.value & 0xFF));
  EXPECT_EQ(read_block(io, kLba), block_of(2)) << "the write of a failed pair ran";
}

TEST(FusedCompareAndWrite, WritesOnlyWhenTheCompareMatches) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  ASSERT_NO_FATAL_FAILURE(match_then_mismatch(io));
}

// A device that compares and writes atomically itself (RBD, whose OSDs do it for every
// gateway of an image) is given the pair as one CompareAndWrite: the target reads nothing,
// and the answers are those of the read-and-compare path, a mismatch included (which is no
// device error: no error event is raised for it).
TEST(FusedCompareAndWrite, ADeviceThatComparesAndWritesItselfIsGivenThePairAsOne) {
  AtomicCompareWriteDevice* dev = nullptr;
  auto factory = [&dev](const target::NamespaceConfig& nc, std::string&) -> std::unique_ptr<backend::BlockDevice> {
    if (nc.nsid != kRamNsid) return nullptr;
    auto d = std::make_unique<AtomicCompareWriteDevice>(nc.size, nc.block_size);
    dev = d.get();
    return d;
  };
  RunningTarget t(default_config(), factory);
  ASSERT_NE(dev, nullptr);
  AdminQueue a;
  Session io;
  ASSERT_NO_FATAL_FAILURE(a.open(t.port(), kHostNqn));
  ASSERT_NO_FATAL_FAILURE(a.open_io(t.port(), io));
  a.hold_aer();  // answered only if an event is raised: a device error would be one
  ASSERT_NO_FATAL_FAILURE(match_then_mismatch(io));
  EXPECT_EQ(dev->compare_and_writes.load(), 2);
  EXPECT_EQ(dev->reads.load(), 2) << "the target read the blocks itself (the two reads are the test's)";
  Cqe cqe{};
  // The mismatch raised no error event: an event posted to the admin queue by then would be
  // answered on the held AER before these two commands' responses.
  for (int i = 0; i < 2; ++i) {
    Sqe sqe = admin_sqe(AdminOpcode::GetFeatures, a.s.cid());
    sqe.cdw10 = kFeatureAsyncEventConfig;
    ASSERT_TRUE(a.s.command(sqe, {}, cqe)) << "an event came for a Compare Failure";
    EXPECT_TRUE(ok(cqe));
  }
}

TEST(FusedCompareAndWrite, BrokenPairsAreRefusedAndNothingIsWritten) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  Cqe first{}, next{};
  // A first half followed by a plain command: the Compare is aborted, the Read runs.
  const Sqe c = fused(IoOpcode::Compare, io.cid(), kLba, kSqeFlagsFuseFirst);
  const Sqe r = rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, kLba, 1, 512);
  ASSERT_TRUE(io.send_capsule(c, block_of(0)));
  ASSERT_TRUE(io.send_capsule(r));
  ASSERT_TRUE(io.read_response(c.cid, first));
  EXPECT_TRUE(status_is(first, 0, sc::MissingFusedCommand.value & 0xFF));
  Bytes data;
  ASSERT_TRUE(io.read_response(r.cid, next, &data));
  EXPECT_TRUE(ok(next));
  // A second half alone.
  ASSERT_TRUE(io.command(fused(IoOpcode::Write, io.cid(), kLba, kSqeFlagsFuseSecond), block_of(9), next));
  EXPECT_TRUE(status_is(next, 0, sc::MissingFusedCommand.value & 0xFF));
  // Halves on different blocks.
  const Sqe c2 = fused(IoOpcode::Compare, io.cid(), kLba, kSqeFlagsFuseFirst);
  const Sqe w2 = fused(IoOpcode::Write, io.cid(), kLba + 1, kSqeFlagsFuseSecond);
  ASSERT_TRUE(io.send_capsule(c2, block_of(0)));
  ASSERT_TRUE(io.send_capsule(w2, block_of(9)));
  ASSERT_TRUE(io.read_response(c2.cid, first));
  ASSERT_TRUE(io.read_response(w2.cid, next));
  EXPECT_TRUE(status_is(first, 0, sc::InvalidField.value & 0xFF));
  EXPECT_TRUE(status_is(next, 0, sc::FailedFusedCommand.value & 0xFF));
  // A fused Write as the first half, and FUSE 11b.
  ASSERT_TRUE(io.command(fused(IoOpcode::Write, io.cid(), kLba, kSqeFlagsFuseFirst), block_of(9), next));
  EXPECT_TRUE(status_is(next, 0, sc::InvalidField.value & 0xFF));
  ASSERT_TRUE(io.command(fused(IoOpcode::Compare, io.cid(), kLba, 0x3), block_of(0), next));
  EXPECT_TRUE(status_is(next, 0, sc::InvalidField.value & 0xFF));
  EXPECT_EQ(read_block(io, kLba), block_of(0));
  EXPECT_EQ(read_block(io, kLba + 1), block_of(0));
}

// A counter that hosts on two reactors increment with compare-and-write, retrying on a
// Compare Failure, while a third writes elsewhere in the namespace: no increment is lost.
TEST(FusedCompareAndWrite, IncrementsFromTwoReactorsAreNeverLost) {
  target::TargetConfig cfg = default_config();
  cfg.cores = 2;
  RunningTarget t(cfg);
  constexpr int kPerHost = 300;
  std::atomic<int> done{0};
  std::atomic<bool> stop{false};
  // Connections go to the reactors in turn: with a spare one between them, the two
  // incrementing I/O queues land on different reactors (1 and 0).
  Session admin_a, io_a, spare, admin_b, io_b;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin_a, io_a));
  ASSERT_TRUE(spare.open(t.port()));
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin_b, io_b));
  auto incrementer = [&](Session& io) {
    int mine = 0;
    while (mine < kPerHost && !::testing::Test::HasFailure()) {
      const Bytes cur = read_block(io, kLba);
      uint64_t v = 0;
      std::memcpy(&v, cur.data(), sizeof(v));
      Cqe cmp{}, wr{};
      ASSERT_TRUE(compare_and_write(io, kLba, cur, block_of(v + 1), cmp, wr));
      if (ok(cmp)) {
        ASSERT_TRUE(ok(wr));
        ++mine;
      } else {
        ASSERT_TRUE(status_is(cmp, uint8_t(Sct::Media), sc::CompareFailure.value & 0xFF));
      }
    }
    done.fetch_add(mine);
  };
  std::thread writer([&] {
    Session admin, io;
    open_io_queue(t, admin, io);
    for (uint64_t i = 0; !stop.load(); ++i) {
      Cqe cqe{};
      ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Write, io.cid(), kRamNsid, 1000 + i % 64, 8, 4096, kSglDataBlockOffset),
                             Bytes(4096, uint8_t(i)), cqe));
      ASSERT_TRUE(ok(cqe));
    }
  });
  std::thread a(incrementer, std::ref(io_a)), b(incrementer, std::ref(io_b));
  a.join();
  b.join();
  stop.store(true);
  writer.join();
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  uint64_t v = 0;
  std::memcpy(&v, read_block(io, kLba).data(), sizeof(v));
  EXPECT_EQ(v, uint64_t(done.load()));
  EXPECT_EQ(done.load(), 2 * kPerHost);
}

// Writes and fused pairs take turns at the namespace's fence. A Deallocate held in the
// device keeps a write in flight, so the first pair owns the fence and waits for it; then a
// plain write (held back: it waits) and a second pair arrive. Once the first pair is done,
// the write held back goes before the second pair takes the fence. Before, both retried every
// 20 us and whichever timer came first won: two hosts issuing pairs back to back kept other
// hosts' writes out. Several rounds, since under the old rule the order was a coin toss.
TEST(FusedCompareAndWrite, AWriteHeldBackByOnePairGoesBeforeTheNextPair) {
  target::TargetConfig cfg = default_config();
  cfg.subsystems[0].namespaces = {{2, "ram", 64u << 20, "", 512}};
  GatedDevice* dev = nullptr;
  RunningTarget t(cfg, gated_devices(dev));  // one reactor: one order of answers
  struct AnswerOrder : target::ResponseObserver {
    std::mutex mu;
    std::vector<std::pair<uint8_t, uint16_t>> answers;  // opcode, CID
    void on_response(uint16_t qid, const Sqe& sqe, Status, const backend::BlockIo&) override {
      if (qid == 0) return;
      std::lock_guard lk(mu);
      answers.emplace_back(sqe.opc, sqe.cid);
    }
    size_t position(uint8_t opc, uint16_t cid) {
      std::lock_guard lk(mu);
      for (size_t i = 0; i < answers.size(); ++i)
        if (answers[i] == std::pair{opc, cid}) return i;
      return SIZE_MAX;
    }
  } order;
  t.target().state().response_observer.store(&order);
  struct Unobserve {
    RunningTarget& t;
    ~Unobserve() { t.target().state().response_observer.store(nullptr); }
  } unobserve{t};
  target::WriteFence& fence = t.target().state().subsystems()[0]->find_namespace(kRamNsid)->fence;
  Session admin_d, d, admin_1, f1, admin_w, w, admin_2, f2;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin_d, d));
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin_1, f1));
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin_w, w));
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin_2, f2));
  w.next_cid = 1000;
  f2.next_cid = 2000;
  for (int round = 0; round < 8; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Sqe dsm{};
    dsm.opc = uint8_t(IoOpcode::DatasetManagement);
    dsm.nsid = kRamNsid;
    dsm.cdw11 = 1u << 2;  // deallocate one range
    dsm = raw_sqe(dsm, d.cid(), sizeof(DsmRange), kSglDataBlockOffset);
    ASSERT_TRUE(d.send_capsule(dsm, bytes_of(DsmRange{0, 8, 5000})));
    ASSERT_TRUE(wait_for([&] { return dev->held() == 1; }, 5000));
    const Sqe c1 = fused(IoOpcode::Compare, f1.cid(), 10, kSqeFlagsFuseFirst);
    const Sqe w1 = fused(IoOpcode::Write, f1.cid(), 10, kSqeFlagsFuseSecond);
    ASSERT_TRUE(f1.send_capsule(c1, Bytes(512, 0)));
    ASSERT_TRUE(f1.send_capsule(w1, Bytes(512, 0)));
    ASSERT_TRUE(wait_for([&] { return fence.owned(); }, 5000)) << "the first pair never took the fence";
    const Sqe plain = rw_sqe(IoOpcode::Write, w.cid(), kRamNsid, 20, 1, 512, kSglDataBlockOffset);
    ASSERT_TRUE(w.send_capsule(plain, Bytes(512, 1)));
    ASSERT_TRUE(wait_for([&] { return fence.writers_waiting() == 1; }, 5000)) << "the write did not wait";
    const Sqe c2 = fused(IoOpcode::Compare, f2.cid(), 30, kSqeFlagsFuseFirst);
    const Sqe w2 = fused(IoOpcode::Write, f2.cid(), 30, kSqeFlagsFuseSecond);
    ASSERT_TRUE(f2.send_capsule(c2, Bytes(512, 0)));
    ASSERT_TRUE(f2.send_capsule(w2, Bytes(512, 0)));
    // Both halves of the second pair are in before the first ends: the Deallocate in the
    // device; the first Compare waiting for it to drain, the plain write and the second Compare
    // waiting for the fence; each Write waiting for its Compare.
    using S = target::Command::State;
    target::CommandStateCounts c{};
    ASSERT_TRUE(wait_for(
        [&] {
          c = t.target().command_states();
          return c[size_t(S::InDevice)] == 1 && c[size_t(S::AwaitingFence)] == 3 &&
                 c[size_t(S::AwaitingFusedPartner)] == 2;
        },
        5000))
        << "in the device " << c[size_t(S::InDevice)] << ", at the fence " << c[size_t(S::AwaitingFence)]
        << ", waiting for their Compare " << c[size_t(S::AwaitingFusedPartner)];
    dev->release_one();
    Cqe cqe{};
    ASSERT_TRUE(d.read_response(dsm.cid, cqe));
    ASSERT_TRUE(f1.read_response(c1.cid, cqe));
    EXPECT_TRUE(ok(cqe));
    ASSERT_TRUE(f1.read_response(w1.cid, cqe));
    ASSERT_TRUE(w.read_response(plain.cid, cqe));
    EXPECT_TRUE(ok(cqe));
    ASSERT_TRUE(f2.read_response(c2.cid, cqe));
    EXPECT_TRUE(ok(cqe));
    ASSERT_TRUE(f2.read_response(w2.cid, cqe));
    EXPECT_TRUE(ok(cqe));
    EXPECT_LT(order.position(plain.opc, plain.cid), order.position(c2.opc, c2.cid))
        << "the second pair took the fence before the write the first one had held back";
  }
}

}  // namespace
}  // namespace nvtcp::test::fused_test

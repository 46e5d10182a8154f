// SPDX-License-Identifier: Apache-2.0
// The offload engine's data path end to end on loopback: an application's NVMe queues in a
// shared region, carried by IoForwarder over a host library queue pair to an in-process
// target. The application only writes SQEs into the ring and reads CQEs; its data moves
// straight between the target and its own data region.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <vector>

#include "engine/io_forwarder.hpp"
#include "shm/region.hpp"
#include "test_target.hpp"

namespace nvtcp::test::engine_forward_test {
namespace {

using shm::AppQueuePair;
using shm::RegionLayout;


// An interrupt vector as the engine has them: a pipe, the engine signals the write end.
struct Vector {
  Vector() {
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0) r = p[0], w = p[1];
  }
  ~Vector() {
    close(r);
    close(w);
  }
  // Whether it was signalled since the last look (and takes the signal).
  bool signalled() {
    char b[64];
    const bool any = read(r, b, sizeof(b)) > 0;
    while (read(r, b, sizeof(b)) > 0) {
    }
    return any;
  }
  int r = -1, w = -1;
};

struct SharedRegion {
  explicit SharedRegion(const RegionLayout& l) : layout(l) {
    base = static_cast<uint8_t*>(
        mmap(nullptr, l.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    l.write_header(base);
  }
  ~SharedRegion() { munmap(base, layout.total_bytes); }
  uint8_t* data() const { return base + layout.data_offset; }
  RegionLayout layout;
  uint8_t* base;
};

nvme::Sqe rw(nvme::IoOpcode op, uint16_t cid, uint64_t slba, uint32_t nlb, uint64_t data_off) {
  nvme::Sqe s{};
  s.opc = uint8_t(op);
  s.flags = nvme::kSqeFlagsPsdtSgl;
  s.cid = cid;
  s.nsid = kRamNsid;
  s.cdw10 = uint32_t(slba);
  s.cdw11 = uint32_t(slba >> 32);
  s.cdw12 = nlb - 1;
  s.sgl.addr = data_off;
  s.sgl.length = nlb * 512;
  s.sgl.type = 0x00;  // Data Block, address = offset into the data region
  return s;
}

class EngineForward : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string err;
    ctrl_ = host::Controller::connect(target_.trid(), {}, err);
    ASSERT_TRUE(ctrl_) << err;
    qp_ = ctrl_->create_io_qpair(64, err);
    ASSERT_TRUE(qp_) << err;
  }
  // Drives the engine until the application has `want` completions on app (or 10 s pass).
  std::vector<nvme::Cqe> run(engine::IoForwarder& fwd, AppQueuePair& app, size_t want) {
    std::vector<nvme::Cqe> got;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (got.size() < want && std::chrono::steady_clock::now() < deadline) {
      fwd.poll();
      nvme::Cqe c;
      while (app.poll(c)) got.push_back(c);
      app.ring_cq();
    }
    return got;
  }

  RunningTarget target_;
  std::unique_ptr<host::Controller> ctrl_;
  std::unique_ptr<host::QueuePair> qp_;
};

TEST_F(EngineForward, WritesAndReadsMoveThroughTheApplicationsOwnRegion) {
  auto layout = RegionLayout::compute(2, 64, 1 << 20);
  ASSERT_TRUE(layout);
  SharedRegion r(*layout);
  engine::IoForwarder fwd(*qp_);
  fwd.add_queue(nullptr, 1, layout->queue_pair(r.base, 1), r.data(), layout->data_bytes);
  AppQueuePair app(layout->queue_pair(r.base, 1));

  // 16 writes of 16 KiB (R2T and in-capsule alike on the wire), each its own pattern.
  for (uint16_t i = 0; i < 16; ++i) {
    auto p = pattern(16384, 100 + i);
    std::memcpy(r.data() + i * 16384u, p.data(), p.size());
    ASSERT_TRUE(app.submit(rw(nvme::IoOpcode::Write, uint16_t(1000 + i), i * 32u, 32, i * 16384u)));
  }
  app.ring_sq();
  auto done = run(fwd, app, 16);
  ASSERT_EQ(done.size(), 16u);
  for (auto& c : done) {
    EXPECT_EQ(c.status >> 1, 0) << "cid " << c.cid;
    EXPECT_GE(c.cid, 1000);
    EXPECT_EQ(c.sqid, 1);
  }
  // Read them back into the other half of the region.
  for (uint16_t i = 0; i < 16; ++i)
    ASSERT_TRUE(app.submit(rw(nvme::IoOpcode::Read, uint16_t(2000 + i), i * 32u, 32, (512u << 10) + i * 16384u)));
  app.ring_sq();
  done = run(fwd, app, 16);
  ASSERT_EQ(done.size(), 16u);
  for (uint16_t i = 0; i < 16; ++i) {
    auto p = pattern(16384, 100 + i);
    EXPECT_EQ(std::memcmp(r.data() + (512u << 10) + i * 16384u, p.data(), p.size()), 0) << "read " << i;
  }
  EXPECT_EQ(fwd.stats().forwarded, 32u);
  EXPECT_EQ(fwd.in_flight(), 0u);
}

// Latency is read from the caller's turn clock: from the turn that took the SQE to the turn
// the answer came in, into the target's buckets; errors are counted apart.
TEST_F(EngineForward, ReadsAndWritesAreCountedWithTheirLatencyOnTheTurnClock) {
  auto layout = RegionLayout::compute(2, 64, 1 << 20);
  ASSERT_TRUE(layout);
  SharedRegion r(*layout);
  engine::IoForwarder fwd(*qp_);
  fwd.add_queue(nullptr, 1, layout->queue_pair(r.base, 1), r.data(), layout->data_bytes);
  AppQueuePair app(layout->queue_pair(r.base, 1));
  constexpr uint64_t kT0 = 1'000'000'000;
  constexpr uint64_t kLater = 300'000;  // 300 us: the 500 us bucket
  // One command: taken on the turn at kT0, answered on a turn at kT0 + kLater (or, were the
  // answer there at once, on the first turn: no time at all). Returns that latency.
  auto one = [&](const nvme::Sqe& sqe, nvme::Cqe& out) -> uint64_t {
    EXPECT_TRUE(app.submit(sqe));
    app.ring_sq();
    fwd.poll(32, kT0);
    uint64_t took = 0;
    bool got = app.poll(out);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!got && std::chrono::steady_clock::now() < deadline) {
      took = kLater;
      fwd.poll(32, kT0 + kLater);
      got = app.poll(out);
    }
    EXPECT_TRUE(got) << "no answer";
    app.ring_cq();
    return took;
  };
  nvme::Cqe c{};
  const uint64_t w = one(rw(nvme::IoOpcode::Write, 1, 0, 8, 0), c);
  EXPECT_EQ(c.status >> 1, 0);
  const uint64_t rd = one(rw(nvme::IoOpcode::Read, 2, 0, 8, 4096), c);
  EXPECT_EQ(c.status >> 1, 0);
  // Past the end of the 64 MiB namespace: LBA Out of Range, an error, not a read.
  one(rw(nvme::IoOpcode::Read, 3, (64u << 20) / 512, 1, 0), c);
  EXPECT_NE(c.status >> 1, 0);

  const auto& st = fwd.stats();
  EXPECT_EQ(st.writes.commands, 1u);
  EXPECT_EQ(st.writes.bytes, 4096u);
  EXPECT_EQ(st.writes.errors, 0u);
  EXPECT_EQ(st.writes.latency_ns, w);
  EXPECT_EQ(st.writes.latency[latency_bucket(w)], 1u);
  EXPECT_EQ(st.reads.commands, 1u) << "the failed read is an error, not a read";
  EXPECT_EQ(st.reads.bytes, 4096u);
  EXPECT_EQ(st.reads.errors, 1u);
  EXPECT_EQ(st.reads.latency_ns, rd);
  EXPECT_EQ(st.reads.latency[latency_bucket(rd)], 1u);
  EXPECT_EQ(latency_bucket(kLater), 5u) << "300 us falls in le=0.0005";
  uint64_t in_buckets = 0;
  for (uint64_t n : st.reads.latency) in_buckets += n;
  EXPECT_EQ(in_buckets, 1u);
}

TEST_F(EngineForward, PointersOutsideTheRegionAreRefusedAndNothingMoves) {
  auto layout = RegionLayout::compute(2, 16, 64 << 10);
  SharedRegion r(*layout);
  engine::IoForwarder fwd(*qp_);
  fwd.add_queue(nullptr, 1, layout->queue_pair(r.base, 1), r.data(), layout->data_bytes);
  AppQueuePair app(layout->queue_pair(r.base, 1));
  ASSERT_TRUE(app.submit(rw(nvme::IoOpcode::Read, 1, 0, 8, (64 << 10) - 2048)));  // runs past the end
  ASSERT_TRUE(app.submit(rw(nvme::IoOpcode::Write, 2, 0, 8, ~uint64_t(0) - 100)));  // wraps
  ASSERT_TRUE(app.submit(rw(nvme::IoOpcode::Read, 3, 0, 8, 0)));                    // fine
  app.ring_sq();
  auto done = run(fwd, app, 3);
  ASSERT_EQ(done.size(), 3u);
  std::map<uint16_t, nvme::Status> by_cid;
  for (auto& c : done) by_cid[c.cid] = nvme::Status::from_cqe(c.status);
  EXPECT_EQ(by_cid[1], nvme::sc::SglOffsetInvalid);
  EXPECT_EQ(by_cid[2], nvme::sc::SglOffsetInvalid);
  EXPECT_TRUE(by_cid[3].ok());
  EXPECT_EQ(fwd.stats().refused, 2u);
  EXPECT_EQ(fwd.stats().forwarded, 1u);
}

TEST_F(EngineForward, ABusyQueueDoesNotStarveAQuietOneAndInterruptsArrive) {
  auto layout = RegionLayout::compute(3, 256, 1 << 20);
  SharedRegion r(*layout);
  engine::IoForwarder fwd(*qp_);
  Vector vec;
  fwd.add_queue(nullptr, 1, layout->queue_pair(r.base, 1), r.data(), layout->data_bytes);
  fwd.add_queue(nullptr, 2, layout->queue_pair(r.base, 2), r.data(), layout->data_bytes, vec.w);
  AppQueuePair busy(layout->queue_pair(r.base, 1)), quiet(layout->queue_pair(r.base, 2));
  for (uint16_t i = 0; i < 200; ++i) ASSERT_TRUE(busy.submit(rw(nvme::IoOpcode::Read, i, i, 1, i * 512u)));
  busy.ring_sq();
  ASSERT_TRUE(quiet.submit(rw(nvme::IoOpcode::Read, 7, 0, 1, 900u << 10)));
  quiet.ring_sq();
  quiet.arm_interrupt();  // it will sleep on its vector
  // The quiet queue's command goes out in the first turn, whatever the busy one has queued.
  fwd.poll(8);
  EXPECT_EQ(fwd.stats().forwarded, 9u) << "8 from the busy queue (its budget), 1 from the quiet one";
  std::vector<nvme::Cqe> q;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (q.empty() && std::chrono::steady_clock::now() < deadline) {
    fwd.poll(8);
    nvme::Cqe c;
    while (quiet.poll(c)) q.push_back(c);
  }
  ASSERT_EQ(q.size(), 1u);
  EXPECT_TRUE(vec.signalled()) << "the quiet queue's vector was signalled";
  // The busy queue finishes too.
  size_t n = 0;
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (n < 200 && std::chrono::steady_clock::now() < deadline) {
    fwd.poll(8);
    nvme::Cqe c;
    while (busy.poll(c)) ++n;
    busy.ring_cq();
  }
  EXPECT_EQ(n, 200u);
}

// Interrupt Coalescing: with a threshold of 4 and an aggregation time of 1 ms, three
// completions raise no interrupt, the fourth does; a lone completion raises one once the
// time has passed (on a clock the test moves).
std::atomic<uint64_t> g_fake_now{1'000'000};
uint64_t fake_clock() { return g_fake_now.load(); }

TEST_F(EngineForward, CoalescedInterruptsWaitForTheThresholdOrTheTime) {
  auto layout = RegionLayout::compute(2, 64, 1 << 20);
  SharedRegion r(*layout);
  engine::IoForwarder fwd(*qp_);
  fwd.set_clock(fake_clock);
  Vector vec;
  auto* q = fwd.add_queue(nullptr, 1, layout->queue_pair(r.base, 1), r.data(), layout->data_bytes, vec.w);
  fwd.set_coalescing(q, 3 | (10u << 8));  // 4 completions, or 1 ms
  AppQueuePair app(layout->queue_pair(r.base, 1));
  // Not armed: an application that polls gets no interrupt at all.
  ASSERT_TRUE(app.submit(rw(nvme::IoOpcode::Read, 90, 0, 1, 0)));
  app.ring_sq();
  EXPECT_EQ(run(fwd, app, 1).size(), 1u);
  for (int i = 0; i < 4; ++i) fwd.poll();
  EXPECT_FALSE(vec.signalled()) << "nobody waits on the vector: no signal";
  EXPECT_EQ(fwd.stats().interrupts, 0u);
  app.arm_interrupt();
  for (uint16_t i = 0; i < 3; ++i) ASSERT_TRUE(app.submit(rw(nvme::IoOpcode::Read, i, i, 1, i * 512u)));
  app.ring_sq();
  EXPECT_EQ(run(fwd, app, 3).size(), 3u);
  EXPECT_FALSE(vec.signalled()) << "three completions, below the threshold: no interrupt yet";
  ASSERT_TRUE(app.submit(rw(nvme::IoOpcode::Read, 3, 3, 1, 3 * 512u)));
  app.ring_sq();
  EXPECT_EQ(run(fwd, app, 1).size(), 1u);
  EXPECT_TRUE(vec.signalled()) << "the fourth reaches the threshold";
  app.arm_interrupt();

  ASSERT_TRUE(app.submit(rw(nvme::IoOpcode::Read, 4, 4, 1, 4 * 512u)));
  app.ring_sq();
  EXPECT_EQ(run(fwd, app, 1).size(), 1u);
  fwd.poll();
  EXPECT_FALSE(vec.signalled()) << "one completion, no time passed";
  EXPECT_TRUE(fwd.prepare_to_sleep()) << "a coalesced interrupt keeps the core awake";
  g_fake_now += 999'000;
  fwd.poll();
  EXPECT_FALSE(vec.signalled()) << "999 us of 1 ms";
  g_fake_now += 1'000;
  fwd.poll();
  EXPECT_TRUE(vec.signalled()) << "the aggregation time passed";
  EXPECT_FALSE(fwd.prepare_to_sleep()) << "nothing pending once the interrupt went";
}

// The command records are shared by every queue on the forwarder: an application with a
// huge SQ and a tiny CQ that it never reads must not take them all (it holds at most what
// its CQ can take), and another queue's commands go on.
TEST_F(EngineForward, AnApplicationThatNeverReadsItsCqCannotTakeEveryCommandRecord) {
  auto layout = RegionLayout::compute(3, 256, 1 << 20);
  SharedRegion r(*layout);
  engine::IoForwarder fwd(*qp_);  // 64 records (the host queue pair's depth)
  shm::QueueMemory hog_mem = layout->queue_pair(r.base, 1);
  hog_mem.cq_size = 4;  // three completions fill it
  fwd.add_queue(nullptr, 1, hog_mem, r.data(), layout->data_bytes);
  fwd.add_queue(nullptr, 2, layout->queue_pair(r.base, 2), r.data(), layout->data_bytes);
  AppQueuePair hog(hog_mem), other(layout->queue_pair(r.base, 2));
  for (uint16_t i = 0; i < 200; ++i) ASSERT_TRUE(hog.submit(rw(nvme::IoOpcode::Read, i, i, 1, (i % 64) * 512u)));
  hog.ring_sq();
  for (int turn = 0; turn < 50; ++turn) fwd.poll();
  EXPECT_LE(fwd.stats().forwarded, 3u) << "the hog holds no more records than its CQ has slots";
  for (uint16_t i = 0; i < 100; ++i) ASSERT_TRUE(other.submit(rw(nvme::IoOpcode::Read, i, i, 1, (64 + i % 64) * 512u)));
  other.ring_sq();
  const auto answers = run(fwd, other, 100);
  EXPECT_EQ(answers.size(), 100u) << "the other queue's commands found records";
  while (fwd.in_flight() > 0) fwd.poll();
}

// An application that stops freeing CQ slots holds up its own answers, not another queue's.
TEST_F(EngineForward, AFullCompletionQueueHoldsUpOnlyItsOwnAnswers) {
  auto layout = RegionLayout::compute(3, 4, 64 << 10);  // rings of 4: three entries each
  SharedRegion r(*layout);
  engine::IoForwarder fwd(*qp_);
  fwd.add_queue(nullptr, 1, layout->queue_pair(r.base, 1), r.data(), layout->data_bytes);
  fwd.add_queue(nullptr, 2, layout->queue_pair(r.base, 2), r.data(), layout->data_bytes);
  AppQueuePair stuck(layout->queue_pair(r.base, 1)), other(layout->queue_pair(r.base, 2));
  for (uint16_t i = 0; i < 3; ++i) ASSERT_TRUE(stuck.submit(rw(nvme::IoOpcode::Read, i, i, 1, i * 512u)));
  stuck.ring_sq();
  // It reads its three answers (learning the SQ is free again) but never rings its CQ head:
  // as far as the engine knows, its CQ stays full.
  size_t got = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got < 3 && std::chrono::steady_clock::now() < deadline) {
    fwd.poll();
    nvme::Cqe c;
    while (stuck.poll(c)) ++got;
  }
  ASSERT_EQ(got, 3u);
  for (uint16_t i = 3; i < 6; ++i) ASSERT_TRUE(stuck.submit(rw(nvme::IoOpcode::Read, i, i, 1, i * 512u)));
  stuck.ring_sq();
  // Its CQ has no room as far as the engine knows: the three stay in its SQ (they take no
  // command record, so nothing of the shared pool sits behind its full CQ).
  for (int turn = 0; turn < 20; ++turn) fwd.poll();
  ASSERT_EQ(fwd.stats().forwarded, 3u) << "commands were taken from a queue whose CQ had no room";
  ASSERT_EQ(fwd.in_flight(), 0u);
  ASSERT_TRUE(other.submit(rw(nvme::IoOpcode::Read, 42, 9, 1, 8192)));
  other.ring_sq();
  auto answers = run(fwd, other, 1);
  ASSERT_EQ(answers.size(), 1u) << "the other queue's answer waited behind the stuck one's";
  EXPECT_EQ(answers[0].cid, 42);
  // The stuck queue gets its answers once it frees its CQ.
  stuck.ring_cq();
  got = 0;
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got < 3 && std::chrono::steady_clock::now() < deadline) {
    fwd.poll();
    nvme::Cqe c;
    while (stuck.poll(c)) ++got;
    stuck.ring_cq();
  }
  EXPECT_EQ(got, 3u);
}

// The engine lets go of an application (it detached, or died) with commands in flight: the
// forwarder waits for their answers from the remote controller before it goes, and the host
// queue pair is left clean for the next one.
TEST_F(EngineForward, GoingAwayWithCommandsInFlight) {
  auto layout = RegionLayout::compute(2, 64, 1 << 20);
  SharedRegion r(*layout);
  {
    engine::IoForwarder fwd(*qp_);
    fwd.add_queue(nullptr, 1, layout->queue_pair(r.base, 1), r.data(), layout->data_bytes);
    AppQueuePair app(layout->queue_pair(r.base, 1));
    // One poll sends the batch and takes what has come back; a target quick enough answers
    // all 32 within it (under ASan, once in CI), so the batch goes again until some of it is
    // still out when the forwarder goes.
    for (int attempt = 0; attempt < 20 && fwd.in_flight() == 0; ++attempt) {
      nvme::Cqe c;
      while (app.poll(c)) {
      }
      app.ring_cq();
      for (uint16_t i = 0; i < 32; ++i) ASSERT_TRUE(app.submit(rw(nvme::IoOpcode::Read, i, i * 8u, 8, i * 4096u)));
      app.ring_sq();
      fwd.poll();
    }
    ASSERT_GT(fwd.in_flight(), 0u) << "every batch was answered within the poll that sent it";
  }
  EXPECT_EQ(qp_->outstanding(), 0u);
  std::vector<uint8_t> buf(4096);
  struct Done {
    bool done = false;
    host::Completion c;
  } d;
  ASSERT_EQ(qp_->read(kRamNsid, 0, 8, buf.data(), [](void* ctx, const host::Completion& c) {
    static_cast<Done*>(ctx)->done = true;
    static_cast<Done*>(ctx)->c = c;
  }, &d), 0);
  ASSERT_TRUE(wait_for([&] { qp_->process_completions(1000); return d.done; }, 10000));
  EXPECT_TRUE(d.c.status.ok());
}

}  // namespace
}  // namespace nvtcp::test::engine_forward_test

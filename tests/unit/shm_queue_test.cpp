// SPDX-License-Identifier: Apache-2.0
// The offload engine's shared-memory NVMe queues: rings, phase tags, SQ head reporting,
// shadow doorbells with EventIdx, and what the engine does with impossible doorbell values.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "shm/shm_queue.hpp"

namespace nvtcp::shm::shm_queue_test {
namespace {

// A queue pair in one anonymous shared mapping, zeroed as a fresh memfd is.
struct Region {
  explicit Region(uint32_t sq_size, uint32_t cq_size) {
    bytes = sizeof(QueueWords) + sq_size * sizeof(nvme::Sqe) + cq_size * sizeof(nvme::Cqe);
    base = static_cast<uint8_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    mem.words = reinterpret_cast<QueueWords*>(base);
    mem.sq = reinterpret_cast<nvme::Sqe*>(base + sizeof(QueueWords));
    mem.sq_size = sq_size;
    mem.cq = reinterpret_cast<nvme::Cqe*>(base + sizeof(QueueWords) + sq_size * sizeof(nvme::Sqe));
    mem.cq_size = cq_size;
  }
  ~Region() { munmap(base, bytes); }
  uint8_t* base;
  size_t bytes;
  QueueMemory mem;
};

nvme::Sqe cmd(uint16_t cid) {
  nvme::Sqe s{};
  s.opc = uint8_t(nvme::IoOpcode::Read);
  s.cid = cid;
  s.nsid = 1;
  return s;
}

TEST(ShmQueue, NeedEventIsTheShadowDoorbellRuleInRingArithmetic) {
  EXPECT_TRUE(need_event(5, 6, 5, 16));    // the engine saw 5 and sleeps: moving to 6 passes it
  EXPECT_TRUE(need_event(5, 9, 5, 16));
  EXPECT_FALSE(need_event(0, 6, 5, 16));   // the engine asked at 0 and has been polling since
  EXPECT_FALSE(need_event(5, 5, 5, 16));   // nothing moved
  EXPECT_TRUE(need_event(15, 1, 15, 16));  // across the ring's wrap
  EXPECT_TRUE(need_event(0, 2, 14, 16));   // wrapping past 0
  EXPECT_FALSE(need_event(9, 6, 5, 16));   // not there yet
  EXPECT_FALSE(need_event(3, 1, 14, 16));  // wrapped, but not as far as 3
  // A polling engine asks for nothing: no move, wrapping or not, notifies it.
  for (uint32_t old_idx = 0; old_idx < 16; ++old_idx)
    for (uint32_t n = 1; n < 16; ++n) EXPECT_FALSE(need_event(kNoNotice, (old_idx + n) % 16, old_idx, 16));
}

TEST(ShmQueue, RoundTripsWrapTheRingsAndFlipThePhase) {
  Region r(8, 4);
  AppQueuePair app(r.mem);
  EngineQueuePair eng(r.mem, 3);
  std::set<uint16_t> seen;
  uint16_t next_cid = 0;
  for (int round = 0; round < 40; ++round) {
    // As many as the smaller ring holds.
    int n = 0;
    while (n < 3 && app.submit(cmd(next_cid++))) ++n;
    app.ring_sq();
    nvme::Sqe s;
    int fetched = 0;
    while (eng.fetch(s)) {
      ASSERT_GT(eng.cq_space(), 0u);
      nvme::Cqe c{};
      c.cid = s.cid;
      c.dw0 = s.cid * 7u;
      eng.post(c);
      ++fetched;
    }
    ASSERT_EQ(fetched, n);
    nvme::Cqe c;
    int got = 0;
    while (app.poll(c)) {
      EXPECT_EQ(c.dw0, c.cid * 7u);
      EXPECT_EQ(c.sqid, 3);
      EXPECT_EQ(c.status >> 1, 0) << "success";
      EXPECT_TRUE(seen.insert(c.cid).second) << "cid " << c.cid << " completed twice";
      ++got;
    }
    EXPECT_EQ(got, n);
    app.ring_cq();
    EXPECT_EQ(eng.fault(), EngineQueuePair::Fault::None);
  }
  EXPECT_EQ(seen.size(), size_t(next_cid));
  EXPECT_EQ(app.sq_free(), 7u) << "the SQ heads in the CQEs gave every slot back";
}

TEST(ShmQueue, FullRingsHoldBack) {
  Region r(4, 4);
  AppQueuePair app(r.mem);
  EngineQueuePair eng(r.mem, 1);
  for (uint16_t i = 0; i < 3; ++i) EXPECT_TRUE(app.submit(cmd(i)));
  EXPECT_FALSE(app.submit(cmd(3))) << "a ring of 4 holds 3";
  app.ring_sq();
  nvme::Sqe s;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(eng.fetch(s));
    ASSERT_GT(eng.cq_space(), 0u);
    eng.post(nvme::Cqe{});
  }
  EXPECT_EQ(eng.cq_space(), 0u) << "three completions unread fill a CQ of 4";
  nvme::Cqe c;
  ASSERT_TRUE(app.poll(c));
  app.ring_cq();
  EXPECT_EQ(eng.cq_space(), 1u);
}

TEST(ShmQueue, EventIdxDecidesWhetherTheApplicationKicks) {
  Region r(16, 16);
  AppQueuePair app(r.mem);
  EngineQueuePair eng(r.mem, 1);
  eng.want_sq_notice();  // the engine is about to sleep, having seen tail 0
  ASSERT_TRUE(app.submit(cmd(1)));
  EXPECT_TRUE(app.ring_sq()) << "the engine sleeps: notify it";
  ASSERT_TRUE(app.submit(cmd(2)));
  EXPECT_FALSE(app.ring_sq()) << "the engine has not slept again: no second notice";
  nvme::Sqe s;
  while (eng.fetch(s)) {
  }
  eng.want_sq_notice();
  ASSERT_TRUE(app.submit(cmd(3)));
  EXPECT_TRUE(app.ring_sq());
  // Polling again: a full lap of the ring and more brings no notice.
  eng.stop_notices();
  for (uint16_t i = 0; i < 40; ++i) {
    while (eng.fetch(s)) {
      ASSERT_GT(eng.cq_space(), 0u);
      eng.post(nvme::Cqe{});
    }
    nvme::Cqe c;
    while (app.poll(c)) {
    }
    EXPECT_FALSE(app.ring_cq()) << i;
    ASSERT_TRUE(app.submit(cmd(uint16_t(10 + i))));
    EXPECT_FALSE(app.ring_sq()) << i;
  }
}

TEST(ShmQueue, ImpossibleDoorbellsFaultTheQueueInsteadOfBeingFollowed) {
  {
    Region r(8, 8);
    EngineQueuePair eng(r.mem, 1);
    r.mem.words->sq_tail = 8;  // one past the ring
    nvme::Sqe s;
    EXPECT_FALSE(eng.fetch(s));
    EXPECT_EQ(eng.fault(), EngineQueuePair::Fault::SqTailOutOfRange);
    r.mem.words->sq_tail = 1;  // a faulted queue stays faulted
    EXPECT_FALSE(eng.fetch(s));
  }
  {
    Region r(8, 8);
    EngineQueuePair eng(r.mem, 1);
    r.mem.words->cq_head = 0xFFFFFFFF;
    EXPECT_EQ(eng.cq_space(), 0u);
    EXPECT_EQ(eng.fault(), EngineQueuePair::Fault::CqHeadOutOfRange);
  }
  {
    Region r(8, 8);
    EngineQueuePair eng(r.mem, 1);
    eng.post(nvme::Cqe{});
    eng.post(nvme::Cqe{});
    r.mem.words->cq_head = 3;  // "consumed" three of the two posted
    EXPECT_EQ(eng.cq_space(), 0u);
    EXPECT_EQ(eng.fault(), EngineQueuePair::Fault::CqHeadPastPosted);
  }
}

// Two threads, as an application and the engine would be (processes share the mapping the
// same way): every command completes exactly once, in any interleaving.
TEST(ShmQueue, ApplicationAndEngineOnTwoThreads) {
  Region r(64, 64);
  constexpr uint32_t kCommands = 200000;
  std::atomic<bool> stop{false}, faulted{false};
  std::thread engine([&] {
    EngineQueuePair eng(r.mem, 1);
    nvme::Sqe s;
    bool have = false;
    while (!stop.load(std::memory_order_relaxed)) {
      if (!have) have = eng.fetch(s);
      if (have && eng.cq_space() > 0) {
        nvme::Cqe c{};
        c.cid = s.cid;
        c.dw0 = s.cdw10;
        eng.post(c);
        have = false;
      }
      if (eng.fault() != EngineQueuePair::Fault::None) {
        faulted.store(true);
        return;
      }
    }
  });
  AppQueuePair app(r.mem);
  std::vector<uint8_t> done(kCommands, 0);
  uint32_t submitted = 0, completed = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (completed < kCommands && !faulted.load() && std::chrono::steady_clock::now() < deadline) {
    while (submitted < kCommands && submitted - completed < 48) {
      nvme::Sqe s = cmd(uint16_t(submitted));
      s.cdw10 = submitted;
      if (!app.submit(s)) break;
      ++submitted;
    }
    app.ring_sq();
    nvme::Cqe c;
    while (app.poll(c)) {
      ASSERT_LT(c.dw0, kCommands);
      ASSERT_EQ(uint16_t(c.dw0), c.cid);
      ASSERT_EQ(done[c.dw0], 0) << "command " << c.dw0 << " completed twice";
      done[c.dw0] = 1;
      ++completed;
    }
    app.ring_cq();
  }
  stop.store(true);
  engine.join();
  EXPECT_FALSE(faulted.load()) << "the engine saw an impossible doorbell from a correct application";
  EXPECT_EQ(completed, kCommands);
}

}  // namespace
}  // namespace nvtcp::shm::shm_queue_test

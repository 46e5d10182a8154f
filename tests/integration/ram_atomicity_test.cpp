// SPDX-License-Identifier: Apache-2.0
// A RAM namespace served by several reactors: commands on the same blocks arrive on
// different connections, so on different threads at once. NVMe promises that a one-block
// write is atomic against other commands (AWUN 0): a read sees the old block or the new
// one, never a mix, and two writes leave one of them whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "nvtcp/host.hpp"
#include "test_target.hpp"

namespace nvtcp::test::ram_atomicity_test {
namespace {

constexpr uint32_t kNsid = 3;        // RAM, 4096-byte blocks
constexpr uint32_t kBlock = 4096;
constexpr uint64_t kLbas = 4;        // a few hot blocks, hit from every side
constexpr int kDepth = 8;

// Every byte of a block written by writer w in its pass n is fill(w, n): a block whose bytes
// differ was torn.
uint8_t fill(int writer, uint32_t pass) { return uint8_t(1 + writer * 100 + pass % 97); }

struct Stats {
  std::atomic<uint64_t> ios{0}, torn{0}, errors{0};
};

// Runs kDepth commands at a time on its own connection until stop: writers write whole
// blocks of one byte value, readers check that each block read is one value throughout.
void worker(const host::TransportId& trid, bool writer, int id, const std::atomic<bool>& stop, Stats& st) {
  std::string err;
  host::ControllerOptions o;
  o.io_queues = 1;
  auto ctrl = host::Controller::connect(trid, o, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(kDepth, err);
  ASSERT_TRUE(qp) << err;
  struct Slot {
    std::vector<uint8_t> buf = std::vector<uint8_t>(kBlock);
    bool busy = false;
    Stats* st;
    bool check;
  };
  std::vector<Slot> slots(kDepth);
  uint32_t pass = 0;
  auto cb = [](void* ctx, const host::Completion& c) {
    auto* s = static_cast<Slot*>(ctx);
    s->busy = false;
    s->st->ios.fetch_add(1, std::memory_order_relaxed);
    if (!c.status.ok()) {
      s->st->errors.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (s->check && !std::all_of(s->buf.begin(), s->buf.end(), [&](uint8_t b) { return b == s->buf[0]; }))
      s->st->torn.fetch_add(1, std::memory_order_relaxed);
  };
  while (!stop.load(std::memory_order_relaxed) && !qp->failed()) {
    for (auto& s : slots) {
      if (s.busy) continue;
      s.st = &st;
      s.check = !writer;
      uint64_t lba = pass % kLbas;
      int rc;
      if (writer) {
        std::fill(s.buf.begin(), s.buf.end(), fill(id, pass));
        rc = qp->write(kNsid, lba, 1, s.buf.data(), cb, &s);
      } else {
        rc = qp->read(kNsid, lba, 1, s.buf.data(), cb, &s);
      }
      ++pass;
      if (rc == 0) s.busy = true;
    }
    qp->process_completions(1000);
  }
  while (std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.busy; }) && !qp->failed())
    qp->process_completions(1000);
}

TEST(RamAtomicity, OneBlockWritesAreNeverTornAcrossReactors) {
  auto cfg = default_config();
  cfg.cores = 2;  // connections are spread over both reactors
  RunningTarget t(cfg);
  std::atomic<bool> stop{false};
  Stats st;
  std::vector<std::thread> threads;
  // Two writers and two readers, so every block sees writes and reads from both reactors.
  for (int i = 0; i < 4; ++i)
    threads.emplace_back(worker, t.trid(kTestNqn, kNsid), i < 2, i, std::cref(stop), std::ref(st));
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < until && st.ios.load() < 400000)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(st.errors.load(), 0u);
  EXPECT_GT(st.ios.load(), 1000u);
  EXPECT_EQ(st.torn.load(), 0u) << "blocks read with bytes of two different writes, in " << st.ios.load() << " I/Os";
  // Every block ends up whole too.
  HostSession s;
  ASSERT_TRUE(open_session(t.trid(kTestNqn, kNsid), host::ControllerOptions{}, 4, s));
  host::QueuePair* qp = s.qp.get();
  for (uint64_t lba = 0; lba < kLbas; ++lba) {
    std::vector<uint8_t> b(kBlock, 0);
    CompletionBatch::Op d;
    ASSERT_EQ(qp->read(kNsid, lba, 1, b.data(), CompletionBatch::cb, &d), 0);
    while (!d.done) qp->process_completions(1000);
    EXPECT_TRUE(d.cpl.status.ok());
    EXPECT_TRUE(std::all_of(b.begin(), b.end(), [&](uint8_t x) { return x == b[0]; })) << "block " << lba << " torn";
  }
}

TEST(RamAtomicity, EverySizeReadsBackThroughTheLockedCopies) {
  // With several reactors, reads copy region by region (64 KiB) under locks instead of
  // pointing the send at the memory: sizes and offsets that start, end and cross region
  // boundaries, in 512-byte blocks, must read back what was written.
  auto cfg = default_config();
  cfg.cores = 2;
  RunningTarget t(cfg);
  HostSession s;
  ASSERT_TRUE(open_session(t.trid(kTestNqn, 2), host::ControllerOptions{}, 8, s));
  host::QueuePair* qp = s.qp.get();
  auto run = [&](bool write, uint64_t lba, uint32_t blocks, uint8_t* buf) {
    CompletionBatch::Op d;
    constexpr auto cb = &CompletionBatch::cb;
    int rc = write ? qp->write(2, lba, blocks, buf, cb, &d) : qp->read(2, lba, blocks, buf, cb, &d);
    if (rc != 0) return false;
    while (!d.done) qp->process_completions(1000);
    return d.cpl.status.ok();
  };
  const uint64_t region_blocks = 65536 / 512;
  struct Case {
    uint64_t lba;
    uint32_t blocks;
  } cases[] = {{0, 1},
               {region_blocks - 1, 2},                    // across one boundary
               {3 * region_blocks - 5, 2 * 128 + 10},     // across three
               {5 * region_blocks, 128},                  // exactly one region
               {7 * region_blocks + 7, 2048}};            // 1 MiB, unaligned
  for (const Case& c : cases) {
    SCOPED_TRACE("lba " + std::to_string(c.lba) + ", " + std::to_string(c.blocks) + " blocks");
    auto data = pattern(c.blocks * 512, c.lba * 31 + c.blocks);
    ASSERT_TRUE(run(true, c.lba, c.blocks, data.data()));
    std::vector<uint8_t> back(data.size(), 0xEE);
    ASSERT_TRUE(run(false, c.lba, c.blocks, back.data()));
    EXPECT_TRUE(back == data);
  }
}

}  // namespace
}  // namespace nvtcp::test::ram_atomicity_test

// SPDX-License-Identifier: Apache-2.0
// The RAM backend's Write Zeroes and Deallocate: memory goes back to the kernel, pages that
// were never written are never touched, and a long request yields to the reactor in slices.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "../support/process_memory.hpp"
#include "backend/block_device.hpp"
#include "reactor/reactor.hpp"

namespace nvtcp::backend::ram_device_test {
namespace {

using nvtcp::test::rss_bytes;

struct Pending {
  BlockIo io;
  bool done = false;
  nvme::Status status;
};

// Submits one request; returns how many reactor turns it took after submit() returned
// (0: it completed inside submit), or -1 if it did not complete in 30 s.
int run(BlockDevice& dev, reactor::Reactor& r, BlockIo::Op op, uint64_t off, uint64_t len, uint8_t* buf) {
  Pending run;
  run.io.op = op;
  run.io.offset = off;
  run.io.length = len;
  run.io.buffer = buf;
  run.io.user = &run;
  run.io.done = [](BlockIo* io, nvme::Status st) {
    auto* x = static_cast<Pending*>(io->user);
    x->done = true;
    x->status = st;
  };
  dev.submit(&run.io, r);
  int turns = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!run.done && std::chrono::steady_clock::now() < until) {
    r.run_once(1000);
    ++turns;
  }
  EXPECT_TRUE(run.status.ok());
  return run.done ? turns : -1;
}

// A read's data: in buf, or where the device points (zero-copy), valid until the next request.
const uint8_t* read_back(BlockDevice& dev, reactor::Reactor& r, uint64_t off, uint64_t len, uint8_t* buf) {
  Pending rd;
  rd.io.op = BlockIo::Op::Read;
  rd.io.offset = off;
  rd.io.length = len;
  rd.io.buffer = buf;
  rd.io.user = &rd;
  rd.io.done = [](BlockIo* io, nvme::Status) { static_cast<Pending*>(io->user)->done = true; };
  dev.submit(&rd.io, r);
  return rd.done ? rd.io.read_data : nullptr;  // RAM reads complete inside submit
}

TEST(RamDevice, LongZeroingYieldsInSlicesAndKeepsTheEdges) {
  for (unsigned reactors : {1u, 2u}) {  // two: the region-locked path
    SCOPED_TRACE(reactors);
    std::string err;
    const uint64_t size = 64ull << 20;
    auto dev = make_ram(size, 512, reactors, err);
    ASSERT_TRUE(dev) << err;
    reactor::Reactor r(64);
    std::vector<uint8_t> data(1 << 20, 0xAB), back(1 << 20);
    for (uint64_t off = 0; off < size; off += data.size())
      ASSERT_GE(run(*dev, r, BlockIo::Op::Write, off, data.size(), data.data()), 0);
    // 60 MiB starting and ending mid-page: the edges are cleared by hand, the rest given back.
    const uint64_t zoff = 3 * 512, zlen = (60ull << 20) + 5 * 512;
    const int turns = run(*dev, r, BlockIo::Op::WriteZeroes, zoff, zlen, nullptr);
    EXPECT_GE(turns, 14) << "60 MiB in 4 MiB slices must yield to the reactor between them";
    EXPECT_GE(run(*dev, r, BlockIo::Op::Deallocate, 62ull << 20, 512, nullptr), 0);
    for (uint64_t off = 0; off < size; off += back.size()) {
      const uint8_t* got = read_back(*dev, r, off, back.size(), back.data());
      ASSERT_NE(got, nullptr);
      for (uint64_t i = 0; i < back.size(); ++i) {
        const uint64_t at = off + i;
        const bool zero = (at >= zoff && at < zoff + zlen) || (at >= (62ull << 20) && at < (62ull << 20) + 512);
        ASSERT_EQ(got[i], zero ? 0 : 0xAB) << "byte " << at;
      }
    }
  }
}

TEST(RamDevice, DeallocateGivesMemoryBackAndNeverFaultsInUnwrittenPages) {
  // Above the size that is faulted in at start: backed only where written.
  const uint64_t size = 9ull << 30;
  std::string err;
  auto dev = make_ram(size, 4096, 1, err);
  ASSERT_TRUE(dev) << err;
  reactor::Reactor r(64);
  const uint64_t rss0 = rss_bytes();
  ASSERT_GE(run(*dev, r, BlockIo::Op::Deallocate, 0, size, nullptr), 0);  // a whole-device trim (mkfs)
  const uint64_t rss1 = rss_bytes();
  EXPECT_LT(rss1, rss0 + (64ull << 20)) << "deallocating never-written blocks faulted "
                                        << (rss1 - rss0) / (1 << 20) << " MiB in";
  std::vector<uint8_t> data(1 << 20, 0x5A);
  for (uint64_t off = 0; off < (128ull << 20); off += data.size())
    ASSERT_GE(run(*dev, r, BlockIo::Op::Write, (5ull << 30) + off, data.size(), data.data()), 0);
  const uint64_t rss2 = rss_bytes();
  EXPECT_GT(rss2, rss1 + (100ull << 20)) << "128 MiB written should be resident";
  ASSERT_GE(run(*dev, r, BlockIo::Op::Deallocate, 5ull << 30, 128ull << 20, nullptr), 0);
  const uint64_t rss3 = rss_bytes();
  EXPECT_LT(rss3, rss1 + (32ull << 20)) << "deallocated blocks still hold " << (rss3 - rss1) / (1 << 20) << " MiB";
}

}  // namespace
}  // namespace nvtcp::backend::ram_device_test

// SPDX-License-Identifier: Apache-2.0
// The RBD backend's Compare and Write against a real cluster (run by rbd_gateway_test.sh with
// the cluster it starts): two devices on one image, each with a rados client of its own, as
// two gateways have. A match writes, a mismatch is Compare Failure and writes nothing, a range
// across an object boundary is refused, and increments of one counter made from both clients
// at once with compare-and-write are never lost: the operation is atomic at the OSD, across
// clients, not only within one target.
//
//   rbd_compare_write_check CEPH_CONF POOL IMAGE
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/block_device.hpp"
#include "reactor/reactor.hpp"

namespace rbd_compare_write_check {
namespace {

using nvtcp::backend::BlockDevice;
using nvtcp::backend::BlockIo;
using nvtcp::reactor::Reactor;
namespace sc = nvtcp::nvme::sc;

constexpr uint32_t kBlock = 512;

// One operation on dev, run on r until it completes; its status.
nvtcp::nvme::Status run(BlockDevice& dev, Reactor& r, BlockIo::Op op, uint64_t offset, uint64_t length, uint8_t* buf,
                        const uint8_t* compare = nullptr) {
  struct Wait {
    bool done = false;
    nvtcp::nvme::Status st = sc::Success;
  } w;
  BlockIo io;
  io.op = op;
  io.offset = offset;
  io.length = length;
  io.buffer = buf;
  io.compare = compare;
  io.user = &w;
  io.done = [](BlockIo* x, nvtcp::nvme::Status st) {
    auto* wait = static_cast<Wait*>(x->user);
    wait->st = st;
    wait->done = true;
  };
  dev.submit(&io, r);
  while (!w.done) r.run_once(100000);
  if (op == BlockIo::Op::Read && w.st.ok() && io.read_data != buf) std::memcpy(buf, io.read_data, length);
  return w.st;
}

std::vector<uint8_t> block_of(uint64_t v) {
  std::vector<uint8_t> b(kBlock, 0);
  std::memcpy(b.data(), &v, sizeof(v));
  return b;
}

uint64_t value_of(const std::vector<uint8_t>& b) {
  uint64_t v = 0;
  std::memcpy(&v, b.data(), sizeof(v));
  return v;
}

int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

std::unique_ptr<BlockDevice> open(const nvtcp::backend::RbdSpec& spec) {
  std::string err;
  auto d = nvtcp::backend::make_rbd(spec, kBlock, err);
  if (!d) std::fprintf(stderr, "make_rbd: %s\n", err.c_str());
  return d;
}

// n increments of the counter at offset through dev, each a read then a compare-and-write of
// the value read to one more, again on a Compare Failure; how many compare failures it met
// (a read-then-write done apart would lose the increments those stand for).
int increment(BlockDevice& dev, uint64_t offset, int n, std::atomic<bool>& failed) {
  Reactor r;
  int conflicts = 0;
  for (int i = 0; i < n && !failed;) {
    std::vector<uint8_t> cur(kBlock);
    if (!run(dev, r, BlockIo::Op::Read, offset, kBlock, cur.data()).ok()) {
      failed = true;
      break;
    }
    std::vector<uint8_t> next = block_of(value_of(cur) + 1);
    const auto st = run(dev, r, BlockIo::Op::CompareAndWrite, offset, kBlock, next.data(), cur.data());
    if (st == sc::CompareFailure) {
      ++conflicts;  // the other client went first: read again
      continue;
    }
    if (!st.ok()) {
      failed = true;
      break;
    }
    ++i;
  }
  return conflicts;
}

int main_(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: rbd_compare_write_check CEPH_CONF POOL IMAGE\n");
    return 2;
  }
  nvtcp::backend::RbdSpec spec;
  spec.config_file = argv[1];
  spec.pool = argv[2];
  spec.image = argv[3];
  auto a = open(spec), b = open(spec);  // two rados clients: two gateways
  if (!a || !b) return 1;
  check(a->atomic_compare_and_write(), "the RBD device compares and writes on the cluster");
  Reactor r;
  const uint64_t at = 8 * kBlock;
  auto zero = block_of(0), one = block_of(1), nine = block_of(9);
  check(run(*a, r, BlockIo::Op::Write, at, kBlock, zero.data()).ok(), "a block written through client A");
  check(run(*a, r, BlockIo::Op::CompareAndWrite, at, kBlock, one.data(), zero.data()).ok(),
        "compare-and-write through A that matches succeeds");
  std::vector<uint8_t> got(kBlock);
  check(run(*b, r, BlockIo::Op::Read, at, kBlock, got.data()).ok() && got == one, "client B reads what A wrote");
  check(run(*b, r, BlockIo::Op::CompareAndWrite, at, kBlock, nine.data(), zero.data()) == sc::CompareFailure,
        "compare-and-write through B that does not match is Compare Failure");
  check(run(*a, r, BlockIo::Op::Read, at, kBlock, got.data()).ok() && got == one,
        "and writes nothing (A still reads 1)");
  // Objects are 4 MiB: a range across the boundary is one librbd refuses.
  std::vector<uint8_t> two(2 * kBlock, 0);
  check(run(*a, r, BlockIo::Op::CompareAndWrite, (4u << 20) - kBlock, 2 * kBlock, two.data(), two.data()) ==
            sc::InvalidField,
        "a compare-and-write across an object boundary is Invalid Field");

  // The counter, from both clients at once.
  const uint64_t counter = 16 * kBlock;
  check(run(*a, r, BlockIo::Op::Write, counter, kBlock, zero.data()).ok(), "the counter set to 0");
  constexpr int kEach = 150;
  std::atomic<bool> failed{false}, go{false};
  int conflicts_a = 0, conflicts_b = 0;
  // Both start together, so that their read-compare-write cycles overlap.
  std::thread ta([&] {
    while (!go) std::this_thread::yield();
    conflicts_a = increment(*a, counter, kEach, failed);
  });
  std::thread tb([&] {
    while (!go) std::this_thread::yield();
    conflicts_b = increment(*b, counter, kEach, failed);
  });
  go = true;
  ta.join();
  tb.join();
  check(!failed, "no increment failed");
  const bool read_back = run(*a, r, BlockIo::Op::Read, counter, kBlock, got.data()).ok();
  check(read_back && value_of(got) == 2 * kEach,
        "the counter is " + std::to_string(value_of(got)) + " after " + std::to_string(kEach) +
            " increments from each client (" + std::to_string(conflicts_a + conflicts_b) +
            " compare failures retried): none lost");
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace rbd_compare_write_check

int main(int argc, char** argv) { return rbd_compare_write_check::main_(argc, argv); }

// Proves the steady-state data path allocates nothing: operator new is counted for the
// whole process (target reactor and host thread alike) while I/O runs, after a warm-up.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "../integration/test_target.hpp"
#include "engine/io_forwarder.hpp"
#include "engine/region.hpp"

namespace {
std::atomic<uint64_t> g_allocs{0};
std::atomic<bool> g_counting{false};
}  // namespace

void* operator new(size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, std::align_val_t a) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  size_t al = size_t(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

using namespace nvtcp;

namespace {
struct Io {
  host::QueuePair* qp;
  std::vector<uint8_t> buf;
  uint64_t lba = 0;
  bool write = false;
  uint64_t* done;
  uint64_t* errors;
  bool stop = false;
  uint64_t n = 0;
  void issue() {
    lba = (lba + 977) % 100000;
    write = !write;
    int rc = write ? qp->write(2, lba, uint32_t(buf.size() / 512), buf.data(), cb, this)
                   : qp->read(2, lba, uint32_t(buf.size() / 512), buf.data(), cb, this);
    if (rc) ++*errors;
  }
  static void cb(void* ctx, const host::Completion& c) {
    auto* io = static_cast<Io*>(ctx);
    ++*io->done;
    if (!c.status.ok()) ++*io->errors;
    if (!io->stop) io->issue();
  }
};

void run_steady_state(uint32_t io_size, bool digests, uint32_t in_capsule, bool busy_poll = false) {
  auto cfg = test::default_config();
  cfg.in_capsule_data = in_capsule;
  if (busy_poll) cfg.poll = "busy";
  test::RunningTarget t(cfg);
  host::ControllerOptions o;
  o.hdgst = o.ddgst = digests;
  o.busy_poll = busy_poll;
  std::string err;
  auto ctrl = host::Controller::connect(t.trid(), o, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(16, err);
  ASSERT_TRUE(qp) << err;
  uint64_t done = 0, errors = 0;
  std::vector<Io> ios(16);
  for (auto& io : ios) {
    io.qp = qp.get();
    io.buf.assign(io_size, 0x5A);
    io.done = &done;
    io.errors = &errors;
    io.lba = uint64_t(&io - ios.data()) * 4096;
  }
  for (auto& io : ios) io.issue();
  auto run_until = [&](uint64_t target_done) {
    while (done < target_done && !qp->failed()) qp->process_completions(1000);
  };
  run_until(4000);  // warm-up: pools, buffers and send rings reach their size
  g_allocs = 0;
  g_counting = true;
  run_until(done + 20000);
  g_counting = false;
  uint64_t allocs = g_allocs.load();
  for (auto& io : ios) io.stop = true;
  while (qp->outstanding() && !qp->failed()) qp->process_completions(1000);
  EXPECT_EQ(errors, 0u);
  EXPECT_EQ(allocs, 0u) << "allocations during 20000 steady-state I/Os of " << io_size << " bytes";
}
}  // namespace

TEST(ZeroAlloc, InCapsuleWritesAndReads4K) { run_steady_state(4096, false, 8192); }
TEST(ZeroAlloc, R2TWritesAndReads64KWithDigests) { run_steady_state(65536, true, 8192); }
// Both sides spinning: sockets are polled with recv() between io_uring receives.
TEST(ZeroAlloc, BusyPoll4K) { run_steady_state(4096, false, 8192, true); }

TEST(ZeroAlloc, CounterSeesAllocations) {
  // The hook itself must work, or the tests above prove nothing.
  g_allocs = 0;
  g_counting = true;
  auto* p = new std::vector<int>(10);
  g_counting = false;
  delete p;
  EXPECT_GE(g_allocs.load(), 2u);
}

// The offload engine's data path: an application's queue in a shared region carried over a
// host queue pair. After a warm-up, neither the engine (fetch, check, forward, answer) nor
// the application's side of the rings allocates.
TEST(ZeroAlloc, EngineForwarderSteadyState) {
  test::RunningTarget t;
  std::string err;
  auto ctrl = host::Controller::connect(t.trid(), {}, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(64, err);
  ASSERT_TRUE(qp) << err;
  auto layout = engine::RegionLayout::compute(2, 64, 1 << 20);
  ASSERT_TRUE(layout);
  std::vector<uint8_t> region(layout->total_bytes + 4096);
  uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(region.data()) + 4095) & ~uintptr_t(4095));
  layout->write_header(base);
  engine::IoForwarder fwd(*qp);
  fwd.add_queue(nullptr, 1, layout->queue_pair(base, 1), base + layout->data_offset, layout->data_bytes);
  engine::AppQueuePair app(layout->queue_pair(base, 1));
  uint64_t completed = 0, errors = 0;
  uint16_t cid = 0;
  auto turn = [&] {
    while (app.sq_free() > 0) {
      wire::Sqe s{};
      s.opc = uint8_t(cid & 1 ? wire::IoOpcode::Write : wire::IoOpcode::Read);
      s.flags = wire::kSqeFlagsPsdtSgl;
      s.cid = cid;
      s.nsid = 2;
      s.cdw10 = (cid * 8u) % 100000;
      s.cdw12 = 7;  // 8 blocks: 4 KiB
      s.sgl.addr = (cid % 128) * 4096u;
      s.sgl.length = 4096;
      ++cid;
      app.submit(s);
    }
    app.ring_sq();
    fwd.poll();
    wire::Cqe c;
    while (app.poll(c)) {
      ++completed;
      errors += (c.status >> 1) != 0;
    }
    app.ring_cq();
  };
  while (completed < 4000) turn();  // warm-up
  g_allocs = 0;
  g_counting = true;
  const uint64_t until = completed + 20000;
  while (completed < until) turn();
  g_counting = false;
  EXPECT_EQ(errors, 0u);
  EXPECT_EQ(g_allocs.load(), 0u) << "allocations during 20000 I/Os through the engine";
  while (fwd.in_flight() > 0) fwd.poll();
}

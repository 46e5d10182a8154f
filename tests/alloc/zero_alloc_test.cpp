// SPDX-License-Identifier: Apache-2.0
// Proves the steady-state data path allocates nothing: operator new is counted for the
// whole process (target reactor and host thread alike) while I/O runs, after a warm-up.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "../integration/test_target.hpp"
#include "engine/engine.hpp"
#include "engine/io_forwarder.hpp"
#include "shm/region.hpp"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <thread>

#include <openssl/crypto.h>

#include "auth/keys.hpp"

// The replaced operators below allocate with malloc and free with free; GCC, inlining the
// standard library's allocations, cannot see that they match.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

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

// OpenSSL's own allocations (TLS records, cipher contexts) are counted too: its allocator is
// replaced before it allocates anything.
namespace {
void* counted_malloc(size_t n, const char*, int) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n);
}
void* counted_realloc(void* p, size_t n, const char*, int) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  return std::realloc(p, n);
}
void plain_free(void* p, const char*, int) { std::free(p); }
__attribute__((constructor)) void count_openssl_allocations() {
  CRYPTO_set_mem_functions(counted_malloc, counted_realloc, plain_free);
}
}  // namespace

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

// Both sides in one poll mode; the default (hybrid) unless said.
void run_steady_state(uint32_t io_size, bool digests, uint32_t in_capsule, const char* poll = "hybrid",
                      bool tls = false) {
  auto cfg = test::default_config();
  cfg.in_capsule_data = in_capsule;
  cfg.poll = poll;
  host::ControllerOptions o;
  if (tls) {
    // Every byte in TLS: the listener requires it, the host holds the PSK.
    const char* host = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
    const char* psk = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
    cfg.listeners.at(0).tls_required = true;
    auto& sc = cfg.subsystems.at(0);
    sc.allow_any_host = false;
    sc.hosts = {host};
    auto key = std::make_shared<auth::ConfiguredPsk>();
    std::string err;
    ASSERT_TRUE(auth::parse_tls_psk(psk, *key, err)) << err;
    sc.host_keys[host].psk = key;
    o.hostnqn = host;
    o.tls = true;
    o.tls_key = psk;
  }
  test::RunningTarget t(cfg);
  o.hdgst = o.ddgst = digests;
  ASSERT_TRUE(host::parse_poll_mode(poll, o.poll));
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
TEST(ZeroAlloc, BusyPoll4K) { run_steady_state(4096, false, 8192, "busy"); }
TEST(ZeroAlloc, InterruptPoll4K) { run_steady_state(4096, false, 8192, "interrupt"); }
// In TLS: records are written into recycled chunks and read into fixed buffers, and OpenSSL's
// own allocations are counted too.
TEST(ZeroAlloc, Tls4KInCapsule) { run_steady_state(4096, false, 8192, "hybrid", true); }
TEST(ZeroAlloc, Tls64KWithR2TAndDigests) { run_steady_state(65536, true, 8192, "hybrid", true); }

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
  auto layout = shm::RegionLayout::compute(2, 64, 1 << 20);
  ASSERT_TRUE(layout);
  std::vector<uint8_t> region(layout->total_bytes + 4096);
  uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(region.data()) + 4095) & ~uintptr_t(4095));
  layout->write_header(base);
  engine::IoForwarder fwd(*qp);
  fwd.add_queue(nullptr, 1, layout->queue_pair(base, 1), base + layout->data_offset, layout->data_bytes);
  shm::AppQueuePair app(layout->queue_pair(base, 1));
  uint64_t completed = 0, errors = 0;
  uint16_t cid = 0;
  auto turn = [&] {
    while (app.sq_free() > 0) {
      nvme::Sqe s{};
      s.opc = uint8_t(cid & 1 ? nvme::IoOpcode::Write : nvme::IoOpcode::Read);
      s.flags = nvme::kSqeFlagsPsdtSgl;
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
    nvme::Cqe c;
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

namespace nvtcp {
namespace {

// Counts the system calls of one thread: a seccomp filter on that thread sends each to a
// supervisor thread (SECCOMP_RET_USER_NOTIF), which counts it while counting is on and lets
// it proceed (SECCOMP_USER_NOTIF_FLAG_CONTINUE). Nothing is refused.
class SyscallCounter {
 public:
  // The supervisor starts first: once the filter is on, the watched thread's own clone()
  // would wait for a supervisor it had not started yet.
  SyscallCounter() : supervisor_([this] { supervise(); }) {}
  ~SyscallCounter() {
    stop_ = true;
    if (supervisor_.joinable()) supervisor_.join();
    if (listener_ >= 0) close(listener_);
  }
  // Called on the thread to watch (the filter stays with it until it exits).
  bool watch_this_thread() {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
    sock_filter notify = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF);
    sock_fprog prog{1, &notify};
    listener_ = int(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog));
    return listener_ >= 0;
  }
  void set_counting(bool on) { counting_ = on; }
  uint64_t count() const { return count_; }
  int first_nr() const { return first_nr_; }

 private:
  void supervise() {
    seccomp_notif req{};
    seccomp_notif_resp resp{};
    while (!stop_) {
      if (listener_ < 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      pollfd p{listener_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      if (p.revents & (POLLHUP | POLLERR)) break;  // the watched thread is gone
      std::memset(&req, 0, sizeof(req));
      if (ioctl(listener_, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) continue;
      if (counting_) {
        if (count_++ == 0) first_nr_ = req.data.nr;
      }
      std::memset(&resp, 0, sizeof(resp));
      resp.id = req.id;
      resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
      ioctl(listener_, SECCOMP_IOCTL_NOTIF_SEND, &resp);
    }
  }
  std::atomic<int> listener_{-1};
  std::thread supervisor_;
  std::atomic<bool> stop_{false}, counting_{false};
  std::atomic<uint64_t> count_{0};
  std::atomic<int> first_nr_{-1};
};

// The offload engine end to end, polling on both sides: an application (the host library,
// trtype:engine, busy polling) keeps 32 reads and writes in flight through an in-process
// engine to an in-process target. After a warm-up, nothing in the process allocates, and the
// application's thread makes no system call at all: it writes SQEs and reads CQEs in shared
// memory, and the polling engine asks for no doorbell notice.
TEST(ZeroAlloc, OffloadEngineEndToEndAndNoSystemCallOnThePollingApplication) {
  test::RunningTarget t;
  engine::EngineOptions eo;
  eo.socket_path = "/tmp/nvtcp-zero-alloc-" + std::to_string(getpid()) + ".sock";
  eo.controllers = {t.trid()};
  eo.idle_spin_us = -1;  // the engine core never sleeps
  eo.queue_depth = 64;
  engine::Engine eng(eo);
  std::string err;
  ASSERT_TRUE(eng.start(err)) << err;
  std::atomic<bool> stop{false};
  std::thread control([&] { eng.run(stop); });

  host::TransportId trid;
  trid.trtype = "engine";
  trid.traddr = eo.socket_path;
  trid.subnqn = test::kTestNqn;
  host::ControllerOptions co;
  co.poll = PollMode::Busy;
  co.io_queues = 1;
  auto ctrl = host::Controller::connect(trid, co, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(32, err);
  ASSERT_TRUE(qp) << err;
  auto* buf = static_cast<uint8_t*>(ctrl->alloc_io_buffer(32 * 4096));
  ASSERT_NE(buf, nullptr);

  struct State {
    host::QueuePair* qp;
    uint8_t* buf;
    uint64_t completed = 0, errors = 0, issued = 0;
  } st{qp.get(), buf};
  static auto on_done = [](void* ctx, const host::Completion& c) {
    auto* s = static_cast<State*>(ctx);
    ++s->completed;
    s->errors += !c.status.ok();
  };
  auto issue = [&] {
    while (st.qp->outstanding() < st.qp->depth()) {
      uint8_t* b = st.buf + (st.issued % 32) * 4096;
      const uint64_t lba = (st.issued * 8) % 100000;
      const int rc = st.issued & 1 ? st.qp->write(2, lba, 8, b, on_done, &st) : st.qp->read(2, lba, 8, b, on_done, &st);
      if (rc != 0) break;
      ++st.issued;
    }
  };
  SyscallCounter sys;
  bool watched = false;
  uint64_t allocs = 0, syscalls = 0;
  int first_nr = -1;
  // A guard against a lost completion: the application's loops would spin for ever. The test
  // thread gives them a minute, then tells them to give up (an atomic load: no system call on
  // the watched thread) and says where they were.
  std::atomic<bool> give_up{false}, app_done{false};
  const char* stage = "warm-up";
  std::thread app([&] {
    while (st.completed < 4000 && !give_up.load(std::memory_order_relaxed)) {  // before the filter
      issue();
      st.qp->process_completions(0);
    }
    if (give_up) return;
    watched = sys.watch_this_thread();
    if (!watched) return app_done.store(true);
    stage = "counted I/O";
    g_allocs = 0;
    g_counting = true;
    sys.set_counting(true);
    const uint64_t until = st.completed + 20000;
    while (st.completed < until && !give_up.load(std::memory_order_relaxed)) {
      issue();
      st.qp->process_completions(0);
    }
    sys.set_counting(false);
    g_counting = false;
    allocs = g_allocs.load();
    syscalls = sys.count();
    first_nr = sys.first_nr();
    if (give_up) return;
    stage = "drain";
    while (st.qp->outstanding() > 0 && !give_up.load(std::memory_order_relaxed)) st.qp->process_completions(0);
    app_done.store(true);
  });
  constexpr int kGuardMs = 60000;
  const bool finished = test::wait_for([&] { return app_done.load(); }, kGuardMs);
  give_up = true;
  app.join();
  if (!finished) {
    stop = true;
    control.join();
  }
  ASSERT_TRUE(finished) << "the application's " << stage << " loop made no end in " << kGuardMs / 1000
                        << " s: " << st.completed
                        << " completed of " << st.issued << " issued, " << st.qp->outstanding()
                        << " outstanding, qpair failed " << st.qp->failed() << "; engine forwarded "
                        << eng.stats().forwarded << ", completed " << eng.stats().completed;
  if (!watched) GTEST_SKIP() << "seccomp user notification is not available here";
  EXPECT_EQ(st.errors, 0u);
  EXPECT_EQ(allocs, 0u) << "allocations in the process during 20000 I/Os through the engine";
  EXPECT_EQ(syscalls, 0u) << "system calls on the polling application's thread during 20000 I/Os (the first: "
                          << first_nr << ")";
  // The engine's cores publish their counters every so many turns: wait for them to show.
  EXPECT_TRUE(test::wait_for([&] { return eng.stats().forwarded >= 24000u; }, 10000)) << eng.stats().forwarded;
  ctrl->free_io_buffer(buf);
  qp.reset();
  ctrl.reset();
  stop = true;
  control.join();
}

}  // namespace
}  // namespace nvtcp

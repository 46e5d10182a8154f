// SPDX-License-Identifier: Apache-2.0
// Target resource limits: a crowd of connections that never send ICReq, the connection cap,
// a host that never reads its responses, the buffer memory caps, and keep-alive expiry.
// Each case checks that other hosts are still served and that the target's counts return
// to where they started.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../support/fault_proxy.hpp"
#include "nvtcp/host.hpp"
#include "test_target.hpp"

namespace nvtcp::test::resource_limits_test {
namespace {

using host::Controller, host::ControllerOptions, host::QueuePair;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kFileNsid = 4;  // file, 64 MiB, 512-byte blocks: reads need a buffer
constexpr int kDeadlineMs = 20000;

uint64_t rss_kib() { return rss_bytes() / 1024; }

void raise_nofile() {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int raw_connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) < 0) {
    int e = -errno;
    ::close(fd);
    return e;
  }
  return fd;
}

// True when the peer has closed fd (EOF or reset) within ms.
bool closed_by_peer(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, ms) != 1) return false;
  char c;
  return ::recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

using Batch = CompletionBatch;

// A controller whose connections all go through proxy to t.
std::unique_ptr<Controller> connect_through(const FaultProxy& proxy, const RunningTarget& t, std::string& err) {
  auto tid = t.trid();
  tid.trsvcid = proxy.port();
  return Controller::connect(tid, ControllerOptions{}, err);
}

// Drives every queue pair (they share this thread's reactor) until pred or the deadline.
bool drive(const std::vector<QueuePair*>& qps, const std::function<bool()>& pred, int ms = kDeadlineMs) {
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  while (!pred()) {
    if (Clock::now() > end) return false;
    for (auto* q : qps) q->process_completions(q == qps.front() ? 1000 : 0);
  }
  return true;
}

::testing::AssertionResult write_read_compare(QueuePair& qp, uint32_t nsid, uint64_t lba, uint32_t len,
                                              uint32_t seed) {
  auto out = pattern(len, seed);
  std::vector<uint8_t> in(len);
  Batch b;
  auto& w = b.add();
  if (int rc = qp.write(nsid, lba, len / 512, out.data(), Batch::cb, &w); rc != 0)
    return ::testing::AssertionFailure() << "write submit: " << rc;
  if (!drive({&qp}, [&] { return b.all_done(); })) return ::testing::AssertionFailure() << "write hung";
  if (!w.cpl.status.ok()) return ::testing::AssertionFailure() << "write: " << nvme::status_name(w.cpl.status);
  auto& r = b.add();
  if (int rc = qp.read(nsid, lba, len / 512, in.data(), Batch::cb, &r); rc != 0)
    return ::testing::AssertionFailure() << "read submit: " << rc;
  if (!drive({&qp}, [&] { return b.all_done(); })) return ::testing::AssertionFailure() << "read hung";
  if (!r.cpl.status.ok()) return ::testing::AssertionFailure() << "read: " << nvme::status_name(r.cpl.status);
  if (in != out) return ::testing::AssertionFailure() << "data mismatch";
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult fresh_client_ok(RunningTarget& t, uint32_t seed) {
  HostSession s;
  if (auto r = open_session(t.trid(), ControllerOptions{}, 16, s); !r) return r << " (a fresh client)";
  return write_read_compare(*s.qp, kRamNsid, 100000 + seed * 300, 131072 + 4096, seed);
}

class TempFile {
 public:
  TempFile() {
    char tmpl[] = "/tmp/nvtcp-limits-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0) throw std::runtime_error("mkstemp");
    ::close(fd);
    path_ = tmpl;
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ------------------------------------------------------------------ half-open crowds

TEST(ResourceLimits, ThousandConnectionsWithoutICReq) {
  raise_nofile();
  auto cfg = default_config();
  cfg.icreq_timeout_ms = 5000;  // long enough for the host's I/O below to happen while the crowd waits
  RunningTarget t(cfg);
  std::string err;
  auto ctrl = Controller::connect(t.trid(), ControllerOptions{}, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(16, err);
  ASSERT_TRUE(qp) << err;
  ASSERT_TRUE(write_read_compare(*qp, kRamNsid, 0, 65536, 1));
  const uint32_t base = t.target().live_connections();
  const uint64_t rss_before = rss_kib();
  // Every buffer byte the target counts belongs to a live connection (data buffers and
  // request pools).
  auto buffers_accounted = [&] {
    uint64_t sum = 0;
    for (auto& c : t.target().connection_info()) sum += c.buffer_bytes + c.pool_bytes;
    return sum == t.target().buffer_bytes();
  };

  constexpr int kCrowd = 1000;
  std::vector<int> fds;
  for (int i = 0; i < kCrowd; ++i) {
    int fd = raw_connect(t.port());
    ASSERT_GE(fd, 0) << "connection " << i << ": " << strerror(-fd);
    // Some send part of an ICReq header and then nothing.
    if (i % 100 == 0) {
      ASSERT_EQ(::send(fd, "\x00\x00\x80\x00\x80\x00\x00\x00", 8, MSG_NOSIGNAL), 8);
    }
    fds.push_back(fd);
  }
  EXPECT_TRUE(wait_for([&] { return t.target().live_connections() >= base + kCrowd; }, kDeadlineMs))
      << t.target().live_connections() << " live";
  const uint64_t rss_crowd = rss_kib();
  uint64_t crowd_buffers = 0;
  for (auto& c : t.target().connection_info())
    if (!c.connected) crowd_buffers += c.buffer_bytes;
  EXPECT_EQ(crowd_buffers, 0u) << "connections that never sent ICReq hold data buffers";
  EXPECT_TRUE(buffers_accounted());
  // While the crowd waits, a real host is served: its queue, and a new controller.
  EXPECT_TRUE(write_read_compare(*qp, kRamNsid, 2000, 1u << 20, 2));
  EXPECT_TRUE(fresh_client_ok(t, 3));
  EXPECT_GE(t.target().live_connections(), base + kCrowd) << "the crowd was closed before the ICReq timeout";

  // After the ICReq timeout every one of them is closed by the target.
  auto end = Clock::now() + std::chrono::milliseconds(kDeadlineMs);
  int closed = 0;
  for (int fd : fds) {
    int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count());
    closed += closed_by_peer(fd, std::max(left, 0));
    ::close(fd);
  }
  EXPECT_EQ(closed, kCrowd);
  EXPECT_TRUE(wait_for([&] { return t.target().live_connections() == base; }, kDeadlineMs))
      << t.target().live_connections() << " live, expected " << base;
  EXPECT_TRUE(buffers_accounted());
  EXPECT_EQ(t.target().usage().refused_connections.load(), 0u);
  EXPECT_TRUE(write_read_compare(*qp, kRamNsid, 4000, 8192, 4));
  std::printf("RSS: %llu KiB before, %llu KiB with %d half-open connections, %llu KiB after\n",
              (unsigned long long)rss_before, (unsigned long long)rss_crowd, kCrowd,
              (unsigned long long)rss_kib());
}

TEST(ResourceLimits, MaxConnectionsClosesOnlyTheNewcomers) {
  auto cfg = default_config();
  cfg.max_connections = 8;
  cfg.icreq_timeout_ms = 60000;  // the held connections stay for the whole test
  RunningTarget t(cfg);
  std::vector<int> held;
  for (int i = 0; i < 8; ++i) {
    int fd = raw_connect(t.port());
    ASSERT_GE(fd, 0);
    held.push_back(fd);
  }
  ASSERT_TRUE(wait_for([&] { return t.target().live_connections() == 8; }, kDeadlineMs));
  // The ninth is accepted by the kernel and closed by the target at once.
  int extra = raw_connect(t.port());
  ASSERT_GE(extra, 0);
  EXPECT_TRUE(closed_by_peer(extra, kDeadlineMs)) << "a connection over the limit was kept";
  ::close(extra);
  EXPECT_EQ(t.target().usage().refused_connections.load(), 1u);
  for (int fd : held) EXPECT_FALSE(closed_by_peer(fd, 0)) << "an existing connection was closed";
  EXPECT_EQ(t.target().live_connections(), 8u);

  // Room for a real host (admin + one I/O queue) once two go.
  ::close(held.back());
  held.pop_back();
  ::close(held.back());
  held.pop_back();
  ASSERT_TRUE(wait_for([&] { return t.target().live_connections() == 6; }, kDeadlineMs));
  {
    std::string err;
    auto ctrl = Controller::connect(t.trid(), ControllerOptions{}, err);
    ASSERT_TRUE(ctrl) << err;
    auto qp = ctrl->create_io_qpair(8, err);
    ASSERT_TRUE(qp) << err;
    EXPECT_TRUE(write_read_compare(*qp, kRamNsid, 0, 131072, 5));
    // Full again: the next host cannot get its admin queue.
    auto denied = Controller::connect(t.trid(), ControllerOptions{}, err);
    EXPECT_FALSE(denied);
    EXPECT_EQ(t.target().usage().refused_connections.load(), 2u);
  }
  for (int fd : held) ::close(fd);
  EXPECT_TRUE(wait_for([&] { return t.target().live_connections() == 0; }, kDeadlineMs));
  EXPECT_TRUE(fresh_client_ok(t, 6));
}

// ------------------------------------------------------------------ memory

// A host that never reads its responses, on a namespace whose reads need buffers: the
// connection stops taking on commands once its send queue is over the cap, and its buffers
// stay under the per-connection limit.
TEST(ResourceLimits, NeverReadingHostIsBounded) {
  TempFile file;
  auto cfg = default_config(file.path());
  cfg.max_send_queue_bytes = 1u << 20;
  cfg.max_connection_buffer_memory = 4u << 20;
  RunningTarget t(cfg);
  const uint32_t base = t.target().live_connections();
  FaultProxy proxy(t.port());
  std::string err;
  {
    auto slow = connect_through(proxy, t, err);
    ASSERT_TRUE(slow) << err;
    Batch sb;
    auto sqp = slow->create_io_qpair(128, err);
    ASSERT_TRUE(sqp) << err;
    proxy.stall(1, Direction::ToHost, true);
    std::vector<std::vector<uint8_t>> bufs(128, std::vector<uint8_t>(131072));
    for (size_t i = 0; i < bufs.size(); ++i) {
      auto& o = sb.add();
      ASSERT_EQ(sqp->read(kFileNsid, i * 256, 256, bufs[i].data(), Batch::cb, &o), 0);
    }
    target::ConnectionInfo ci;
    auto held_back = [&] {
      sqp->process_completions(0);
      for (auto& c : t.target().connection_info())
        if (c.qid == 1 && c.waiting > 0) return ci = c, true;
      return false;
    };
    ASSERT_TRUE(wait_for(held_back, kDeadlineMs)) << "the target never held a command back";
    EXPECT_LE(ci.send_queue_peak, cfg.max_send_queue_bytes + 131072 + 4096);
    EXPECT_LE(ci.buffer_bytes, cfg.max_connection_buffer_memory);
    EXPECT_LE(t.target().usage().buffer_peak.load(), cfg.max_connection_buffer_memory + (1u << 20))
        << "more buffer memory than the slow connection's cap plus the other connections' small ones";
    // Others are served meanwhile, from the same file namespace too.
    {
      auto other = Controller::connect(t.trid(), ControllerOptions{}, err);
      ASSERT_TRUE(other) << err;
      auto oqp = other->create_io_qpair(16, err);
      ASSERT_TRUE(oqp) << err;
      EXPECT_TRUE(write_read_compare(*oqp, kFileNsid, 50000, 1u << 20, 7));
      EXPECT_TRUE(write_read_compare(*oqp, kRamNsid, 50000, 131072, 8));
    }
    for (auto& c : t.target().connection_info())
      if (c.qid == 1) {
        EXPECT_LE(c.buffer_bytes, cfg.max_connection_buffer_memory);
      }
    // The slow host disconnects with its reads outstanding.
  }
  EXPECT_TRUE(wait_for([&] { return t.target().live_connections() == base; }, kDeadlineMs));
  EXPECT_EQ(t.target().buffer_bytes(), 0u);
}

// Many 1 MiB writes from several hosts against a 4 MiB budget: commands wait for memory
// (their R2Ts go out later) and none fails.
TEST(ResourceLimits, GlobalBufferBudgetMakesWritesWaitNotFail) {
  auto cfg = default_config();
  cfg.max_buffer_memory = 4u << 20;
  RunningTarget t(cfg);
  std::string err;
  std::vector<std::unique_ptr<Controller>> ctrls;
  std::vector<std::unique_ptr<QueuePair>> qps;
  Batch b;
  constexpr int kHosts = 3, kPerHost = 8;
  constexpr uint32_t kLen = 1u << 20;
  std::vector<std::vector<uint8_t>> data;
  for (int h = 0; h < kHosts; ++h) {
    ctrls.push_back(Controller::connect(t.trid(), ControllerOptions{}, err));
    ASSERT_TRUE(ctrls.back()) << err;
    qps.push_back(ctrls.back()->create_io_qpair(kPerHost, err));
    ASSERT_TRUE(qps.back()) << err;
  }
  std::vector<QueuePair*> raw;
  for (auto& q : qps) raw.push_back(q.get());
  for (int round = 0; round < 2; ++round) {
    b.ops.clear();
    data.clear();
    for (int h = 0; h < kHosts; ++h) {
      for (int i = 0; i < kPerHost; ++i) {
        data.push_back(pattern(kLen, uint32_t(round * 100 + h * kPerHost + i)));
        auto& o = b.add();
        uint64_t lba = uint64_t(h * kPerHost + i) * (kLen / 512);
        ASSERT_EQ(qps[h]->write(kRamNsid, lba, kLen / 512, data.back().data(), Batch::cb, &o), 0);
      }
    }
    ASSERT_TRUE(drive(raw, [&] { return b.all_done(); })) << "writes hung";
    EXPECT_EQ(b.failures(), 0u);
  }
  EXPECT_LE(t.target().usage().buffer_peak.load(), cfg.max_buffer_memory);
  EXPECT_GT(t.target().usage().memory_waits.load(), 0u) << "24 MiB of writes never met the 4 MiB budget";
  // What was written is there.
  for (int h = 0; h < kHosts; ++h) {
    for (int i = 0; i < kPerHost; ++i) {
      std::vector<uint8_t> in(kLen);
      Batch rb;
      auto& o = rb.add();
      uint64_t lba = uint64_t(h * kPerHost + i) * (kLen / 512);
      ASSERT_EQ(qps[h]->read(kRamNsid, lba, kLen / 512, in.data(), Batch::cb, &o), 0);
      ASSERT_TRUE(drive(raw, [&] { return rb.all_done(); }));
      EXPECT_TRUE(o.cpl.status.ok());
      EXPECT_TRUE(in == data[size_t(h * kPerHost + i)]) << "host " << h << " write " << i;
    }
  }
  qps.clear();
  ctrls.clear();
  EXPECT_TRUE(wait_for([&] { return t.target().live_connections() == 0; }, kDeadlineMs));
  EXPECT_EQ(t.target().buffer_bytes(), 0u);
}

// In-capsule data arrives with its command and cannot wait: when the connection is out of
// buffer memory the command ends with Command Interrupted (retry), and nothing else breaks.
TEST(ResourceLimits, InCapsuleDataWithoutMemoryIsInterrupted) {
  auto cfg = default_config();
  cfg.max_connection_buffer_memory = 2u << 20;
  RunningTarget t(cfg);
  FaultProxy proxy(t.port());
  std::string err;
  auto ctrl = connect_through(proxy, t, err);
  ASSERT_TRUE(ctrl) << err;
  Batch b;
  auto qp = ctrl->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  // The R2Ts for two 1 MiB writes never reach the host, so their buffers (the whole
  // per-connection budget) stay taken.
  proxy.stall(1, Direction::ToHost, true);
  const auto big = pattern(1u << 20, 30), small = pattern(8192, 31);
  auto& w1 = b.add();
  auto& w2 = b.add();
  ASSERT_EQ(qp->write(kRamNsid, 0, 2048, big.data(), Batch::cb, &w1), 0);
  ASSERT_EQ(qp->write(kRamNsid, 4096, 2048, big.data(), Batch::cb, &w2), 0);
  ASSERT_TRUE(drive({qp.get()}, [&] {
    for (auto& c : t.target().connection_info())
      if (c.qid == 1 && c.buffer_bytes >= (2u << 20)) return true;
    return false;
  }));
  auto& w3 = b.add();
  ASSERT_EQ(qp->write(kRamNsid, 8192, 16, small.data(), Batch::cb, &w3), 0);  // in-capsule
  ASSERT_TRUE(drive({qp.get()}, [&] { return t.target().usage().memory_waits.load() > 0; }));
  proxy.stall(1, Direction::ToHost, false);
  ASSERT_TRUE(drive({qp.get()}, [&] { return b.all_done(); }));
  EXPECT_TRUE(w1.cpl.status.ok()) << nvme::status_name(w1.cpl.status);
  EXPECT_TRUE(w2.cpl.status.ok()) << nvme::status_name(w2.cpl.status);
  EXPECT_EQ(w3.cpl.status, nvme::Status(nvme::Sct::Generic, 0x21)) << nvme::status_name(w3.cpl.status);
  // The retry the status asks for succeeds once memory is back.
  EXPECT_TRUE(write_read_compare(*qp, kRamNsid, 8192, 8192, 32));
  EXPECT_FALSE(qp->failed());
}

// A host that stops sending the H2CData its R2Ts asked for would keep the write buffers
// (up to the per-connection budget) for as long as its keep-alives go on: after
// h2c_data_timeout_ms the target closes that connection and frees them. The host keeps
// its controller and other queues. Real time on purpose: end to end through a proxy, with
// the host library failing the write (generous waits: 40 x the timeout); when the target
// closes, to the millisecond, is tested on a stepped clock in connection_deadlines_test.cpp.
TEST(ResourceLimits, StalledH2CDataClosesTheConnectionAndFreesItsBuffers) {
  auto cfg = default_config();
  cfg.h2c_data_timeout_ms = 500;
  RunningTarget t(cfg);
  FaultProxy proxy(t.port());
  std::string err;
  auto ctrl = connect_through(proxy, t, err);
  ASSERT_TRUE(ctrl) << err;
  auto healthy = ctrl->create_io_qpair(8, err);
  ASSERT_TRUE(healthy) << err;
  auto qp = ctrl->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  // Connection 2 (the second I/O queue): its R2Ts never reach the host.
  proxy.stall(2, Direction::ToHost, true);
  Batch b;
  const auto big = pattern(1u << 20, 40);
  auto& w = b.add();
  ASSERT_EQ(qp->write(kRamNsid, 0, 2048, big.data(), Batch::cb, &w), 0);
  ASSERT_TRUE(drive({qp.get()}, [&] {
    for (auto& c : t.target().connection_info())
      if (c.qid == 2 && c.buffer_bytes >= (1u << 20)) return true;
    return false;
  }));
  const uint64_t held = t.target().buffer_bytes();
  // The target gives up on it, closes it and frees the megabyte (the admin queue keeps the
  // small buffers its commands used).
  ASSERT_TRUE(drive({qp.get()}, [&] { return t.target().live_connections() == 2; }));
  EXPECT_TRUE(wait_for([&] { return t.target().buffer_bytes() + (1u << 20) <= held; }, kDeadlineMs))
      << t.target().buffer_bytes() << " bytes still held, " << held << " before";
  // Once the proxy passes the close on, the host fails that queue's write.
  proxy.stall(2, Direction::ToHost, false);
  ASSERT_TRUE(drive({qp.get()}, [&] { return b.all_done(); }));
  EXPECT_FALSE(w.cpl.status.ok()) << "a write whose connection was closed cannot have succeeded";
  // The controller and its other queue are untouched.
  EXPECT_TRUE(write_read_compare(*healthy, kRamNsid, 8192, 262144, 41));
  EXPECT_FALSE(healthy->failed());
}

// Idle gaps between writes (no H2C data timeout) are tested on a stepped clock:
// H2CData.IdleGapsBetweenWritesAreNotATimeout in tests/unit/connection_deadlines_test.cpp.

// ------------------------------------------------------------------ keep-alive

// Real time on purpose: end to end with three I/O queues holding R2T buffers, and the host
// library seeing each queue fail (waits of 10 x KATO). Expiry timing itself is tested on a
// stepped clock in tests/unit/connection_deadlines_test.cpp.
TEST(ResourceLimits, KeepAliveExpiryFreesEveryConnectionOfTheController) {
  RunningTarget t;
  ControllerOptions o;
  o.kato_ms = 2000;
  o.keep_alive_interval_ms = 3600000;  // never sent: the target must notice
  std::string err;
  auto ctrl = Controller::connect(t.trid(), o, err);
  ASSERT_TRUE(ctrl) << err;
  std::vector<std::unique_ptr<QueuePair>> qps;
  for (int i = 0; i < 3; ++i) {
    qps.push_back(ctrl->create_io_qpair(8, err));
    ASSERT_TRUE(qps.back()) << err;
    // R2T writes leave data buffers behind in the target's request slots.
    EXPECT_TRUE(write_read_compare(*qps.back(), kRamNsid, uint64_t(i) * 1000, 262144, uint32_t(10 + i)));
  }
  EXPECT_EQ(t.target().live_connections(), 4u);
  EXPECT_GE(t.target().buffer_bytes(), 3u * 262144);
  EXPECT_TRUE(wait_for([&] { return t.target().live_connections() == 0; }, kDeadlineMs))
      << t.target().live_connections() << " connections outlived their controller";
  EXPECT_EQ(t.target().buffer_bytes(), 0u);
  EXPECT_EQ(t.target().state().subsystems()[0]->controller_count(), 0u);
  for (auto& q : qps) {
    EXPECT_TRUE(wait_for(
        [&] {
          q->process_completions(1000);
          return q->failed();
        },
        kDeadlineMs));
  }
  EXPECT_TRUE(fresh_client_ok(t, 12));
}

// ------------------------------------------------------------------ long commands

// Deallocating a RAM namespace runs in slices between other commands: one host's storm of
// whole-namespace Dataset Management commands (8 x 256 ranges of 64 MiB; they used to memset
// 16 GiB each on the reactor, seconds apiece) does not hold up another host's 4 KiB read on
// the same reactor, which completes while the storm is still going.
TEST(ResourceLimits, DeallocateStormDoesNotHoldUpOtherHosts) {
  RunningTarget t;  // one reactor: both hosts' queues share it
  std::string err;
  ControllerOptions a_opts, b_opts;
  a_opts.hostnqn = "nqn.2026-11.io.nvtcp:storm";
  b_opts.hostnqn = "nqn.2026-11.io.nvtcp:reader";
  auto a = Controller::connect(t.trid(), a_opts, err);
  ASSERT_TRUE(a) << err;
  auto b = Controller::connect(t.trid(), b_opts, err);
  ASSERT_TRUE(b) << err;
  auto qa = a->create_io_qpair(16, err);
  ASSERT_TRUE(qa) << err;
  auto qb = b->create_io_qpair(16, err);
  ASSERT_TRUE(qb) << err;
  ASSERT_TRUE(write_read_compare(*qb, kRamNsid, 4096, 4096, 9));  // something to read back
  std::vector<nvme::DsmRange> ranges(256);
  for (auto& r : ranges) r = {0, uint32_t((64u << 20) / 512), 0};
  Batch storm;
  constexpr int kStorm = 8;
  for (int i = 0; i < kStorm; ++i) ASSERT_EQ(qa->deallocate(kRamNsid, ranges.data(), 256, Batch::cb, &storm.add()), 0);
  qa->process_completions(0);  // the storm leaves first
  std::vector<uint8_t> in(4096);
  Batch read;
  auto& r = read.add();
  const auto t0 = Clock::now();
  ASSERT_EQ(qb->read(kRamNsid, 4096, 8, in.data(), Batch::cb, &r), 0);
  ASSERT_TRUE(drive({qb.get(), qa.get()}, [&] { return read.all_done(); }));
  const auto read_us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
  size_t storm_done = 0;
  for (auto& o : storm.ops) storm_done += o.done;
  EXPECT_TRUE(r.cpl.status.ok());
  EXPECT_LT(storm_done, size_t(kStorm)) << "the read waited for the whole storm";
  ASSERT_TRUE(drive({qa.get(), qb.get()}, [&] { return storm.all_done(); }));
  EXPECT_EQ(storm.failures(), 0u);
  std::printf("4 KiB read during a deallocate storm: %lld us, %zu of %d storm commands done by then\n",
              (long long)read_us, storm_done, kStorm);
  // Deallocated blocks read as zeros.
  ASSERT_EQ(qb->read(kRamNsid, 4096, 8, in.data(), Batch::cb, &read.add()), 0);
  ASSERT_TRUE(drive({qb.get()}, [&] { return read.all_done(); }));
  EXPECT_TRUE(std::all_of(in.begin(), in.end(), [](uint8_t x) { return x == 0; }));
}

}  // namespace
}  // namespace nvtcp::test::resource_limits_test

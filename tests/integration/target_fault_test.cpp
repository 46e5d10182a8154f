// SPDX-License-Identifier: Apache-2.0
// The target under transport faults, injected by a proxy between the host library and the
// in-process target: every byte in its own segment, the connection cut after exactly N
// bytes (during ICReq/Connect, R2T writes and reads), a host that stops reading, and delay.
// After each fault the target must have freed what the broken connection held and must
// still serve a fresh client correctly.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../support/fault_proxy.hpp"
#include "nvtcp/host.hpp"
#include "test_target.hpp"

namespace nvtcp::test::target_fault_test {
namespace {

using host::Controller, host::ControllerOptions, host::QueuePair;
using Clock = std::chrono::steady_clock;

constexpr int kDeadlineMs = 10000;

host::TransportId via(const RunningTarget& t, const FaultProxy& p) {
  host::TransportId id = t.trid();
  id.trsvcid = p.port();
  return id;
}

// Commands in flight on one queue pair (declare the Batch first).
struct Batch : CompletionBatch {
  // Drives qp until every op is done or the deadline passes; false on the deadline.
  bool wait(QueuePair& qp, int ms) {
    auto end = Clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
      if (all_done()) return true;
      if (Clock::now() > end) return false;
      qp.process_completions(1000);
    }
  }
};

int submit_write(QueuePair& qp, Batch& b, uint64_t lba, const std::vector<uint8_t>& data) {
  auto& o = b.add();
  o.rc = qp.write(kRamNsid, lba, uint32_t(data.size() / 512), data.data(), Batch::cb, &o);
  if (o.rc) o.done = true, o.cpl.status = nvme::sc::TransportError;
  return o.rc;
}

int submit_read(QueuePair& qp, Batch& b, uint64_t lba, std::vector<uint8_t>& data) {
  auto& o = b.add();
  o.rc = qp.read(kRamNsid, lba, uint32_t(data.size() / 512), data.data(), Batch::cb, &o);
  if (o.rc) o.done = true, o.cpl.status = nvme::sc::TransportError;
  return o.rc;
}

// Writes then reads back each size (several at once), comparing the data. deadline_ms only
// guards against a hang.
::testing::AssertionResult write_read_compare(QueuePair& qp, const std::vector<uint32_t>& sizes, uint64_t base_lba,
                                              uint32_t seed, int deadline_ms = kDeadlineMs) {
  std::vector<std::vector<uint8_t>> out, in;
  uint64_t lba = base_lba;
  std::vector<uint64_t> lbas;
  for (uint32_t s : sizes) {
    out.push_back(pattern(s, seed++));
    in.emplace_back(s, 0);
    lbas.push_back(lba);
    lba += (s + 511) / 512 + 8;
  }
  {
    Batch w;
    for (size_t i = 0; i < sizes.size(); ++i) submit_write(qp, w, lbas[i], out[i]);
    if (!w.wait(qp, deadline_ms)) return ::testing::AssertionFailure() << "writes did not complete";
    for (size_t i = 0; i < sizes.size(); ++i)
      if (!w.ops[i].cpl.status.ok())
        return ::testing::AssertionFailure() << "write of " << sizes[i]
                                             << " bytes: " << nvme::status_name(w.ops[i].cpl.status);
  }
  Batch r;
  for (size_t i = 0; i < sizes.size(); ++i) submit_read(qp, r, lbas[i], in[i]);
  if (!r.wait(qp, deadline_ms)) return ::testing::AssertionFailure() << "reads did not complete";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (!r.ops[i].cpl.status.ok())
      return ::testing::AssertionFailure() << "read of " << sizes[i]
                                           << " bytes: " << nvme::status_name(r.ops[i].cpl.status);
    if (in[i] != out[i]) return ::testing::AssertionFailure() << "data mismatch in " << sizes[i] << " bytes";
  }
  return ::testing::AssertionSuccess();
}

// Sizes around the in-capsule limit (8 KiB), MAXH2CDATA (128 KiB) and MDTS (1 MiB).
const std::vector<uint32_t> kBoundarySizes = {512,           4096,          8192 - 512,    8192,
                                              8192 + 512,    65536,         131072 - 512,  131072,
                                              131072 + 512,  3 * 131072 + 4096, 1u << 20};

// Every byte in its own write() costs a few microseconds on each side: the split sessions
// keep one transfer per boundary. The largest write goes in three H2CData PDUs (MAXH2CDATA is
// 128 KiB) where a 1-MiB one took eight, in a quarter of the bytes.
const std::vector<uint32_t> kSplitSizes = {512, 8192 - 512, 8192, 8192 + 512, 131072, 131072 + 512, 2 * 131072 + 4096};

// A fresh client, straight to the target: connect, one I/O queue, data correct.
::testing::AssertionResult fresh_client_ok(RunningTarget& t, uint32_t seed) {
  HostSession s;
  if (auto r = open_session(t.trid(), ControllerOptions{}, 16, s); !r) return r << " (a fresh client)";
  return write_read_compare(*s.qp, {4096, 131072 + 4096}, 60000 + (seed % 64) * 600, seed);
}

// ------------------------------------------------------------------ every byte its own write

void session_split(bool digests) {
  RunningTarget t;
  FaultProxy proxy(t.port());
  proxy.split_every_byte(-1, true);
  ControllerOptions o;
  o.hdgst = o.ddgst = digests;
  std::string err;
  auto ctrl = Controller::connect(via(t, proxy), o, err);
  ASSERT_TRUE(ctrl) << err;
  ASSERT_NO_FATAL_FAILURE(expect_default_ram_namespace(*ctrl));
  auto qp = ctrl->create_io_qpair(32, err);
  ASSERT_TRUE(qp) << err;
  EXPECT_TRUE(write_read_compare(*qp, kSplitSizes, 0, digests ? 100 : 200, 120000));
  EXPECT_FALSE(qp->failed());
  EXPECT_EQ(proxy.accepted(), 2u);  // the admin queue and the I/O queue both went through it
  uint64_t data_bytes = 0;  // each way: the writes' data to the target, the reads' to the host
  for (uint32_t size : kSplitSizes) data_bytes += size;
  EXPECT_GT(proxy.bytes(1, Direction::ToHost), data_bytes);
  EXPECT_GT(proxy.bytes(1, Direction::ToTarget), data_bytes);
}

TEST(TargetFaults, WholeSessionOneBytePerSegment) { session_split(false); }
TEST(TargetFaults, WholeSessionOneBytePerSegmentWithDigests) { session_split(true); }

// ------------------------------------------------------------------ cut after N bytes

// One host (its admin queue through the proxy, unharmed) makes an I/O queue whose
// connection the proxy cuts after n bytes in direction d, and keeps it busy with R2T
// writes and reads until it fails. The host must see the failure (not hang), the target
// must free the connection, and a fresh client must still be served.
class DropSweep {
 public:
  DropSweep() : proxy_(t_.port()) {
    std::string err;
    ctrl_ = Controller::connect(via(t_, proxy_), ControllerOptions{}, err);
    if (!ctrl_) throw std::runtime_error("connect through the proxy: " + err);
    baseline_ = t_.target().live_connections();  // the admin queue
    next_index_ = 1;
  }

  // Without digests, host->target carries ICReq (128) + Connect (72 + 1024) = 1224 bytes
  // before the queue is up, and target->host ICResp (128) + CapsuleResp (24) = 152.
  void cut_at(Direction d, uint64_t n) {
    SCOPED_TRACE(::testing::Message() << (d == Direction::ToTarget ? "host->target" : "target->host") << " cut at "
                                      << n);
    const uint64_t connect_bytes = d == Direction::ToTarget ? 1224 : 152;
    const int index = next_index_++;
    proxy_.drop_after(index, d, n);
    std::string err;
    Batch b;  // outlives qp
    auto qp = ctrl_->create_io_qpair(8, err);
    // Exactly at the end of Connect, the cut may reach the host before or after the response.
    if (n < connect_bytes) {
      EXPECT_FALSE(qp) << "the queue came up without its whole Connect exchange";
    } else if (n > connect_bytes) {
      EXPECT_TRUE(qp) << "the cut came after Connect, yet: " << err;
    }
    if (qp) {
      // Traffic until the cut shows: a 132 KiB write (R2T, two H2CData), a 64 KiB read,
      // a 4 KiB in-capsule write, over and over.
      const auto big = pattern(135168, uint32_t(n));
      std::vector<uint8_t> rd(65536);
      const auto small = pattern(4096, uint32_t(n) + 1);
      auto end = Clock::now() + std::chrono::milliseconds(kDeadlineMs);
      bool failed = false;
      while (!failed && Clock::now() < end) {
        size_t first = b.ops.size();
        submit_write(*qp, b, 0, big);
        submit_read(*qp, b, 4096, rd);
        submit_write(*qp, b, 8192, small);
        if (!b.wait(*qp, kDeadlineMs)) break;  // a hang: reported just below
        for (size_t i = first; i < b.ops.size(); ++i) failed = failed || !b.ops[i].cpl.status.ok();
      }
      EXPECT_TRUE(failed) << "no I/O failed although the connection was cut (" << proxy_.bytes(index, d)
                          << " bytes forwarded)";
      EXPECT_TRUE(qp->failed());
      EXPECT_NE(qp->read(kRamNsid, 0, 1, rd.data(), nullptr, nullptr), 0) << "a failed queue took a command";
    } else {
      EXPECT_FALSE(err.empty());  // the cut came during ICReq/Connect: the host says why
      ++connect_failures_;
    }
    EXPECT_EQ(proxy_.bytes(index, d), n) << "the proxy did not cut where asked";
    qp.reset();
    // The target lets the broken connection go, and everything it held.
    EXPECT_TRUE(wait_for([&] { return t_.target().live_connections() == baseline_; }, kDeadlineMs))
        << t_.target().live_connections() << " connections live, expected " << baseline_;
    EXPECT_FALSE(ctrl_->failed()) << "the admin queue suffered from an I/O queue's cut";
  }

  void check_fresh_client(uint32_t seed) { EXPECT_TRUE(fresh_client_ok(t_, seed)); }
  RunningTarget& target() { return t_; }
  int connect_failures() const { return connect_failures_; }

 private:
  RunningTarget t_;
  FaultProxy proxy_;
  std::unique_ptr<Controller> ctrl_;
  uint32_t baseline_ = 0;
  int next_index_ = 0;
  int connect_failures_ = 0;
};

// ICReq is 128 bytes and the Connect capsule 72 + 1024 more; ICResp is 128 bytes and the
// Connect response 24. Every cut point from 0 to 200 lands in one of those.
TEST(TargetFaults, CutDuringConnectHostToTarget) {
  DropSweep s;
  for (uint64_t n = 0; n <= 200; ++n) s.cut_at(Direction::ToTarget, n);
  for (uint64_t n : {1100, 1199, 1223}) s.cut_at(Direction::ToTarget, n);
  EXPECT_GT(s.connect_failures(), 200);
  s.check_fresh_client(1);
}

TEST(TargetFaults, CutDuringConnectTargetToHost) {
  DropSweep s;
  for (uint64_t n = 0; n <= 200; ++n) s.cut_at(Direction::ToHost, n);
  EXPECT_GT(s.connect_failures(), 150);
  s.check_fresh_client(2);
}

// Past Connect: inside R2T-driven writes (R2T, H2CData headers and data) and reads
// (C2HData headers and data, CapsuleResp).
TEST(TargetFaults, CutDuringIo) {
  DropSweep s;
  for (uint64_t n : {1224ull, 1225ull, 1300ull, 1400ull, 1500ull, 1600ull, 5000ull, 9000ull, 30000ull, 70000ull,
                     131072ull, 137000ull, 140000ull, 145000ull, 270000ull, 300000ull, 600000ull, 1100000ull})
    s.cut_at(Direction::ToTarget, n);
  for (uint64_t n : {152ull, 153ull, 160ull, 176ull, 177ull, 200ull, 1000ull, 4200ull, 65536ull, 65600ull,
                     65650ull, 66000ull, 70000ull, 140000ull, 300000ull, 600000ull})
    s.cut_at(Direction::ToHost, n);
  s.check_fresh_client(3);
  // Cuts are over and nothing is outstanding: no connection holds a waiting command.
  for (const auto& c : s.target().target().connection_info()) EXPECT_EQ(c.waiting, 0u) << c.peer;
}

// ------------------------------------------------------------------ a host that stops reading

TEST(TargetFaults, HostThatStopsReadingIsBoundedAndOthersAreServed) {
  auto cfg = default_config();
  cfg.max_send_queue_bytes = 1u << 20;
  RunningTarget t(cfg);
  const uint32_t base = t.target().live_connections();
  FaultProxy proxy(t.port());
  ControllerOptions o;
  // Real time: the keep-alive must hold while the other host runs (Keep Alive every 1.5 s on a
  // loaded machine under ASan), and expire within kDeadlineMs once stalled below.
  o.kato_ms = 3000;
  std::string err;
  auto slow = Controller::connect(via(t, proxy), o, err);
  ASSERT_TRUE(slow) << err;
  Batch sb;  // outlives sqp
  auto sqp = slow->create_io_qpair(128, err);
  ASSERT_TRUE(sqp) << err;
  proxy.stall(1, Direction::ToHost, true);  // the I/O queue's responses stop
  std::vector<std::vector<uint8_t>> bufs(128, std::vector<uint8_t>(131072));
  for (auto& b : bufs) ASSERT_EQ(submit_read(*sqp, sb, 0, b), 0);
  for (int i = 0; i < 50; ++i) sqp->process_completions(1000);  // the commands go out

  // The target holds back the commands it cannot answer instead of queueing 16 MiB.
  std::vector<target::ConnectionInfo> info;
  auto slow_conn = [&](target::ConnectionInfo& out) {
    info = t.target().connection_info();
    for (auto& c : info)
      if (c.qid == 1) return out = c, true;
    return false;
  };
  target::ConnectionInfo ci;
  ASSERT_TRUE(wait_for([&] { return slow_conn(ci) && ci.waiting > 0; }, kDeadlineMs))
      << "the target never held back a command; send queue " << ci.send_queue_bytes;
  // Bounded: the cap plus one response (a command is admitted while under the cap).
  EXPECT_LE(ci.send_queue_peak, cfg.max_send_queue_bytes + 131072 + 4096);
  // Its buffers too: RAM reads copy into buffers of their own, kept by their slots for reuse,
  // but a command held back has none yet: only the reads that ran (and its Connect data).
  EXPECT_LE(ci.buffer_bytes, (128 - uint64_t(ci.waiting)) * 131072 + 4096);

  // Meanwhile another host is served, correctly.
  {
    auto other = Controller::connect(t.trid(), ControllerOptions{}, err);
    ASSERT_TRUE(other) << err;
    auto oqp = other->create_io_qpair(32, err);
    ASSERT_TRUE(oqp) << err;
    EXPECT_TRUE(write_read_compare(*oqp, kBoundarySizes, 20000, 7));
  }
  ASSERT_TRUE(slow_conn(ci));
  EXPECT_LE(ci.send_queue_peak, cfg.max_send_queue_bytes + 131072 + 4096);

  // Its Keep Alives stop reaching the target too: expiry frees the controller and its queues.
  proxy.stall(0, Direction::ToTarget, true);
  EXPECT_TRUE(wait_for([&] { return t.target().state().subsystems()[0]->controller_count() == 0; }, kDeadlineMs));
  EXPECT_TRUE(wait_for([&] { return t.target().live_connections() == base; }, kDeadlineMs))
      << t.target().live_connections() << " connections still live";
  EXPECT_EQ(t.target().buffer_bytes(), 0u);
  // The stalled host learns of it once it reads again.
  proxy.stall(1, Direction::ToHost, false);
  EXPECT_TRUE(sb.wait(*sqp, kDeadlineMs));
  EXPECT_TRUE(sqp->failed());
}

// The same host, ended by its own disconnect rather than keep-alive.
TEST(TargetFaults, StalledHostThatDisconnectsFreesEverything) {
  auto cfg = default_config();
  cfg.max_send_queue_bytes = 1u << 20;
  RunningTarget t(cfg);
  const uint32_t base = t.target().live_connections();
  FaultProxy proxy(t.port());
  std::string err;
  {
    auto slow = Controller::connect(via(t, proxy), ControllerOptions{}, err);
    ASSERT_TRUE(slow) << err;
    Batch sb;
    auto sqp = slow->create_io_qpair(64, err);
    ASSERT_TRUE(sqp) << err;
    proxy.stall(1, Direction::ToHost, true);
    std::vector<std::vector<uint8_t>> bufs(64, std::vector<uint8_t>(131072));
    for (auto& b : bufs) ASSERT_EQ(submit_read(*sqp, sb, 0, b), 0);
    EXPECT_TRUE(wait_for(
        [&] {
          sqp->process_completions(1000);
          for (auto& c : t.target().connection_info())
            if (c.qid == 1 && c.waiting > 0) return true;
          return false;
        },
        kDeadlineMs));
    // The host goes away with its reads outstanding (they fail on its side).
  }
  EXPECT_TRUE(wait_for([&] { return t.target().live_connections() == base; }, kDeadlineMs))
      << t.target().live_connections() << " connections still live";
  EXPECT_EQ(t.target().state().subsystems()[0]->controller_count(), 0u);
  EXPECT_TRUE(fresh_client_ok(t, 11));
}

// ------------------------------------------------------------------ delay

TEST(TargetFaults, DelayedBothWaysStillCorrect) {
  RunningTarget t;
  FaultProxy proxy(t.port());
  proxy.delay(-1, Direction::ToTarget, 300);
  proxy.delay(-1, Direction::ToHost, 500);
  for (bool digests : {false, true}) {
    ControllerOptions o;
    o.hdgst = o.ddgst = digests;
    std::string err;
    auto ctrl = Controller::connect(via(t, proxy), o, err);
    ASSERT_TRUE(ctrl) << err;
    auto qp = ctrl->create_io_qpair(32, err);
    ASSERT_TRUE(qp) << err;
    EXPECT_TRUE(write_read_compare(*qp, kBoundarySizes, digests ? 30000 : 40000, 21));
  }
}

}  // namespace
}  // namespace nvtcp::test::target_fault_test

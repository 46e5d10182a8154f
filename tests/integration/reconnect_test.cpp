// SPDX-License-Identifier: Apache-2.0
// Host recovery: reconnect after cut connections and target restarts with every
// acknowledged write intact, ctrl_loss_tmo and fast_io_fail_tmo, and per-command timeouts
// (Abort, then reset) on I/O and admin queues. Faults come from the in-test proxy.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "fault_proxy.hpp"
#include "host_recovery.hpp"
#include "nvtcp/host.hpp"
#include "nvtcp/identify.hpp"
#include "test_target.hpp"

namespace nvtcp::test::reconnect_test {
namespace {

using namespace recovery;

using host::Completion;
using host::ControllerOptions;
using host::QueuePair;

constexpr uint32_t kUnitBytes = 4096;

// Writes tagged blocks over a region and reads them back, keeping per 4 KiB unit the tag of
// the last acknowledged write. A unit is never written and read at once, so every read
// has exactly one right answer; a write that failed leaves its units unknown until the
// next acknowledged write.
class VerifyWorkload {
 public:
  VerifyWorkload(QueuePair& qp, uint32_t nsid, uint32_t block_size, uint32_t units, uint32_t depth, uint64_t seed)
      : qp_(qp), nsid_(nsid), bs_(block_size), units_(units), slots_(depth), rng_(seed) {
    for (auto& s : slots_) {
      s.w = this;
      s.buf.resize(16 * kUnitBytes);
    }
  }

  // Keeps every slot busy; returns how many commands were submitted.
  int pump() {
    int n = 0;
    for (auto& s : slots_) {
      if (s.busy) continue;
      if (!start(s)) break;
      ++n;
    }
    return n;
  }
  // Waits for every command in flight.
  bool drain(int timeout_ms) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (in_flight_ > 0 && std::chrono::steady_clock::now() < end) qp_.process_completions(1000);
    return in_flight_ == 0;
  }
  // Reads the whole region back and checks every unit with a known tag.
  void verify_all() {
    for (uint32_t u = 0; u < units_; u += 16) {
      Slot& s = slots_[0];
      s.unit = u;
      s.n = std::min<uint32_t>(16, units_ - u);
      s.write = false;
      s.busy = true;
      ++in_flight_;
      int rc = qp_.read(nsid_, uint64_t(u) * (kUnitBytes / bs_), s.n * (kUnitBytes / bs_), s.buf.data(), on_done, &s);
      ASSERT_EQ(rc, 0);
      ASSERT_TRUE(drain(30000));
    }
  }

  // A unit whose last acknowledged write is known and carries data (for negative controls).
  int64_t some_written_unit() const {
    for (uint32_t u = 0; u < state_.size(); ++u)
      if (state_[u].tag && !state_[u].unknown) return u;
    return -1;
  }

  uint64_t writes_acked = 0, reads_checked = 0, errors = 0, mismatches = 0, enotconn = 0;
  bool report = true;  // mismatches are test failures (off for the negative control)

 private:
  struct Slot {
    VerifyWorkload* w = nullptr;
    std::vector<uint8_t> buf;
    uint32_t unit = 0, n = 0;
    uint64_t tag = 0;
    bool write = false;
    bool busy = false;
  };
  struct Unit {
    uint64_t tag = 0;     // 0: never written (a RAM namespace reads zeros)
    bool unknown = false; // a write to it failed: either content is possible
    bool busy = false;
  };

  static void fill(uint8_t* p, uint32_t unit, uint64_t tag) {
    auto* q = reinterpret_cast<uint64_t*>(p);
    for (uint32_t i = 0; i < kUnitBytes / 8; ++i) q[i] = tag ? (tag * 0x9E3779B97F4A7C15ull) ^ (uint64_t(unit) << 20) ^ i : 0;
  }
  static bool matches(const uint8_t* p, uint32_t unit, uint64_t tag) {
    alignas(8) uint8_t want[kUnitBytes];
    fill(want, unit, tag);
    return std::memcmp(p, want, kUnitBytes) == 0;
  }

  bool start(Slot& s) {
    static constexpr uint32_t kSizes[] = {1, 1, 1, 2, 4, 16};  // 4 KiB in the capsule .. 64 KiB by R2T
    for (int attempt = 0; attempt < 8; ++attempt) {
      uint32_t n = kSizes[rng_() % std::size(kSizes)];
      uint32_t unit = uint32_t(rng_() % (units_ / n)) * n;
      bool free = true;
      for (uint32_t i = 0; i < n; ++i) free &= !units_state_(unit + i).busy;
      if (!free) continue;
      s.unit = unit;
      s.n = n;
      s.write = rng_() % 2 == 0;
      uint64_t lba = uint64_t(unit) * (kUnitBytes / bs_);
      uint32_t nlb = n * (kUnitBytes / bs_);
      int rc;
      if (s.write) {
        s.tag = ++next_tag_;
        for (uint32_t i = 0; i < n; ++i) fill(s.buf.data() + size_t(i) * kUnitBytes, unit + i, s.tag);
        rc = qp_.write(nsid_, lba, nlb, s.buf.data(), on_done, &s);
      } else {
        rc = qp_.read(nsid_, lba, nlb, s.buf.data(), on_done, &s);
      }
      if (rc == -ENOTCONN) ++enotconn;
      if (rc != 0) return false;
      for (uint32_t i = 0; i < n; ++i) units_state_(unit + i).busy = true;
      s.busy = true;
      ++in_flight_;
      return true;
    }
    return false;
  }

  Unit& units_state_(uint32_t u) {
    if (state_.size() != units_) state_.resize(units_);
    return state_[u];
  }

  static void on_done(void* ctx, const Completion& c) {
    auto* s = static_cast<Slot*>(ctx);
    VerifyWorkload* w = s->w;
    --w->in_flight_;
    s->busy = false;
    for (uint32_t i = 0; i < s->n; ++i) {
      Unit& u = w->units_state_(s->unit + i);
      u.busy = false;
      if (s->write) {
        if (c.status.ok()) {
          u.tag = s->tag;
          u.unknown = false;
        } else {
          u.unknown = true;
        }
      } else if (c.status.ok() && !u.unknown) {
        ++w->reads_checked;
        if (!matches(s->buf.data() + size_t(i) * kUnitBytes, s->unit + i, u.tag)) {
          if (w->mismatches++ < 5 && w->report)
            ADD_FAILURE() << "unit " << s->unit + i << " does not hold the data of its last acknowledged write (tag "
                          << u.tag << ")";
        }
      }
    }
    if (!c.status.ok()) {
      if (w->errors++ < 5) ADD_FAILURE() << (s->write ? "write" : "read") << " failed: " << nvme::status_name(c.status);
    } else if (s->write) {
      ++w->writes_acked;
    }
  }

  QueuePair& qp_;
  uint32_t nsid_, bs_, units_;
  std::vector<Slot> slots_;
  std::vector<Unit> state_;
  std::mt19937_64 rng_;
  uint64_t next_tag_ = 0;
  uint32_t in_flight_ = 0;
};

// The checker itself: a block overwritten behind its back must show as a mismatch.
TEST(Reconnect, VerifyWorkloadCatchesALostWrite) {
  RunningTarget t;
  HostSession s;
  ASSERT_TRUE(open_session(t.trid(kTestNqn, 2), host::ControllerOptions{}, 8, s));
  auto& qp = s.qp;
  VerifyWorkload w(*qp, 2, 512, 64, 8, 1);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (w.writes_acked < 50 && std::chrono::steady_clock::now() < end) {
    w.pump();
    qp->process_completions(1000);
  }
  ASSERT_TRUE(w.drain(10000));
  int64_t unit = w.some_written_unit();
  ASSERT_GE(unit, 0);
  bool done = false;
  ASSERT_EQ(qp->write_zeroes(2, uint64_t(unit) * (kUnitBytes / 512), kUnitBytes / 512,
                             [](void* ctx, const Completion&) { *static_cast<bool*>(ctx) = true; }, &done),
            0);
  while (!done) qp->process_completions(1000);
  w.report = false;
  w.verify_all();
  EXPECT_EQ(w.mismatches, 1u);
}

// Connections cut again and again under a verify workload: the host reconnects, sends
// what was in flight again, and no acknowledged write is lost.
TEST(Reconnect, CutConnectionsLoseNoAcknowledgedWrite) {
  for (bool digests : {false, true}) {
    SCOPED_TRACE(digests ? "digests on" : "digests off");
    RunningTarget t;
    FaultProxy proxy(t.port());
    ControllerOptions o = recovering_options();
    o.hdgst = o.ddgst = digests;
    HostSession s;
    ASSERT_TRUE(open_session(via(proxy.port()), o, 32, s));
    auto& ctrl = s.ctrl;
    auto& qp = s.qp;
    VerifyWorkload w(*qp, 2, 512, 2048, 32, digests ? 7 : 8);
    constexpr int kCuts = 5;
    for (int cut = 0; cut <= kCuts; ++cut) {
      uint64_t target_writes = w.writes_acked + 300;
      ASSERT_TRUE(poll_until(
          *qp,
          [&] {
            w.pump();
            return w.writes_acked >= target_writes;
          },
          30000))
          << "no progress after cut " << cut;
      if (cut < kCuts) proxy.cut_all();  // with commands in flight on both queues
    }
    ASSERT_TRUE(w.drain(30000));
    w.verify_all();
    EXPECT_EQ(w.errors, 0u);
    EXPECT_EQ(w.mismatches, 0u);
    EXPECT_GT(w.reads_checked, 100u);
    EXPECT_GE(ctrl->resets(), uint32_t(kCuts));
    EXPECT_GE(qp->reconnects(), uint32_t(kCuts));
    EXPECT_FALSE(qp->failed());
    EXPECT_TRUE(ctrl->live());
  }
}

// Cuts at many byte offsets of the I/O connection, so the loss lands inside headers,
// in-capsule data, R2T exchanges and C2HData.
TEST(Reconnect, CutsAtManyOffsetsLoseNoAcknowledgedWrite) {
  RunningTarget t;
  FaultProxy proxy(t.port());
  HostSession s;
  constexpr int kRounds = 8;
  ControllerOptions o = recovering_options();
  // A command may be in flight at every cut (on a loaded machine the cut can land in the
  // resends right after a reconnect, round after round): with fewer retries than cuts it
  // would rightly fail with a path error, which is not what this test is about.
  o.max_retries = kRounds + 1;
  ASSERT_TRUE(open_session(via(proxy.port()), o, 16, s));
  auto& qp = s.qp;
  VerifyWorkload w(*qp, 2, 512, 512, 16, 3);
  std::mt19937 rng(11);
  for (int round = 0; round < kRounds; ++round) {
    // The queue pair's connection is the newest one the proxy accepted.
    int conn = int(proxy.accepted()) - 1;
    Direction d = round % 2 ? Direction::ToHost : Direction::ToTarget;
    proxy.drop_after(conn, d, proxy.bytes(conn, d) + 1 + rng() % 200000);
    uint32_t before = qp->reconnects();
    ASSERT_TRUE(poll_until(
        *qp,
        [&] {
          w.pump();
          return qp->reconnects() > before && qp->connected();
        },
        30000))
        << "round " << round;
  }
  ASSERT_TRUE(w.drain(30000));
  w.verify_all();
  EXPECT_EQ(w.errors, 0u);
  EXPECT_EQ(w.mismatches, 0u);
}

// The target process goes away and comes back on the same port with the same file
// namespace: acknowledged writes survive, and the host carries on by itself.
TEST(Reconnect, TargetRestartsLoseNoAcknowledgedWrite) {
  std::string path;
  ASSERT_TRUE(make_temp_file("nvtcp-reconnect", 64 << 20, path));
  auto cfg = default_config(path);
  auto target = std::make_unique<RunningTarget>(cfg);
  uint16_t port = target->port();
  cfg.listeners[0].port = port;

  HostSession s;
  ASSERT_TRUE(open_session(via(port, 4), recovering_options(), 32, s));
  auto& ctrl = s.ctrl;
  auto& qp = s.qp;
  VerifyWorkload w(*qp, 4, 512, 2048, 32, 5);
  constexpr int kRestarts = 3;
  for (int i = 0; i <= kRestarts; ++i) {
    uint64_t target_writes = w.writes_acked + 300;
    ASSERT_TRUE(poll_until(
        *qp,
        [&] {
          w.pump();
          return w.writes_acked >= target_writes;
        },
        30000))
        << "no progress after restart " << i;
    if (i == kRestarts) break;
    // Stop and start from another thread while this one keeps submitting.
    std::thread restart([&] {
      target.reset();
      // A real outage of real length: the point is that commands submitted meanwhile are held
      // and none is lost, which no clock can fake. Wide margins: ctrl_loss_tmo is 20 s.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      target = std::make_unique<RunningTarget>(cfg);
    });
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(400);
    while (std::chrono::steady_clock::now() < end) {
      w.pump();
      qp->process_completions(1000);
    }
    restart.join();
  }
  ASSERT_TRUE(w.drain(30000));
  w.verify_all();
  EXPECT_EQ(w.errors, 0u);
  EXPECT_EQ(w.mismatches, 0u);
  EXPECT_GE(ctrl->resets(), uint32_t(kRestarts));
  qp.reset();
  ctrl.reset();
  target.reset();
  unlink(path.c_str());
}

// Nobody comes back: after ctrl_loss_tmo the held commands fail with a path error and
// the queue pair and controller report failure.
TEST(Reconnect, CtrlLossTmoFailsHeldCommands) {
  auto target = std::make_unique<RunningTarget>();
  ControllerOptions o = recovering_options();
  o.ctrl_loss_tmo_ms = 600;
  HostSession s;
  ASSERT_TRUE(open_session(via(target->port()), o, 8, s));
  auto& ctrl = s.ctrl;
  auto& qp = s.qp;
  std::vector<uint8_t> buf(4096);
  target.reset();
  Outcome out;
  // The loss may not be noticed yet: the command is sent, or held for the reconnect.
  ASSERT_EQ(qp->read(2, 0, 8, buf.data(), Outcome::cb, &out), 0);
  ASSERT_TRUE(poll_until(*qp, [&] { return out.done == 1; }, 10000));
  EXPECT_EQ(out.st, nvme::sc::TransportError);
  ASSERT_TRUE(poll_until(*qp, [&] { return qp->failed(); }, 10000));
  EXPECT_EQ(qp->read(2, 0, 8, buf.data(), Outcome::cb, &out), -ENOTCONN);
  // The controller's own ctrl_loss_tmo runs on its admin thread: this polls for its verdict with
  // a wide margin (10 s for 600 ms). The exact boundary, on this same flow with a stepped clock, is
  // HostSteppedClock.CtrlLossTmoFailsHeldCommands (the decision alone: HostTiming.CtrlLossTmoCountsFromTheFirstLoss).
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!ctrl->failed() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(ctrl->failed());
}

// fast_io_fail_tmo: while the target is unreachable, held I/O fails early and new I/O is
// refused; once it is reachable again, the queue reconnects and I/O flows. The wiring on real time;
// the 300 ms boundary itself is HostSteppedClock.FastIoFailThenRecover on a stepped clock.
TEST(Reconnect, FastIoFailThenRecover) {
  RunningTarget t;
  FaultProxy proxy(t.port());
  ControllerOptions o = recovering_options();
  o.fast_io_fail_tmo_ms = 300;
  HostSession s;
  ASSERT_TRUE(open_session(via(proxy.port()), o, 8, s));
  auto& qp = s.qp;
  std::vector<uint8_t> buf(4096);
  Outcome out;
  proxy.refuse(true);
  proxy.stall(-1, Direction::ToHost, true);  // the read below stays unanswered
  ASSERT_EQ(qp->read(2, 0, 8, buf.data(), Outcome::cb, &out), 0);
  proxy.cut_all();
  ASSERT_TRUE(poll_until(*qp, [&] { return out.done == 1; }, 10000));
  EXPECT_EQ(out.st, nvme::sc::TransportError);
  EXPECT_FALSE(qp->failed());
  EXPECT_EQ(qp->read(2, 0, 8, buf.data(), Outcome::cb, &out), -ENOTCONN);
  proxy.stall(-1, Direction::ToHost, false);
  proxy.refuse(false);
  ASSERT_TRUE(poll_until(*qp, [&] { return qp->connected(); }, 15000));
  ASSERT_EQ(qp->read(2, 0, 8, buf.data(), Outcome::cb, &out), 0);
  ASSERT_TRUE(poll_until(*qp, [&] { return out.done == 2; }, 10000));
  EXPECT_TRUE(out.st.ok()) << nvme::status_name(out.st);
}

// A command the target never sees: after io_timeout an Abort goes out on the admin queue;
// the target cannot abort what it never got, so after io_timeout again the controller is
// reset and the command, sent again on the new connection, completes. The wiring on real time;
// the Abort-then-reset boundaries, and the reconnect delay after the reset, are
// HostSteppedClock.IoTimeoutAbortsThenResetsThenReconnectsAfterTheDelay on a stepped clock.
TEST(Reconnect, IoTimeoutAbortsThenResets) {
  RunningTarget t;
  FaultProxy proxy(t.port());
  ControllerOptions o = recovering_options();
  o.io_timeout_ms = 300;
  HostSession s;
  ASSERT_TRUE(open_session(via(proxy.port()), o, 8, s));
  auto& ctrl = s.ctrl;
  auto& qp = s.qp;
  ASSERT_EQ(proxy.accepted(), 2u);  // 0: admin, 1: this queue pair
  proxy.stall(1, Direction::ToTarget, true);
  std::vector<uint8_t> buf(4096, 0xEE);
  Outcome out;
  ASSERT_EQ(qp->read(1, 0, 8, buf.data(), Outcome::cb, &out), 0);
  ASSERT_TRUE(poll_until(*qp, [&] { return out.done == 1; }, 15000));
  EXPECT_TRUE(out.st.ok()) << nvme::status_name(out.st);
  EXPECT_EQ(buf[0], 0);  // the null namespace reads zeros
  // At least one reset (a slow sanitizer build may time out a bring-up command as well).
  EXPECT_GE(ctrl->resets(), 1u);
  EXPECT_GE(qp->reconnects(), 1u);
}

// A command whose every connection dies under it is sent again at most max_retries
// times, then fails with a path error; the queue itself keeps reconnecting.
TEST(Reconnect, MaxRetriesEndsACommandThatKeepsLosingItsConnection) {
  RunningTarget t;
  FaultProxy proxy(t.port());
  ControllerOptions o = recovering_options();
  o.max_retries = 2;
  HostSession s;
  ASSERT_TRUE(open_session(via(proxy.port()), o, 8, s));
  auto& qp = s.qp;
  ASSERT_EQ(proxy.accepted(), 2u);
  // Each reset connects the admin queue (even index) and then this queue (odd index). Every
  // later I/O connection passes ICResp (128 bytes) and the Connect response (24), then dies
  // one byte into whatever comes next: the read's data.
  for (int i = 3; i < 40; i += 2) proxy.drop_after(i, Direction::ToHost, 128 + 24 + 1);
  proxy.drop_after(1, Direction::ToHost, proxy.bytes(1, Direction::ToHost) + 1);
  std::vector<uint8_t> buf(4096);
  Outcome out;
  ASSERT_EQ(qp->read(1, 0, 8, buf.data(), Outcome::cb, &out), 0);
  ASSERT_TRUE(poll_until(*qp, [&] { return out.done == 1; }, 20000));
  EXPECT_EQ(out.st, nvme::sc::TransportError);
  EXPECT_EQ(qp->reconnects(), 3u);  // sent on the first connection and two more
  EXPECT_FALSE(qp->failed());
}

// Without reconnect the same command ends as aborted by the host, and the queue fails.
TEST(Reconnect, IoTimeoutWithoutReconnectFailsTheCommand) {
  RunningTarget t;
  FaultProxy proxy(t.port());
  ControllerOptions o;
  o.io_timeout_ms = 200;
  HostSession s;
  ASSERT_TRUE(open_session(via(proxy.port()), o, 8, s));
  auto& qp = s.qp;
  proxy.stall(1, Direction::ToTarget, true);
  std::vector<uint8_t> buf(4096);
  Outcome out;
  ASSERT_EQ(qp->read(1, 0, 8, buf.data(), Outcome::cb, &out), 0);
  ASSERT_TRUE(poll_until(*qp, [&] { return out.done == 1; }, 10000));
  EXPECT_EQ(out.st, nvme::sc::HostAbortedCommand);
  EXPECT_TRUE(qp->failed());
}

// An admin command that is never answered resets the controller instead of holding an
// admin slot forever; the controller and its I/O queue come back.
TEST(Reconnect, AdminTimeoutResetsTheController) {
  RunningTarget t;
  FaultProxy proxy(t.port());
  ControllerOptions o = recovering_options();
  o.admin_timeout_ms = 300;
  HostSession s;
  ASSERT_TRUE(open_session(via(proxy.port()), o, 8, s));
  auto& ctrl = s.ctrl;
  auto& qp = s.qp;
  proxy.stall(0, Direction::ToHost, true);
  alignas(8) uint8_t id[nvme::kIdentifyLen];
  Completion c = ctrl->identify(uint8_t(nvme::Cns::Controller), 0, id);
  EXPECT_FALSE(c.status.ok());
  EXPECT_GE(ctrl->resets(), 1u);
  // The reconnect runs on the admin thread after reconnect_delay: poll for it with a wide margin.
  // HostSteppedClock.AdminTimeoutResetsTheController has the admin_timeout boundary.
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!ctrl->live() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(ctrl->live());
  c = ctrl->identify(uint8_t(nvme::Cns::Controller), 0, id);
  EXPECT_TRUE(c.status.ok()) << nvme::status_name(c.status);
  // The I/O queue belonged to the old association: it reconnects and serves again.
  std::vector<uint8_t> buf(4096);
  Outcome out;
  ASSERT_TRUE(poll_until(*qp, [&] { return qp->reconnects() >= 1 && qp->connected(); }, 10000));
  ASSERT_EQ(qp->read(1, 0, 8, buf.data(), Outcome::cb, &out), 0);
  ASSERT_TRUE(poll_until(*qp, [&] { return out.done == 1; }, 10000));
  EXPECT_TRUE(out.st.ok()) << nvme::status_name(out.st);
}

}  // namespace
}  // namespace nvtcp::test::reconnect_test

// SPDX-License-Identifier: Apache-2.0
// A target connection's flow control over an in-memory stream (no socket): the test decides when
// the host reads.
// - Back-pressure: with the send queue over max_send_queue_bytes, new commands wait (counted,
//   in the Waiting state) instead of growing the queue; as the host reads, they run, in the
//   order they came, and every one is answered once.
// - Send stall on a fake clock: a host that reads slowly, a few bytes at a time, is no stall;
//   one that stops reading is closed send_timeout_ms after the last progress, not before.
// - Closing a connection whose responses were never read gives every request back.
// - The R2T window: a write gets as many R2Ts outstanding as the host's MAXR2T allows, each
//   MAXH2CDATA long, and the next one only once a whole R2T's data is in.
#include <gtest/gtest.h>

#include <functional>

#include <map>
#include <vector>

#include "../integration/raw_session.hpp"
#include "connection_test_state.hpp"
#include "memory_stream.hpp"
#include "reactor/clock.hpp"
#include "target_tcp/tcp_queue.hpp"
#include "target/target_state.hpp"
#include "util/log.hpp"
#include "wire/pdu.hpp"

namespace connection_flow_test {

using namespace nvtcp;

namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kSendCap = 64 * 1024;  // max_send_queue_bytes
constexpr uint32_t kSendTimeoutMs = 300;
constexpr uint64_t kPollMs = 100;  // kControllerPollNs: how often a connected queue checks
constexpr uint32_t kNullNsid = test::kConnNullNsid;  // 4 KiB blocks
constexpr uint32_t kRamNsid = test::kConnRamNsid;    // 512-byte blocks
constexpr uint32_t kReadBytes = 16 * 1024;
constexpr uint32_t kMaxH2CData = 32 * 1024;
constexpr const char* kNqn = "nqn.2026-11.io.nvtcp:back-pressure";

target::TargetState& state() {
  static target::TargetState* st = test::make_connection_test_state(kNqn, [](target::TargetConfig& cfg) {
    cfg.max_send_queue_bytes = kSendCap;
    cfg.send_timeout_ms = kSendTimeoutMs;
    cfg.max_h2c_data = kMaxH2CData;
  });
  return *st;
}

// One PDU as the host reads it.
struct Pdu {
  wire::PduType type;
  test::Bytes bytes;
};

// The host's end of one connection: the target's TcpQueue over a MemoryStream.
struct HostEnd {
  reactor::Reactor& r;
  target::TcpQueue* conn = nullptr;  // frees itself once closed: valid while in the set
  test::MemoryStream* stream = nullptr;  // the connection's: valid until gone
  bool gone = false;                      // the connection freed itself, and its stream with it
  uint16_t next_cid = 1;

  HostEnd(reactor::Reactor& reactor, target::ConnectionSet& set, const reactor::Clock& clock, const char* name)
      : r(reactor) {
    conn = new target::TcpQueue(
        state(), r,
        [&](reactor::StreamOwner& owner) {
          auto s = std::make_unique<test::MemoryStream>(r, owner, &gone);
          stream = s.get();
          return s;
        },
        name, set, {}, {}, clock);
    conn->start();
  }
  // The connection goes with the test's end of it (gone points here until the stream is freed).
  ~HostEnd() {
    if (!gone) conn->close("test over");
    for (int i = 0; i < 1000 && !gone; ++i) r.run_once(0);
    EXPECT_TRUE(gone) << "a connection never freed itself after its close";
  }
  HostEnd(const HostEnd&) = delete;
  HostEnd& operator=(const HostEnd&) = delete;
  uint16_t cid() { return next_cid++; }
  void spin(int turns = 5) {
    for (int i = 0; i < turns; ++i) r.run_once(0);
  }
  // The host sends b; the reactor then runs what it started.
  void send(const test::Bytes& b) {
    stream->deliver(b);
    spin();
  }
  // The next whole PDU among the bytes the host has read, if there is one.
  bool pop(Pdu& out) {
    auto& in = stream->received();
    if (in.size() < sizeof(wire::CommonHeader)) return false;
    const auto ch = test::read_as<wire::CommonHeader>(in);
    if (in.size() < ch.plen) return false;
    out.type = wire::PduType(ch.type);
    out.bytes.assign(in.begin(), in.begin() + ch.plen);
    in.erase(in.begin(), in.begin() + ch.plen);
    return true;
  }
  // Reads everything queued (turning the reactor, since reading lets waiting commands run) and
  // returns the PDUs, in order.
  std::vector<Pdu> read_all() {
    std::vector<Pdu> out;
    for (int i = 0; i < 1000; ++i) {
      spin();
      if (stream->drain() == 0) break;
    }
    for (Pdu p; pop(p);) out.push_back(p);
    return out;
  }
  // Sends sqe (with in-capsule data) and reads up to its response, which must be a success.
  ::testing::AssertionResult command(wire::Sqe sqe, const test::Bytes& data = {}, wire::Cqe* out = nullptr) {
    send(test::capsule_pdu(sqe, data, false, false));
    for (const Pdu& p : read_all()) {
      if (p.type != wire::PduType::CapsuleResp) continue;
      const auto cqe = test::read_as<wire::Cqe>(p.bytes, sizeof(wire::CommonHeader));
      if (cqe.cid != sqe.cid) return ::testing::AssertionFailure() << "response for cid " << cqe.cid;
      if (out) *out = cqe;
      return test::ok(cqe);
    }
    return ::testing::AssertionFailure() << "no response for cid " << sqe.cid;
  }
  // maxr2t: R2Ts the host allows outstanding per command, 0's based.
  ::testing::AssertionResult icreq(uint32_t maxr2t = 0) {
    send(test::bytes_of(wire::make_icreq(0, false, false, maxr2t)));
    auto pdus = read_all();
    if (pdus.size() != 1 || pdus[0].type != wire::PduType::ICResp) return ::testing::AssertionFailure() << "no ICResp";
    return ::testing::AssertionSuccess();
  }
  ::testing::AssertionResult connect(uint16_t qid, uint16_t cntlid, uint16_t* got_cntlid = nullptr) {
    wire::Sqe sqe = wire::cmd::connect(qid, 127, 0);
    sqe.cid = cid();
    wire::Cqe cqe{};
    const auto data = test::bytes_of(wire::cmd::connect_data(test::kHostId, cntlid, kNqn, test::kHostNqn));
    if (auto res = command(sqe, data, &cqe); !res) return res;
    if (got_cntlid) *got_cntlid = uint16_t(cqe.dw0);
    return ::testing::AssertionSuccess();
  }
  test::Bytes read_capsule(uint16_t c) {
    return test::capsule_pdu(test::rw_sqe(wire::IoOpcode::Read, c, kNullNsid, 0, kReadBytes / 4096, kReadBytes),
                             {}, false, false);
  }
};

// Requests not Free: waiting, running or with a response not yet read.
uint32_t in_use(const target::ConnectionInfo& i) {
  uint32_t n = 0;
  for (size_t s = 0; s < i.request_states.size(); ++s)
    if (s != size_t(target::TcpRequest::State::Free)) n += i.request_states[s];
  return n;
}

struct ConnectionFlow : ::testing::Test {
  reactor::Reactor reactor{64};
  target::ConnectionSet set;
  reactor::FakeClock clock;
  ConnectionFlow() { log::set_level(log::Level::Off); }
  ~ConnectionFlow() override {
    set.close_all();
    for (int i = 0; i < 100 && set.size() > 0; ++i) reactor.run_once(1000);
  }
  // An admin queue, enabled, with one I/O queue granted, and I/O queue 1 on io.
  void open(HostEnd& admin, HostEnd& io, uint32_t io_maxr2t = 0) {
    uint16_t cntlid = 0;
    ASSERT_TRUE(admin.icreq());
    ASSERT_TRUE(admin.connect(0, wire::kDynamicCntlid, &cntlid));
    ASSERT_TRUE(admin.command(
        test::property_sqe(admin.cid(), wire::FabricsType::PropertySet, wire::prop::CC, test::kCcEnable)));
    ASSERT_TRUE(admin.command(test::set_features_nq_sqe(admin.cid(), 1)));
    ASSERT_TRUE(io.icreq(io_maxr2t));
    ASSERT_TRUE(io.connect(1, cntlid));
  }
  // Steps the fake clock and runs what fell due on conn (its reactor timer reads the real clock).
  void step(target::TcpQueue* conn, uint64_t ns) {
    clock.step_ns(ns);
    conn->run_due_deadlines();
    for (int i = 0; i < 5; ++i) reactor.run_once(0);
  }
};

TEST_F(ConnectionFlow, CommandsWaitWhileTheSendQueueIsFullAndRunInOrderAsTheHostReads) {
  HostEnd admin(reactor, set, clock, "admin"), io(reactor, set, clock, "io");
  open(admin, io);
  constexpr uint16_t kReads = 64;  // 1 MiB of responses against a 64 KiB cap
  test::Bytes burst;
  for (uint16_t c = 1; c <= kReads; ++c) {
    const auto pdu = io.read_capsule(c);
    burst.insert(burst.end(), pdu.begin(), pdu.end());
  }
  io.send(burst);

  // The host has read nothing: the queue stops at the cap (plus the one response that crossed
  // it), and the rest of the commands wait.
  const auto held = io.conn->info();
  const uint64_t one_response = sizeof(wire::C2HDataPdu) + kReadBytes + sizeof(wire::CapsuleRespPdu);
  EXPECT_GT(held.send_queue_bytes, 0u);
  EXPECT_LE(held.send_queue_bytes, kSendCap + one_response);
  EXPECT_LE(held.send_queue_peak, kSendCap + one_response);
  EXPECT_GT(held.waiting, 0u);
  EXPECT_EQ(held.waiting, held.request_states[size_t(target::TcpRequest::State::Queued)]);
  EXPECT_EQ(in_use(held), kReads) << "each command is either waiting or answered, none lost";

  // Nothing moves on its own while the host does not read (the retry timer finds the queue still full).
  for (int i = 0; i < 5; ++i) io.spin();
  EXPECT_EQ(io.conn->info().waiting, held.waiting);

  // As the host reads, the waiting commands run: every one answered once, with its data, in
  // the order sent.
  std::vector<uint16_t> order;
  std::map<uint16_t, uint32_t> data;
  for (int round = 0; round < 200 && order.size() < kReads; ++round) {
    io.stream->drain(kSendCap / 4);  // a host that reads a quarter of the cap at a time
    io.spin();
    EXPECT_LE(io.conn->info().send_queue_bytes, kSendCap + one_response);
    for (Pdu p; io.pop(p);) {
      if (p.type == wire::PduType::C2HData) {
        const auto d = test::read_as<wire::C2HDataPdu>(p.bytes);
        data[d.cccid] += d.datal;
        if (d.ch.flags & wire::kFlagDataSuccess) order.push_back(d.cccid);  // no CapsuleResp follows
      } else if (p.type == wire::PduType::CapsuleResp) {
        const auto cqe = test::read_as<wire::Cqe>(p.bytes, sizeof(wire::CommonHeader));
        EXPECT_TRUE(test::ok(cqe)) << "cid " << cqe.cid;
        order.push_back(cqe.cid);
      } else {
        ADD_FAILURE() << "unexpected PDU type " << unsigned(p.type);
      }
    }
  }
  ASSERT_EQ(order.size(), size_t(kReads));
  for (uint16_t i = 0; i < kReads; ++i) {
    EXPECT_EQ(order[i], i + 1) << "responses out of arrival order at " << i;
    EXPECT_EQ(data[i + 1], kReadBytes) << "cid " << i + 1;
  }
  const auto after = io.conn->info();
  EXPECT_EQ(after.waiting, 0u);
  EXPECT_EQ(after.send_queue_bytes, 0u);
  EXPECT_EQ(after.waits, held.waiting) << "each held command waited once";
  EXPECT_EQ(in_use(after), 0u) << "every request is free again";
}

TEST_F(ConnectionFlow, AHostThatReadsSlowlyIsNotStalledOneThatStopsIsClosedAtSendTimeout) {
  HostEnd admin(reactor, set, clock, "admin"), io(reactor, set, clock, "io");
  open(admin, io);
  io.send(io.read_capsule(io.cid()));
  ASSERT_GT(io.stream->queued_bytes(), 0u);
  // A byte every poll period, for three send timeouts: progress each time, no stall.
  for (uint64_t t = 0; t < 3 * kSendTimeoutMs; t += kPollMs) {
    ASSERT_EQ(io.stream->drain(1), 1u);
    step(io.conn, kPollMs * kMs);
    ASSERT_EQ(set.size(), 2u) << "closed a host that was reading, " << t << " ms in";
  }
  // The host stops reading. The check just run saw its last progress: closed send_timeout_ms
  // after it, not before.
  step(io.conn, (kSendTimeoutMs - 1) * kMs);
  ASSERT_EQ(set.size(), 2u) << "closed before send_timeout_ms without progress";
  EXPECT_FALSE(io.stream->closing());
  step(io.conn, 2 * kMs);  // the connection (and its stream) may be freed from here on
  for (int i = 0; i < 100 && set.size() > 1; ++i) reactor.run_once(0);
  EXPECT_EQ(set.size(), 1u) << "still open past send_timeout_ms without progress";
  EXPECT_TRUE(io.gone) << "the stalled queue was closed but its connection never freed";
  EXPECT_FALSE(admin.gone) << "the admin queue went with it";
}

TEST_F(ConnectionFlow, ClosingWithResponsesUnreadGivesEveryRequestBack) {
  HostEnd admin(reactor, set, clock, "admin"), io(reactor, set, clock, "io");
  open(admin, io);
  test::Bytes burst;
  for (uint16_t c = 1; c <= 16; ++c) {
    const auto pdu = io.read_capsule(c);
    burst.insert(burst.end(), pdu.begin(), pdu.end());
  }
  io.send(burst);
  ASSERT_GT(io.conn->info().waiting, 0u);
  const uint64_t connections = state().usage.connections.load();
  io.conn->close("test");
  // The queued responses are dropped and their requests released; the connection then frees
  // itself (ASan would report what it kept).
  for (int i = 0; i < 100 && set.size() > 1; ++i) reactor.run_once(0);
  EXPECT_EQ(set.size(), 1u);
  EXPECT_EQ(state().usage.connections.load(), connections - 1);
}

// The R2Ts the host has read so far, in order.
std::vector<wire::R2TPdu> r2ts(HostEnd& h) {
  std::vector<wire::R2TPdu> out;
  for (const Pdu& p : h.read_all()) {
    EXPECT_EQ(p.type, wire::PduType::R2T) << "unexpected PDU type " << unsigned(p.type);
    if (p.type == wire::PduType::R2T) out.push_back(test::read_as<wire::R2TPdu>(p.bytes));
  }
  return out;
}

TEST_F(ConnectionFlow, AWriteGetsMaxR2TWindowsOfMaxH2CDataAndTheNextOnceOneIsFull) {
  HostEnd admin(reactor, set, clock, "admin"), io(reactor, set, clock, "io");
  open(admin, io, 1);  // two R2Ts outstanding
  constexpr uint32_t kChunks = 5;
  constexpr uint32_t kLen = kChunks * kMaxH2CData;
  test::Bytes data(kLen);
  for (uint32_t i = 0; i < kLen; ++i) data[i] = uint8_t(i * 7 + i / 4096);
  const uint16_t cid = io.cid();
  io.send(test::capsule_pdu(test::rw_sqe(wire::IoOpcode::Write, cid, kRamNsid, 0, kLen / 512, kLen), {}, false, false));

  auto window = r2ts(io);
  ASSERT_EQ(window.size(), 2u) << "MAXR2T 1 (0's based) allows two R2Ts at once";
  for (uint32_t i = 0; i < 2; ++i) {
    EXPECT_EQ(window[i].cccid, cid);
    EXPECT_EQ(window[i].r2to, i * kMaxH2CData);
    EXPECT_EQ(window[i].r2tl, kMaxH2CData);
  }
  const uint16_t ttag = window[0].ttag;
  EXPECT_EQ(window[1].ttag, ttag);
  EXPECT_EQ(in_use(io.conn->info()), 1u);
  EXPECT_EQ(io.conn->info().request_states[size_t(target::TcpRequest::State::AwaitingH2C)], 1u);

  auto h2c = [&](uint32_t off, uint32_t len, bool last) {
    io.send(test::h2c_data_pdu(cid, ttag, off, test::Bytes(data.begin() + off, data.begin() + off + len), last));
  };
  uint32_t next = 2;  // the chunk the next R2T must ask for
  for (uint32_t chunk = 0; chunk < kChunks; ++chunk) {
    const uint32_t off = chunk * kMaxH2CData;
    // Half of an R2T's data opens nothing; the other half opens the next R2T, if any is left.
    h2c(off, kMaxH2CData / 2, false);
    EXPECT_TRUE(r2ts(io).empty()) << "an R2T before chunk " << chunk << " was all in";
    h2c(off + kMaxH2CData / 2, kMaxH2CData / 2, true);
    if (next < kChunks) {
      window = r2ts(io);
      ASSERT_EQ(window.size(), 1u) << "after chunk " << chunk;
      EXPECT_EQ(window[0].r2to, next * kMaxH2CData);
      EXPECT_EQ(window[0].r2tl, kMaxH2CData);
      ++next;
    }
  }
  // All in: the write completes, and the data reads back as sent.
  bool answered = false;
  for (const Pdu& p : io.read_all()) {
    ASSERT_EQ(p.type, wire::PduType::CapsuleResp);
    const auto cqe = test::read_as<wire::Cqe>(p.bytes, sizeof(wire::CommonHeader));
    EXPECT_EQ(cqe.cid, cid);
    EXPECT_TRUE(test::ok(cqe));
    answered = true;
  }
  ASSERT_TRUE(answered);
  const uint16_t rd = io.cid();
  io.send(test::capsule_pdu(test::rw_sqe(wire::IoOpcode::Read, rd, kRamNsid, 0, kLen / 512, kLen), {}, false, false));
  test::Bytes back;
  for (const Pdu& p : io.read_all())
    if (p.type == wire::PduType::C2HData) {
      const auto ch = test::read_as<wire::CommonHeader>(p.bytes);
      back.insert(back.end(), p.bytes.begin() + ch.pdo, p.bytes.end());
    }
  EXPECT_TRUE(back == data) << "read back " << back.size() << " bytes, not what was written";
}

}  // namespace

// Requests in one state.
uint32_t in_state(const target::ConnectionInfo& i, target::TcpRequest::State s) { return i.request_states[size_t(s)]; }
uint32_t pool_size(const target::ConnectionInfo& i) {
  uint32_t n = 0;
  for (uint32_t c : i.request_states) n += c;
  return n;
}

// n Flush capsules with command IDs from first on, back to back.
test::Bytes flush_capsules(uint16_t first, uint32_t n) {
  test::Bytes b;
  for (uint32_t k = 0; k < n; ++k) {
    const auto pdu = test::capsule_pdu(test::raw_sqe(wire::cmd::flush(kNullNsid), uint16_t(first + k)), {}, false, false);
    b.insert(b.end(), pdu.begin(), pdu.end());
  }
  return b;
}

// Reads what the host has been sent: every PDU must be a CapsuleResp; returns the successful ones.
uint32_t successful_responses(HostEnd& h) {
  uint32_t ok = 0;
  for (const Pdu& p : h.read_all()) {
    EXPECT_EQ(p.type, wire::PduType::CapsuleResp) << "PDU type " << unsigned(p.type);
    if (p.type == wire::PduType::CapsuleResp) ok += test::ok(test::read_as<wire::Cqe>(p.bytes, sizeof(wire::CommonHeader)));
  }
  return ok;
}

// Runs until the target has closed h, checking that it said why with a C2HTermReq (PDU
// sequence error); on_term runs once the TermReq is in (a close may wait for held sends).
// Returns whether the TermReq came.
bool refused_with_sequence_error(HostEnd& h, const std::function<void()>& on_term = {}) {
  bool term = false;
  for (int i = 0; i < 100 && !h.gone; ++i) {
    h.stream->drain();
    for (Pdu p; h.pop(p);) {
      if (p.type != wire::PduType::C2HTermReq) continue;
      term = true;
      EXPECT_EQ(test::read_as<wire::TermReqPdu>(p.bytes).fes, uint16_t(wire::Fes::PduSequenceError));
    }
    if (term && on_term) on_term();
    h.spin();
  }
  return term;
}

// With SQ flow control off the host may reuse a command's slot once it has read the response.
// A socket hands the peer the first responses of a batch before the send completes (on a
// loaded machine, one waiting for socket memory, long enough for the next commands to arrive
// first), so the target must take a command while the request it replaces is still Sending.
// Found under TCP memory pressure, where the target answered such a host with a TermReq
// ("more commands outstanding than the queue depth") and the run failed.
TEST_F(ConnectionFlow, AHostMayReuseASlotWhoseResponseItReadBeforeTheSendCompleted) {
  HostEnd admin(reactor, set, clock, "admin"), io(reactor, set, clock, "io");
  open(admin, io);
  const uint32_t depth = pool_size(io.conn->info());
  ASSERT_GT(depth, 1u);
  io.stream->hold_dones(true);  // the host reads; the target's sends have not completed yet
  io.send(flush_capsules(1, depth));
  ASSERT_EQ(successful_responses(io), depth);  // every response read by the host ...
  EXPECT_EQ(in_state(io.conn->info(), target::TcpRequest::State::Sending), depth);  // ... none let go of yet
  // The host has nothing outstanding and sends a queue's worth again: all taken and answered.
  io.send(flush_capsules(uint16_t(depth + 1), depth));
  EXPECT_FALSE(io.gone) << "the connection was closed";
  EXPECT_EQ(successful_responses(io), depth);
  EXPECT_LE(pool_size(io.conn->info()), 2 * depth) << "the pool grows at most to twice the depth";
  io.stream->release_dones();
  io.spin();
  EXPECT_EQ(in_use(io.conn->info()), 0u) << "every request is free again";
}

// Zero-copy sends hold their responses until the kernel lets go of the pages, which over
// loopback is once the host has read them: the host may reuse those slots again and again.
// The pool then grows past twice the depth, by what the stream says it may hold, and no
// further.
TEST_F(ConnectionFlow, ZeroCopyHoldsLetTheHostReuseSlotsPastTwiceTheDepth) {
  HostEnd admin(reactor, set, clock, "admin"), io(reactor, set, clock, "io");
  open(admin, io);
  const uint32_t depth = pool_size(io.conn->info());
  ASSERT_GT(depth, 1u);
  io.stream->hold_dones(true);
  io.stream->set_held_after_delivery(depth);
  // Three queues' worth, each read by the host before the next: 3 x depth held at once.
  for (uint32_t round = 0; round < 3; ++round) {
    io.send(flush_capsules(uint16_t(1 + round * depth), depth));
    ASSERT_FALSE(io.gone) << "round " << round << ": the connection was closed";
    ASSERT_EQ(successful_responses(io), depth) << "round " << round;
  }
  EXPECT_EQ(in_state(io.conn->info(), target::TcpRequest::State::Sending), 3 * depth);
  EXPECT_LE(pool_size(io.conn->info()), 3 * depth) << "the pool grows only as far as the holds need";
  // A fourth would need more than the stream may hold: refused, as a host past its depth.
  io.send(flush_capsules(uint16_t(1 + 3 * depth), depth));
  EXPECT_TRUE(refused_with_sequence_error(io, [&] { io.stream->release_dones(); }))  // the close waits for them
      << "no C2HTermReq: the pool grew past depth + depth + what the stream may hold";
  EXPECT_TRUE(io.gone) << "the connection stayed open";
}

// The pool grows only for requests whose response has left: a host with a queue's worth of
// commands truly outstanding (writes waiting for their data) that sends one more is still
// refused with a TermReq (PDU sequence error) and closed.
TEST_F(ConnectionFlow, AHostPastTheQueueDepthWithNothingAnsweredIsRefused) {
  HostEnd admin(reactor, set, clock, "admin"), io(reactor, set, clock, "io");
  open(admin, io);
  const uint32_t depth = pool_size(io.conn->info());
  test::Bytes b;
  for (uint32_t c = 1; c <= depth; ++c) {
    const auto pdu = test::capsule_pdu(test::rw_sqe(wire::IoOpcode::Write, uint16_t(c), kNullNsid, c, 1, 4096), {},
                                       false, false);
    b.insert(b.end(), pdu.begin(), pdu.end());
  }
  io.send(b);
  ASSERT_EQ(in_state(io.conn->info(), target::TcpRequest::State::AwaitingH2C), depth);
  io.send(flush_capsules(uint16_t(depth + 1), 1));
  EXPECT_TRUE(refused_with_sequence_error(io)) << "no C2HTermReq";
  EXPECT_TRUE(io.gone) << "the connection stayed open";
}

}  // namespace connection_flow_test

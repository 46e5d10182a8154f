// SPDX-License-Identifier: Apache-2.0
// A target connection's deadlines on a clock the test steps, over socketpairs on a real
// reactor, each checked 1 ms before it (still open) and 1 ms after (closed):
// - setup: a host that never sends its ICReq, or never its Connect, is closed at
//   icreq_timeout_ms after accept;
// - keep-alive: an admin queue whose host sends nothing for KATO loses its controller, and
//   the controller's I/O queues go with it; a Keep Alive or any other admin command starts
//   KATO again; a discovery controller gets discovery_kato_ms whatever the host asks;
// - H2C data: a write whose data the host owes for over h2c_data_timeout_ms after the R2T
//   closes its queue (trickled bytes do not move that deadline; idle gaps between writes
//   are no stall);
// - send stall: a queue whose responses do not move for send_timeout_ms is closed.
// (Formerly integration tests that slept through the real timeouts.)
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "../integration/raw_session.hpp"
#include "connection_test_state.hpp"
#include "target_tcp/tcp_queue.hpp"
#include "target/target_state.hpp"
#include "util/log.hpp"
#include "wire/pdu.hpp"

namespace connection_deadlines_test {

using namespace nvtcp;

namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint32_t kICReqTimeoutMs = 300;
constexpr uint32_t kDiscoveryKatoMs = 300;
constexpr uint32_t kH2CDataTimeoutMs = 500;
constexpr uint32_t kSendTimeoutMs = 300;
constexpr uint64_t kPollMs = 100;  // kControllerPollNs: when a connected queue first checks
constexpr uint32_t kNullNsid = test::kConnNullNsid;
constexpr uint32_t kRamNsid = test::kConnRamNsid;
constexpr const char* kNqn = "nqn.2026-11.io.nvtcp:deadlines";

struct SteppedClock : reactor::Clock {
  uint64_t now = 5'000 * kMs;
  uint64_t now_ns() const override { return now; }
};

target::TargetState& state() {
  static target::TargetState* st = test::make_connection_test_state(kNqn, [](target::TargetConfig& cfg) {
    cfg.icreq_timeout_ms = kICReqTimeoutMs;
    cfg.discovery_kato_ms = kDiscoveryKatoMs;
    cfg.h2c_data_timeout_ms = kH2CDataTimeoutMs;
    cfg.send_timeout_ms = kSendTimeoutMs;
  });
  return *st;
}

// One accepted connection: the target's end of a socketpair, the test holding the host's.
struct Accepted {
  int host_fd = -1;
  target::TcpQueue* conn = nullptr;  // frees itself once closed: valid while in the set
  Accepted(reactor::Reactor& r, target::ConnectionSet& set, const reactor::Clock& clock, const char* name) {
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    host_fd = sv[1];
    conn = new target::TcpQueue(state(), r, sv[0], name, set, {}, {}, clock);
    conn->start();
  }
  ~Accepted() { ::close(host_fd); }
};

// Turns of the reactor, so that closes and their deferred on_closed run.
void spin(reactor::Reactor& r, int turns = 20) {
  for (int i = 0; i < turns; ++i) r.run_once(0);
}

// The host's end sees EOF: the target closed the connection.
bool host_sees_eof(int fd) {
  uint8_t b[256];
  for (;;) {
    ssize_t n = read(fd, b, sizeof(b));
    if (n == 0) return true;
    if (n < 0) return false;  // EAGAIN: still open
  }
}

// The host's end of one connection, driven from the test's thread: every wait turns the
// reactor, since the target runs on it too.
struct HostEnd {
  reactor::Reactor& r;
  int fd;
  uint16_t next_cid = 1;

  uint16_t cid() { return next_cid++; }
  bool send(const test::Bytes& b) {
    size_t off = 0;
    for (int i = 0; i < 20000 && off < b.size(); ++i) {
      ssize_t n = write(fd, b.data() + off, b.size() - off);
      if (n > 0) off += size_t(n);
      else if (n < 0 && errno != EAGAIN) return false;
      else r.run_once(1000);
    }
    return off == b.size();
  }
  bool read_exact(uint8_t* p, size_t len) {
    size_t got = 0;
    for (int i = 0; i < 20000 && got < len; ++i) {
      ssize_t n = read(fd, p + got, len - got);
      if (n > 0) got += size_t(n);
      else if (n == 0 || errno != EAGAIN) return false;
      else r.run_once(1000);
    }
    return got == len;
  }
  ::testing::AssertionResult read_pdu(test::Bytes& p) {
    p.resize(sizeof(wire::CommonHeader));
    if (!read_exact(p.data(), p.size())) return ::testing::AssertionFailure() << "no PDU header from the target";
    const uint32_t plen = test::read_as<wire::CommonHeader>(p).plen;
    if (plen < p.size()) return ::testing::AssertionFailure() << "PLEN " << plen;
    p.resize(plen);
    if (!read_exact(p.data() + sizeof(wire::CommonHeader), plen - sizeof(wire::CommonHeader)))
      return ::testing::AssertionFailure() << "PDU cut short";
    return ::testing::AssertionSuccess();
  }
  ::testing::AssertionResult icreq() {
    if (!send(test::icreq_pdu(0))) return ::testing::AssertionFailure() << "ICReq not sent";
    test::Bytes p;
    if (auto res = read_pdu(p); !res) return res;
    if (test::read_as<wire::CommonHeader>(p).type != uint8_t(wire::PduType::ICResp))
      return ::testing::AssertionFailure() << "no ICResp";
    return ::testing::AssertionSuccess();
  }
  // The PDUs up to cid's CapsuleResp; C2HData payload lands in data. An R2T is answered
  // with the H2CData it asks for, from out.
  ::testing::AssertionResult response(uint16_t cid, wire::Cqe& cqe, test::Bytes* data = nullptr,
                                      const test::Bytes* out = nullptr) {
    for (;;) {
      test::Bytes p;
      if (auto res = read_pdu(p); !res) return res << " (waiting for cid " << cid << ")";
      const auto ch = test::read_as<wire::CommonHeader>(p);
      if (ch.type == uint8_t(wire::PduType::C2HData)) {
        const auto d = test::read_as<wire::C2HDataPdu>(p);
        if (data) data->insert(data->end(), p.begin() + ch.pdo, p.begin() + ch.pdo + d.datal);
      } else if (ch.type == uint8_t(wire::PduType::R2T) && out) {
        const auto r2t = test::read_as<wire::R2TPdu>(p);
        const test::Bytes chunk(out->begin() + r2t.r2to, out->begin() + r2t.r2to + r2t.r2tl);
        if (!send(test::h2c_data_pdu(cid, r2t.ttag, r2t.r2to, chunk, true)))
          return ::testing::AssertionFailure() << "H2CData not sent";
      } else if (ch.type == uint8_t(wire::PduType::CapsuleResp)) {
        cqe = test::read_as<wire::Cqe>(p, sizeof(wire::CommonHeader));
        if (cqe.cid != cid) return ::testing::AssertionFailure() << "response for cid " << cqe.cid;
        return ::testing::AssertionSuccess();
      } else {
        return ::testing::AssertionFailure() << "unexpected PDU type " << unsigned(ch.type);
      }
    }
  }
  // Sends sqe (with in-capsule data) and waits for its response, which must be a success.
  ::testing::AssertionResult command(wire::Sqe sqe, const test::Bytes& data = {}, wire::Cqe* out_cqe = nullptr,
                                     test::Bytes* in = nullptr, const test::Bytes* out = nullptr) {
    if (!send(test::capsule_pdu(sqe, data, false, false))) return ::testing::AssertionFailure() << "not sent";
    wire::Cqe cqe{};
    if (auto res = response(sqe.cid, cqe, in, out); !res) return res;
    if (out_cqe) *out_cqe = cqe;
    return test::ok(cqe);
  }
  ::testing::AssertionResult connect(const char* nqn, uint16_t qid, uint16_t cntlid, uint32_t kato_ms,
                                     uint16_t* got_cntlid = nullptr) {
    wire::Sqe sqe = wire::cmd::connect(qid, 31, kato_ms);
    sqe.cid = cid();
    wire::Cqe cqe{};
    const auto data = test::bytes_of(wire::cmd::connect_data(test::kHostId, cntlid, nqn, test::kHostNqn));
    if (auto res = command(sqe, data, &cqe); !res) return res;
    if (got_cntlid) *got_cntlid = uint16_t(cqe.dw0);
    return ::testing::AssertionSuccess();
  }
};

struct ConnectionDeadlines : ::testing::Test {
  reactor::Reactor reactor{64};
  target::ConnectionSet set;
  SteppedClock clock;
  ConnectionDeadlines() { log::set_level(log::Level::Off); }
  ~ConnectionDeadlines() override {
    set.close_all();
    for (int i = 0; i < 100 && set.size() > 0; ++i) reactor.run_once(1000);
  }
  // Steps the clock and runs what fell due on every connection given (their reactor timers
  // read the real clock and would not fire for a fake step).
  void step(std::initializer_list<target::TcpQueue*> conns, uint64_t ns) {
    clock.now += ns;
    for (auto* c : conns) c->run_due_deadlines();
    spin(reactor);
  }
  void step(target::TcpQueue* c, uint64_t ns) { step({c}, ns); }
  // Steps a's clock to 1 ms before its deadline (left_ms away), where it must still be open,
  // then to 1 ms past it, where the target must have closed it (and only it).
  void expect_closed_at_deadline(const Accepted& a, uint64_t left_ms) {
    const size_t open = set.size();
    step(a.conn, (left_ms - 1) * kMs);
    ASSERT_EQ(set.size(), open) << "the target closed the connection before its deadline";
    EXPECT_FALSE(host_sees_eof(a.host_fd));
    step(a.conn, 2 * kMs);
    for (int i = 0; i < 100 && set.size() == open; ++i) reactor.run_once(1000);
    EXPECT_EQ(set.size(), open - 1) << "the connection is still open past its deadline";
    EXPECT_TRUE(host_sees_eof(a.host_fd));
  }
  // An admin queue on the test subsystem, connected and enabled (KATO kato_ms).
  void open_admin(HostEnd& h, uint32_t kato_ms, uint16_t& cntlid) {
    spin(reactor);
    ASSERT_TRUE(h.icreq());
    ASSERT_TRUE(h.connect(kNqn, 0, wire::kDynamicCntlid, kato_ms, &cntlid));
    ASSERT_TRUE(
        h.command(test::property_sqe(h.cid(), wire::FabricsType::PropertySet, wire::prop::CC, test::kCcEnable)));
    ASSERT_TRUE(h.command(test::set_features_nq_sqe(h.cid(), 1)));
  }
  void open_io(HostEnd& h, uint16_t cntlid) {
    ASSERT_TRUE(h.icreq());
    ASSERT_TRUE(h.connect(kNqn, 1, cntlid, 0));
  }
  size_t controllers() { return state().subsystems()[0]->controller_count(); }
};

TEST_F(ConnectionDeadlines, NoICReqIsClosedAtItsDeadlineNotBefore) {
  Accepted a(reactor, set, clock, "silent");
  spin(reactor);
  expect_closed_at_deadline(a, kICReqTimeoutMs);
}

TEST_F(ConnectionDeadlines, ConnectIsDueByTheDeadlineTheICReqHad) {
  Accepted a(reactor, set, clock, "no-connect");
  spin(reactor);
  clock.now += 100 * kMs;  // the ICReq comes 100 ms after accept
  wire::ICReqPdu icreq{};
  icreq.ch.type = uint8_t(wire::PduType::ICReq);
  icreq.ch.hlen = sizeof(icreq);
  icreq.ch.plen = sizeof(icreq);
  icreq.pfv = wire::kPfv;
  ASSERT_EQ(write(a.host_fd, &icreq, sizeof(icreq)), ssize_t(sizeof(icreq)));
  wire::ICRespPdu icresp{};
  size_t got = 0;
  for (int i = 0; i < 1000 && got < sizeof(icresp); ++i) {
    reactor.run_once(1000);
    ssize_t n = read(a.host_fd, reinterpret_cast<uint8_t*>(&icresp) + got, sizeof(icresp) - got);
    if (n > 0) got += size_t(n);
  }
  ASSERT_EQ(got, sizeof(icresp));
  EXPECT_EQ(icresp.ch.type, uint8_t(wire::PduType::ICResp));
  // Closed at accept + icreq_timeout_ms, however late the ICReq came.
  expect_closed_at_deadline(a, kICReqTimeoutMs - 100);
}

TEST_F(ConnectionDeadlines, OneConnectionsDeadlineClosesOnlyThatConnection) {
  Accepted early(reactor, set, clock, "early");
  clock.now += 200 * kMs;
  Accepted late(reactor, set, clock, "late");
  spin(reactor);
  step(early.conn, 101 * kMs);  // past early's deadline, 101 ms into late's
  late.conn->run_due_deadlines();
  for (int i = 0; i < 100 && set.size() > 1; ++i) reactor.run_once(1000);
  EXPECT_EQ(set.size(), 1u);
  EXPECT_TRUE(host_sees_eof(early.host_fd));
  EXPECT_FALSE(host_sees_eof(late.host_fd));
}

// ------------------------------------------------------------------ keep-alive

TEST_F(ConnectionDeadlines, SilentHostLosesItsControllerAtKatoNotBefore) {
  Accepted admin(reactor, set, clock, "admin");
  Accepted io(reactor, set, clock, "io");
  HostEnd h{reactor, admin.host_fd}, hio{reactor, io.host_fd};
  uint16_t cntlid = 0;
  open_admin(h, 500, cntlid);  // the last admin command: the Set Features, now
  open_io(hio, cntlid);
  ASSERT_EQ(controllers(), 1u);
  step(admin.conn, 499 * kMs);
  ASSERT_EQ(set.size(), 2u) << "the target closed the admin queue before KATO";
  EXPECT_EQ(controllers(), 1u);
  EXPECT_FALSE(host_sees_eof(admin.host_fd));
  step(admin.conn, 2 * kMs);
  EXPECT_EQ(controllers(), 0u) << "keep-alive expiry did not tear the controller down";
  for (int i = 0; i < 100 && set.size() == 2; ++i) reactor.run_once(1000);
  EXPECT_TRUE(host_sees_eof(admin.host_fd));
  // Its I/O queue notices at its next controller poll (the reactor may have run it already:
  // its timer reads the real clock) and closes too.
  step(io.conn, kPollMs * kMs);
  for (int i = 0; i < 100 && set.size() > 0; ++i) reactor.run_once(1000);
  EXPECT_EQ(set.size(), 0u);
  EXPECT_TRUE(host_sees_eof(io.host_fd));
}

TEST_F(ConnectionDeadlines, KeepAliveCommandStartsKatoAgain) {
  Accepted a(reactor, set, clock, "admin");
  HostEnd h{reactor, a.host_fd};
  uint16_t cntlid = 0;
  open_admin(h, 500, cntlid);
  // Three Keep Alives 400 ms apart carry the controller past its first KATO, and past the
  // second: each counts from when it came.
  for (int k = 0; k < 3; ++k) {
    step(a.conn, 400 * kMs);
    ASSERT_EQ(set.size(), 1u);
    ASSERT_TRUE(h.command(test::raw_sqe(wire::cmd::keep_alive(), h.cid())));
  }
  EXPECT_EQ(controllers(), 1u);
  expect_closed_at_deadline(a, 500);
  EXPECT_EQ(controllers(), 0u);
}

TEST_F(ConnectionDeadlines, AnyAdminCommandStartsKatoAgain) {
  Accepted a(reactor, set, clock, "admin");
  HostEnd h{reactor, a.host_fd};
  uint16_t cntlid = 0;
  open_admin(h, 500, cntlid);
  step(a.conn, 400 * kMs);
  // Get Features 0Fh: the target took the timeout the host asked for at Connect.
  wire::Cqe cqe{};
  ASSERT_TRUE(h.command(test::raw_sqe(wire::cmd::get_features(wire::kFeatureKeepAliveTimer), h.cid()), {}, &cqe));
  EXPECT_EQ(cqe.dw0, 500u);
  step(a.conn, 400 * kMs);
  ASSERT_EQ(set.size(), 1u);
  // A fabrics Property Get counts as well.
  ASSERT_TRUE(h.command(test::property_sqe(h.cid(), wire::FabricsType::PropertyGet, wire::prop::CSTS, 0)));
  expect_closed_at_deadline(a, 500);
  EXPECT_EQ(controllers(), 0u);
}

// A discovery controller is open to any host; one that asks for no keep-alive (KATO 0)
// gets discovery_kato_ms anyway (as the Linux target forces), so idle discovery sessions
// cannot hold connection slots for good. (BadInput.DiscoverySessionWithoutKeepAliveTimesOut
// checks the same through a real socket, and that the target serves others after.)
TEST_F(ConnectionDeadlines, DiscoverySessionWithoutKeepAliveTimesOut) {
  Accepted a(reactor, set, clock, "discovery");
  HostEnd h{reactor, a.host_fd};
  spin(reactor);
  ASSERT_TRUE(h.icreq());
  ASSERT_TRUE(h.connect(wire::kDiscoveryNqn, 0, wire::kDynamicCntlid, 0));
  wire::Sqe gf = test::raw_sqe(wire::cmd::get_features(wire::kFeatureKeepAliveTimer), h.cid());
  wire::Cqe cqe{};
  ASSERT_TRUE(h.command(gf, {}, &cqe));
  EXPECT_EQ(cqe.dw0, kDiscoveryKatoMs) << "the forced keep-alive timeout is what Get Features reports";
  // Asking for none again with Set Features changes nothing.
  ASSERT_TRUE(h.command(test::raw_sqe(wire::cmd::set_features(wire::kFeatureKeepAliveTimer, 0), h.cid())));
  gf.cid = h.cid();
  ASSERT_TRUE(h.command(gf, {}, &cqe));
  EXPECT_EQ(cqe.dw0, kDiscoveryKatoMs);
  // Silent from now on: the target ends the session KATO after the last command.
  expect_closed_at_deadline(a, kDiscoveryKatoMs);
}

// ------------------------------------------------------------------ H2C data

struct H2CData : ConnectionDeadlines {
  Accepted admin{reactor, set, clock, "admin"};
  Accepted io{reactor, set, clock, "io"};
  HostEnd h{reactor, admin.host_fd}, hio{reactor, io.host_fd};
  uint16_t cntlid = 0;
  void SetUp() override {
    open_admin(h, 0, cntlid);
    open_io(hio, cntlid);
  }
  // Sends a write of len bytes (more than fits in a capsule) and reads its first R2T.
  void start_write(uint16_t cid, uint32_t len, wire::R2TPdu& r2t) {
    ASSERT_TRUE(hio.send(test::capsule_pdu(test::rw_sqe(wire::IoOpcode::Write, cid, kRamNsid, 0, len / 512, len), {},
                                           false, false)));
    test::Bytes p;
    ASSERT_TRUE(hio.read_pdu(p));
    ASSERT_EQ(test::read_as<wire::CommonHeader>(p).type, uint8_t(wire::PduType::R2T));
    r2t = test::read_as<wire::R2TPdu>(p);
  }
  // The queue that owed data is closed; the admin queue and the controller stay, and serve:
  // the host can connect its I/O queue again and read.
  void expect_only_io_closed() {
    EXPECT_EQ(set.size(), 1u);
    EXPECT_EQ(controllers(), 1u);
    EXPECT_TRUE(h.command(test::raw_sqe(wire::cmd::get_features(wire::kFeatureKeepAliveTimer), h.cid())));
    Accepted again(reactor, set, clock, "io again");
    HostEnd ha{reactor, again.host_fd};
    spin(reactor);
    ASSERT_TRUE(ha.icreq());
    ASSERT_TRUE(ha.connect(kNqn, 1, cntlid, 0));
    test::Bytes in;
    EXPECT_TRUE(ha.command(test::rw_sqe(wire::IoOpcode::Read, ha.cid(), kRamNsid, 0, 1, 512), {}, nullptr, &in));
    EXPECT_EQ(in.size(), 512u);
  }
};

// A host that stops sending the H2CData its R2T asked for would keep the write buffer for
// as long as its keep-alives go on: h2c_data_timeout_ms after the R2T the target closes
// that queue and frees the buffer.
TEST_F(H2CData, DataNeverSentClosesTheQueueAtTheTimeout) {
  const uint64_t before = state().usage.buffer_bytes.load();
  wire::R2TPdu r2t{};
  start_write(hio.cid(), 65536, r2t);
  const uint64_t held = state().usage.buffer_bytes.load();
  EXPECT_GT(held, before) << "the write holds no buffer";
  expect_closed_at_deadline(io, kH2CDataTimeoutMs);
  EXPECT_LE(state().usage.buffer_bytes.load() + 65536, held) << "the closed queue's write buffer is still held";
  expect_only_io_closed();
}

// The data an R2T asks for is due within h2c_data_timeout_ms of the R2T: a host that
// trickles a few bytes now and then (each before the timeout) used to hold the buffer for
// as long as it liked, since every byte restarted the clock.
TEST_F(H2CData, TrickledDataDoesNotMoveTheDeadline) {
  const uint16_t cid = hio.cid();
  wire::R2TPdu r2t{};
  start_write(cid, 65536, r2t);
  uint32_t off = 0;
  for (int k = 0; k < 4; ++k) {  // 4 bytes every 100 ms, up to 400 ms after the R2T
    step(io.conn, 100 * kMs);
    ASSERT_TRUE(hio.send(test::h2c_data_pdu(cid, r2t.ttag, off, test::Bytes(4, 0x5A), false)));
    off += 4;
    spin(reactor);
  }
  ASSERT_EQ(set.size(), 2u);
  expect_closed_at_deadline(io, kH2CDataTimeoutMs - 400);
  expect_only_io_closed();
}

// Idle time between writes is not a stall: only a request that waits for its data counts.
TEST_F(H2CData, IdleGapsBetweenWritesAreNotATimeout) {
  for (uint32_t k = 0; k < 4; ++k) {
    const uint32_t len = 131072;  // over the in-capsule size: R2T writes
    const test::Bytes out = test::pattern(len, 50 + k);
    const uint64_t lba = uint64_t(k) * 1024;
    ASSERT_TRUE(hio.command(test::rw_sqe(wire::IoOpcode::Write, hio.cid(), kRamNsid, lba, len / 512, len), {},
                            nullptr, nullptr, &out));
    test::Bytes in;
    ASSERT_TRUE(hio.command(test::rw_sqe(wire::IoOpcode::Read, hio.cid(), kRamNsid, lba, len / 512, len), {}, nullptr,
                            &in));
    EXPECT_EQ(in, out);
    step({admin.conn, io.conn}, (kH2CDataTimeoutMs + 250) * kMs);
    ASSERT_EQ(set.size(), 2u) << "an idle gap after write " << k << " ended a queue";
  }
  EXPECT_FALSE(host_sees_eof(io.host_fd));
}

// ------------------------------------------------------------------ send stall

// A host that sends commands and never reads the answers holds what is queued for it: after
// send_timeout_ms without progress its queue is closed, its controller stays.
TEST_F(H2CData, ResponsesThatDoNotMoveCloseTheQueueAtTheSendTimeout) {
  // 4 MiB of reads: more than the socketpair takes, so the target's queue stops moving.
  for (int k = 0; k < 32; ++k)
    ASSERT_TRUE(hio.send(test::capsule_pdu(
        test::rw_sqe(wire::IoOpcode::Read, hio.cid(), kNullNsid, uint64_t(k) * 32, 32, 131072), {}, false, false)));
  uint64_t queued = 0;
  for (int i = 0; i < 2000; ++i) {
    reactor.run_once(1000);
    const uint64_t q = io.conn->info().send_queue_bytes;
    if (q > 0 && q == queued && i > 50) break;
    queued = q;
  }
  ASSERT_GT(io.conn->info().send_queue_bytes, 0u) << "the socket took every response";
  // The first check after Connect sees the queue still: the stall counts from there.
  step(io.conn, kPollMs * kMs);
  ASSERT_EQ(set.size(), 2u);
  expect_closed_at_deadline(io, kSendTimeoutMs);
  EXPECT_EQ(controllers(), 1u);
  EXPECT_EQ(set.size(), 1u);
}

}  // namespace

}  // namespace connection_deadlines_test

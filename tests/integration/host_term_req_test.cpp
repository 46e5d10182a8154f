// SPDX-License-Identifier: Apache-2.0
// The host's side of a fatal transport error, against a scripted target on a raw socket: the
// H2CTermReq quotes the offending header, the queue's commands fail at once, and the socket
// stays open for the linger (so the TermReq is not overtaken by a reset) until the target
// closes or the linger passes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <cstring>
#include <vector>

#include "host/queue_pair_impl.hpp"
#include "../support/loopback.hpp"
#include "reactor/reactor.hpp"
#include "transport/terminator.hpp"
#include "wire/pdu.hpp"

namespace host_term_req_test {

namespace {

using nvtcp::host::detail::HostError;
using nvtcp::host::detail::QueuePairImpl;
using nvtcp::host::detail::QueueParams;
using nvtcp::host::detail::SocketState;
using QS = nvtcp::host::detail::QueueState;
using namespace nvtcp::wire;

struct Listener {
  int fd = -1;
  uint16_t port = 0;
  Listener() { fd = nvtcp::test::listen_loopback(port); }
  ~Listener() { ::close(fd); }
};

// Reads exactly n bytes within limit_ms while the host's reactor keeps running.
bool read_exact(nvtcp::reactor::Reactor& r, int fd, uint8_t* p, size_t n, int limit_ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  while (n > 0 && std::chrono::steady_clock::now() < end) {
    r.run_once(1000);
    ssize_t got = ::recv(fd, p, n, MSG_DONTWAIT);
    if (got == 0) return false;
    if (got > 0) {
      p += got;
      n -= size_t(got);
    }
  }
  return n == 0;
}

// An ICResp with a PDU format version the host does not speak: fatal, FES 06h.
std::vector<uint8_t> bad_icresp() {
  ICRespPdu ic{};
  ic.ch.type = uint8_t(PduType::ICResp);
  ic.ch.hlen = sizeof(ICRespPdu);
  ic.ch.plen = sizeof(ICRespPdu);
  ic.pfv = 1;
  ic.maxh2cdata = 131072;
  std::vector<uint8_t> b(sizeof(ic));
  std::memcpy(b.data(), &ic, sizeof(ic));
  return b;
}

struct Scripted {
  Listener l;
  nvtcp::reactor::Reactor r{64};
  QueueParams p;
  int conn = -1;
  std::vector<uint8_t> term;  // the H2CTermReq as received
  Scripted() {
    p.trid.traddr = "127.0.0.1";
    p.trid.trsvcid = l.port;
    p.trid.subnqn = "nqn.2026-11.io.nvtcp:termreq-test";
    p.qid = 1;
    p.depth = 4;
    p.timeout_ms = 3000;
  }
  ~Scripted() {
    if (conn >= 0) ::close(conn);
  }
  // Drives the host into the bad ICResp; returns connect()'s result and how long it took.
  bool run(QueuePairImpl& qp, HostError& err, std::chrono::milliseconds& took) {
    // connect() runs the reactor on this thread; the target's script runs beside it.
    auto start = std::chrono::steady_clock::now();
    std::thread target([&] {
      conn = ::accept4(l.fd, nullptr, nullptr, SOCK_CLOEXEC);
      uint8_t icreq[sizeof(ICReqPdu)];
      size_t have = 0;
      while (conn >= 0 && have < sizeof(icreq)) {
        ssize_t got = ::recv(conn, icreq + have, sizeof(icreq) - have, 0);
        if (got <= 0) return;
        have += size_t(got);
      }
      auto b = bad_icresp();
      ::send(conn, b.data(), b.size(), MSG_NOSIGNAL);
    });
    bool ok = qp.connect(err);
    target.join();
    took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    return ok;
  }
  bool read_term_req() {
    term.assign(sizeof(TermReqPdu) + sizeof(ICRespPdu), 0);
    return read_exact(r, conn, term.data(), term.size(), 3000);
  }
  // Whether the host still holds the connection open (no EOF, no reset, nothing more sent).
  bool still_open() {
    uint8_t b;
    ssize_t got = ::recv(conn, &b, 1, MSG_DONTWAIT);
    return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  // The target closes its end; the host's close then completes and the queue ends Failed.
  void close_and_wait(QueuePairImpl& qp) {
    ::close(conn);
    conn = -1;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (qp.state() != QS::Failed && std::chrono::steady_clock::now() < end) r.run_once(1000);
  }
};

// Every test starts where the host has just failed on the bad ICResp.
class HostTermReq : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(s.l.port, 0);
    connected = s.run(qp, err, took);
  }
  Scripted s;
  QueuePairImpl qp{s.r, s.p};
  HostError err;
  std::chrono::milliseconds took{};
  bool connected = true;
};

TEST_F(HostTermReq, QuotesTheHeaderFailsAtOnceAndClosesWhenTheTargetDoes) {
  EXPECT_FALSE(connected);
  EXPECT_EQ(err.kind, HostError::Kind::Transport) << err.message;
  EXPECT_NE(err.message.find("PFV"), std::string::npos) << err.message;
  // The queue failed without waiting out the linger: failing commands and closing the socket
  // are separate steps.
  EXPECT_LT(took.count(), int64_t(nvtcp::transport::kTermReqLingerNs / 1'000'000));
  EXPECT_TRUE(qp.failed());
  ASSERT_TRUE(s.read_term_req());
  TermReqPdu t;
  std::memcpy(&t, s.term.data(), sizeof(t));
  EXPECT_EQ(t.ch.type, uint8_t(PduType::H2CTermReq));
  EXPECT_EQ(uint32_t(t.ch.plen), s.term.size());
  EXPECT_EQ(t.fes, uint16_t(Fes::UnsupportedParameter));
  EXPECT_EQ(uint32_t(t.fei), offsetof(ICRespPdu, pfv));
  const auto quoted = bad_icresp();
  EXPECT_EQ(0, std::memcmp(s.term.data() + sizeof(TermReqPdu), quoted.data(), quoted.size()));
  // Lingering: still open for the target to read the TermReq and close first.
  EXPECT_EQ(qp.socket_state(), SocketState::Lingering);
  EXPECT_TRUE(s.still_open());
  s.close_and_wait(qp);
  EXPECT_EQ(qp.state(), QS::Failed);
  EXPECT_EQ(qp.socket_state(), SocketState::Closed);
}

TEST_F(HostTermReq, ATargetThatNeverClosesIsClosedAfterTheLinger) {
  EXPECT_FALSE(connected);
  ASSERT_TRUE(s.read_term_req());
  auto start = std::chrono::steady_clock::now();
  // Real time: the linger is a reactor timer. Wide margins: it must not close at once, and it
  // must close within a few lingers.
  uint8_t b;
  ssize_t got = -1;
  const auto limit = std::chrono::nanoseconds(nvtcp::transport::kTermReqLingerNs * 5);
  while (std::chrono::steady_clock::now() - start < limit) {
    s.r.run_once(1000);
    got = ::recv(s.conn, &b, 1, MSG_DONTWAIT);
    if (got >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) break;
  }
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(got, 0) << "expected an orderly close after the linger";
  EXPECT_GE(waited, std::chrono::nanoseconds(nvtcp::transport::kTermReqLingerNs / 2));
  // The host shut its side down; its close completes once ours follows.
  s.close_and_wait(qp);
  EXPECT_EQ(qp.socket_state(), SocketState::Closed);
  EXPECT_EQ(qp.state(), QS::Failed);
}

}  // namespace

}  // namespace host_term_req_test

// A target connection's setup deadlines on a clock the test steps, over a socketpair on a
// real reactor: a host that never sends its ICReq, or never its Connect, is closed at
// icreq_timeout_ms after accept and not a moment before. (Formerly an integration test that
// slept through the real timeout.)
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "target/connection.hpp"
#include "target/subsystem.hpp"
#include "util/log.hpp"
#include "wire/pdu.hpp"

using namespace nvtcp;

namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint32_t kICReqTimeoutMs = 300;

struct SteppedClock : target::Clock {
  uint64_t now = 5'000 * kMs;
  uint64_t now_ns() const override { return now; }
};

target::TargetState& state() {
  static target::TargetState* st = [] {
    target::TargetConfig cfg;
    cfg.listeners.push_back({"127.0.0.1", 4420});
    cfg.icreq_timeout_ms = kICReqTimeoutMs;
    target::SubsystemConfig sc;
    sc.nqn = "nqn.2026-11.io.nvtcp:deadlines";
    sc.namespaces.push_back({1, "null", 1u << 30, "", 4096});
    cfg.subsystems.push_back(sc);
    EXPECT_EQ(target::finalize_config(cfg), "");
    auto* s = new target::TargetState();
    EXPECT_EQ(target::build_state(cfg, *s), "");
    return s;
  }();
  return *st;
}

// One accepted connection: the target's end of a socketpair, the test holding the host's.
struct Accepted {
  int host_fd = -1;
  target::Connection* conn = nullptr;  // frees itself once closed: valid while in the set
  Accepted(reactor::Reactor& r, target::ConnectionSet& set, const target::Clock& clock, const char* name) {
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    host_fd = sv[1];
    conn = new target::Connection(state(), r, sv[0], name, set, {}, {}, clock);
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

struct ConnectionDeadlines : ::testing::Test {
  reactor::Reactor reactor{64};
  target::ConnectionSet set;
  SteppedClock clock;
  ConnectionDeadlines() { log::set_level(log::Level::Off); }
  ~ConnectionDeadlines() override {
    set.close_all();
    for (int i = 0; i < 100 && set.size() > 0; ++i) reactor.run_once(1000);
  }
  void step(target::Connection* c, uint64_t ns) {
    clock.now += ns;
    c->run_due_deadlines();
    spin(reactor);
  }
  // Steps a's clock to 1 ms before its deadline (left_ms away), where it must still be open,
  // then to 1 ms past it, where the target must have closed it.
  void expect_closed_at_deadline(const Accepted& a, uint64_t left_ms) {
    step(a.conn, (left_ms - 1) * kMs);
    ASSERT_EQ(set.size(), 1u) << "the target closed the connection before its deadline";
    EXPECT_FALSE(host_sees_eof(a.host_fd));
    step(a.conn, 2 * kMs);
    for (int i = 0; i < 100 && set.size() > 0; ++i) reactor.run_once(1000);
    EXPECT_EQ(set.size(), 0u) << "the connection is still open past its deadline";
    EXPECT_TRUE(host_sees_eof(a.host_fd));
  }
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

}  // namespace

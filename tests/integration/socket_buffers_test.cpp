// SPDX-License-Identifier: Apache-2.0
// Socket buffer settings reach the sockets they name, on the target's accepted connections
// and on the host's: socket_buffer_bytes fixes SO_RCVBUF and SO_SNDBUF, send_buffer_bytes
// fixes SO_SNDBUF alone (0: autotuned) and leaves the receive side to its default; with
// neither, the send buffer is 512 KiB and the receive buffer 4 MiB (autotuned where
// net.core.rmem_max is lower).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "nvtcp/host.hpp"
#include "raw_session.hpp"
#include "reactor/tcp_stream.hpp"
#include "test_target.hpp"

namespace nvtcp::test::socket_buffers_test {
namespace {

struct Buffers {
  int sndbuf = 0;
  int rcvbuf = 0;
};

uint16_t port_of(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
  return 0;
}

// The buffers of this process's connected TCP sockets whose local port (the target's side)
// or peer port (the host's side) is port.
std::vector<Buffers> connected_sockets(uint16_t port, bool local) {
  std::vector<Buffers> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(e.path().filename().c_str());
    int type = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    sockaddr_storage here{}, there{};
    socklen_t hl = sizeof(here), tl = sizeof(there);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&here), &hl) != 0) continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&there), &tl) != 0) continue;  // a listener
    if (port_of(local ? here : there) != port) continue;
    Buffers b;
    len = sizeof(int);
    getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b.sndbuf, &len);
    len = sizeof(int);
    getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b.rcvbuf, &len);
    out.push_back(b);
  }
  return out;
}

// SO_SNDBUF of this process's sockets accepted on port from IPv4 address from.
std::vector<int> send_buffers_from(uint16_t port, const char* from) {
  std::vector<int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(e.path().filename().c_str());
    sockaddr_in here{}, there{};
    socklen_t hl = sizeof(here), tl = sizeof(there);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&here), &hl) != 0 || here.sin_family != AF_INET) continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&there), &tl) != 0 || ntohs(here.sin_port) != port) continue;
    char addr[INET_ADDRSTRLEN] = {};
    if (!inet_ntop(AF_INET, &there.sin_addr, addr, sizeof(addr)) || std::string(addr) != from) continue;
    int v = 0;
    socklen_t len = sizeof(v);
    getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &len);
    out.push_back(v);
  }
  return out;
}

// Whether n sockets from `from` are accepted on port, each with SO_SNDBUF set to `set`.
bool all_from_at(uint16_t port, const char* from, size_t n, uint32_t set) {
  const std::vector<int> b = send_buffers_from(port, from);
  return b.size() == n && std::all_of(b.begin(), b.end(), [&](int v) { return v == int(set) * 2; });
}

// tcp_rmem's or tcp_wmem's default: where an autotuned buffer starts (it only grows from there).
int autotuned_start(const char* sysctl) {
  std::ifstream f(std::string("/proc/sys/net/ipv4/") + sysctl);
  int lo = 0, def = 0;
  f >> lo >> def;
  return def;
}

// The kernel reports twice what SO_SNDBUF/SO_RCVBUF were set to (its bookkeeping overhead).
constexpr int kernel_size(uint32_t set) { return int(set) * 2; }

struct Setting {
  uint32_t socket_buffer = 0;
  std::optional<uint32_t> send_buffer;
};

void check(const std::vector<Buffers>& sockets, Setting s, const char* side) {
  ASSERT_FALSE(sockets.empty()) << side << ": no connected socket found";
  for (const Buffers& b : sockets) {
    const uint32_t snd = s.send_buffer ? *s.send_buffer
                         : s.socket_buffer ? s.socket_buffer
                                           : reactor::kDefaultSendBufferBytes;
    if (snd)
      EXPECT_EQ(b.sndbuf, kernel_size(snd)) << side;
    else {  // (on loopback, autotuning starts it at tcp_wmem's maximum at once: 64 KiB segments)
      EXPECT_GE(b.sndbuf, autotuned_start("tcp_wmem")) << side << ": the send buffer was fixed";
      EXPECT_NE(b.sndbuf, kernel_size(reactor::kDefaultSendBufferBytes)) << side << ": the default was set";
    }
    const int rcv = reactor::receive_buffer_for(s.socket_buffer, reactor::net_core_rmem_max());
    if (rcv)
      EXPECT_EQ(b.rcvbuf, kernel_size(uint32_t(rcv))) << side;
    else
      EXPECT_GE(b.rcvbuf, autotuned_start("tcp_rmem")) << side << ": the receive buffer was fixed";
  }
}

void connect_and_check(Setting target_side, Setting host_side) {
  target::TargetConfig cfg = default_config();
  cfg.socket_buffer_bytes = target_side.socket_buffer;
  cfg.send_buffer_bytes = target_side.send_buffer;
  RunningTarget t(cfg);
  host::ControllerOptions o;
  o.io_queues = 2;
  o.socket_buffer_bytes = host_side.socket_buffer;
  o.send_buffer_bytes = host_side.send_buffer;
  std::string err;
  auto ctrl = host::Controller::connect(t.trid(), o, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(32, err);
  ASSERT_TRUE(qp) << err;
  // The target hands accepted sockets to its reactors; wait for the admin and I/O queues'.
  ASSERT_TRUE(wait_for([&] { return connected_sockets(t.port(), true).size() >= 2; }, 10000));
  check(connected_sockets(t.port(), true), target_side, "target");
  check(connected_sockets(t.port(), false), host_side, "host");
}

TEST(SocketBuffers, ByDefaultTheSendBufferIsBoundedAndTheReceiveBufferCoversWhatIsInFlight) {
  connect_and_check({}, {});
  EXPECT_EQ(reactor::kDefaultSendBufferBytes, 512u << 10);
  EXPECT_EQ(reactor::kDefaultReceiveBufferBytes, 4u << 20);
}

// Where net.core.rmem_max would cap the default receive buffer, autotuning is left alone: a
// capped fixed buffer holds less than autotuning grows to. A configured size is always set.
TEST(SocketBuffers, TheDefaultReceiveBufferIsSetOnlyWhereRmemMaxAdmitsItWhole) {
  EXPECT_EQ(reactor::receive_buffer_for(0, 4u << 20), int(4u << 20));
  EXPECT_EQ(reactor::receive_buffer_for(0, 64u << 20), int(4u << 20));
  EXPECT_EQ(reactor::receive_buffer_for(0, 212992), 0);  // Linux's default for many years
  EXPECT_EQ(reactor::receive_buffer_for(0, 0), 0);       // unreadable
  EXPECT_EQ(reactor::receive_buffer_for(80u << 10, 212992), int(80u << 10));
  EXPECT_EQ(reactor::receive_buffer_for(8u << 20, 64u << 20), int(8u << 20));
}

TEST(SocketBuffers, ZeroLeavesTheSendBufferToAutotuning) { connect_and_check({0, 0}, {0, 0}); }

TEST(SocketBuffers, SendBufferAloneLeavesTheReceiveBufferAtItsDefault) {
  connect_and_check({0, 48u << 10}, {0, 40u << 10});
}

TEST(SocketBuffers, SendBufferOverridesTheSocketBufferForSendsOnly) {
  connect_and_check({96u << 10, 48u << 10}, {80u << 10, 40u << 10});
}

TEST(SocketBuffers, SocketBufferFixesBoth) { connect_and_check({96u << 10, {}}, {80u << 10, {}}); }

// The kernel's send buffers are shared out by source address (target_tcp/send_shares.hpp): an
// address that opens more connections than its budget covers at the ceiling gets smaller
// buffers on all of them, then its newest connections are refused at accept; another address
// keeps the ceiling and is served; as the crowd leaves, its share comes back.
TEST(SocketBuffers, OneAddressOverItsShareIsCutThenRefusedAndAnotherKeepsItsBuffers) {
  constexpr uint32_t KiB = 1024;
  target::TargetConfig cfg = default_config();
  cfg.send_buffer_bytes = 256 * KiB;
  cfg.address_send_buffer_bytes = 1024 * KiB;  // four at the ceiling, sixteen at the floor
  cfg.min_send_buffer_bytes = 64 * KiB;
  cfg.send_buffer_budget_bytes = 64u << 20;
  RunningTarget t(cfg);
  std::vector<std::unique_ptr<Session>> crowd;
  for (int i = 0; i < 16; ++i) {
    crowd.push_back(std::make_unique<Session>());
    ASSERT_TRUE(crowd.back()->open(t.port(), 0, "127.0.0.2"));
    Cqe cqe{};
    ASSERT_TRUE(crowd.back()->connect_admin(cqe));
    ASSERT_TRUE(ok(cqe));
  }
  RawClient extra;
  ASSERT_TRUE(extra.connect(t.port(), "127.0.0.2"));
  EXPECT_TRUE(extra.expect_eof()) << "a seventeenth connection from 127.0.0.2 would get less than the floor";
  EXPECT_EQ(t.target().send_shares().refused(), 1u);
  // Every connection of the crowd is cut to the floor at its next periodic check.
  EXPECT_TRUE(wait_for([&] { return all_from_at(t.port(), "127.0.0.2", 16, 64 * KiB); }, 10000))
      << "the crowd's send buffers were not all cut to 64 KiB";
  // Another address keeps the ceiling and is served.
  expect_healthy(t);
  host::ControllerOptions o;
  o.io_queues = 1;
  std::string err;
  auto ctrl = host::Controller::connect(t.trid(), o, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(32, err);
  ASSERT_TRUE(qp) << err;
  EXPECT_TRUE(wait_for([&] { return all_from_at(t.port(), "127.0.0.1", 2, 256 * KiB); }, 10000))
      << "127.0.0.1's admin and I/O queues do not have the ceiling";
  EXPECT_EQ(t.target().send_shares().share_of("127.0.0.1"), 256 * KiB);
  // Half the crowd leaves: the rest get 128 KiB (1 MiB / 8).
  crowd.resize(8);
  EXPECT_TRUE(wait_for([&] { return all_from_at(t.port(), "127.0.0.2", 8, 128 * KiB); }, 10000))
      << "the send buffers of the eight left did not come back to 128 KiB";
  Session again;
  EXPECT_TRUE(again.open(t.port(), 0, "127.0.0.2")) << "under its share, the address is served again";
}

}  // namespace
}  // namespace nvtcp::test::socket_buffers_test

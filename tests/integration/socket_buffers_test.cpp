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

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "nvtcp/host.hpp"
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

}  // namespace
}  // namespace nvtcp::test::socket_buffers_test

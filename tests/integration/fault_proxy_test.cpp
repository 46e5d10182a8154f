// SPDX-License-Identifier: Apache-2.0
// The fault-injection proxy itself, against plain sockets: it forwards bytes exactly, cuts
// at exactly N bytes, really stops a stalled direction, refuses and cuts on demand.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../support/fault_proxy.hpp"
#include "../support/loopback.hpp"

namespace nvtcp::test::fault_proxy_test {
namespace {

using Bytes = std::vector<uint8_t>;
constexpr int kIoTimeoutMs = 10000;

Bytes random_bytes(size_t n, uint32_t seed) {
  Bytes b(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    std::memcpy(b.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return b;
}

void set_timeout(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int connect_to(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) < 0) {
    ::close(fd);
    return -1;
  }
  set_timeout(fd, kIoTimeoutMs);
  return fd;
}

// A plain upstream server on an ephemeral port.
class Upstream {
 public:
  Upstream() {
    fd_ = listen_loopback(port_, 64, /*reuse_addr=*/true);
    if (fd_ < 0) throw std::runtime_error("upstream listen");
  }
  ~Upstream() { ::close(fd_); }
  uint16_t port() const { return port_; }
  // The next connection, or -1 if none arrives within ms.
  int accept_one(int ms = kIoTimeoutMs) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms) != 1) return -1;
    int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c >= 0) set_timeout(c, kIoTimeoutMs);
    return c;
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// Reads until EOF, error or timeout; eof tells which ended it.
Bytes read_to_end(int fd, bool* eof = nullptr, size_t cap = SIZE_MAX) {
  Bytes out;
  uint8_t buf[65536];
  if (eof) *eof = false;
  while (out.size() < cap) {
    ssize_t k = ::recv(fd, buf, sizeof(buf), 0);
    if (k == 0 && eof) *eof = true;
    if (k <= 0) break;
    out.insert(out.end(), buf, buf + k);
  }
  return out;
}

Bytes read_exact(int fd, size_t n) { return read_to_end(fd, nullptr, n); }

// Bytes arriving on fd within ms (non-blocking peek: nothing is consumed).
bool readable_within(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1;
}

TEST(FaultProxy, ForwardsBothDirectionsByteExact) {
  Upstream up;
  FaultProxy proxy(up.port());
  int c = connect_to(proxy.port());
  ASSERT_GE(c, 0);
  int s = up.accept_one();
  ASSERT_GE(s, 0);
  const Bytes to_target = random_bytes(16 << 20, 1), to_host = random_bytes(16 << 20, 2);
  Bytes got_at_target, got_at_host;
  std::thread server([&] {
    got_at_target = read_exact(s, to_target.size());
    send_all(s, to_host.data(), to_host.size());
  });
  std::thread sender([&] { send_all(c, to_target.data(), to_target.size()); });
  got_at_host = read_exact(c, to_host.size());
  sender.join();
  server.join();
  EXPECT_TRUE(got_at_target == to_target) << "host->target: " << got_at_target.size() << " bytes";
  EXPECT_TRUE(got_at_host == to_host) << "target->host: " << got_at_host.size() << " bytes";
  EXPECT_EQ(proxy.bytes(0, Direction::ToTarget), to_target.size());
  EXPECT_EQ(proxy.bytes(0, Direction::ToHost), to_host.size());
  EXPECT_EQ(proxy.accepted(), 1u);
  EXPECT_EQ(proxy.live(), 1u);
  // An orderly close on one side reaches the other, and the proxy lets the connection go.
  ::close(c);
  bool eof = false;
  EXPECT_TRUE(read_to_end(s, &eof).empty());
  EXPECT_TRUE(eof);
  ::close(s);
  EXPECT_TRUE(proxy.wait_until([](const FaultProxy& p) { return p.live() == 0; }, 5000));
}

TEST(FaultProxy, SplitAndDelayStillByteExact) {
  Upstream up;
  FaultProxy proxy(up.port());
  proxy.split_every_byte(-1, true);
  proxy.delay(-1, Direction::ToTarget, 200);
  proxy.delay(-1, Direction::ToHost, 300);
  int c = connect_to(proxy.port());
  ASSERT_GE(c, 0);
  int s = up.accept_one();
  ASSERT_GE(s, 0);
  const Bytes a = random_bytes(100000, 3), b = random_bytes(77777, 4);
  std::thread server([&] {
    Bytes got = read_exact(s, a.size());
    EXPECT_TRUE(got == a);
    send_all(s, b.data(), b.size());
  });
  ASSERT_TRUE(send_all(c, a.data(), a.size()));
  Bytes got = read_exact(c, b.size());
  server.join();
  EXPECT_TRUE(got == b) << got.size() << " bytes";
  ::close(c);
  ::close(s);
}

// The receiving end sees exactly N bytes and then EOF, for either direction.
TEST(FaultProxy, DropAfterCutsAtExactlyN) {
  Upstream up;
  FaultProxy proxy(up.port());
  const Bytes data = random_bytes(300000, 5);
  struct Case {
    Direction d;
    uint64_t n;
  };
  const Case cases[] = {{Direction::ToTarget, 0},     {Direction::ToTarget, 1},     {Direction::ToTarget, 72},
                        {Direction::ToTarget, 1000},  {Direction::ToTarget, 262145}, {Direction::ToHost, 1},
                        {Direction::ToHost, 8},       {Direction::ToHost, 131072}, {Direction::ToHost, 299999}};
  int index = 0;
  for (const Case& k : cases) {
    SCOPED_TRACE(::testing::Message() << (k.d == Direction::ToTarget ? "to target" : "to host") << " N=" << k.n);
    proxy.drop_after(index, k.d, k.n);  // set before the connection exists
    int c = connect_to(proxy.port());
    ASSERT_GE(c, 0);
    int s = up.accept_one();
    ASSERT_GE(s, 0);
    int from = k.d == Direction::ToTarget ? c : s;
    int to = k.d == Direction::ToTarget ? s : c;
    std::thread sender([&] { send_all(from, data.data(), data.size()); });  // fails once cut: fine
    bool eof = false;
    Bytes got = read_to_end(to, &eof);
    sender.join();
    EXPECT_TRUE(eof) << "the cut must end in EOF, not a timeout";
    ASSERT_EQ(got.size(), k.n);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
    EXPECT_EQ(proxy.bytes(index, k.d), k.n);
    // Both sides are closed: the sending end sees EOF or a reset too.
    EXPECT_TRUE(read_to_end(from).empty());
    ::close(c);
    ::close(s);
    ++index;
  }
  EXPECT_TRUE(proxy.wait_until([](const FaultProxy& p) { return p.live() == 0; }, 5000));
  EXPECT_EQ(proxy.accepted(), size_t(index));
}

// A stalled direction forwards nothing; the sender's socket eventually stops taking data
// (the window is full); lifting the stall delivers everything, in order.
TEST(FaultProxy, StallStopsTheFlowUntilLifted) {
  Upstream up;
  FaultProxy proxy(up.port());
  proxy.stall(-1, Direction::ToTarget, true);
  int c = connect_to(proxy.port());
  ASSERT_GE(c, 0);
  int s = up.accept_one();
  ASSERT_GE(s, 0);
  // The other direction still flows.
  const Bytes ping = random_bytes(1000, 6);
  ASSERT_TRUE(send_all(s, ping.data(), ping.size()));
  EXPECT_TRUE(read_exact(c, ping.size()) == ping);

  const Bytes data = random_bytes(32 << 20, 7);
  size_t sent = 0;
  bool window_full = false;
  while (sent < data.size()) {
    ssize_t k = ::send(c, data.data() + sent, std::min<size_t>(65536, data.size() - sent), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Full for now: give the proxy a chance to (wrongly) drain it, then look again.
      pollfd p{c, POLLOUT, 0};
      if (::poll(&p, 1, 300) == 0) {
        window_full = true;
        break;
      }
      continue;
    }
    ASSERT_GT(k, 0) << strerror(errno);
    sent += size_t(k);
  }
  EXPECT_TRUE(window_full) << "32 MiB went through a stalled direction";
  EXPECT_FALSE(readable_within(s, 300)) << "bytes arrived through a stalled direction";
  EXPECT_EQ(proxy.bytes(0, Direction::ToTarget), 0u);

  proxy.stall(0, Direction::ToTarget, false);
  std::thread rest([&] { send_all(c, data.data() + sent, data.size() - sent); });
  Bytes got = read_exact(s, data.size());
  rest.join();
  EXPECT_TRUE(got == data) << got.size() << " of " << data.size() << " bytes";
  ::close(c);
  ::close(s);
}

TEST(FaultProxy, RefuseClosesNewConnectionsOnly) {
  Upstream up;
  FaultProxy proxy(up.port());
  int c0 = connect_to(proxy.port());
  ASSERT_GE(c0, 0);
  int s0 = up.accept_one();
  ASSERT_GE(s0, 0);
  proxy.refuse(true);
  int c1 = connect_to(proxy.port());
  ASSERT_GE(c1, 0);  // the TCP handshake completes; then the proxy closes it
  bool eof = false;
  EXPECT_TRUE(read_to_end(c1, &eof).empty());
  EXPECT_EQ(up.accept_one(300), -1) << "a refused connection reached the upstream";
  // The connection that existed before is untouched.
  const Bytes b = random_bytes(5000, 8);
  ASSERT_TRUE(send_all(c0, b.data(), b.size()));
  EXPECT_TRUE(read_exact(s0, b.size()) == b);
  proxy.refuse(false);
  int c2 = connect_to(proxy.port());
  ASSERT_GE(c2, 0);
  int s2 = up.accept_one();
  EXPECT_GE(s2, 0);
  EXPECT_EQ(proxy.accepted(), 3u);
  for (int fd : {c0, s0, c1, c2, s2}) ::close(fd);
}

TEST(FaultProxy, CutAllClosesEveryLiveConnection) {
  Upstream up;
  FaultProxy proxy(up.port());
  int c[3], s[3];
  for (int i = 0; i < 3; ++i) {
    c[i] = connect_to(proxy.port());
    ASSERT_GE(c[i], 0);
    s[i] = up.accept_one();
    ASSERT_GE(s[i], 0);
  }
  EXPECT_TRUE(proxy.wait_until([](const FaultProxy& p) { return p.live() == 3; }, 5000));
  proxy.cut_all();
  EXPECT_EQ(proxy.live(), 0u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(read_to_end(c[i]).empty());
    EXPECT_TRUE(read_to_end(s[i]).empty());
    ::close(c[i]);
    ::close(s[i]);
  }
  // The proxy keeps serving new connections, and a new upstream port applies to them.
  Upstream up2;
  proxy.set_upstream_port(up2.port());
  int c3 = connect_to(proxy.port());
  ASSERT_GE(c3, 0);
  int s3 = up2.accept_one();
  ASSERT_GE(s3, 0);
  const Bytes b = random_bytes(1234, 9);
  ASSERT_TRUE(send_all(c3, b.data(), b.size()));
  EXPECT_TRUE(read_exact(s3, b.size()) == b);
  EXPECT_EQ(up.accept_one(100), -1);
  ::close(c3);
  ::close(s3);
}

}  // namespace
}  // namespace nvtcp::test::fault_proxy_test

// SPDX-License-Identifier: Apache-2.0
// Listening sockets on 127.0.0.1 for tests that play a peer themselves (a lying target, a
// controller that refuses a command, an upstream for the proxy): one place that binds an
// ephemeral port and reads back the port the kernel gave.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace nvtcp::test {

// A socket listening on 127.0.0.1 (an ephemeral port, put in port), or -1 with port 0.
// reuse_addr: for a listener a test closes and opens again on the same port.
inline int listen_loopback(uint16_t& port, int backlog = 4, bool reuse_addr = false) {
  port = 0;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (reuse_addr) {
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, backlog) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return -1;
  }
  port = ntohs(a.sin_port);
  return fd;
}

// All n bytes to fd (no SIGPIPE); false once the peer is gone.
inline bool send_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t put = ::send(fd, p, n, MSG_NOSIGNAL);
    if (put <= 0) return false;
    p += put;
    n -= size_t(put);
  }
  return true;
}

// Exactly n bytes from fd, waiting as long as it takes; false when the peer closes first.
inline bool recv_all(int fd, void* data, size_t n) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got <= 0) return false;
    p += got;
    n -= size_t(got);
  }
  return true;
}

}  // namespace nvtcp::test

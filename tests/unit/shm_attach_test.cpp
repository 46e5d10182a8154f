// SPDX-License-Identifier: Apache-2.0
// Attaching an application to the engine over its UNIX socket: the region and eventfds
// arrive through SCM_RIGHTS, both sides see the same memory, the socket is the owner's only,
// bad requests are refused with a reason, and the engine learns who attached.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>

#include "shm/attach.hpp"

namespace nvtcp::shm::shm_attach_test {
namespace {

std::string socket_path() { return "/tmp/nvtcp-engine-test-" + std::to_string(getpid()) + ".sock"; }

// An application's request for queue_pairs queues of queue_entries each on the test subsystem.
AttachRequest request_for(uint32_t queue_pairs, uint32_t queue_entries) {
  AttachRequest req;
  std::strcpy(req.subnqn, "nqn.2026-11.io.nvtcp:test");
  req.queue_pairs = queue_pairs;
  req.queue_entries = queue_entries;
  return req;
}

// Runs the server's accept_one on a thread while the application attaches on this one.
struct Exchange {
  bool server_ok = false, client_ok = false;
  std::string server_err, client_err;
  Attachment server_side, client_side;
};

Exchange exchange(AttachServer& server, const std::string& path, const AttachRequest& req) {
  Exchange x;
  std::thread t([&] { x.server_ok = server.accept_one(x.server_side, x.server_err); });
  x.client_ok = attach(path, req, x.client_side, x.client_err);
  t.join();
  return x;
}

TEST(ShmAttach, TheApplicationGetsItsRegionAndEventfds) {
  AttachServer server;
  std::string err;
  const std::string path = socket_path();
  ASSERT_TRUE(server.listen(path, err)) << err;
  struct stat st{};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "only the engine's user may connect";

  AttachRequest req = request_for(3, 128);
  req.vectors = 2;
  req.data_bytes = 1 << 20;
  Exchange x = exchange(server, path, req);
  ASSERT_TRUE(x.server_ok) << x.server_err;
  ASSERT_TRUE(x.client_ok) << x.client_err;
  EXPECT_EQ(x.server_side.peer_pid(), getpid());
  EXPECT_EQ(x.server_side.peer_uid(), geteuid());
  EXPECT_EQ(x.client_side.layout().total_bytes, x.server_side.layout().total_bytes);
  ASSERT_EQ(x.client_side.vector_fds().size(), 2u);

  // One memory, two mappings.
  std::memcpy(x.client_side.data() + 4096, "from the application", 21);
  EXPECT_EQ(std::memcmp(x.server_side.data() + 4096, "from the application", 21), 0);
  x.server_side.queue_pair(2).words->sq_event_idx = 77;
  EXPECT_EQ(x.client_side.queue_pair(2).words->sq_event_idx, 77u);

  // The doorbell's analog one way, an interrupt vector the other.
  char got = 0;
  signal_fd(x.client_side.kick_fd());
  ASSERT_EQ(read(x.server_side.kick_fd(), &got, 1), 1);
  signal_fd(x.server_side.vector_fds()[1]);
  ASSERT_EQ(read(x.client_side.vector_fds()[1], &got, 1), 1);
  EXPECT_EQ(read(x.client_side.vector_fds()[0], &got, 1), -1) << "vector 0 was not signalled";
  // Each side holds only its own ends: the application cannot read its own doorbell
  // notices back, nor write into its interrupt vectors.
  EXPECT_EQ(read(x.client_side.kick_fd(), &got, 1), -1);
  EXPECT_EQ(write(x.client_side.vector_fds()[0], &got, 1), -1);
  // The region is sealed at its size: the application cannot shrink it under the engine.
  struct stat rs{};
  ASSERT_EQ(fstat(x.client_side.memfd_for_test(), &rs), 0);
  EXPECT_NE(ftruncate(x.client_side.memfd_for_test(), 0), 0) << "a shrunk region would SIGBUS the engine";
  EXPECT_EQ(errno, EPERM);

  // The lifeline: the engine sees the application go.
  x.client_side = Attachment();
  char b;
  EXPECT_EQ(recv(x.server_side.socket(), &b, 1, 0), 0);
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

// An application's notice thread sleeps on an eventfd; a pipe's one-byte signal does not
// wake it (the write fails), so every detach waited out the thread's 1-s poll.
TEST(ShmAttach, AnEventfdIsSignalledWithItsEightBytes) {
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(fd, 0);
  signal_fd(fd);
  EXPECT_FALSE(readable(fd)) << "a one-byte write signals an eventfd";
  signal_eventfd(fd);
  EXPECT_TRUE(readable(fd));
  drain_fd(fd);
  EXPECT_FALSE(readable(fd));
  ::close(fd);
}

TEST(ShmAttach, RequestsOutOfRangeAreRefusedWithAReason) {
  AttachServer server;
  std::string err;
  const std::string path = socket_path();
  ASSERT_TRUE(server.listen(path, err)) << err;
  for (auto [pairs, entries, vectors] : {std::tuple{0u, 64u, 1u}, std::tuple{2u, 1u, 1u}, std::tuple{2u, 64u, 0u},
                                         std::tuple{2u, 64u, kMaxVectors + 1}, std::tuple{kMaxQueuePairs + 1, 64u, 1u}}) {
    AttachRequest req = request_for(pairs, entries);
    req.vectors = vectors;
    Exchange x = exchange(server, path, req);
    EXPECT_FALSE(x.server_ok) << pairs << " pairs, " << entries << " entries, " << vectors << " vectors";
    EXPECT_FALSE(x.client_ok);
    EXPECT_NE(x.client_err.find("refused"), std::string::npos) << x.client_err;
    EXPECT_NE(x.server_err.find("out of range"), std::string::npos) << x.server_err;
  }
  AttachRequest wrong;
  std::strcpy(wrong.subnqn, "nqn.2026-11.io.nvtcp:test");
  wrong.magic = 0x12345678;
  wrong.queue_pairs = 2;
  wrong.queue_entries = 64;
  Exchange x = exchange(server, path, wrong);
  EXPECT_FALSE(x.server_ok);
  EXPECT_NE(x.server_err.find("not an attach request"), std::string::npos) << x.server_err;
}

// Another user is refused by the engine itself, even where the socket's mode would let it
// connect (as root: the test opens the socket up and attaches from a child run as nobody).
TEST(ShmAttach, AnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a child as another user";
  AttachServer server;
  std::string err;
  const std::string path = socket_path();
  ASSERT_TRUE(server.listen(path, err)) << err;
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  // Forked before any other thread exists (the child allocates); its connection waits in
  // the listen backlog until the server thread takes it.
  pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    const AttachRequest req = request_for(1, 32);
    Attachment at;
    std::string e;
    const bool ok = attach(path, req, at, e);
    if (!ok && e.find("Permission denied") == std::string::npos) std::fprintf(stderr, "child: %s\n", e.c_str());
    _exit(ok ? 0 : (e.find("Permission denied") != std::string::npos ? 1 : 3));
  }
  bool server_ok = true;
  std::string server_err;
  std::thread t([&] {
    Attachment at;
    server_ok = server.accept_one(at, server_err);
  });
  int status = 0;
  waitpid(child, &status, 0);
  t.join();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << "the child's attach: " << status;
  EXPECT_FALSE(server_ok);
  EXPECT_NE(server_err.find("not the engine's user"), std::string::npos) << server_err;
}

TEST(ShmAttach, NoEngineNoAttach) {
  const AttachRequest req = request_for(1, 32);
  Attachment at;
  std::string err;
  EXPECT_FALSE(attach("/tmp/nvtcp-no-such-engine.sock", req, at, err));
  EXPECT_NE(err.find("cannot reach the engine"), std::string::npos) << err;
}

}  // namespace
}  // namespace nvtcp::shm::shm_attach_test

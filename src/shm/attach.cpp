// SPDX-License-Identifier: Apache-2.0
#include "shm/attach.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace nvtcp::shm {

namespace {
bool fill_addr(const std::string& path, sockaddr_un& a, std::string& err) {
  if (path.empty() || path.size() >= sizeof(a.sun_path)) {
    err = fmt::format("socket path '{}' is empty or too long", path);
    return false;
  }
  std::memset(&a, 0, sizeof(a));
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  return true;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}
}  // namespace

Attachment::~Attachment() { reset(); }

Attachment::Attachment(Attachment&& o) noexcept { *this = std::move(o); }

Attachment& Attachment::operator=(Attachment&& o) noexcept {
  if (this == &o) return *this;
  reset();
  layout_ = o.layout_;
  region_ = o.region_;
  owns_region_ = o.owns_region_;
  memfd_ = o.memfd_;
  sock_ = o.sock_;
  kick_ = o.kick_;
  vectors_ = std::move(o.vectors_);
  peer_pid_ = o.peer_pid_;
  peer_uid_ = o.peer_uid_;
  subnqn_ = std::move(o.subnqn_);
  o.region_ = nullptr;
  o.memfd_ = o.sock_ = o.kick_ = -1;
  o.vectors_.clear();
  return *this;
}

void Attachment::reset() {
  if (region_ && owns_region_) munmap(region_, layout_.total_bytes);
  region_ = nullptr;
  owns_region_ = true;
  close_fd(memfd_);
  close_fd(sock_);
  close_fd(kick_);
  for (int& v : vectors_) close_fd(v);
  vectors_.clear();
}

AttachServer::~AttachServer() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
}

bool AttachServer::listen(const std::string& path, std::string& err) {
  sockaddr_un a;
  if (!fill_addr(path, a, err)) return false;
  fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    err = fmt::format("socket: {}", strerror(errno));
    return false;
  }
  ::unlink(path.c_str());  // a stale socket of an engine that is gone
  // Created with no permissions for anyone else from the start (no window between bind
  // and chmod), then only the owner may connect.
  const mode_t old = ::umask(0177);
  const int rc = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::umask(old);
  if (rc != 0 || ::listen(fd_, 64) != 0) {
    err = fmt::format("cannot listen on '{}': {}", path, strerror(errno));
    close_fd(fd_);
    return false;
  }
  path_ = path;
  return true;
}

PendingAttach::~PendingAttach() {
  if (fd >= 0) ::close(fd);
}

bool AttachServer::accept_connection(PendingAttach& out, std::string& err) {
  const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    err = fmt::format("accept: {}", strerror(e));
    errno = e;  // the caller tells a lack of descriptors (back off) from the rest
    return false;
  }
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    err = fmt::format("SO_PEERCRED: {}", strerror(errno));
    ::close(fd);
    return false;
  }
  if (out.fd >= 0) ::close(out.fd);
  out.fd = fd;
  out.pid = cred.pid;
  out.uid = cred.uid;
  return true;
}

bool AttachServer::accept_one(Attachment& out, std::string& err, const Check& check) {
  PendingAttach p;
  if (!accept_connection(p, err)) return false;
  pollfd pfd{p.fd, POLLIN, 0};
  (void)::poll(&pfd, 1, 5000);  // a peer that sends nothing gets a few seconds
  const Answer a = answer(p, out, err, check);
  if (a == Answer::NotYet) err = fmt::format("pid {}: no attach request within 5 s", p.pid);
  return a == Answer::Attached;
}

AttachServer::Answer AttachServer::answer(PendingAttach& conn, Attachment& out, std::string& err, const Check& check) {
  // The request is read before anything is decided: closing a UNIX socket with a message
  // unread resets the peer, which would then lose the refusal too.
  AttachRequest req;
  const ssize_t n = ::recv(conn.fd, &req, sizeof(req), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return Answer::NotYet;
  Attachment at;
  at.sock_ = conn.fd;
  conn.fd = -1;
  ucred cred{};
  cred.pid = conn.pid;
  cred.uid = conn.uid;
  at.peer_pid_ = cred.pid;
  at.peer_uid_ = cred.uid;
  AttachReply reply;
  // The refusal, then why in words (a second message, NUL-terminated, at most
  // kMaxRefusalReason bytes): the application can show the reason the engine logs, and an
  // application that reads only the reply still gets its errno.
  auto refuse = [&](int e, std::string why) {
    reply.error = e;
    (void)::send(at.sock_, &reply, sizeof(reply), MSG_NOSIGNAL | MSG_DONTWAIT);
    const std::string text = why.substr(0, kMaxRefusalReason - 1);
    (void)::send(at.sock_, text.c_str(), text.size() + 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    err = std::move(why);
    return Answer::Refused;
  };
  if (cred.uid != geteuid() && cred.uid != 0)
    return refuse(EACCES, fmt::format("pid {} (uid {}) may not attach: not the engine's user", cred.pid, cred.uid));
  if (n != ssize_t(sizeof(req)) || req.magic != kAttachMagic || req.version != kRegionVersion)
    return refuse(EPROTO, fmt::format("pid {}: not an attach request ({} bytes)", cred.pid, n));
  if (std::memchr(req.subnqn, 0, sizeof(req.subnqn)) == nullptr || req.subnqn[0] == 0)
    return refuse(EINVAL, fmt::format("pid {}: the attach request names no subsystem NQN", cred.pid));
  at.subnqn_ = req.subnqn;
  if (check) {
    std::string why;
    if (const int e = check(req, why)) return refuse(e, fmt::format("pid {}: {}", cred.pid, why));
  }
  auto layout = RegionLayout::compute(req.queue_pairs, req.queue_entries, req.data_bytes);
  if (!layout || req.vectors < 1 || req.vectors > kMaxVectors)
    return refuse(EINVAL, fmt::format("pid {}: {} queue pairs of {} entries, {} vectors, {} data bytes: out of range",
                                      cred.pid, req.queue_pairs, req.queue_entries, req.vectors, req.data_bytes));
  at.layout_ = *layout;
  // Sealed at its size: the application gets the memfd itself, and a region it could shrink
  // would turn the engine's next access into SIGBUS.
  at.memfd_ = memfd_create("nvtcp-engine", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (at.memfd_ < 0 || ftruncate(at.memfd_, off_t(layout->total_bytes)) != 0 ||
      fcntl(at.memfd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return refuse(ENOMEM, fmt::format("pid {}: no shared memory of {} bytes: {}", cred.pid, layout->total_bytes,
                                      strerror(errno)));
  void* p = mmap(nullptr, layout->total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, at.memfd_, 0);
  if (p == MAP_FAILED) return refuse(ENOMEM, fmt::format("pid {}: mmap: {}", cred.pid, strerror(errno)));
  at.region_ = static_cast<uint8_t*>(p);
  layout->write_header(at.region_);
  // Signals are pipes, each end with one side only: the application's ends are sent and
  // closed here, so the application cannot change the flags of the engine's ends (a
  // blocking read or write would stall an engine thread).
  std::vector<int> fds{at.memfd_};
  auto close_sent = [&fds] {
    for (size_t i = 1; i < fds.size(); ++i) ::close(fds[i]);
  };
  int pipefd[2];
  if (pipe2(pipefd, O_NONBLOCK | O_CLOEXEC) != 0)
    return refuse(EMFILE, fmt::format("pid {}: pipe: {}", cred.pid, strerror(errno)));
  at.kick_ = pipefd[0];      // the engine reads the doorbell notices
  fds.push_back(pipefd[1]);  // the application writes them
  const uint32_t vectors = std::min(req.vectors, max_vectors_);
  for (uint32_t i = 0; i < vectors; ++i) {
    if (pipe2(pipefd, O_NONBLOCK | O_CLOEXEC) != 0) {
      close_sent();
      return refuse(EMFILE, fmt::format("pid {}: pipe: {}", cred.pid, strerror(errno)));
    }
    at.vectors_.push_back(pipefd[1]);  // the engine interrupts through it
    fds.push_back(pipefd[0]);          // the application waits on it
  }
  reply.vectors = vectors;
  reply.total_bytes = layout->total_bytes;
  iovec iov{&reply, sizeof(reply)};
  std::vector<uint8_t> control(CMSG_SPACE(sizeof(int) * fds.size()));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  const bool sent = ::sendmsg(at.sock_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) == ssize_t(sizeof(reply));
  const int send_errno = errno;
  close_sent();
  if (!sent) {
    err = fmt::format("pid {}: sending the attachment: {}", cred.pid, strerror(send_errno));
    return Answer::Refused;
  }
  // Mapped, sealed and sent: the engine needs the memfd no more (a descriptor less per
  // application held here).
  close_fd(at.memfd_);
  out = std::move(at);
  return Answer::Attached;
}

bool attach(const std::string& path, const AttachRequest& req, Attachment& out, std::string& err) {
  sockaddr_un a;
  if (!fill_addr(path, a, err)) return false;
  Attachment at;
  at.sock_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (at.sock_ < 0 || ::connect(at.sock_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    err = fmt::format("cannot reach the engine at '{}': {}", path, strerror(errno));
    return false;
  }
  // An engine that refuses this peer answers and closes without reading: the request may
  // then fail to go out, but the refusal is still there to read.
  const bool sent = ::send(at.sock_, &req, sizeof(req), MSG_NOSIGNAL) == ssize_t(sizeof(req));
  const int send_errno = errno;
  AttachReply reply;
  iovec iov{&reply, sizeof(reply)};
  std::vector<uint8_t> control(CMSG_SPACE(sizeof(int) * (2 + kMaxVectors)));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  const ssize_t n = ::recvmsg(at.sock_, &msg, MSG_CMSG_CLOEXEC);
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const auto* p = reinterpret_cast<const int*>(CMSG_DATA(c));
    fds.insert(fds.end(), p, p + k);
  }
  auto fail = [&](std::string why) {
    for (int fd : fds) ::close(fd);
    err = std::move(why);
    return false;
  };
  if (n != ssize_t(sizeof(reply)))
    return fail(sent ? fmt::format("no answer from the engine ({} bytes)", n)
                     : fmt::format("sending the attach request: {}", strerror(send_errno)));
  if (reply.error) {
    // The engine says why in a second message (an older engine closes instead).
    char why[kMaxRefusalReason] = {};
    pollfd pfd{at.sock_, POLLIN, 0};
    ssize_t k = 0;
    if (::poll(&pfd, 1, 1000) == 1) k = ::recv(at.sock_, why, sizeof(why) - 1, MSG_DONTWAIT);
    if (k > 0 && why[0]) return fail(fmt::format("the engine refused the attach: {} ({})", why, strerror(reply.error)));
    return fail(fmt::format("the engine refused the attach: {}", strerror(reply.error)));
  }
  if (msg.msg_flags & MSG_CTRUNC) return fail("the engine's descriptors were cut short");
  auto layout = RegionLayout::compute(req.queue_pairs, req.queue_entries, req.data_bytes);
  if (!layout || fds.size() != 2 + size_t(reply.vectors) || reply.vectors < 1 || reply.vectors > req.vectors ||
      reply.total_bytes != layout->total_bytes)
    return fail(fmt::format("the engine's answer does not match the request ({} descriptors)", fds.size()));
  // Whoever answers on the socket path is not trusted blindly either: the region must be a
  // memfd sealed against shrinking at least as large as the layout (a smaller or shrinkable
  // one would turn this process's next access into SIGBUS), and the signals pipes.
  struct stat st{};
  const int seals = fcntl(fds[0], F_GET_SEALS);
  if (fstat(fds[0], &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) < layout->total_bytes || seals < 0 ||
      !(seals & F_SEAL_SHRINK))
    return fail("the engine's region is not a sealed memfd of the size asked for");
  for (size_t i = 1; i < fds.size(); ++i)
    if (fstat(fds[i], &st) != 0 || !S_ISFIFO(st.st_mode)) return fail("the engine's signal descriptors are not pipes");
  at.memfd_ = fds[0];
  at.kick_ = fds[1];
  at.vectors_.assign(fds.begin() + 2, fds.end());
  at.layout_ = *layout;
  void* p = mmap(nullptr, layout->total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, at.memfd_, 0);
  if (p == MAP_FAILED) {
    err = fmt::format("mapping the engine's region: {}", strerror(errno));
    return false;
  }
  at.region_ = static_cast<uint8_t*>(p);
  if (!layout->matches(at.region_)) {
    err = "the engine's region header does not match the request";
    return false;
  }
  out = std::move(at);
  return true;
}

}  // namespace nvtcp::shm

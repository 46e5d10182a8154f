// SPDX-License-Identifier: Apache-2.0
#include "control/rpc_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <list>

#include "util/log.hpp"

namespace nvtcp::control {

struct RpcServer::Client {
  int fd = -1;
  JsonTextSplitter splitter;
  std::string out;        // answers not yet taken by the socket
  bool closing = false;   // close once out is sent (after a Parse Error)
  explicit Client(int f, size_t max_text) : fd(f), splitter(max_text) {}
};

namespace {

bool fill_address(const std::string& path, sockaddr_un& sa, std::string& err) {
  sa = {};
  sa.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(sa.sun_path)) {
    err = fmt::format("RPC socket path \"{}\" is empty or longer than {} bytes", path, sizeof(sa.sun_path) - 1);
    return false;
  }
  std::memcpy(sa.sun_path, path.data(), path.size());
  return true;
}

// Whether a process still accepts connections on the socket at path.
bool someone_serves(const sockaddr_un& sa) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool live = ::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) == 0;
  ::close(fd);
  return live;
}

}  // namespace

RpcServer::RpcServer(Dispatcher& methods, RpcServerOptions opts) : methods_(methods), opts_(opts) {}

RpcServer::~RpcServer() { stop(); }

std::string RpcServer::start(const std::string& path) {
  sockaddr_un sa;
  std::string err;
  if (!fill_address(path, sa, err)) return err;
  auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    std::string dir = path.substr(0, slash);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      return fmt::format("cannot make the RPC socket's directory {}: {}", dir, std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return fmt::format("{} exists and is not a socket: not replacing it", path);
    if (someone_serves(sa)) return fmt::format("another process serves RPC on {}", path);
    ::unlink(path.c_str());  // left by a process that is gone
  }
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return fmt::format("RPC socket: {}", std::strerror(errno));
  auto fail = [&](const char* what) {
    std::string e = fmt::format("RPC socket {}: {}: {}", path, what, std::strerror(errno));
    ::close(listen_fd_);
    listen_fd_ = -1;
    return e;
  };
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return fail("bind");
  // Owner-only before anyone can connect (a socket accepts connections only once it listens).
  if (::chmod(path.c_str(), 0600) != 0 || ::lstat(path.c_str(), &st) != 0) {
    std::string e = fail("chmod");
    ::unlink(path.c_str());
    return e;
  }
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  if (::listen(listen_fd_, 16) != 0) {
    std::string e = fail("listen");
    ::unlink(path.c_str());
    return e;
  }
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  path_ = path;
  thread_ = std::thread([this] { loop(); });
  return {};
}

void RpcServer::stop() {
  if (!thread_.joinable()) return;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
  // Only our own socket: another target may have taken the path since (after a stale check).
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) ::unlink(path_.c_str());
}

bool RpcServer::flush(Client& c) {
  while (!c.out.empty()) {
    ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return false;  // the client went away
    }
    c.out.erase(0, size_t(n));
  }
  if (c.out.size() > opts_.max_unsent_bytes) {
    log::warn("RPC: a client left {} bytes of answers unread: closing it", c.out.size());
    return false;
  }
  return !(c.closing && c.out.empty());
}

bool RpcServer::on_readable(Client& c) {
  char buf[65536];
  ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  if (n == 0) {
    if (c.splitter.pending()) log::info("RPC: a client left in the middle of a request ({} bytes)", c.splitter.pending());
    return false;
  }
  if (c.closing) return true;  // nothing more is read from a stream that went wrong
  c.splitter.feed(buf, size_t(n));
  std::string text, why;
  for (;;) {
    auto next = c.splitter.next(text, why);
    if (next == JsonTextSplitter::Next::NeedMore) break;
    if (next == JsonTextSplitter::Next::Error) {
      log::warn("RPC: {}: answering Parse Error and closing the connection", why);
      c.out += Dispatcher::parse_error(why);
      c.out += '\n';
      c.closing = true;
      break;
    }
    std::string answer = methods_.handle(text);
    requests_.fetch_add(1, std::memory_order_relaxed);
    if (!answer.empty()) {
      c.out += answer;
      c.out += '\n';
    }
  }
  return flush(c);
}

void RpcServer::loop() {
  std::list<Client> clients;
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& c : clients) fds.push_back({c.fd, short(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      log::error("RPC: poll: {}: the RPC server stops", std::strerror(errno));
      break;
    }
    if (fds[0].revents) break;
    size_t i = 2;
    for (auto it = clients.begin(); it != clients.end(); ++i) {
      const short ev = fds[i].revents;
      bool keep = true;
      if (ev & (POLLIN | POLLHUP | POLLERR)) keep = on_readable(*it);
      if (keep && (ev & POLLOUT)) keep = flush(*it);
      if (keep) {
        ++it;
      } else {
        ::close(it->fd);
        it = clients.erase(it);
      }
    }
    if (fds[1].revents & POLLIN) {
      for (;;) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        if (clients.size() >= opts_.max_clients) {
          refused_.fetch_add(1, std::memory_order_relaxed);
          log::warn("RPC: {} clients already connected: closing another", clients.size());
          ::close(fd);
          continue;
        }
        clients.emplace_back(fd, opts_.max_request_bytes);
      }
    }
  }
  for (auto& c : clients) ::close(c.fd);
}

}  // namespace nvtcp::control

// SPDX-License-Identifier: Apache-2.0
#include "control/rpc_server.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#include "util/log.hpp"

namespace nvtcp::control {

// One client: JSON texts split out of its bytes, each answered in turn. While a slow request
// of it is carried out it waits (the server reads nothing more from it), and the texts it has
// split or buffered behind are answered after that one.
class RpcServer::Session final : public PollServer::Session {
 public:
  Session(RpcServer& server, PollServer::ClientId id, size_t max_text)
      : server_(server), id_(id), splitter_(max_text) {}
  bool on_bytes(const char* data, size_t len, std::string& out) override {
    splitter_.feed(data, len);
    return answer_texts(out);
  }
  // The slow request it waited on is answered (answer: empty for notifications only).
  bool on_slow_answer(const std::string& answer, std::string& out) {
    waiting_ = false;
    append(answer, out);
    return answer_texts(out);
  }
  void on_gone() override {
    if (waiting_)
      log::info("RPC: a client left while its slow request was carried out");
    else if (splitter_.pending())
      log::info("RPC: a client left in the middle of a request ({} bytes)", splitter_.pending());
  }
  bool partial() const override { return splitter_.pending() != 0; }
  bool waiting() const override { return waiting_; }
  void on_request_timeout(std::string& out) override {
    out += Dispatcher::parse_error("the request was not whole in time");
    out += '\n';
  }

 private:
  static void append(const std::string& answer, std::string& out) {
    if (answer.empty()) return;
    out += answer;
    out += '\n';
  }
  bool answer_texts(std::string& out) {
    std::string text, why;
    while (!waiting_) {
      auto next = splitter_.next(text, why);
      if (next == JsonTextSplitter::Next::NeedMore) return true;
      if (next == JsonTextSplitter::Next::Error) {
        log::warn("RPC: {}: answering Parse Error and closing the connection", why);
        out += Dispatcher::parse_error(why);
        out += '\n';
        return false;  // nothing more is read from a stream that went wrong
      }
      Answering a = server_.methods_.start(text);
      server_.requests_.fetch_add(1, std::memory_order_relaxed);
      if (!a.done() && server_.run_slow(id_, a)) {
        waiting_ = true;
        return true;
      }
      append(a.take_answer(), out);
    }
    return true;
  }

  RpcServer& server_;
  const PollServer::ClientId id_;
  JsonTextSplitter splitter_;
  bool waiting_ = false;
};

bool RpcServer::run_slow(PollServer::ClientId client, Answering& a) {
  std::unique_lock lk(slow_mu_);
  if (slow_refused_) {
    lk.unlock();
    const SlowCommit refuse = []() -> Json { throw RpcError(kBusy, "the RPC server is stopping"); };
    while (!a.done()) methods_.resume(a, refuse);
    return false;
  }
  ++slow_in_flight_;
  if (!workers_) workers_ = std::make_unique<WorkerPool>(std::max(1u, opts_.slow_workers), "nvtcp-rpc-slow");
  auto job = std::make_shared<Answering>(std::move(a));
  workers_->submit([this, client, job] {
    bool refused = false;
    {
      std::lock_guard g(slow_mu_);
      refused = slow_refused_;
    }
    // One that had not begun when stop() did is not begun: stop() waits for the others only.
    SlowCommit commit =
        refused ? SlowCommit([]() -> Json { throw RpcError(kBusy, "the RPC server stopped before this request ran"); })
                : job->run_blocking();
    server_.post(client, [this, client, job, commit = std::move(commit)](PollServer::Session* s, std::string& out) {
      return slow_part_done(client, job, commit, s, out);
    });
  });
  return true;
}

bool RpcServer::slow_part_done(PollServer::ClientId client, const std::shared_ptr<Answering>& job,
                               const SlowCommit& commit, PollServer::Session* session, std::string& out) {
  const std::string method = job->method();
  methods_.resume(*job, commit);  // carried out whether or not its client is still there
  // A batch's next slow method goes to a worker before this one counts as done, so that stop()
  // never sees none in flight while one is.
  const bool more = !job->done() && run_slow(client, *job);
  {
    std::lock_guard g(slow_mu_);
    --slow_in_flight_;
  }
  slow_done_.notify_all();
  if (more) return true;
  if (!session) {
    slow_dropped_.fetch_add(1, std::memory_order_relaxed);
    log::info("RPC: {} was carried out for a client that has left: its answer is dropped", method);
    return true;
  }
  return static_cast<Session*>(session)->on_slow_answer(job->take_answer(), out);
}

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

RpcServer::RpcServer(Dispatcher& methods, RpcServerOptions opts)
    : methods_(methods),
      opts_(opts),
      server_({.name = "RPC",
               .max_clients = opts.max_clients,
               .max_unsent_bytes = opts.max_unsent_bytes,
               .request_timeout_ms = opts.request_timeout_ms,
               .evict_unfinished = opts.evict_unfinished,
               .clock = opts.clock},
              [this](PollServer::ClientId id) {
                return std::make_unique<Session>(*this, id, opts_.max_request_bytes);
              }) {}

RpcServer::~RpcServer() { stop(); }

std::string RpcServer::start(const std::string& path) {
  sockaddr_un sa;
  std::string err;
  if (!fill_address(path, sa, err)) return err;
  auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return fmt::format("cannot make the RPC socket's directory {}: {}", dir, std::strerror(errno));
  // Whoever may rename entries in the directory may swap the socket for something of theirs
  // between its bind and its chmod, or after: the directory is this user's or root's, and
  // nobody else may write in it unless the sticky bit keeps them to their own entries (/tmp).
  struct stat dst {};
  if (::stat(dir.c_str(), &dst) != 0 || !S_ISDIR(dst.st_mode))
    return fmt::format("the RPC socket's directory {} is not a directory", dir);
  if (dst.st_uid != ::geteuid() && dst.st_uid != 0)
    return fmt::format(
        "the RPC socket's directory {} belongs to uid {}, neither this user nor root: another "
        "user could replace the socket",
        dir, dst.st_uid);
  if ((dst.st_mode & (S_IWGRP | S_IWOTH)) && !(dst.st_mode & S_ISVTX))
    return fmt::format(
        "the RPC socket's directory {} is writable by others and not sticky (mode {:04o}): another "
        "user could replace the socket",
        dir, unsigned(dst.st_mode & 07777));
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
  // Owner-only from the moment it exists, and again by name without following a link (a socket
  // accepts connections only once it listens).
  const mode_t old_mask = ::umask(0177);
  const int bound = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  ::umask(old_mask);
  if (bound != 0) return fail("bind");
  if (::fchmodat(AT_FDCWD, path.c_str(), 0600, AT_SYMLINK_NOFOLLOW) != 0 || ::lstat(path.c_str(), &st) != 0 ||
      !S_ISSOCK(st.st_mode)) {
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
  if (std::string e = server_.start(listen_fd_); !e.empty()) {
    ::close(listen_fd_);
    listen_fd_ = -1;
    ::unlink(path.c_str());
    return e;
  }
  path_ = path;
  return {};
}

void RpcServer::stop() {
  if (!server_.running()) return;
  {
    std::unique_lock lk(slow_mu_);
    slow_refused_ = true;
    if (slow_in_flight_)
      log::info("RPC: stopping: waiting for {} slow request(s) in flight (waiting on a Ceph cluster or a "
                "file, or for the commands on a namespace taken away, up to 60 s) to be carried out and answered",
                slow_in_flight_);
    // Their commits run on the server's thread; one that ended on an error commits none, and
    // stop() runs what is left of them below.
    while (slow_in_flight_ && server_.serving()) slow_done_.wait_for(lk, std::chrono::milliseconds(100));
  }
  workers_.reset();  // joins the workers, done by now unless the loop ended on its own
  server_.stop();
  ::close(listen_fd_);
  listen_fd_ = -1;
  // Only our own socket: another target may have taken the path since (after a stale check).
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) ::unlink(path_.c_str());
  std::lock_guard lk(slow_mu_);
  slow_refused_ = false;  // a server started again takes slow requests again
}

}  // namespace nvtcp::control

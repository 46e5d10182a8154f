// SPDX-License-Identifier: Apache-2.0
#include "fault_proxy.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace nvtcp::test {

namespace {
constexpr size_t kChunk = 64 * 1024;            // largest single read (under malloc's mmap threshold)
constexpr size_t kMaxBuffered = 2 * 1024 * 1024;  // per direction: stop reading above this
constexpr int kSplitWritesPerTurn = 16 * 1024;  // one-byte writes before the loop looks around

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::runtime_error sys_error(const char* what) { return std::runtime_error(std::string(what) + ": " + strerror(errno)); }

// Reads whatever is already waiting, so that close() sends FIN rather than RST (which could
// overtake bytes still queued for the peer).
void drain_and_close(int fd) {
  if (fd < 0) return;
  char sink[16384];
  for (int i = 0; i < 64; ++i) {
    ssize_t n = ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
    if (n <= 0) break;
  }
  ::close(fd);
}
}  // namespace

FaultProxy::FaultProxy(uint16_t upstream_port) : upstream_port_(upstream_port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw sys_error("fault proxy: socket");
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) < 0 || ::listen(listen_fd_, 4096) < 0) {
    auto e = sys_error("fault proxy: bind/listen");
    ::close(listen_fd_);
    throw e;
  }
  socklen_t len = sizeof(a);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    auto e = sys_error("fault proxy: eventfd");
    ::close(listen_fd_);
    throw e;
  }
  thread_ = std::thread([this] { run(); });
}

FaultProxy::~FaultProxy() {
  stop_.store(true);
  wake();
  if (thread_.joinable()) thread_.join();
  for (auto& c : conns_) close_conn(*c);
  conns_.clear();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void FaultProxy::wake() {
  uint64_t one = 1;
  ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  (void)n;
}

void FaultProxy::set_upstream_port(uint16_t p) {
  std::lock_guard lk(mu_);
  upstream_port_ = p;
}

template <class Fn>
void FaultProxy::set_fault(int conn, Fn fn) {
  {
    std::lock_guard lk(mu_);
    if (conn < 0) {
      fn(defaults_);
      for (auto& [idx, f] : future_) fn(f);
      for (auto& c : conns_) fn(c->faults);
    } else {
      bool found = false;
      for (auto& c : conns_) {
        if (c->index == conn) {
          fn(c->faults);
          found = true;
        }
      }
      if (!found && size_t(conn) >= accepted_) {
        auto it = future_.find(conn);
        if (it == future_.end()) it = future_.emplace(conn, defaults_).first;
        fn(it->second);
      }
    }
  }
  wake();
}

void FaultProxy::drop_after(int conn, Direction d, uint64_t bytes) {
  set_fault(conn, [d, bytes](Faults& f) { f.drop_after[int(d)] = bytes; });
}

void FaultProxy::split_every_byte(int conn, bool on) {
  set_fault(conn, [on](Faults& f) { f.split = on; });
}

void FaultProxy::delay(int conn, Direction d, uint32_t us) {
  set_fault(conn, [d, us](Faults& f) { f.delay_us[int(d)] = us; });
}

void FaultProxy::stall(int conn, Direction d, bool on) {
  set_fault(conn, [d, on](Faults& f) { f.stall[int(d)] = on; });
}

void FaultProxy::cut_all() {
  std::unique_lock lk(mu_);
  uint64_t want = ++cut_requested_;
  wake();
  cv_.wait_for(lk, std::chrono::seconds(10), [&] { return cut_done_ >= want || stop_.load(); });
}

void FaultProxy::refuse(bool on) {
  std::lock_guard lk(mu_);
  refuse_ = on;
}

size_t FaultProxy::accepted() const {
  std::lock_guard lk(mu_);
  return accepted_;
}

size_t FaultProxy::live() const {
  std::lock_guard lk(mu_);
  return live_;
}

uint64_t FaultProxy::bytes(int conn, Direction d) const {
  std::lock_guard lk(mu_);
  size_t i = size_t(conn) * 2 + size_t(d);
  if (conn < 0 || i >= stats_.size()) return 0;
  return stats_[i].load();
}

void FaultProxy::close_conn(Conn& c) {
  drain_and_close(c.host_fd);
  drain_and_close(c.target_fd);
  c.host_fd = c.target_fd = -1;
}

void FaultProxy::accept_new() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a transient error: poll tells us when to retry
    int index = int(accepted_++);
    stats_.emplace_back(0);
    stats_.emplace_back(0);
    if (refuse_) {
      ::close(fd);
      continue;
    }
    set_nodelay(fd);
    auto c = std::make_unique<Conn>();
    c->index = index;
    c->host_fd = fd;
    c->forwarded = &stats_[size_t(index) * 2];
    auto it = future_.find(index);
    if (it != future_.end()) {
      c->faults = it->second;
      future_.erase(it);
    } else {
      c->faults = defaults_;
    }
    c->target_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->target_fd < 0) {
      close_conn(*c);
      continue;
    }
    set_nodelay(c->target_fd);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(upstream_port_);
    int rc = ::connect(c->target_fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    if (rc < 0 && errno != EINPROGRESS) {
      close_conn(*c);
      continue;
    }
    c->connecting = rc < 0;
    conns_.push_back(std::move(c));
  }
}

// Source and destination of each direction.
static int src_fd(const auto& c, int d) { return d == 0 ? c.host_fd : c.target_fd; }
static int dst_fd(const auto& c, int d) { return d == 0 ? c.target_fd : c.host_fd; }

bool FaultProxy::pump_read(Conn& c, int d, uint64_t now) {
  Flow& f = c.flow[d];
  for (int turn = 0; turn < 16; ++turn) {
    if (f.eof || c.faults.stall[d] || f.buffered >= kMaxBuffered) return true;
    uint64_t limit = c.faults.drop_after[d];
    if (f.read >= limit) return true;
    size_t want = size_t(std::min<uint64_t>(kChunk, limit - f.read));
    Chunk ch;
    ch.data.reset(new uint8_t[want]);
    ssize_t n = ::recv(src_fd(c, d), ch.data.get(), want, MSG_DONTWAIT);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    if (n == 0) {
      f.eof = true;
      return true;
    }
    ch.len = size_t(n);
    ch.ready_ns = c.faults.delay_us[d] ? now + uint64_t(c.faults.delay_us[d]) * 1000 : 0;
    f.read += uint64_t(n);
    f.buffered += size_t(n);
    f.queue.push_back(std::move(ch));
    if (size_t(n) < want) return true;
  }
  return true;
}

bool FaultProxy::pump_write(Conn& c, int d, uint64_t now) {
  Flow& f = c.flow[d];
  int fd = dst_fd(c, d);
  int singles = 0;
  while (!f.queue.empty()) {
    Chunk& ch = f.queue.front();
    if (ch.ready_ns > now) return true;
    size_t left = ch.len - ch.off;
    size_t n_try = c.faults.split ? 1 : left;
    ssize_t n = ::send(fd, ch.data.get() + ch.off, n_try, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    ch.off += size_t(n);
    f.buffered -= size_t(n);
    c.forwarded[d].store(c.forwarded[d].load() + uint64_t(n));
    if (ch.off == ch.len) f.queue.pop_front();
    if (c.faults.split && ++singles >= kSplitWritesPerTurn) return true;
  }
  return true;
}

void FaultProxy::run() {
  std::vector<pollfd> pfds;
  std::unique_lock lk(mu_);
  while (!stop_.load()) {
    if (cut_done_ != cut_requested_) {
      for (auto& c : conns_) close_conn(*c);
      conns_.clear();
      live_ = 0;
      cut_done_ = cut_requested_;
      cv_.notify_all();
    }
    uint64_t now = now_ns();
    int64_t timeout_ns = 200'000'000;  // a wake-up now and then, whatever happens
    pfds.clear();
    pfds.push_back({wake_fd_, POLLIN, 0});
    pfds.push_back({listen_fd_, POLLIN, 0});
    for (auto& cp : conns_) {
      Conn& c = *cp;
      short hev = 0, tev = 0;
      if (c.connecting) {
        tev = POLLOUT;
      } else {
        for (int d = 0; d < 2; ++d) {
          Flow& f = c.flow[d];
          bool want_read = !f.eof && !c.faults.stall[d] && f.buffered < kMaxBuffered && f.read < c.faults.drop_after[d];
          if (want_read) (d == 0 ? hev : tev) |= POLLIN;
          if (!f.queue.empty()) {
            if (f.queue.front().ready_ns <= now) (d == 0 ? tev : hev) |= POLLOUT;
            else timeout_ns = std::min<int64_t>(timeout_ns, int64_t(f.queue.front().ready_ns - now));
          }
        }
      }
      pfds.push_back({c.host_fd, hev, 0});
      pfds.push_back({c.target_fd, tev, 0});
    }
    lk.unlock();
    timespec ts{time_t(timeout_ns / 1'000'000'000), long(timeout_ns % 1'000'000'000)};
    int rc = ::ppoll(pfds.data(), pfds.size(), &ts, nullptr);
    lk.lock();
    if (rc < 0 && errno != EINTR) break;
    if (pfds[0].revents & POLLIN) {
      uint64_t v;
      ssize_t n = ::read(wake_fd_, &v, sizeof(v));
      (void)n;
    }
    now = now_ns();
    // Connections accepted below were not polled: skip them this turn.
    const size_t polled = conns_.size();
    for (size_t i = 0; i < polled; ++i) {
      Conn& c = *conns_[i];
      short hrev = pfds[2 + 2 * i].revents, trev = pfds[3 + 2 * i].revents;
      bool ok = true;
      if (c.connecting) {
        if (trev) {
          int err = 0;
          socklen_t len = sizeof(err);
          getsockopt(c.target_fd, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0) ok = false;
          else c.connecting = false;
        }
      } else {
        // Reads and writes are non-blocking, so trying one that poll did not flag costs an
        // EAGAIN at most; a fault changed meanwhile (stall lifted) is picked up at once.
        if (hrev || trev) {
          for (int d = 0; d < 2 && ok; ++d) ok = pump_read(c, d, now);
        }
        for (int d = 0; d < 2 && ok; ++d) ok = pump_write(c, d, now);
        if ((hrev | trev) & (POLLERR | POLLNVAL)) ok = false;
      }
      // A cut after exactly N bytes: everything up to N has been written out.
      for (int d = 0; d < 2 && ok && !c.connecting; ++d) {
        if (c.forwarded[d].load() >= c.faults.drop_after[d]) ok = false;
      }
      // Orderly shutdown: pass a FIN on once everything before it is out.
      if (ok && !c.connecting) {
        for (int d = 0; d < 2; ++d) {
          Flow& f = c.flow[d];
          if (f.eof && f.buffered == 0 && !f.shut) {
            ::shutdown(dst_fd(c, d), SHUT_WR);
            f.shut = true;
          }
        }
        if (c.flow[0].shut && c.flow[1].shut) ok = false;
      }
      if (!ok) close_conn(c);
    }
    if (pfds[1].revents & POLLIN) accept_new();
    conns_.erase(std::remove_if(conns_.begin(), conns_.end(), [](const auto& c) { return c->host_fd < 0; }),
                 conns_.end());
    live_ = conns_.size();
  }
  cut_done_ = cut_requested_;
  cv_.notify_all();
}

}  // namespace nvtcp::test

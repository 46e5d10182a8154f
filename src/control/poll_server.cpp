// SPDX-License-Identifier: Apache-2.0
#include "control/poll_server.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <vector>

#include "util/log.hpp"

namespace nvtcp::control {

namespace {
constexpr uint64_t kLingerMs = 1000;
constexpr size_t kLingerMaxBytes = 1u << 20;
}  // namespace

uint64_t PollServer::now_ms() const {
  if (opts_.clock) return opts_.clock();
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000 + uint64_t(ts.tv_nsec) / 1000000;
}

struct PollServer::Client {
  ClientId id = 0;
  int fd = -1;
  std::unique_ptr<Session> session;
  std::string out;        // answers not yet taken by the socket, from out_sent on
  size_t out_sent = 0;
  bool closing = false;   // the session is done: close once out is sent
  // Out is sent and our side shut: what the client still sends is read and dropped until it
  // closes too (or kLingerMs pass), so that closing with its bytes unread does not reset the
  // connection and destroy the answer before the client has read it.
  bool lingering = false;
  uint64_t linger_until_ms = 0;
  size_t dropped = 0;  // bytes read and dropped while lingering
  uint64_t last_progress_ms = 0;
  // A request has begun (at accept, or with its first byte) and is not whole yet: since when.
  // Only the request's completion clears it; more of its bytes do not move it.
  bool in_request = true;
  uint64_t request_since_ms = 0;
  size_t unsent() const { return out.size() - out_sent; }
};

PollServer::PollServer(PollServerOptions opts, MakeSession make) : opts_(std::move(opts)), make_(std::move(make)) {}

PollServer::~PollServer() { stop(); }

std::string PollServer::start(int listen_fd) {
  if (thread_.joinable()) return opts_.name + ": already serving";
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return fmt::format("{}: eventfd: {}", opts_.name, std::strerror(errno));
  listen_fd_ = listen_fd;
  stopping_.store(false);
  serving_.store(true, std::memory_order_release);
  thread_ = std::thread([this] { loop(); });
  return {};
}

void PollServer::stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true);
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  thread_.join();
  // Posted after the loop's last turn (a loop that ended on an error): their clients are gone.
  std::list<Client> none;
  run_posted(none);
  ::close(wake_fd_);
  wake_fd_ = listen_fd_ = -1;
}

void PollServer::post(ClientId client, Posted fn) {
  {
    std::lock_guard lk(posted_mu_);
    posted_.emplace_back(client, std::move(fn));
  }
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void PollServer::run_posted(std::list<Client>& clients) {
  std::vector<std::pair<ClientId, Posted>> ready;
  {
    std::lock_guard lk(posted_mu_);
    ready.swap(posted_);
  }
  for (auto& [id, fn] : ready) {
    auto it = std::find_if(clients.begin(), clients.end(), [id = id](const Client& c) { return c.id == id; });
    if (it == clients.end() || it->closing || it->lingering) {
      std::string nobody;
      fn(nullptr, nobody);
      continue;
    }
    it->last_progress_ms = now_ms();
    if (!fn(it->session.get(), it->out)) it->closing = true;
    track_request(*it);  // what it had buffered behind may be the start of the next request
    if (!flush(*it)) {
      ::close(it->fd);
      clients.erase(it);
    }
  }
}

bool PollServer::flush(Client& c) {
  while (c.unsent() > 0) {
    ssize_t n = ::send(c.fd, c.out.data() + c.out_sent, c.unsent(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return false;  // the client went away
    }
    c.out_sent += size_t(n);
    if (n > 0) c.last_progress_ms = now_ms();
  }
  if (c.unsent() == 0) {
    c.out.clear();
    c.out_sent = 0;
  } else if (c.out_sent > (1u << 20)) {
    c.out.erase(0, c.out_sent);  // keep the buffer from growing with what has gone
    c.out_sent = 0;
  }
  if (c.unsent() > opts_.max_unsent_bytes) {
    log::warn("{}: a client left {} bytes of answers unread: closing it", opts_.name, c.unsent());
    return false;
  }
  if (c.closing && c.unsent() == 0 && !c.lingering) {
    ::shutdown(c.fd, SHUT_WR);
    c.lingering = true;
    c.linger_until_ms = now_ms() + kLingerMs;
  }
  return true;
}

void PollServer::track_request(Client& c) {
  // A request behind one being carried out is timed from when that one is answered.
  if (c.closing || c.lingering || c.session->waiting() || !c.session->partial()) {
    c.in_request = false;
  } else if (!c.in_request) {
    c.in_request = true;
    c.request_since_ms = now_ms();
  }
}

bool PollServer::answer_due(const Client& c) const {
  return opts_.one_answer_at_a_time && !c.closing && !c.lingering && c.unsent() == 0 && !c.session->waiting() &&
         c.session->pending();
}

bool PollServer::on_readable(Client& c) {
  char buf[65536];
  ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  if (n == 0) {
    if (!c.closing) c.session->on_gone();
    return false;
  }
  c.last_progress_ms = now_ms();
  if (c.lingering) {
    c.dropped += size_t(n);
    return c.dropped < kLingerMaxBytes;
  }
  if (c.closing) return true;  // nothing more is read from a conversation that ended
  if (!c.session->on_bytes(buf, size_t(n), c.out)) c.closing = true;
  track_request(c);
  return flush(c);
}

int PollServer::poll_timeout(const std::list<Client>& clients) const {
  int timeout = -1;
  if (opts_.idle_timeout_ms && !clients.empty()) timeout = int(std::min<uint32_t>(opts_.idle_timeout_ms, 1000));
  if (opts_.request_timeout_ms && !clients.empty())
    timeout = int(std::min<uint32_t>({opts_.request_timeout_ms, 1000, uint32_t(timeout)}));
  for (const auto& c : clients)
    if (answer_due(c)) timeout = 0;  // a request already received waits for its answer
  for (const auto& c : clients)
    if (c.lingering) timeout = timeout < 0 ? 100 : std::min(timeout, 100);
  return timeout;
}

bool PollServer::serve(Client& c, short ev, uint64_t now) {
  if ((ev & (POLLHUP | POLLERR)) && c.session->waiting()) {
    // Nothing is read from it while its session waits, and no answer can reach it any more.
    log::info("{}: a client hung up while its request was being carried out", opts_.name);
    c.session->on_gone();
    return false;
  }
  bool keep = true;
  if (ev & (POLLIN | POLLHUP | POLLERR)) keep = on_readable(c);
  if (keep && (ev & POLLOUT)) keep = flush(c);
  if (keep && answer_due(c)) {
    // The answers so far have all been taken: the next request the client already sent.
    if (!c.session->on_bytes(nullptr, 0, c.out)) c.closing = true;
    track_request(c);  // what followed it may be the start of the next
    keep = flush(c);
  }
  if (keep && c.in_request && opts_.request_timeout_ms && now > c.request_since_ms + opts_.request_timeout_ms) {
    log::warn("{}: a client's request was not whole {} ms after it began: answering that and closing it", opts_.name,
              now - c.request_since_ms);
    timed_out_.fetch_add(1, std::memory_order_relaxed);
    c.session->on_request_timeout(c.out);
    c.closing = true;
    c.in_request = false;
    keep = flush(c);
  }
  if (keep && c.lingering && now > c.linger_until_ms) keep = false;
  if (keep && !c.lingering && !c.session->waiting() && opts_.idle_timeout_ms &&
      now > c.last_progress_ms + opts_.idle_timeout_ms) {
    log::info("{}: a client made no progress for {} ms: closing it", opts_.name, opts_.idle_timeout_ms);
    keep = false;
  }
  return keep;
}

void PollServer::accept_clients(std::list<Client>& clients) {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) break;
    if (clients.size() >= opts_.max_clients) {
      // The slot of the client whose request has waited longest to be whole, if one has:
      // one that finishes its request is answered before 16 more clients come, one that
      // trickles is not, so slots go to clients that finish.
      auto victim = clients.end();
      if (opts_.evict_unfinished)
        for (auto c = clients.begin(); c != clients.end(); ++c)
          if (c->in_request && !c->closing && !c->lingering && c->unsent() == 0 &&
              (victim == clients.end() || c->request_since_ms < victim->request_since_ms))
            victim = c;
      if (victim == clients.end()) {
        refused_.fetch_add(1, std::memory_order_relaxed);
        log::warn("{}: {} clients already connected: closing another", opts_.name, clients.size());
        ::close(fd);
        continue;
      }
      evicted_.fetch_add(1, std::memory_order_relaxed);
      log::warn("{}: {} clients already connected: closing the one whose request is unfinished longest ({} ms) for a new one",
                opts_.name, clients.size(), now_ms() - victim->request_since_ms);
      ::close(victim->fd);
      clients.erase(victim);
    }
    if (opts_.one_answer_at_a_time) {
      const int sndbuf = kOneAnswerSendBuffer;
      ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    }
    Client& c = clients.emplace_back();
    c.id = ++next_client_;
    c.fd = fd;
    c.session = make_(c.id);
    c.last_progress_ms = c.request_since_ms = now_ms();
  }
}

void PollServer::loop() {
  std::list<Client> clients;
  std::vector<pollfd> fds;
  while (!stopping_.load()) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& c : clients) {
      // One answer at a time: nothing more is read while an answer or a request waits, so
      // what a client buffers here is one read's worth. A session that waits reads nothing.
      const bool read = !c.session->waiting() && !(opts_.one_answer_at_a_time && (c.unsent() || c.session->pending()));
      fds.push_back({c.fd, short((read ? POLLIN : 0) | (c.unsent() ? POLLOUT : 0)), 0});
    }
    if (::poll(fds.data(), fds.size(), poll_timeout(clients)) < 0) {
      if (errno == EINTR) continue;
      log::error("{}: poll: {}: the server stops", opts_.name, std::strerror(errno));
      break;
    }
    if (fds[0].revents) {
      uint64_t wakes = 0;
      [[maybe_unused]] ssize_t n = ::read(wake_fd_, &wakes, sizeof(wakes));
    }
    const uint64_t now = now_ms();
    size_t i = 2;
    for (auto it = clients.begin(); it != clients.end(); ++i) {
      if (serve(*it, fds[i].revents, now)) {
        ++it;
      } else {
        ::close(it->fd);
        it = clients.erase(it);
      }
    }
    if (fds[1].revents & POLLIN) accept_clients(clients);
    run_posted(clients);
    clients_now_.store(clients.size(), std::memory_order_relaxed);
  }
  run_posted(clients);  // their answers get one try to leave before the clients close
  serving_.store(false, std::memory_order_release);
  for (auto& c : clients) ::close(c.fd);
  clients_now_.store(0, std::memory_order_relaxed);
}

}  // namespace nvtcp::control

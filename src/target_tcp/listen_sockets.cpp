// SPDX-License-Identifier: Apache-2.0
// The target's listening sockets and what they accept: see listen_sockets.hpp.
#include "target_tcp/listen_sockets.hpp"

#include <malloc.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>

#include <fmt/format.h>

#include "reactor/reactor.hpp"
#include "reactor/tcp_stream.hpp"
#include "target_tcp/target.hpp"
#include "target_tcp/tcp_queue.hpp"
#include "util/log.hpp"

namespace nvtcp::target {

struct ListenSockets::ListenSocket {
  int fd = -1;
  uint16_t port = 0;
  uint16_t portid = 0;              // the listener's (see Listener::portid); 0: discovery only
  bool tls = false;                 // connections start with a TLS handshake
  bool ktls = true;                 // ... whose records out the kernel may seal (kTLS TX)
  std::string name;                 // address:port, for the log
  reactor::OwnedCompletion<ListenSocket> accept;
  ListenSockets* sockets = nullptr;
  // Accept failing for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) is
  // retried after a back-off that doubles up to kAcceptBackoffMaxNs, not at once: an
  // immediate retry fails again and spins the reactor. Failures are logged once a second.
  struct Retry : reactor::Timer {
    ListenSocket* owner = nullptr;
  } retry;
  uint64_t backoff_ns = 0;
  uint64_t failures = 0;            // since the last log line
  int last_error = 0;
  uint64_t last_log_ns = 0;
  bool closing = false;             // taken away by RPC: the next completion ends it
  ~ListenSocket() {
    if (fd >= 0) close(fd);
  }
};

namespace {
constexpr uint64_t kAcceptBackoffMinNs = 10'000'000;     // 10 ms
constexpr uint64_t kAcceptBackoffMaxNs = 1'000'000'000;  // 1 s
constexpr uint64_t kAcceptLogIntervalNs = 1'000'000'000;

bool out_of_resources(int err) { return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM; }

uint16_t local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

reactor::Endpoint peer_of(int fd) {
  reactor::Endpoint ep;
  ep.len = sizeof(ep.addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ep.addr), &ep.len) < 0) ep.addr.ss_family = AF_UNSPEC;
  return ep;
}

std::string peer_name(int fd) {
  reactor::Endpoint ep = peer_of(fd);
  return ep.addr.ss_family == AF_UNSPEC ? "?" : ep.to_string();
}

// The address the host reached on this side, as the host would dial it: an IPv4 host on an
// IPv6 socket shows as plain IPv4.
std::string local_address(int fd) {
  reactor::Endpoint ep;
  ep.len = sizeof(ep.addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ep.addr), &ep.len) < 0) return {};
  std::string host = ep.host();
  if (host.rfind("::ffff:", 0) == 0 && host.find('.') != std::string::npos) host = host.substr(7);
  return host;
}

// The peer's IP address alone (no port): what max_connections_per_address and the send
// buffers' shares count.
std::string peer_address(int fd) {
  reactor::Endpoint ep = peer_of(fd);
  return ep.addr.ss_family == AF_UNSPEC ? "?" : ep.host();
}
// The kernel send-buffer budgets of cfg, with what it leaves to the machine filled in.
SendShares::Limits send_share_limits(const TargetConfig& cfg) {
  SendShares::Limits l;
  l.ceiling_bytes = uint32_t(reactor::send_buffer_for(cfg.send_buffer_bytes, cfg.socket_buffer_bytes));
  l.target_bytes = cfg.send_buffer_budget_bytes ? cfg.send_buffer_budget_bytes : SendShares::tcp_mem_pressure_bytes() / 4;
  l.address_bytes = cfg.address_send_buffer_bytes ? cfg.address_send_buffer_bytes : l.target_bytes / 4;
  l.floor_bytes = l.ceiling_bytes ? std::min(cfg.min_send_buffer_bytes, l.ceiling_bytes) : cfg.min_send_buffer_bytes;
  l.max_per_address = cfg.max_connections_per_address;
  if (const uint64_t wmem = SendShares::tcp_wmem_max_bytes()) l.autotuned_up_to = uint32_t(std::min<uint64_t>(wmem / 2, 1u << 30));
  return l;
}

}  // namespace

ListenSockets::ListenSockets(Target& target) : t_(target), shares_(send_share_limits(target.cfg_)) {
  const SendShares::Limits& l = shares_.limits();
  log::info("kernel send buffers: {} MiB for all connections, {} MiB for one source address, {} KiB at least and {} "
            "at most for one connection",
            l.target_bytes >> 20, l.address_bytes >> 20, l.floor_bytes >> 10,
            l.ceiling_bytes ? fmt::format("{} KiB", l.ceiling_bytes >> 10) : std::string("autotuned"));
  // A crowd of connections that came and went leaves its memory with the allocator (a thousand
  // of them: 70 MiB of RSS, kept for good); a worker hands it back, off the reactors.
  shares_.on_many_gone([this] { t_.state_->workers().submit("malloc_trim", [] { ::malloc_trim(0); }); });
}
ListenSockets::~ListenSockets() = default;

std::string ListenSockets::bind_configured() {
  const TargetConfig& cfg = t_.cfg_;
  const std::vector<Listener> listeners = t_.state_->listeners();  // in configuration order
  for (size_t i = 0; i < listeners.size(); ++i) {
    std::string err;
    auto ls = bind_listener(listeners[i].address, listeners[i].port, err);
    if (!ls) return err;
    t_.state_->set_listener_port(listeners[i].portid, ls->port);
    ls->portid = listeners[i].portid;
    ls->tls = listeners[i].tls_required;
    ls->ktls = cfg.listeners[i].ktls;
    sockets_.push_back(std::move(ls));
  }
  if (cfg.discovery_port) {
    std::string err;
    auto ls = bind_listener(cfg.listeners[0].address, cfg.discovery_port, err);
    if (ls) {
      ls->tls = cfg.listeners[0].tls_required;  // the discovery port is secured as the first listener
      ls->ktls = cfg.listeners[0].ktls;
      t_.discovery_port_ = ls->port;
      sockets_.push_back(std::move(ls));
    } else {
      log::warn("discovery service not started on port {}: {} (every listener still serves discovery)",
                cfg.discovery_port, err);
    }
  }
  return {};
}

void ListenSockets::start_accepting_all() {
  for (auto& ls : sockets_) start_accepting(ls.get());
}

void ListenSockets::shut_down_all() {
  for (auto& ls : sockets_) {
    if (ls->fd >= 0) ::shutdown(ls->fd, SHUT_RDWR);
  }
}

void ListenSockets::clear() { sockets_.clear(); }

std::unique_ptr<ListenSockets::ListenSocket> ListenSockets::bind_listener(const std::string& addr, uint16_t port,
                                                                          std::string& err) {
  reactor::Endpoint ep;
  if (!reactor::resolve(addr, port, ep, err)) return nullptr;
  int fd = reactor::listen_on(ep);
  if (fd < 0) {
    err = fmt::format("cannot listen on {}:{}: {}", addr, port, strerror(-fd));
    return nullptr;
  }
  auto ls = std::make_unique<ListenSocket>();
  ls->fd = fd;
  ls->port = local_port(fd);
  ls->name = fmt::format("{}:{}", addr, ls->port);
  ls->sockets = this;
  return ls;
}

// On reactor 0.
void ListenSockets::start_accepting(ListenSocket* ls) {
  ls->accept.owner = ls;
  ls->accept.fn = [](reactor::Completion* c, int res, uint32_t flags) {
    auto* sock = static_cast<reactor::OwnedCompletion<ListenSocket>*>(c)->owner;
    sock->sockets->on_accept(sock, res, flags);
  };
  ls->retry.owner = ls;
  ls->retry.fn = [](reactor::Timer* t) {
    ListenSocket* sock = static_cast<ListenSocket::Retry*>(t)->owner;
    if (!sock->sockets->t_.stopping_.load()) arm_accept(sock);
  };
  arm_accept(ls);
}

void ListenSockets::arm_accept(ListenSocket* sock) {
  reactor::Reactor* r = reactor::Reactor::current();
  io_uring_sqe* sqe = r->get_sqe();
  io_uring_prep_multishot_accept(sqe, sock->fd, nullptr, nullptr, SOCK_CLOEXEC);
  r->prep(sqe, &sock->accept);
}

// On reactor 0: one accepted connection, or an accept error.
void ListenSockets::on_accept(ListenSocket* sock, int res, uint32_t flags) {
  if (sock->closing) {
    if (res >= 0) ::close(res);  // came in as the listener went
    if (!(flags & IORING_CQE_F_MORE)) retire_socket(sock);
    return;
  }
  std::string address;
  SendShares::Admission admission;
  bool refused = res >= 0 && over_connection_limit();
  if (refused) ::close(res);
  if (res >= 0 && !refused) {
    address = peer_address(res);
    admission = shares_.admit(address, res);
    if (!admission.log.empty()) {
      if (admission.lease)
        log::info("{}", admission.log);  // slowed
      else
        log::warn("{}", admission.log);
    }
    if (!admission.lease) {
      t_.state_->usage.refused_connections.fetch_add(1);
      ::close(res);
      refused = true;
    }
  }
  if (res >= 0 && !refused) {
    sock->backoff_ns = 0;
    accepted_.fetch_add(1);
    t_.state_->usage.handoff.fetch_add(1);
    const int rcvbuf = reactor::receive_buffer_for(t_.cfg_.socket_buffer_bytes, reactor::net_core_rmem_max());
    const int sndbuf = int(admission.share);  // 0: autotuned
    std::string e = reactor::apply_socket_options(res, {true, sndbuf, rcvbuf, t_.cfg_.tcp_congestion});
    if (!e.empty()) log::warn("accepted socket: {}", e);
    unsigned idx = next_reactor_.fetch_add(1) % unsigned(t_.reactors_.size());
    Target::ReactorThread* dst = t_.reactors_[idx].get();
    int fd = res;
    Arrival arrival{sock->portid, local_address(fd), address};
    const bool tls = sock->tls, ktls = sock->ktls;
    // The lease goes with the connection (a posted function must be copyable).
    auto lease = std::make_shared<SendShares::Lease>(std::move(admission.lease));
    dst->reactor->post([this, dst, fd, tls, ktls, lease, arrival = std::move(arrival)]() mutable {
      if (t_.stopping_.load()) {
        close(fd);
        *lease = {};
        t_.state_->usage.handoff.fetch_sub(1);
        return;
      }
      std::string peer = peer_name(fd);
      TcpQueue* conn;
      if (tls) {
        reactor::Reactor& r = *dst->reactor;
        const ConnectionSet& set = dst->connections;
        auto make = [this, &r, fd, ktls, &peer, &set](reactor::StreamOwner& owner) -> std::unique_ptr<reactor::ByteStream> {
          auto s = tls::TlsStream::server(r, owner, *t_.psk_resolver_, peer);
          s->set_kernel_tx(ktls);
          s->attach([&r, fd, &set](reactor::StreamOwner& o) { return target_tcp_stream(r, fd, o, set); });
          return s;
        };
        conn = new TcpQueue(*t_.state_, r, make, peer, dst->connections, std::move(*lease), std::move(arrival));
      } else {
        conn = new TcpQueue(*t_.state_, *dst->reactor, fd, peer, dst->connections, std::move(*lease),
                            std::move(arrival));
      }
      t_.state_->usage.handoff.fetch_sub(1);
      conn->start();
    });
  } else if (res < 0 && res != -ECANCELED && !t_.stopping_.load()) {
    ++sock->failures;
    sock->last_error = -res;
    const uint64_t now = reactor::monotonic_ns();
    if (now - sock->last_log_ns >= kAcceptLogIntervalNs) {
      rlimit rl{};
      getrlimit(RLIMIT_NOFILE, &rl);
      log::warn("accept on {}: {} ({} failure(s) since the last report; open files limit {}, {} connections live){}",
                sock->name, strerror(sock->last_error), sock->failures, uint64_t(rl.rlim_cur),
                t_.state_->usage.connections.load(),
                out_of_resources(sock->last_error) ? "; backing off" : "");
      sock->failures = 0;
      sock->last_log_ns = now;
    }
  }
  if ((flags & IORING_CQE_F_MORE) || t_.stopping_.load()) return;
  if (res < 0 && out_of_resources(-res)) {
    // Nothing will be accepted until a descriptor (or memory) is freed: wait, doubling.
    sock->backoff_ns = std::clamp(sock->backoff_ns * 2, kAcceptBackoffMinNs, kAcceptBackoffMaxNs);
    reactor::Reactor::current()->arm_timer(&sock->retry, sock->backoff_ns);
    return;
  }
  arm_accept(sock);
}

// On reactor 0, once nothing of sock is in the ring: the socket goes (and its descriptor).
// Later, from the reactor's queue, not from inside sock's own completion.
void ListenSockets::retire_socket(ListenSocket* sock) {
  reactor::Reactor::current()->cancel_timer(&sock->retry);
  reactor::Reactor::current()->post([this, sock] {
    auto it = std::find_if(sockets_.begin(), sockets_.end(), [sock](auto& ls) { return ls.get() == sock; });
    if (it == sockets_.end()) return;
    log::info("stopped listening on {}", sock->name);
    sockets_.erase(it);
  });
}

template <typename Fn>
void ListenSockets::on_reactor0(Fn fn) {
  auto done = std::make_shared<std::promise<void>>();
  auto f = done->get_future();
  t_.reactors_[0]->reactor->post([done, fn = std::move(fn)]() mutable {
    fn();
    done->set_value();
  });
  while (f.wait_for(std::chrono::seconds(5)) != std::future_status::ready)
    log::warn("control: reactor 0 has not finished its turn in 5 s; still waiting");
}

std::string ListenSockets::open_listener(const Listener& l, bool ktls, uint16_t& port) {
  std::string err;
  std::unique_ptr<ListenSocket> ls = bind_listener(l.address, l.port, err);
  if (!ls) return err;
  ls->portid = l.portid;
  ls->tls = l.tls_required;
  ls->ktls = ktls;
  port = ls->port;
  ListenSocket* raw = ls.release();  // sockets_ is reactor 0's: it takes the socket there
  on_reactor0([this, raw] {
    sockets_.emplace_back(raw);
    start_accepting(raw);
  });
  log::info("listening on {}", raw->name);
  return {};
}

void ListenSockets::close_listener(uint16_t portid) {
  on_reactor0([this, portid] {
    for (auto& ls : sockets_) {
      if (ls->portid != portid || ls->closing) continue;
      ls->closing = true;
      // The multishot accept ends with an error (no more to come): on_accept retires the
      // socket then. One waiting out a back-off has nothing in the ring: it goes now.
      if (ls->retry.deadline_ns != 0) retire_socket(ls.get());
      else ::shutdown(ls->fd, SHUT_RDWR);
    }
  });
}

// On reactor 0, for a connection just accepted (its fd not yet closed by the caller).
bool ListenSockets::over_connection_limit() {
  const uint32_t max = t_.cfg_.max_connections;
  if (max == 0) return false;
  ResourceUsage& u = t_.state_->usage;
  uint32_t live = u.connections.load() + u.handoff.load();
  if (live < max) return false;
  // A crowd of connections over the limit would flood the log: the first of each burst,
  // then every 1000th, with the running count.
  uint64_t n = u.refused_connections.fetch_add(1) + 1;
  if (n == 1 || n % 1000 == 0 || reactor::monotonic_ns() - last_refusal_log_ns_ > 1'000'000'000ull) {
    log::warn("connection refused: {} connections already open (max_connections {}); {} refused so far", live, max,
              n);
    last_refusal_log_ns_ = reactor::monotonic_ns();
  }
  return true;
}

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
#include "target_tcp/target.hpp"

#include <malloc.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>

#include <fmt/format.h>

#include "reactor/reactor.hpp"
#include "reactor/tcp_stream.hpp"
#include "target_tcp/tcp_queue.hpp"
#include "util/log.hpp"

namespace nvtcp::target {

struct Target::ReactorThread {
  std::thread thread;
  reactor::Reactor* reactor = nullptr;  // created on, and owned by, the thread
  ConnectionSet connections;
  std::atomic<double> cpu{0};
  std::atomic<uint64_t> busy_ns{0};  // Reactor::busy_ns(), sampled with cpu
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
};

struct Target::ListenSocket {
  int fd = -1;
  uint16_t port = 0;
  uint16_t portid = 0;              // the listener's (see Listener::portid); 0: discovery only
  bool tls = false;                 // connections start with a TLS handshake
  bool ktls = true;                 // ... whose records out the kernel may seal (kTLS TX)
  std::string name;                 // address:port, for the log
  reactor::OwnedCompletion<ListenSocket> accept;
  Target* target = nullptr;
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
constexpr uint64_t kRevalidateIntervalNs = 1'000'000'000;
// Descriptors the target needs beside its connections: listeners, io_uring rings and
// eventfds per reactor, namespace files, stdio.
constexpr uint64_t kSpareDescriptors = 64;

bool out_of_resources(int err) { return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM; }

double thread_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

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

// The peer's IP address alone (no port): what max_connections_per_address counts.
std::string peer_address(int fd) {
  reactor::Endpoint ep = peer_of(fd);
  return ep.addr.ss_family == AF_UNSPEC ? "?" : ep.host();
}
}  // namespace

Target::Target(TargetConfig cfg, DeviceFactory factory) : cfg_(std::move(cfg)), factory_(std::move(factory)) {}

Target::~Target() { stop(); }

std::string Target::start() {
  if (std::string err = finalize_config(cfg_); !err.empty()) return err;
  state_ = std::make_unique<TargetState>();
  quiesced_.store(0);
  state_->start_ns = reactor::monotonic_ns();
  if (std::string err = build_state(cfg_, *state_, factory_); !err.empty()) return err;
  psk_resolver_ = std::make_unique<TargetPskResolver>(*state_);
  // The auth workers start here, on the caller's thread, so they run on the process's CPUs: made
  // later by a reactor pinned with --cpus, they would share (and slow) that reactor's core.
  state_->workers();

  raise_descriptor_limit();
  // Request buffers of 128 KiB and more are mapped and unmapped on their own: glibc would
  // otherwise raise this threshold as big buffers are freed and keep later ones in its heap,
  // so memory a burst of large commands took would stay with the process once they end.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  // Bind every listener first so that errors surface before any thread starts.
  const std::vector<Listener> listeners = state_->listeners();  // in configuration order
  for (size_t i = 0; i < listeners.size(); ++i) {
    std::string err;
    auto ls = bind_listener(listeners[i].address, listeners[i].port, err);
    if (!ls) return err;
    state_->set_listener_port(listeners[i].portid, ls->port);
    ls->portid = listeners[i].portid;
    ls->tls = listeners[i].tls_required;
    ls->ktls = cfg_.listeners[i].ktls;
    sockets_.push_back(std::move(ls));
  }
  if (cfg_.discovery_port) {
    std::string err;
    auto ls = bind_listener(cfg_.listeners[0].address, cfg_.discovery_port, err);
    if (ls) {
      ls->tls = cfg_.listeners[0].tls_required;  // the discovery port is secured as the first listener
      ls->ktls = cfg_.listeners[0].ktls;
      discovery_port_ = ls->port;
      sockets_.push_back(std::move(ls));
    } else {
      log::warn("discovery service not started on port {}: {} (every listener still serves discovery)",
                cfg_.discovery_port, err);
    }
  }

  for (unsigned i = 0; i < cfg_.cores; ++i) {
    auto rt = std::make_unique<ReactorThread>();
    ReactorThread* raw = rt.get();
    raw->connections.set_index(i);
    bool accept_here = i == 0;
    int cpu = i < cfg_.cpus.size() ? cfg_.cpus[i] : -1;
    rt->thread = std::thread([this, raw, accept_here, cpu] {
      if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0) log::warn("cannot pin a reactor to CPU {}", cpu);
      }
      reactor::ReactorOptions ro = reactor::ReactorOptions::defaults();
      ro.poll = cfg_.poll == "busy"     ? PollMode::Busy
                : cfg_.poll == "hybrid" ? PollMode::Hybrid
                                        : PollMode::Interrupt;
      ro.sqpoll = cfg_.sqpoll;
      ro.sq_thread_idle_ms = cfg_.sqpoll_idle_ms;
      ro.sq_thread_cpu = cfg_.sqpoll_cpu;
      ro.send_zc_threshold = cfg_.send_zc_threshold;
      ro.recv_multishot = cfg_.recv_multishot;
      ro.spin_recv = cfg_.spin_recv;
      reactor::Reactor r(4096, ro);
      raw->reactor = &r;
      {
        std::lock_guard lk(raw->mu);
        raw->ready = true;
      }
      raw->cv.notify_all();
      // The CPU figure is sampled every millisecond, not every turn: getrusage is a system
      // call, and a polling reactor turns hundreds of thousands of times a second.
      uint64_t next_cpu_sample_ns = 0;
      while (!stopping_.load(std::memory_order_relaxed)) {
        r.run_once(100000);
        if (r.now_ns() >= next_cpu_sample_ns) {
          raw->cpu.store(thread_cpu_seconds(), std::memory_order_relaxed);
          raw->busy_ns.store(r.busy_ns(), std::memory_order_relaxed);
          next_cpu_sample_ns = r.now_ns() + 1'000'000;
        }
      }
      // Shutting down: close what is left and let the closes finish (bounded).
      raw->connections.close_all();
      uint64_t deadline = reactor::monotonic_ns() + 2'000'000'000ull;
      while ((raw->connections.size() > 0 || raw->connections.draining() > 0) && reactor::monotonic_ns() < deadline)
        r.run_once(10000);
      // Work on the auth workers comes back through this reactor: it must not go first. The
      // work is bounded (an exponentiation), so this wait is too.
      while (raw->connections.offloads_out()) r.run_once(1000);
      if (accept_here) {
        for (auto& ls : sockets_) {
          if (ls->fd >= 0) ::shutdown(ls->fd, SHUT_RDWR);
        }
        for (int turn = 0; turn < 10; ++turn) r.run_once(1000);
      }
      // No reactor is destroyed before all have got this far: until reactor 0 has shut its
      // listeners and drained their completions it may still hand an accepted connection
      // to any reactor (the hand-off closes it, seeing stopping_), and a post must never
      // reach a destroyed reactor, nor its eventfd a closed descriptor. Posts made before
      // the last reactor arrived are run by the turns after.
      quiesced_.fetch_add(1, std::memory_order_acq_rel);
      while (quiesced_.load(std::memory_order_acquire) < cfg_.cores) r.run_once(1000);
      r.run_once(0);
      raw->cpu.store(thread_cpu_seconds(), std::memory_order_relaxed);
      raw->reactor = nullptr;
    });
    std::unique_lock lk(raw->mu);
    raw->cv.wait(lk, [raw] { return raw->ready; });
    reactors_.push_back(std::move(rt));
  }
  // The states listeners start in (save_config's nvmf_subsystem_listener_set_ana_state), set
  // before any host can connect and see another. finalize_config checked each; one that still
  // fails is logged, and its listener stays optimized.
  const std::vector<Listener> bound = state_->listeners();  // in configuration order, with the ports they got
  for (const auto& sc : cfg_.subsystems)
    for (const auto& a : sc.ana_states) {
      const int i = listener_index(cfg_, a.listener);
      std::string err = i < 0 || size_t(i) >= bound.size()
                            ? "not one of the target's listeners"
                            : set_ana_state(sc.nqn, bound[size_t(i)].address, bound[size_t(i)].port, a.anagrpid, a.state);
      if (!err.empty()) log::error("subsystem {}: ANA state for listener {}: {}", sc.nqn, a.listener, err);
    }
  // Accepting starts only now that every reactor exists to take connections.
  reactors_[0]->reactor->post([this] {
    revalidate_timer_.target = this;
    revalidate_timer_.fn = on_revalidate_timer;
    reactor::Reactor::current()->arm_timer(&revalidate_timer_, kRevalidateIntervalNs);
    for (auto& ls : sockets_) start_accepting(ls.get());
  });
  started_ = true;
  for (const Listener& l : state_->listeners()) log::info("listening on {}:{}", l.address, l.port);
  if (discovery_port()) log::info("discovery service on {}:{}", cfg_.listeners[0].address, discovery_port());
  return {};
}

std::unique_ptr<Target::ListenSocket> Target::bind_listener(const std::string& addr, uint16_t port, std::string& err) {
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
  ls->target = this;
  return ls;
}

// On reactor 0.
void Target::start_accepting(ListenSocket* ls) {
  ls->accept.owner = ls;
  ls->accept.fn = [](reactor::Completion* c, int res, uint32_t flags) {
    auto* sock = static_cast<reactor::OwnedCompletion<ListenSocket>*>(c)->owner;
    sock->target->on_accept(sock, res, flags);
  };
  ls->retry.owner = ls;
  ls->retry.fn = [](reactor::Timer* t) {
    ListenSocket* sock = static_cast<ListenSocket::Retry*>(t)->owner;
    if (!sock->target->stopping_.load()) arm_accept(sock);
  };
  arm_accept(ls);
}

void Target::arm_accept(ListenSocket* sock) {
  reactor::Reactor* r = reactor::Reactor::current();
  io_uring_sqe* sqe = r->get_sqe();
  io_uring_prep_multishot_accept(sqe, sock->fd, nullptr, nullptr, SOCK_CLOEXEC);
  r->prep(sqe, &sock->accept);
}

// On reactor 0: one accepted connection, or an accept error.
void Target::on_accept(ListenSocket* sock, int res, uint32_t flags) {
  if (sock->closing) {
    if (res >= 0) ::close(res);  // came in as the listener went
    if (!(flags & IORING_CQE_F_MORE)) retire_socket(sock);
    return;
  }
  std::string address;
  bool refused = false;  // by max_connections_per_address
  if (res >= 0 && cfg_.max_connections_per_address) {
    address = peer_address(res);
    if (!state_->addresses.acquire(address, cfg_.max_connections_per_address)) {
      const uint64_t n = state_->usage.refused_connections.fetch_add(1) + 1;
      const uint64_t now = reactor::monotonic_ns();
      if (now - last_refusal_log_ns_ > 1'000'000'000ull) {
        log::warn("connection from {} refused: it has {} open (max_connections_per_address); {} refused so far",
                  address, cfg_.max_connections_per_address, n);
        last_refusal_log_ns_ = now;
      }
      ::close(res);
      refused = true;
    }
  }
  if (res >= 0 && !refused && over_connection_limit()) {
    if (!address.empty()) state_->addresses.release(address);
    ::close(res);
  } else if (res >= 0 && !refused) {
    sock->backoff_ns = 0;
    accepted_.fetch_add(1);
    state_->usage.handoff.fetch_add(1);
    const int rcvbuf = reactor::receive_buffer_for(cfg_.socket_buffer_bytes, reactor::net_core_rmem_max());
    const int sndbuf = reactor::send_buffer_for(cfg_.send_buffer_bytes, cfg_.socket_buffer_bytes);
    std::string e = reactor::apply_socket_options(res, {true, sndbuf, rcvbuf, cfg_.tcp_congestion});
    if (!e.empty()) log::warn("accepted socket: {}", e);
    unsigned idx = next_reactor_.fetch_add(1) % unsigned(reactors_.size());
    ReactorThread* dst = reactors_[idx].get();
    int fd = res;
    Arrival arrival{sock->portid, local_address(fd), address.empty() ? peer_address(fd) : address};
    const bool tls = sock->tls, ktls = sock->ktls;
    dst->reactor->post([this, dst, fd, tls, ktls, address = std::move(address), arrival = std::move(arrival)]() mutable {
      if (stopping_.load()) {
        close(fd);
        if (!address.empty()) state_->addresses.release(address);
        state_->usage.handoff.fetch_sub(1);
        return;
      }
      std::string peer = peer_name(fd);
      TcpQueue* conn;
      if (tls) {
        reactor::Reactor& r = *dst->reactor;
        auto make = [this, &r, fd, ktls, &peer](reactor::StreamOwner& owner) -> std::unique_ptr<reactor::ByteStream> {
          auto s = tls::TlsStream::server(r, owner, *psk_resolver_, peer);
          s->set_kernel_tx(ktls);
          s->attach([&r, fd](reactor::StreamOwner& o) { return std::make_unique<reactor::TcpStream>(r, fd, &o); });
          return s;
        };
        conn = new TcpQueue(*state_, r, make, peer, dst->connections, std::move(address), std::move(arrival));
      } else {
        conn = new TcpQueue(*state_, *dst->reactor, fd, peer, dst->connections, std::move(address), std::move(arrival));
      }
      state_->usage.handoff.fetch_sub(1);
      conn->start();
    });
  } else if (res < 0 && res != -ECANCELED && !stopping_.load()) {
    ++sock->failures;
    sock->last_error = -res;
    const uint64_t now = reactor::monotonic_ns();
    if (now - sock->last_log_ns >= kAcceptLogIntervalNs) {
      rlimit rl{};
      getrlimit(RLIMIT_NOFILE, &rl);
      log::warn("accept on {}: {} ({} failure(s) since the last report; open files limit {}, {} connections live){}",
                sock->name, strerror(sock->last_error), sock->failures, uint64_t(rl.rlim_cur),
                state_->usage.connections.load(),
                out_of_resources(sock->last_error) ? "; backing off" : "");
      sock->failures = 0;
      sock->last_log_ns = now;
    }
  }
  if ((flags & IORING_CQE_F_MORE) || stopping_.load()) return;
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
void Target::retire_socket(ListenSocket* sock) {
  reactor::Reactor::current()->cancel_timer(&sock->retry);
  reactor::Reactor::current()->post([this, sock] {
    auto it = std::find_if(sockets_.begin(), sockets_.end(), [sock](auto& ls) { return ls.get() == sock; });
    if (it == sockets_.end()) return;
    log::info("stopped listening on {}", sock->name);
    sockets_.erase(it);
  });
}

template <typename Fn>
void Target::on_reactor0(Fn fn) {
  auto done = std::make_shared<std::promise<void>>();
  auto f = done->get_future();
  reactors_[0]->reactor->post([done, fn = std::move(fn)]() mutable {
    fn();
    done->set_value();
  });
  while (f.wait_for(std::chrono::seconds(5)) != std::future_status::ready)
    log::warn("control: reactor 0 has not finished its turn in 5 s; still waiting");
}

std::string Target::open_listener(const Listener& l, bool ktls, uint16_t& port) {
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

void Target::close_listener(uint16_t portid) {
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

void Target::on_revalidate_timer(reactor::Timer* t) {
  Target* self = static_cast<RevalidateTimer*>(t)->target;
  if (self->stopping_.load()) return;
  self->state_->for_each_subsystem([](Subsystem& s) { s.revalidate_namespaces(); });
  reactor::Reactor::current()->arm_timer(t, kRevalidateIntervalNs);
}

// The open files limit bounds the connections the target can hold: raise the soft limit
// to the hard one, and say so when max_connections is beyond what remains.
void Target::raise_descriptor_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit want = rl;
    want.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &want) == 0) {
      log::info("open files limit raised from {} to {} (the hard limit)", uint64_t(rl.rlim_cur), uint64_t(want.rlim_cur));
      rl = want;
    }
  }
  const uint64_t cur = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : uint64_t(rl.rlim_cur);
  const uint64_t usable = cur > kSpareDescriptors ? cur - kSpareDescriptors : 0;
  if (cfg_.max_connections == 0 || cfg_.max_connections > usable)
    log::warn("max_connections {} cannot be met: the open files limit is {} (raise it with ulimit -n or "
              "LimitNOFILE=); past about {} connections, new ones fail at accept until some close",
              cfg_.max_connections == 0 ? std::string("(no limit)") : std::to_string(cfg_.max_connections), cur,
              usable);
}

void Target::stop() {
  if (!started_) return;
  started_ = false;
  stopping_.store(true);
  for (auto& rt : reactors_) {
    if (rt->thread.joinable()) rt->thread.join();
  }
  sockets_.clear();
}

// On reactor 0, for a connection just accepted (its fd not yet closed by the caller).
bool Target::over_connection_limit() {
  const uint32_t max = cfg_.max_connections;
  if (max == 0) return false;
  ResourceUsage& u = state_->usage;
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

std::vector<ConnectionInfo> Target::connection_info() {
  std::vector<ConnectionInfo> out;
  if (!started_) return out;
  for (auto& rt : reactors_) {
    auto done = std::make_shared<std::promise<std::vector<ConnectionInfo>>>();
    auto f = done->get_future();
    ReactorThread* raw = rt.get();
    raw->reactor->post([raw, done] {
      std::vector<ConnectionInfo> v;
      raw->connections.collect(v);
      done->set_value(std::move(v));
    });
    if (f.wait_for(std::chrono::seconds(5)) != std::future_status::ready) continue;
    auto v = f.get();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// Asks each reactor for its share (get runs there) and adds the shares up; a reactor that does
// not answer within 5 s is left out rather than waited for.
template <typename Counts, typename Get>
Counts Target::sum_over_reactors(Get get) {
  Counts sum{};
  if (!started_) return sum;
  for (auto& rt : reactors_) {
    auto done = std::make_shared<std::promise<Counts>>();
    auto f = done->get_future();
    ReactorThread* raw = rt.get();
    raw->reactor->post([raw, done, get] { done->set_value(get(raw->connections)); });
    if (f.wait_for(std::chrono::seconds(5)) != std::future_status::ready) continue;
    const Counts c = f.get();
    for (size_t s = 0; s < sum.size(); ++s) sum[s] += c[s];
  }
  return sum;
}

void Target::quiesce() {
  if (!started_) return;
  for (auto& rt : reactors_) {
    // Shared: a reactor that runs the task after a wait that gave up still finds it alive.
    auto done = std::make_shared<std::promise<void>>();
    auto f = done->get_future();
    rt->reactor->post([done] { done->set_value(); });
    while (f.wait_for(std::chrono::seconds(5)) != std::future_status::ready)
      log::warn("control: a reactor has not finished its turn in 5 s; still waiting");
  }
}

RequestStateCounts Target::request_states() {
  return sum_over_reactors<RequestStateCounts>([](const ConnectionSet& c) { return c.request_states(); });
}

RequestStateEntries Target::request_entries() {
  return sum_over_reactors<RequestStateEntries>([](const ConnectionSet& c) { return c.request_entries(); });
}

CommandStateCounts Target::command_states() {
  return sum_over_reactors<CommandStateCounts>([](const ConnectionSet& c) { return c.command_states(); });
}

CommandStateEntries Target::command_entries() {
  return sum_over_reactors<CommandStateEntries>([](const ConnectionSet& c) { return c.command_entries(); });
}

uint16_t Target::port(size_t listener) const {
  const std::vector<Listener> listeners = state_->listeners();
  return listener < listeners.size() ? listeners[listener].port : 0;
}

uint64_t Target::io_count() const {
  uint64_t n = 0;
  for (auto& rt : reactors_) n += rt->connections.ios();
  return n;
}

std::vector<uint64_t> Target::io_counts_per_reactor() const {
  std::vector<uint64_t> out;
  for (auto& rt : reactors_) out.push_back(rt->connections.ios());
  return out;
}

uint64_t Target::flush_count() const {
  uint64_t n = 0;
  for (auto& rt : reactors_) n += rt->connections.flushes();
  return n;
}

uint64_t Target::fua_write_count() const {
  uint64_t n = 0;
  for (auto& rt : reactors_) n += rt->connections.fua_writes();
  return n;
}

uint64_t Target::steps_deferred() const {
  uint64_t n = 0;
  for (auto& rt : reactors_) n += rt->connections.steps_deferred();
  return n;
}

uint64_t Target::most_step_bytes_in_a_turn() const {
  uint64_t most = 0;
  for (auto& rt : reactors_) most = std::max(most, rt->connections.most_step_bytes_in_a_turn());
  return most;
}

std::vector<double> Target::cpu_seconds_per_reactor() const {
  std::vector<double> out;
  for (auto& rt : reactors_) out.push_back(rt->cpu.load(std::memory_order_relaxed));
  return out;
}

std::vector<double> Target::busy_seconds_per_reactor() const {
  std::vector<double> out;
  for (auto& rt : reactors_) out.push_back(double(rt->busy_ns.load(std::memory_order_relaxed)) / 1e9);
  return out;
}

double Target::cpu_seconds() const {
  double s = 0;
  for (auto& rt : reactors_) s += rt->cpu.load(std::memory_order_relaxed);
  return s;
}

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
// raw-tcp: the physical bound for nvtcp on this machine. It moves exactly the bytes of an
// NVMe/TCP read (a 72-byte command capsule in, a 24-byte C2HData header plus the data out)
// over loopback with the same reactor and stream code nvtcp uses, and nothing else: no PDU
// parsing, no request state, no namespace. nvtcp's figures are reported as a ratio to it.
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "histogram.hpp"  // apps/nvtcp: the latency histogram nvtcp perf reports
#include "reactor/reactor.hpp"
#include "reactor/tcp_stream.hpp"

using namespace nvtcp;

namespace {

struct Options {
  uint32_t qd = 32;
  uint32_t req = 72;          // a CapsuleCmd without data
  uint32_t resp = 4096 + 24;  // C2HData header + 4 KiB
  double seconds = 5;
  int server_core = 0, client_core = 1;
  std::string congestion;
  bool json = false;
  bool busy_poll = false;
  bool hybrid_poll = false;
  bool sqpoll = false;
  bool sqpoll_same_core = false;  // pin each side's SQ thread to that side's core
  uint32_t send_zc = 0;
  bool recv_multishot = false;
  bool no_spin_recv = false;
  // SO_SNDBUF / SO_RCVBUF as nvtcp's defaults set them (0 = the kernel autotunes), so that
  // the bound has the same socket queue as the stack it bounds.
  int sndbuf = int(reactor::kDefaultSendBufferBytes), rcvbuf = 0;
  bool ping_pong = false;         // the QD1 limit: plain sockets, both sides spinning on recv()
  std::string address = "127.0.0.1";  // where the server listens (and the client connects)
  std::string server_netns, client_netns;  // network namespaces (ip netns names) of the two sides

  reactor::ReactorOptions reactor_options(int core) const {
    reactor::ReactorOptions r = reactor::ReactorOptions::defaults();
    r.poll = busy_poll ? PollMode::Busy : hybrid_poll ? PollMode::Hybrid : PollMode::Interrupt;
    r.sqpoll = sqpoll;
    r.sq_thread_cpu = sqpoll_same_core ? core : -1;
    r.send_zc_threshold = send_zc;
    r.recv_multishot = recv_multishot;
    r.spin_recv = !no_spin_recv;
    return r;
  }
};

// Moves the calling thread into the network namespace `ip netns add NAME` made, so that the
// sockets it creates from now on live there (a namespace per side: a veth pair in place of
// loopback, as bench/run --topology veth sets up).
bool enter_netns(const std::string& name) {
  if (name.empty()) return true;
  const std::string path = "/var/run/netns/" + name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
    fmt::print(stderr, "raw-tcp: cannot enter network namespace {}: {}\n", name, strerror(errno));
    if (fd >= 0) ::close(fd);
    return false;
  }
  ::close(fd);
  return true;
}

void pin(int core) {
  if (core < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

double thread_cpu() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// Server side: for every whole request received, send one response from a shared buffer.
struct Server : reactor::StreamOwner {
  const Options& o;
  std::unique_ptr<reactor::TcpStream> s;
  uint32_t partial = 0;
  std::vector<uint8_t> payload;
  bool closed = false;
  Server(const Options& opt, reactor::Reactor& r, int fd) : o(opt), payload(opt.resp, 0x5A) {
    s = std::make_unique<reactor::TcpStream>(r, fd, this);
    s->start();
  }
  void on_receive(const uint8_t*, size_t len) override {
    partial += uint32_t(len);
    while (partial >= o.req) {
      partial -= o.req;
      s->send(payload.data(), payload.size());
    }
  }
  void on_closed(int) override { closed = true; }
};

// Client side: keeps qd requests outstanding; responses arrive in order.
struct Client : reactor::StreamOwner {
  const Options& o;
  std::unique_ptr<reactor::TcpStream> s;
  std::vector<uint8_t> req;
  uint64_t rx = 0;
  std::deque<uint64_t> starts;
  LatencyHistogram lat;
  uint64_t done = 0;
  bool stopping = false, closed = false;
  Client(const Options& opt, reactor::Reactor& r, int fd) : o(opt), req(opt.req, 0x04) {
    s = std::make_unique<reactor::TcpStream>(r, fd, this);
    s->start();
  }
  void issue() {
    starts.push_back(reactor::monotonic_ns());
    s->send(req.data(), req.size());
  }
  void on_receive(const uint8_t*, size_t len) override {
    rx += len;
    while (rx >= o.resp) {
      rx -= o.resp;
      uint64_t now = reactor::monotonic_ns();
      lat.record(now - starts.front());
      starts.pop_front();
      ++done;
      if (!stopping) issue();
    }
  }
  void on_closed(int) override { closed = true; }
};

}  // namespace

// Moves n bytes, spinning: non-blocking send()/recv() in a loop, no io_uring, no sleeping.
bool spin_send(int fd, const uint8_t* p, size_t n, const std::atomic<bool>& stop) {
  while (n && !stop.load(std::memory_order_relaxed)) {
    const ssize_t k = ::send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k > 0) p += k, n -= size_t(k);
    else if (k < 0 && errno != EAGAIN && errno != EINTR) return false;
  }
  return n == 0;
}
bool spin_recv(int fd, uint8_t* p, size_t n, const std::atomic<bool>& stop) {
  while (n && !stop.load(std::memory_order_relaxed)) {
    const ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) p += k, n -= size_t(k);
    else if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) return false;
  }
  return n == 0;
}

// The QD1 limit on this machine and pinning: one request out, its response back, both sides
// spinning on non-blocking recv() (no reactor, no io_uring). A storage stack's QD1 latency
// can only approach this round trip.
int ping_pong(const Options& o, int lfd, const reactor::Endpoint& ep) {
  std::atomic<bool> stop{false};
  std::atomic<double> server_cpu{0};
  std::thread server([&] {
    pin(o.server_core);
    int fd = -1;  // the listening socket is non-blocking
    while (fd < 0 && !stop.load(std::memory_order_relaxed)) fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    reactor::apply_socket_options(fd, {true, o.sndbuf, o.rcvbuf, o.congestion});
    std::vector<uint8_t> req(o.req), resp(o.resp, 0x5a);
    const double c0 = thread_cpu();
    while (spin_recv(fd, req.data(), req.size(), stop) && spin_send(fd, resp.data(), resp.size(), stop)) {
    }
    server_cpu = thread_cpu() - c0;
    ::close(fd);
  });
  pin(o.client_core);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  reactor::apply_socket_options(fd, {true, o.sndbuf, o.rcvbuf, o.congestion});
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&ep.addr), ep.len) < 0) {
    fmt::print(stderr, "raw-tcp: connect: {}\n", strerror(errno));
    stop = true;
    server.join();
    return 1;
  }
  std::vector<uint8_t> req(o.req, 0xa5), resp(o.resp);
  LatencyHistogram lat;
  uint64_t n = 0;
  const double c0 = thread_cpu();
  const uint64_t t0 = reactor::monotonic_ns(), end = t0 + uint64_t(o.seconds * 1e9);
  // A watchdog ends a round trip that never completes (a server that is gone).
  std::atomic<bool> give_up{false};
  std::thread watchdog([&] {
    while (!stop.load() && reactor::monotonic_ns() < end + 2'000'000'000ull)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    give_up = true;
  });
  for (uint64_t now = t0; now < end;) {
    if (!spin_send(fd, req.data(), req.size(), give_up) || !spin_recv(fd, resp.data(), resp.size(), give_up)) break;
    const uint64_t t = reactor::monotonic_ns();
    lat.record(t - now);
    now = t;
    ++n;
  }
  const double secs = double(reactor::monotonic_ns() - t0) / 1e9;
  const double client_cpu = thread_cpu() - c0;
  stop = true;
  ::shutdown(fd, SHUT_RDWR);
  server.join();
  watchdog.join();
  ::close(fd);
  const double iops = double(n) / secs;
  const uint32_t data = o.resp - 24;
  if (o.json) {
    nlohmann::json j{{"iops", iops},
                     {"gbps", iops * data * 8 / 1e9},
                     {"lat_avg_us", lat.mean_ns() / 1000},
                     {"lat_p50_us", lat.percentile_ns(0.5) / 1000},
                     {"lat_p99_us", lat.percentile_ns(0.99) / 1000},
                     {"lat_p999_us", lat.percentile_ns(0.999) / 1000},
                     {"client_cpu_s_per_mio", n ? client_cpu / (double(n) / 1e6) : 0},
                     {"server_cpu_s_per_mio", n ? server_cpu / (double(n) / 1e6) : 0},
                     {"queue_depth", 1},
                     {"io_size", data},
                     {"mode", "ping-pong"}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("raw-tcp ping-pong: {}-byte requests, {}-byte responses, {:.1f} s, both sides spinning on recv()\n",
               o.req, o.resp, secs);
    fmt::print("  round trips/s {:.0f}  latency us avg {:.1f} p50 {:.1f} p99 {:.1f}\n", iops, lat.mean_ns() / 1000,
               lat.percentile_ns(0.5) / 1000, lat.percentile_ns(0.99) / 1000);
  }
  return 0;
}

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"raw-tcp: the loopback bound for an NVMe/TCP read, without NVMe"};
  app.add_option("-q,--queue-depth", o.qd, "requests outstanding");
  app.add_option("--request", o.req, "bytes per request (72 = a CapsuleCmd)");
  app.add_option("--response", o.resp, "bytes per response (24 + data)");
  app.add_option("-o,--io-size", [&o](const std::vector<std::string>& v) {
    o.resp = 24 + uint32_t(std::stoul(v[0]));
    return true;
  }, "data bytes per response (sets --response to 24 + this)");
  app.add_option("-t,--time", o.seconds, "seconds");
  app.add_option("--server-core", o.server_core, "core for the server thread (-1: unpinned)");
  app.add_option("--client-core", o.client_core, "core for the client thread (-1: unpinned)");
  app.add_option("--tcp-congestion", o.congestion, "congestion control per socket");
  app.add_flag("--json", o.json, "print one JSON object");
  app.add_flag("--busy-poll", o.busy_poll, "spin instead of sleeping in io_uring (both sides)");
  app.add_flag("--hybrid-poll", o.hybrid_poll, "spin while busy, sleep after 50 us idle (both sides)");
  app.add_flag("--sqpoll", o.sqpoll, "an io_uring SQ thread per side");
  app.add_flag("--sqpoll-same-core", o.sqpoll_same_core, "pin each SQ thread to its side's core");
  app.add_option("--send-zc", o.send_zc, "zero-copy sends of segments of at least this many bytes (0: off)");
  app.add_flag("--recv-multishot", o.recv_multishot, "multishot receive into a provided buffer ring");
  app.add_flag("--no-spin-recv", o.no_spin_recv, "busy/hybrid polling: receive through io_uring only, never a polled recv()");
  app.add_option("--sndbuf", o.sndbuf, "SO_SNDBUF bytes on both sockets (default: nvtcp's, 512 KiB; 0: the kernel autotunes)");
  app.add_option("--rcvbuf", o.rcvbuf, "SO_RCVBUF bytes on both sockets (0: kernel default)");
  app.add_flag("--ping-pong", o.ping_pong,
               "the QD1 limit: one request at a time over plain sockets, both sides spinning on recv()");
  app.add_option("--address", o.address, "the server's address (default 127.0.0.1)");
  app.add_option("--server-netns", o.server_netns, "run the server side in this network namespace (ip netns)");
  app.add_option("--client-netns", o.client_netns, "run the client side in this network namespace (ip netns)");
  CLI11_PARSE(app, argc, argv);

  reactor::Endpoint ep;
  std::string err;
  if (!reactor::resolve(o.address, 0, ep, err)) {
    fmt::print(stderr, "raw-tcp: --address: {}\n", err);
    return 2;
  }
  // The listening socket is made in the server's namespace (its accepted connections stay
  // there); every socket made after the switch, the client's, in the client's.
  if (!enter_netns(o.server_netns)) return 1;
  int lfd = reactor::listen_on(ep);
  if (lfd < 0) {
    fmt::print(stderr, "raw-tcp: listen: {}\n", strerror(-lfd));
    return 1;
  }
  if (!enter_netns(o.client_netns)) return 1;
  sockaddr_storage ss{};
  socklen_t sl = sizeof(ss);
  getsockname(lfd, reinterpret_cast<sockaddr*>(&ss), &sl);
  ep.addr = ss;
  ep.len = sl;
  if (o.ping_pong) {
    const int rc = ping_pong(o, lfd, ep);
    close(lfd);
    return rc;
  }

  std::atomic<bool> stop{false};
  std::atomic<double> server_cpu{0};
  std::thread server([&] {
    pin(o.server_core);
    reactor::Reactor r(4096, o.reactor_options(o.server_core));
    int fd = -1;
    while (fd < 0 && !stop) fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    reactor::apply_socket_options(fd, {true, o.sndbuf, o.rcvbuf, o.congestion});
    Server srv(o, r, fd);
    double c0 = thread_cpu();
    while (!stop && !srv.closed) r.run_once(10000);
    server_cpu = thread_cpu() - c0;
    srv.s->close();
    while (!srv.closed) r.run_once(10000);
  });

  pin(o.client_core);
  reactor::Reactor r(4096, o.reactor_options(o.client_core));
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  reactor::apply_socket_options(fd, {true, o.sndbuf, o.rcvbuf, o.congestion});
  if (::connect(fd, reinterpret_cast<sockaddr*>(&ep.addr), ep.len) < 0) {
    fmt::print(stderr, "raw-tcp: connect: {}\n", strerror(errno));
    return 1;
  }
  Client cl(o, r, fd);
  double c0 = thread_cpu();
  uint64_t t0 = reactor::monotonic_ns();
  for (uint32_t i = 0; i < o.qd; ++i) cl.issue();
  uint64_t end = t0 + uint64_t(o.seconds * 1e9);
  while (reactor::monotonic_ns() < end && !cl.closed) r.run_once(1000);
  double secs = double(reactor::monotonic_ns() - t0) / 1e9;
  double client_cpu = thread_cpu() - c0;
  uint64_t n = cl.done;
  cl.stopping = true;
  stop = true;
  cl.s->close();
  while (!cl.closed) r.run_once(10000);
  server.join();
  close(lfd);

  double iops = double(n) / secs;
  uint32_t data = o.resp - 24;
  if (o.json) {
    nlohmann::json j{{"iops", iops},
                     {"gbps", iops * data * 8 / 1e9},
                     {"lat_avg_us", cl.lat.mean_ns() / 1000},
                     {"lat_p50_us", cl.lat.percentile_ns(0.5) / 1000},
                     {"lat_p99_us", cl.lat.percentile_ns(0.99) / 1000},
                     {"lat_p999_us", cl.lat.percentile_ns(0.999) / 1000},
                     {"client_cpu_s_per_mio", n ? client_cpu / (double(n) / 1e6) : 0},
                     {"server_cpu_s_per_mio", n ? server_cpu / (double(n) / 1e6) : 0},
                     {"queue_depth", o.qd},
                     {"io_size", data}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("raw-tcp: {}-byte requests, {}-byte responses, QD {}, {:.1f} s\n", o.req, o.resp, o.qd, secs);
    fmt::print("  IOPS {:.0f}  Gb/s {:.2f}  latency us avg {:.1f} p50 {:.1f} p99 {:.1f}\n", iops,
               iops * data * 8 / 1e9, cl.lat.mean_ns() / 1000, cl.lat.percentile_ns(0.5) / 1000,
               cl.lat.percentile_ns(0.99) / 1000);
    fmt::print("  CPU s per million: client {:.3f} server {:.3f}\n", n ? client_cpu / (double(n) / 1e6) : 0,
               n ? server_cpu.load() / (double(n) / 1e6) : 0);
  }
  return 0;
}

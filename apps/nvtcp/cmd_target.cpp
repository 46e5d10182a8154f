// SPDX-License-Identifier: Apache-2.0
// `nvtcp target`: serve namespaces until SIGINT/SIGTERM.
#include <signal.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/block_device.hpp"
#include "commands.hpp"
#include "control/metrics_server.hpp"
#include "control/rpc_server.hpp"
#include "control/target_metrics.hpp"
#include "control/target_methods.hpp"
#include "target_tcp/target.hpp"
#include "util/log.hpp"

namespace nvtcp::app {

namespace {
constexpr const char* kDefaultRpcSocket = "/run/nvtcp/target.sock";

// SIGUSR1: what the target holds now, for an operator (kill -USR1) or a test. Requests are
// counted per state by their connections (asked on each reactor), the transport's states and
// their commands' apart, so a command stuck waiting for memory, for H2C data, a fence or the
// device shows here.
template <typename State, typename Counts, typename Name>
std::string per_state(const Counts& counts, Name name) {
  std::string out;
  for (size_t i = 0; i < counts.size(); ++i) out += fmt::format("{}{} {}", i ? ", " : "", name(State(i)), counts[i]);
  return out;
}

void log_statistics(target::Target& t) {
  using R = target::TcpRequest::State;
  using C = target::Command::State;
  const std::string requests = per_state<R>(t.request_states(), target::request_state_name);
  const std::string commands = per_state<C>(t.command_states(), target::command_state_name);
  // Where requests went since start: how often they waited for their turn, memory, their data,
  // a fence, the device... (the states they only pass through are left out).
  const target::RequestStateEntries request_entries = t.request_entries();
  const target::CommandStateEntries command_entries = t.command_entries();
  std::string waits;
  for (R s : {R::Queued, R::NeedBuffer, R::AwaitingH2C})
    waits += fmt::format("{}{} {}", waits.empty() ? "" : ", ", target::request_state_name(s), request_entries[size_t(s)]);
  for (C s : {C::AwaitingFusedPartner, C::AwaitingFence, C::AwaitingQos, C::AwaitingTurn, C::InDevice, C::OnWorker,
              C::BetweenSteps, C::AwaitingDurable, C::HeldAer, C::HeldAbort})
    waits += fmt::format(", {} {}", target::command_state_name(s), command_entries[size_t(s)]);
  log::info("target statistics: {} connections, {} I/O commands ({} Flush, {} FUA writes), {} buffer bytes; "
            "requests: {}; commands: {}; entered since start: {}",
            t.live_connections(), t.io_count(), t.flush_count(), t.fua_write_count(), t.buffer_bytes(), requests,
            commands, waits);
}
}  // namespace

namespace {
struct TargetArgs {
  std::string config;
  std::vector<std::string> listen;
  std::string nqn = "nqn.2026-11.io.nvtcp:default";
  std::vector<std::string> null_sizes, ram_sizes, files, rbds;
  std::string ceph_conf, ceph_user;
  uint32_t block_size = 512;
  // Not given: the configuration file's value (or the default) stays.
  std::optional<unsigned> cores;
  std::vector<int> cpus;
  std::optional<uint16_t> discovery_port;
  bool no_hdgst = false, no_ddgst = false;
  bool ana_reporting = false;
  std::string tcp_congestion;
  std::optional<uint32_t> in_capsule;
  std::optional<uint32_t> max_h2c;
  std::vector<std::string> hosts;
  bool busy_poll = false;
  std::string poll;
  bool sqpoll = false;
  int sqpoll_cpu = -2;            // -2: not given
  uint32_t sqpoll_idle_ms = 0;    // 0: not given
  std::string send_zc;
  bool recv_multishot = false;
  bool no_spin_recv = false;
  std::string ready_file;
  std::optional<std::string> rpc_socket;  // not given: kDefaultRpcSocket, if free
  std::string metrics_listen;             // empty: no metrics endpoint
  // Resource limits; empty / 0 = keep the configuration's value.
  uint32_t max_connections = 0;
  bool no_connection_limit = false;
  std::string max_buffer_memory, max_connection_buffer_memory, max_host_buffer_memory, max_send_queue;
  std::string send_buffer_budget, address_send_buffer;
  std::string socket_buffer;
  std::string send_buffer;
  uint32_t icreq_timeout_ms = 0;
  int64_t discovery_kato_ms = -1;
  int64_t send_timeout_ms = -1;
  uint32_t max_connections_per_address = 0, max_connections_per_host = 0;
  int64_t h2c_data_timeout_ms = -1;  // -1: not given
  int64_t max_registrants_per_namespace = -1;  // -1: not given (finalize_config checks the range)
};

int run_target(const TargetArgs& a) {
  target::TargetConfig cfg;
  if (!a.config.empty()) {
    if (std::string err = target::load_config_file(a.config, cfg); !err.empty()) {
      fmt::print(stderr, "nvtcp target: {}\n", err);
      return 2;
    }
  }
  for (const auto& l : a.listen) {
    target::ListenerConfig lc;
    if (!target::parse_listener(l, lc)) {
      fmt::print(stderr, "nvtcp target: --listen '{}' is not ADDRESS:PORT\n", l);
      return 2;
    }
    cfg.listeners.push_back(lc);
  }
  if (!a.null_sizes.empty() || !a.ram_sizes.empty() || !a.files.empty() || !a.rbds.empty()) {
    target::SubsystemConfig sc;
    sc.nqn = a.nqn;
    sc.allow_any_host = a.hosts.empty();
    sc.hosts = a.hosts;
    sc.ana_reporting = a.ana_reporting;
    auto add = [&](const std::string& type, const std::string& size_or_path) -> bool {
      target::NamespaceConfig nc;
      nc.type = type;
      nc.block_size = a.block_size;
      if (type == "rbd") {
        // POOL/IMAGE, on the cluster --ceph-conf names as --ceph-user
        const size_t slash = size_or_path.find('/');
        if (slash == std::string::npos || slash == 0 || slash + 1 == size_or_path.size()) return false;
        nc.rbd.pool = size_or_path.substr(0, slash);
        nc.rbd.image = size_or_path.substr(slash + 1);
        nc.rbd.config_file = a.ceph_conf;
        nc.rbd.user = a.ceph_user;
      } else if (type == "file") {
        // PATH or PATH,SIZE
        size_t comma = size_or_path.find(',');
        nc.path = size_or_path.substr(0, comma);
        if (comma != std::string::npos && !backend::parse_size(size_or_path.substr(comma + 1), nc.size)) return false;
      } else if (!backend::parse_size(size_or_path, nc.size)) {
        return false;
      }
      sc.namespaces.push_back(nc);
      return true;
    };
    for (const auto& s : a.null_sizes)
      if (!add("null", s)) return fmt::print(stderr, "nvtcp target: bad size '{}'\n", s), 2;
    for (const auto& s : a.ram_sizes)
      if (!add("ram", s)) return fmt::print(stderr, "nvtcp target: bad size '{}'\n", s), 2;
    for (const auto& s : a.files)
      if (!add("file", s)) return fmt::print(stderr, "nvtcp target: bad file spec '{}'\n", s), 2;
    for (const auto& s : a.rbds)
      if (!add("rbd", s)) return fmt::print(stderr, "nvtcp target: --rbd '{}' is not POOL/IMAGE\n", s), 2;
    cfg.subsystems.push_back(sc);
  }
  // Nothing to serve yet is an empty start when the control socket is named: the target waits
  // to be configured over JSON-RPC, as nvmf_tgt does for an orchestrator (rpc.py, ceph-nvmeof).
  const bool rpc_named = a.rpc_socket && *a.rpc_socket != "none" && !a.rpc_socket->empty();
  const bool empty_start = cfg.subsystems.empty();
  if (empty_start && !rpc_named) {
    fmt::print(stderr, "nvtcp target: nothing to serve: give --null SIZE, --ram SIZE, --file PATH, --rbd POOL/IMAGE or "
                       "--config FILE, or --rpc-socket PATH to start empty and be configured over JSON-RPC\n");
    return 2;
  }
  // Options given on the command line win over the configuration file; the others leave it be.
  if (a.cores) cfg.cores = *a.cores;
  if (!a.cpus.empty()) {
    cfg.cpus = a.cpus;
    cfg.cores = std::max<unsigned>(cfg.cores, unsigned(a.cpus.size()));
  }
  if (a.discovery_port) cfg.discovery_port = *a.discovery_port;
  if (a.no_hdgst) cfg.allow_hdgst = false;
  if (a.no_ddgst) cfg.allow_ddgst = false;
  if (!a.tcp_congestion.empty()) cfg.tcp_congestion = a.tcp_congestion;
  if (a.in_capsule) cfg.in_capsule_data = *a.in_capsule;
  if (a.max_connections) cfg.max_connections = a.max_connections;
  if (a.no_connection_limit) cfg.max_connections = 0;
  if (a.icreq_timeout_ms) cfg.icreq_timeout_ms = a.icreq_timeout_ms;
  if (a.discovery_kato_ms >= 0) cfg.discovery_kato_ms = uint32_t(a.discovery_kato_ms);
  if (a.send_timeout_ms >= 0) cfg.send_timeout_ms = uint32_t(a.send_timeout_ms);
  if (a.max_connections_per_address) cfg.max_connections_per_address = a.max_connections_per_address;
  if (a.max_connections_per_host) cfg.max_connections_per_host = a.max_connections_per_host;
  if (a.h2c_data_timeout_ms >= 0) cfg.h2c_data_timeout_ms = uint32_t(a.h2c_data_timeout_ms);
  if (a.max_registrants_per_namespace >= 0)
    cfg.max_registrants_per_namespace = uint32_t(std::min<int64_t>(a.max_registrants_per_namespace, UINT32_MAX));
  for (auto [text, field, name] : {std::tuple{&a.max_buffer_memory, &cfg.max_buffer_memory, "--max-buffer-memory"},
                                   std::tuple{&a.max_connection_buffer_memory, &cfg.max_connection_buffer_memory,
                                              "--max-connection-buffer-memory"},
                                   std::tuple{&a.max_host_buffer_memory, &cfg.max_host_buffer_memory,
                                              "--max-host-buffer-memory"},
                                   std::tuple{&a.max_send_queue, &cfg.max_send_queue_bytes, "--max-send-queue"},
                                   std::tuple{&a.send_buffer_budget, &cfg.send_buffer_budget_bytes,
                                              "--send-buffer-budget"},
                                   std::tuple{&a.address_send_buffer, &cfg.address_send_buffer_bytes,
                                              "--address-send-buffer"},
                                   std::tuple{&a.socket_buffer, &cfg.socket_buffer_bytes, "--socket-buffer"}}) {
    if (text->empty()) continue;
    if (!backend::parse_size(*text, *field)) {
      fmt::print(stderr, "nvtcp target: {} '{}' is not a size (e.g. 512M, or 0 for no limit)\n", name, *text);
      return 2;
    }
  }
  if (!a.send_buffer.empty()) {
    uint64_t n = 0;
    if (!backend::parse_size(a.send_buffer, n)) {
      fmt::print(stderr, "nvtcp target: --send-buffer '{}' is not a size (e.g. 512K, or 0 to autotune)\n", a.send_buffer);
      return 2;
    }
    cfg.send_buffer_bytes = n;
  }
  if (a.max_h2c) cfg.max_h2c_data = *a.max_h2c;
  if (!a.poll.empty()) cfg.poll = a.poll;
  if (a.busy_poll) cfg.poll = "busy";
  if (a.sqpoll) cfg.sqpoll = true;
  if (a.sqpoll_cpu != -2) cfg.sqpoll_cpu = a.sqpoll_cpu;
  if (a.sqpoll_idle_ms) cfg.sqpoll_idle_ms = a.sqpoll_idle_ms;
  if (!a.send_zc.empty()) {
    uint64_t v = 0;
    if (!backend::parse_size(a.send_zc, v) || v > (1u << 30)) {
      fmt::print(stderr, "nvtcp target: --send-zc '{}' is not a size (e.g. 64K, or 0 for off)\n", a.send_zc);
      return 2;
    }
    cfg.send_zc_threshold = uint32_t(v);
  }
  if (a.recv_multishot) cfg.recv_multishot = true;
  if (a.no_spin_recv) cfg.spin_recv = false;

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);  // log the statistics and carry on
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // reactor threads inherit the mask

  // A setting out of its range is the user's to fix (exit 2), like a bad flag; what fails
  // after this (a port taken, a file that cannot be opened) is exit 1.
  if (std::string err = target::finalize_config(cfg); !err.empty()) {
    fmt::print(stderr, "nvtcp target: {}\n", err);
    return 2;
  }
  target::Target t(cfg);
  if (std::string err = t.start(); !err.empty()) {
    fmt::print(stderr, "nvtcp target: {}\n", err);
    return 1;
  }
  // What a completed write is worth, per namespace, and once for all the namespaces whose
  // data does not outlive the process or the machine.
  std::vector<std::string> volatile_ns;
  for (const auto& s : t.state().subsystems()) {
    for (const auto& ns : s->namespaces()) {
      const backend::BlockDevice& d = *ns->device;
      log::info("{} namespace {}: {} {} bytes, {}-byte blocks; {}{}", s->nqn(), ns->nsid, d.kind(), d.size_bytes(),
                ns->block_size, backend::persistence_name(d.persistence()),
                d.volatile_write_cache() ? " (volatile write cache reported, on)" : "");
      if (d.persistence() == backend::Persistence::Process || d.persistence() == backend::Persistence::Machine)
        volatile_ns.push_back(fmt::format("{} ({}{})", ns->nsid, d.kind(),
                                          d.persistence() == backend::Persistence::Machine ? " on tmpfs" : ""));
    }
  }
  if (!volatile_ns.empty())
    log::warn("namespace(s) {} keep data in memory only: RAM namespaces lose it when the target exits, files on "
              "tmpfs when the machine stops; Flush and FUA cannot make it durable",
              fmt::join(volatile_ns, ", "));
  // The control plane. The default socket is a convenience: a second target on the machine
  // finds it taken and runs without one (with a warning); a path given is required.
  control::Dispatcher methods;
  control::add_target_methods(methods, t, NVTCP_VERSION);
  control::RpcServer rpc(methods);
  const std::string rpc_path = a.rpc_socket.value_or(kDefaultRpcSocket);
  if (rpc_path != "none" && !rpc_path.empty()) {
    if (std::string err = rpc.start(rpc_path); !err.empty()) {
      if (a.rpc_socket) {
        fmt::print(stderr, "nvtcp target: {}\n", err);
        t.stop();
        return 1;
      }
      log::warn("no RPC socket: {} (give --rpc-socket PATH for one)", err);
    } else {
      log::info("JSON-RPC on {} (nvtcp rpc, or SPDK's rpc.py -s {})", rpc_path, rpc_path);
    }
  }
  if (empty_start)
    log::info("no subsystem yet{}: waiting to be configured on {} (nvmf_create_subsystem, "
              "nvmf_subsystem_add_listener, ...)",
              t.state().listeners().empty() ? " and no listener" : "", rpc_path);
  // Prometheus' scrapes: their own thread, like the RPC socket's; the reactors only answer
  // the connection count it asks them for.
  control::MetricsServer metrics([&t] { return control::render_target_metrics(t.metrics()); });
  if (!a.metrics_listen.empty()) {
    if (std::string err = metrics.start(a.metrics_listen); !err.empty()) {
      fmt::print(stderr, "nvtcp target: {}\n", err);
      rpc.stop();
      t.stop();
      return 1;
    }
    log::info("Prometheus metrics on http://{}/metrics", metrics.address());
  }
  if (!a.ready_file.empty()) {
    // Scripts wait for this file: its content is the port of the first listener (0 when an
    // empty start has none yet).
    if (FILE* f = std::fopen(a.ready_file.c_str(), "w")) {
      std::fprintf(f, "%u\n", unsigned(t.port(0)));
      std::fclose(f);
    }
  }
  int sig = 0;
  while (sigwait(&set, &sig) == 0 && sig == SIGUSR1) log_statistics(t);
  log::info("signal {}: shutting down", sig);
  metrics.stop();
  rpc.stop();
  t.stop();
  uint64_t ios = t.io_count();
  log::info("target: {} I/O commands ({} Flush, {} FUA writes), {:.2f} CPU s in {} reactor thread(s), "
            "{:.3f} CPU s per million I/Os",
            ios, t.flush_count(), t.fua_write_count(), t.cpu_seconds(), cfg.cores,
            ios ? t.cpu_seconds() / (double(ios) / 1e6) : 0.0);
  return 0;
}
}  // namespace

void add_target_command(CLI::App& app, int& rc) {
  auto a = std::make_shared<TargetArgs>();
  CLI::App* c = app.add_subcommand("target", "Serve NVMe namespaces over NVMe/TCP");
  c->add_option("--config", a->config, "JSON configuration file (subsystems, namespaces, listeners)");
  c->add_option("--listen,-l", a->listen, "ADDRESS:PORT to listen on (default 127.0.0.1:4420; repeatable)");
  c->add_option("--nqn", a->nqn, "subsystem NQN for namespaces given on the command line");
  c->add_option("--null", a->null_sizes, "add a NULL namespace of SIZE (e.g. 1T): reads zeros, drops writes");
  c->add_option("--ram", a->ram_sizes, "add a RAM namespace of SIZE (e.g. 1G)");
  c->add_option("--file", a->files, "add a file or block-device namespace: PATH[,SIZE]");
  c->add_option("--rbd", a->rbds, "add a Ceph RBD image namespace: POOL/IMAGE");
  c->add_option("--ceph-conf", a->ceph_conf, "the Ceph configuration for --rbd (default: librados' search path)");
  c->add_option("--ceph-user", a->ceph_user, "the Ceph client ID for --rbd (default: admin)");
  c->add_option("--block-size", a->block_size, "namespace block size: 512 or 4096")->check(CLI::IsMember({512, 4096}));
  c->add_option("--cores", a->cores, "reactor threads (default 1)")->check(CLI::Range(1, 256));
  c->add_option("--cpus", a->cpus, "pin reactor i to the i-th CPU of this list (e.g. --cpus 0)")->delimiter(',');
  c->add_option("--discovery-port", a->discovery_port, "discovery service port (default 8009; 0: only on the listeners)");
  c->add_option("--allow-host", a->hosts, "host NQN allowed to connect (repeatable; default: any host)");
  c->add_flag("--ana-reporting", a->ana_reporting,
              "the command line's subsystem reports ANA: each listener's state per ANA group (all optimized at "
              "start), changed by RPC nvmf_subsystem_listener_set_ana_state");
  c->add_flag("--no-hdgst", a->no_hdgst, "refuse header digests");
  c->add_flag("--no-ddgst", a->no_ddgst, "refuse data digests");
  c->add_option("--tcp-congestion", a->tcp_congestion, "TCP congestion control per socket (e.g. cubic)");
  c->add_option("--in-capsule", a->in_capsule, "I/O queue in-capsule data bytes (IOCCSZ - 64; default 8192)");
  c->add_option("--max-h2c-data", a->max_h2c, "MAXH2CDATA bytes announced in ICResp (default 131072)");
  c->add_option("--max-connections", a->max_connections,
                "live TCP connections at most (default 4096); more are closed right after accept");
  c->add_option("--max-connections-per-address", a->max_connections_per_address,
                "live TCP connections from one source address (default: no limit)");
  c->add_option("--max-connections-per-host", a->max_connections_per_host,
                "queues (admin and I/O) of one host NQN (default: no limit); more Connects get Controller Busy");
  c->add_flag("--no-connection-limit", a->no_connection_limit, "no limit on live TCP connections");
  c->add_option("--max-buffer-memory", a->max_buffer_memory,
                "data buffer memory for all connections (default 2G; 0 = no limit); commands wait above it");
  c->add_option("--max-host-buffer-memory", a->max_host_buffer_memory,
                "data buffer memory per host NQN, all its connections together (default 512M; 0 = no limit)");
  c->add_option("--max-connection-buffer-memory", a->max_connection_buffer_memory,
                "data buffer memory per connection (default 256M; 0 = no limit)");
  c->add_option("--socket-buffer", a->socket_buffer,
                "SO_RCVBUF and SO_SNDBUF of each connection, fixed (e.g. 2M; default: receive 4M, send 512K)");
  c->add_option("--send-buffer", a->send_buffer,
                "SO_SNDBUF alone (0: the kernel autotunes it; default: --socket-buffer if given, else 512K)");
  c->add_option("--max-send-queue", a->max_send_queue,
                "bytes queued for one connection's socket above which its new commands wait (default 8M; 0 = no limit)");
  c->add_option("--send-buffer-budget", a->send_buffer_budget,
                "SO_SNDBUF of all connections together; over it every connection's is cut (default 0: a quarter "
                "of tcp_mem's pressure point)");
  c->add_option("--address-send-buffer", a->address_send_buffer,
                "SO_SNDBUF of one source address's connections together; over it they are cut, then its newest "
                "refused (default 0: a quarter of the target's budget)");
  c->add_option("--icreq-timeout-ms", a->icreq_timeout_ms, "close connections that send no ICReq within this (default 10000)")
      ->check(CLI::Range(1, 3600000));
  c->add_option("--send-timeout-ms", a->send_timeout_ms,
                "close a connection whose queued responses the host has not read for this long (default 30000; 0: never)")
      ->check(CLI::Range(int64_t(0), int64_t(86400000)));
  c->add_option("--discovery-kato-ms", a->discovery_kato_ms,
                "keep-alive timeout forced on discovery controllers that ask for none (default 120000; 0: none)")
      ->check(CLI::Range(int64_t(0), int64_t(3600000)));
  c->add_option("--max-registrants-per-namespace", a->max_registrants_per_namespace,
                "reservation registrants per namespace (default 256, 1..65535); a Register from one more host "
                "gets Internal Error")
      ->check(CLI::Range(int64_t(1), int64_t(65535)));
  c->add_option("--h2c-data-timeout-ms", a->h2c_data_timeout_ms,
                "close a connection whose write has waited this long for requested H2CData (default 30000; 0: never)")
      ->check(CLI::Range(int64_t(0), int64_t(86400000)));
  c->add_option("--poll", a->poll,
                "hybrid (default: spin while busy, sleep after 50 us idle), busy (always spin) or interrupt (always "
                "sleep in io_uring: for servers shared with other work)")
      ->check(CLI::IsMember({"interrupt", "busy", "hybrid"}));
  c->add_flag("--busy-poll", a->busy_poll, "same as --poll busy");
  c->add_flag("--sqpoll", a->sqpoll, "an io_uring SQ thread per reactor submits, so a polling reactor makes no syscalls");
  c->add_option("--sqpoll-cpu", a->sqpoll_cpu, "pin the SQ threads to this CPU (default: unpinned)")
      ->check(CLI::Range(-1, 4095));
  c->add_option("--sqpoll-idle-ms", a->sqpoll_idle_ms, "SQ thread sleeps after this many ms without work (default 2)")
      ->check(CLI::Range(1, 100000));
  c->add_option("--send-zc", a->send_zc,
                "send segments of at least SIZE bytes (e.g. 64K) with io_uring zero-copy sends (default 0: off)");
  c->add_flag("--recv-multishot", a->recv_multishot,
              "receive with one multishot recv per connection into a shared provided-buffer ring");
  c->add_flag("--no-spin-recv", a->no_spin_recv,
              "busy/hybrid polling: wait for bytes through io_uring only, never with a polled recv()");
  c->add_option("--ready-file", a->ready_file, "write the listening port here once serving");
  c->add_option("--rpc-socket", a->rpc_socket,
                fmt::format("JSON-RPC control socket, owner-only (default {} when free; none: no socket)",
                            kDefaultRpcSocket));
  c->add_option("--metrics-listen", a->metrics_listen,
                "serve Prometheus metrics (GET /metrics) over HTTP on ADDRESS:PORT, e.g. 127.0.0.1:9100 or "
                "[::1]:9100 (port 0: any free one, logged)");
  c->callback([a, &rc] { rc = run_target(*a); });
}

}  // namespace nvtcp::app

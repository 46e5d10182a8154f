// SPDX-License-Identifier: Apache-2.0
// `nvtcp engine`: the offload engine, until SIGINT/SIGTERM. It connects the remote
// controllers and serves local applications (trtype:engine) on a UNIX socket.
#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <set>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "control/metrics_server.hpp"
#include "engine/engine.hpp"
#include "engine/engine_metrics.hpp"
#include "util/log.hpp"

namespace nvtcp::app {

namespace {
struct EngineArgs {
  std::string config;
  std::string socket;
  std::vector<std::string> controllers;
  std::vector<int> cpus;
  uint32_t queue_depth = 0;
  uint32_t max_queue_pairs = 0;
  int64_t idle_spin_us = -2;  // -2: not given
  host::RecoverySeconds recovery;  // --ctrl-loss-tmo, --reconnect-delay, --kato
  std::string tcp_congestion;
  uint32_t socket_buffer = 0;  // 0: not given
  std::optional<uint32_t> send_buffer;
  std::string dhchap_secret, dhchap_ctrl_secret, hostnqn;
  TlsArgs tls;
  std::string ready_file;
  std::string metrics_listen;  // empty: no metrics endpoint
  bool ublk = false;
  uint32_t ublk_queue_depth = 0;
  std::string poll;
  // engine::limit_options(), by index; 0: not given (every limit's minimum is at least 1).
  std::vector<uint64_t> limits = std::vector<uint64_t>(engine::limit_options().size(), 0);
};

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// The JSON configuration: the same content as the flags, flags win.
bool load_config(const std::string& path, engine::EngineOptions& o, std::string& err) {
  std::ifstream in(path);
  if (!in) {
    err = fmt::format("cannot read {}", path);
    return false;
  }
  try {
    const auto j = nlohmann::json::parse(in);
    static const std::set<std::string> known{"socket",      "cpus",        "controllers",      "queue_depth",
                                             "max_queue_pairs", "idle_spin_us", "ctrl_loss_tmo_s", "reconnect_delay_s",
                                             "kato_s",      "tcp_congestion", "socket_buffer_bytes",
                                             "send_buffer_bytes", "ublk", "ublk_queue_depth"};
    std::set<std::string> limit_keys;
    for (const auto& l : engine::limit_options()) limit_keys.insert(l.key);
    for (const auto& [k, v] : j.items())
      if (!known.count(k) && !limit_keys.count(k)) {
        err = fmt::format("{}: unknown key '{}'", path, k);
        return false;
      }
    if (j.contains("socket")) o.socket_path = j["socket"].get<std::string>();
    if (j.contains("cpus")) o.cpus = j["cpus"].get<std::vector<int>>();
    for (const auto& t : j.value("controllers", std::vector<std::string>{})) {
      host::TransportId trid;
      if (!host::TransportId::parse(t, trid, err)) return false;
      o.controllers.push_back(trid);
    }
    if (j.contains("queue_depth")) o.queue_depth = j["queue_depth"].get<uint32_t>();
    if (j.contains("max_queue_pairs")) o.max_queue_pairs = j["max_queue_pairs"].get<uint32_t>();
    if (j.contains("idle_spin_us")) o.idle_spin_us = j["idle_spin_us"].get<int64_t>();
    host::RecoverySeconds recovery;
    if (j.contains("ctrl_loss_tmo_s")) recovery.ctrl_loss_tmo = j["ctrl_loss_tmo_s"].get<double>();
    if (j.contains("reconnect_delay_s")) recovery.reconnect_delay = j["reconnect_delay_s"].get<double>();
    if (j.contains("kato_s")) recovery.keep_alive_tmo = j["kato_s"].get<double>();
    if (!host::apply_recovery_seconds(recovery, o.host, err)) {
      err = fmt::format("{}: {}", path, err);
      return false;
    }
    if (j.contains("tcp_congestion")) o.host.tcp_congestion = j["tcp_congestion"].get<std::string>();
    // Byte counts up to 1 GiB, as the flags take them (a larger int would turn negative in setsockopt).
    auto buffer_bytes = [&](const char* key) {
      const uint64_t v = j[key].get<uint64_t>();
      if (v > (1u << 30)) throw std::runtime_error(fmt::format("'{}' must be at most 1073741824 (got {})", key, v));
      return uint32_t(v);
    };
    if (j.contains("socket_buffer_bytes")) o.host.socket_buffer_bytes = buffer_bytes("socket_buffer_bytes");
    if (j.contains("send_buffer_bytes")) o.host.send_buffer_bytes = buffer_bytes("send_buffer_bytes");
    if (j.contains("ublk")) o.ublk = j["ublk"].get<bool>();
    if (j.contains("ublk_queue_depth")) o.ublk_options.queue_depth = j["ublk_queue_depth"].get<uint32_t>();
    for (const auto& l : engine::limit_options())
      if (j.contains(l.key)) o.limits.*l.field = j[l.key].get<uint64_t>();
  } catch (const std::exception& e) {
    err = fmt::format("{}: {}", path, e.what());
    return false;
  }
  return true;
}

int run_engine(const EngineArgs& a) {
  engine::EngineOptions o;
  // As the Linux host: a lost controller is retried for 10 minutes before it is given up.
  o.host.ctrl_loss_tmo_ms = 600'000;
  std::string err;
  if (!a.config.empty() && !load_config(a.config, o, err)) {
    fmt::print(stderr, "nvtcp engine: {}\n", err);
    return 2;
  }
  if (!a.socket.empty()) o.socket_path = a.socket;
  if (!a.cpus.empty()) o.cpus = a.cpus;
  for (const auto& t : a.controllers) {
    host::TransportId trid;
    if (!host::TransportId::parse(t, trid, err) || trid.trtype != "tcp") {
      fmt::print(stderr, "nvtcp engine: --controller '{}': {}\n", t, err.empty() ? "must be trtype:tcp" : err);
      return 2;
    }
    o.controllers.push_back(trid);
  }
  if (o.controllers.empty()) {
    fmt::print(stderr, "nvtcp engine: no --controller given\n");
    return 2;
  }
  if (a.queue_depth) o.queue_depth = a.queue_depth;
  if (a.max_queue_pairs) o.max_queue_pairs = a.max_queue_pairs;
  if (a.idle_spin_us != -2) o.idle_spin_us = a.idle_spin_us;
  if (!host::apply_recovery_seconds(a.recovery, o.host, err)) {
    fmt::print(stderr, "nvtcp engine: {}\n", err);
    return 2;
  }
  if (!a.tcp_congestion.empty()) o.host.tcp_congestion = a.tcp_congestion;
  if (a.socket_buffer) o.host.socket_buffer_bytes = a.socket_buffer;
  if (a.send_buffer) o.host.send_buffer_bytes = *a.send_buffer;
  a.tls.apply(o.host);
  if (!a.dhchap_secret.empty()) o.host.dhchap_secret = a.dhchap_secret;
  if (!a.dhchap_ctrl_secret.empty()) o.host.dhchap_ctrl_secret = a.dhchap_ctrl_secret;
  if (!a.hostnqn.empty()) o.host.hostnqn = a.hostnqn;
  if (a.ublk) o.ublk = true;
  if (!a.poll.empty()) {
    host::parse_poll_mode(a.poll, o.host.poll);  // checked by the option's IsMember
  }
  if (a.ublk_queue_depth) o.ublk_options.queue_depth = a.ublk_queue_depth;
  if (o.queue_depth < 2 || o.queue_depth > 1024 || o.max_queue_pairs < 2 || o.max_queue_pairs > 1024) {
    fmt::print(stderr, "nvtcp engine: queue depth must be 2..1024 and max queue pairs 2..1024\n");
    return 2;
  }
  for (size_t i = 0; i < a.limits.size(); ++i)
    if (a.limits[i]) o.limits.*engine::limit_options()[i].field = a.limits[i];
  if (!engine::check_limits(o.limits, err)) {
    fmt::print(stderr, "nvtcp engine: {}\n", err);
    return 2;
  }

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // every thread started from here on too

  engine::Engine eng(o);
  if (!eng.start(err)) {
    fmt::print(stderr, "nvtcp engine: {}\n", err);
    return 1;
  }
  // Scrapes run on the metrics server's own thread: stats() reads only what the engine's
  // threads publish.
  control::MetricsServer metrics([&eng] { return engine::render_engine_metrics(eng.stats()); });
  if (!a.metrics_listen.empty()) {
    if (std::string e = metrics.start(a.metrics_listen); !e.empty()) {
      fmt::print(stderr, "nvtcp engine: --metrics-listen {}: {}\n", a.metrics_listen, e);
      eng.shutdown();
      return 1;
    }
    log::info("Prometheus metrics on http://{}/metrics", metrics.address());
  }
  if (!a.ready_file.empty()) {
    if (FILE* f = std::fopen(a.ready_file.c_str(), "w")) {
      std::fprintf(f, "%s\n", o.socket_path.c_str());
      std::fclose(f);
    }
  }
  std::atomic<bool> stop{false};
  std::thread signals([&] {
    int sig = 0;
    sigwait(&set, &sig);
    log::info("signal {}: shutting down", sig);
    stop = true;
  });
  eng.run(stop);
  signals.join();
  metrics.stop();
  const engine::EngineStats s = eng.stats();
  eng.shutdown();
  const double cpu = cpu_seconds();
  log::info("engine: {} application(s) attached ({} refused); {} I/O commands forwarded, {} completions posted, {} "
            "answered by the engine, {} dropped for applications gone, {} interrupts; {} ublk block requests; {:.2f} "
            "CPU s, {:.3f} CPU s per million I/Os",
            s.attached, s.refused, s.forwarded, s.completed, s.refused_io, s.dropped, s.interrupts, s.ublk_requests, cpu,
            s.forwarded + s.ublk_requests ? cpu / (double(s.forwarded + s.ublk_requests) / 1e6) : 0.0);
  return 0;
}
}  // namespace

void add_engine_command(CLI::App& app, int& rc) {
  auto a = std::make_shared<EngineArgs>();
  auto* c = app.add_subcommand("engine",
                               "the offload engine: carry local applications' NVMe queues (trtype:engine) over "
                               "NVMe/TCP on dedicated cores");
  c->add_option("--config", a->config, "JSON file with the same content as the flags (flags win)");
  c->add_option("--socket", a->socket, "UNIX socket applications attach to (default /run/nvtcp/engine.sock)");
  c->add_option("--controller", a->controllers, "a remote controller's transport ID (repeatable; the same subnqn again: another path to that subsystem, "
                "driven as one multipath controller)");
  c->add_option("--cpus", a->cpus, "CPUs, one engine core each (default: one core, not pinned)")->delimiter(',');
  c->add_option("--queue-depth", a->queue_depth,
                "depth of each NVMe/TCP queue pair (default 1024, at most the controller's CAP.MQES)");
  c->add_option("--max-queue-pairs", a->max_queue_pairs, "queue pairs per application, admin included (default 129)");
  c->add_option("--idle-spin-us", a->idle_spin_us,
                "an idle core spins this long before sleeping (default 200; 0 sleeps at once, -1 never sleeps)");
  c->add_option_function<double>(
      "--ctrl-loss-tmo", [a](double v) { a->recovery.ctrl_loss_tmo = v; },
      "seconds to keep reconnecting a lost controller (default 600)");
  c->add_option_function<double>(
      "--reconnect-delay", [a](double v) { a->recovery.reconnect_delay = v; },
      "seconds between reconnect attempts (default 2)");
  c->add_option_function<double>(
      "--kato", [a](double v) { a->recovery.keep_alive_tmo = v; },
      "keep-alive timeout asked of the remote controllers, seconds (default 30)");
  c->add_option("--tcp-congestion", a->tcp_congestion, "congestion control of the NVMe/TCP connections");
  add_socket_buffer_options(c, a->socket_buffer, a->send_buffer);
  add_dhchap_options(c, a->dhchap_secret, a->dhchap_ctrl_secret);
  add_tls_options(c, a->tls);
  c->add_option("--hostnqn", a->hostnqn, "host NQN of the engine's connections (a --controller's hostnqn: wins)");
  c->add_option("--ready-file", a->ready_file, "write the socket path here once serving");
  c->add_option("--metrics-listen", a->metrics_listen,
                "serve Prometheus metrics (GET /metrics) over HTTP on ADDRESS:PORT, e.g. 127.0.0.1:9101 or "
                "[::1]:0 (port 0 takes a free one, logged)");
  c->add_option("--poll", a->poll,
                "how the NVMe/TCP queue pairs wait for bytes: hybrid (default), busy or interrupt")
      ->check(CLI::IsMember({"interrupt", "busy", "hybrid"}));
  c->add_flag("--ublk", a->ublk,
              "also show each remote namespace as a block device /dev/ublkbN (Linux 6.0+ with ublk_drv)");
  c->add_option("--ublk-queue-depth", a->ublk_queue_depth, "requests in flight per ublk device (default 64)");
  // What applications may hold of the engine (engine/limits.hpp), range-checked at start.
  for (size_t i = 0; i < engine::limit_options().size(); ++i)
    c->add_option(engine::limit_options()[i].flag, a->limits[i], engine::limit_options()[i].help);
  c->callback([a, &rc] { rc = run_engine(*a); });
}

}  // namespace nvtcp::app

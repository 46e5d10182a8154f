// SPDX-License-Identifier: Apache-2.0
// Host-side commands: discover, identify, perf.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "nvtcp/host.hpp"
#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"
#include "nvtcp/properties.hpp"
#include "nvtcp/size.hpp"
#include "perf.hpp"
#include "nvtcp/wire_text.hpp"

namespace nvtcp::app {

namespace {
// Recovery options, in seconds as nvme-cli takes them, converted by the host library's rules.
void add_recovery_options(CLI::App* c, host::ControllerOptions& o) {
  auto set = [&o](std::optional<double> host::RecoverySeconds::*field) {
    return [&o, field](double v) {
      host::RecoverySeconds s;
      s.*field = v;
      std::string err;
      if (!host::apply_recovery_seconds(s, o, err)) throw CLI::ValidationError(err);
    };
  };
  c->add_option_function<double>("--ctrl-loss-tmo", set(&host::RecoverySeconds::ctrl_loss_tmo),
                                 "seconds to keep reconnecting after a connection is lost (default 0: no reconnect)");
  c->add_option_function<double>("--reconnect-delay", set(&host::RecoverySeconds::reconnect_delay),
                                 "seconds between reconnect attempts (default 2)");
  c->add_option_function<double>("--fast-io-fail-tmo", set(&host::RecoverySeconds::fast_io_fail_tmo),
                                 "seconds after a loss from which held I/O fails (default -1: wait for ctrl-loss-tmo)");
  c->add_option_function<double>(
      "--io-timeout", set(&host::RecoverySeconds::io_timeout),
      "seconds before an I/O is aborted, and as long again before the controller is reset (default 30; 0: never)");
}
}  // namespace

void add_socket_buffer_options(CLI::App* c, uint32_t& socket_buffer, std::optional<uint32_t>& send_buffer) {
  auto size = [](const char* name, auto& field) {
    return [name, &field](const std::string& v) {
      uint64_t n = 0;
      if (!parse_size(v, n) || n > (1u << 30)) throw CLI::ValidationError(name, "not a size up to 1G");
      field = uint32_t(n);
    };
  };
  c->add_option_function<std::string>(
      "--socket-buffer", size("--socket-buffer", socket_buffer),
      "SO_RCVBUF and SO_SNDBUF of each connection, fixed (e.g. 2M; default: receive 4M, send 512K)");
  c->add_option_function<std::string>(
      "--send-buffer", size("--send-buffer", send_buffer),
      "SO_SNDBUF alone (0: the kernel autotunes it; default: --socket-buffer if given, else 512K)");
}

void add_dhchap_options(CLI::App* c, std::string& secret, std::string& ctrl_secret) {
  c->add_option("--dhchap-secret", secret,
                "DH-HMAC-CHAP host secret, used when the target asks to authenticate: DHHC-1:XX:...: as nvme-cli's "
                "gen-dhchap-key writes it, or @FILE (a file only its owner can read; a key on the command line is "
                "visible to other users in the process list)");
  c->add_option("--dhchap-ctrl-secret", ctrl_secret,
                "DH-HMAC-CHAP controller secret: the target must prove it holds it too (bidirectional); "
                "key or @FILE");
}

void add_tls_options(CLI::App* c, TlsArgs& t) {
  c->add_flag("--tls", t.tls, "TLS 1.3 secure channel with a pre-shared key on every connection (needs --tls-key)");
  c->add_option("--tls-key", t.key,
                "the configured TLS PSK: NVMeTLSkey-1:XX:...: as nvme-cli's gen-tls-key writes it, or @FILE (a file "
                "only its owner can read); implies --tls");
  c->add_option("--tls-identity-version", t.identity_version,
                "PSK identity offered: 0 \"NVMe0R0H <hostnqn> <subnqn>\" (default) or 1 (with the PSK's digest)")
      ->check(CLI::Range(0, 1));
  auto* legacy = c->add_flag("--tls-legacy-derivation", t.legacy_derivation,
                             "derive the TLS PSK only as libnvme up to 1.14 (nvme-cli up to 2.14) did (by default "
                             "the host tries RFC 8446's derivation, then that one if the target refuses the first)");
  c->add_flag("--tls-rfc8446-derivation", t.rfc8446_derivation,
              "derive the TLS PSK only with RFC 8446's labels, as the specification, the Linux kernel and SPDK do "
              "(no second try)")
      ->excludes(legacy);
  c->add_flag("--tls-sha256-binder", t.sha256_binder,
              "bind a SHA-384 PSK with SHA-256 (the session takes a SHA-256 suite), as a Linux target's tlshd 1.0 "
              "expects");
  c->add_flag("--no-ktls", t.no_ktls,
              "seal the TLS records sent in nvtcp's own record layer, not the kernel's kTLS (used by default where "
              "the kernel has the tls module)");
}

using namespace nvtcp::nvme;

namespace {
const char* trtype_str(uint8_t t) { return t == kTrtypeTcp ? "tcp" : t == 1 ? "rdma" : t == 2 ? "fc" : "unrecognized"; }
const char* adrfam_str(uint8_t a) { return a == kAdrfamIpv4 ? "ipv4" : a == kAdrfamIpv6 ? "ipv6" : "unrecognized"; }
const char* subtype_str(uint8_t s) {
  switch (s) {
    case kSubtypeDiscoveryReferral: return "discovery subsystem referral";
    case kSubtypeNvme: return "nvme subsystem";
    case kSubtypeCurrentDiscovery: return "current discovery subsystem";
  }
  return "unrecognized";
}
std::string treq_str(uint8_t t) {
  std::string s;
  switch (t & 3) {
    case 0: s = "not specified"; break;
    case 1: s = "required"; break;
    case 2: s = "not required"; break;
    default: s = "reserved"; break;
  }
  if (t & kTreqDisableSqFlow) s += ", sq flow control disable supported";
  return s;
}

std::string hex(const uint8_t* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{:02x}", p[i]);
  return s;
}

struct DiscoverArgs {
  std::string addr = "127.0.0.1";
  uint16_t port = kDiscoveryPort;
  std::string hostnqn;
  bool hdgst = false, ddgst = false;
  std::string dhchap_secret, dhchap_ctrl_secret;
  TlsArgs tls;
};

int run_discover(const DiscoverArgs& a) {
  host::TransportId t;
  t.traddr = a.addr;
  t.trsvcid = a.port;
  t.subnqn = kDiscoveryNqn;
  t.hostnqn = a.hostnqn;
  host::ControllerOptions o;
  o.hdgst = a.hdgst;
  o.ddgst = a.ddgst;
  o.kato_ms = 0;
  a.tls.apply(o);
  o.dhchap_secret = a.dhchap_secret;
  o.dhchap_ctrl_secret = a.dhchap_ctrl_secret;
  std::string err;
  auto ctrl = host::Controller::connect(t, o, err);
  if (!ctrl) {
    fmt::print(stderr, "nvtcp discover: {}\n", err);
    return 1;
  }
  std::vector<uint8_t> log;
  if (!ctrl->discovery_log(log, err)) {
    fmt::print(stderr, "nvtcp discover: {}\n", err);
    return 1;
  }
  const auto* h = reinterpret_cast<const DiscoveryLogHeader*>(log.data());
  fmt::print("\nDiscovery Log Number of Records {}, Generation counter {}\n", h->numrec, h->genctr);
  size_t n = (log.size() - sizeof(DiscoveryLogHeader)) / sizeof(DiscoveryLogEntry);
  for (size_t i = 0; i < n; ++i) {
    const auto* e = reinterpret_cast<const DiscoveryLogEntry*>(log.data() + sizeof(DiscoveryLogHeader) +
                                                                i * sizeof(DiscoveryLogEntry));
    fmt::print("=====Discovery Log Entry {}======\n", i);
    fmt::print("trtype:  {}\n", trtype_str(e->trtype));
    fmt::print("adrfam:  {}\n", adrfam_str(e->adrfam));
    fmt::print("subtype: {}\n", subtype_str(e->subtype));
    fmt::print("treq:    {}\n", treq_str(e->treq));
    fmt::print("portid:  {}\n", e->portid);
    fmt::print("trsvcid: {}\n", wire_field(e->trsvcid, sizeof(e->trsvcid)));
    fmt::print("subnqn:  {}\n", wire_field(e->subnqn, sizeof(e->subnqn)));
    fmt::print("traddr:  {}\n", wire_field(e->traddr, sizeof(e->traddr)));
    fmt::print("eflags:  {}\n", e->eflags ? fmt::format("0x{:x}", e->eflags) : "none");
    fmt::print("sectype: {}\n", e->tsas[0] == kTcpSectypeNone ? "none" : "tls");
  }
  return 0;
}

struct IdentifyArgs {
  std::string trid;
  std::string hostnqn;
  std::string dhchap_secret, dhchap_ctrl_secret;
  TlsArgs tls;
};

int run_identify(const IdentifyArgs& a) {
  host::TransportId t;
  std::string err;
  if (!host::TransportId::parse(a.trid, t, err)) {
    fmt::print(stderr, "nvtcp identify: {}\n", err);
    return 2;
  }
  if (!a.hostnqn.empty()) t.hostnqn = a.hostnqn;
  host::ControllerOptions o;
  a.tls.apply(o);
  o.dhchap_secret = a.dhchap_secret;
  o.dhchap_ctrl_secret = a.dhchap_ctrl_secret;
  auto ctrl = host::Controller::connect(t, o, err);
  if (!ctrl) {
    fmt::print(stderr, "nvtcp identify: {}\n", err);
    return 1;
  }
  const auto* id = reinterpret_cast<const IdentifyController*>(ctrl->identify_data());
  fmt::print("NVMe Identify Controller ({})\n", t.to_string());
  fmt::print("vid       : 0x{:x}\n", id->vid);
  fmt::print("ssvid     : 0x{:x}\n", id->ssvid);
  fmt::print("sn        : {}\n", wire_field(id->sn, sizeof(id->sn)));
  fmt::print("mn        : {}\n", wire_field(id->mn, sizeof(id->mn)));
  fmt::print("fr        : {}\n", wire_field(id->fr, sizeof(id->fr)));
  fmt::print("cntlid    : 0x{:x}\n", id->cntlid);
  fmt::print("ver       : {}.{}.{}\n", id->ver >> 16, (id->ver >> 8) & 0xFF, id->ver & 0xFF);
  fmt::print("cntrltype : {}\n", id->cntrltype == kCntrlTypeIo ? "I/O" : id->cntrltype == kCntrlTypeDiscovery ? "discovery" : "other");
  fmt::print("mdts      : {} ({} bytes)\n", id->mdts, ctrl->max_transfer_bytes());
  fmt::print("kas       : {}\n", id->kas);
  fmt::print("aerl      : {}\n", id->aerl);
  fmt::print("sqes      : 0x{:x}\n", id->sqes);
  fmt::print("cqes      : 0x{:x}\n", id->cqes);
  fmt::print("maxcmd    : {}\n", id->maxcmd);
  fmt::print("nn        : {}\n", id->nn);
  fmt::print("oncs      : 0x{:x}\n", id->oncs);
  fmt::print("vwc       : 0x{:x}\n", id->vwc);
  fmt::print("sgls      : 0x{:x}\n", id->sgls);
  fmt::print("subnqn    : {}\n", wire_field(id->subnqn, sizeof(id->subnqn)));
  fmt::print("ioccsz    : {}\n", id->ioccsz);
  fmt::print("iorcsz    : {}\n", id->iorcsz);
  fmt::print("icdoff    : {}\n", id->icdoff);
  fmt::print("msdbd     : {}\n", id->msdbd);
  fmt::print("cap       : 0x{:x} (mqes {}, timeout {} ms)\n", ctrl->cap(), prop::cap_mqes(ctrl->cap()) + 1u,
             prop::cap_timeout_ms(ctrl->cap()));
  fmt::print("io queues : {}\n", ctrl->io_queues_granted());
  for (uint32_t nsid : ctrl->active_namespaces()) {
    host::NamespaceInfo ni;
    if (!ctrl->namespace_info(nsid, ni, err)) {
      fmt::print("namespace {}: {}\n", nsid, err);
      continue;
    }
    fmt::print("\nNamespace {}\n", nsid);
    fmt::print("nsze      : {} blocks ({} bytes)\n", ni.blocks, ni.blocks * ni.block_size);
    fmt::print("lba size  : {}\n", ni.block_size);
    fmt::print("nguid     : {}\n", hex(ni.nguid, 16));
    fmt::print("eui64     : {}\n", hex(ni.eui64, 8));
  }
  return 0;
}

struct PerfArgs {
  std::vector<std::string> trids;
  PerfOptions o;
  bool json = false;
  bool hdgst = false, ddgst = false;
  std::string io_size = "4096";
  TlsArgs tls;
};

int run_perf_cmd(PerfArgs& a) {
  std::string err;
  for (const std::string& text : a.trids) {
    host::TransportId t;
    if (!host::TransportId::parse(text, t, err)) {
      fmt::print(stderr, "nvtcp perf: {}\n", err);
      return 2;
    }
    if (!a.o.paths.empty() && (t.subnqn != a.o.paths[0].subnqn || t.nsid != a.o.paths[0].nsid)) {
      fmt::print(stderr, "nvtcp perf: every -r must name the same subsystem and namespace (paths to one namespace)\n");
      return 2;
    }
    a.o.paths.push_back(t);
  }
  a.o.trid = a.o.paths.at(0);
  uint64_t sz = 0;
  if (!parse_size(a.io_size, sz) || sz == 0 || sz > (64u << 20)) {
    fmt::print(stderr, "nvtcp perf: -o '{}' is not an I/O size\n", a.io_size);
    return 2;
  }
  a.o.io_size = uint32_t(sz);
  a.tls.apply(a.o.ctrl);
  a.o.ctrl.hdgst = a.hdgst || a.o.trid.hdgst;
  a.o.ctrl.ddgst = a.ddgst || a.o.trid.ddgst;
  if (a.o.cpus.size() > a.o.cores) a.o.cores = unsigned(a.o.cpus.size());
  a.o.ctrl.io_queues = std::max<uint32_t>(a.o.qpairs * a.o.cores, 1);
  PerfResult r;
  if (!run_perf(a.o, r, err)) {
    fmt::print(stderr, "nvtcp perf: {}\n", err);
    return 1;
  }
  if (a.json) fmt::print("{}\n", format_perf_json(a.o, r));
  else fmt::print("{}", format_perf_text(a.o, r));
  return (r.errors || r.verify_failures || r.reauth_failures) ? 1 : 0;
}
}  // namespace

void add_discover_command(CLI::App& app, int& rc) {
  auto a = std::make_shared<DiscoverArgs>();
  CLI::App* c = app.add_subcommand("discover", "Print a discovery log, like nvme-cli's nvme discover");
  c->add_option("-a,--traddr", a->addr, "target address");
  c->add_option("-s,--trsvcid", a->port, "discovery port (default 8009)");
  c->add_option("-q,--hostnqn", a->hostnqn, "host NQN");
  c->add_flag("--hdgst", a->hdgst, "header digest");
  c->add_flag("--ddgst", a->ddgst, "data digest");
  add_dhchap_options(c, a->dhchap_secret, a->dhchap_ctrl_secret);
  add_tls_options(c, a->tls);
  c->callback([a, &rc] { rc = run_discover(*a); });
}

void add_identify_command(CLI::App& app, int& rc) {
  auto a = std::make_shared<IdentifyArgs>();
  CLI::App* c = app.add_subcommand("identify", "Print Identify Controller and Namespace fields");
  c->add_option("-r,--trid", a->trid, "transport ID, e.g. 'trtype:tcp traddr:127.0.0.1 trsvcid:4420 subnqn:NQN'")
      ->required();
  c->add_option("-q,--hostnqn", a->hostnqn, "host NQN");
  add_dhchap_options(c, a->dhchap_secret, a->dhchap_ctrl_secret);
  add_tls_options(c, a->tls);
  c->callback([a, &rc] { rc = run_identify(*a); });
}

void add_perf_command(CLI::App& app, int& rc) {
  auto a = std::make_shared<PerfArgs>();
  CLI::App* c = app.add_subcommand("perf", "Measure IOPS, bandwidth and latency against a namespace");
  c->add_option("-r,--trid", a->trids,
                "transport ID (ns:N picks the namespace); given again, another path to the same namespace "
                "(multipath: ANA optimized paths first, I/O moved off a path that fails)")
      ->required();
  c->add_option_function<std::string>(
      "--path-policy",
      [a](const std::string& v) {
        if (!host::parse_path_policy(v, a->o.multipath.policy))
          throw CLI::ValidationError("--path-policy", "not a path policy: " + v);
      },
      "with several -r: round-robin (the default) or queue-depth among the paths of the best ANA state");
  c->add_option("--max-failovers", a->o.multipath.max_failovers,
                "with several -r: times one command may move off a path that failed it before it fails with "
                "that path's status (-1: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 20));
  c->add_option("-q,--queue-depth", a->o.queue_depth, "commands outstanding per queue pair")->check(CLI::Range(1, 1023));
  c->add_option("-o,--io-size", a->io_size, "bytes per I/O (4096, 4K, 128K)");
  c->add_option("-w,--workload", a->o.workload, "read, write, randread, randwrite, randrw or rw")
      ->check(CLI::IsMember({"read", "write", "randread", "randwrite", "randrw", "rw"}));
  c->add_option("-M,--read-percent", a->o.read_percent, "reads in a mixed workload, %")->check(CLI::Range(0, 100));
  c->add_option("-t,--time", a->o.seconds, "seconds to run")->check(CLI::Range(0.1, 86400.0));
  c->add_option("--number-ios", a->o.number_ios,
                "per thread: stop after this many I/Os, or at --time if that comes first (with --verify: "
                "this many writes, then as many reads)")
      ->check(CLI::Range(uint64_t(1), uint64_t(1) << 40));
  c->add_option("--rate-iops", a->o.rate_iops, "per thread: issue at most this many I/Os per second")
      ->check(CLI::Range(1u, 100'000'000u));
  c->add_option("-P,--qpairs", a->o.qpairs, "queue pairs (TCP connections) per thread")->check(CLI::Range(1, 1024));
  c->add_option("--cores", a->o.cores, "threads, each driving its own queue pairs")->check(CLI::Range(1, 256));
  c->add_option("-c,--cpus", a->o.cpus, "pin thread i to the i-th CPU of this list (e.g. -c 1 or -c 0,1)")
      ->delimiter(',');
  c->add_flag("--hdgst", a->hdgst, "header digest");
  c->add_flag("--ddgst", a->ddgst, "data digest");
  c->add_flag("--json", a->json, "print one JSON object");
  c->add_option("--ramp", a->o.ramp_seconds,
                 "seconds of load before the measured time, counted in no figure (as fio's ramp_time)")
      ->check(CLI::Range(0.0, 3600.0));
  c->add_option("--timeline-ms", a->o.timeline_ms,
                "with --json: I/Os completed and the most outstanding per interval of this many ms")
      ->check(CLI::Range(1, 60000));
  c->add_flag("--verify", a->o.verify, "write tagged blocks for half the time, then read them back and check");
  c->add_option("--reauth-interval", a->o.reauth_seconds,
                "run DH-HMAC-CHAP again on every queue this many seconds apart, I/O going on (needs --dhchap-secret; "
                "a failed re-authentication makes perf fail)")
      ->check(CLI::Range(0.1, 86400.0));
  c->add_option("--tcp-congestion", a->o.ctrl.tcp_congestion, "TCP congestion control per socket (e.g. cubic)");
  add_socket_buffer_options(c, a->o.ctrl.socket_buffer_bytes, a->o.ctrl.send_buffer_bytes);
  add_dhchap_options(c, a->o.ctrl.dhchap_secret, a->o.ctrl.dhchap_ctrl_secret);
  add_tls_options(c, a->tls);
  c->add_option("--hostnqn", a->o.ctrl.hostnqn, "host NQN (the transport ID's hostnqn: wins)");
  c->add_option_function<std::string>(
      "--poll",
      [a](const std::string& v) {
        if (!host::parse_poll_mode(v, a->o.ctrl.poll)) throw CLI::ValidationError("--poll", "not a poll mode: " + v);
      },
      "hybrid (spin while completions keep coming, sleep when idle; the default over TCP), busy (always spin) or "
      "interrupt (always sleep: for hosts shared with other work; the default through the offload engine)");
  c->add_flag_callback("--busy-poll", [a] { a->o.ctrl.poll = PollMode::Busy; }, "same as --poll busy");
  c->add_flag_callback("--hybrid-poll", [a] { a->o.ctrl.poll = PollMode::Hybrid; }, "same as --poll hybrid");
  c->add_flag("--sqpoll", a->o.ctrl.sqpoll, "an io_uring SQ thread submits for the queue pairs (no syscalls when polling)");
  c->add_option("--sqpoll-cpu", a->o.data_path.sq_thread_cpu, "pin the SQ threads to this CPU (default: unpinned)")
      ->check(CLI::Range(-1, 4095));
  c->add_option_function<std::string>(
      "--send-zc",
      [a](const std::string& v) {
        uint64_t n = 0;
        if (!parse_size(v, n) || n > (1u << 30)) throw CLI::ValidationError("--send-zc", "not a size: " + v);
        a->o.data_path.zero_copy_send_threshold = uint32_t(n);
      },
      "send segments of at least SIZE bytes (e.g. 64K) with io_uring zero-copy sends (default 0: off)");
  c->add_flag("--recv-multishot", a->o.data_path.recv_multishot,
              "receive with one multishot recv per connection into a shared provided-buffer ring");
  c->add_flag("--no-spin-recv{false}", a->o.data_path.spin_recv,
              "busy/hybrid polling: wait for bytes through io_uring only, never with a polled recv()");
  add_recovery_options(c, a->o.ctrl);
  c->callback([a, &rc] { rc = run_perf_cmd(*a); });
}

}  // namespace nvtcp::app

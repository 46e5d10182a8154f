// SPDX-License-Identifier: Apache-2.0
// The nvtcp ioengine for fio: each fio thread talks NVMe/TCP to the target through its own
// controller and queue pair(s) from the nvtcp host library, or, with trtype=engine, hands
// its commands to the nvtcp offload engine through queues in shared memory (fio's I/O
// buffers then come from the region the engine shares, through the iomem hooks).
//
//   fio --ioengine=external:build/libnvtcp_fio.so --thread=1 ...
//       --filename='trtype=tcp adrfam=IPv4 traddr=127.0.0.1 trsvcid=4420 subnqn=nqn... ns=1'
//   LD_PRELOAD=build/libnvtcp_fio.so fio --ioengine=nvtcp ...        (as SPDK's plugin allows)
//
// The filename is a transport ID with '=' instead of ':' (fio splits file names on ':'; "\:"
// works too). Engine options: hdgst, ddgst, hostnqn, qpairs, kato, poll, busy_poll, tcp_congestion, socket_buffer,
// send_buffer, start_together, dhchap_secret, dhchap_ctrl_secret, tls, tls_key, tls_legacy_derivation,
// tls_sha256_binder, ktls
// (`fio --enghelp=build/libnvtcp_fio.so`).
//
// Threads and state. fio sizes files in its main thread before the job threads start
// (create_serialize), so get_file_size asks the target once per distinct target over a
// short-lived admin connection and caches the answer; that cache's mutex is on the setup
// path only. Everything on the data path (queue, commit, getevents, event) lives in one
// ThreadCtx per fio thread: the thread's own controller(s), queue pairs, a slot per io_u and
// a ring of completed io_us. Nothing there is shared, locked or allocated per I/O.
//
// Batching. queue() only builds the command, as SPDK's plugin does; the bytes leave at the
// next process_completions(), which getevents() runs whenever it has no completions left
// over. fio reaps one event per getevents() by default, so completions that arrive together
// are handed out without a syscall each, and the I/Os fio queues meanwhile go out together:
// one io_uring_enter per batch, as in nvtcp perf.

// C++ headers first: fio's headers define min/max macros that break the standard library.
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "nvtcp/host.hpp"
#include "nvtcp/multipath.hpp"
#include "nvtcp/size.hpp"

// fio's headers are C without extern "C" guards.
extern "C" {
#include "fio.h"
#include "optgroup.h"
}
// fio's function-like min()/max() macros would swallow std::min/std::max below.
#undef min
#undef max

namespace {

using nvtcp::PollMode;
using nvtcp::host::Completion;
using nvtcp::host::Controller;
using nvtcp::host::MultipathController;
using nvtcp::host::MultipathOptions;
using nvtcp::host::MultipathQueuePair;
using nvtcp::host::ControllerOptions;
using nvtcp::host::parse_poll_mode;
using nvtcp::host::QueuePair;
using nvtcp::host::RecoverySeconds;
using nvtcp::host::TransportId;

constexpr const char* kEngineName = "nvtcp";

// ------------------------------------------------------------------ options

// fio stores a pointer in the first member of every engine option struct.
struct EngineOptions {
  void* fio_private;
  unsigned int hdgst;
  unsigned int ddgst;
  char* hostnqn;
  unsigned int qpairs;
  unsigned int kato;
  unsigned int busy_poll;
  char* poll;
  char* tcp_congestion;
  unsigned int ctrl_loss_tmo;
  unsigned int reconnect_delay;
  int fast_io_fail_tmo;
  unsigned int io_timeout;
  unsigned long long socket_buffer;
  char* send_buffer;  // a size, or empty: the host library's default
  unsigned int start_together;
  unsigned int intr_coalesce;
  unsigned int intr_coalesce_us;
  char* dhchap_secret;
  char* dhchap_ctrl_secret;
  unsigned int tls;
  char* tls_key;
  unsigned int tls_legacy_derivation;
  unsigned int tls_sha256_binder;
  unsigned int ktls;
  char* paths;        // more paths to the filename's namespace: ADDR:PORT,ADDR:PORT (multipath)
  char* path_policy;  // round-robin or queue-depth
  int max_failovers;  // moves per command before it fails with its path's status (-1: no limit)
};

fio_option make_option(const char* name, const char* lname, fio_opt_type type, unsigned off, const char* help,
                       const char* def, unsigned long long maxval = 0, int minval = 0) {
  fio_option o{};
  o.name = name;
  o.lname = lname;
  o.type = type;
  o.off1 = off;
  o.maxval = maxval;
  o.minval = minval;
  o.help = help;
  o.def = def;
  o.category = FIO_OPT_C_ENGINE;
  o.group = FIO_OPT_G_INVALID;
  return o;
}

fio_option g_options[] = {
    make_option("hdgst", "nvtcp header digest", FIO_OPT_BOOL, offsetof(EngineOptions, hdgst),
                "Ask for NVMe/TCP header digests (CRC32C)", "0"),
    make_option("ddgst", "nvtcp data digest", FIO_OPT_BOOL, offsetof(EngineOptions, ddgst),
                "Ask for NVMe/TCP data digests (CRC32C)", "0"),
    make_option("hostnqn", "nvtcp host NQN", FIO_OPT_STR_STORE, offsetof(EngineOptions, hostnqn),
                "Host NQN to connect as (default: nqn.2014-08.org.nvmexpress:uuid:<random>)", nullptr),
    make_option("qpairs", "nvtcp queue pairs per job", FIO_OPT_INT, offsetof(EngineOptions, qpairs),
                "I/O queue pairs (TCP connections) per fio job, each of depth iodepth", "1", 1024, 1),
    make_option("kato", "nvtcp keep-alive timeout", FIO_OPT_INT, offsetof(EngineOptions, kato),
                "Keep Alive Timeout in milliseconds asked of the controller (0: none)", "30000", 3600000, 0),
    make_option("poll", "nvtcp poll mode", FIO_OPT_STR_STORE, offsetof(EngineOptions, poll),
                "How the queue pairs wait: hybrid (spin while completions keep coming, sleep when idle; the "
                "default over TCP), busy (always spin) or interrupt (always sleep; the default through the "
                "offload engine)",
                nullptr),
    make_option("paths", "nvtcp multipath paths", FIO_OPT_STR_STORE, offsetof(EngineOptions, paths),
                "More paths to the filename's subsystem and namespace, as ADDR:PORT[,ADDR:PORT...] ([v6addr]:PORT "
                "for IPv6): the job drives them as one multipath controller (ANA optimized paths first, a command "
                "moved to another path when its own fails)",
                nullptr),
    make_option("path_policy", "nvtcp multipath policy", FIO_OPT_STR_STORE, offsetof(EngineOptions, path_policy),
                "With paths: round-robin (the default) or queue-depth among the paths of the best ANA state", nullptr),
    make_option("max_failovers", "nvtcp multipath failovers per command", FIO_OPT_INT,
                offsetof(EngineOptions, max_failovers),
                "With paths: times one command may move off a path that failed it before it fails with that "
                "path's status (-1: no limit)",
                "32", 1 << 20, -1),
    make_option("busy_poll", "nvtcp busy poll", FIO_OPT_BOOL, offsetof(EngineOptions, busy_poll), "Same as poll=busy",
                "0"),
    make_option("tcp_congestion", "nvtcp TCP congestion control", FIO_OPT_STR_STORE,
                offsetof(EngineOptions, tcp_congestion),
                "TCP congestion control for this job's sockets (e.g. cubic; default: the system's)", nullptr),
    // Recovery, in seconds as nvme-cli takes them.
    make_option("ctrl_loss_tmo", "nvtcp controller loss timeout", FIO_OPT_INT, offsetof(EngineOptions, ctrl_loss_tmo),
                "Seconds to keep reconnecting after a connection is lost; I/O in flight is sent again "
                "(0: no reconnect, I/O fails at once)",
                "0", 86400, 0),
    make_option("reconnect_delay", "nvtcp reconnect delay", FIO_OPT_INT, offsetof(EngineOptions, reconnect_delay),
                "Seconds between reconnect attempts", "2", 3600, 1),
    make_option("fast_io_fail_tmo", "nvtcp fast I/O fail timeout", FIO_OPT_INT,
                offsetof(EngineOptions, fast_io_fail_tmo),
                "Seconds after a loss from which held I/O fails (-1: wait for ctrl_loss_tmo)", "-1", 86400, -1),
    make_option("io_timeout", "nvtcp I/O timeout", FIO_OPT_INT, offsetof(EngineOptions, io_timeout),
                "Seconds before an I/O is aborted, and as long again before the controller is reset (0: never)", "30",
                86400, 0),
    make_option("socket_buffer", "nvtcp socket buffer", FIO_OPT_STR_VAL, offsetof(EngineOptions, socket_buffer),
                "SO_RCVBUF and SO_SNDBUF of each connection, fixed (e.g. 2m; 0: receive 4m, send as send_buffer)", "0",
                1ull << 30, 0),
    make_option("send_buffer", "nvtcp send buffer", FIO_OPT_STR_STORE, offsetof(EngineOptions, send_buffer),
                "SO_SNDBUF alone (e.g. 256k; 0: the kernel autotunes it; default: socket_buffer if set, else 512k)",
                nullptr, 0, 0),
    make_option("dhchap_secret", "nvtcp DH-HMAC-CHAP host secret", FIO_OPT_STR_STORE,
                offsetof(EngineOptions, dhchap_secret),
                "DH-HMAC-CHAP host secret, used when the target asks to authenticate: DHHC-1:XX:...: (as nvme-cli's "
                "gen-dhchap-key writes it) or @FILE, a file only its owner can read",
                nullptr),
    make_option("dhchap_ctrl_secret", "nvtcp DH-HMAC-CHAP controller secret", FIO_OPT_STR_STORE,
                offsetof(EngineOptions, dhchap_ctrl_secret),
                "DH-HMAC-CHAP controller secret: the target must prove it holds it too (key or @FILE)", nullptr),
    make_option("tls", "nvtcp TLS", FIO_OPT_BOOL, offsetof(EngineOptions, tls),
                "TLS 1.3 secure channel with a pre-shared key on every connection (needs tls_key)", "0"),
    make_option("tls_key", "nvtcp TLS PSK", FIO_OPT_STR_STORE, offsetof(EngineOptions, tls_key),
                "the configured TLS PSK: NVMeTLSkey-1:XX:...: (as nvme-cli's gen-tls-key writes it) or @FILE, a file "
                "only its owner can read; implies tls",
                nullptr),
    make_option("tls_legacy_derivation", "nvtcp TLS legacy derivation", FIO_OPT_BOOL,
                offsetof(EngineOptions, tls_legacy_derivation),
                "derive the TLS PSK as libnvme up to 1.14 (nvme-cli up to 2.14) did, for a target whose keyring "
                "nvme-cli of that age filled",
                "0"),
    make_option("tls_sha256_binder", "nvtcp TLS SHA-256 binder", FIO_OPT_BOOL,
                offsetof(EngineOptions, tls_sha256_binder),
                "bind a SHA-384 PSK with SHA-256 (a SHA-256 suite then), as a Linux target's tlshd 1.0 expects", "0"),
    make_option("ktls", "nvtcp kTLS", FIO_OPT_BOOL, offsetof(EngineOptions, ktls),
                "let the kernel's kTLS seal the TLS records sent, where the kernel has the tls module (0: nvtcp's "
                "own record layer)",
                "1"),
    make_option("start_together", "nvtcp jobs start together", FIO_OPT_BOOL, offsetof(EngineOptions, start_together),
                "A job that has connected starts its I/O once every job of its group on this engine has connected "
                "(at most 10 s later), so that no job's connect falls in another's ramp or measured time",
                "1"),
    // Through the offload engine only: NVMe's Interrupt Coalescing feature (08h), which the
    // engine's controller implements for the completion queues an application sleeps on.
    make_option("intr_coalesce", "nvtcp interrupt coalescing threshold", FIO_OPT_INT,
                offsetof(EngineOptions, intr_coalesce),
                "Through the offload engine (trtype=engine): wake a job that waits for completions once this many "
                "are posted (or intr_coalesce_us has passed since the first); 0 or 1: at the first",
                "0", 256, 0),
    make_option("intr_coalesce_us", "nvtcp interrupt coalescing time", FIO_OPT_INT,
                offsetof(EngineOptions, intr_coalesce_us),
                "With intr_coalesce: the longest a posted completion waits for its interrupt, in microseconds "
                "(the feature's 100-us units, rounded up, at most 25500; 0: no delay, which turns coalescing off)",
                "100", 25500, 0),
    fio_option{},
};

// ------------------------------------------------------------------ helpers

std::string vformat(const char* fmt, va_list ap) {
  char buf[1024];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  return buf;
}

// Logs a clear one-line reason, and records a short form as the job's error, which fio
// prints with the failing job and turns into a non-zero exit status.
__attribute__((format(printf, 4, 5))) int fail(thread_data* td, int err, const char* summary, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string msg = vformat(fmt, ap);
  va_end(ap);
  log_err("nvtcp: %s\n", msg.c_str());
  td_vmsg(td, err, summary, "nvtcp");
  return 1;
}

const EngineOptions& options(thread_data* td) { return *static_cast<const EngineOptions*>(td->eo); }

// One host ID for every controller this fio process makes, so the target sees one host.
const uint8_t* process_hostid() {
  static uint8_t id[16];
  static std::once_flag once;
  std::call_once(once, [] {
    std::random_device rd;
    for (auto& b : id) b = uint8_t(rd());
    id[6] = uint8_t((id[6] & 0x0F) | 0x40);  // UUID version 4
    id[8] = uint8_t((id[8] & 0x3F) | 0x80);
  });
  return id;
}

// fio splits --filename at every unescaped ':', and NQNs hold one.
std::string split_hint(const thread_data* td) {
  if (td->files_index <= 1) return "";
  return " (fio split --filename at ':' into " + std::to_string(td->files_index) +
         " files: write '\\:' for a ':' inside a value, e.g. subnqn=nqn.2026-11.io.nvtcp\\:x)";
}

bool parse_filename(thread_data* td, const char* name, TransportId& trid) {
  std::string err;
  if (!TransportId::parse(name, trid, err)) {
    fail(td, EINVAL, "bad filename",
         "bad filename '%s': %s%s. Expected a transport ID with '=' for ':', e.g. "
         "--filename='trtype=tcp adrfam=IPv4 traddr=127.0.0.1 trsvcid=4420 subnqn=nqn.2026-11.io.nvtcp\\:x ns=1'",
         name, err.c_str(), split_hint(td).c_str());
    return false;
  }
  if (trid.subnqn.empty()) {
    fail(td, EINVAL, "bad filename", "filename '%s' names no subsystem: add subnqn=NQN%s", name,
         split_hint(td).c_str());
    return false;
  }
  return true;
}

// paths=ADDR:PORT[,ADDR:PORT...] ("[v6addr]:PORT" for IPv6): each the filename's transport ID
// with another address and port.
bool parse_paths(thread_data* td, const char* text, const TransportId& base, std::vector<TransportId>& out) {
  std::string all(text);
  size_t start = 0;
  while (start <= all.size()) {
    size_t end = all.find(',', start);
    if (end == std::string::npos) end = all.size();
    const std::string one = all.substr(start, end - start);
    start = end + 1;
    if (one.empty()) continue;
    TransportId t = base;
    size_t colon = one.rfind(':');
    std::string addr = colon == std::string::npos ? "" : one.substr(0, colon);
    if (addr.size() > 2 && addr.front() == '[' && addr.back() == ']') {
      addr = addr.substr(1, addr.size() - 2);
      t.adrfam = "IPv6";
    }
    char* stop = nullptr;
    const unsigned long port = colon == std::string::npos ? 0 : std::strtoul(one.c_str() + colon + 1, &stop, 10);
    if (addr.empty() || port == 0 || port > 65535 || (stop && *stop))
      return !fail(td, EINVAL, "bad paths", "paths: '%s' is not ADDR:PORT", one.c_str());
    t.traddr = addr;
    t.trsvcid = uint16_t(port);
    out.push_back(t);
  }
  return true;
}

// The host library's connect error, with what it most likely means.
std::string explain_connect_error(const TransportId& trid, const std::string& err) {
  std::string hint;
  if (err.find("offset 256 in the connect data") != std::string::npos)
    hint = "the target has no subsystem named '" + trid.subnqn + "'";
  else if (err.find("Invalid Host") != std::string::npos)
    hint = "the subsystem does not allow this host NQN (see the hostnqn option)";
  else if (err.find("TLS") != std::string::npos)
    hint = "see the tls and tls_key options, and the host NQN and subsystem the target has the PSK for";
  else if (err.find("DH-HMAC-CHAP") != std::string::npos)
    hint = "see the dhchap_secret and dhchap_ctrl_secret options, and the host NQN the target has the keys for";
  else if (err.find("Connection refused") != std::string::npos)
    hint = "nothing listens at " + trid.traddr + ":" + std::to_string(trid.trsvcid) + " (wrong trsvcid, or no target)";
  else if (err.find("timed out") != std::string::npos)
    hint = "the target did not answer (wrong traddr, or a firewall)";
  std::string s = "cannot connect to " + trid.subnqn + " at " + trid.traddr + ":" + std::to_string(trid.trsvcid) +
                  ": " + err;
  if (!hint.empty()) s += " -- " + hint;
  return s;
}

// The job's poll mode: poll=, with busy_poll=1 taking precedence; false if poll= is unknown.
bool job_poll_mode(thread_data* td, PollMode& m) {
  const EngineOptions& o = options(td);
  m = PollMode::Default;
  if (o.poll && *o.poll && !parse_poll_mode(o.poll, m)) return false;
  if (o.busy_poll) m = PollMode::Busy;
  return true;
}

// send_buffer=: empty leaves the host library's default; false if it is not a size up to 1 GiB.
bool job_send_buffer(thread_data* td, std::optional<uint32_t>& out) {
  const EngineOptions& o = options(td);
  if (!o.send_buffer || !*o.send_buffer) return true;
  uint64_t n = 0;
  if (!nvtcp::parse_size(o.send_buffer, n) || n > (1u << 30)) return false;
  out = uint32_t(n);
  return true;
}

// The recovery options are seconds, as nvme-cli takes them; the host library converts them,
// by the rules the nvtcp CLI's follow too.
bool job_recovery(thread_data* td, ControllerOptions& c, std::string& err) {
  const EngineOptions& o = options(td);
  RecoverySeconds s;
  s.ctrl_loss_tmo = o.ctrl_loss_tmo;
  s.reconnect_delay = o.reconnect_delay;
  s.fast_io_fail_tmo = o.fast_io_fail_tmo;
  s.io_timeout = o.io_timeout;
  return nvtcp::host::apply_recovery_seconds(s, c, err);
}

ControllerOptions controller_options(thread_data* td, uint32_t io_queues) {
  const EngineOptions& o = options(td);
  ControllerOptions c;
  std::memcpy(c.hostid, process_hostid(), 16);
  if (o.hostnqn && *o.hostnqn) c.hostnqn = o.hostnqn;
  c.kato_ms = o.kato;
  c.hdgst = o.hdgst != 0;
  c.ddgst = o.ddgst != 0;
  c.io_queues = std::max<uint32_t>(io_queues, 1);
  job_poll_mode(td, c.poll);  // checked in nvtcp_init
  if (o.tcp_congestion && *o.tcp_congestion) c.tcp_congestion = o.tcp_congestion;
  c.socket_buffer_bytes = uint32_t(o.socket_buffer);
  job_send_buffer(td, c.send_buffer_bytes);  // checked in nvtcp_init
  if (o.dhchap_secret && *o.dhchap_secret) c.dhchap_secret = o.dhchap_secret;
  if (o.dhchap_ctrl_secret && *o.dhchap_ctrl_secret) c.dhchap_ctrl_secret = o.dhchap_ctrl_secret;
  c.tls = o.tls != 0;
  if (o.tls_key && *o.tls_key) c.tls_key = o.tls_key;
  c.tls_legacy_derivation = o.tls_legacy_derivation != 0;
  c.tls_sha256_binder = o.tls_sha256_binder != 0;
  c.ktls = o.ktls != 0;
  std::string err;
  job_recovery(td, c, err);  // checked in nvtcp_init
  return c;
}

bool check_thread_mode(thread_data* td) {
  if (td->o.use_thread) return true;
  // The host library keeps a reactor per thread and an admin thread per controller; neither
  // survives fork(), which is what fio does for each job without thread=1.
  fail(td, EINVAL, "needs thread=1", "the nvtcp engine needs --thread=1 (job '%s' would run in a forked process)",
       td->o.name ? td->o.name : "?");
  return false;
}

// ------------------------------------------------------------------ namespace probe (setup path)

struct NamespaceFacts {
  bool ok = false;
  int err = 0;
  std::string why;
  uint64_t size = 0;
  uint32_t block_size = 0;
  uint32_t max_transfer = 0;
};

std::mutex g_probe_mu;
std::map<std::string, NamespaceFacts> g_probes;

// Connects, reads the namespace's size and block size, and disconnects.
NamespaceFacts probe_namespace(const TransportId& trid, const ControllerOptions& opts) {
  NamespaceFacts r;
  std::string err;
  auto ctrl = Controller::connect(trid, opts, err);
  if (!ctrl) {
    r.err = ECONNREFUSED;
    r.why = explain_connect_error(trid, err);
    return r;
  }
  nvtcp::host::NamespaceInfo ni;
  if (!ctrl->namespace_info(trid.nsid, ni, err)) {
    r.err = ENODEV;
    r.why = "namespace " + std::to_string(trid.nsid) + " of " + trid.subnqn + ": " + err;
    return r;
  }
  r.ok = true;
  r.size = ni.blocks * ni.block_size;
  r.block_size = ni.block_size;
  r.max_transfer = ctrl->max_transfer_bytes();
  return r;
}

// Block sizes fio may issue must be whole blocks. Larger than the controller's transfer limit
// (MDTS) is fine: the host library splits those into several commands.
bool check_block_sizes(thread_data* td, const fio_file* f, const NamespaceFacts& ns) {
  const thread_options& o = td->o;
  if (o.bs_unaligned && ns.block_size > 1)
    return !fail(td, EINVAL, "bad block size", "bs_unaligned cannot work on '%s': I/O must be whole %u-byte blocks",
                 f->file_name, ns.block_size);
  static const char* names[] = {"read", "write", "trim"};
  for (int d = DDIR_READ; d < DDIR_RWDIR_CNT; ++d) {
    bool used = (d == DDIR_READ && td_read(td)) || (d == DDIR_WRITE && td_write(td)) || (d == DDIR_TRIM && td_trim(td));
    if (!used) continue;
    unsigned long long lo = o.min_bs[d], hi = o.max_bs[d];
    if (lo % ns.block_size || hi % ns.block_size)
      return !fail(td, EINVAL, "bad block size",
                   "%s block size %llu%s%s is not a multiple of the namespace block size %u (%s)", names[d], lo,
                   hi != lo ? "-" : "", hi != lo ? std::to_string(hi).c_str() : "", ns.block_size, f->file_name);
  }
  return true;
}

int nvtcp_get_file_size(thread_data* td, fio_file* f) {
  if (fio_file_size_known(f)) return 0;
  if (!check_thread_mode(td)) return 1;
  // Check every file name first, so a filename fio split at ':' is reported as such and
  // not as a connection to a truncated NQN.
  TransportId trid;
  for (unsigned i = 0; i < td->files_index; ++i)
    if (td->files[i] && !parse_filename(td, td->files[i]->file_name, trid)) return 1;
  if (!parse_filename(td, f->file_name, trid)) return 1;
  ControllerOptions opts = controller_options(td, 1);
  std::string key = std::string(f->file_name) + '\n' + opts.hostnqn + '\n' + (opts.hdgst ? "h" : "") +
                    (opts.ddgst ? "d" : "") + '\n' + opts.tcp_congestion + '\n' +
                    // which secrets, without keeping their text in the cache
                    std::to_string(std::hash<std::string>{}(opts.dhchap_secret + '\n' + opts.dhchap_ctrl_secret + '\n' +
                                                            (opts.tls ? "tls\n" : "") + opts.tls_key));
  NamespaceFacts ns;
  {
    std::lock_guard lk(g_probe_mu);
    auto it = g_probes.find(key);
    if (it == g_probes.end()) it = g_probes.emplace(key, probe_namespace(trid, opts)).first;
    ns = it->second;
  }
  if (!ns.ok) return fail(td, ns.err, ns.err == ENODEV ? "no such namespace" : "cannot connect", "%s", ns.why.c_str());
  if (!check_block_sizes(td, f, ns)) return 1;
  f->real_file_size = ns.size;
  fio_file_set_size_known(f);
  return 0;
}

// ------------------------------------------------------------------ per-thread state (data path)

struct ThreadCtx;

// A file is one namespace reached through this thread's own controller and queue pairs.
struct FileCtx {
  // One path: its controller. Several (the paths option): the multipath controller, and ctrl is
  // one of its paths' controllers, for what the job asks of the namespace and the controller.
  std::unique_ptr<MultipathController> mp;
  std::shared_ptr<Controller> ctrl;
  std::vector<std::unique_ptr<QueuePair>> qps;
  std::vector<std::unique_ptr<MultipathQueuePair>> mqps;  // instead of qps, with several paths
  TransportId trid;
  uint32_t nsid = 1;
  uint32_t block_size = 512;
  uint32_t block_shift = 9;
  unsigned next_qp = 0;

  // Round robin over the queue pairs, skipping full ones; nullptr when all are full.
  QueuePair* pick() {
    size_t n = qps.size();
    for (size_t i = 0; i < n; ++i) {
      QueuePair* q = qps[next_qp].get();
      if (++next_qp == n) next_qp = 0;
      if (q->outstanding() < q->depth()) return q;
    }
    return nullptr;
  }
  MultipathQueuePair* pick_multipath() {
    size_t n = mqps.size();
    for (size_t i = 0; i < n; ++i) {
      MultipathQueuePair* q = mqps[next_qp].get();
      if (++next_qp == n) next_qp = 0;
      if (q->outstanding() < q->depth()) return q;
    }
    return nullptr;
  }
  ~FileCtx() {
    qps.clear();  // queue pairs close before their controller shuts down
    mqps.clear();
    ctrl.reset();
    mp.reset();
  }
};

// What a queued io_u needs until it completes; one per io_u, by io_u->index.
struct Slot {
  io_u* u = nullptr;
  ThreadCtx* t = nullptr;
  nvtcp::nvme::DsmRange range{};
};

struct ThreadCtx {
  std::vector<Slot> slots;
  std::vector<io_u*> done;    // ring of completed io_us not yet handed to fio
  size_t done_head = 0;
  size_t done_count = 0;
  std::vector<io_u*> events;  // what the last getevents() returned, for event()
  unsigned queued = 0;        // queued since the last commit
  uint64_t outstanding = 0;
  std::vector<std::unique_ptr<FileCtx>> files;
  QueuePair* poller = nullptr;  // any queue pair of this thread: they share its reactor
  // Multipath queue pairs: each sends what waits for a path when it is polled.
  std::vector<MultipathQueuePair*> multipath_qps;
  // Through the offload engine (trtype:engine) every queue pair has its own completion
  // queue in shared memory, read without a system call: each is polled.
  std::vector<QueuePair*> engine_qps;
  Controller* buffer_ctrl = nullptr;  // fio's I/O buffers came from this controller's region
  bool busy_poll = false;
  bool error_logged = false;
  bool closing = false;         // cleanup: io_us may be gone, completions only count down

  void push_done(io_u* u) {
    done[(done_head + done_count) % done.size()] = u;
    ++done_count;
  }
  // Moves completed io_us into events[] (up to max); returns how many events there are.
  unsigned reap(unsigned nevents, unsigned max) {
    while (done_count && nevents < max) {
      events[nevents++] = done[done_head];
      if (++done_head == done.size()) done_head = 0;
      --done_count;
    }
    return nevents;
  }
};

ThreadCtx* thread_ctx(thread_data* td) { return static_cast<ThreadCtx*>(td->io_ops_data); }

void on_complete(void* ctx, const Completion& c) {
  auto* s = static_cast<Slot*>(ctx);
  ThreadCtx* t = s->t;
  io_u* u = s->u;
  --t->outstanding;
  if (t->closing) return;
  if (c.status.ok()) {
    u->error = 0;
    u->resid = 0;
  } else {
    u->error = EIO;
    u->resid = u->xfer_buflen;
    if (!t->error_logged) {
      t->error_logged = true;
      log_err("nvtcp: %s of %llu bytes at offset %llu failed: %s\n", io_ddir_name(u->ddir), u->xfer_buflen, u->offset,
              nvtcp::nvme::status_name(c.status).c_str());
    }
  }
  t->push_done(u);
}

int nvtcp_init(thread_data* td) {
  if (!check_thread_mode(td)) return 1;
  auto t = std::make_unique<ThreadCtx>();
  size_t depth = std::max<unsigned>(td->o.iodepth, 1);
  t->slots.resize(depth);
  for (auto& s : t->slots) s.t = t.get();
  t->done.resize(depth);
  t->events.resize(depth);
  PollMode mode;
  if (!job_poll_mode(td, mode)) {
    log_err("nvtcp: poll=%s is not interrupt, busy or hybrid\n", options(td).poll);
    return 1;
  }
  t->busy_poll = mode == PollMode::Busy;
  std::optional<uint32_t> send_buffer;
  if (!job_send_buffer(td, send_buffer)) {
    log_err("nvtcp: send_buffer=%s is not a size up to 1g\n", options(td).send_buffer);
    return 1;
  }
  ControllerOptions scratch;
  std::string err;
  if (!job_recovery(td, scratch, err)) {
    log_err("nvtcp: %s\n", err.c_str());
    return 1;
  }
  td->io_ops_data = t.release();
  return 0;
}

void nvtcp_cleanup(thread_data* td) {
  ThreadCtx* t = thread_ctx(td);
  if (!t) return;
  // fio has reaped everything by now; anything still out fails as the connections close,
  // and its completion must not touch io_us fio may have freed.
  t->closing = true;
  t->files.clear();
  delete t;
  td->io_ops_data = nullptr;
}

// ------------------------------------------------------------------ starting together

// 32 jobs connecting one after another on a CPU where the first ones already spin take longer
// than a ramp: without a barrier some jobs were still connecting while others were measured
// (the first 200 ms of a run at 35-60% of its rate). With start_together a job that has
// connected (or failed to) waits, in post_init, for every job of its fio group that uses this
// engine, at most kStartTogetherWait.
constexpr auto kStartTogetherWait = std::chrono::seconds(10);

// One fio group's jobs. Released through a futex that wakes every waiter at once: with a
// condition variable each woken job took the mutex in turn, every hand-off waited for the
// scheduler on a CPU whose released jobs already ran I/O, and the 32 jobs left the barrier
// (and set their epochs) over 660 ms of a 1-s run.
struct StartGroup {
  std::atomic<uint32_t> arrived{0};
  std::atomic<uint32_t> released{0};
};

struct StartBarrier {
  std::mutex m;  // guards the map only; nobody waits holding it
  std::map<unsigned, std::unique_ptr<StartGroup>> groups;
};

StartGroup& start_group(unsigned groupid) {
  static StartBarrier b;
  std::lock_guard lk(b.m);
  auto& g = b.groups[groupid];
  if (!g) g = std::make_unique<StartGroup>();
  return *g;
}

// The jobs of td's group that use the same ioengine (fio's job table, fixed once jobs run).
unsigned group_jobs(thread_data* td) {
  unsigned n = 0;
  thread_data* other;
  int i;
  for_each_td(other, i) {
    if (other->groupid == td->groupid && other->o.ioengine && td->o.ioengine &&
        std::strcmp(other->o.ioengine, td->o.ioengine) == 0)
      ++n;
  }
  return n;
}

void start_together(thread_data* td) {
  const unsigned want = group_jobs(td);
  StartGroup& g = start_group(td->groupid);
  auto* word = reinterpret_cast<uint32_t*>(&g.released);
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  if (g.arrived.fetch_add(1) + 1 >= want) {
    g.released.store(1);
    ::syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
    return;
  }
  const auto until = std::chrono::steady_clock::now() + kStartTogetherWait;
  while (!g.released.load()) {
    const auto left = until - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds(0)) {
      log_info("nvtcp: job %s starts after waiting %llds for %u of its group's %u jobs to connect\n", td->o.name,
               (long long)kStartTogetherWait.count(), want - std::min(want, g.arrived.load()), want);
      return;
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec ts{time_t(ns / 1'000'000'000), long(ns % 1'000'000'000)};
    ::syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 0, &ts, nullptr, 0);  // returns at once if released
  }
}

int open_file_connect(thread_data* td, fio_file* f);

// Connects this thread's controller and queue pairs for a file (once; fio may close and
// reopen files during a run, and the connection stays until cleanup).
int nvtcp_open_file(thread_data* td, fio_file* f) {
  if (FILE_ENG_DATA(f)) return 0;
  return open_file_connect(td, f);
}

// Maps every page of the job's I/O buffers now, contents kept (fio has already filled a
// writer's). fio leaves a reader's untouched, so with the jobs started together their first
// reads paid 32 x 4 MiB of page faults at once, at 128 KiB on one CPU for longer than a
// 300-ms ramp (the measured window's first 200 ms at 10-40% of the rate after it).
void prefault_buffers(thread_data* td) {
  if (!td->orig_buffer || !td->orig_buffer_size) return;
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t from = uintptr_t(td->orig_buffer) & ~(page - 1);
  const uintptr_t to = uintptr_t(td->orig_buffer) + td->orig_buffer_size;
  if (::madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE) == 0) return;
  // Kernels before 5.14: write each page's first byte back to itself.
  for (uintptr_t a = std::max(from, uintptr_t(td->orig_buffer)); a < to; a = (a & ~(page - 1)) + page) {
    volatile char* b = reinterpret_cast<volatile char*>(a);
    *b = *b;
  }
}

// Runs after fio made the job's buffers and before it sets the job's epoch (the clock its
// ramp_time and runtime count from): every file is connected, and with start_together the
// job waits for its group, here. Connected later (fio opens files lazily, in its I/O loop),
// each job's measured window began at its own thread's start, 32 jobs' windows were spread
// over their connects, and jobs that finished their window early left the rest a faster
// machine: fio's sum ran 1.19x what the target served in 1-s runs (RESULTS 2026-12-06).
int nvtcp_post_init(thread_data* td) {
  prefault_buffers(td);
  int rc = 0;
  for (unsigned i = 0; i < td->files_index && rc == 0; ++i) rc = nvtcp_open_file(td, td->files[i]);
  if (options(td).start_together) start_together(td);  // a job that failed arrives too
  return rc;
}

// intr_coalesce: Set Features Interrupt Coalescing (08h) on the job's engine controller:
// aggregation threshold in bits 7:0 (0's based), aggregation time in bits 15:8 (100-us units).
bool set_interrupt_coalescing(thread_data* td, FileCtx& fc) {
  const EngineOptions& o = options(td);
  if (o.intr_coalesce <= 1) return true;
  if (fc.trid.trtype != "engine")
    return !fail(td, EINVAL, "intr_coalesce needs the engine",
                 "intr_coalesce=%u: only a controller of the offload engine (trtype=engine) interrupts; over "
                 "NVMe/TCP a job waits on its socket",
                 o.intr_coalesce);
  nvtcp::nvme::Sqe sqe{};
  sqe.opc = uint8_t(nvtcp::nvme::AdminOpcode::SetFeatures);
  sqe.cdw10 = 0x08;
  const uint32_t time_units = (o.intr_coalesce_us + 99) / 100;
  sqe.cdw11 = (o.intr_coalesce - 1) | (std::min<uint32_t>(time_units, 255) << 8);
  const nvtcp::host::Completion c = fc.ctrl->admin(sqe, nullptr, 0, false);
  if (!c.status.ok())
    return !fail(td, EIO, "interrupt coalescing refused", "Set Features Interrupt Coalescing (%u, %u us) on %s: %s",
                 o.intr_coalesce, time_units * 100, fc.trid.subnqn.c_str(),
                 nvtcp::nvme::status_name(c.status).c_str());
  return true;
}

int open_file_connect(thread_data* td, fio_file* f) {
  ThreadCtx* t = thread_ctx(td);
  auto fc = std::make_unique<FileCtx>();
  if (!parse_filename(td, f->file_name, fc->trid)) return 1;
  unsigned qpairs = std::max<unsigned>(options(td).qpairs, 1);
  std::string err;
  const EngineOptions& eo = options(td);
  if (eo.paths && *eo.paths) {
    std::vector<TransportId> paths{fc->trid};
    if (!parse_paths(td, eo.paths, fc->trid, paths)) return 1;
    MultipathOptions mo;
    if (eo.path_policy && *eo.path_policy && !nvtcp::host::parse_path_policy(eo.path_policy, mo.policy))
      return fail(td, EINVAL, "bad path_policy", "path_policy=%s: round-robin or queue-depth", eo.path_policy);
    mo.max_failovers = eo.max_failovers;
    fc->mp = MultipathController::connect(paths, controller_options(td, qpairs), mo, err);
    if (!fc->mp) return fail(td, ECONNREFUSED, "cannot connect", "%s", explain_connect_error(fc->trid, err).c_str());
    fc->ctrl = fc->mp->any_controller();
    if (!fc->ctrl) return fail(td, ECONNREFUSED, "cannot connect", "no path of %s is connected", fc->trid.subnqn.c_str());
  } else {
    fc->ctrl = Controller::connect(fc->trid, controller_options(td, qpairs), err);
  }
  if (!fc->ctrl) return fail(td, ECONNREFUSED, "cannot connect", "%s", explain_connect_error(fc->trid, err).c_str());
  nvtcp::host::NamespaceInfo ni;
  if (!fc->ctrl->namespace_info(fc->trid.nsid, ni, err))
    return fail(td, ENODEV, "no such namespace", "namespace %u of %s: %s", fc->trid.nsid, fc->trid.subnqn.c_str(),
                err.c_str());
  if (ni.block_size == 0 || (ni.block_size & (ni.block_size - 1)))
    return fail(td, EINVAL, "no such namespace", "namespace %u reports block size %u", fc->trid.nsid, ni.block_size);
  fc->nsid = fc->trid.nsid;
  fc->block_size = ni.block_size;
  fc->block_shift = unsigned(__builtin_ctz(ni.block_size));
  if (fc->ctrl->io_queues_granted() < qpairs)
    return fail(td, EINVAL, "too many qpairs", "qpairs=%u but the controller granted only %u I/O queues", qpairs,
                fc->ctrl->io_queues_granted());
  uint32_t mqes = uint32_t(fc->ctrl->cap() & 0xFFFF) + 1;
  // An I/O over MDTS takes one slot per command it becomes: room for iodepth of the largest.
  const unsigned long long max_bs = std::max({td->o.max_bs[DDIR_READ], td->o.max_bs[DDIR_WRITE], 1ull});
  const uint32_t mdts = fc->ctrl->max_transfer_bytes();
  const uint32_t per_io = mdts ? uint32_t((max_bs + mdts - 1) / mdts) : 1;
  uint32_t depth = std::min<uint32_t>(std::max<unsigned>(td->o.iodepth, 1) * std::max(per_io, 1u), mqes);
  for (unsigned i = 0; i < qpairs && fc->mp; ++i) {
    auto q = fc->mp->create_io_qpair(depth, err);
    if (!q)
      return fail(td, ECONNREFUSED, "cannot create a queue pair", "I/O queue pair %u of %u to %s: %s", i + 1, qpairs,
                  fc->trid.subnqn.c_str(), err.c_str());
    t->multipath_qps.push_back(q.get());
    fc->mqps.push_back(std::move(q));
  }
  for (unsigned i = 0; i < qpairs && !fc->mp; ++i) {
    auto qp = fc->ctrl->create_io_qpair(depth, err);
    if (!qp)
      return fail(td, ECONNREFUSED, "cannot create a queue pair", "I/O queue pair %u of %u to %s: %s", i + 1, qpairs,
                  fc->trid.subnqn.c_str(), err.c_str());
    fc->qps.push_back(std::move(qp));
  }
  if (!set_interrupt_coalescing(td, *fc)) return 1;
  if (!t->poller && !fc->qps.empty()) t->poller = fc->qps.front().get();
  if (fc->trid.trtype == "engine")
    for (auto& qp : fc->qps) t->engine_qps.push_back(qp.get());
  FILE_SET_ENG_DATA(f, fc.get());
  t->files.push_back(std::move(fc));
  return 0;
}

int nvtcp_close_file(thread_data*, fio_file* f) {
  // Keep the connection for a reopen; cleanup() closes it. fio forgets the file's engine
  // data when it frees the file, so nothing dangles.
  (void)f;
  return 0;
}

int nvtcp_unlink_file(thread_data*, fio_file*) { return 0; }  // nothing on disk to remove

fio_q_status nvtcp_queue(thread_data* td, io_u* u) {
  fio_ro_check(td, u);
  ThreadCtx* t = thread_ctx(td);
  auto* fc = static_cast<FileCtx*>(FILE_ENG_DATA(u->file));
  if (u->index >= t->slots.size()) {
    u->error = EINVAL;
    return FIO_Q_COMPLETED;
  }
  QueuePair* one = fc->mp ? nullptr : fc->pick();
  MultipathQueuePair* multi = fc->mp ? fc->pick_multipath() : nullptr;
  if (!one && !multi) return FIO_Q_BUSY;
  Slot& s = t->slots[u->index];
  s.u = u;
  uint64_t lba_mask = fc->block_size - 1;
  int rc;
  switch (u->ddir) {
    case DDIR_READ:
    case DDIR_WRITE:
    case DDIR_TRIM: {
      if ((u->offset & lba_mask) || (u->xfer_buflen & lba_mask) || u->xfer_buflen == 0) {
        log_err("nvtcp: %s of %llu bytes at offset %llu is not in whole %u-byte blocks\n", io_ddir_name(u->ddir),
                u->xfer_buflen, u->offset, fc->block_size);
        u->error = EINVAL;
        return FIO_Q_COMPLETED;
      }
      uint64_t slba = u->offset >> fc->block_shift;
      uint64_t nlb = u->xfer_buflen >> fc->block_shift;
      if (u->ddir == DDIR_READ) {
        rc = nlb > 65536 ? -EINVAL
             : multi     ? multi->read(fc->nsid, slba, uint32_t(nlb), u->xfer_buf, on_complete, &s)
                         : one->read(fc->nsid, slba, uint32_t(nlb), u->xfer_buf, on_complete, &s);
      } else if (u->ddir == DDIR_WRITE) {
        rc = nlb > 65536 ? -EINVAL
             : multi     ? multi->write(fc->nsid, slba, uint32_t(nlb), u->xfer_buf, on_complete, &s)
                         : one->write(fc->nsid, slba, uint32_t(nlb), u->xfer_buf, on_complete, &s);
      } else {
        if (nlb > 0xFFFFFFFFull) {
          rc = -EINVAL;
          break;
        }
        s.range.cattr = 0;
        s.range.nlb = uint32_t(nlb);
        s.range.slba = slba;
        rc = multi ? multi->deallocate(fc->nsid, &s.range, 1, on_complete, &s)
                   : one->deallocate(fc->nsid, &s.range, 1, on_complete, &s);
      }
      break;
    }
    case DDIR_SYNC:
    case DDIR_DATASYNC:
    case DDIR_SYNC_FILE_RANGE:
      rc = multi ? multi->flush(fc->nsid, on_complete, &s) : one->flush(fc->nsid, on_complete, &s);
      break;
    default:
      rc = -EINVAL;
      break;
  }
  if (rc == -EBUSY) return FIO_Q_BUSY;
  if (rc != 0) {
    u->error = unsigned(-rc);
    return FIO_Q_COMPLETED;
  }
  ++t->outstanding;
  ++t->queued;
  return FIO_Q_QUEUED;
}

int nvtcp_commit(thread_data* td) {
  ThreadCtx* t = thread_ctx(td);
  if (t->queued) {
    io_u_mark_submit(td, t->queued);
    t->queued = 0;
  }
  return 0;
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// Hands fio completed io_us, running this thread's reactor for more while fewer than min
// are in.
int nvtcp_getevents(thread_data* td, unsigned int min, unsigned int max, const struct timespec* ts) {
  ThreadCtx* t = thread_ctx(td);
  if (!t->poller && t->multipath_qps.empty()) return 0;
  max = std::min<unsigned>(max, unsigned(t->events.size()));
  min = std::min(min, max);
  constexpr uint64_t kMaxWaitUs = 100000;
  uint64_t deadline = ts ? now_ns() + uint64_t(ts->tv_sec) * 1000000000ull + uint64_t(ts->tv_nsec) : 0;
  // Completions left over from the last poll come first, without a syscall: fio asks for
  // one event at a time by default (iodepth_batch_complete_max=0), and polling for each
  // would cost an io_uring_enter per I/O. What fio queued meanwhile goes out in one batch
  // at the next poll, as nvtcp perf does it.
  unsigned n = t->reap(0, max);
  if (n > 0 && n >= min) {
    return int(n);
  }
  // One io_uring_enter both sends what is queued and sleeps until something arrives (it
  // returns at once if completions are already there); min == 0 only peeks.
  for (;;) {
    uint64_t wait_us = 0;
    if (min > n && !t->busy_poll) {
      wait_us = kMaxWaitUs;
      if (ts) {
        uint64_t now = now_ns();
        wait_us = now >= deadline ? 0 : std::min<uint64_t>(wait_us, (deadline - now + 999) / 1000);
      }
    }
    if (!t->multipath_qps.empty()) {
      // Every path's queue is on this thread's reactor: one turn (the first's) serves them all.
      for (size_t i = 0; i < t->multipath_qps.size(); ++i)
        t->multipath_qps[i]->process_completions(i == 0 && !t->poller ? uint32_t(wait_us) : 0);
      if (t->poller) t->poller->process_completions(uint32_t(wait_us));
    } else if (t->engine_qps.empty()) {
      t->poller->process_completions(uint32_t(wait_us));
    } else {
      // Each engine queue pair is looked at without waiting; when none had anything, the
      // first one waits (spinning, then on its interrupt eventfd) for up to wait_us.
      int got = 0;
      for (QueuePair* qp : t->engine_qps) got += qp->process_completions(0);
      if (!got && wait_us) t->engine_qps.front()->process_completions(uint32_t(std::min<uint64_t>(wait_us, 1000)));
    }
    n = t->reap(n, max);
    if (n >= min || n >= max || t->outstanding == 0) break;
    if (ts && now_ns() >= deadline) break;
  }
  return int(n);
}

io_u* nvtcp_event(thread_data* td, int event) { return thread_ctx(td)->events[size_t(event)]; }

// fio's I/O buffers. Through the offload engine they must lie in the region the engine
// shares with this process (the DMA-buffer analog): the job's first file is connected here,
// before fio asks for buffers, and its controller hands them out. Over TCP they are plain
// memory, as fio's default (mem=malloc) gives.
int nvtcp_iomem_alloc(thread_data* td, size_t total) {
  ThreadCtx* t = thread_ctx(td);
  if (!t) return 1;
  TransportId trid;
  std::string err;
  fio_file* first = td->files_index ? td->files[0] : nullptr;
  if (first && TransportId::parse(first->file_name, trid, err) && trid.trtype == "engine") {
    if (nvtcp_open_file(td, first) != 0) return 1;
    auto* fc = static_cast<FileCtx*>(FILE_ENG_DATA(first));
    void* p = fc->ctrl->alloc_io_buffer(total);
    if (!p)
      return fail(td, ENOMEM, "no I/O buffers",
                  "%zu bytes of I/O buffers do not fit the engine's shared region (see the engine's region size)",
                  total);
    t->buffer_ctrl = fc->ctrl.get();
    td->orig_buffer = static_cast<char*>(p);
    return 0;
  }
  // Over TCP, as Controller::alloc_io_buffer gives them: large buffers on 2-MiB boundaries,
  // with transparent huge pages asked for (32 jobs x 32 x 128 KiB are 32,768 small pages).
  constexpr size_t kHugePage = size_t(2) << 20;
  void* p = nullptr;
  if (posix_memalign(&p, total >= kHugePage ? kHugePage : 4096, total) != 0) return 1;
  if (total >= kHugePage) ::madvise(p, total, MADV_HUGEPAGE);  // refused where THP is off: small pages
  td->orig_buffer = static_cast<char*>(p);
  return 0;
}

void nvtcp_iomem_free(thread_data* td) {
  ThreadCtx* t = thread_ctx(td);
  if (t && t->buffer_ctrl) t->buffer_ctrl->free_io_buffer(td->orig_buffer);
  else free(td->orig_buffer);
  td->orig_buffer = nullptr;
}

}  // namespace

// ------------------------------------------------------------------ the engine fio loads

extern "C" {

// fio finds this data symbol after dlopen() and writes into it (list, dlhandle).
__attribute__((visibility("default"))) struct ioengine_ops ioengine = {
    .name = kEngineName,
    .version = FIO_IOOPS_VERSION,
    // DISKLESSIO: no local file to create or lay out (size comes from get_file_size);
    // NODISKUTIL: no block device to sample; NOEXTEND: a namespace cannot grow;
    // NO_OFFLOAD: a queue pair belongs to the thread that made it, so io_submit_mode=offload
    // (queue() from other threads) is refused. FIO_MEMALIGN is left out: in fio 3.33 it only
    // pads the buffer allocation, and TCP needs no buffer alignment.
    .flags = FIO_DISKLESSIO | FIO_NODISKUTIL | FIO_NOEXTEND | FIO_NO_OFFLOAD,
    .init = nvtcp_init,
    .post_init = nvtcp_post_init,
    .queue = nvtcp_queue,
    .commit = nvtcp_commit,
    .getevents = nvtcp_getevents,
    .event = nvtcp_event,
    .cleanup = nvtcp_cleanup,
    .open_file = nvtcp_open_file,
    .close_file = nvtcp_close_file,
    .unlink_file = nvtcp_unlink_file,
    .get_file_size = nvtcp_get_file_size,
    .iomem_alloc = nvtcp_iomem_alloc,
    .iomem_free = nvtcp_iomem_free,
    .option_struct_size = sizeof(EngineOptions),
    .options = g_options,
};

}  // extern "C"

// Loaded with LD_PRELOAD (or dlopen), the engine also registers itself by name, so
// --ioengine=nvtcp works without a path, as with SPDK's plugin.
__attribute__((constructor)) static void nvtcp_fio_register() { register_ioengine(&ioengine); }
__attribute__((destructor)) static void nvtcp_fio_unregister() { unregister_ioengine(&ioengine); }

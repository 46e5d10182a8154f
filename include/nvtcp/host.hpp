// SPDX-License-Identifier: Apache-2.0
// nvtcp host library: connect to an NVMe/TCP controller, make I/O queue pairs, submit NVMe
// commands with a completion callback, and poll for completions.
//
//   auto ctrl = nvtcp::host::Controller::connect(trid, opts, err);
//   auto qp = ctrl->create_io_qpair(128, err);          // one TCP connection
//   qp->read(1, lba, nlb, buf, on_done, ctx);           // asynchronous
//   while (...) qp->process_completions();               // drives this thread's reactor
//
// A queue pair belongs to the thread that created it (shared-nothing); several queue pairs
// on one thread share that thread's reactor. The admin queue runs on a thread of its own,
// which also sends Keep Alive and keeps Asynchronous Event Requests outstanding, so the
// namespaces the host knows follow the controller's (see namespace_info()).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"
#include "nvtcp/poll_mode.hpp"
#include "nvtcp/sqe.hpp"
#include "nvtcp/status.hpp"

namespace nvtcp::host {

// A transport ID in SPDK's form: "trtype:tcp adrfam:IPv4 traddr:127.0.0.1 trsvcid:4420
// subnqn:nqn... [hostnqn:nqn...] [ns:1] [hdgst] [ddgst]". '=' may replace ':' (fio splits
// file names on ':').
struct TransportId {
  std::string trtype = "tcp";
  std::string adrfam = "IPv4";
  std::string traddr = "127.0.0.1";
  uint16_t trsvcid = 4420;
  std::string subnqn;
  std::string hostnqn;
  uint32_t nsid = 1;
  bool hdgst = false;
  bool ddgst = false;

  static bool parse(const std::string& text, TransportId& out, std::string& err);
  std::string to_string() const;
};

// "default", "interrupt", "busy" or "hybrid" (command-line and fio option values); false if unknown.
bool parse_poll_mode(const std::string& text, PollMode& out);

// How each thread's reactor (one io_uring per thread, shared by that thread's queue pairs)
// moves bytes. Process-wide: set before the first queue pair is created; a thread's reactor
// keeps the options it was made with. The per-controller choices (poll mode, SQ polling,
// TCP congestion control) are in ControllerOptions.
struct DataPathOptions {
  // With ControllerOptions::sqpoll: the CPU the kernel's SQ thread is pinned to (-1: any).
  int sq_thread_cpu = -1;
  // A send that carries a segment of at least this many bytes goes zero-copy (the kernel
  // sends from the application's pages, and the write completes once the kernel lets go of
  // them). 0 = never; worth it from about 16 KiB.
  uint32_t zero_copy_send_threshold = 0;
  // Receive with one multishot receive per connection into a ring of buffers shared by the
  // thread's connections, rather than one receive per connection per arrival.
  bool recv_multishot = false;
  // Busy and hybrid polling: a latency-bound connection is polled with a plain non-blocking
  // receive while the reactor spins, which finds bytes sooner than io_uring's poll.
  bool spin_recv = true;
};
void set_data_path_options(const DataPathOptions& options);
DataPathOptions data_path_options();

struct ControllerOptions {
  std::string hostnqn;               // empty: derived from the host ID
  // DH-HMAC-CHAP in-band authentication, run on every queue whose Connect the controller
  // answers with "authenticate" (ATR): the host's secret and, to have the controller prove
  // itself as well, the controller's; each as nvme-cli's gen-dhchap-key writes it
  // ("DHHC-1:XX:<base64>:") or "@FILE", a file that only its owner may read.
  std::string dhchap_secret;
  std::string dhchap_ctrl_secret;
  // TLS 1.3 secure channel (NVMe/TCP TLS, PSK only) on every queue: the configured PSK in the
  // interchange format nvme-cli's gen-tls-key writes ("NVMeTLSkey-1:01:<base64>:") or "@FILE".
  // The host offers the identity "NVMe0R0H <hostnqn> <subnqn>" (tls_identity_version 1: the
  // "NVMe1R0H ... <digest>" form) and derives the TLS PSK with RFC 8446's labels, as the Linux
  // kernel and SPDK do. libnvme up to 1.14 (nvme-cli up to 2.14) derived it with labels of its
  // own, and a Linux target's keyring filled by those holds that key: when the target refuses
  // the first handshake, the host tries once more with the legacy derivation, logs it, and keeps
  // the derivation that worked for every queue of the controller. tls_legacy_derivation or
  // tls_rfc8446_derivation derives it one way only. A SHA-384 PSK binds the handshake
  // with SHA-384 and ends on TLS_AES_256_GCM_SHA384, as the specification says;
  // tls_sha256_binder binds it with SHA-256 (a SHA-256 suite then), as tlshd 1.0 (ktls-utils,
  // the Linux target's handshake agent) binds and expects every PSK.
  bool tls = false;
  std::string tls_key;
  int tls_identity_version = 0;
  bool tls_legacy_derivation = false;
  bool tls_sha256_binder = false;
  bool tls_rfc8446_derivation = false;
  // Once a connection's handshake is done, the kernel's kTLS seals the records it sends where the
  // kernel has the tls module (else, or with false, nvtcp's own record layer does). Received
  // records are always opened by nvtcp.
  bool ktls = true;
  uint8_t hostid[16] = {};           // all zero: a random one per process
  uint32_t kato_ms = 30000;          // keep-alive timeout asked for (0 = none)
  uint32_t keep_alive_interval_ms = 0;  // how often Keep Alive is sent; 0 = kato_ms / 2
  uint16_t admin_queue_depth = 32;
  uint32_t connect_timeout_ms = 5000;
  uint32_t io_queues = 64;           // how many I/O queues to ask for
  bool hdgst = false;
  bool ddgst = false;
  std::string tcp_congestion;        // per-socket congestion control (e.g. "cubic")
  // SO_RCVBUF and SO_SNDBUF of each connection, fixed (0: the defaults: a 4 MiB receive buffer,
  // autotuned where net.core.rmem_max is lower, and send_buffer_bytes').
  uint32_t socket_buffer_bytes = 0;
  // SO_SNDBUF alone (0: the kernel autotunes it). Not set: socket_buffer_bytes if that is,
  // else 512 KiB: a bounded send buffer keeps large writes from queueing megabytes in the
  // socket, which bbr paces badly (the receive buffer keeps its default).
  std::optional<uint32_t> send_buffer_bytes;
  // How the I/O queues wait for completions (nvtcp/poll_mode.hpp). Default: Hybrid over TCP,
  // the fastest on an idle machine; Interrupt through the offload engine (trtype:engine),
  // whose own cores poll: the application's CPU is what the engine is there to save.
  PollMode poll = PollMode::Default;

  // Recovery, with the Linux host's meaning. When a connection is lost, or a command times
  // out and Abort does not help, the controller is reset: the admin queue and then every
  // I/O queue reconnect, first after reconnect_delay_ms and again every reconnect_delay_ms
  // until ctrl_loss_tmo_ms has passed since the loss; the commands that were in flight are
  // sent again on the new connection (each at most max_retries times). ctrl_loss_tmo_ms = 0:
  // no reconnect, a lost connection fails its commands with a path error at once.
  uint32_t ctrl_loss_tmo_ms = 0;
  uint32_t reconnect_delay_ms = 2000;
  // While reconnecting, held and new I/O fail with a path error once this long has passed
  // since the loss; -1: they wait until the controller is back or lost for good.
  int32_t fast_io_fail_tmo_ms = -1;
  // A command still outstanding after io_timeout_ms gets an Abort; if it is still
  // outstanding io_timeout_ms later, the controller is reset. 0 = no timeout.
  uint32_t io_timeout_ms = 30000;
  // An admin command (Keep Alive included) outstanding this long resets the controller.
  uint32_t admin_timeout_ms = 10000;
  uint32_t max_retries = 5;
  bool sqpoll = false;               // the I/O queues' reactor gets an io_uring SQ thread

  // Called on the admin thread (through the offload engine: the library's notice thread) for
  // each namespace a rescan found added, removed, resized, reformatted or replaced (another
  // namespace under the same NSID: its NGUID or EUI-64 changed), once namespace_info(),
  // active_namespaces() and QueuePair::block_size() show
  // the new state. Rescans follow the controller's namespace attribute notices and every
  // reconnect; after a reconnect the callback runs before the I/O queues reconnect. Keep it
  // short: keep-alive waits for it. namespace_info() and active_namespaces() may be called
  // from it, and admin() (run in place); rescan_namespaces() may not. Not called for the
  // namespaces found at connect.
  std::function<void(uint32_t nsid)> on_namespace_change;

  // trtype:engine only: the data region shared with the engine, from which
  // Controller::alloc_io_buffer() hands out I/O buffers (the first MiB carries admin data).
  uint64_t engine_region_bytes = 256ull << 20;
};

// The recovery and keep-alive timeouts in seconds, nvme-cli's units (nvme connect
// --ctrl-loss-tmo, --reconnect-delay, --fast_io_fail_tmo, --keep-alive-tmo), as command lines,
// configuration files and the fio engine take them. An empty one leaves its option as it is.
struct RecoverySeconds {
  std::optional<double> ctrl_loss_tmo;     // 0: no reconnect
  std::optional<double> reconnect_delay;   // more than 0
  std::optional<double> fast_io_fail_tmo;  // -1: held I/O waits for ctrl_loss_tmo
  std::optional<double> keep_alive_tmo;    // kato; 0: no keep-alive
  std::optional<double> io_timeout;        // 0: no timeout
};
// Sets the ControllerOptions these stand for, by one set of rules for every caller: each
// value must lie in [0, 1e6] seconds (fast_io_fail_tmo may also be -1) and is rounded to the
// nearest millisecond; a reconnect delay is at least 1 ms (0 would retry in a tight loop, and
// Linux refuses it too). False and err, naming the option, for a value it refuses; o is then
// unchanged.
bool apply_recovery_seconds(const RecoverySeconds& s, ControllerOptions& o, std::string& err);

// What a completion callback receives: the CQE's status and command-specific dwords.
struct Completion {
  nvme::Status status;
  uint32_t dw0 = 0;
  uint32_t dw1 = 0;
};
using CompletionFn = void (*)(void* ctx, const Completion& cpl);

struct WriteFlags {
  // Force Unit Access: the write completes only once it is durable, whatever the
  // controller's volatile write cache holds (without it, a Flush makes it durable).
  bool fua = false;
};

namespace detail {
class IoQueue;
class EngineClient;
class SplitPool;
}  // namespace detail

class QueuePair {
 public:
  // Closes the connection; commands still outstanding complete (inside the destructor)
  // with a path error, so their callbacks and buffers must still be valid.
  ~QueuePair();
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  // Submits one NVMe command. data/len describe its data buffer (nullptr/0 for none);
  // to_controller says which way it flows. Returns 0, -EBUSY when the queue is full, or
  // -ENOTCONN when the connection has failed. cb runs inside process_completions().
  // Through the offload engine (trtype:engine) the buffer must come from the controller's
  // alloc_io_buffer() (the engine moves data to and from that shared region only); any
  // other buffer gives -EFAULT.
  int submit(const nvme::Sqe& sqe, void* data, uint32_t len, bool to_controller, CompletionFn cb, void* ctx);
  // A read or write larger than the controller's largest transfer (MDTS) is sent as several
  // commands, as the Linux block layer and SPDK's driver split it; cb runs once, when the last
  // one completes, with the first failure if any. It needs that many free slots at once
  // (-EBUSY until then; -EINVAL if the queue pair's depth is smaller).
  int read(uint32_t nsid, uint64_t slba, uint32_t nlb, void* buf, CompletionFn cb, void* ctx);
  int write(uint32_t nsid, uint64_t slba, uint32_t nlb, const void* buf, CompletionFn cb, void* ctx,
            WriteFlags flags = {});
  // Makes every write completed before it durable; nsid nvme::kNsidAll flushes every namespace.
  int flush(uint32_t nsid, CompletionFn cb, void* ctx);
  int write_zeroes(uint32_t nsid, uint64_t slba, uint32_t nlb, CompletionFn cb, void* ctx);
  // ranges: n Dataset Management ranges (16 bytes each), sent with the Deallocate attribute.
  int deallocate(uint32_t nsid, const nvme::DsmRange* ranges, uint32_t n, CompletionFn cb, void* ctx);

  // Runs this thread's reactor once: sends what was submitted, waits up to timeout_us for
  // something to arrive (0 = don't wait), and delivers completions. Returns how many
  // completions this queue pair delivered.
  int process_completions(uint32_t timeout_us = 0);
  // Runs DH-HMAC-CHAP again on this queue with the controller's secrets (a host may
  // re-authenticate at any time; Linux does when its secret changes), on the calling thread,
  // which must be the one that drives this queue pair and not inside a completion callback:
  // it waits in process_completions(), so other commands' completions are delivered meanwhile
  // and their I/O goes on. 0, or -errno with err saying why: EINVAL without a secret, ENOTCONN
  // while not connected, EACCES when the transaction failed (the controller then closes the
  // queue), ENOTSUP through the offload engine (its own connections are its business).
  int reauthenticate(std::string& err);

  uint16_t qid() const;
  uint32_t depth() const;
  uint32_t outstanding() const;
  // True once the queue pair has failed for good (no reconnect, or the controller is lost);
  // while it reconnects it is not failed, and submissions wait in the queue.
  bool failed() const;
  // Whether the connection is up now, and how many times it was re-established.
  bool connected() const;
  uint32_t reconnects() const;
  // The block size of a namespace as the controller reported it at the last rescan (0 if
  // unknown). Takes no lock: the admin thread may publish a rescan meanwhile.
  uint32_t block_size(uint32_t nsid) const;

 private:
  friend class Controller;
  explicit QueuePair(std::unique_ptr<detail::IoQueue> impl, uint32_t max_transfer);
  int read_write(nvme::IoOpcode op, uint32_t nsid, uint64_t slba, uint32_t nlb, void* buf, bool to_controller,
                 uint32_t cdw12_flags, CompletionFn cb, void* ctx);
  uint32_t max_transfer_;  // the controller's MDTS in bytes (0: no limit)
  // Declared before impl_ so that it outlives it: impl_'s destructor completes what is still
  // outstanding, parts of split commands included.
  std::unique_ptr<detail::SplitPool> splits_;
  std::unique_ptr<detail::IoQueue> impl_;
};

struct NamespaceInfo {
  uint32_t nsid = 0;
  uint64_t blocks = 0;
  uint32_t block_size = 0;
  uint8_t nguid[16] = {};
  uint8_t eui64[8] = {};
};

class MultipathQueuePair;

class Controller {
 public:
  // Connects the admin queue, enables the controller, identifies it and (for an I/O
  // controller) negotiates the number of I/O queues. Returns nullptr and err on failure.
  static std::unique_ptr<Controller> connect(const TransportId& trid, const ControllerOptions& opts,
                                             std::string& err);
  ~Controller();  // shuts the controller down (CC.SHN) and closes the admin queue

  // A new I/O queue pair with its own TCP connection (through the offload engine: its own
  // queues in the shared region), driven by the calling thread.
  std::unique_ptr<QueuePair> create_io_qpair(uint32_t depth, std::string& err);

  // An I/O buffer (4 KiB aligned) for this controller's queue pairs: the DMA buffer's
  // analog. Through the offload engine it lies in the region the engine shares with this
  // process (nullptr when that is full); over TCP it is ordinary memory. Freed with
  // free_io_buffer() while the controller exists.
  void* alloc_io_buffer(size_t len);
  void free_io_buffer(void* p);

  // Synchronous admin commands (the admin thread runs them).
  Completion admin(const nvme::Sqe& sqe, void* data, uint32_t len, bool to_controller);
  // Runs DH-HMAC-CHAP again on the admin queue with the configured secrets (the I/O queue pairs
  // each with QueuePair::reauthenticate, on their own threads). 0, or -errno with err saying
  // why, as QueuePair::reauthenticate; a failed transaction costs the controller its admin queue.
  int reauthenticate(std::string& err);
  Completion identify(uint8_t cns, uint32_t nsid, void* buf4k, uint32_t cdw11 = 0);
  Completion get_log_page(uint8_t lid, uint32_t nsid, void* buf, uint32_t len, uint64_t offset = 0);

  // The namespaces as the host last scanned them: at connect, after every reconnect, and
  // whenever the controller reports a namespace attribute change (the admin thread reads the
  // changed-namespace log and identifies those namespaces again). No command is sent, so any
  // thread may ask at any time. Through the offload engine (trtype:engine) the same holds: the
  // library's notice thread rescans when the engine passes a notice on.
  bool namespace_info(uint32_t nsid, NamespaceInfo& out, std::string& err);
  std::vector<uint32_t> active_namespaces();
  // Increases by one with every rescan that changed a namespace (0 when connect() returns):
  // a cheap way for a thread to notice that it should look at namespace_info() again. It
  // moves once the new state is visible. Through the offload engine too: the engine passes its
  // remote controller's namespace notices on, and a notice thread of the library rescans.
  uint64_t namespace_generation() const;
  // The namespace's ANA state through this controller (this path), as log 0Ch last said: read
  // at connect, after every reconnect and on each ANA change notice. Optimized for a controller
  // that does not report ANA (CMIC bit 3 clear) and through the offload engine. Takes no lock.
  nvme::AnaState ana_state(uint32_t nsid) const;
  // Moves with every ANA log read (a cheap way to notice that states may have changed).
  uint64_t ana_generation() const;
  // Scans every namespace now and waits for it, as `nvme ns-rescan` does: for a controller
  // that sends no namespace notices. False and err when the controller is not live or a
  // command failed.
  bool rescan_namespaces(std::string& err);
  // The discovery log (header + entries), read in two steps as nvme-cli does.
  bool discovery_log(std::vector<uint8_t>& out, std::string& err);

  // The 4 KiB Identify Controller structure from connect. A reconnect must find the same
  // serial number, model and subsystem NQN (else the controller fails for good: another
  // subsystem answers there); its firmware revision may differ, and is logged, not kept.
  const uint8_t* identify_data() const;
  const nvme::IdentifyController& identify_controller() const {
    return *reinterpret_cast<const nvme::IdentifyController*>(identify_data());  // packed: any address will do
  }
  uint16_t cntlid() const;
  uint32_t io_queues_granted() const;
  uint32_t max_transfer_bytes() const;
  uint64_t cap() const;
  uint32_t version() const;
  const TransportId& trid() const;
  const std::string& hostnqn() const;
  // Failed for good: the connection was lost and reconnect is off, or ctrl_loss_tmo passed.
  bool failed() const;
  // Live (associated), and how many times it has been reset and re-associated since connect.
  bool live() const;
  uint32_t resets() const;

 private:
  friend class MultipathQueuePair;
  // Has the admin thread read log 0Ch again soon: a command met an ANA status before the
  // controller's ANA change notice came (or instead of it).
  void request_ana_refresh();
  // create_io_qpair() without waiting for the connection: it comes up as the thread's reactor
  // turns (connected()), or fails (failed(), at the latest after connect_timeout_ms). For the
  // multipath layer, which must not stall its thread's other paths while one comes back.
  // Through the offload engine it is create_io_qpair().
  std::unique_ptr<QueuePair> start_io_qpair(uint32_t depth, std::string& err);
  std::unique_ptr<QueuePair> make_io_qpair(uint32_t depth, bool wait, std::string& err);
  Controller();
  struct State;
  std::shared_ptr<State> s_;  // shared with queue pairs, which return their qid to it
  std::shared_ptr<detail::EngineClient> engine_;  // trtype:engine instead of s_
};

// The host NQN nvtcp uses when none is given: nqn.2014-08.org.nvmexpress:uuid:<uuid>.
std::string default_hostnqn(const uint8_t hostid[16]);

}  // namespace nvtcp::host

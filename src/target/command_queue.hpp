// SPDX-License-Identifier: Apache-2.0
// The command layer of one target queue: fabrics (Connect, Property Get/Set, Disconnect),
// admin and NVM commands, each run on a Command with the handful of calls a CommandTransport
// offers. It knows nothing of PDUs, sockets or TCP (the layering test keeps src/target_tcp out
// of its sight): the NVMe/TCP queue (target_tcp/tcp_queue.hpp) carries its commands, and unit
// tests run them on a fake transport that implements the seam and nothing else.
//
// The contract with the transport, the same for every command (TcpQueue::process() runs it):
//   parse(r)        once, when the capsule and any in-capsule data are in: checks what can be
//                   checked without the host's data and declares r.xfer (the data's direction
//                   and length, and the buffer the command needs). A status other than
//                   Success ends the command there: the transport calls fail(r, r.status).
//   execute(r)      once, when the buffer is there and the host's data is in (Idle ->
//                   Running). The command layer runs it from there: to the device (InDevice), a worker
//                   (OnWorker), a later reactor turn (BetweenSteps) or one of its holds (a fence,
//                   a fused partner, a durable state file, an event, an Abort's answer), until
//                   it calls the transport's complete(). One handler may instead ask for a
//                   buffer it could not know at parse (need_buffer(): Get Log Page, whose size
//                   is known once the log is built); it has changed nothing then, and it is
//                   executed again, from the start, once the buffer is there.
//   release(r)      once the transport has sent r's response: its figures are counted and
//                   its namespace let go. fail(r, st) ends one the transport refuses itself.
//
// Requests inside a device or on a worker keep the transport's memory: the queue's gate
// counts them, and once the transport has closed (closed()) the last of them runs the
// release the transport gave at construction, which may free the transport and this queue.
//
// Where it lives: command_queue.cpp (the contract, responses, Abort, holds),
// fabrics_commands.cpp (Connect, properties, Disconnect), admin_commands.cpp (admin commands,
// held events and Aborts), io_commands.cpp (NVM commands and their device completions).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "auth/dhchap_transaction.hpp"
#include "reactor/clock.hpp"
#include "reactor/reactor.hpp"
#include "target/controller.hpp"
#include "target/command.hpp"
#include "target/queue_memory.hpp"
#include "target/reactor_commands.hpp"
#include "util/gate.hpp"

namespace nvtcp::tls {
class TlsStream;
}

namespace nvtcp::target {

// Where a connection came in: the listener's port ID (0: the discovery-only port) and the
// local address the host reached (what a wildcard listener advertises to it).
struct Arrival {
  uint16_t portid = 1;
  std::string local_address;
  std::string remote_address;  // the host's IP address, no port
};

// What the transport tells the command layer of its queue, given once at construction: the
// reactor and clock it runs on, who the peer is and where it came in, and the link as it has
// been negotiated so far. The transport keeps it up to date (the digests and TLS session at
// ICReq, its closing); the command layer only reads it.
struct QueueLink {
  reactor::Reactor* reactor = nullptr;
  const reactor::Clock* clock = nullptr;
  std::string peer;
  Arrival arrival;
  const tls::TlsStream* tls = nullptr;  // the queue's TLS stream, if it runs in TLS
  std::string tls_identity;             // the PSK identity of that TLS session; empty without TLS
  bool hdgst = false, ddgst = false;    // the digests ICReq negotiated
  bool closing = false;                 // closed, or on its way: nothing is answered any more
  // ", TLS <cipher> (kTLS TX), header digest, data digest", as the link is now: for the log
  // line of a Connect (kTLS TX may start after ICReq).
  std::string features() const;
};

// What the command layer asks of the transport its queue runs on: the four calls back up
// through the seam (nvmet's queue_response, and what a TCP transport must do for a command
// that nvmet's core leaves to it).
class CommandTransport {
 public:
  virtual ~CommandTransport() = default;
  // r is done: its status, dw0/dw1, its completion (r.cqe) and any data (tx_data, tx_len,
  // tx_pad) are set. Its response goes out; the transport hands it back to release() once it
  // has left, and closes the queue then if r.close_queue_after.
  virtual void complete(Command& r) = 0;
  // r needs a buffer of len bytes: execute(r) runs again once it is there (or r fails with
  // Internal Error if memory cannot be had at all).
  virtual void need_buffer(Command& r, uint32_t len) = 0;
  // Abort: the live command with this CID, if the transport has one. One that has not reached
  // execute() (waiting for its turn, memory or data) the transport ends itself (at once, or
  // once the data already asked for is in): ended. One that has is returned as running (this
  // layer's to stop, if it can). Neither: no live command has that CID.
  struct AbortLookup {
    bool ended = false;
    Command* running = nullptr;
  };
  virtual AbortLookup abort_before_execution(uint16_t cid) = 0;
  // The queue ends now (its controller was torn down elsewhere); why is logged.
  virtual void close(const std::string& why) = 0;
};

class CommandQueue final : public AdminQueueSink, public CommandAborter {
 public:
  // drained(drained_ctx): the release that closed() leads to, once nothing is in a device or on
  // a worker any more.
  CommandQueue(TargetState& target, CommandTransport& transport, const QueueLink& link, QueueMemory& memory,
               ReactorCommands& shared, Gate::Release drained, void* drained_ctx);
  ~CommandQueue() override;
  CommandQueue(const CommandQueue&) = delete;
  CommandQueue& operator=(const CommandQueue&) = delete;

  // The contract above.
  void parse(Command& r);
  void execute(Command& r);

  // A command the transport ends before it executes (its parse failed, a digest error, bad
  // in-capsule data, no memory for it, an Abort while it waited) ends with st: its response
  // is built and goes back to the transport's complete().
  void fail(Command& r, wire::Status st);
  // r holds ns (nullptr: none) in place of what it held: a namespace removed live is destroyed
  // only once no request holds it. The queue drops a request's hold when it releases the
  // request, and every hold when it ends.
  void hold_namespace(Command& r, Namespace* ns);
  // r's response has left (the stream let go of it): it counts in its namespace's metrics,
  // and lets go of its namespace.
  void release(Command& r);
  // Commands in each state now, of the transport's `commands` (Idle: those not in this layer),
  // and entries into each since the queue began.
  CommandStateCounts command_states(uint32_t commands) const;
  const CommandStateEntries& command_entries() const { return entries_; }
  bool sq_flow_disabled() const { return sq_flow_disabled_; }
  bool connected() const { return ctrl_ != nullptr; }
  // Whether the queue may run commands: it needs no authentication or has authenticated.
  bool authenticated() const { return !auth_required_ || authenticated_; }
  uint16_t qid() const { return qid_; }
  const Arrival& arrival() const { return link_.arrival; }
  uint16_t sqsize() const { return sqsize_; }
  Controller* controller() const { return ctrl_.get(); }
  // Bytes of in-capsule data a command may carry on this queue, and the buffer a command
  // with len bytes of in-capsule data needs.
  uint32_t max_in_capsule() const;
  uint32_t in_capsule_buffer(const wire::Sqe& sqe, uint32_t len) const;
  // Ends the queue's controller now (admin queue: a keep-alive timeout), before the stream
  // closes; why is logged.
  void end_controller(const char* why);
  // The stream closed: the controller (admin queue) or the queue's claim on it goes, holds
  // and their timers end; nothing is completed any more. Last, the gate closes: the release
  // runs now or at the last device or worker completion. The caller touches nothing after.
  void closed();
  // Requests in a device or on a worker now.
  uint32_t in_flight() const { return gate_.inflight(); }

  // AdminQueueSink (admin queues): completes held Asynchronous Event Requests and Aborts.
  void deliver_async_events() override;
  void abort_done(uint16_t abort_cid, bool aborted) override;
  bool abort_held_aer(uint16_t cid) override;
  // CommandAborter (I/O queues).
  bool abort_command(uint16_t cid) override;

 private:
  using State = Command::State;
  // The one place a command changes state: the move must be legal (checked in Debug and
  // sanitizer builds) and the per-state counts follow it.
  void set_state(Command& r, State to);
  void count_response(const Command& r);
  // r ends with st: its completion queue entry (r.cqe) is built, a failed command is logged in
  // the controller's error log, and the transport sends it.
  void complete(Command& r, wire::Status st);
  void respond(Command& r);
  // A submission queue entry is consumed (its command completes): the head moves on.
  void fetched();
  // The device leg: r.io goes to ns's device (InDevice), and device_done comes back once it
  // answers, on this reactor.
  void start_device(Command& r, Namespace& ns);
  static void on_device_done(backend::BlockIo* io, wire::Status st);
  void device_done(Command& r, wire::Status st);
  // The device let go of r.io: the counts it held in its namespace's fence go, whether or not
  // the queue is still open. queue_ending: r will not run again (the queue is closing), so a
  // fused operation's ownership of the fence ends here too.
  void device_released(Command& r, bool queue_ending);
  // What a device answered, by what r was doing (io_commands.cpp).
  void io_done(Command& r);
  // BetweenSteps: Copy and Dataset Management move on one range per reactor turn; next_step
  // runs the next range from a no-op's completion, among that turn's other completions.
  void next_turn(Command& r);
  void next_step(Command& r);
  // OnWorker: work(arg) runs on a worker thread (CPU-heavy control-path work, a DH-HMAC-CHAP
  // exponentiation), then worker_done(r) on the reactor, unless the queue has closed meanwhile.
  // work must touch nothing the reactor touches until then.
  void run_off_reactor(Command& r, void (*work)(void* arg), void* arg);
  void worker_done(Command& r);
  // Whether a completion that came back may run its command on: false once the transport is
  // closing or closed; leaves the gate either way (the caller touches nothing after a false).
  bool leave_gate();
  // parse, per command set
  void parse_fabrics(Command& r);
  void parse_admin(Command& r);
  void parse_io(Command& r);
  // execute, per command set
  void execute_fabrics(Command& r);
  void execute_connect(Command& r);
  void invalid_connect_param(Command& r, bool in_data, uint32_t offset);
  // In-band authentication: Authentication Send and Receive run the queue's DH-HMAC-CHAP
  // transaction (auth_commands.cpp).
  void parse_auth(Command& r);
  void execute_auth(Command& r);
  void auth_send_done(Command& r);  // the worker's part of an Authentication Send is back
  void complete_auth(Command& r);
  void execute_admin(Command& r);
  void execute_io(Command& r);
  void execute_copy(Command& r, Namespace& ns);
  void execute_dsm(Command& r, Namespace& ns);
  void execute_reservation(Command& r, Namespace& ns);
  // The steps of Copy, Dataset Management and Flush: one device operation each.
  void copy_step(Command& r);
  void copy_done(Command& r);
  void dsm_step(Command& r);
  void start_flush(Command& r, bool all, bool shutdown_after = false);
  void flush_step(Command& r);
  // Fused Compare and Write: the first half is held until the next command arrives.
  bool fused_halves(Command& r);
  // The held first half (fused_first_) ends with st, unpaired.
  void refuse_fused_first(wire::Status st);
  void start_fused(Command& cmp, Command& wr);
  void run_fused(Command& cmp);
  void fused_done(Command& r);
  void end_fused(Command& cmp, wire::Status cmp_st, wire::Status wr_st);
  // A write (or a fused pair) through its namespace's fence to the device, or held.
  void submit(Command& r, Namespace& ns);
  void wait_for_fence(Command& r);
  static void on_fence_timer(reactor::Timer* t);
  void wait_until_durable(Command& r, uint64_t ticket);  // a reservation state write
  static void on_durable_timer(reactor::Timer* t);
  // The checks every I/O command passes before it runs: its queue's controller is alive and
  // enabled. False when r was ended (or the queue closed).
  bool io_allowed(Command& r);
  // The namespace r names, if its reservation lets this host run r; else r is ended.
  Namespace* permitted_namespace(Command& r);
  wire::Status block_range(const wire::Sqe& sqe, const Namespace& ns, bool bounded_by_mdts, uint64_t& len) const;

  reactor::Reactor& reactor() const { return *link_.reactor; }
  const reactor::Clock& clock() const { return *link_.clock; }

  TargetState& target_;
  CommandTransport& transport_;
  const QueueLink& link_;
  QueueMemory& memory_;
  ReactorCommands& shared_;
  uint16_t qid_ = 0;
  uint16_t sqsize_ = 0;  // entries (1's based); 0 until Connect
  uint16_t sqhd_ = 0;
  bool sq_flow_disabled_ = false;
  std::shared_ptr<Controller> ctrl_;
  std::shared_ptr<HostBudget> host_;  // the host's budget, from its Connect on
  // A host that must prove its DH-HMAC-CHAP key counts under its address until it has: a
  // sender claiming its NQN could otherwise take its connection slots. Set at Connect; the move
  // to the NQN's budget happens when the queue authenticates.
  bool budget_after_auth_ = false;
  // An I/O queue that must authenticate claims its qid only once it has (fabrics_commands.cpp).
  bool qid_claim_after_auth_ = false;
  bool move_to_host_budget();
  // Authentication: required when the host has a DH-HMAC-CHAP key (Connect answered with ATR);
  // until the transaction succeeds, every other command but Disconnect is refused. The keys are
  // held for the queue's life; the transaction is made at the first Authentication Send.
  bool auth_required_ = false;
  HostKeys auth_keys_;
  std::unique_ptr<auth::DhchapController> auth_;
  // The transaction's state as the reactor knows it: while an Authentication Send's part runs
  // on a worker (auth_work_.request set), the reactor touches nothing of auth_.
  bool authenticated_ = false;
  bool auth_was_authenticated_ = false;
  struct AuthWork {
    Command* request = nullptr;  // the Authentication Send whose part is on the worker
    auth::DhchapController* transaction = nullptr;
    const uint8_t* msg = nullptr;
    size_t len = 0;
  } auth_work_;
  QueueStats* stats_ = nullptr;       // this queue's counters, one per namespace
  // This host's reservation access per namespace (by Namespace::index), made at Connect.
  std::vector<Reservations::AccessCache> resv_cache_;
  struct TimerSlot : reactor::Timer {
    CommandQueue* owner = nullptr;
  } fence_timer_, durable_timer_;
  std::vector<Command*> fence_waiters_;
  std::vector<Command*> durable_waiters_;  // reservation commands waiting for their state on disk
  Command* fused_first_ = nullptr;          // a fused first half waiting for its second
  std::vector<Command*> held_;              // HeldAer and HeldAbort commands (admin queue)
  void drop_held(Command& r);
  CommandStateCounts counts_{};
  CommandStateEntries entries_{};
  // Requests in a device or on a worker (the transport's memory they live in stays until they
  // are back); closed by closed().
  Gate gate_;
};

}  // namespace nvtcp::target

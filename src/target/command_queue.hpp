// SPDX-License-Identifier: Apache-2.0
// The command layer of one target queue: fabrics (Connect, Property Get/Set, Disconnect),
// admin and NVM commands, each run on a Request with the handful of calls a CommandTransport
// offers. It knows nothing of PDUs, sockets or TCP: the NVMe/TCP queue (tcp_queue.hpp)
// carries its requests, and unit tests run its handlers on a fake transport.
//
// The contract with the transport, the same for every command (TcpQueue::process() runs it):
//   parse(r)        once, when the capsule and any in-capsule data are in: checks what can be
//                   checked without the host's data and declares r.xfer (the data's direction
//                   and length, and the buffer the command needs). A status other than
//                   Success ends the command there.
//   execute(r)      once, when the buffer is there and the host's data is in (Executing). The
//                   command layer runs it from there: to the device (InDevice), a worker
//                   (OnWorker), a later reactor turn (BetweenSteps) or one of its holds (a fence,
//                   a fused partner, a durable state file, an event, an Abort's answer), until
//                   it calls the transport's complete(). One handler may instead ask for a
//                   buffer it could not know at parse (need_buffer(): Get Log Page, whose size
//                   is known once the log is built); it has changed nothing then, and it is
//                   executed again, from the start, once the buffer is there.
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
#include "target/request_pool.hpp"
#include "util/gate.hpp"

namespace nvtcp::target {

class ConnectionSet;

// Where a connection came in: the listener's port ID (0: the discovery-only port) and the
// local address the host reached (what a wildcard listener advertises to it).
struct Arrival {
  uint16_t portid = 1;
  std::string local_address;
  std::string remote_address;  // the host's IP address, no port
};

// What a command handler asks of the queue its request came in on.
class CommandTransport {
 public:
  virtual ~CommandTransport() = default;
  // r is done: its status, dw0/dw1 and any data (tx_data, tx_len, tx_pad) are set. Its
  // response goes out (Sending).
  virtual void complete(Request& r) = 0;
  // Executing -> NeedBuffer: r needs a buffer of len bytes; execute(r) runs again once it is
  // there (or r fails with Internal Error if memory cannot be had at all).
  virtual void need_buffer(Request& r, uint32_t len) = 0;
  // A Queued, NeedBuffer or AwaitingH2C request is aborted: the transport ends it (at once,
  // or once the data already asked for is in). False when r is in none of those states.
  virtual bool abort_before_execution(Request& r) = 0;
  // Connect succeeded: the queue is now qid with sqsize entries (its pool grows to that).
  virtual void connected() = 0;
  virtual void close(const std::string& why) = 0;
  virtual bool closing() const = 0;  // closed, or on its way: nothing is answered any more
  virtual void close_after_response() = 0;  // Disconnect: close once its response has left
  virtual reactor::Reactor& reactor() = 0;
  virtual const reactor::Clock& clock() const = 0;
  virtual const std::string& peer() const = 0;
  // What the link negotiated, for the log line of a Connect: ", header digest" and the like.
  virtual std::string link_features() const = 0;
  // The PSK identity of the TLS session the queue runs in; empty without TLS.
  virtual std::string_view tls_identity() const { return {}; }
};

class CommandQueue final : public AdminQueueSink, public CommandAborter {
 public:
  // drained(drained_ctx): the release that closed() leads to, once nothing is in a device or on
  // a worker any more.
  CommandQueue(TargetState& target, CommandTransport& transport, RequestPool& pool, ConnectionSet& set,
               Arrival arrival, Gate::Release drained, void* drained_ctx);
  ~CommandQueue() override;
  CommandQueue(const CommandQueue&) = delete;
  CommandQueue& operator=(const CommandQueue&) = delete;

  // The contract above.
  void parse(Request& r);
  void execute(Request& r);

  // A capsule was taken from the submission queue: the head moves on.
  void fetched();
  // r holds ns (nullptr: none) in place of what it held: a namespace removed live is destroyed
  // only once no request holds it. The queue drops a request's hold when it releases the
  // request, and every hold when it ends.
  void hold_namespace(Request& r, Namespace* ns);
  // The completion queue entry for r, as it goes out; a failed command is logged in the
  // controller's error log first.
  wire::Cqe response(const Request& r);
  // r's response has left (the stream let go of it): it counts in its namespace's metrics.
  void response_sent(const Request& r);
  bool sq_flow_disabled() const { return sq_flow_disabled_; }
  bool connected() const { return ctrl_ != nullptr; }
  // Whether the queue may run commands: it needs no authentication or has authenticated.
  bool authenticated() const { return !auth_required_ || authenticated_; }
  uint16_t qid() const { return qid_; }
  const Arrival& arrival() const { return arrival_; }
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
  using State = Request::State;
  void set_state(Request& r, State to) { pool_.set_state(&r, to); }
  void complete(Request& r, wire::Status st);
  // The device leg: r.io goes to ns's device (InDevice), and device_done comes back once it
  // answers, on this reactor.
  void start_device(Request& r, Namespace& ns);
  static void on_device_done(backend::BlockIo* io, wire::Status st);
  void device_done(Request& r, wire::Status st);
  // The device let go of r.io: the counts it held in its namespace's fence go, whether or not
  // the queue is still open. queue_ending: r will not run again (the queue is closing), so a
  // fused operation's ownership of the fence ends here too.
  void device_released(Request& r, bool queue_ending);
  // What a device answered, by what r was doing (io_commands.cpp).
  void io_done(Request& r);
  // BetweenSteps: Copy and Dataset Management move on one range per reactor turn; next_step
  // runs the next range from a no-op's completion, among that turn's other completions.
  void next_turn(Request& r);
  void next_step(Request& r);
  // OnWorker: work(arg) runs on a worker thread (CPU-heavy control-path work, a DH-HMAC-CHAP
  // exponentiation), then worker_done(r) on the reactor, unless the queue has closed meanwhile.
  // work must touch nothing the reactor touches until then.
  void run_off_reactor(Request& r, void (*work)(void* arg), void* arg);
  void worker_done(Request& r);
  // Whether a completion that came back may run its command on: false once the transport is
  // closing or closed; leaves the gate either way (the caller touches nothing after a false).
  bool leave_gate();
  // parse, per command set
  void parse_fabrics(Request& r);
  void parse_admin(Request& r);
  void parse_io(Request& r);
  // execute, per command set
  void execute_fabrics(Request& r);
  void execute_connect(Request& r);
  void invalid_connect_param(Request& r, bool in_data, uint32_t offset);
  // In-band authentication: Authentication Send and Receive run the queue's DH-HMAC-CHAP
  // transaction (auth_commands.cpp).
  void parse_auth(Request& r);
  void execute_auth(Request& r);
  void auth_send_done(Request& r);  // the worker's part of an Authentication Send is back
  void complete_auth(Request& r);
  void execute_admin(Request& r);
  void execute_io(Request& r);
  void execute_copy(Request& r, Namespace& ns);
  void execute_dsm(Request& r, Namespace& ns);
  void execute_reservation(Request& r, Namespace& ns);
  // The steps of Copy, Dataset Management and Flush: one device operation each.
  void copy_step(Request& r);
  void copy_done(Request& r);
  void dsm_step(Request& r);
  void start_flush(Request& r, bool all, bool shutdown_after = false);
  void flush_step(Request& r);
  // Fused Compare and Write: the first half is held until the next command arrives.
  bool fused_halves(Request& r);
  // The held first half (fused_first_) ends with st, unpaired.
  void refuse_fused_first(wire::Status st);
  void start_fused(Request& cmp, Request& wr);
  void run_fused(Request& cmp);
  void fused_done(Request& r);
  void end_fused(Request& cmp, wire::Status cmp_st, wire::Status wr_st);
  // A write (or a fused pair) through its namespace's fence to the device, or held.
  void submit(Request& r, Namespace& ns);
  void wait_for_fence(Request& r);
  static void on_fence_timer(reactor::Timer* t);
  void wait_until_durable(Request& r, uint64_t ticket);  // a reservation state write
  static void on_durable_timer(reactor::Timer* t);
  // The checks every I/O command passes before it runs: its queue's controller is alive and
  // enabled. False when r was ended (or the queue closed).
  bool io_allowed(Request& r);
  // The namespace r names, if its reservation lets this host run r; else r is ended.
  Namespace* permitted_namespace(Request& r);
  wire::Status block_range(const wire::Sqe& sqe, const Namespace& ns, bool bounded_by_mdts, uint64_t& len) const;

  TargetState& target_;
  CommandTransport& transport_;
  RequestPool& pool_;
  ConnectionSet& set_;
  Arrival arrival_;
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
    Request* request = nullptr;  // the Authentication Send whose part is on the worker
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
  std::vector<Request*> fence_waiters_;
  std::vector<Request*> durable_waiters_;  // reservation commands waiting for their state on disk
  Request* fused_first_ = nullptr;          // a fused first half waiting for its second
  // Requests in a device or on a worker (the transport's memory they live in stays until they
  // are back); closed by closed().
  Gate gate_;
};

}  // namespace nvtcp::target

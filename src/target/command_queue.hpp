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
// Where it lives: command_queue.cpp (the contract, responses, the device leg, holds), and a part
// per command set: FabricsCommands (fabrics_commands.hpp: Connect, properties, Disconnect,
// DH-HMAC-CHAP), AdminCommands (admin_commands.hpp: admin commands, held events and Aborts),
// IoCommands (io_commands.hpp: NVM commands, their device completions, the fence, Abort).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reactor/clock.hpp"
#include "reactor/reactor.hpp"
#include "target/admin_commands.hpp"
#include "target/command.hpp"
#include "target/controller.hpp"
#include "target/fabrics_commands.hpp"
#include "target/io_commands.hpp"
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

// The queue's core: the contract above, command states, responses, the device leg, the
// holds every command set shares, and the hand-off to a worker. Each command set is a part
// of it, held by value and called directly (no virtual call on the data path), which reaches
// the core's private state as a friend.
class CommandQueue final {
 public:
  // drained(drained_ctx): the release that closed() leads to, once nothing is in a device or on
  // a worker any more.
  CommandQueue(TargetState& target, CommandTransport& transport, const QueueLink& link, QueueMemory& memory,
               ReactorCommands& shared, Gate::Release drained, void* drained_ctx);
  ~CommandQueue();
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
  bool authenticated() const { return fabrics_.authenticated(); }
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

 private:
  friend class FabricsCommands;
  friend class AdminCommands;
  friend class IoCommands;
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
  // The device leg: r.io goes to ns's device (InDevice), and the I/O part's device_done comes
  // back once it answers, on this reactor.
  void start_device(Command& r, Namespace& ns);
  static void on_device_done(backend::BlockIo* io, wire::Status st);
  // A large Read or Write on a device that copies on the reactor, a piece at a time.
  static void on_piece_done(backend::BlockIo* io, wire::Status st);
  void device_done(Command& r, wire::Status st);
  // The device let go of r.io: the counts it held in its namespace's fence go, whether or not
  // the queue is still open. queue_ending: r will not run again (the queue is closing), so a
  // fused operation's ownership of the fence ends here too.
  void device_released(Command& r, bool queue_ending);
  // BetweenSteps: the I/O part's next_step runs from a no-op's completion, among that turn's
  // other completions; with turn_bytes, AwaitingTurn: from the reactor's line, once a turn has
  // that much room.
  void next_turn(Command& r, uint64_t turn_bytes = 0);
  // r's device operation of `bytes` within its reactor's budget of work for this turn (true; while
  // the reactor is contended, or always),
  // or r waits for a later turn (AwaitingTurn, false) in the reactor's line
  // (ReactorCommands::wait_for_turn), and the I/O part's next_step runs it again then, its
  // cost taken (Command::turn_granted).
  bool take_turn(Command& r, uint64_t bytes, bool always = false);
  // OnWorker: work(arg) runs on a worker thread (CPU-heavy control-path work, a DH-HMAC-CHAP
  // exponentiation), then worker_done(r) on the reactor, unless the queue has closed meanwhile.
  // work must touch nothing the reactor touches until then.
  void run_off_reactor(Command& r, void (*work)(void* arg), void* arg);
  void worker_done(Command& r);
  // Whether a completion that came back may run its command on: false once the transport is
  // closing or closed; leaves the gate either way (the caller touches nothing after a false).
  bool leave_gate();
  // AwaitingDurable: a reservation change (a reservation command, Set Features 83h) completes
  // once its state file of this ticket is on disk.
  void wait_until_durable(Command& r, uint64_t ticket);
  static void on_durable_timer(reactor::Timer* t);

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
  struct DurableTimer : reactor::Timer {
    CommandQueue* owner = nullptr;
  } durable_timer_;
  std::vector<Command*> durable_waiters_;  // reservation commands waiting for their state on disk
  CommandStateCounts counts_{};
  CommandStateEntries entries_{};
  // Requests in a device or on a worker (the transport's memory they live in stays until they
  // are back); closed by closed().
  Gate gate_;
  // The command sets, last: they hold a reference to the core.
  FabricsCommands fabrics_{*this};
  AdminCommands admin_{*this};
  IoCommands io_{*this};
};

}  // namespace nvtcp::target

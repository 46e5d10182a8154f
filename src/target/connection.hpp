// One NVMe/TCP queue on the target: a TCP connection, its PDU state machine, and a pool
// of requests sized by the queue depth the host asked for at Connect.
//
// Life of a read:  CapsuleCmd -> Request (pool) -> namespace read -> C2HData [+ CapsuleResp]
// Life of a write: CapsuleCmd [+ in-capsule data] or R2T -> H2CData... -> namespace write
//                  -> CapsuleResp
//
// Where it lives: connection.cpp (life cycle, deadlines), connection_pdu.cpp (PDUs in and out),
// connection_exec.cpp (admission, fabrics and admin commands, host data), connection_io.cpp
// (NVM I/O commands), request_pool.cpp (requests, their states and buffer memory).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/block_device.hpp"
#include "reactor/clock.hpp"
#include "reactor/byte_stream.hpp"
#include "reactor/reactor.hpp"
#include "target/controller.hpp"
#include "target/deadline_set.hpp"
#include "target/request_pool.hpp"
#include "transport/pdu_receiver.hpp"
#include "transport/terminator.hpp"
#include "util/gate.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::target {

// What one connection holds right now (control path: gathered on its reactor).
struct ConnectionInfo {
  std::string peer;
  uint16_t qid = 0;
  bool connected = false;
  uint64_t send_queue_bytes = 0;       // queued for the socket, not yet taken by the kernel
  uint64_t send_queue_peak = 0;        // the most it ever held
  uint64_t buffer_bytes = 0;           // data buffers held by this connection's requests
  uint64_t pool_bytes = 0;             // its request pool (also counted in the buffer budgets)
  uint32_t waiting = 0;                // commands held back (send queue over its cap, or memory)
  uint64_t waits = 0;                  // commands ever held back
  RequestStateCounts request_states{};  // its requests in each Request::State
};

// Where every connection of one reactor is listed, so shutdown can close them all.
class ConnectionSet {
 public:
  // This reactor's number (0 .. cores-1): its slot in per-reactor counters.
  void set_index(uint32_t i) { index_ = i; }
  uint32_t index() const { return index_; }
  void add(Connection* c);
  void remove(Connection* c);
  void close_all();
  size_t size() const { return conns_.size(); }
  // Closed connections that wait for their last device completion before they free
  // themselves: shutdown waits for these too, or they would outlive their reactor.
  void add_draining(Connection* c) { draining_.push_back(c); }
  void remove_draining(Connection* c);
  size_t draining() const { return draining_.size(); }
  // The open connections, one entry each.
  void collect(std::vector<ConnectionInfo>& out) const;
  // Requests per state over every connection of this reactor, the closed ones whose requests
  // are still inside a device included: a request stuck in a device shows, though its host left.
  RequestStateCounts request_states() const;
  // I/O commands completed on this reactor: one writer (the reactor), read by anyone.
  void count_io() { bump(ios_); }
  uint64_t ios() const { return ios_.load(std::memory_order_relaxed); }
  // Durability commands completed with success on this reactor: Flush commands, and
  // writes (Write, Write Zeroes) that carried FUA.
  void count_flush() { bump(flushes_); }
  void count_fua_write() { bump(fua_writes_); }
  uint64_t flushes() const { return flushes_.load(std::memory_order_relaxed); }
  uint64_t fua_writes() const { return fua_writes_.load(std::memory_order_relaxed); }

 private:
  static void bump(std::atomic<uint64_t>& c) { c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  std::vector<Connection*> conns_;
  uint32_t index_ = 0;
  std::vector<Connection*> draining_;
  std::atomic<uint64_t> ios_{0}, flushes_{0}, fua_writes_{0};
};

// Where a connection came in: the listener's port ID (0: the discovery-only port) and the
// local address the host reached (what a wildcard listener advertises to it).
struct Arrival {
  uint16_t portid = 1;
  std::string local_address;
};

class Connection final : public reactor::StreamOwner,
                         public transport::PduHandler,
                         public AdminQueueSink,
                         public CommandAborter {
 public:
  // address: the source address counted for max_connections_per_address (empty: none).
  // clock: what the connection's deadlines read (tests pass one they step).
  Connection(TargetState& target, reactor::Reactor& r, int fd, std::string peer, ConnectionSet& set,
             std::string address = {}, Arrival arrival = {}, const reactor::Clock& clock = reactor::monotonic_clock());
  // The same over a stream that make_stream builds for the connection (its owner): what a test
  // passes to keep the bytes in memory, and where a TLS stream will come in.
  using MakeStream = std::function<std::unique_ptr<reactor::ByteStream>(reactor::StreamOwner& owner)>;
  Connection(TargetState& target, reactor::Reactor& r, const MakeStream& make_stream, std::string peer,
             ConnectionSet& set, std::string address = {}, Arrival arrival = {},
             const reactor::Clock& clock = reactor::monotonic_clock());
  ~Connection() override;

  void start();
  void close(const std::string& why);
  const std::string& peer() const { return peer_; }
  ConnectionInfo info() const;
  const RequestStateCounts& request_states() const { return pool_.counts(); }
  // Runs the deadlines due by the connection's clock: the reactor does this at the earliest
  // one; a test that stepped a fake clock calls it.
  void run_due_deadlines() { deadlines_.run_due(); }

  // StreamOwner
  void on_receive(const uint8_t* data, size_t len) override;
  void on_closed(int err) override;
  bool recv_direct(uint8_t*& p, size_t& n) override;
  void on_receive_direct(size_t len) override;
  // PduHandler
  bool on_pdu_header(const uint8_t* hdr, uint32_t data_len, uint8_t*& data_dst) override;
  void on_pdu_complete(const uint8_t* hdr, bool data_ok) override;
  void on_pdu_error(wire::Fes fes, uint32_t fei, const std::string& why) override;
  // AdminQueueSink (admin queues): completes held Asynchronous Event Requests and Aborts.
  void deliver_async_events() override;
  void abort_done(uint16_t abort_cid, bool aborted) override;
  bool abort_held_aer(uint16_t cid) override;
  // CommandAborter (I/O queues).
  bool abort_command(uint16_t cid) override;

 private:
  // AwaitICReq -> AwaitConnect -> Connected, and from any of them -> Closing, which is final
  // (connection_transition_legal()).
  enum class State { AwaitICReq, AwaitConnect, Connected, Closing };
  static const char* state_name(State s);
  static constexpr bool connection_transition_legal(State from, State to) {
    switch (from) {
      case State::AwaitICReq: return to == State::AwaitConnect || to == State::Closing;
      case State::AwaitConnect: return to == State::Connected || to == State::Closing;
      case State::Connected: return to == State::Closing;
      case State::Closing: return false;
    }
    return false;
  }
  // The one place the connection changes state (checked in Debug and sanitizer builds).
  void set_state(State to);
  void set_request_state(Request* r, Request::State to) { pool_.set_state(r, to); }

  // PDU handling
  bool handle_icreq(const wire::ICReqPdu& pdu);
  bool capsule_header(const wire::CapsuleCmdHeader& pdu, uint32_t data_len, uint8_t*& dst);
  bool h2c_data_header(const wire::H2CDataPdu& pdu, uint32_t data_len, uint8_t*& dst);
  void h2c_data_complete(const wire::H2CDataPdu& pdu, bool data_ok);
  void fatal(wire::Fes fes, uint32_t fei, const std::string& why);

  // Command execution
  void execute(Request* r);
  void execute_fabrics(Request* r);
  void execute_connect(Request* r);
  void execute_admin(Request* r);
  void execute_io(Request* r);
  void io_done(Request* r, wire::Status st);
  void complete(Request* r, wire::Status st);
  void send_response(Request* r);
  void send_r2ts(Request* r);
  void release(Request* r);
  void dsm_step(Request* r);
  void copy_step(Request* r);
  void next_step_later(Request* r);  // Copy, Dataset Management: the next range, next turn
  void run_next_step(Request* r);
  void execute_reservation(Request* r, Namespace* ns);
  void wait_until_durable(Request* r, uint64_t ticket);  // a reservation state write
  static void on_durable_timer(reactor::Timer* t);
  // Fused Compare and Write: the first half is held until the next command arrives.
  bool fused_halves(Request* r);
  void start_fused(Request* cmp, Request* wr);
  void run_fused(Request* cmp);
  void fused_io_done(Request* r, wire::Status st);
  void end_fused(Request* cmp, wire::Status cmp_st, wire::Status wr_st);
  // Waiting for a namespace's fence (a write) or for its writes to drain (a fused owner).
  void wait_for_fence(Request* r);
  static void on_fence_timer(reactor::Timer* t);
  void copy_io_done(Request* r, wire::Status st);
  // A command's data from the host, len bytes: true when it is in r->buf (it came in the
  // capsule). Otherwise a buffer of buffer_bytes_for() is made and R2Ts ask for the data
  // (the command runs again once it is in), or the command is parked or failed: false.
  bool host_data(Request* r, uint32_t len);
  wire::Status block_range(const wire::Sqe& sqe, const Namespace& ns, bool bounded_by_mdts, uint64_t& len) const;
  void start_flush(Request* r, bool all);
  void flush_step(Request* r);
  void submit_io(Request* r, Namespace* ns);
  void teardown_controller(const char* why);
  void invalid_connect_param(Request* r, bool in_data, uint32_t offset);

  // Buffer memory: bounded per connection, per host and for the whole target (RequestPool).
  // Wait means "not now": the caller parks the request and it runs again once memory is
  // released.
  using BufferResult = RequestPool::BufferResult;
  BufferResult ensure_buffer(Request* r, uint32_t len);
  bool read_buffer(Request* r, Namespace* ns, uint32_t len);
  // Back-pressure: commands wait (in arrival order) while the send queue is over its cap
  // or buffer memory is short, instead of growing either without bound.
  void admit(Request* r);
  void park(Request* r, bool for_memory);
  void resume_waiting();
  bool send_queue_full() const;
  static void on_retry_timer(reactor::Timer* t);
  void fill_header(wire::CommonHeader& ch, wire::PduType type, uint8_t hlen, uint32_t data_len, uint8_t flags);
  uint32_t max_incapsule() const;
  // The connection's deadlines, each with its own handler (run in this order when several
  // fall due together). ICReq: the host has icreq_timeout_ms from accept to send its ICReq;
  // Connect: and its Connect, by the same deadline. On a connected queue, at least every
  // poll_period(): ControllerPoll (its controller was torn down elsewhere), and, each also at
  // the instant it would expire (arm_check()), KeepAlive (admin queue: the host's KATO),
  // SendStall (the host reads no responses), H2CData (the host owes data an R2T asked for).
  // TermReqLinger: how long a C2HTermReq gets to leave before the socket closes.
  enum class Deadline : uint8_t { ICReq, Connect, KeepAlive, ControllerPoll, SendStall, H2CData, TermReqLinger, kCount };
  void on_icreq_deadline(uint64_t now);
  void on_connect_deadline(uint64_t now);
  void on_keep_alive_check(uint64_t now);
  void on_controller_poll(uint64_t now);
  void on_send_stall_check(uint64_t now);
  void on_h2c_data_check(uint64_t now);
  void on_term_req_linger(uint64_t now);
  // Connect succeeded: the setup deadline gives way to the periodic checks.
  void start_connected_checks();
  // How often a connected queue runs its checks: kControllerPollNs, or a quarter of KATO on an
  // admin queue whose KATO is shorter.
  uint64_t poll_period() const;
  // Arms check d for due, the instant its condition holds if nothing changes meanwhile (so a
  // timeout ends the connection when it expires, not up to a period later), but no later
  // than poll_period() from now: what a check cannot foresee (a Set Features that shortens
  // KATO, a new R2T) is noticed within a period.
  void arm_check(Deadline d, uint64_t now, uint64_t due);
  // A request whose H2CData the host has owed for over h2c_data_timeout_ms, if any; else
  // next_due is when the first of the owed data will be late (UINT64_MAX: none is owed).
  const Request* stalled_write(uint64_t now, uint64_t& next_due) const;
  // Whether the send queue has not moved for over send_timeout_ms; else next_due is when it
  // will have been still for that long if it does not move (UINT64_MAX: it is empty).
  bool send_stalled(uint64_t now, uint64_t& next_due);

  TargetState& target_;
  reactor::Reactor& reactor_;
  std::string peer_;
  ConnectionSet& set_;
  std::unique_ptr<reactor::ByteStream> stream_;  // set in the constructor, never null
  transport::PduReceiver receiver_;
  State state_ = State::AwaitICReq;

  // Negotiated at ICReq / Connect
  bool hdgst_ = false, ddgst_ = false;
  uint8_t hpda_ = 0;
  uint32_t host_maxr2t_ = 1;        // outstanding R2Ts per command the host allows
  uint16_t qid_ = 0;
  uint16_t sqsize_ = 0;             // entries (1's based)
  uint16_t sqhd_ = 0;
  bool sq_flow_disabled_ = false;
  std::shared_ptr<Controller> ctrl_;
  std::shared_ptr<HostBudget> host_;  // the host's budget, from its Connect on
  std::string address_;               // counted in TargetState::addresses
  Arrival arrival_;
  QueueStats* stats_ = nullptr;   // this queue's counters, one per namespace
  // This host's reservation access per namespace (by Namespace::index), made at Connect.
  std::vector<Reservations::AccessCache> resv_cache_;

  // Declared after host_: the pool gives its bytes back to the host's budget as it goes.
  RequestPool pool_;
  // Requests inside a device: their memory (and so the connection) must stay until they are
  // done. Closed when the stream reports on_closed; its release frees the connection.
  Gate backend_gate_;
  static void release_closed(void* conn);

  Request* h2c_req_ = nullptr;      // request the current H2CData PDU belongs to
  transport::Terminator terminator_;  // the C2HTermReq after a fatal transport error
  struct TermSent : reactor::SendDone {
    Connection* owner = nullptr;
  } term_sent_;
  alignas(8) uint8_t icresp_[sizeof(wire::ICRespPdu)];
  bool close_after_send_ = false;   // Disconnect: close once its response is out

  DeadlineSet<Connection, Deadline, size_t(Deadline::kCount)> deadlines_;
  struct TimerSlot : reactor::Timer {
    Connection* owner;
  } retry_timer_, fence_timer_, durable_timer_;
  std::vector<Request*> fence_waiters_;
  std::vector<Request*> durable_waiters_;  // reservation commands waiting for their state on disk
  Request* fused_first_ = nullptr;  // a fused first half waiting for its second

  Request* wait_head_ = nullptr;    // FIFO of Waiting requests
  Request* wait_tail_ = nullptr;
  uint32_t waiting_ = 0;
  uint64_t waits_ = 0;
  bool resuming_ = false;
  bool memory_short_ = false;       // the last parked request waits for memory
  bool memory_logged_ = false;
  uint64_t tx_pending_ = 0;         // sum of Request::tx_pending
  uint64_t send_peak_ = 0;
  uint64_t sent_seen_ = 0;          // stream bytes sent at the last periodic check
  uint64_t send_progress_ns_ = 0;   // when the send queue was last empty or moving
  reactor::OwnedDeferred<Connection> resume_d_;
};

}  // namespace nvtcp::target

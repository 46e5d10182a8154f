// SPDX-License-Identifier: Apache-2.0
// One NVMe/TCP queue on the target: a TCP connection with its PDUs (ICReq/ICResp, CapsuleCmd,
// R2T and H2CData, C2HData, CapsuleResp, TermReq), digests, R2T windows, deadlines and send
// back-pressure, and a pool of requests sized by the queue depth the host asked for. It knows
// no opcode: each request embeds the command layer's Command, which its CommandQueue
// (target/command_queue.hpp) parses and executes, and which comes back through the
// CommandTransport calls.
//
// TcpQueue keeps the connection's life, its state and process(), and holds its parts by value,
// each with a reference back: the PDUs it receives (tcp_queue_receive.*), the PDUs it sends
// (tcp_queue_send.*), and what each of its deadlines does (tcp_queue_timeouts.*).
//
// The life of a 4 KiB read crosses the seam four times: parse and execute down (process()),
// complete up once the device has answered, release down once the stream has let go of the
// response (README, "The life of a 4 KiB read").
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reactor/byte_stream.hpp"
#include "reactor/clock.hpp"
#include "reactor/reactor.hpp"
#include "reactor/tcp_stream.hpp"
#include "target/command_queue.hpp"
#include "target_tcp/deadline_set.hpp"
#include "target_tcp/request_pool.hpp"
#include "target_tcp/send_shares.hpp"
#include "target_tcp/tcp_queue_receive.hpp"
#include "target_tcp/tcp_queue_send.hpp"
#include "target_tcp/tcp_queue_timeouts.hpp"
#include "tls/tls_stream.hpp"
#include "transport/pdu_receiver.hpp"
#include "transport/terminator.hpp"
#include "util/state_machine.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::target {

// What one connection holds right now (control path: gathered on its reactor).
struct ConnectionInfo {
  std::string peer;
  uint16_t qid = 0;
  bool connected = false;
  // Past Connect: whose queue this is.
  std::string subnqn, hostnqn;
  uint16_t cntlid = 0;
  uint16_t portid = 0;                 // the listener it came in on (0: the discovery port)
  std::string local_address;           // the address the host reached
  uint32_t reactor = 0;
  bool tls = false, hdgst = false, ddgst = false;
  uint64_t send_queue_bytes = 0;       // queued for the socket, not yet taken by the kernel
  uint64_t send_queue_peak = 0;        // the most it ever held
  uint64_t buffer_bytes = 0;           // data buffers held by this connection's requests
  uint64_t pool_bytes = 0;             // its request pool (also counted in the buffer budgets)
  uint32_t waiting = 0;                // commands held back (send queue over its cap, or memory)
  uint64_t waits = 0;                  // commands ever held back
  RequestStateCounts request_states{};  // its requests in each TcpRequest::State
  CommandStateCounts command_states{};  // and their commands in each Command::State
};

// Where every connection of one reactor is listed, so shutdown can close them all; with what
// their command queues share (ReactorCommands).
class ConnectionSet : public ReactorCommands {
 public:
  void add(TcpQueue* c);
  void remove(TcpQueue* c);
  void close_all();
  size_t size() const { return conns_.size(); }
  // Closed connections that wait for their last device completion before they free
  // themselves: shutdown waits for these too, or they would outlive their reactor.
  void add_draining(TcpQueue* c) { draining_.push_back(c); }
  void remove_draining(TcpQueue* c);
  size_t draining() const { return draining_.size(); }
  // The open connections, one entry each.
  void collect(std::vector<ConnectionInfo>& out) const;
  // Requests and commands per state over every connection of this reactor, the closed ones
  // whose requests are still inside a device included: a command stuck in a device shows,
  // though its host left.
  RequestStateCounts request_states() const;
  CommandStateCounts command_states() const;
  // Entries into each state over every connection this reactor has had, closed ones included.
  RequestStateEntries request_entries() const;
  CommandStateEntries command_entries() const;
  void retire(const RequestStateEntries& r, const CommandStateEntries& c) {
    for (size_t s = 0; s < r.size(); ++s) retired_requests_[s] += r[s];
    for (size_t s = 0; s < c.size(); ++s) retired_commands_[s] += c[s];
  }

 private:
  std::vector<TcpQueue*> conns_;
  std::vector<TcpQueue*> draining_;
  RequestStateEntries retired_requests_{};  // of the connections that are gone
  CommandStateEntries retired_commands_{};
};

// The TCP stream of a target connection of `set`'s reactor: what it hands the kernel per turn
// is bounded while that reactor is contended (ReactorCommands::send_limit).
std::unique_ptr<reactor::TcpStream> target_tcp_stream(reactor::Reactor& r, int fd, reactor::StreamOwner& owner,
                                                      const ReactorCommands& set);

class TcpQueue final : public reactor::StreamOwner, public CommandTransport {
 public:
  // send_share: the connection's part of its source address's kernel send buffers (empty: none
  // counted, as in tests). clock: what the connection's deadlines read (tests pass one they step).
  TcpQueue(TargetState& target, reactor::Reactor& r, int fd, std::string peer, ConnectionSet& set,
           SendShares::Lease send_share = {}, Arrival arrival = {},
           const reactor::Clock& clock = reactor::monotonic_clock());
  // The same over a stream that make_stream builds for the connection (its owner): what a test
  // passes to keep the bytes in memory, and the TLS stream of a secure channel.
  using MakeStream = std::function<std::unique_ptr<reactor::ByteStream>(reactor::StreamOwner& owner)>;
  TcpQueue(TargetState& target, reactor::Reactor& r, const MakeStream& make_stream, std::string peer,
           ConnectionSet& set, SendShares::Lease send_share = {}, Arrival arrival = {},
           const reactor::Clock& clock = reactor::monotonic_clock());
  ~TcpQueue() override;

  void start();
  void close(const std::string& why) override;
  const std::string& peer() const { return link_.peer; }
  ConnectionInfo info() const;
  const RequestStateCounts& request_states() const { return pool_.counts(); }
  const RequestStateEntries& request_entries() const { return pool_.entries(); }
  CommandStateCounts command_states() const { return commands_.command_states(uint32_t(pool_.size())); }
  const CommandStateEntries& command_entries() const { return commands_.command_entries(); }
  // Runs the deadlines due by the connection's clock: the reactor does this at the earliest
  // one; a test that stepped a fake clock calls it.
  void run_due_deadlines() { deadlines_.run_due(); }

  // StreamOwner
  void on_receive(const uint8_t* data, size_t len) override;
  void on_closed(int err) override;
  bool recv_direct(uint8_t*& p, size_t& n) override;
  void on_receive_direct(size_t len) override;
  // CommandTransport
  void complete(Command& r) override;
  void need_buffer(Command& r, uint32_t len) override;
  AbortLookup abort_before_execution(uint16_t cid) override;
  bool closing() const { return state_ == State::Closing; }
  const reactor::Clock& clock() const { return deadlines_.clock(); }

 private:
  friend class TcpQueueReceive;
  friend class TcpQueueSend;
  friend class TcpQueueTimeouts;
  using RState = TcpRequest::State;
  // AwaitICReq -> Ready (ICResp sent: capsules flow) -> Closing, which is final; or
  // AwaitICReq -> Closing.
  enum class State : uint8_t { AwaitICReq, Ready, Closing, kCount };
  static constexpr TransitionTable<State, size_t(State::kCount)> kTransitions{
      {State::AwaitICReq, State::Ready}, {State::AwaitICReq, State::Closing}, {State::Ready, State::Closing}};
  static const char* state_name(State s);
  // The one place the queue changes state (checked in Debug and sanitizer builds).
  void set_state(State to);
  void set_request_state(TcpRequest& r, RState to) { pool_.set_state(&r, to); }

  // The life of a request, one event at a time: see tcp_queue.cpp.
  void process(TcpRequest& r);
  bool buffer_ready(TcpRequest& r, uint32_t len);
  void execute(TcpRequest& r);
  void fail(TcpRequest& r, wire::Status st);  // the command layer builds its response
  void release(TcpRequest& r);

  // Buffer memory: bounded per connection, per host and for the whole target (RequestPool).
  using BufferResult = RequestPool::BufferResult;
  BufferResult ensure_buffer(TcpRequest& r, uint32_t len);
  // Back-pressure: commands wait (in arrival order) while the send queue is over its cap
  // or buffer memory is short, instead of growing either without bound.
  void park(TcpRequest& r, RState as);
  void resume_waiting();
  bool withdraw(TcpRequest& r);  // out of the wait list, wherever it is in it
  bool send_queue_full() const;
  static void on_retry_timer(reactor::Timer* t);

  using Deadline = TcpQueueTimeouts::Deadline;
  bool live() const { return state_ == State::Ready && commands_.connected(); }
  void note_load();
  ReactorCommands::QueueLoad load_;
  uint64_t outstanding_bytes_ = 0;  // data of the commands outstanding (their SGLs)

  TargetState& target_;
  // Counts the connection in ResourceUsage::connections from its construction until every
  // member declared after it is gone: a connection no longer counted holds no memory.
  struct LiveCount {
    explicit LiveCount(std::atomic<uint32_t>& count) : n(count) { n.fetch_add(1); }
    ~LiveCount() { n.fetch_sub(1); }
    LiveCount(const LiveCount&) = delete;
    LiveCount& operator=(const LiveCount&) = delete;
    std::atomic<uint32_t>& n;
  } live_count_;
  reactor::Reactor& reactor_;
  // What the command queue reads of this connection (its peer, the link as negotiated, its
  // closing): kept up to date here. Declared before the command queue, which holds it.
  QueueLink link_;
  ConnectionSet& set_;
  std::unique_ptr<reactor::ByteStream> stream_;  // set in the constructor, never null
  tls::TlsStream* tls_ = nullptr;                // stream_, when the connection runs in TLS
  TcpQueueReceive receive_;  // the PDUs receiver_ hands on
  transport::PduReceiver receiver_;
  State state_ = State::AwaitICReq;
  SendShares::Lease send_share_;  // counted until the connection goes; applied on its periodic check

  // Negotiated at ICReq
  bool hdgst_ = false, ddgst_ = false;
  uint8_t hpda_ = 0;
  uint32_t host_maxr2t_ = 1;  // outstanding R2Ts per command the host allows

  // Declared before the memory and the pool: they give their bytes back to the host's budget,
  // which the command queue holds, as they go. Its gate keeps the connection while commands
  // are in a device or on a worker; release_closed frees the connection once the last is back.
  CommandQueue commands_;
  bool connected_ = false;  // the command queue's Connect has been seen (on_connected())
  void on_connected();
  void describe_link();     // what link_ says of the link, as ICReq and TLS negotiated it
  QueueMemory memory_;
  RequestPool pool_;
  static void release_closed(void* conn);

  transport::Terminator terminator_;  // the C2HTermReq after a fatal transport error
  struct TermSent : reactor::SendDone {
    TcpQueue* owner = nullptr;
  } term_sent_;
  TcpQueueSend send_;  // the PDUs its requests send

  TcpQueueTimeouts timeouts_;  // what each of deadlines_ does when it falls due
  DeadlineSet<TcpQueueTimeouts, Deadline, size_t(Deadline::kCount)> deadlines_;
  struct TimerSlot : reactor::Timer {
    TcpQueue* owner = nullptr;
  } retry_timer_;

  TcpRequest* wait_head_ = nullptr;  // FIFO of Queued and NeedBuffer requests
  TcpRequest* wait_tail_ = nullptr;
  uint32_t waiting_ = 0;
  uint64_t waits_ = 0;
  bool resuming_ = false;
  bool memory_short_ = false;  // the last parked request waits for memory
  bool memory_logged_ = false;
  uint64_t tx_pending_ = 0;  // sum of TcpRequest::tx_pending
  reactor::OwnedDeferred<TcpQueue> resume_d_;
};

}  // namespace nvtcp::target

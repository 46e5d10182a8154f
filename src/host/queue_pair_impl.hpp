// SPDX-License-Identifier: Apache-2.0
// One host queue (admin or I/O): a TCP connection, the PDU state machine, and a request
// pool indexed by command identifier. Nothing here allocates after connect(). QueuePairImpl is
// the data path (submit, PDUs in and out, completions) and the queue's state; its connection's
// bring-up and end (queue_connection.hpp), its recovery from a lost connection
// (queue_recovery.hpp) and its DH-HMAC-CHAP authentication (queue_authentication.hpp) are
// parts of their own, held by value and called directly.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "auth/dhchap_transaction.hpp"
#include "host/host_error.hpp"
#include "host/io_queue.hpp"
#include "host/queue_authentication.hpp"
#include "host/queue_connection.hpp"
#include "host/queue_recovery.hpp"
#include "host/queue_states.hpp"
#include "host/timing.hpp"
#include "nvtcp/host.hpp"
#include "reactor/clock.hpp"
#include "reactor/tcp_stream.hpp"
#include "tls/psk.hpp"
#include "transport/pdu_receiver.hpp"
#include "util/state_machine.hpp"
#include "wire/fabrics.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::host::detail {

struct HostRequest {
  // Free -> OnWire -> Free is the life of a command on a healthy connection. A command submitted
  // while reconnecting, or on the wire when the connection was lost, is Held until the next
  // connection is up. Free: no callback owed; Held and OnWire: exactly one callback owed.
  enum class State : uint8_t { Free, Held, OnWire, kCount };
  // Per I/O: checked (kCheckTransitions builds only), never logged or counted.
  void set_state(State to) {
    if constexpr (kCheckTransitions) {
      if (!kTransitions.allows(state, to)) illegal_transition("command slot", name(state), name(to), "HostRequest");
    }
    state = to;
  }
  static const char* name(State s) {
    constexpr const char* kNames[] = {"Free", "Held", "OnWire"};
    return size_t(s) < size_t(State::kCount) ? kNames[size_t(s)] : "?";
  }
  static constexpr TransitionTable<State, size_t(State::kCount)> kTransitions{
      {State::Free, State::OnWire},    // sent at once
      {State::Free, State::Held},      // submitted while reconnecting
      {State::OnWire, State::Free},    // completed, or (the Connect slot) dropped with its connection
      {State::OnWire, State::Held},    // its connection was lost: it goes out again on the next
      {State::Held, State::OnWire},    // the next connection is up
      {State::Held, State::Free},      // ended without being sent again (retries, fast_io_fail, failure)
  };

  State state = State::Free;
  uint16_t cid = 0;
  bool to_controller = false;
  bool in_capsule = false;
  bool abort_sent = false;        // timed out once; an Abort went to the admin queue
  bool timed_out = false;         // timed out after its Abort too: ends as host-aborted
  // An Asynchronous Event Request: the controller answers it when an event happens, which
  // may be never, so no command timeout applies to it.
  bool untimed = false;
  uint8_t retries = 0;            // connections it was in flight on when they were lost
  CompletionFn cb = nullptr;
  void* ctx = nullptr;
  uint8_t* data = nullptr;
  uint32_t len = 0;
  uint32_t c2h_received = 0;      // controller->host bytes received, in order
  uint32_t r2t_next = 0;          // where the next R2T must start
  uint32_t h2c_pdus = 0;          // H2CData PDUs sent for this command
  bool data_error = false;        // a data digest failed: the command cannot succeed
  uint64_t sent_ns = 0;           // when it went on the wire (reactor time)
  uint64_t abort_ns = 0;
  alignas(8) uint8_t cmd_pdu[sizeof(wire::CapsuleCmdHeader) + wire::kDigestLen + 128];
  uint8_t cmd_ddgst[4];
  uint8_t* h2c_slots = nullptr;   // into QueuePairImpl::h2c_arena_
};

// What an I/O queue needs of its controller to recover from a lost connection; the
// controller's admin thread implements it. Every method may be called from any thread.
class ControllerLink {
 public:
  enum class LinkState { Live, Resetting, Deleted };
  virtual ~ControllerLink() = default;
  virtual LinkState link_state() const = 0;
  virtual uint32_t generation() const = 0;     // changes at every new association
  virtual uint16_t link_cntlid() const = 0;    // the controller ID of the current one
  // A queue of association `generation` lost its connection (ignored if that association
  // is already gone).
  virtual void request_reset(uint32_t generation, const std::string& why) = 0;
  virtual void abort_command(uint16_t sqid, uint16_t cid) = 0;
};

struct QueueParams {
  TransportId trid;
  uint16_t qid = 0;
  uint16_t cntlid = wire::kDynamicCntlid;
  uint32_t depth = 32;            // commands outstanding at once
  uint32_t kato_ms = 0;
  uint8_t hostid[16] = {};
  std::string hostnqn;
  bool hdgst = false;
  bool ddgst = false;
  uint32_t in_capsule_max = 8192; // largest write sent in the capsule
  uint32_t max_transfer = 1u << 20;
  uint32_t timeout_ms = 5000;     // connect (TCP, ICReq, fabrics Connect)
  std::string tcp_congestion;
  uint32_t socket_buffer_bytes = 0;           // 0: the defaults (reactor::receive_buffer_for, send_buffer_for)
  std::optional<uint32_t> send_buffer_bytes;  // see ControllerOptions
  // Recovery (see ControllerOptions). Reconnecting needs a ControllerLink.
  uint32_t ctrl_loss_tmo_ms = 0;
  uint32_t reconnect_delay_ms = 2000;
  int32_t fast_io_fail_tmo_ms = -1;
  uint32_t io_timeout_ms = 0;     // 0 = commands never time out
  uint32_t max_retries = 5;
  // DH-HMAC-CHAP: the host's secret, used when a Connect answers that the queue must
  // authenticate (ATR); with the controller's secret the host asks the controller to prove
  // itself too. Shared by every queue of a controller, for reconnects as well.
  std::shared_ptr<const auth::DhchapSecret> dhchap_secret;
  std::shared_ptr<const auth::DhchapSecret> dhchap_ctrl_secret;
  // TLS: the PSK (identity and derived key) every connection of the controller starts with.
  std::shared_ptr<const tls::Psk> tls_psk;
  bool ktls = true;  // ControllerOptions::ktls
  // Every timing decision reads this; tests may give a reactor::FakeClock (it must outlive the queue).
  const reactor::Clock* clock = &reactor::monotonic_clock();
};

class QueuePairImpl final : public IoQueue, public reactor::StreamOwner, public transport::PduHandler {
 public:
  // link: the controller, for queues that reconnect with it (nullptr: this connection
  // alone; a loss fails it for good, as for the admin queue, which its owner re-creates).
  QueuePairImpl(reactor::Reactor& r, QueueParams p, std::shared_ptr<ControllerLink> link = nullptr);
  ~QueuePairImpl() override;

  // TCP connect, ICReq/ICResp, fabrics Connect; runs the reactor until done or timed out.
  bool connect(HostError& err) { return conn_.connect(err); }
  // The same connect without waiting for it: the queue comes up as this thread's reactor turns
  // (ready()), or fails, at the latest once timeout_ms has passed (failed(), error()). For a
  // caller that must not stall the other queues of its thread meanwhile (multipath).
  bool start_unwaited(HostError& err) { return conn_.start_unwaited(err); }
  HostError submit(const nvme::Sqe& sqe, void* data, uint32_t len, bool to_controller, CompletionFn cb,
                   void* ctx) override;
  int poll(uint32_t timeout_us) override;
  // Closes the connection for good, ending every outstanding command with a path error,
  // and waits for the close to finish.
  void shutdown();

  uint16_t qid() const override { return p_.qid; }
  uint16_t cntlid() const { return cntlid_; }
  uint32_t depth() const override { return p_.depth; }
  uint32_t outstanding() const override { return outstanding_; }
  bool failed() const override { return state_ == State::Failing || state_ == State::Failed; }
  bool ready() const override { return state_ == State::Ready; }
  QueueState state() const { return state_; }
  SocketState socket_state() const { return conn_.socket(); }
  uint32_t reconnects() const override { return recovery_.reconnects(); }
  // The connection closed before its TLS handshake was done: the target refused our key or
  // identity (or speaks no TLS there).
  bool tls_handshake_refused() const { return conn_.tls_handshake_refused(); }
  // A new DH-HMAC-CHAP transaction on the Connect slot, waited for in poll() (IoQueue).
  int reauthenticate(std::string& err) override { return auth_.reauthenticate(err); }
  const std::string& error() const { return error_.message; }

  // StreamOwner
  void on_receive(const uint8_t* data, size_t len) override;
  void on_closed(int err) override;
  bool recv_direct(uint8_t*& p, size_t& n) override {
    return receiving() && receiver_.in_place_window(transport::kMinInPlaceBytes, p, n);
  }
  void on_receive_direct(size_t len) override {
    if (receiving()) receiver_.consumed_in_place(len);
  }
  // PduHandler
  bool on_pdu_header(const uint8_t* hdr, uint32_t data_len, uint8_t*& data_dst) override;
  void on_pdu_complete(const uint8_t* hdr, bool data_ok) override;
  void on_pdu_error(wire::Fes fes, uint32_t fei, const std::string& why) override;

 private:
  using State = QueueState;
  // The connection's bring-up and end, its recovery and its authentication each act on the
  // queue's state, its command slots and its receiver: they are the queue's parts, held here.
  friend class QueueConnection;
  friend class QueueRecovery;
  friend class QueueAuthentication;

  // Every change of state_ goes through this: it checks the transition and logs it.
  void set_state(State to);

  bool receiving() const {
    return state_ == State::AwaitICResp || state_ == State::AwaitConnect || state_ == State::Ready;
  }
  uint64_t now() const { return p_.clock->now_ns(); }
  // Any fatal error on the current connection: hold and reconnect when possible, else fail.
  void fail(HostError why);
  // Who ended the queue: its owner (shutdown(), the destructor) expects it, so only a failure
  // of the connection itself is worth a warning.
  enum class FailedBy : uint8_t { Connection, Owner };
  void fail_for_good(HostError why, FailedBy by = FailedBy::Connection);
  // Ends every outstanding command with a path error (Command Aborted By Host if it timed out).
  void end_outstanding();
  void finish(HostRequest* r, const Completion& c);
  void start_request(HostRequest* r, const nvme::Sqe& sqe, void* data, uint32_t len, bool to_controller,
                     CompletionFn cb, void* ctx);
  void send_command(HostRequest* r);
  void send_h2c(HostRequest* r, uint16_t ttag, uint32_t offset, uint32_t length);
  void fill_header(wire::CommonHeader& ch, wire::PduType type, uint8_t hlen, uint32_t data_len, uint8_t flags);
  HostRequest* lookup(uint16_t cid, uint32_t fei_offset);
  void size_h2c_arena();

  reactor::Reactor& reactor_;
  QueueParams p_;
  QueueConnection conn_;
  transport::PduReceiver receiver_;
  State state_ = State::Idle;
  HostError error_;  // the first failure of the queue

  uint8_t cpda_ = 0;
  uint32_t maxh2cdata_ = 0;
  uint16_t cntlid_ = 0;
  QueueAuthentication auth_;
  QueueRecovery recovery_;

  // pool_[depth] is kept for fabrics Connect, so a reconnect finds a command slot even
  // when every other one holds a command waiting to be sent again.
  std::vector<HostRequest> pool_;
  std::vector<HostRequest*> free_;
  std::vector<uint8_t> h2c_arena_;
  uint32_t h2c_slots_per_request_ = 0;
  uint32_t h2c_slot_size_ = 0;
  uint32_t outstanding_ = 0;
  int delivered_ = 0;
  HostRequest* rx_req_ = nullptr;   // request of the PDU being received
};

}  // namespace nvtcp::host::detail

// One command on a target connection, from its capsule to its response: what it asked for,
// its data buffer, the PDUs it sends, and the state it is in (an explicit state machine).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "backend/block_device.hpp"
#include "reactor/byte_stream.hpp"
#include "target/subsystem.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::target {

class Connection;

struct Request {
  // Waiting: received, but held back until the send queue drains or buffer memory is free.
  // HeldAer: an Asynchronous Event Request waiting for an event; HeldAbort: an Abort waiting
  // for the I/O queue's answer. The legal moves between them: request_transition_legal().
  enum class State : uint8_t { Free, ReceivingData, AwaitingH2C, Waiting, Executing, Sending, HeldAer, HeldAbort };
  static constexpr size_t kStateCount = size_t(State::HeldAbort) + 1;

  // Changed only by RequestPool::set_state, which checks the move and counts it.
  State state() const { return state_; }

  uint16_t index = 0;             // also the transfer tag of this request's R2Ts
  // Sqe is packed (alignment 1), yet its fields are bound to references (fmt's arguments):
  // aligned here, each dword field sits on its natural boundary.
  alignas(8) wire::Sqe sqe{};
  wire::Status status;
  uint32_t dw0 = 0, dw1 = 0;
  uint32_t data_len = 0;          // bytes this command moves (SGL length)
  uint32_t rx_next = 0;           // host->controller bytes received, in order
  uint32_t r2t_next = 0;          // host->controller bytes requested by R2Ts so far
  const uint8_t* tx_data = nullptr;  // controller->host data to send
  uint32_t tx_len = 0;
  uint32_t tx_pad = 0;               // zero bytes sent after tx_data (a log page's end)

  // Data buffer, grown to the largest transfer this slot has seen, then reused.
  std::unique_ptr<uint8_t, void (*)(void*)> buf{nullptr, free};
  uint32_t buf_cap = 0;

  // Header storage for the PDUs this request sends; they must outlive the send.
  alignas(8) uint8_t resp_pdu[sizeof(wire::CapsuleRespPdu) + wire::kDigestLen];
  alignas(8) uint8_t c2h_pdu[128];  // header + digest + padding up to the host's HPDA
  uint8_t c2h_ddgst[4];
  static constexpr uint32_t kMaxR2T = 4;
  alignas(8) uint8_t r2t_pdu[kMaxR2T][sizeof(wire::R2TPdu) + wire::kDigestLen];
  // AwaitingH2C: when each outstanding R2T was sent (by R2T number mod kMaxR2T). The data an
  // R2T asks for is due within h2c_data_timeout_ms of it, however it trickles in.
  uint64_t r2t_sent_ns[kMaxR2T] = {};

  backend::BlockIo io;
  uint32_t ns_index = 0;          // the namespace's Namespace::index (its counters)
  uint32_t dsm_next = 0;            // Dataset Management: next range to deallocate
  uint32_t copy_next = 0;           // Copy: the source range being copied
  uint64_t copy_dst = 0;            // Copy: where it goes (LBA)
  bool copy_writing = false;        // Copy: the device is writing the range (else reading it)
  uint32_t flush_next = 0;          // Flush: next namespace (subsystem order) to flush
  bool flush_all = false;           // Flush: every namespace, not just sqe.nsid
  bool shutdown_after_flush = false;  // Property Set CC.SHN: report the shutdown complete
  uint32_t tx_pending = 0;          // read bytes promised to the send queue once the device answers
  bool aborted = false;             // Abort: ends with Command Abort Requested once its R2T data is in
  // Writes count in their namespace's WriteFence while on the device; a fused Compare and
  // Write owns the fence instead. fence_ns: the namespace a request waits on or counts in.
  Namespace* fence_ns = nullptr;
  bool fence_counted = false;
  bool fence_owner = false;
  bool fence_waiting = false;       // a write the fence held back, registered as waiting
  uint64_t durable_ticket = 0;      // a reservation change waiting to be durable (CPTPL)
  // Copy and Dataset Management: the no-op whose completion starts the next range, one
  // range per reactor turn (Connection::next_step_later).
  reactor::OwnedCompletion<Request> next_step;
  Request* fused_partner = nullptr;  // the other half of a fused Compare and Write
  Request* next_waiting = nullptr;  // the connection's list of Waiting requests
  Connection* conn = nullptr;
  struct Sent : reactor::SendDone {
    Request* req = nullptr;
  } sent;

 private:
  friend class RequestPool;
  State state_ = State::Free;
};

const char* request_state_name(Request::State s);

// The life of a request (SPDK's nvmf_tcp_req_set_state checks the same way):
//   Free -> ReceivingData          a capsule arrives for it
//   ReceivingData -> Executing     the capsule (and its in-capsule data) is in
//   ReceivingData -> Sending       a bad capsule or data digest: answered at once
//   Executing -> AwaitingH2C       R2Ts ask the host for the data
//   AwaitingH2C -> Executing       the data is in (or an abort ended the transfer)
//   Executing -> Waiting           held back: send queue over its cap, or no buffer memory
//   Waiting -> Executing           resumed, in arrival order
//   Waiting -> Sending             aborted while it waited
//   Executing -> HeldAer/HeldAbort an Asynchronous Event Request or an Abort, held
//   HeldAer/HeldAbort -> Sending   its event or answer came
//   Executing -> Sending           done: the response (and any data) is queued
//   Sending -> Free                the stream let go of its PDUs
constexpr bool request_transition_legal(Request::State from, Request::State to) {
  using S = Request::State;
  switch (from) {
    case S::Free: return to == S::ReceivingData;
    case S::ReceivingData: return to == S::Executing || to == S::Sending;
    case S::AwaitingH2C: return to == S::Executing;
    case S::Waiting: return to == S::Executing || to == S::Sending;
    case S::Executing:
      return to == S::AwaitingH2C || to == S::Waiting || to == S::HeldAer || to == S::HeldAbort || to == S::Sending;
    case S::Sending: return to == S::Free;
    case S::HeldAer:
    case S::HeldAbort: return to == S::Sending;
  }
  return false;
}

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
// One command on a target queue, from its capsule to its response: what it asked for, the
// data it moves, the PDUs it sends, the scratch state of its command, and the state it is in.
//
// The life of a request is one state machine. The transport half of it (capsule, buffer, R2T,
// response) is run by TcpQueue::process() (tcp_queue.cpp); the states in the middle
// (Executing to the waits of a command, the device and the worker) are the command layer's,
// which changes them through the same checked setter (RequestPool::set_state, which also
// counts them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <variant>

#include "backend/block_device.hpp"
#include "reactor/byte_stream.hpp"
#include "target/subsystem.hpp"
#include "util/state_machine.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::target {

class CommandQueue;
class TcpQueue;

struct Request {
  enum class State : uint8_t {
    Free,                  // the slot carries no command
    ReceivingCapsule,      // its capsule header is in; in-capsule data is still arriving
    Queued,                // held before it runs: the send queue is over its cap, or older commands wait
    NeedBuffer,            // parsed, and its buffer is not there yet: being allocated, or waiting for
                           // memory freed elsewhere
    AwaitingH2C,           // R2Ts sent; the host's data is arriving
    Executing,             // in a command handler (never held here: a handler moves it on before it returns)
    AwaitingFusedPartner,  // a fused Compare waiting for the Write that must follow it
    AwaitingFence,         // a write held while a fused Compare and Write owns its namespace, or such a
                           // pair waiting to own the fence or for the writes in flight to drain
    InDevice,              // a device operation of it is running
    OnWorker,              // its CPU-heavy part (a DH-HMAC-CHAP exponentiation) runs on a worker thread
    BetweenSteps,          // Copy, Dataset Management: the next range starts on the next reactor turn
    AwaitingDurable,       // a reservation change waiting for its state file to be on disk
    HeldAer,               // an Asynchronous Event Request waiting for an event
    HeldAbort,             // an Abort waiting for the I/O queue's answer
    Sending,               // its response (and data) is queued; the stream has not let go of it yet
    kCount
  };
  static constexpr size_t kStateCount = size_t(State::kCount);

  // Changed only by RequestPool::set_state, which checks the move and counts it.
  State state() const { return state_; }

  // The data a command moves, as its parse declared it (CommandQueue::parse).
  enum class Direction : uint8_t { None, HostToController, ControllerToHost };
  struct Transfer {
    Direction dir = Direction::None;
    uint32_t len = 0;     // bytes the host sends (HostToController) or at most receives
    uint32_t buffer = 0;  // bytes of buffer the command needs before it runs (0: none; a
                          // HostToController transfer then receives its data into nothing)
  };

  // Per-command scratch state, one alternative per command that runs in steps or waits.
  struct FlushSteps {          // Flush; Property Set CC.SHN; Set Features 06h turning a cache off
    uint32_t next = 0;         // the NSID flushed last (0: none yet)
    bool all = false;          // every namespace, not just sqe.nsid
    bool shutdown_after = false;  // Property Set CC.SHN: report the shutdown complete at the end
  };
  struct DsmSteps {
    uint32_t next = 0;  // next range to deallocate
  };
  struct CopySteps {
    uint32_t next = 0;     // the source range being copied
    uint64_t dst = 0;      // where it goes (LBA)
    uint64_t done = 0;     // bytes of range `next` copied so far
    bool writing = false;  // the device is writing the piece (else reading it)
  };
  struct FusedHalf {
    Request* partner = nullptr;  // the other half of a fused Compare and Write
  };
  struct DurableWait {
    uint64_t ticket = 0;  // the reservation state write it waits for (Reservations::written)
  };
  using Steps = std::variant<std::monostate, FlushSteps, DsmSteps, CopySteps, FusedHalf, DurableWait>;

  uint16_t index = 0;             // also the transfer tag of this request's R2Ts
  // Sqe is packed (alignment 1), yet its fields are bound to references (fmt's arguments):
  // aligned here, each dword field sits on its natural boundary.
  alignas(8) wire::Sqe sqe{};
  wire::Status status;
  uint32_t dw0 = 0, dw1 = 0;
  Transfer xfer;
  uint32_t capsule_len = 0;       // host data that came in the capsule
  // I/O commands: the namespace parse found (nullptr: none, or every one for a Flush; held in
  // its NamespaceHolds until the request is released, see CommandQueue::hold_namespace), and
  // whether time passed between parse and execute (the request waited for memory, its turn
  // or its data), so that execute checks the controller and reservations again.
  Namespace* ns = nullptr;
  bool waited = false;
  uint64_t arrived_ns = 0;        // the reactor turn its capsule header came in (its latency's start)
  uint32_t rx_next = 0;           // host->controller bytes received, in order
  uint32_t r2t_next = 0;          // host->controller bytes requested by R2Ts so far
  bool aborted = false;           // Abort: ends with Command Abort Requested at its next step
  const uint8_t* tx_data = nullptr;  // controller->host data to send
  uint32_t tx_len = 0;
  uint32_t tx_pad = 0;               // zero bytes sent after tx_data (a log page's end)
  uint32_t tx_pending = 0;        // bytes promised to the send queue while it executes

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
  wire::Status device_status;     // InDevice: what the device answered
  uint32_t ns_index = 0;          // the namespace's Namespace::index (its counters)
  // Writes count in their namespace's WriteFence while on the device; a fused Compare and
  // Write owns the fence instead. fence_ns: the namespace a request waits on or counts in.
  Namespace* fence_ns = nullptr;
  bool fence_counted = false;
  bool fence_owner = false;
  bool fence_waiting = false;       // a write the fence held back, registered as waiting
  Steps steps;
  // BetweenSteps: the no-op whose completion starts the next range.
  reactor::OwnedCompletion<Request> next_step;
  Request* next_waiting = nullptr;  // the queue's list of Queued and NeedBuffer requests
  TcpQueue* queue = nullptr;
  CommandQueue* commands = nullptr;  // whose device and worker completions these are
  struct Sent : reactor::SendDone {
    Request* req = nullptr;
  } sent;

  FusedHalf* fused() { return std::get_if<FusedHalf>(&steps); }

 private:
  friend class RequestPool;
  State state_ = State::Free;
};

const char* request_state_name(Request::State s);

// The moves a request makes. SPDK's nvmf_tcp_req_set_state counts requests per state as
// RequestPool::set_state does; the check that each move is one of these is ours.
inline constexpr TransitionTable<Request::State, Request::kStateCount> kRequestTransitions{
    {Request::State::Free, Request::State::ReceivingCapsule},         // a capsule arrives for it
    {Request::State::ReceivingCapsule, Request::State::Queued},       // in, but it has to wait its turn
    {Request::State::ReceivingCapsule, Request::State::NeedBuffer},   // in and parsed; it needs a buffer
    {Request::State::ReceivingCapsule, Request::State::AwaitingH2C},  // ... or has one, and R2Ts go out
    {Request::State::ReceivingCapsule, Request::State::Executing},    // ... or has all it needs
    {Request::State::ReceivingCapsule, Request::State::Sending},      // bad capsule, data digest or parse
    {Request::State::Queued, Request::State::NeedBuffer},             // its turn came, and it is parsed
    {Request::State::Queued, Request::State::AwaitingH2C},
    {Request::State::Queued, Request::State::Executing},
    {Request::State::Queued, Request::State::Sending},                // aborted or failed its parse
    {Request::State::NeedBuffer, Request::State::AwaitingH2C},        // buffer ready, R2Ts go out
    {Request::State::NeedBuffer, Request::State::Executing},          // buffer ready (or none needed)
    {Request::State::NeedBuffer, Request::State::Sending},            // aborted, or no memory at all
    {Request::State::AwaitingH2C, Request::State::Executing},         // all its data is in
    {Request::State::AwaitingH2C, Request::State::Sending},           // digest error or aborted
    {Request::State::Executing, Request::State::NeedBuffer},          // Get Log Page: its log is larger
    {Request::State::Executing, Request::State::AwaitingFusedPartner},
    {Request::State::Executing, Request::State::AwaitingFence},
    {Request::State::Executing, Request::State::InDevice},
    {Request::State::Executing, Request::State::OnWorker},
    {Request::State::Executing, Request::State::BetweenSteps},
    {Request::State::Executing, Request::State::AwaitingDurable},
    {Request::State::Executing, Request::State::HeldAer},
    {Request::State::Executing, Request::State::HeldAbort},
    {Request::State::Executing, Request::State::Sending},             // done: the response is queued
    {Request::State::AwaitingFusedPartner, Request::State::Executing},  // its Write came, or another command
    {Request::State::AwaitingFence, Request::State::Executing},
    {Request::State::InDevice, Request::State::Executing},            // the device answered
    {Request::State::OnWorker, Request::State::Executing},            // the worker's part is back
    {Request::State::BetweenSteps, Request::State::Executing},
    {Request::State::AwaitingDurable, Request::State::Executing},
    {Request::State::HeldAer, Request::State::Sending},               // its event came, or it was aborted
    {Request::State::HeldAbort, Request::State::Sending},             // the I/O queue answered
    {Request::State::Sending, Request::State::Free},                  // the stream let go of its PDUs
};

}  // namespace nvtcp::target

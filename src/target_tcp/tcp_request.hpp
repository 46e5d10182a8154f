// SPDX-License-Identifier: Apache-2.0
// One command on an NVMe/TCP target queue, what nvmet-tcp's nvmet_tcp_cmd is: the command
// layer's Command (command.hpp), and around it what the transport needs to carry it: its
// transfer tag, the host's data as it arrives by R2T, the PDUs it sends, its data buffer and
// the transport's state.
//
// The transport's state is TcpQueue::process()'s (tcp_queue.cpp): capsule, turn, buffer, R2T
// and response. While the command layer runs it, it is Executing here and the command layer's
// own states (Command::State) say where. RequestPool::set_state changes it, checks the move
// and counts it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "reactor/byte_stream.hpp"
#include "target/command.hpp"
#include "util/state_machine.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::target {

// Frees a request's data buffer: munmap for one mapped on its own (mapped_bytes), free() otherwise.
struct RequestBufferFree {
  size_t mapped_bytes = 0;
  void operator()(uint8_t* p) const;
};

class TcpQueue;

struct TcpRequest : Command {
  enum class State : uint8_t {
    Free,              // the slot carries no command
    ReceivingCapsule,  // its capsule header is in; in-capsule data is still arriving
    Queued,            // held before it runs: the send queue is over its cap, or older commands wait
    NeedBuffer,        // parsed, and its buffer is not there yet: being allocated, or waiting for
                       // memory freed elsewhere
    AwaitingH2C,       // R2Ts sent; the host's data is arriving
    Executing,         // the command layer runs it (Command::State says where)
    Sending,           // its response (and data) is queued; the stream has not let go of it yet
    kCount
  };
  static constexpr size_t kStateCount = size_t(State::kCount);

  // Changed only by RequestPool::set_state, which checks the move and counts it. This hides
  // Command::state(): command_state() is the command layer's.
  State state() const { return state_; }
  Command::State command_state() const { return Command::state(); }

  static TcpRequest& of(Command& c) { return static_cast<TcpRequest&>(c); }

  uint16_t index = 0;             // also the transfer tag of this request's R2Ts
  uint32_t rx_next = 0;           // host->controller bytes received, in order
  uint32_t r2t_next = 0;          // host->controller bytes requested by R2Ts so far
  uint32_t tx_pending = 0;        // bytes promised to the send queue while it executes

  // The data buffer (Command::buf), grown to the largest transfer this slot has seen, then reused.
  // From 128 KiB on it is a mapping of its own (RequestBufferFree::mapped_bytes), so that freeing
  // it gives the memory back to the system.
  std::unique_ptr<uint8_t, RequestBufferFree> buffer;

  // Header storage for the PDUs this request sends; they must outlive the send.
  alignas(8) uint8_t resp_pdu[sizeof(wire::CapsuleRespPdu) + wire::kDigestLen];
  alignas(8) uint8_t c2h_pdu[128];  // header + digest + padding up to the host's HPDA
  uint8_t c2h_ddgst[4];
  static constexpr uint32_t kMaxR2T = 4;
  alignas(8) uint8_t r2t_pdu[kMaxR2T][sizeof(wire::R2TPdu) + wire::kDigestLen];
  // AwaitingH2C: when each outstanding R2T was sent (by R2T number mod kMaxR2T). The data an
  // R2T asks for is due within h2c_data_timeout_ms of it, however it trickles in.
  uint64_t r2t_sent_ns[kMaxR2T] = {};

  TcpRequest* next_waiting = nullptr;  // the queue's list of Queued and NeedBuffer requests
  TcpQueue* owner = nullptr;
  struct Sent : reactor::SendDone {
    TcpRequest* req = nullptr;
  } sent;

 private:
  friend class RequestPool;
  State state_ = State::Free;
};

const char* request_state_name(TcpRequest::State s);

// The moves a request makes. SPDK's nvmf_tcp_req_set_state counts requests per state as
// RequestPool::set_state does; the check that each move is one of these is ours.
inline constexpr TransitionTable<TcpRequest::State, TcpRequest::kStateCount> kRequestTransitions{
    {TcpRequest::State::Free, TcpRequest::State::ReceivingCapsule},         // a capsule arrives for it
    {TcpRequest::State::ReceivingCapsule, TcpRequest::State::Queued},       // in, but it has to wait its turn
    {TcpRequest::State::ReceivingCapsule, TcpRequest::State::NeedBuffer},   // in and parsed; it needs a buffer
    {TcpRequest::State::ReceivingCapsule, TcpRequest::State::AwaitingH2C},  // ... or has one, and R2Ts go out
    {TcpRequest::State::ReceivingCapsule, TcpRequest::State::Executing},    // ... or has all it needs
    {TcpRequest::State::ReceivingCapsule, TcpRequest::State::Sending},      // bad capsule, data digest or parse
    {TcpRequest::State::Queued, TcpRequest::State::NeedBuffer},             // its turn came, and it is parsed
    {TcpRequest::State::Queued, TcpRequest::State::AwaitingH2C},
    {TcpRequest::State::Queued, TcpRequest::State::Executing},
    {TcpRequest::State::Queued, TcpRequest::State::Sending},                // aborted or failed its parse
    {TcpRequest::State::NeedBuffer, TcpRequest::State::AwaitingH2C},        // buffer ready, R2Ts go out
    {TcpRequest::State::NeedBuffer, TcpRequest::State::Executing},          // buffer ready (or none needed)
    {TcpRequest::State::NeedBuffer, TcpRequest::State::Sending},            // aborted, or no memory at all
    {TcpRequest::State::AwaitingH2C, TcpRequest::State::Executing},         // all its data is in
    {TcpRequest::State::AwaitingH2C, TcpRequest::State::Sending},           // digest error or aborted
    {TcpRequest::State::Executing, TcpRequest::State::NeedBuffer},          // Get Log Page: its log is larger
    {TcpRequest::State::Executing, TcpRequest::State::Sending},             // done: the response is queued
    {TcpRequest::State::Sending, TcpRequest::State::Free},                  // the stream let go of its PDUs
};

}  // namespace nvtcp::target

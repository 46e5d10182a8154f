// SPDX-License-Identifier: Apache-2.0
// Ending a connection after a fatal transport error, the same way on both sides: send a TermReq
// that quotes the offending header, then linger before closing. Closing a socket that still has
// unread bytes makes the kernel send a reset, and a reset can overtake the TermReq still in the
// send queue, so the peer would see a bare reset instead of the reason. The peer is expected to
// close once it has read the TermReq; the linger bounds how long we wait for that.
//
// The Terminator holds the PDU and the linger's state but no socket: its owner sends the bytes,
// arms a timer for close_at_ns(), and closes when the peer has closed or the timer fired. That
// keeps it usable by any stream type and testable without one.
//
// Host (QueueConnection::send_term_req, from QueuePairImpl::on_pdu_error):
//   auto pdu = terminator_.start(receiver_, PduType::H2CTermReq, fes, fei, now);
//   stream_->send(pdu.data(), pdu.size());   arm a timer at terminator_.close_at_ns()
//   ... on_closed():  terminator_.peer_closed();   timer: if (terminator_.expired(now)) close
// Target (TcpQueueReceive::on_pdu_error): the same start(); it closes as soon as its C2HTermReq has
// left (closing() then close, as nvmet and SPDK do), the linger only bounding a send that never
// leaves; on_closed() calls peer_closed().
#pragma once
#include <cstdint>
#include <span>

#include "transport/pdu_receiver.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::transport {

// Long enough for a TermReq to cross any network we run on and for the peer to act on it;
// short enough that a peer which never closes costs little.
inline constexpr uint64_t kTermReqLingerNs = 1'000'000'000;

class Terminator {
 public:
  // Idle: nothing sent. Lingering: the TermReq is queued; the socket stays open until the peer
  // closes or the linger passes. Done: the owner has closed (or the peer did); final until reset().
  enum class State : uint8_t { Idle, Lingering, Done };

  explicit Terminator(uint64_t linger_ns = kTermReqLingerNs) : linger_ns_(linger_ns) {}

  // Builds the TermReq (H2CTermReq on the host, C2HTermReq on the target) quoting the header rx
  // holds, and starts the linger at now_ns. The bytes stay valid until the next start() or
  // reset(): the owner queues them as they are. Only the first error of a connection is
  // reported; a second start() while lingering returns no bytes.
  std::span<const uint8_t> start(const PduReceiver& rx, wire::PduType type, wire::Fes fes, uint32_t fei,
                                 uint64_t now_ns);
  // The peer closed the connection: nothing more to wait for.
  void peer_closed() { finish(); }
  // The owner closes the socket (the linger passed, or it shuts down): the linger is over.
  void closing() { finish(); }
  // True once the linger has passed while still lingering: the owner should close now.
  bool expired(uint64_t now_ns) const { return state_ == State::Lingering && now_ns >= close_at_ns_; }
  // For a new connection on the same owner (a host queue that reconnects).
  void reset() { state_ = State::Idle; }

  State state() const { return state_; }
  bool lingering() const { return state_ == State::Lingering; }
  uint64_t close_at_ns() const { return close_at_ns_; }
  uint64_t linger_ns() const { return linger_ns_; }

 private:
  void finish() {
    if (state_ == State::Lingering) state_ = State::Done;
  }

  uint64_t linger_ns_;
  uint64_t close_at_ns_ = 0;
  State state_ = State::Idle;
  alignas(8) uint8_t pdu_[PduReceiver::kMaxTermReqLen];
};

}  // namespace nvtcp::transport

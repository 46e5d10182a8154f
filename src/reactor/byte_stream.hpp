// SPDX-License-Identifier: Apache-2.0
// The seam between a connection's PDU layer and the bytes under it. The target's connections
// send and receive only through ByteStream: TcpStream carries it over a socket; a TLS stream
// can later sit in its place; a unit test's in-memory stream keeps what is sent until the test
// lets it go, so back-pressure and stalled peers are tested without a socket and without
// filling kernel buffers.
#pragma once
#include <cstddef>
#include <cstdint>

namespace nvtcp::reactor {

// Called when every byte of a queued segment has been handed to the kernel; owners use
// it to recycle the memory the segment pointed at.
struct SendDone {
  void (*fn)(SendDone* self) = nullptr;
};

class StreamOwner {
 public:
  virtual ~StreamOwner() = default;
  // Received bytes; the owner consumes all of them (it buffers what it cannot place yet).
  virtual void on_receive(const uint8_t* data, size_t len) = 0;
  // The stream is closed and no operation is in flight: the owner may free it now.
  // err is 0 for an orderly close by the peer or by us, else a negative errno.
  virtual void on_closed(int err) = 0;
  // Large payloads skip the staging buffer: before each receive the owner may name where
  // the next bytes belong (at most n of them); they then arrive through on_receive_direct.
  virtual bool recv_direct(uint8_t*& /*p*/, size_t& /*n*/) { return false; }
  virtual void on_receive_direct(size_t /*len*/) {}
};

// What every stream promises its owner:
// - send() queues the bytes by reference (they must stay valid until done fires, or until
//   the stream is closed); segments leave in the order queued, and their dones fire in that
//   order once the bytes are gone;
// - close() stops both directions: queued segments are dropped and their dones fire without
//   the bytes leaving (the owner's memory is released though nothing more is sent), as does a
//   send() after close(); on_closed follows later, from the reactor, never inside a call the
//   owner made.
// What a stream hands the kernel per reactor turn at most: bytes, while the reactor's time is
// before until_ns (TcpStream::limit_send_per_turn).
struct SendLimit {
  size_t bytes = 0;
  uint64_t until_ns = 0;
};

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Starts receiving. Call once the owner is ready for bytes.
  virtual void start() = 0;
  // Queues len bytes at data; done (optional) fires when they have all been sent.
  virtual void send(const void* data, size_t len, SendDone* done = nullptr) = 0;
  // Shuts both directions down; on_closed follows once nothing is in flight.
  virtual void close() = 0;
  virtual bool closing() const = 0;
  // Bytes queued and not yet taken by the transport below: what back-pressure bounds.
  virtual size_t queued_bytes() const = 0;
  // Bytes handed to the transport so far: progress, for a deadline on a peer that stops reading.
  virtual uint64_t sent_bytes() const = 0;
  // The most sends whose dones may still be pending after the peer can have their bytes
  // (zero-copy sends wait for the kernel to let go of the pages, which on loopback is once
  // the peer has read them): what an owner that frees a slot on done must allow for.
  virtual size_t max_sends_held_after_delivery() const { return 0; }
};

}  // namespace nvtcp::reactor

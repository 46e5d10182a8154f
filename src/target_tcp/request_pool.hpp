// SPDX-License-Identifier: Apache-2.0
// The requests of one NVMe/TCP connection: a pool sized by the queue depth (nothing is
// allocated per I/O), each request's data buffer (grown to the largest transfer its slot has
// seen, then reused), counted in the queue's memory budgets (QueueMemory). Every request state
// change goes through set_state(), which checks the move and keeps a count of requests per
// state.
//
// Single-threaded: a pool belongs to its connection's reactor, so its counts are plain
// integers (no atomics on the data path).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "target/queue_memory.hpp"
#include "target_tcp/tcp_request.hpp"

namespace nvtcp::target {

// How many requests are in each TcpRequest::State (indexed by the state).
using RequestStateCounts = std::array<uint32_t, TcpRequest::kStateCount>;
// How many times requests entered each state: where they went, and how often they waited
// (for memory, their turn, their data) over a run.
using RequestStateEntries = std::array<uint64_t, TcpRequest::kStateCount>;

class RequestPool {
 public:
  // owner: set in each request (its sends find their queue through it);
  // on_sent: called when the stream lets go of a request's last PDU.
  RequestPool(QueueMemory& memory, TcpQueue* owner, void (*on_sent)(reactor::SendDone*));
  ~RequestPool();  // its memory must be given back by a QueueMemory that outlives it
  RequestPool(const RequestPool&) = delete;
  RequestPool& operator=(const RequestPool&) = delete;

  // Grows the pool to depth requests (never shrinks it).
  void resize(uint32_t depth);
  size_t size() const { return slots_.size(); }
  // By transfer tag (TcpRequest::index); tag < size().
  TcpRequest* at(uint32_t tag) const { return slots_[tag].get(); }
  const std::vector<std::unique_ptr<TcpRequest>>& slots() const { return slots_; }

  // A free request, now ReceivingCapsule; nullptr when every request is in use.
  TcpRequest* alloc();
  // A request whose response has left (Sending) goes back to Free. Its buffer is kept for
  // reuse unless free_buffer_now, or unless the target uses over half its buffer budget
  // (then idle buffers go back so that idle connections cannot hold memory busy ones need).
  void release(TcpRequest* r, bool free_buffer_now);
  // The one place a request changes state: the move must be legal (checked in Debug and
  // sanitizer builds) and the per-state counts follow it.
  void set_state(TcpRequest* r, TcpRequest::State to);
  uint32_t count(TcpRequest::State s) const { return counts_[size_t(s)]; }
  const RequestStateCounts& counts() const { return counts_; }
  const RequestStateEntries& entries() const { return entries_; }

  // Buffer memory. Wait means "not now": the caller parks the request and it runs again once
  // memory is released; Fail: the allocation itself failed.
  enum class BufferResult { Ok, Wait, Fail };
  // A buffer of at least len bytes (4 KiB aligned, for O_DIRECT) in r->buf. io_queue: the
  // request is on a connected I/O queue, which leaves admin_buffer_reserve() to the others.
  BufferResult ensure_buffer(TcpRequest* r, uint32_t len, bool io_queue);
  void free_buffer(TcpRequest* r);
  // Frees the buffers of the free requests; returns the bytes given back.
  uint64_t reclaim_idle_buffers();

 private:
  QueueMemory& memory_;
  TcpQueue* owner_;
  void (*on_sent_)(reactor::SendDone*);
  std::vector<std::unique_ptr<TcpRequest>> slots_;
  std::vector<TcpRequest*> free_;
  RequestStateCounts counts_{};
  RequestStateEntries entries_{};
};

}  // namespace nvtcp::target

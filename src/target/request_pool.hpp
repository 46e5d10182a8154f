// SPDX-License-Identifier: Apache-2.0
// The requests of one connection and the memory behind them: a pool sized by the queue
// depth (nothing is allocated per I/O), each request's data buffer (grown to the largest
// transfer its slot has seen, then reused), and the budgets that bound that memory per
// connection, per host and for the whole target. Every request state change goes through
// set_state(), which checks the move and keeps a count of requests per state.
//
// Single-threaded: a pool belongs to its connection's reactor, so its counts are plain
// integers (no atomics on the data path); only the shared budgets are atomic.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "target/config.hpp"
#include "target/request.hpp"
#include "target/target_state.hpp"

namespace nvtcp::target {

// How many requests are in each Request::State (indexed by the state).
using RequestStateCounts = std::array<uint32_t, Request::kStateCount>;
// How many times requests entered each state: where they went, and how often they waited
// (for memory, the fence, the device...) over a run.
using RequestStateEntries = std::array<uint64_t, Request::kStateCount>;

class RequestPool {
 public:
  // owner: set in each request (its completions find their queue through it);
  // on_sent: called when the stream lets go of a request's last PDU.
  RequestPool(const TargetConfig& cfg, ResourceUsage& usage, TcpQueue* owner,
              void (*on_sent)(reactor::SendDone*));
  // Gives every byte this pool holds (buffers and the pool itself) back to the budgets.
  ~RequestPool();
  RequestPool(const RequestPool&) = delete;
  RequestPool& operator=(const RequestPool&) = delete;

  // Grows the pool to depth requests (never shrinks it).
  void resize(uint32_t depth);
  size_t size() const { return slots_.size(); }
  // By transfer tag (Request::index); tag < size().
  Request* at(uint32_t tag) const { return slots_[tag].get(); }
  const std::vector<std::unique_ptr<Request>>& slots() const { return slots_; }

  // A free request, now ReceivingCapsule; nullptr when every request is in use.
  Request* alloc();
  // A request whose response has left (Sending) goes back to Free. Its buffer is kept for
  // reuse unless free_buffer_now, or unless the target uses over half its buffer budget
  // (then idle buffers go back so that idle connections cannot hold memory busy ones need).
  void release(Request* r, bool free_buffer_now);
  // The one place a request changes state: the move must be legal (checked in Debug and
  // sanitizer builds) and the per-state counts follow it.
  void set_state(Request* r, Request::State to);
  uint32_t count(Request::State s) const { return counts_[size_t(s)]; }
  const RequestStateCounts& counts() const { return counts_; }
  const RequestStateEntries& entries() const { return entries_; }

  // Buffer memory. Wait means "not now": the caller parks the request and it runs again once
  // memory is released; Fail: the allocation itself failed.
  enum class BufferResult { Ok, Wait, Fail };
  // A buffer of at least len bytes (4 KiB aligned, for O_DIRECT) in r->buf. io_queue: the
  // request is on a connected I/O queue, which leaves admin_buffer_reserve() to the others.
  BufferResult ensure_buffer(Request* r, uint32_t len, bool io_queue);
  void free_buffer(Request* r);
  // Frees the buffers of the free requests; returns the bytes given back.
  uint64_t reclaim_idle_buffers();
  // Takes n bytes from the host's budget (before Connect there is none) and the target's
  // (up to global_cap), or from neither.
  bool reserve_budgets(HostBudget* host, uint64_t n, uint64_t global_cap);
  void release_budgets(HostBudget* host, uint64_t n);
  // Connect: from now on this pool's memory counts against host, pool_bytes included (already
  // reserved by the caller); what its buffers took before Connect moves to the host too.
  void attach_host(HostBudget* host, uint64_t pool_bytes);
  // The queue's host changed (it authenticated): the caller has moved what the pool holds
  // (pool_bytes() + buffer_bytes()) from the old budget to host's.
  void rebind_host(HostBudget* host) { host_ = host; }

  uint64_t buffer_bytes() const { return buffer_bytes_; }  // sum of Request::buf_cap
  uint64_t pool_bytes() const { return pool_bytes_; }

 private:
  const TargetConfig& cfg_;
  ResourceUsage& usage_;
  TcpQueue* owner_;
  void (*on_sent_)(reactor::SendDone*);
  HostBudget* host_ = nullptr;
  std::vector<std::unique_ptr<Request>> slots_;
  std::vector<Request*> free_;
  RequestStateCounts counts_{};
  RequestStateEntries entries_{};
  uint64_t buffer_bytes_ = 0;
  uint64_t pool_bytes_ = 0;
};

}  // namespace nvtcp::target

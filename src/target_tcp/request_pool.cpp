// SPDX-License-Identifier: Apache-2.0
#include "target_tcp/request_pool.hpp"

#include <sys/mman.h>

#include <cstdlib>

#include "util/state_machine.hpp"

namespace nvtcp::target {
namespace {

// Buffers from this size on are mappings of their own, given back to the system when freed:
// memory a burst of large commands took does not stay with the process once they end. Done here
// rather than with mallopt(M_MMAP_THRESHOLD) for the whole process, which also turns off glibc's
// own threshold for every library in it: librbd's messenger then mapped, faulted in and unmapped
// fresh memory for each 128 KiB message it received (bench/RESULTS.md, 08:10).
constexpr uint64_t kMappedBufferBytes = 128 * 1024;

}  // namespace

void RequestBufferFree::operator()(uint8_t* p) const {
  if (mapped_bytes) ::munmap(p, mapped_bytes);
  else std::free(p);
}

const char* request_state_name(TcpRequest::State s) {
  switch (s) {
    case TcpRequest::State::Free: return "Free";
    case TcpRequest::State::ReceivingCapsule: return "ReceivingCapsule";
    case TcpRequest::State::Queued: return "Queued";
    case TcpRequest::State::NeedBuffer: return "NeedBuffer";
    case TcpRequest::State::AwaitingH2C: return "AwaitingH2C";
    case TcpRequest::State::Executing: return "Executing";
    case TcpRequest::State::Sending: return "Sending";
    case TcpRequest::State::kCount: break;
  }
  return "?";
}

RequestPool::RequestPool(QueueMemory& memory, TcpQueue* owner, void (*on_sent)(reactor::SendDone*))
    : memory_(memory), owner_(owner), on_sent_(on_sent) {}

// The buffers free themselves; QueueMemory gives their bytes back to the budgets in one go.
RequestPool::~RequestPool() = default;

void RequestPool::resize(uint32_t depth) {
  while (slots_.size() < depth) {
    auto r = std::make_unique<TcpRequest>();
    r->index = uint16_t(slots_.size());
    r->owner = owner_;
    r->sent.req = r.get();
    r->sent.fn = on_sent_;
    free_.push_back(r.get());
    ++counts_[size_t(TcpRequest::State::Free)];
    slots_.push_back(std::move(r));
  }
  // release() must never allocate: the free list can hold every request.
  free_.reserve(slots_.size());
}

void RequestPool::set_state(TcpRequest* r, TcpRequest::State to) {
  if (kCheckTransitions && !kRequestTransitions.allows(r->state_, to))
    illegal_transition("request", request_state_name(r->state_), request_state_name(to), "RequestPool::set_state",
                       long(r->index));
  --counts_[size_t(r->state_)];
  ++counts_[size_t(to)];
  ++entries_[size_t(to)];
  r->state_ = to;
}

TcpRequest* RequestPool::alloc() {
  if (free_.empty()) return nullptr;
  TcpRequest* r = free_.back();
  free_.pop_back();
  set_state(r, TcpRequest::State::ReceivingCapsule);
  return r;
}

void RequestPool::release(TcpRequest* r, bool free_buffer_now) {
  set_state(r, TcpRequest::State::Free);
  if (free_buffer_now && r->buf_cap) free_buffer(r);
  const TargetConfig& cfg = memory_.config();
  const uint64_t budget = cfg.max_buffer_memory;
  if (r->buf_cap && budget && memory_.usage().buffer_bytes.load(std::memory_order_relaxed) > budget / 2)
    free_buffer(r);
  free_.push_back(r);
}

RequestPool::BufferResult RequestPool::ensure_buffer(TcpRequest* r, uint32_t len, bool io_queue) {
  if (len <= r->buf_cap) return BufferResult::Ok;
  const TargetConfig& cfg = memory_.config();
  const uint64_t cap = (uint64_t(len) + 4095) & ~uint64_t(4095);
  const uint64_t grow = cap - r->buf_cap;
  // I/O queues leave part of the target's budget to admin queues and to connections not yet
  // past Connect, so that data commands, however many, never lock a host out of connecting.
  const uint64_t global_cap =
      io_queue && cfg.max_buffer_memory ? cfg.max_buffer_memory - admin_buffer_reserve(cfg) : cfg.max_buffer_memory;
  // Short of memory: first give back what this pool's idle requests still hold.
  if (!memory_.reserve_buffer(grow, global_cap) &&
      (reclaim_idle_buffers() == 0 || !memory_.reserve_buffer(grow, global_cap)))
    return BufferResult::Wait;
  void* p = nullptr;
  // 4 KiB alignment lets file namespaces use O_DIRECT straight from this buffer (a mapping is
  // page-aligned).
  const bool mapped = cap >= kMappedBufferBytes;
  if (mapped) {
    p = ::mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) p = nullptr;
  } else if (posix_memalign(&p, 4096, cap) != 0) {
    p = nullptr;
  }
  if (!p) {
    memory_.release_buffer(grow);
    return BufferResult::Fail;
  }
  // The old buffer goes with its own deleter; the new one brings its own.
  r->buffer = std::unique_ptr<uint8_t, RequestBufferFree>(static_cast<uint8_t*>(p),
                                                          RequestBufferFree{mapped ? size_t(cap) : 0});
  r->buf = r->buffer.get();
  r->buf_cap = uint32_t(cap);
  return BufferResult::Ok;
}

void RequestPool::free_buffer(TcpRequest* r) {
  if (!r->buf_cap) return;
  memory_.release_buffer(r->buf_cap);
  r->buffer.reset();
  r->buf = nullptr;
  r->buf_cap = 0;
}

uint64_t RequestPool::reclaim_idle_buffers() {
  uint64_t freed = 0;
  for (TcpRequest* r : free_) {
    freed += r->buf_cap;
    free_buffer(r);
  }
  return freed;
}

}  // namespace nvtcp::target

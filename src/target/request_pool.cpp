// SPDX-License-Identifier: Apache-2.0
#include "target/request_pool.hpp"

#include "util/state_machine.hpp"

namespace nvtcp::target {

const char* request_state_name(Request::State s) {
  switch (s) {
    case Request::State::Free: return "Free";
    case Request::State::ReceivingCapsule: return "ReceivingCapsule";
    case Request::State::Queued: return "Queued";
    case Request::State::NeedBuffer: return "NeedBuffer";
    case Request::State::AwaitingH2C: return "AwaitingH2C";
    case Request::State::Executing: return "Executing";
    case Request::State::AwaitingFusedPartner: return "AwaitingFusedPartner";
    case Request::State::AwaitingFence: return "AwaitingFence";
    case Request::State::InDevice: return "InDevice";
    case Request::State::OnWorker: return "OnWorker";
    case Request::State::BetweenSteps: return "BetweenSteps";
    case Request::State::AwaitingDurable: return "AwaitingDurable";
    case Request::State::HeldAer: return "HeldAer";
    case Request::State::HeldAbort: return "HeldAbort";
    case Request::State::Sending: return "Sending";
    case Request::State::kCount: break;
  }
  return "?";
}

RequestPool::RequestPool(const TargetConfig& cfg, ResourceUsage& usage, TcpQueue* owner,
                         void (*on_sent)(reactor::SendDone*))
    : cfg_(cfg), usage_(usage), owner_(owner), on_sent_(on_sent) {}

RequestPool::~RequestPool() { release_budgets(host_, buffer_bytes_ + pool_bytes_); }

void RequestPool::resize(uint32_t depth) {
  while (slots_.size() < depth) {
    auto r = std::make_unique<Request>();
    r->index = uint16_t(slots_.size());
    r->queue = owner_;
    r->sent.req = r.get();
    r->sent.fn = on_sent_;
    free_.push_back(r.get());
    ++counts_[size_t(Request::State::Free)];
    slots_.push_back(std::move(r));
  }
  // release() must never allocate: the free list can hold every request.
  free_.reserve(slots_.size());
}

void RequestPool::set_state(Request* r, Request::State to) {
  if (kCheckTransitions && !kRequestTransitions.allows(r->state_, to))
    illegal_transition("request", request_state_name(r->state_), request_state_name(to), "RequestPool::set_state",
                       long(r->index));
  --counts_[size_t(r->state_)];
  ++counts_[size_t(to)];
  ++entries_[size_t(to)];
  r->state_ = to;
}

Request* RequestPool::alloc() {
  if (free_.empty()) return nullptr;
  Request* r = free_.back();
  free_.pop_back();
  set_state(r, Request::State::ReceivingCapsule);
  return r;
}

void RequestPool::release(Request* r, bool free_buffer_now) {
  set_state(r, Request::State::Free);
  if (free_buffer_now && r->buf_cap) free_buffer(r);
  const uint64_t budget = cfg_.max_buffer_memory;
  if (r->buf_cap && budget && usage_.buffer_bytes.load(std::memory_order_relaxed) > budget / 2) free_buffer(r);
  free_.push_back(r);
}

RequestPool::BufferResult RequestPool::ensure_buffer(Request* r, uint32_t len, bool io_queue) {
  if (len <= r->buf_cap) return BufferResult::Ok;
  const uint64_t cap = (uint64_t(len) + 4095) & ~uint64_t(4095);
  const uint64_t grow = cap - r->buf_cap;
  // I/O queues leave part of the target's budget to admin queues and to connections not yet
  // past Connect, so that data commands, however many, never lock a host out of connecting.
  const uint64_t global_cap = io_queue && cfg_.max_buffer_memory
                                  ? cfg_.max_buffer_memory - admin_buffer_reserve(cfg_)
                                  : cfg_.max_buffer_memory;
  auto reserve = [&] {
    if (cfg_.max_connection_buffer_memory && buffer_bytes_ + grow > cfg_.max_connection_buffer_memory) return false;
    return reserve_budgets(host_, grow, global_cap);
  };
  // Short of memory: first give back what this pool's idle requests still hold.
  if (!reserve() && (reclaim_idle_buffers() == 0 || !reserve())) return BufferResult::Wait;
  void* p = nullptr;
  // 4 KiB alignment lets file namespaces use O_DIRECT straight from this buffer.
  if (posix_memalign(&p, 4096, cap) != 0) {
    release_budgets(host_, grow);
    return BufferResult::Fail;
  }
  r->buf.reset(static_cast<uint8_t*>(p));
  r->buf_cap = uint32_t(cap);
  buffer_bytes_ += grow;
  return BufferResult::Ok;
}

bool RequestPool::reserve_budgets(HostBudget* host, uint64_t n, uint64_t global_cap) {
  if (host && !host->reserve(n, cfg_.max_host_buffer_memory)) return false;
  if (usage_.reserve_buffer(n, global_cap)) return true;
  if (host) host->release(n);
  return false;
}

void RequestPool::release_budgets(HostBudget* host, uint64_t n) {
  if (n == 0) return;
  usage_.release_buffer(n);
  if (host) host->release(n);
}

void RequestPool::attach_host(HostBudget* host, uint64_t pool_bytes) {
  host_ = host;
  host_->bytes.fetch_add(buffer_bytes_, std::memory_order_relaxed);
  pool_bytes_ = pool_bytes;
}

void RequestPool::free_buffer(Request* r) {
  if (!r->buf_cap) return;
  buffer_bytes_ -= r->buf_cap;
  release_budgets(host_, r->buf_cap);
  r->buf.reset();
  r->buf_cap = 0;
}

uint64_t RequestPool::reclaim_idle_buffers() {
  uint64_t freed = 0;
  for (Request* r : free_) {
    freed += r->buf_cap;
    free_buffer(r);
  }
  return freed;
}

}  // namespace nvtcp::target

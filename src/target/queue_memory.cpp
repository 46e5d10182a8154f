// SPDX-License-Identifier: Apache-2.0
#include "target/queue_memory.hpp"

namespace nvtcp::target {

bool QueueMemory::reserve_buffer(uint64_t grow, uint64_t global_cap) {
  if (cfg_.max_connection_buffer_memory && buffer_bytes_ + grow > cfg_.max_connection_buffer_memory) return false;
  if (!reserve_budgets(host_, grow, global_cap)) return false;
  buffer_bytes_ += grow;
  return true;
}

void QueueMemory::release_buffer(uint64_t n) {
  buffer_bytes_ -= n;
  release_budgets(host_, n);
}

bool QueueMemory::reserve_budgets(HostBudget* host, uint64_t n, uint64_t global_cap) {
  if (host && !host->reserve(n, cfg_.max_host_buffer_memory)) return false;
  if (usage_.reserve_buffer(n, global_cap)) return true;
  if (host) host->release(n);
  return false;
}

void QueueMemory::release_budgets(HostBudget* host, uint64_t n) {
  if (n == 0) return;
  usage_.release_buffer(n);
  if (host) host->release(n);
}

void QueueMemory::attach_host(HostBudget* host, uint64_t pool_bytes) {
  host_ = host;
  host_->bytes.fetch_add(buffer_bytes_, std::memory_order_relaxed);
  pool_bytes_ = pool_bytes;
}

}  // namespace nvtcp::target

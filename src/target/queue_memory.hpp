// SPDX-License-Identifier: Apache-2.0
// The memory one queue holds (its request pool and its requests' data buffers) and the budgets
// it counts against: per connection, per host (from Connect on, or once the queue has
// authenticated) and for the whole target. The transport allocates the memory; the command
// layer decides whose budget it counts in, at Connect and when a queue authenticates.
//
// Single-threaded: a queue's memory belongs to its reactor; only the shared budgets are atomic.
#pragma once
#include <cstdint>

#include "target/config.hpp"
#include "target/target_state.hpp"

namespace nvtcp::target {

class QueueMemory {
 public:
  // entry_bytes: what one request of the transport's pool takes.
  QueueMemory(const TargetConfig& cfg, ResourceUsage& usage, uint64_t entry_bytes)
      : cfg_(cfg), usage_(usage), entry_bytes_(entry_bytes) {}
  // Gives every byte the queue holds (buffers and the pool) back to the budgets.
  ~QueueMemory() { release_budgets(host_, buffer_bytes_ + pool_bytes_); }
  QueueMemory(const QueueMemory&) = delete;
  QueueMemory& operator=(const QueueMemory&) = delete;

  // grow more bytes of data buffer: within the connection's cap, the host's budget and the
  // target's (up to global_cap). False: none taken.
  bool reserve_buffer(uint64_t grow, uint64_t global_cap);
  void release_buffer(uint64_t n);
  // Takes n bytes from the host's budget (before Connect there is none) and the target's
  // (up to global_cap), or from neither.
  bool reserve_budgets(HostBudget* host, uint64_t n, uint64_t global_cap);
  void release_budgets(HostBudget* host, uint64_t n);
  // Connect: from now on this queue's memory counts against host, pool_bytes included (already
  // reserved by the caller); what its buffers took before Connect moves to the host too.
  void attach_host(HostBudget* host, uint64_t pool_bytes);
  // The queue's host changed (it authenticated): the caller has moved what the queue holds
  // (pool_bytes() + buffer_bytes()) from the old budget to host's.
  void rebind_host(HostBudget* host) { host_ = host; }

  // The request pool of a queue of this many entries.
  uint64_t pool_bytes_for(uint32_t entries) const { return entries * entry_bytes_; }
  uint64_t buffer_bytes() const { return buffer_bytes_; }  // its requests' data buffers
  uint64_t pool_bytes() const { return pool_bytes_; }
  const TargetConfig& config() const { return cfg_; }
  ResourceUsage& usage() const { return usage_; }

 private:
  const TargetConfig& cfg_;
  ResourceUsage& usage_;
  uint64_t entry_bytes_;
  HostBudget* host_ = nullptr;
  uint64_t buffer_bytes_ = 0;
  uint64_t pool_bytes_ = 0;
};

}  // namespace nvtcp::target

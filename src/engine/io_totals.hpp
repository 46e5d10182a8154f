// SPDX-License-Identifier: Apache-2.0
// Reads or writes the engine carried, with their bytes, errors and latency buckets: what an
// IoForwarder counts on its core, and what the engine adds up per remote subsystem for the
// metrics endpoint. Latency is from the engine core's turn that took the command from the
// application's SQ to the turn the remote controller's answer came in (time the answer then
// waits for room in the application's CQ is the application's, not counted): the core's clock
// of the turn, no clock read per command, a resolution of one turn.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>

#include "util/latency_buckets.hpp"

namespace nvtcp::engine {

struct IoTotals {
  // As the target's namespace figures: commands, bytes and latency of the successful ones.
  uint64_t commands = 0;
  uint64_t bytes = 0;
  uint64_t errors = 0;      // answered with an error status (path errors included)
  uint64_t latency_ns = 0;  // sum
  std::array<uint64_t, kLatencyBuckets> latency{};  // per bucket, not cumulative

  void count(uint64_t len, bool ok, uint64_t ns) {
    if (!ok) {
      ++errors;
      return;
    }
    ++commands;
    bytes += len;
    latency_ns += ns;
    ++latency[latency_bucket(ns)];
  }
  IoTotals& operator+=(const IoTotals& o) {
    commands += o.commands;
    bytes += o.bytes;
    errors += o.errors;
    latency_ns += o.latency_ns;
    for (size_t i = 0; i < latency.size(); ++i) latency[i] += o.latency[i];
    return *this;
  }
};

// IoTotals as one core publishes them for other threads: written by that core only (relaxed
// stores), read field by field (each exact; a command may show in one field before another).
class PublishedIoTotals {
 public:
  void store(const IoTotals& t) {
    commands_.store(t.commands, std::memory_order_relaxed);
    bytes_.store(t.bytes, std::memory_order_relaxed);
    errors_.store(t.errors, std::memory_order_relaxed);
    latency_ns_.store(t.latency_ns, std::memory_order_relaxed);
    for (size_t i = 0; i < latency_.size(); ++i) latency_[i].store(t.latency[i], std::memory_order_relaxed);
  }
  IoTotals load() const {
    IoTotals t;
    t.commands = commands_.load(std::memory_order_relaxed);
    t.bytes = bytes_.load(std::memory_order_relaxed);
    t.errors = errors_.load(std::memory_order_relaxed);
    t.latency_ns = latency_ns_.load(std::memory_order_relaxed);
    for (size_t i = 0; i < latency_.size(); ++i) t.latency[i] = latency_[i].load(std::memory_order_relaxed);
    return t;
  }

 private:
  std::atomic<uint64_t> commands_{0}, bytes_{0}, errors_{0}, latency_ns_{0};
  std::array<std::atomic<uint64_t>, kLatencyBuckets> latency_{};
};

}  // namespace nvtcp::engine

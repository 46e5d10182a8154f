// SPDX-License-Identifier: Apache-2.0
// What the I/O of one namespace, or of one subsystem through one listener, has done since it was
// made, for the metrics endpoint: reads and writes, their bytes, failed commands, and read and
// write latency as histogram buckets. Counted when a response has left
// (CommandQueue::response_sent), one slot per reactor, each written by its reactor only with a
// relaxed load and store (no locked instruction, no shared cache line: the QueueStats pattern)
// and read by the metrics thread, which adds the slots up. Latency is from the turn
// the capsule arrived in to the turn the stream let go of its response, both read from the
// reactor's clock of the turn (Clock::turn_ns): no clock read per command, and a resolution of
// one loop turn.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <memory>

#include "util/latency_buckets.hpp"

namespace nvtcp::target {

using nvtcp::kLatencyBoundsNs;
using nvtcp::kLatencyBuckets;
using nvtcp::latency_bucket;

namespace detail {
inline void bump(std::atomic<uint64_t>& c, uint64_t by = 1) {
  c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}
}  // namespace detail

// The shortest and longest latency of one kind of command (bdev_get_iostat's min_ and max_*).
struct LatencyRange {
  uint64_t min_ns = 0, max_ns = 0;  // 0 and 0 until one was counted
  bool counted = false;
};

// Plain totals: a snapshot of one slot, or the sum of them.
struct IoTotals {
  uint64_t reads = 0, writes = 0, read_bytes = 0, write_bytes = 0;
  uint64_t read_errors = 0, write_errors = 0, other_errors = 0;
  std::array<uint64_t, kLatencyBuckets> read_latency{}, write_latency{};  // per bucket, not cumulative
  uint64_t read_latency_ns = 0, write_latency_ns = 0;                     // sums
  // Dataset Management with Deallocate, and Copy: commands, bytes (deallocated; written at the
  // destination) and the sum of their latencies.
  uint64_t unmaps = 0, unmap_bytes = 0, unmap_latency_ns = 0;
  uint64_t copies = 0, copy_bytes = 0, copy_latency_ns = 0;
  LatencyRange read_range, write_range, unmap_range, copy_range;
};

// The plain counters of IoTotals, and of IoMetrics' slots in the same order: what a sum adds.
inline constexpr uint64_t IoTotals::*kTotalsCounters[] = {
    &IoTotals::reads,           &IoTotals::writes,           &IoTotals::read_bytes,      &IoTotals::write_bytes,
    &IoTotals::read_errors,     &IoTotals::write_errors,     &IoTotals::other_errors,    &IoTotals::read_latency_ns,
    &IoTotals::write_latency_ns, &IoTotals::unmaps,          &IoTotals::unmap_bytes,     &IoTotals::unmap_latency_ns,
    &IoTotals::copies,          &IoTotals::copy_bytes,       &IoTotals::copy_latency_ns};

// The shortest and longest of both.
inline void merge_range(LatencyRange& r, const LatencyRange& m) {
  if (!m.counted) return;
  r.min_ns = r.counted ? std::min(r.min_ns, m.min_ns) : m.min_ns;
  r.max_ns = r.counted ? std::max(r.max_ns, m.max_ns) : m.max_ns;
  r.counted = true;
}

// Adds what `more` counted to `to` (the counts of a bdev's past namespaces and its present one).
inline void add_totals(IoTotals& to, const IoTotals& more) {
  for (auto c : kTotalsCounters) to.*c += more.*c;
  for (size_t b = 0; b < kLatencyBuckets; ++b) {
    to.read_latency[b] += more.read_latency[b];
    to.write_latency[b] += more.write_latency[b];
  }
  merge_range(to.read_range, more.read_range);
  merge_range(to.write_range, more.write_range);
  merge_range(to.unmap_range, more.unmap_range);
  merge_range(to.copy_range, more.copy_range);
}

class IoMetrics {
 public:
  void init(uint32_t reactors) {
    slots_ = std::make_unique<Slot[]>(reactors);
    nslots_ = reactors;
  }
  // On reactor `slot`, as a command it counts completes; bucket is latency_bucket(latency_ns),
  // worked out once by a caller that counts one command in several places.
  void read_done(uint32_t slot, uint64_t bytes, uint64_t latency_ns, size_t bucket) {
    Slot& s = slots_[slot];
    detail::bump(s.reads);
    detail::bump(s.read_bytes, bytes);
    detail::bump(s.read_latency[bucket]);
    detail::bump(s.read_latency_ns, latency_ns);
    s.read_range.count(latency_ns);
  }
  void write_done(uint32_t slot, uint64_t bytes, uint64_t latency_ns, size_t bucket) {
    Slot& s = slots_[slot];
    detail::bump(s.writes);
    detail::bump(s.write_bytes, bytes);
    detail::bump(s.write_latency[bucket]);
    detail::bump(s.write_latency_ns, latency_ns);
    s.write_range.count(latency_ns);
  }
  void read_done(uint32_t slot, uint64_t bytes, uint64_t latency_ns) {
    read_done(slot, bytes, latency_ns, latency_bucket(latency_ns));
  }
  void write_done(uint32_t slot, uint64_t bytes, uint64_t latency_ns) {
    write_done(slot, bytes, latency_ns, latency_bucket(latency_ns));
  }
  void unmap_done(uint32_t slot, uint64_t bytes, uint64_t latency_ns) {
    Slot& s = slots_[slot];
    detail::bump(s.unmaps);
    detail::bump(s.unmap_bytes, bytes);
    detail::bump(s.unmap_latency_ns, latency_ns);
    s.unmap_range.count(latency_ns);
  }
  void copy_done(uint32_t slot, uint64_t bytes, uint64_t latency_ns) {
    Slot& s = slots_[slot];
    detail::bump(s.copies);
    detail::bump(s.copy_bytes, bytes);
    detail::bump(s.copy_latency_ns, latency_ns);
    s.copy_range.count(latency_ns);
  }
  void read_failed(uint32_t slot) { detail::bump(slots_[slot].read_errors); }
  void write_failed(uint32_t slot) { detail::bump(slots_[slot].write_errors); }
  void other_failed(uint32_t slot) { detail::bump(slots_[slot].other_errors); }

  // Any thread: every slot added up (each counter is exact; counters of one command may be
  // seen in one before another while it completes).
  IoTotals totals() const {
    IoTotals t;
    for (uint32_t i = 0; i < nslots_; ++i) add_totals(t, snapshot(slots_[i]));
    return t;
  }

 private:
  // The shortest and longest latency a slot counted: a load and, rarely, a store each (its
  // reactor the only writer, as for the counters).
  struct SlotRange {
    std::atomic<uint64_t> min_ns{UINT64_MAX}, max_ns{0};
    void count(uint64_t ns) {
      if (ns < min_ns.load(std::memory_order_relaxed)) min_ns.store(ns, std::memory_order_relaxed);
      if (ns > max_ns.load(std::memory_order_relaxed)) max_ns.store(ns, std::memory_order_relaxed);
    }
    LatencyRange get() const {
      const uint64_t lo = min_ns.load(std::memory_order_relaxed), hi = max_ns.load(std::memory_order_relaxed);
      if (lo == UINT64_MAX) return {};  // none counted
      return {lo, hi, true};
    }
  };
  struct alignas(64) Slot {
    std::atomic<uint64_t> reads{0}, writes{0}, read_bytes{0}, write_bytes{0};
    std::atomic<uint64_t> read_errors{0}, write_errors{0}, other_errors{0};
    std::atomic<uint64_t> read_latency_ns{0}, write_latency_ns{0};
    std::array<std::atomic<uint64_t>, kLatencyBuckets> read_latency{}, write_latency{};
    std::atomic<uint64_t> unmaps{0}, unmap_bytes{0}, unmap_latency_ns{0};
    std::atomic<uint64_t> copies{0}, copy_bytes{0}, copy_latency_ns{0};
    SlotRange read_range, write_range, unmap_range, copy_range;
  };
  // The slots' counters, in kTotalsCounters' order.
  static constexpr std::atomic<uint64_t> Slot::*kSlotCounters[] = {
      &Slot::reads,           &Slot::writes,           &Slot::read_bytes,      &Slot::write_bytes,
      &Slot::read_errors,     &Slot::write_errors,     &Slot::other_errors,    &Slot::read_latency_ns,
      &Slot::write_latency_ns, &Slot::unmaps,          &Slot::unmap_bytes,     &Slot::unmap_latency_ns,
      &Slot::copies,          &Slot::copy_bytes,       &Slot::copy_latency_ns};
  static_assert(std::size(kSlotCounters) == std::size(kTotalsCounters));
  // One slot's counters as they are now.
  static IoTotals snapshot(const Slot& s) {
    auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
    IoTotals t;
    for (size_t i = 0; i < std::size(kSlotCounters); ++i) t.*kTotalsCounters[i] = get(s.*kSlotCounters[i]);
    for (size_t b = 0; b < kLatencyBuckets; ++b) {
      t.read_latency[b] = get(s.read_latency[b]);
      t.write_latency[b] = get(s.write_latency[b]);
    }
    t.read_range = s.read_range.get();
    t.write_range = s.write_range.get();
    t.unmap_range = s.unmap_range.get();
    t.copy_range = s.copy_range.get();
    return t;
  }
  std::unique_ptr<Slot[]> slots_;
  uint32_t nslots_ = 0;
};

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
// Rate limits of one namespace (SPDK's bdev_set_qos_limit): I/O per second, and MiB per second of
// reads and writes together, of reads, of writes. SPDK's scheme: time runs in 1 ms slices, each
// with a budget of 1/1000 of every limit; an operation goes while every budget it draws on has
// something left, and takes its whole cost from each (so one may overdraw: the debt is paid from
// the next slice's budget); the rest wait for the next slice. SPDK sends all of a limited bdev's
// I/O through one thread; here every reactor draws on the same budgets with atomic operations,
// and the reactor that first sees a slice end starts the next one. A budget another reactor draws
// on while it is refilled may lose that draw: the limit is kept to within a few operations per
// slice, not exactly. With no limit set an operation costs one relaxed load.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

#include "target/config.hpp"

namespace nvtcp::target {

class QosLimiter {
 public:
  static constexpr uint64_t kSliceNs = 1'000'000;  // SPDK's timeslice (1 ms)

  // Control path. Budgets start afresh with the next slice.
  void set(const QosLimits& l) {
    const std::array<uint64_t, kBudgets> per_sec = {l.rw_ios_per_sec, l.rw_mbytes_per_sec << 20,
                                                     l.r_mbytes_per_sec << 20, l.w_mbytes_per_sec << 20};
    for (size_t k = 0; k < kBudgets; ++k) {
      // At least one operation (or byte) a slice, so that a limit below 1000 a second still moves.
      per_slice_[k].store(per_sec[k] ? std::max<uint64_t>(1, per_sec[k] / 1000) : 0, std::memory_order_relaxed);
      left_[k].store(int64_t(per_slice_[k].load(std::memory_order_relaxed)), std::memory_order_relaxed);
    }
    slice_end_.store(0, std::memory_order_relaxed);
    enabled_.store(l.any(), std::memory_order_release);
  }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // What one command's device work draws: I/Os, and bytes the device reads and writes. A
  // budget is drawn on only by a cost that has some of it (a Write Zeroes, 0 bytes, counts as an
  // I/O only).
  struct Cost {
    uint32_t ios = 0;
    uint64_t read_bytes = 0, write_bytes = 0;
  };

  // Reactor: whether an operation of `bytes` may go at now_ns; when it may, its cost is taken.
  bool admit(bool read, uint64_t bytes, uint64_t now_ns) {
    return admit(Cost{1, read ? bytes : 0, read ? 0 : bytes}, now_ns);
  }
  bool admit(const Cost& c, uint64_t now_ns) {
    if (!enabled()) return true;
    uint64_t end = slice_end_.load(std::memory_order_acquire);
    if (now_ns >= end) {
      // Slices keep to their grid: the waiters' timer fires a little after a slice ends, and a
      // slice begun then would end that much later each time (3 % of the limit lost, measured
      // by bench/qos-accuracy). After a slice or more with nothing to admit, a new grid starts.
      const uint64_t next = end + kSliceNs > now_ns ? end + kSliceNs : now_ns + kSliceNs;
      if (slice_end_.compare_exchange_strong(end, next, std::memory_order_acq_rel)) refill();
    }
    const uint64_t bytes = c.read_bytes + c.write_bytes;
    const std::array<bool, kBudgets> draws = {c.ios != 0, bytes != 0, c.read_bytes != 0, c.write_bytes != 0};
    const std::array<int64_t, kBudgets> cost = {int64_t(c.ios), int64_t(bytes), int64_t(c.read_bytes),
                                                int64_t(c.write_bytes)};
    for (size_t k = 0; k < kBudgets; ++k)
      if (draws[k] && per_slice_[k].load(std::memory_order_relaxed) && left_[k].load(std::memory_order_relaxed) <= 0)
        return false;
    for (size_t k = 0; k < kBudgets; ++k)
      if (draws[k] && per_slice_[k].load(std::memory_order_relaxed))
        left_[k].fetch_sub(cost[k], std::memory_order_relaxed);
    return true;
  }

 private:
  static constexpr size_t kBudgets = 4;  // I/Os, read+write bytes, read bytes, write bytes
  void refill() {
    for (size_t k = 0; k < kBudgets; ++k) {
      const int64_t debt = std::min<int64_t>(0, left_[k].load(std::memory_order_relaxed));
      left_[k].store(int64_t(per_slice_[k].load(std::memory_order_relaxed)) + debt, std::memory_order_relaxed);
    }
  }

  std::atomic<bool> enabled_{false};
  std::array<std::atomic<uint64_t>, kBudgets> per_slice_{};  // 0: no limit of that kind
  std::array<std::atomic<int64_t>, kBudgets> left_{};
  std::atomic<uint64_t> slice_end_{0};
};

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
// Log-bucketed latency histogram: 32 linear sub-buckets per power of two of nanoseconds
// (~3% resolution), fixed size, no allocation when recording.
#pragma once
#include <array>
#include <cstdint>

namespace nvtcp {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 5;
  static constexpr int kSub = 1 << kSubBits;
  static constexpr int kBuckets = 64 * kSub;

  void record(uint64_t ns) {
    ++counts_[index(ns)];
    ++n_;
    sum_ += ns;
    if (ns < min_) min_ = ns;
    if (ns > max_) max_ = ns;
  }
  void merge(const LatencyHistogram& o) {
    for (int i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
    n_ += o.n_;
    sum_ += o.sum_;
    if (o.min_ < min_) min_ = o.min_;
    if (o.max_ > max_) max_ = o.max_;
  }
  uint64_t count() const { return n_; }
  double mean_ns() const { return n_ ? double(sum_) / double(n_) : 0; }
  uint64_t min_ns() const { return n_ ? min_ : 0; }
  uint64_t max_ns() const { return max_; }
  // The value below which a fraction q of samples fall (bucket midpoint).
  double percentile_ns(double q) const {
    if (!n_) return 0;
    uint64_t target = uint64_t(q * double(n_));
    if (target >= n_) target = n_ - 1;
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen > target) return midpoint(i);
    }
    return double(max_);
  }

  static int index(uint64_t v) {
    if (v < kSub) return int(v);
    int msb = 63 - __builtin_clzll(v);
    int shift = msb - kSubBits;
    return (shift + 1) * kSub + int((v >> shift) & (kSub - 1));
  }
  static double midpoint(int i) {
    if (i < kSub) return i;
    int shift = i / kSub - 1;
    uint64_t base = (uint64_t(kSub) + uint64_t(i % kSub)) << shift;
    return double(base) + double((1ull << shift)) / 2.0;
  }

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t n_ = 0, sum_ = 0, min_ = ~0ull, max_ = 0;
};

}  // namespace nvtcp

// SPDX-License-Identifier: Apache-2.0
// The latency buckets every nvtcp histogram uses (the target's namespaces, the offload engine's
// remotes), so one dashboard query reads both: 10 us to 10 s, 1-2.5-5 per decade, and +Inf.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace nvtcp {

// Upper bounds in nanoseconds; the last bucket, above every bound, is +Inf.
inline constexpr std::array<uint64_t, 19> kLatencyBoundsNs = {
    10'000,      25'000,      50'000,      100'000,       250'000,       500'000,      1'000'000,
    2'500'000,   5'000'000,   10'000'000,  25'000'000,    50'000'000,    100'000'000,  250'000'000,
    500'000'000, 1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};
inline constexpr size_t kLatencyBuckets = kLatencyBoundsNs.size() + 1;

// The bucket a latency falls in: the first bound at or above it (Prometheus' le), else the last.
inline size_t latency_bucket(uint64_t ns) {
  size_t i = 0;
  while (i < kLatencyBoundsNs.size() && ns > kLatencyBoundsNs[i]) ++i;
  return i;
}

// The bounds in seconds, as a Prometheus histogram's le labels give them.
inline std::array<double, kLatencyBoundsNs.size()> latency_bounds_seconds() {
  std::array<double, kLatencyBoundsNs.size()> b{};
  for (size_t i = 0; i < b.size(); ++i) b[i] = double(kLatencyBoundsNs[i]) / 1e9;
  return b;
}

}  // namespace nvtcp

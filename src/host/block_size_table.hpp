// SPDX-License-Identifier: Apache-2.0
// The block size of each namespace, for the data path: QueuePair::read()/write() count in
// blocks and look one up per command on the application's threads, while the controller's
// admin thread may publish a rescan at any time (a namespace notice, a reconnect).
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

namespace nvtcp::host::detail {

// A seqlock over one-word entries (NSID in the low half, block size in the high half), as in
// Boehm's "Can seqlocks get along with programming language memory models?": a reader takes
// no lock and allocates nothing; it only looks again if a publish overlapped its read. Every
// entry is an atomic, so there is no data race for the sanitizers to report. The entries are
// stored with release and loaded with acquire (plain moves on x86) instead of fences, which
// ThreadSanitizer does not model: a reader that sees a new entry then sees the odd sequence.
class BlockSizeTable {
 public:
  // NSIDs beyond this many are left out (their read()/write() answer -EINVAL; submit() still
  // works). 8 KiB per controller; the targets we know of have a few namespaces.
  static constexpr uint32_t kCapacity = 1024;

  // 0 if the namespace is not known.
  uint32_t find(uint32_t nsid) const {
    for (;;) {
      const uint32_t before = seq_.load(std::memory_order_acquire);
      if (before & 1) {  // a publish is under way: at most kCapacity stores, never a wait
        __builtin_ia32_pause();
        continue;
      }
      uint32_t found = 0;
      const uint32_t n = count_.load(std::memory_order_acquire);
      for (uint32_t i = 0; i < n && i < kCapacity; ++i) {
        const uint64_t e = entries_[i].load(std::memory_order_acquire);
        if (uint32_t(e) == nsid) {
          found = uint32_t(e >> 32);
          break;
        }
      }
      if (seq_.load(std::memory_order_relaxed) == before) return found;
    }
  }

  // One writer at a time (the admin thread; the engine client once at attach). Returns
  // false when some namespaces did not fit.
  bool publish(const std::vector<std::pair<uint32_t, uint32_t>>& sizes) {
    const uint32_t s = seq_.load(std::memory_order_relaxed);
    seq_.store(s + 1, std::memory_order_relaxed);
    const uint32_t n = uint32_t(std::min<size_t>(sizes.size(), kCapacity));
    for (uint32_t i = 0; i < n; ++i)
      entries_[i].store(uint64_t(sizes[i].first) | uint64_t(sizes[i].second) << 32, std::memory_order_release);
    count_.store(n, std::memory_order_release);
    seq_.store(s + 2, std::memory_order_release);
    return n == sizes.size();
  }

 private:
  std::atomic<uint32_t> seq_{0};  // odd while a publish is under way
  std::atomic<uint32_t> count_{0};
  std::array<std::atomic<uint64_t>, kCapacity> entries_{};
};

}  // namespace nvtcp::host::detail

// SPDX-License-Identifier: Apache-2.0
// The Changed Namespace List (log page 04h) a controller keeps for its host: every NSID whose
// attributes changed since the host last read the log with RAE cleared, in the order they
// changed, each once. Past kChangedNamespacesMax entries the log says "more than it can list"
// (FFFFFFFFh in the first entry), and the host rescans every namespace. The target's
// controllers and the offload engine's application controllers both keep one.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "nvtcp/log_pages.hpp"
#include "nvtcp/sqe.hpp"

namespace nvtcp::wire {

class ChangedNamespaceList {
 public:
  static constexpr uint32_t kLogBytes = nvme::kChangedNamespacesMax * 4;

  void add(uint32_t nsid) {
    if (overflow_ || std::find(ids_.begin(), ids_.end(), nsid) != ids_.end()) return;
    if (ids_.size() < nvme::kChangedNamespacesMax) ids_.push_back(nsid);
    else overflow_ = true;
  }
  // The log page as the host reads it: kLogBytes, zero past the last entry.
  void build(std::vector<uint8_t>& out) const {
    out.assign(kLogBytes, 0);
    if (overflow_) {
      const uint32_t all = nvme::kNsidAll;
      std::memcpy(out.data(), &all, 4);
    } else if (!ids_.empty()) {
      std::memcpy(out.data(), ids_.data(), ids_.size() * 4);
    }
  }
  // A read with RAE cleared: the list starts again.
  void clear() {
    ids_.clear();
    overflow_ = false;
  }
  bool empty() const { return ids_.empty() && !overflow_; }
  bool overflowed() const { return overflow_; }

 private:
  std::vector<uint32_t> ids_;
  bool overflow_ = false;
};

}  // namespace nvtcp::wire

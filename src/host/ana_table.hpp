// SPDX-License-Identifier: Apache-2.0
// The ANA state of each namespace as one controller (one path) reports it in log 0Ch, for the
// data path: a multipath queue pair reads it per I/O on the application's thread while the
// controller's admin thread publishes a new log (at connect, after each reconnect, and on
// every ANA change notice).
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nvtcp/log_pages.hpp"

namespace nvtcp::host::detail {

// One byte per NSID, each its own atomic: a namespace's state is one value with no relation to
// its neighbours', so a reader needs neither a lock nor a sequence. 0 means "not reported":
// a controller without ANA reporting (CMIC bit 3 clear), or a namespace the last log did not
// list; such a path is taken as optimized, as Linux does for a controller without ANA.
class AnaTable {
 public:
  // NSIDs above this share the state of kCapacity (a subsystem with more namespaces than
  // that is beyond anything we serve or know of; log 0Ch would be 4 KiB per 1000 of them).
  static constexpr uint32_t kCapacity = 1024;

  nvme::AnaState state(uint32_t nsid) const {
    const uint8_t s = states_[index(nsid)].load(std::memory_order_acquire);
    return s ? nvme::AnaState(s) : nvme::AnaState::Optimized;
  }
  bool reported(uint32_t nsid) const { return states_[index(nsid)].load(std::memory_order_acquire) != 0; }
  // Moves once per published log; readers compare it to notice a change.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  // Admin thread only. states[nsid] for nsid < states.size() (0: not listed).
  void publish(const std::vector<uint8_t>& states) {
    for (uint32_t n = 0; n <= kCapacity; ++n)
      states_[n].store(n < states.size() ? states[n] : 0, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }

 private:
  static uint32_t index(uint32_t nsid) { return nsid > kCapacity ? kCapacity : nsid; }
  std::array<std::atomic<uint8_t>, kCapacity + 1> states_{};
  std::atomic<uint64_t> generation_{0};
};

// Log 0Ch (read without RGO) as a state per NSID, indexed by NSID up to AnaTable::kCapacity.
// False and why for a log whose descriptors run past its length or name an unknown state.
bool parse_ana_log(const uint8_t* log, size_t len, std::vector<uint8_t>& states, uint32_t& groups,
                   std::string& why);

}  // namespace nvtcp::host::detail

// SPDX-License-Identifier: Apache-2.0
// The multipath decisions that need no connection, kept apart so they are tested on values:
// which path a command takes, which completions move a command to another path.
#pragma once
#include <cstddef>
#include <cstdint>

#include "nvtcp/log_pages.hpp"
#include "nvtcp/multipath.hpp"
#include "nvtcp/status.hpp"

namespace nvtcp::host::detail {

// One path as a command sees it when it is sent.
struct PathCandidate {
  bool usable = false;         // a connected queue, not held back for this namespace
  nvme::AnaState ana = nvme::AnaState::Optimized;
  uint32_t outstanding = 0;    // this queue pair's commands on it
};

// The usable paths of the best state present (optimized, else non-optimized); among those,
// round-robin takes the first after `cursor` and queue-depth the one with the fewest
// outstanding (ties: the first after `cursor`). The choice becomes the cursor. -1: none usable.
inline int choose_path(const PathCandidate* p, size_t n, PathPolicy policy, uint32_t& cursor) {
  const nvme::AnaState tiers[] = {nvme::AnaState::Optimized, nvme::AnaState::NonOptimized};
  for (nvme::AnaState tier : tiers) {
    int best = -1;
    for (size_t k = 1; k <= n; ++k) {
      const size_t i = (cursor + k) % n;  // starting after the cursor gives round-robin its turn
      if (!p[i].usable || p[i].ana != tier) continue;
      if (policy == PathPolicy::RoundRobin) {
        best = int(i);
        break;
      }
      if (best < 0 || p[i].outstanding < p[size_t(best)].outstanding) best = int(i);
    }
    if (best >= 0) {
      cursor = uint32_t(best);
      return best;
    }
  }
  return -1;
}

// A completion that another path may serve: the path-related statuses (SCT 3h), which are the
// ANA states a path answered with (persistent loss, inaccessible, transition) and the host's
// own path errors (the connection was lost; a command the host gave up on after its timeout),
// as Linux's nvme_is_path_error. Everything else is the command's own result.
constexpr bool is_failover_status(nvme::Status s) { return !s.ok() && s.sct() == nvme::Sct::Path; }

// The ANA state an ANA path status says the path is in (Optimized for any other status).
constexpr nvme::AnaState ana_state_of_status(nvme::Status s) {
  if (s == nvme::sc::AnaPersistentLoss) return nvme::AnaState::PersistentLoss;
  if (s == nvme::sc::AnaInaccessible) return nvme::AnaState::Inaccessible;
  if (s == nvme::sc::AnaTransition) return nvme::AnaState::Change;
  return nvme::AnaState::Optimized;
}

}  // namespace nvtcp::host::detail

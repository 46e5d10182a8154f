// SPDX-License-Identifier: Apache-2.0
#include "util/state_machine.hpp"

#include <cstdio>
#include <cstdlib>

namespace nvtcp {

void illegal_transition(const char* machine, const char* from, const char* to, const char* where, long id) {
  if (id >= 0)
    std::fprintf(stderr, "nvtcp: illegal %s transition %s -> %s in %s (id %ld)\n", machine, from, to, where, id);
  else
    std::fprintf(stderr, "nvtcp: illegal %s transition %s -> %s in %s\n", machine, from, to, where);
  std::abort();
}

}  // namespace nvtcp

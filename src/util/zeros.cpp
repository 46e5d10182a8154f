// SPDX-License-Identifier: Apache-2.0
#include "util/zeros.hpp"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>

namespace nvtcp {

namespace {
const uint8_t* map_zero_region() {
  void* p = mmap(nullptr, kZeroBytesLen, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {  // address space for 8 MiB at start-up: nothing useful can run without it
    std::perror("nvtcp: cannot map the zero region");
    std::abort();
  }
  return static_cast<const uint8_t*>(p);
}
}  // namespace

const uint8_t* zero_bytes() {
  static const uint8_t* const region = map_zero_region();
  return region;
}

}  // namespace nvtcp

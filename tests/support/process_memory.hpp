// SPDX-License-Identifier: Apache-2.0
// This process's resident memory, for tests that check what is freed comes back to the system
// (a target and its test clients run in one process, so this is all of them together).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>

namespace nvtcp::test {

inline uint64_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long long size = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%llu %llu", &size, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * uint64_t(sysconf(_SC_PAGESIZE));
}

}  // namespace nvtcp::test

// SPDX-License-Identifier: Apache-2.0
#include "wire/digest.hpp"

#include <isa-l/crc.h>

#include <climits>

namespace nvtcp::wire {

void Crc32c::update(const void* data, size_t len) {
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));  // ISA-L takes a non-const pointer
  while (len > 0) {
    int chunk = len > size_t(INT_MAX) ? INT_MAX : static_cast<int>(len);
    state_ = crc32_iscsi(p, chunk, state_);
    p += chunk;
    len -= static_cast<size_t>(chunk);
  }
}

uint32_t crc32c(const void* data, size_t len) {
  Crc32c c;
  c.update(data, len);
  return c.value();
}

}  // namespace nvtcp::wire

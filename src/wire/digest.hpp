// SPDX-License-Identifier: Apache-2.0
// NVMe/TCP header and data digests: CRC32C (Castagnoli), seed ~0, final XOR ~0.
#pragma once
#include <cstddef>
#include <cstdint>

namespace nvtcp::wire {

// Running CRC32C, so data that arrives in pieces can be digested as it streams in.
class Crc32c {
 public:
  void update(const void* data, size_t len);
  uint32_t value() const { return ~state_; }
  void reset() { state_ = 0xFFFFFFFFu; }

 private:
  uint32_t state_ = 0xFFFFFFFFu;
};

uint32_t crc32c(const void* data, size_t len);

// A PDU header's digest goes right after its hlen bytes (little-endian, as every field).
inline void seal_header_digest(void* pdu, uint32_t hlen) {
  const uint32_t crc = crc32c(pdu, hlen);
  __builtin_memcpy(static_cast<uint8_t*>(pdu) + hlen, &crc, sizeof(crc));
}

// The data digest of len bytes at data, written (4 bytes, little-endian) at out.
inline void put_data_digest(void* out, const void* data, size_t len) {
  const uint32_t crc = crc32c(data, len);
  __builtin_memcpy(out, &crc, sizeof(crc));
}

}  // namespace nvtcp::wire

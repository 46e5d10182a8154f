// One shared, read-only region of zero bytes: what a NULL namespace reads, and the padding of
// a log page beyond what the log holds, sent straight from here instead of from a buffer.
#pragma once
#include <cstddef>
#include <cstdint>

namespace nvtcp {

inline constexpr size_t kZeroBytesLen = 1u << 20;
extern const uint8_t kZeroBytes[kZeroBytesLen];

}  // namespace nvtcp

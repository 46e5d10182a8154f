#include "util/zeros.hpp"

namespace nvtcp {

alignas(4096) const uint8_t kZeroBytes[kZeroBytesLen] = {};

}  // namespace nvtcp

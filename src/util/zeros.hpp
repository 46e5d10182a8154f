// SPDX-License-Identifier: Apache-2.0
// One shared, read-only region of zero bytes: what a NULL namespace reads, and the padding of
// a log page beyond what the log holds, sent straight from here instead of from a buffer.
#pragma once
#include <cstddef>
#include <cstdint>

namespace nvtcp {

// As long as the largest transfer a target may offer (its largest MDTS, 8 MiB), so that a
// NULL namespace serves every read it accepts from here: target/config.cpp checks this.
inline constexpr size_t kZeroBytesLen = 8u << 20;

// Mapped once, read-only and anonymous: its pages are the kernel's shared zero page, so the
// region costs no memory and no space in the binary, and a stray write faults at once.
const uint8_t* zero_bytes();

}  // namespace nvtcp

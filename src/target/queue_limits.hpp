// SPDX-License-Identifier: Apache-2.0
// Limits and helpers that the TCP queue and the command layer share (tcp_queue.cpp and the
// command files); nothing outside the target's queue includes this.
#pragma once
#include <cstdint>

#include "target/controller.hpp"

namespace nvtcp::target {

inline constexpr uint32_t kAdminInCapsule = 8192;          // admin and fabrics commands: at most 8 KiB
inline constexpr uint64_t kControllerPollNs = 100'000'000;  // I/O queues notice a dead controller
// Generic status 21h, Command Interrupted: the controller could not process the command now
// and the host should retry it (sent with DNR clear). Used when in-capsule data arrives and
// there is no buffer memory for it.
inline constexpr wire::Status kCommandInterrupted{wire::Sct::Generic, 0x21};

constexpr uint32_t align_4k(uint32_t n) { return (n + 4095) & ~4095u; }

// The buffer a command needs for data_len bytes from the host: Compare reads the device's
// blocks in after the host's (4 KiB aligned, for O_DIRECT); Copy keeps its range list and
// one source range's data.
inline uint32_t buffer_bytes_for(const wire::Sqe& sqe, uint32_t data_len, uint32_t mdts) {
  switch (static_cast<wire::IoOpcode>(sqe.opc)) {
    case wire::IoOpcode::Compare: return align_4k(data_len) + data_len;
    case wire::IoOpcode::Copy: return kCopyRangesBytes + mdts;
    default: return data_len;
  }
}

}  // namespace nvtcp::target

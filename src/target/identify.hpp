// SPDX-License-Identifier: Apache-2.0
// Identify (06h): the data structure of each CNS the target answers, one function each, as one
// controller reports it (what its subsystem, its port and the target's configuration make it).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "wire/nvme.hpp"

namespace nvtcp::target {

class Controller;

// NVMe's fixed-size string fields: ASCII padded with spaces (serial, model, firmware revision,
// a discovery entry's address), or NUL-terminated (an NQN).
inline void put_padded(char* dst, size_t n, const std::string& s) {
  std::memset(dst, ' ', n);
  std::memcpy(dst, s.data(), std::min(n, s.size()));
}
inline void put_string(char* dst, size_t n, const std::string& s) {
  std::memset(dst, 0, n);
  std::memcpy(dst, s.data(), std::min(n - 1, s.size()));
}
// The firmware revision Identify and the Firmware Slot log report.
inline constexpr const char* kFirmwareRevision = "0.1.0";

class IdentifyData {
 public:
  explicit IdentifyData(const Controller& c) : c_(c) {}
  // Fills buf (4 KiB, zeroed first) with the structure sqe asks for: its length, or 0 with st
  // set to why not.
  uint32_t fill(const wire::Sqe& sqe, uint8_t* buf, wire::Status& st) const;

 private:
  uint32_t controller(uint8_t* buf) const;
  uint32_t namespace_data(const wire::Sqe& sqe, uint8_t* buf, wire::Status& st) const;
  uint32_t namespace_descriptors(const wire::Sqe& sqe, uint8_t* buf, wire::Status& st) const;
  // CNS 02h and 07h (NVM): the active NSIDs above `after`, ascending.
  uint32_t active_namespace_list(uint32_t after, uint8_t* buf, wire::Status& st) const;
  uint32_t independent_namespace(const wire::Sqe& sqe, uint8_t* buf, wire::Status& st) const;

  const Controller& c_;
};

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
// Controller properties (the registers of a PCIe controller), which NVMe over Fabrics reads
// and writes with Property Get and Set: offsets and the fields of CAP, CC and CSTS.
#pragma once
#include <cstdint>

namespace nvtcp::nvme {

// Controller properties reachable through Property Get/Set.
namespace prop {
inline constexpr uint32_t CAP = 0x00;   // 8 bytes
inline constexpr uint32_t VS = 0x08;
inline constexpr uint32_t CC = 0x14;
inline constexpr uint32_t CSTS = 0x1C;
inline constexpr uint32_t NSSR = 0x20;

inline constexpr uint32_t kCcEnable = 0x1;
inline constexpr uint32_t kCcShnShift = 14;
inline constexpr uint32_t kCcShnMask = 0x3u << kCcShnShift;
inline constexpr uint32_t kCcShnNormal = 0x1u << kCcShnShift;   // normal shutdown notification
// I/O queue entry sizes as powers of two: 64-byte SQEs (IOSQES, bits 19:16) and 16-byte CQEs
// (IOCQES, bits 23:20), the only sizes NVM controllers use.
inline constexpr uint32_t kCcIosqes64 = 6u << 16;
inline constexpr uint32_t kCcIocqes16 = 4u << 20;
// What a host writes to enable a controller: NVM command set (CSS 0), 4 KiB pages (MPS 0),
// round robin (AMS 0), standard entry sizes.
inline constexpr uint32_t kCcEnableNvm = kCcEnable | kCcIosqes64 | kCcIocqes16;
inline constexpr uint32_t kCstsReady = 0x1;
inline constexpr uint32_t kCstsFatal = 0x2;
inline constexpr uint32_t kCstsShstProcessing = 0x1u << 2;
inline constexpr uint32_t kCstsShstComplete = 0x2u << 2;
inline constexpr uint32_t kCstsShstMask = 0x3u << 2;

// CAP: MQES (0's based), CQR=1, TO in 500 ms units, CSS bit 37 (NVM command set).
constexpr uint64_t make_cap(uint16_t mqes, uint8_t timeout_500ms) {
  return uint64_t(mqes) | (1ull << 16) | (uint64_t(timeout_500ms) << 24) | (1ull << 37);
}
constexpr uint16_t cap_mqes(uint64_t cap) { return cap & 0xFFFF; }
constexpr uint32_t cap_timeout_ms(uint64_t cap) { return uint32_t((cap >> 24) & 0xFF) * 500; }
}  // namespace prop

}  // namespace nvtcp::nvme

// SPDX-License-Identifier: Apache-2.0
// Get/Set Features: feature identifiers (CDW10 bits 7:0), the Get Features select field
// (CDW10 bits 10:8) and the capability bits a "supported capabilities" select returns.
#pragma once
#include <cstdint>

#include "wire/nvme.hpp"

namespace nvtcp::wire {

inline constexpr uint8_t kFeaturePowerManagement = 0x02;       // CDW11 bits 4:0 PS, 7:5 WH
inline constexpr uint8_t kFeatureTemperatureThreshold = 0x04;  // 15:0 TMPTH, 19:16 TMPSEL, 21:20 THSEL
inline constexpr uint8_t kFeatureErrorRecovery = 0x05;         // 15:0 TLER, bit 16 DULBE
inline constexpr uint8_t kFeatureVolatileWriteCache = 0x06;    // CDW11 bit 0: WCE
inline constexpr uint8_t kFeatureNumberOfQueues = 0x07;
inline constexpr uint8_t kFeatureInterruptCoalescing = 0x08;   // 7:0 THR, 15:8 TIME
inline constexpr uint8_t kFeatureWriteAtomicity = 0x0A;        // bit 0 DN
inline constexpr uint8_t kFeatureAsyncEventConfig = 0x0B;
inline constexpr uint8_t kFeatureKeepAliveTimer = 0x0F;
inline constexpr uint8_t kFeatureHostBehaviorSupport = 0x16;  // 512 bytes of data, both ways
inline constexpr uint8_t kFeatureHostIdentifier = 0x81;        // CDW11 bit 0 EXHID; 16 bytes of data

// Feature 16h's data: byte 0 ACRE (Advanced Command Retry Enable), 1 ETDAS, 2 LBAFEE,
// 3 HDISNS, 5:4 CDFE; the rest reserved.
inline constexpr uint32_t kHostBehaviorLen = 512;

// Feature 0Bh: bits 7:0 enable SMART critical warnings, bit 8 namespace attribute notices,
// bit 11 ANA change notices, bit 31 discovery log change notices (a discovery controller's
// only one); the same bits as OAES announces them.
inline constexpr uint32_t kAecSmartWarnings = 0xFF;
inline constexpr uint32_t kAecNamespaceAttribute = 1u << 8;
inline constexpr uint32_t kAecAnaChange = 1u << 11;
inline constexpr uint32_t kAecDiscoveryLogChange = 1u << 31;
// The critical warnings NVMe 1.4 defines (spare, temperature, reliability, read-only, volatile
// memory backup): what a host may ask of any controller (nvmet refuses the other bits of 7:0).
inline constexpr uint32_t kAecSmartWarningsDefined = 0x1F;

// Temperature thresholds: THSEL 00b over, 01b under. The default over-temperature threshold
// (343 K, 70 C) is what NVMe drives commonly report; there is no sensor behind it.
inline constexpr uint32_t kTemperatureOverDefault = 343;

inline constexpr uint32_t kSelCurrent = 0;
inline constexpr uint32_t kSelDefault = 1;
inline constexpr uint32_t kSelSaved = 2;
inline constexpr uint32_t kSelSupportedCapabilities = 3;

// Supported capabilities (SEL 011b), returned in dw0.
inline constexpr uint32_t kFeatureCapSaveable = 1u << 0;
inline constexpr uint32_t kFeatureCapNamespaceSpecific = 1u << 1;
inline constexpr uint32_t kFeatureCapChangeable = 1u << 2;

}  // namespace nvtcp::wire

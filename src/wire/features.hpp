// Get/Set Features: feature identifiers (CDW10 bits 7:0), the Get Features select field
// (CDW10 bits 10:8) and the capability bits a "supported capabilities" select returns.
#pragma once
#include <cstdint>

namespace nvtcp::wire {

inline constexpr uint8_t kFeatureVolatileWriteCache = 0x06;  // CDW11 bit 0: WCE
inline constexpr uint8_t kFeatureNumberOfQueues = 0x07;
inline constexpr uint8_t kFeatureAsyncEventConfig = 0x0B;
inline constexpr uint8_t kFeatureKeepAliveTimer = 0x0F;

inline constexpr uint32_t kSelCurrent = 0;
inline constexpr uint32_t kSelDefault = 1;
inline constexpr uint32_t kSelSaved = 2;
inline constexpr uint32_t kSelSupportedCapabilities = 3;

// Supported capabilities (SEL 011b), returned in dw0.
inline constexpr uint32_t kFeatureCapSaveable = 1u << 0;
inline constexpr uint32_t kFeatureCapNamespaceSpecific = 1u << 1;
inline constexpr uint32_t kFeatureCapChangeable = 1u << 2;

}  // namespace nvtcp::wire

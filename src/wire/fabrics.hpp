// NVMe over Fabrics commands: Connect (and its 1024-byte data), Property Get/Set, Disconnect.
#pragma once
#include <cstddef>
#include <cstdint>

#include "nvtcp/sqe.hpp"

namespace nvtcp::wire {

enum class FabricsType : uint8_t {
  PropertySet = 0x00,
  Connect = 0x01,
  PropertyGet = 0x04,
  AuthSend = 0x05,
  AuthReceive = 0x06,
  Disconnect = 0x08,
};

inline constexpr const char* kDiscoveryNqn = "nqn.2014-08.org.nvmexpress.discovery";
inline constexpr uint16_t kDiscoveryPort = 8009;
inline constexpr uint16_t kDefaultPort = 4420;
inline constexpr uint16_t kDynamicCntlid = 0xFFFF;
inline constexpr uint8_t kConnectAttrDisableSqFlow = 0x04;  // CATTR bit 2
inline constexpr uint32_t kConnectDataLen = 1024;

#pragma pack(push, 1)
struct ConnectCmd {
  uint8_t opc;       // 0x7F
  uint8_t flags;
  uint16_t cid;
  uint8_t fctype;    // FabricsType::Connect
  uint8_t rsvd1[19];
  SglDescriptor sgl;
  uint16_t recfmt;   // record format, 0
  uint16_t qid;      // 0 = admin queue
  uint16_t sqsize;   // 0's based
  uint8_t cattr;     // bit 2: disable SQ flow control
  uint8_t rsvd2;
  uint32_t kato;     // keep-alive timeout, ms (admin queue only)
  uint8_t rsvd3[12];
};

struct ConnectData {
  uint8_t hostid[16];
  uint16_t cntlid;   // 0xFFFF for the admin queue of a dynamic controller
  uint8_t rsvd1[238];
  char subnqn[256];
  char hostnqn[256];
  uint8_t rsvd2[256];
};

struct PropertyGetCmd {
  uint8_t opc;
  uint8_t flags;
  uint16_t cid;
  uint8_t fctype;
  uint8_t rsvd1[35];
  uint8_t attrib;    // bits 2:0: 0 = 4 bytes, 1 = 8 bytes
  uint8_t rsvd2[3];
  uint32_t ofst;
  uint8_t rsvd3[16];
};

struct PropertySetCmd {
  uint8_t opc;
  uint8_t flags;
  uint16_t cid;
  uint8_t fctype;
  uint8_t rsvd1[35];
  uint8_t attrib;
  uint8_t rsvd2[3];
  uint32_t ofst;
  uint64_t value;
  uint8_t rsvd3[8];
};

struct DisconnectCmd {
  uint8_t opc;
  uint8_t flags;
  uint16_t cid;
  uint8_t fctype;
  uint8_t rsvd1[35];
  uint16_t recfmt;
  uint8_t rsvd2[22];
};
#pragma pack(pop)

static_assert(sizeof(ConnectCmd) == 64);
static_assert(offsetof(ConnectCmd, fctype) == 4 && offsetof(ConnectCmd, sgl) == 24);
static_assert(offsetof(ConnectCmd, recfmt) == 40 && offsetof(ConnectCmd, qid) == 42);
static_assert(offsetof(ConnectCmd, sqsize) == 44 && offsetof(ConnectCmd, cattr) == 46);
static_assert(offsetof(ConnectCmd, kato) == 48);
static_assert(sizeof(ConnectData) == kConnectDataLen);
static_assert(offsetof(ConnectData, cntlid) == 16 && offsetof(ConnectData, subnqn) == 256);
static_assert(offsetof(ConnectData, hostnqn) == 512);
static_assert(sizeof(PropertyGetCmd) == 64 && offsetof(PropertyGetCmd, attrib) == 40);
static_assert(offsetof(PropertyGetCmd, ofst) == 44);
static_assert(sizeof(PropertySetCmd) == 64 && offsetof(PropertySetCmd, value) == 48);
static_assert(sizeof(DisconnectCmd) == 64 && offsetof(DisconnectCmd, recfmt) == 40);

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

}  // namespace nvtcp::wire

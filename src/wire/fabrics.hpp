// SPDX-License-Identifier: Apache-2.0
// NVMe over Fabrics commands: Connect (and its 1024-byte data), Property Get/Set, Disconnect.
#pragma once
#include <cstddef>
#include <cstdint>

#include "wire/nvme.hpp"

namespace nvtcp::wire {

enum class FabricsType : uint8_t {
  PropertySet = 0x00,
  Connect = 0x01,
  PropertyGet = 0x04,
  AuthSend = 0x05,
  AuthReceive = 0x06,
  Disconnect = 0x08,
};

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

}  // namespace nvtcp::wire

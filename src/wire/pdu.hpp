// SPDX-License-Identifier: Apache-2.0
// NVMe/TCP PDU formats (NVMe over Fabrics TCP transport binding).
// Every PDU is a packed little-endian struct; sizes and offsets are checked at compile time.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>

#include "wire/nvme.hpp"

static_assert(std::endian::native == std::endian::little, "wire structs assume a little-endian host");

namespace nvtcp::wire {

enum class PduType : uint8_t {
  ICReq = 0x00,
  ICResp = 0x01,
  H2CTermReq = 0x02,
  C2HTermReq = 0x03,
  CapsuleCmd = 0x04,
  CapsuleResp = 0x05,
  H2CData = 0x06,
  C2HData = 0x07,
  R2T = 0x09,
};

const char* pdu_type_name(PduType t);

// Common header flags.
inline constexpr uint8_t kFlagHdgst = 0x01;      // header digest follows the PDU header
inline constexpr uint8_t kFlagDdgst = 0x02;      // data digest follows the PDU data
inline constexpr uint8_t kFlagDataLast = 0x04;   // last data PDU of a command (C2HData/H2CData)
inline constexpr uint8_t kFlagDataSuccess = 0x08;// C2HData: command completed, no CapsuleResp follows

inline constexpr uint32_t kDigestLen = 4;
inline constexpr uint16_t kPfv = 0;              // PDU format version 1.0

#pragma pack(push, 1)
struct CommonHeader {
  uint8_t type;   // PduType
  uint8_t flags;  // kFlag*
  uint8_t hlen;   // PDU header length, without the header digest
  uint8_t pdo;    // PDU data offset from the start of the PDU; 0 when there is no data
  uint32_t plen;  // total PDU length: header, digests, padding and data
};

struct ICReqPdu {
  CommonHeader ch;
  uint16_t pfv;      // PDU format version
  uint8_t hpda;      // host PDU data alignment, 0's based dwords
  uint8_t digest;    // bit 0 HDGST_ENABLE, bit 1 DDGST_ENABLE
  uint32_t maxr2t;   // maximum outstanding R2Ts per command, 0's based
  uint8_t rsvd[112];
};

struct ICRespPdu {
  CommonHeader ch;
  uint16_t pfv;
  uint8_t cpda;      // controller PDU data alignment, 0's based dwords
  uint8_t digest;    // digests the controller agreed to
  uint32_t maxh2cdata;  // largest H2CData payload the controller accepts, bytes
  uint8_t rsvd[112];
};

// H2CTermReq and C2HTermReq share this header; up to 128 bytes of the offending PDU
// header follow as data (a TermReq PDU is at most 152 bytes).
struct TermReqPdu {
  CommonHeader ch;
  uint16_t fes;      // fatal error status
  uint32_t fei;      // fatal error information (byte offset of the bad field, for FES 1)
  uint8_t rsvd[10];
};

struct CapsuleCmdHeader {
  CommonHeader ch;
  uint8_t sqe[64];   // nvme::Sqe
};

struct CapsuleRespPdu {
  CommonHeader ch;
  uint8_t cqe[16];   // nvme::Cqe
};

struct H2CDataPdu {
  CommonHeader ch;
  uint16_t cccid;    // command identifier of the write this data belongs to
  uint16_t ttag;     // transfer tag from the R2T
  uint32_t datao;    // offset of this data in the command's data
  uint32_t datal;    // length of this PDU's data
  uint8_t rsvd[4];
};

struct C2HDataPdu {
  CommonHeader ch;
  uint16_t cccid;
  uint16_t rsvd1;
  uint32_t datao;
  uint32_t datal;
  uint8_t rsvd2[4];
};

struct R2TPdu {
  CommonHeader ch;
  uint16_t cccid;
  uint16_t ttag;     // controller's tag, echoed in H2CData
  uint32_t r2to;     // offset of the requested data
  uint32_t r2tl;     // length of the requested data
  uint8_t rsvd[4];
};
#pragma pack(pop)

static_assert(sizeof(CommonHeader) == 8);
static_assert(offsetof(CommonHeader, plen) == 4);
static_assert(sizeof(ICReqPdu) == 128);
static_assert(offsetof(ICReqPdu, hpda) == 10 && offsetof(ICReqPdu, digest) == 11);
static_assert(offsetof(ICReqPdu, maxr2t) == 12);
static_assert(sizeof(ICRespPdu) == 128);
static_assert(offsetof(ICRespPdu, cpda) == 10 && offsetof(ICRespPdu, maxh2cdata) == 12);
static_assert(sizeof(TermReqPdu) == 24);
static_assert(offsetof(TermReqPdu, fes) == 8 && offsetof(TermReqPdu, fei) == 10);
static_assert(sizeof(CapsuleCmdHeader) == 72);
static_assert(sizeof(CapsuleRespPdu) == 24);
static_assert(sizeof(H2CDataPdu) == 24);
static_assert(offsetof(H2CDataPdu, ttag) == 10 && offsetof(H2CDataPdu, datao) == 12);
static_assert(offsetof(H2CDataPdu, datal) == 16);
static_assert(sizeof(C2HDataPdu) == 24);
static_assert(offsetof(C2HDataPdu, datao) == 12 && offsetof(C2HDataPdu, datal) == 16);
static_assert(sizeof(R2TPdu) == 24);
static_assert(offsetof(R2TPdu, r2to) == 12 && offsetof(R2TPdu, r2tl) == 16);

// Fixed header length (hlen) of each PDU type; 0 for an unknown type.
constexpr uint8_t expected_hlen(PduType t) {
  switch (t) {
    case PduType::ICReq:
    case PduType::ICResp: return 128;
    case PduType::H2CTermReq:
    case PduType::C2HTermReq: return 24;
    case PduType::CapsuleCmd: return 72;
    case PduType::CapsuleResp:
    case PduType::H2CData:
    case PduType::C2HData:
    case PduType::R2T: return 24;
  }
  return 0;
}

// Fatal error status values carried by TermReq PDUs. 05h means one thing from each side.
enum class Fes : uint16_t {
  InvalidHeaderField = 0x01,
  PduSequenceError = 0x02,
  HeaderDigestError = 0x03,
  DataOutOfRange = 0x04,
  R2TLimitExceeded = 0x05,   // in an H2CTermReq: the controller sent more R2Ts than MAXR2T allows
  DataLimitExceeded = 0x05,  // in a C2HTermReq: the host sent more data than MAXH2CDATA (or a PDU too long)
  UnsupportedParameter = 0x06,
};

// The status's name as the PDU that carries it (H2CTermReq or C2HTermReq) defines it.
const char* fes_name(Fes f, PduType term_req);

// ICReq/ICResp DGST field: which digests the host asks for, and the controller grants.
inline constexpr uint8_t kIcDigestHeader = 0x01;
inline constexpr uint8_t kIcDigestData = 0x02;

inline constexpr uint8_t ic_digest_bits(bool hdgst, bool ddgst) {
  return uint8_t((hdgst ? kIcDigestHeader : 0) | (ddgst ? kIcDigestData : 0));
}

// PDU data offset: header, optional header digest, then padding up to the alignment the
// receiver asked for ((pda + 1) dwords).
constexpr uint32_t data_offset(uint32_t hlen, bool hdgst, uint8_t pda) {
  uint32_t off = hlen + (hdgst ? kDigestLen : 0);
  uint32_t align = (static_cast<uint32_t>(pda) + 1) * 4;
  return (off + align - 1) / align * align;
}

// Fills a common header for a PDU of this type carrying data_len bytes of data, with the
// digests and the receiver's data alignment (pda) the connection negotiated.
inline void fill_common_header(CommonHeader& ch, PduType type, uint8_t hlen, uint32_t data_len, uint8_t flags,
                               bool hdgst, bool ddgst, uint8_t pda) {
  ch.type = uint8_t(type);
  ch.flags = uint8_t(flags | (hdgst ? kFlagHdgst : 0));
  ch.hlen = hlen;
  if (data_len) {
    if (ddgst) ch.flags |= kFlagDdgst;
    ch.pdo = uint8_t(data_offset(hlen, hdgst, pda));
    ch.plen = ch.pdo + data_len + (ddgst ? kDigestLen : 0);
  } else {
    ch.pdo = 0;
    ch.plen = hlen + (hdgst ? kDigestLen : 0);
  }
}

// The host's ICReq: hpda (0's based dwords of data alignment it wants), the digests it asks
// for, and MAXR2T (0's based: how many R2Ts it takes outstanding per command).
inline ICReqPdu make_icreq(uint8_t hpda, bool hdgst, bool ddgst, uint32_t maxr2t_zero_based = 0) {
  ICReqPdu p{};
  p.ch.type = uint8_t(PduType::ICReq);
  p.ch.hlen = sizeof(ICReqPdu);
  p.ch.plen = sizeof(ICReqPdu);
  p.pfv = kPfv;
  p.hpda = hpda;
  p.digest = ic_digest_bits(hdgst, ddgst);
  p.maxr2t = maxr2t_zero_based;
  return p;
}

// The controller's ICResp: cpda, the digests it grants and MAXH2CDATA in bytes.
inline ICRespPdu make_icresp(uint8_t cpda, bool hdgst, bool ddgst, uint32_t maxh2cdata) {
  ICRespPdu p{};
  p.ch.type = uint8_t(PduType::ICResp);
  p.ch.hlen = sizeof(ICRespPdu);
  p.ch.plen = sizeof(ICRespPdu);
  p.pfv = kPfv;
  p.cpda = cpda;
  p.digest = ic_digest_bits(hdgst, ddgst);
  p.maxh2cdata = maxh2cdata;
  return p;
}

// The largest PDU header plus digest we ever need to hold before data starts.
inline constexpr uint32_t kMaxHeaderBytes = 128 + kDigestLen;

}  // namespace nvtcp::wire

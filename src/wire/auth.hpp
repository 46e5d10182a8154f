// SPDX-License-Identifier: Apache-2.0
// NVMe in-band authentication (NVMe Base Specification 2.0, 8.13): the Authentication Send and
// Receive commands, and the AUTH and DH-HMAC-CHAP messages they carry in their data. Every
// multi-byte field is little-endian. docs/security/interop-facts.md (section 2) says where each
// layout and value was checked against the Linux host and target.
#pragma once
#include <cstddef>
#include <cstdint>

#include "wire/nvme.hpp"

namespace nvtcp::wire {

// SECP of the Authentication Send/Receive commands for NVMe in-band authentication, and the
// SPSP0/SPSP1 values that go with it.
inline constexpr uint8_t kAuthSecp = 0xE9;
inline constexpr uint8_t kAuthSpsp0 = 0x01;
inline constexpr uint8_t kAuthSpsp1 = 0x01;

// Connect response DW0: the host must authenticate this queue (ATR), or authenticate and then
// concatenate a secure channel (ASCR), before anything else.
inline constexpr uint32_t kConnectResultAtr = 1u << 17;
inline constexpr uint32_t kConnectResultAscr = 1u << 18;

// The most a controller sends in one message with the largest group (Challenge: 16 + 64-byte
// challenge + 1024-byte ffdhe8192 value), and what the Linux host asks for (AL) in each
// Authentication Receive.
inline constexpr uint32_t kAuthMaxMessage = 16 + 64 + 1024;
inline constexpr uint32_t kAuthHostReceiveLength = 4096;

enum class AuthType : uint8_t {
  Common = 0x00,  // AUTH_Negotiate, AUTH_Failure1/2
  Dhchap = 0x01,  // DH-HMAC-CHAP_*
};

enum class AuthId : uint8_t {
  Negotiate = 0x00,
  Challenge = 0x01,
  Reply = 0x02,
  Success1 = 0x03,
  Success2 = 0x04,
  Failure2 = 0xF0,  // host to controller
  Failure1 = 0xF1,  // controller to host
};

// Hash function identifiers, also the XX of a "DHHC-1:XX:" secret (where 0 means untransformed).
enum class DhchapHash : uint8_t {
  Sha256 = 0x01,
  Sha384 = 0x02,
  Sha512 = 0x03,
};

// Diffie-Hellman group identifiers: no DH, or the RFC 7919 finite-field groups.
enum class DhGroup : uint8_t {
  Null = 0x00,
  Ffdhe2048 = 0x01,
  Ffdhe3072 = 0x02,
  Ffdhe4096 = 0x03,
  Ffdhe6144 = 0x04,
  Ffdhe8192 = 0x05,
};

// AUTH_Failure reason code, and its explanations.
inline constexpr uint8_t kAuthRescodeFailure = 0x01;
enum class AuthFailureReason : uint8_t {
  Failed = 0x01,
  NotUsable = 0x02,
  ConcatMismatch = 0x03,
  HashUnusable = 0x04,
  DhGroupUnusable = 0x05,
  IncorrectPayload = 0x06,
  IncorrectMessage = 0x07,
};

// SC_C of AUTH_Negotiate: no secure channel concatenation is the only value nvtcp offers.
inline constexpr uint8_t kAuthScNone = 0x00;
inline constexpr uint8_t kAuthIdDhchap = 0x01;  // AUTHID of a protocol descriptor

// Digest length of a hash (0 for an unknown one).
constexpr uint32_t dhchap_hash_length(DhchapHash h) {
  switch (h) {
    case DhchapHash::Sha256: return 32;
    case DhchapHash::Sha384: return 48;
    case DhchapHash::Sha512: return 64;
  }
  return 0;
}

// Bytes of a group's prime, the length of its public values and shared secret (0: the NULL
// group or an unknown one).
constexpr uint32_t dh_group_bytes(DhGroup g) {
  switch (g) {
    case DhGroup::Null: return 0;
    case DhGroup::Ffdhe2048: return 256;
    case DhGroup::Ffdhe3072: return 384;
    case DhGroup::Ffdhe4096: return 512;
    case DhGroup::Ffdhe6144: return 768;
    case DhGroup::Ffdhe8192: return 1024;
  }
  return 0;
}

constexpr bool dh_group_known(uint8_t id) { return id <= uint8_t(DhGroup::Ffdhe8192); }
constexpr bool dhchap_hash_known(uint8_t id) { return id >= 1 && id <= 3; }

#pragma pack(push, 1)
// Authentication Send (fctype 05h) and Receive (06h): the data holds one message; TL (send) or
// AL (receive) is its length.
struct AuthTransferCmd {
  uint8_t opc;       // 0x7F
  uint8_t flags;
  uint16_t cid;
  uint8_t fctype;    // FabricsType::AuthSend or AuthReceive
  uint8_t rsvd1[19];
  SglDescriptor sgl;
  uint8_t rsvd2;
  uint8_t spsp0;
  uint8_t spsp1;
  uint8_t secp;
  uint32_t length;   // TL or AL
  uint8_t rsvd3[16];
};

// The first eight bytes of every message.
struct AuthHeader {
  uint8_t auth_type;  // AuthType
  uint8_t auth_id;    // AuthId
  uint8_t rsvd[2];
  uint16_t t_id;      // transaction identifier
};

// One authentication protocol a host offers: the hash IDs in idlist[0, halen), the DH group IDs
// in idlist[30, 30 + dhlen).
struct AuthProtocolDescriptor {
  uint8_t authid;     // kAuthIdDhchap
  uint8_t rsvd;
  uint8_t halen;
  uint8_t dhlen;
  uint8_t idlist[60];
};
inline constexpr uint32_t kAuthDhGroupListOffset = 30;
inline constexpr uint32_t kAuthIdListMax = 30;

// AUTH_Negotiate (host to controller), followed by napd descriptors.
struct AuthNegotiate {
  AuthHeader h;
  uint8_t sc_c;
  uint8_t napd;
};

// DH-HMAC-CHAP_Challenge (controller to host), followed by the challenge C1 (hl bytes) and the
// controller's DH public value (dhvlen bytes).
struct DhchapChallenge {
  AuthHeader h;
  uint8_t hl;
  uint8_t rsvd1;
  uint8_t hashid;
  uint8_t dhgid;
  uint16_t dhvlen;
  uint32_t seqnum;    // S1
};

// DH-HMAC-CHAP_Reply (host to controller), followed by the response R1 (hl bytes), the host's
// challenge C2 (hl bytes, zero when cvalid is 0) and the host's DH public value (dhvlen bytes).
struct DhchapReply {
  AuthHeader h;
  uint8_t hl;
  uint8_t rsvd1;
  uint8_t cvalid;
  uint8_t rsvd2;
  uint16_t dhvlen;
  uint32_t seqnum;    // S2; 0 = no controller authentication asked for
};

// DH-HMAC-CHAP_Success1 (controller to host), followed by the response R2 (hl bytes) when rvalid.
struct DhchapSuccess1 {
  AuthHeader h;
  uint8_t hl;
  uint8_t rsvd1;
  uint8_t rvalid;
  uint8_t rsvd2[7];
};

// DH-HMAC-CHAP_Success2 (host to controller): the controller's response checked out.
struct DhchapSuccess2 {
  AuthHeader h;
  uint8_t rsvd[10];
};

// AUTH_Failure1 (controller to host) and AUTH_Failure2 (host to controller).
struct AuthFailure {
  AuthHeader h;
  uint8_t rescode;      // kAuthRescodeFailure
  uint8_t rescode_exp;  // AuthFailureReason
};
#pragma pack(pop)

static_assert(sizeof(AuthTransferCmd) == 64);
static_assert(offsetof(AuthTransferCmd, fctype) == 4 && offsetof(AuthTransferCmd, sgl) == 24);
static_assert(offsetof(AuthTransferCmd, spsp0) == 41 && offsetof(AuthTransferCmd, spsp1) == 42);
static_assert(offsetof(AuthTransferCmd, secp) == 43 && offsetof(AuthTransferCmd, length) == 44);
static_assert(sizeof(AuthHeader) == 6 && offsetof(AuthHeader, t_id) == 4);
static_assert(sizeof(AuthProtocolDescriptor) == 64 && offsetof(AuthProtocolDescriptor, idlist) == 4);
static_assert(sizeof(AuthNegotiate) == 8 && offsetof(AuthNegotiate, sc_c) == 6);
static_assert(sizeof(DhchapChallenge) == 16 && offsetof(DhchapChallenge, hashid) == 8);
static_assert(offsetof(DhchapChallenge, dhvlen) == 10 && offsetof(DhchapChallenge, seqnum) == 12);
static_assert(sizeof(DhchapReply) == 16 && offsetof(DhchapReply, cvalid) == 8);
static_assert(offsetof(DhchapReply, dhvlen) == 10 && offsetof(DhchapReply, seqnum) == 12);
static_assert(sizeof(DhchapSuccess1) == 16 && offsetof(DhchapSuccess1, rvalid) == 8);
static_assert(sizeof(DhchapSuccess2) == 16);
static_assert(sizeof(AuthFailure) == 8 && offsetof(AuthFailure, rescode_exp) == 7);

// Names for log lines ("hash unusable", "ffdhe3072", "hmac(sha384)").
const char* auth_failure_name(uint8_t reason);
const char* dh_group_name(uint8_t id);
const char* dhchap_hash_name(uint8_t id);

}  // namespace nvtcp::wire

// SPDX-License-Identifier: Apache-2.0
// Log pages: Supported Log Pages (00h), Error Information (01h), SMART / Health (02h),
// Firmware Slot (03h), Changed Namespace List (04h), Commands Supported and Effects (05h),
// Asymmetric Namespace Access (0Ch), Discovery (70h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace nvtcp::nvme {

enum class LogPageId : uint8_t {
  SupportedLogPages = 0x00,
  Error = 0x01,
  SmartHealth = 0x02,
  FirmwareSlot = 0x03,
  ChangedNamespaces = 0x04,
  CommandEffects = 0x05,
  Ana = 0x0C,
  Discovery = 0x70,
  ReservationNotification = 0x80,
};

// Asynchronous Event Request completion dw0: event type (bits 2:0), event information
// (15:8) and the log page that clears the event (23:16). A controller reports one event of a
// type and then masks that type until the host reads its log page with RAE (CDW10 bit 15) 0.
enum class AsyncEventType : uint8_t { Error = 0, SmartHealth = 1, Notice = 2, IoCommandSpecific = 6 };
inline constexpr uint8_t kAsyncErrorTransientInternal = 0x04;   // type Error
inline constexpr uint8_t kAsyncNoticeNamespaceChanged = 0x00;   // type Notice, log 04h
inline constexpr uint8_t kAsyncNoticeAnaChange = 0x03;          // type Notice, log 0Ch
inline constexpr uint8_t kAsyncNoticeDiscoveryLogChange = 0xF0; // type Notice, log 70h (discovery)
inline constexpr uint8_t kAsyncIoReservationLog = 0x00;         // type I/O command specific, log 80h
constexpr uint32_t async_event_dw0(AsyncEventType type, uint8_t info, LogPageId lid) {
  return uint32_t(type) | uint32_t(info) << 8 | uint32_t(lid) << 16;
}
// Get Log Page CDW10 bit 15: Retain Asynchronous Event (reading does not unmask its type).
inline constexpr uint32_t kLogRetainAsyncEvent = 1u << 15;
// LID 04h holds up to 1024 NSIDs; more changes than that are reported as FFFFFFFFh alone.
inline constexpr uint32_t kChangedNamespacesMax = 1024;

// Asymmetric Namespace Access: the state of an ANA group as seen through one controller
// (its port). Optimized and non-optimized paths take I/O; the others answer it with the
// path-related ANA statuses (sc::AnaInaccessible, ...).
enum class AnaState : uint8_t {
  Optimized = 0x01,
  NonOptimized = 0x02,
  Inaccessible = 0x03,
  PersistentLoss = 0x04,
  Change = 0x0F,
};
// The names SPDK's RPC gives the states ("optimized", "non_optimized", "inaccessible"; and
// "persistent_loss", "change"). ana_state_from_name: false for any other text.
constexpr const char* ana_state_name(AnaState s) {
  switch (s) {
    case AnaState::Optimized: return "optimized";
    case AnaState::NonOptimized: return "non_optimized";
    case AnaState::Inaccessible: return "inaccessible";
    case AnaState::PersistentLoss: return "persistent_loss";
    case AnaState::Change: return "change";
  }
  return "unknown";
}
constexpr bool ana_state_from_name(std::string_view name, AnaState& out) {
  for (AnaState s : {AnaState::Optimized, AnaState::NonOptimized, AnaState::Inaccessible, AnaState::PersistentLoss,
                     AnaState::Change})
    if (name == ana_state_name(s)) {
      out = s;
      return true;
    }
  return false;
}
// LID 0Ch, Get Log Page CDW10 LSP bit 0 (CDW10 bit 8): Return Groups Only (no NSID lists).
inline constexpr uint32_t kLogAnaReturnGroupsOnly = 1u << 8;

// LID 00h: one descriptor per log page identifier; bit 0 (LSUPP) says it is supported.
inline constexpr uint32_t kLogSupported = 1u << 0;
// LID 05h, per opcode: CSUPP (supported) and LBCC (may change logical block content).
inline constexpr uint32_t kEffectsCsupp = 1u << 0;
inline constexpr uint32_t kEffectsLbcc = 1u << 1;

#pragma pack(push, 1)
struct ErrorLogEntry {
  uint64_t error_count;
  uint16_t sqid;
  uint16_t cid;
  uint16_t status;
  uint16_t pel;      // parameter error location
  uint64_t lba;
  uint32_t nsid;
  uint8_t vs;
  uint8_t trtype;
  uint8_t rsvd1[2];
  uint64_t csi;
  uint16_t trtype_specific;
  uint8_t rsvd2[22];
};

struct SmartLog {
  uint8_t critical_warning;
  uint16_t temperature;   // Kelvin
  uint8_t avail_spare;
  uint8_t spare_thresh;
  uint8_t percent_used;
  uint8_t endu_grp_crit;
  uint8_t rsvd7[25];
  uint8_t data_units_read[16];     // 1000 x 512-byte units
  uint8_t data_units_written[16];
  uint8_t host_reads[16];
  uint8_t host_writes[16];
  uint8_t ctrl_busy_time[16];
  uint8_t power_cycles[16];
  uint8_t power_on_hours[16];
  uint8_t unsafe_shutdowns[16];
  uint8_t media_errors[16];
  uint8_t num_err_log_entries[16];
  uint32_t warning_temp_time;
  uint32_t critical_comp_time;
  uint16_t temp_sensor[8];
  uint8_t rsvd216[296];
};

struct SupportedLogPagesLog {
  uint32_t lid[256];
};

struct CommandEffectsLog {
  uint32_t admin[256];  // by admin opcode
  uint32_t io[256];     // by I/O opcode
  uint8_t rsvd2048[2048];
};

struct FirmwareSlotLog {
  uint8_t afi;
  uint8_t rsvd1[7];
  char frs[7][8];
  uint8_t rsvd64[448];
};

// LID 0Ch: this header, then NGRPS group descriptors, each followed by its NNSIDS NSIDs
// (none with RGO).
struct AnaLogHeader {
  uint64_t chgcnt;
  uint16_t ngrps;
  uint8_t rsvd10[6];
};

struct AnaGroupDescriptor {
  uint32_t anagrpid;
  uint32_t nnsids;
  uint64_t chgcnt;
  uint8_t state;  // bits 3:0: AnaState
  uint8_t rsvd17[15];
};

struct DiscoveryLogHeader {
  uint64_t genctr;
  uint64_t numrec;
  uint16_t recfmt;
  uint8_t rsvd[1006];
};

// Transport type / address family / subsystem type values of a discovery entry.
// The well-known discovery subsystem and the IANA ports for NVMe/TCP discovery and I/O.
inline constexpr const char* kDiscoveryNqn = "nqn.2014-08.org.nvmexpress.discovery";
inline constexpr uint16_t kDiscoveryPort = 8009;
inline constexpr uint16_t kDefaultPort = 4420;

inline constexpr uint8_t kTrtypeTcp = 3;
inline constexpr uint8_t kAdrfamIpv4 = 1;
inline constexpr uint8_t kAdrfamIpv6 = 2;
inline constexpr uint8_t kSubtypeDiscoveryReferral = 1;
inline constexpr uint8_t kSubtypeNvme = 2;
inline constexpr uint8_t kSubtypeCurrentDiscovery = 3;
inline constexpr uint8_t kTreqRequired = 0x1;              // secure channel required
inline constexpr uint8_t kTreqNotRequired = 0x2;           // secure channel not required
inline constexpr uint8_t kTreqSecureChannelMask = 0x3;
inline constexpr uint8_t kTreqDisableSqFlow = 0x4;         // SQ flow control disable supported
inline constexpr uint8_t kTcpSectypeNone = 0;           // TSAS byte 0 (SECTYPE) for TCP
inline constexpr uint8_t kTcpSectypeTls12 = 1;
inline constexpr uint8_t kTcpSectypeTls13 = 2;

struct DiscoveryLogEntry {
  uint8_t trtype;
  uint8_t adrfam;
  uint8_t subtype;
  uint8_t treq;
  uint16_t portid;
  uint16_t cntlid;
  uint16_t asqsz;
  uint16_t eflags;
  uint8_t rsvd12[20];
  char trsvcid[32];
  uint8_t rsvd64[192];
  char subnqn[256];
  char traddr[256];
  uint8_t tsas[256];  // TCP: byte 0 is SECTYPE
};
#pragma pack(pop)

static_assert(sizeof(ErrorLogEntry) == 64 && offsetof(ErrorLogEntry, lba) == 16);
static_assert(offsetof(ErrorLogEntry, nsid) == 24 && offsetof(ErrorLogEntry, csi) == 32);
static_assert(sizeof(SmartLog) == 512 && offsetof(SmartLog, data_units_read) == 32);
static_assert(offsetof(SmartLog, host_reads) == 64 && offsetof(SmartLog, num_err_log_entries) == 176);
static_assert(offsetof(SmartLog, temp_sensor) == 200);
static_assert(sizeof(FirmwareSlotLog) == 512 && offsetof(FirmwareSlotLog, frs) == 8);
static_assert(sizeof(SupportedLogPagesLog) == 1024);
static_assert(sizeof(CommandEffectsLog) == 4096 && offsetof(CommandEffectsLog, io) == 1024);
static_assert(sizeof(AnaLogHeader) == 16 && offsetof(AnaLogHeader, ngrps) == 8);
static_assert(sizeof(AnaGroupDescriptor) == 32 && offsetof(AnaGroupDescriptor, chgcnt) == 8);
static_assert(offsetof(AnaGroupDescriptor, state) == 16);
static_assert(sizeof(DiscoveryLogHeader) == 1024 && offsetof(DiscoveryLogHeader, recfmt) == 16);
static_assert(sizeof(DiscoveryLogEntry) == 1024);
static_assert(offsetof(DiscoveryLogEntry, portid) == 4 && offsetof(DiscoveryLogEntry, asqsz) == 8);
static_assert(offsetof(DiscoveryLogEntry, trsvcid) == 32 && offsetof(DiscoveryLogEntry, subnqn) == 256);
static_assert(offsetof(DiscoveryLogEntry, traddr) == 512 && offsetof(DiscoveryLogEntry, tsas) == 768);

// Stores a 64-bit count in a 128-bit little-endian counter field (upper half zeroed).
inline void put_u128(uint8_t (&field)[16], uint64_t v) {
  for (int i = 0; i < 8; ++i) field[i] = static_cast<uint8_t>(v >> (8 * i));
  for (int i = 8; i < 16; ++i) field[i] = 0;
}

}  // namespace nvtcp::nvme

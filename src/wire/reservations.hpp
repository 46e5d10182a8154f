// SPDX-License-Identifier: Apache-2.0
// Reservations: the I/O commands Reservation Register (0Dh), Report (0Eh), Acquire (11h) and
// Release (15h), their data, the Reservation Notification log (80h) and the bits Identify
// Namespace (RESCAP) and features 82h/83h use.
#pragma once
#include <cstddef>
#include <cstdint>

#include "wire/nvme.hpp"

namespace nvtcp::wire {

enum class ReservationType : uint8_t {
  None = 0,
  WriteExclusive = 1,
  ExclusiveAccess = 2,
  WriteExclusiveRegistrantsOnly = 3,
  ExclusiveAccessRegistrantsOnly = 4,
  WriteExclusiveAllRegistrants = 5,
  ExclusiveAccessAllRegistrants = 6,
};

// CDW10 of each command: the action in bits 2:0, IEKEY in bit 3; Register's CPTPL in bits
// 31:30; Acquire's and Release's RTYPE in bits 15:8.
enum class RegisterAction : uint8_t { Register = 0, Unregister = 1, Replace = 2 };
enum class AcquireAction : uint8_t { Acquire = 0, Preempt = 1, PreemptAndAbort = 2 };
enum class ReleaseAction : uint8_t { Release = 0, Clear = 1 };
inline constexpr uint32_t kResvIgnoreExistingKey = 1u << 3;
// CPTPL: 00b leave persistence as it is, 10b turn it off, 11b turn it on.
inline constexpr uint32_t kCptplNoChange = 0, kCptplOff = 2, kCptplOn = 3;

#pragma pack(push, 1)
struct ReservationRegisterData {
  uint64_t crkey;
  uint64_t nrkey;
};
struct ReservationAcquireData {
  uint64_t crkey;
  uint64_t prkey;
};
struct ReservationReleaseData {
  uint64_t crkey;
};

// Reservation Report with the extended data structure (CDW11 bit 0 EDS): 128-bit host IDs.
struct ReservationStatusExtHeader {
  uint32_t gen;
  uint8_t rtype;
  uint16_t regctl;     // registrants (the count, whatever fits in the buffer)
  uint8_t rsvd7[2];
  uint8_t ptpls;       // persist through power loss is on
  uint8_t rsvd10[54];
};
struct RegisteredControllerExt {
  uint16_t cntlid;     // FFFFh: dynamic controllers, the registrant is a host
  uint8_t rcsts;       // bit 0: holds the reservation
  uint8_t rsvd3[5];
  uint64_t rkey;
  uint8_t hostid[16];
  uint8_t rsvd32[32];
};

// Log 80h: one notification per read, oldest first.
enum class ReservationNotice : uint8_t {
  Empty = 0,
  RegistrationPreempted = 1,
  ReservationReleased = 2,
  ReservationPreempted = 3,
};
struct ReservationNotificationLog {
  uint64_t count;      // this notice's number (1, 2, ...; 0 = no notice)
  uint8_t type;        // ReservationNotice
  uint8_t available;   // notices still queued after this one
  uint8_t rsvd10[2];
  uint32_t nsid;
  uint8_t rsvd16[48];
};
#pragma pack(pop)

static_assert(sizeof(ReservationRegisterData) == 16 && sizeof(ReservationAcquireData) == 16);
static_assert(sizeof(ReservationStatusExtHeader) == 64 && offsetof(ReservationStatusExtHeader, ptpls) == 9);
static_assert(sizeof(RegisteredControllerExt) == 64 && offsetof(RegisteredControllerExt, rkey) == 8 &&
              offsetof(RegisteredControllerExt, hostid) == 16);
static_assert(sizeof(ReservationNotificationLog) == 64 && offsetof(ReservationNotificationLog, nsid) == 12);

// Identify Namespace RESCAP: bit 0 persist through power loss, bits 1-6 the six types, bit 7
// "Ignore Existing Key" with the NVMe 1.3 meaning.
inline constexpr uint8_t kRescapPtpl = 1u << 0;
inline constexpr uint8_t kRescapAllTypes = 0x7E;
inline constexpr uint8_t kRescapIekey13 = 1u << 7;
// ONCS bit 5: reservations.
inline constexpr uint16_t kOncsReservations = 1u << 5;
// Feature 82h (Reservation Notification Mask): bits 1-3 mask each notice type.
inline constexpr uint32_t kResvNoticeMaskAll = 0x0E;
// Feature 83h (Reservation Persistence): bit 0 PTPL.
inline constexpr uint8_t kFeatureReservationNotificationMask = 0x82;
inline constexpr uint8_t kFeatureReservationPersistence = 0x83;

}  // namespace nvtcp::wire

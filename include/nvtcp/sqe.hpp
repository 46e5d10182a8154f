// SPDX-License-Identifier: Apache-2.0
// NVMe submission/completion queue entries, SGL descriptors and opcodes.
#pragma once
#include <cstddef>
#include <cstdint>

namespace nvtcp::nvme {

enum class AdminOpcode : uint8_t {
  DeleteIoSq = 0x00,
  CreateIoSq = 0x01,
  GetLogPage = 0x02,
  DeleteIoCq = 0x04,
  CreateIoCq = 0x05,
  Identify = 0x06,
  Abort = 0x08,
  SetFeatures = 0x09,
  GetFeatures = 0x0A,
  AsyncEventRequest = 0x0C,
  KeepAlive = 0x18,
  DoorbellBufferConfig = 0x7C,
  Fabrics = 0x7F,
};

enum class IoOpcode : uint8_t {
  Flush = 0x00,
  Write = 0x01,
  Read = 0x02,
  WriteZeroes = 0x08,
  DatasetManagement = 0x09,
  Compare = 0x05,
  Verify = 0x0C,
  ReservationRegister = 0x0D,
  ReservationReport = 0x0E,
  ReservationAcquire = 0x11,
  ReservationRelease = 0x15,
  Copy = 0x19,
  Fabrics = 0x7F,
};

// SGL descriptor type byte: type in bits 7:4, subtype in bits 3:0.
inline constexpr uint8_t kSglDataBlockOffset = 0x01;      // in-capsule data (Data Block, Offset)
inline constexpr uint8_t kSglTransportDataBlock = 0x5A;   // data moved by R2T/H2CData or C2HData

// Dataset Management CDW11 attributes: AD (deallocate the ranges).
inline constexpr uint32_t kDsmDeallocate = 1u << 2;

// NSID FFFFFFFFh: every namespace (Flush), or controller-wide (logs, features).
inline constexpr uint32_t kNsidAll = 0xFFFFFFFFu;

// SQE flags byte: PSDT (bits 7:6) = 01b selects SGLs, which fabrics always use.
inline constexpr uint8_t kSqeFlagsPsdtSgl = 0x40;
inline constexpr uint8_t kSqeFlagsPsdtMask = 0xC0;
inline constexpr uint8_t kSqeFlagsFuseMask = 0x03;  // FUSE: first/second command of a fused operation
inline constexpr uint8_t kSqeFlagsFuseFirst = 0x01;
inline constexpr uint8_t kSqeFlagsFuseSecond = 0x02;

#pragma pack(push, 1)
struct SglDescriptor {
  uint64_t addr;     // offset into the capsule for in-capsule data, else 0
  uint32_t length;
  uint8_t rsvd[3];
  uint8_t type;      // kSgl*
};

struct Sqe {
  uint8_t opc;
  uint8_t flags;
  uint16_t cid;
  uint32_t nsid;
  uint32_t cdw2;
  uint32_t cdw3;
  uint64_t mptr;
  SglDescriptor sgl;
  uint32_t cdw10;
  uint32_t cdw11;
  uint32_t cdw12;
  uint32_t cdw13;
  uint32_t cdw14;
  uint32_t cdw15;

  uint8_t fctype() const { return reinterpret_cast<const uint8_t*>(this)[4]; }
  // Read/Write/Write Zeroes: starting LBA (cdw10..11) and 0's based block count.
  uint64_t slba() const { return (static_cast<uint64_t>(cdw11) << 32) | cdw10; }
  uint32_t nlb() const { return (cdw12 & 0xFFFF) + 1; }
  // Write/Write Zeroes/Read: Force Unit Access (a write completes only once it is durable).
  bool fua() const { return cdw12 & kRwFua; }
  static constexpr uint32_t kRwFua = 1u << 30;   // CDW12 bit 30
};

struct Cqe {
  uint32_t dw0;
  uint32_t dw1;
  uint16_t sqhd;
  uint16_t sqid;
  uint16_t cid;
  uint16_t status;   // bit 0 phase; bits 15:1 status field (SC 8:1, SCT 11:9, CRD, M, DNR)
};

// Dataset Management range.
struct DsmRange {
  uint32_t cattr;
  uint32_t nlb;
  uint64_t slba;
};

// Copy (19h), source range entry format 0h (CDW12 bits 11:8 = 0): one source range.
struct CopySourceRange {
  uint8_t rsvd0[8];
  uint64_t slba;
  uint16_t nlb;       // 0's based
  uint8_t rsvd18[6];
  uint32_t eilbrt;    // protection information fields: no protection information here
  uint16_t elbat;
  uint16_t elbatm;
};
#pragma pack(pop)

static_assert(sizeof(CopySourceRange) == 32 && offsetof(CopySourceRange, slba) == 8 &&
              offsetof(CopySourceRange, nlb) == 16);
static_assert(sizeof(SglDescriptor) == 16 && offsetof(SglDescriptor, type) == 15);
static_assert(sizeof(Sqe) == 64);
static_assert(offsetof(Sqe, cid) == 2 && offsetof(Sqe, nsid) == 4);
static_assert(offsetof(Sqe, sgl) == 24 && offsetof(Sqe, cdw10) == 40 && offsetof(Sqe, cdw15) == 60);
static_assert(sizeof(Cqe) == 16 && offsetof(Cqe, sqhd) == 8 && offsetof(Cqe, cid) == 12);
static_assert(offsetof(Cqe, status) == 14);
static_assert(sizeof(DsmRange) == 16);

}  // namespace nvtcp::nvme

// SPDX-License-Identifier: Apache-2.0
// Identify data structures: controller (CNS 01h), namespace (CNS 00h), namespace
// identification descriptors (CNS 03h); the active namespace list (CNS 02h) is a plain
// array of 1024 little-endian NSIDs.
#pragma once
#include <cstddef>
#include <cstdint>

namespace nvtcp::nvme {

enum class Cns : uint8_t {
  Namespace = 0x00,
  Controller = 0x01,
  ActiveNamespaceList = 0x02,
  NamespaceDescriptors = 0x03,
  IoCommandSetNamespace = 0x05,            // command set specific namespace data (CSI in CDW11)
  IoCommandSetController = 0x06,           // NVM command set specific controller data (CSI 0)
  IoCommandSetActiveNamespaceList = 0x07,  // the active list for one command set
  IndependentNamespace = 0x08,             // I/O command set independent namespace data
  IoCommandSetCombinations = 0x1C,         // the I/O command set data structure
};

// Command Set Identifier (CDW11 bits 31:24 of Identify, CDW14 of Get Log Page): NVM.
inline constexpr uint8_t kCsiNvm = 0;
// NSTAT bit 0: the namespace is ready.
inline constexpr uint8_t kNstatReady = 1;

inline constexpr uint32_t kIdentifyLen = 4096;

// ONCS bits: optional NVM commands.
inline constexpr uint16_t kOncsDsm = 1u << 2;
inline constexpr uint16_t kOncsWriteZeroes = 1u << 3;
inline constexpr uint16_t kOncsSaveSelect = 1u << 4;  // Set Features SV, Get Features SEL
inline constexpr uint16_t kOncsCompare = 1u << 0;
inline constexpr uint16_t kOncsVerify = 1u << 7;
inline constexpr uint16_t kOncsCopy = 1u << 8;
// OCFS (Identify Controller): Copy source range format 0h.
inline constexpr uint16_t kOcfsFormat0 = 1u << 0;

// CNS 06h, NVM command set: VSL (byte 0), the largest Verify, as a power of two of the
// minimum memory page size (MDTS's encoding).
struct NvmIdentifyController {
  uint8_t vsl;
  uint8_t wzsl;
  uint8_t wusl;
  uint8_t dmrl;
  uint32_t dmrsl;
  uint64_t dmsl;
  uint8_t rsvd16[4080];
};
// SGLS: SGLs supported (bits 1:0 = 01b), keyed SGLs no, offsets in SGLs (bit 20).
inline constexpr uint32_t kSglsSupported = 0x1 | (1u << 20);
// VWC: a volatile write cache is present (bit 0); Flush with NSID FFFFFFFFh is supported
// and flushes every namespace (bits 2:1 = 11b).
inline constexpr uint8_t kVwcPresent = 1u << 0;
inline constexpr uint8_t kVwcFlushAllNamespaces = 3u << 1;
// CMIC: bit 1, the subsystem may have several controllers; bit 3, it reports ANA.
inline constexpr uint8_t kCmicMultiController = 1u << 1;
inline constexpr uint8_t kCmicAna = 1u << 3;
// ANACAP: the states reported (bits 0-4: optimized, non-optimized, inaccessible, persistent
// loss, change) and bit 6, a namespace's ANAGRPID does not change while it is attached.
inline constexpr uint8_t kAnacapStates = 0x1F;
inline constexpr uint8_t kAnacapGroupIdFixed = 1u << 6;
// ANATT: the longest a group stays in the change state, seconds (nvmet and SPDK say 10).
inline constexpr uint8_t kAnaTransitionSeconds = 10;
inline constexpr uint8_t kCntrlTypeIo = 1;
inline constexpr uint8_t kCntrlTypeDiscovery = 2;

#pragma pack(push, 1)
struct PowerStateDescriptor {
  uint16_t mp;
  uint8_t rsvd1;
  uint8_t flags;
  uint32_t enlat;
  uint32_t exlat;
  uint8_t rrt, rrl, rwt, rwl;
  uint16_t idlp;
  uint8_t ips;
  uint8_t rsvd2;
  uint16_t actp;
  uint8_t apws;
  uint8_t rsvd3[9];
};

struct IdentifyController {
  uint16_t vid;
  uint16_t ssvid;
  char sn[20];       // space padded ASCII
  char mn[40];
  char fr[8];
  uint8_t rab;
  uint8_t ieee[3];
  uint8_t cmic;
  uint8_t mdts;      // max data transfer, power of two in units of the minimum page size (4 KiB)
  uint16_t cntlid;
  uint32_t ver;
  uint32_t rtd3r;
  uint32_t rtd3e;
  uint32_t oaes;
  uint32_t ctratt;
  uint16_t rrls;
  uint8_t rsvd102[9];
  uint8_t cntrltype;
  uint8_t fguid[16];
  uint16_t crdt[3];
  uint8_t rsvd134[119];
  uint8_t nvmsr;
  uint8_t vwci;
  uint8_t mec;
  uint16_t oacs;
  uint8_t acl;       // abort command limit, 0's based
  uint8_t aerl;      // async event request limit, 0's based
  uint8_t frmw;
  uint8_t lpa;
  uint8_t elpe;
  uint8_t npss;
  uint8_t avscc;
  uint8_t apsta;
  uint16_t wctemp;
  uint16_t cctemp;
  uint16_t mtfa;
  uint32_t hmpre;
  uint32_t hmmin;
  uint8_t tnvmcap[16];
  uint8_t unvmcap[16];
  uint32_t rpmbs;
  uint16_t edstt;
  uint8_t dsto;
  uint8_t fwug;
  uint16_t kas;      // keep alive support granularity, 100 ms units
  uint16_t hctma;
  uint16_t mntmt;
  uint16_t mxtmt;
  uint32_t sanicap;
  uint32_t hmminds;
  uint16_t hmmaxd;
  uint16_t nsetidmax;
  uint16_t endgidmax;
  uint8_t anatt;
  uint8_t anacap;
  uint32_t anagrpmax;
  uint32_t nanagrpid;
  uint32_t pels;
  uint16_t domainid;
  uint8_t rsvd358[10];
  uint8_t megcap[16];
  uint8_t rsvd384[128];
  uint8_t sqes;
  uint8_t cqes;
  uint16_t maxcmd;
  uint32_t nn;
  uint16_t oncs;
  uint16_t fuses;
  uint8_t fna;
  uint8_t vwc;
  uint16_t awun;
  uint16_t awupf;
  uint8_t icsvscc;
  uint8_t nwpc;
  uint16_t acwu;
  uint16_t ocfs;
  uint32_t sgls;
  uint32_t mnan;
  uint8_t maxdna[16];
  uint32_t maxcna;
  uint8_t rsvd564[204];
  char subnqn[256];
  uint8_t rsvd1024[768];
  uint32_t ioccsz;   // I/O command capsule size, 16-byte units (64-byte SQE + in-capsule data)
  uint32_t iorcsz;   // I/O response capsule size, 16-byte units
  uint16_t icdoff;
  uint8_t fcatt;
  uint8_t msdbd;
  uint16_t ofcs;
  uint8_t rsvd1806[242];
  PowerStateDescriptor psd[32];
  uint8_t vs[1024];
};

struct LbaFormat {
  uint16_t ms;
  uint8_t lbads;     // log2 of the LBA data size
  uint8_t rp;
};

struct IdentifyNamespace {
  uint64_t nsze;
  uint64_t ncap;
  uint64_t nuse;
  uint8_t nsfeat;
  uint8_t nlbaf;     // 0's based
  uint8_t flbas;
  uint8_t mc;
  uint8_t dpc;
  uint8_t dps;
  uint8_t nmic;
  uint8_t rescap;
  uint8_t fpi;
  uint8_t dlfeat;
  uint16_t nawun;
  uint16_t nawupf;
  uint16_t nacwu;
  uint16_t nabsn;
  uint16_t nabo;
  uint16_t nabspf;
  uint16_t noiob;
  uint8_t nvmcap[16];
  uint16_t npwg;
  uint16_t npwa;
  uint16_t npdg;
  uint16_t npda;
  uint16_t nows;
  uint16_t mssrl;
  uint32_t mcl;
  uint8_t msrc;
  uint8_t rsvd81[11];
  uint32_t anagrpid;
  uint8_t rsvd96[3];
  uint8_t nsattr;
  uint16_t nvmsetid;
  uint16_t endgid;
  uint8_t nguid[16];
  uint8_t eui64[8];
  LbaFormat lbaf[64];
  uint8_t rsvd384[3712];
};

// CNS 08h: what every command set has in common about a namespace.
struct IndependentIdentifyNamespace {
  uint8_t nsfeat;
  uint8_t nmic;
  uint8_t rescap;
  uint8_t fpi;
  uint32_t anagrpid;
  uint8_t nsattr;
  uint8_t rsvd9;
  uint16_t nvmsetid;
  uint16_t endgid;
  uint8_t nstat;
  uint8_t rsvd15[4081];
};

// CNS 1Ch: the I/O command set combinations the controller supports, one 64-bit vector
// each (bit 0: NVM).
struct IoCommandSetVectors {
  uint64_t vector[512];
};

struct NsIdDescriptorHeader {
  uint8_t nidt;      // 1 EUI64, 2 NGUID, 3 UUID, 4 CSI
  uint8_t nidl;
  uint16_t rsvd;
};
#pragma pack(pop)

inline constexpr uint8_t kNidtEui64 = 1, kNidtNguid = 2, kNidtUuid = 3, kNidtCsi = 4;

static_assert(sizeof(PowerStateDescriptor) == 32);
static_assert(sizeof(IdentifyController) == kIdentifyLen);
static_assert(offsetof(IdentifyController, sn) == 4 && offsetof(IdentifyController, mn) == 24);
static_assert(offsetof(IdentifyController, fr) == 64 && offsetof(IdentifyController, mdts) == 77);
static_assert(offsetof(IdentifyController, cntlid) == 78 && offsetof(IdentifyController, ver) == 80);
static_assert(offsetof(IdentifyController, oaes) == 92 && offsetof(IdentifyController, cntrltype) == 111);
static_assert(offsetof(IdentifyController, oacs) == 256 && offsetof(IdentifyController, aerl) == 259);
static_assert(offsetof(IdentifyController, lpa) == 261 && offsetof(IdentifyController, kas) == 320);
static_assert(offsetof(IdentifyController, sqes) == 512 && offsetof(IdentifyController, maxcmd) == 514);
static_assert(offsetof(IdentifyController, nn) == 516 && offsetof(IdentifyController, oncs) == 520);
static_assert(offsetof(IdentifyController, vwc) == 525 && offsetof(IdentifyController, sgls) == 536);
static_assert(offsetof(IdentifyController, anatt) == 342 && offsetof(IdentifyController, anagrpmax) == 344);
static_assert(offsetof(IdentifyController, nanagrpid) == 348 && offsetof(IdentifyController, cmic) == 76);
static_assert(offsetof(IdentifyController, subnqn) == 768);
static_assert(offsetof(IdentifyController, ioccsz) == 1792 && offsetof(IdentifyController, iorcsz) == 1796);
static_assert(offsetof(IdentifyController, msdbd) == 1803 && offsetof(IdentifyController, psd) == 2048);
static_assert(sizeof(IdentifyNamespace) == kIdentifyLen);
static_assert(offsetof(IdentifyNamespace, nlbaf) == 25 && offsetof(IdentifyNamespace, dlfeat) == 33);
static_assert(offsetof(IdentifyNamespace, nvmcap) == 48 && offsetof(IdentifyNamespace, anagrpid) == 92);
static_assert(offsetof(IdentifyNamespace, nguid) == 104 && offsetof(IdentifyNamespace, eui64) == 120);
static_assert(offsetof(IdentifyNamespace, lbaf) == 128);
static_assert(sizeof(IndependentIdentifyNamespace) == kIdentifyLen);
static_assert(offsetof(IndependentIdentifyNamespace, anagrpid) == 4 && offsetof(IndependentIdentifyNamespace, nsattr) == 8);
static_assert(offsetof(IndependentIdentifyNamespace, nvmsetid) == 10 && offsetof(IndependentIdentifyNamespace, nstat) == 14);
static_assert(sizeof(IoCommandSetVectors) == kIdentifyLen);
static_assert(sizeof(NvmIdentifyController) == kIdentifyLen && offsetof(NvmIdentifyController, dmrsl) == 4);

}  // namespace nvtcp::nvme

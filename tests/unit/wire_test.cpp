// SPDX-License-Identifier: Apache-2.0
// Known-bytes tests for the wire structures.
//
// Every expected image below is written by hand from the byte offsets in the NVMe/TCP
// transport specification (PDUs) and the NVMe base / NVMe over Fabrics specifications
// (SQE, CQE, Connect, Identify, log pages), never derived from the structs themselves, so a
// field at the wrong offset, of the wrong width or with the wrong constant breaks a test.
//
// Two directions per structure:
//   build: fill every field with a distinctive value, memcpy out, compare to the image;
//   parse: memcpy a known image in and check each field reads the bytes the specification puts
//          it at; often a "sequential" image (byte k holds k), so bytes 15:12 read 0x0F0E0D0C.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"
#include "nvtcp/properties.hpp"
#include "nvtcp/sqe.hpp"
#include "nvtcp/status.hpp"
#include "wire/changed_namespaces.hpp"
#include "wire/commands.hpp"
#include "wire/digest.hpp"
#include "wire/fabrics.hpp"
#include "wire/features.hpp"
#include "wire/pdu.hpp"

namespace wire_test {

using namespace nvtcp::wire;

namespace {

// Compares the bytes of obj with a whole-structure expected image and names the differing offsets.
template <class T, size_t N>
::testing::AssertionResult SameBytes(const T& obj, const std::array<uint8_t, N>& want) {
  static_assert(sizeof(T) == N, "the expected image must cover the whole structure");
  uint8_t got[N];
  std::memcpy(got, &obj, N);
  std::ostringstream msg;  // AssertionResult does not keep stream manipulators: format here
  int diffs = 0;
  for (size_t i = 0; i < N; ++i) {
    if (got[i] == want[i]) continue;
    if (diffs++ < 12) {
      msg << "byte " << std::dec << i << ": got 0x" << std::hex << int(got[i]) << " want 0x"
          << int(want[i]) << "\n";
    }
  }
  if (diffs == 0) return ::testing::AssertionSuccess();
  msg << std::dec << diffs << " byte(s) differ";
  return ::testing::AssertionFailure() << msg.str();
}

// A T whose byte k holds k & 0xFF.
template <class T>
T Sequential() {
  uint8_t raw[sizeof(T)];
  for (size_t i = 0; i < sizeof(T); ++i) raw[i] = static_cast<uint8_t>(i);
  T t;
  std::memcpy(&t, raw, sizeof(T));
  return t;
}

template <class T, size_t N>
T FromBytes(const std::array<uint8_t, N>& img) {
  static_assert(sizeof(T) == N);
  T t;
  std::memcpy(&t, img.data(), N);
  return t;
}

// Writes a string (without its NUL) at a byte offset of an expected image.
template <size_t N>
void PutAt(std::array<uint8_t, N>& img, size_t off, const std::string& s) {
  ASSERT_LE(off + s.size(), N);
  std::memcpy(img.data() + off, s.data(), s.size());
}

template <size_t N>
void PutStr(char (&field)[N], const std::string& s) {
  ASSERT_LE(s.size(), N);
  std::memcpy(field, s.data(), s.size());
}

// Reads a packed (possibly misaligned) field by value: EXPECT_EQ takes references, and binding a
// reference to a misaligned member is undefined behaviour (UBSan reports it).
template <class V>
V Val(V v) {
  return v;
}

constexpr uint8_t TypeByte(PduType t) { return static_cast<uint8_t>(t); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// NVMe/TCP PDUs
// ---------------------------------------------------------------------------------------------

TEST(WireCommonHeader, Layout) {
  CommonHeader ch{};
  ch.type = TypeByte(PduType::R2T);
  ch.flags = kFlagHdgst | kFlagDdgst;
  ch.hlen = 24;
  ch.pdo = 0x1C;
  ch.plen = 0x0A0B0C0D;
  const std::array<uint8_t, 8> want = {
      0x09,                    // byte 0   PDU-Type: R2T = 09h
      0x03,                    // byte 1   FLAGS: HDGSTF (bit 0) | DDGSTF (bit 1)
      0x18,                    // byte 2   HLEN
      0x1C,                    // byte 3   PDO
      0x0D, 0x0C, 0x0B, 0x0A,  // 7:4     PLEN, little endian
  };
  EXPECT_TRUE(SameBytes(ch, want));

  auto p = Sequential<CommonHeader>();
  EXPECT_EQ(Val(p.type), 0x00);
  EXPECT_EQ(Val(p.flags), 0x01);
  EXPECT_EQ(Val(p.hlen), 0x02);
  EXPECT_EQ(Val(p.pdo), 0x03);
  EXPECT_EQ(Val(p.plen), 0x07060504u);
}

TEST(WireCommonHeader, FlagBitsAndTypeValues) {
  // NVMe/TCP common header FLAGS: HDGSTF bit 0, DDGSTF bit 1, LAST_PDU bit 2, SUCCESS bit 3.
  EXPECT_EQ(kFlagHdgst, 0x01);
  EXPECT_EQ(kFlagDdgst, 0x02);
  EXPECT_EQ(kFlagDataLast, 0x04);
  EXPECT_EQ(kFlagDataSuccess, 0x08);
  // PDU-Type values; 08h is reserved.
  EXPECT_EQ(TypeByte(PduType::ICReq), 0x00);
  EXPECT_EQ(TypeByte(PduType::ICResp), 0x01);
  EXPECT_EQ(TypeByte(PduType::H2CTermReq), 0x02);
  EXPECT_EQ(TypeByte(PduType::C2HTermReq), 0x03);
  EXPECT_EQ(TypeByte(PduType::CapsuleCmd), 0x04);
  EXPECT_EQ(TypeByte(PduType::CapsuleResp), 0x05);
  EXPECT_EQ(TypeByte(PduType::H2CData), 0x06);
  EXPECT_EQ(TypeByte(PduType::C2HData), 0x07);
  EXPECT_EQ(TypeByte(PduType::R2T), 0x09);
  EXPECT_STREQ(pdu_type_name(PduType::R2T), "R2T");
}

TEST(WireICReq, LinuxKernelHostImage) {
  // What the Linux nvme-tcp host sends for `nvme connect -t tcp ... -g -G`:
  // hlen = plen = 128, PFV 1.0, HPDA 0, both digests requested, MAXR2T 0 (0's based: 1 R2T).
  ICReqPdu p{};
  p.ch.type = TypeByte(PduType::ICReq);
  p.ch.hlen = 128;
  p.ch.plen = 128;
  p.pfv = kPfv;
  p.hpda = 0;
  p.digest = 0x03;
  p.maxr2t = 0;
  std::array<uint8_t, 128> want = {
      0x00, 0x00, 0x80, 0x00, 0x80, 0x00, 0x00, 0x00,  // CH: ICReq, flags 0, hlen/plen 128
      0x00, 0x00,                                      // 9:8   PFV 0 (version 1.0)
      0x00,                                            // 10    HPDA
      0x03,                                            // 11    DGST: HDGST_ENABLE | DDGST_ENABLE
      0x00, 0x00, 0x00, 0x00,                          // 15:12 MAXR2T
  };                                                   // 127:16 reserved (zero)
  EXPECT_TRUE(SameBytes(p, want));
}

TEST(WireICReq, BuilderMakesTheLinuxHostImage) {
  // The same bytes as above, from the one builder host and tests use.
  ICReqPdu p = make_icreq(0, true, true, 0);
  std::array<uint8_t, 16> want = {0x00, 0x00, 0x80, 0x00, 0x80, 0x00, 0x00, 0x00,
                                  0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00};
  EXPECT_EQ(std::memcmp(&p, want.data(), want.size()), 0);
  for (size_t i = 16; i < sizeof(p); ++i) EXPECT_EQ(reinterpret_cast<const uint8_t*>(&p)[i], 0) << i;
  EXPECT_EQ(make_icreq(3, false, true, 7).digest, kIcDigestData);
  EXPECT_EQ(make_icreq(3, true, false, 7).digest, kIcDigestHeader);
}

TEST(WireICResp, Builder) {
  // ICResp granting header digest only, CPDA 0, MAXH2CDATA 128 KiB.
  ICRespPdu p = make_icresp(0, true, false, 128u << 10);
  std::array<uint8_t, 16> want = {0x01, 0x00, 0x80, 0x00, 0x80, 0x00, 0x00, 0x00,
                                  0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x02, 0x00};
  EXPECT_EQ(std::memcmp(&p, want.data(), want.size()), 0);
}

TEST(WireDigest, SealHeaderDigestWritesTheCrcAfterTheHeader) {
  // An R2T header (24 bytes) and its digest: the CRC32C of the 24 bytes, little-endian, at 24.
  std::array<uint8_t, 28> pdu{};
  for (size_t i = 0; i < 24; ++i) pdu[i] = uint8_t(i * 3 + 1);
  pdu[24] = pdu[25] = pdu[26] = pdu[27] = 0xEE;
  seal_header_digest(pdu.data(), 24);
  const uint32_t crc = crc32c(pdu.data(), 24);
  EXPECT_EQ(pdu[24], uint8_t(crc));
  EXPECT_EQ(pdu[27], uint8_t(crc >> 24));
  // A receiver's check: the CRC over header and digest is the CRC32C residue.
  Crc32c running;
  running.update(pdu.data(), 24);
  EXPECT_EQ(running.value(), crc);
}

TEST(WireCommands, PropertyGetCapImage) {
  // Property Get of CAP (8 bytes): opcode 7Fh, FCTYPE 04h at byte 4, ATTRIB 1 at 40, OFST 0 at 44.
  Sqe s = cmd::property_get(prop::CAP, true);
  const auto* b = reinterpret_cast<const uint8_t*>(&s);
  EXPECT_EQ(b[0], 0x7F);
  EXPECT_EQ(b[4], 0x04);
  EXPECT_EQ(b[40], 0x01);
  for (size_t i : {1u, 2u, 3u, 44u, 45u, 46u, 47u}) EXPECT_EQ(b[i], 0) << i;
  Sqe v = cmd::property_get(prop::VS, false);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(&v)[40], 0x00);
  EXPECT_EQ(reinterpret_cast<const uint8_t*>(&v)[44], 0x08);
}

TEST(WireCommands, PropertySetCcEnableImage) {
  // Property Set CC = enable with 64-byte SQEs and 16-byte CQEs: 0x00460001 at byte 48.
  Sqe s = cmd::property_set(prop::CC, prop::kCcEnableNvm);
  const auto* b = reinterpret_cast<const uint8_t*>(&s);
  EXPECT_EQ(b[0], 0x7F);
  EXPECT_EQ(b[4], 0x00);
  EXPECT_EQ(b[44], 0x14);
  std::array<uint8_t, 8> want = {0x01, 0x00, 0x46, 0x00, 0, 0, 0, 0};
  EXPECT_EQ(std::memcmp(b + 48, want.data(), want.size()), 0);
  EXPECT_EQ(prop::kCcEnableNvm | prop::kCcShnNormal, 0x00464001u);
}

TEST(WireCommands, ConnectImage) {
  // Connect for I/O queue 3 with 128 entries, KATO 0: in-capsule SGL of 1024 bytes.
  Sqe s = cmd::connect(3, 127, 0);
  const auto* b = reinterpret_cast<const uint8_t*>(&s);
  EXPECT_EQ(b[0], 0x7F);
  EXPECT_EQ(b[1], kSqeFlagsPsdtSgl);
  EXPECT_EQ(b[4], 0x01);
  EXPECT_EQ(s.sgl.length, 1024u);
  EXPECT_EQ(s.sgl.type, kSglDataBlockOffset);
  EXPECT_EQ(b[42], 3);    // QID
  EXPECT_EQ(b[44], 127);  // SQSIZE, 0's based
  uint8_t hostid[16] = {1, 2, 3};
  ConnectData d = cmd::connect_data(hostid, 0xFFFF, "nqn.a", "nqn.b");
  EXPECT_EQ(d.hostid[2], 3);
  EXPECT_EQ(d.cntlid, 0xFFFF);
  EXPECT_STREQ(d.subnqn, "nqn.a");
  EXPECT_STREQ(d.hostnqn, "nqn.b");
}

TEST(WireCommands, AdminDwords) {
  Sqe id = cmd::identify(uint8_t(Cns::Namespace), 5);
  EXPECT_EQ(id.opc, 0x06);
  EXPECT_EQ(id.nsid, 5u);
  EXPECT_EQ(id.cdw10, 0u);
  // Get Log Page 04h, 4096 bytes (NUMD 1023), RAE 1, offset 2^32 + 8.
  Sqe lp = cmd::get_log_page(0x04, kNsidAll, 4096, (1ull << 32) + 8, true);
  EXPECT_EQ(lp.opc, 0x02);
  EXPECT_EQ(lp.cdw10, 0x03FF8004u);
  EXPECT_EQ(lp.cdw11, 0u);
  EXPECT_EQ(lp.cdw12, 8u);
  EXPECT_EQ(lp.cdw13, 1u);
  Sqe nq = cmd::set_number_of_queues(4, 2);
  EXPECT_EQ(nq.opc, 0x09);
  EXPECT_EQ(nq.cdw10, 0x07u);
  EXPECT_EQ(nq.cdw11, 0x00010003u);
  Sqe gf = cmd::get_features(kFeatureVolatileWriteCache, kSelSupportedCapabilities);
  EXPECT_EQ(gf.cdw10, 0x306u);
  EXPECT_EQ(cmd::set_features(kFeatureKeepAliveTimer, 5000, true).cdw10, 0x8000000Fu);
  Sqe ab = cmd::abort(2, 0x1234);
  EXPECT_EQ(ab.opc, 0x08);
  EXPECT_EQ(ab.cdw10, 0x12340002u);
  EXPECT_EQ(cmd::keep_alive().opc, 0x18);
  EXPECT_EQ(cmd::async_event_request().opc, 0x0C);
}

TEST(WireCommands, IoDwords) {
  // Write of 8 blocks at LBA 2^33 + 1 with FUA.
  Sqe w = cmd::block_range(IoOpcode::Write, 1, (1ull << 33) + 1, 8, Sqe::kRwFua);
  EXPECT_EQ(w.opc, 0x01);
  EXPECT_EQ(w.cdw10, 1u);
  EXPECT_EQ(w.cdw11, 2u);
  EXPECT_EQ(w.cdw12, 0x40000007u);
  EXPECT_EQ(w.slba(), (1ull << 33) + 1);
  EXPECT_EQ(w.nlb(), 8u);
  Sqe d = cmd::deallocate(1, 3);
  EXPECT_EQ(d.opc, 0x09);
  EXPECT_EQ(d.cdw10, 2u);
  EXPECT_EQ(d.cdw11, 0x4u);
  EXPECT_EQ(cmd::flush(kNsidAll).nsid, 0xFFFFFFFFu);
}

TEST(WireICReq, FieldOffsets) {
  ICReqPdu p{};
  p.ch.type = TypeByte(PduType::ICReq);
  p.ch.hlen = 128;
  p.ch.plen = 128;
  p.pfv = 0xA1B2;
  p.hpda = 0x1F;
  p.digest = 0x02;
  p.maxr2t = 0x0C0D0E0F;
  std::array<uint8_t, 128> want = {
      0x00, 0x00, 0x80, 0x00, 0x80, 0x00, 0x00, 0x00,  // CH
      0xB2, 0xA1,                                      // 9:8   PFV
      0x1F,                                            // 10    HPDA
      0x02,                                            // 11    DGST: DDGST_ENABLE only
      0x0F, 0x0E, 0x0D, 0x0C,                          // 15:12 MAXR2T
  };
  EXPECT_TRUE(SameBytes(p, want));

  auto q = Sequential<ICReqPdu>();
  EXPECT_EQ(Val(q.ch.plen), 0x07060504u);
  EXPECT_EQ(Val(q.pfv), 0x0908);
  EXPECT_EQ(Val(q.hpda), 0x0A);
  EXPECT_EQ(Val(q.digest), 0x0B);
  EXPECT_EQ(Val(q.maxr2t), 0x0F0E0D0Cu);
  EXPECT_EQ(Val(q.rsvd[0]), 0x10);  // reserved area starts at byte 16
  EXPECT_EQ(Val(q.rsvd[111]), 0x7F);
}

TEST(WireICResp, FieldOffsets) {
  ICRespPdu p{};
  p.ch.type = TypeByte(PduType::ICResp);
  p.ch.hlen = 128;
  p.ch.plen = 128;
  p.pfv = 0x5A6B;
  p.cpda = 0x07;
  p.digest = 0x01;
  p.maxh2cdata = 0x00A1B2C4;
  std::array<uint8_t, 128> want = {
      0x01, 0x00, 0x80, 0x00, 0x80, 0x00, 0x00, 0x00,  // CH: type 01h, hlen 128, plen 128
      0x6B, 0x5A,                                      // 9:8   PFV
      0x07,                                            // 10    CPDA (0's based dwords: 32 bytes)
      0x01,                                            // 11    DGST: HDGST_ENABLE
      0xC4, 0xB2, 0xA1, 0x00,                          // 15:12 MAXH2CDATA
  };
  EXPECT_TRUE(SameBytes(p, want));

  auto q = Sequential<ICRespPdu>();
  EXPECT_EQ(Val(q.pfv), 0x0908);
  EXPECT_EQ(Val(q.cpda), 0x0A);
  EXPECT_EQ(Val(q.digest), 0x0B);
  EXPECT_EQ(Val(q.maxh2cdata), 0x0F0E0D0Cu);
}

TEST(WireTermReq, C2HTermReqImage) {
  // Controller rejects a CapsuleCmd whose HLEN (byte 2) was wrong: FES 01h, FEI = offset 2,
  // followed by the 72-byte offending header as data.
  TermReqPdu p{};
  p.ch.type = TypeByte(PduType::C2HTermReq);
  p.ch.hlen = 24;
  p.ch.pdo = 24;
  p.ch.plen = 24 + 72;
  p.fes = static_cast<uint16_t>(Fes::InvalidHeaderField);
  p.fei = 2;
  const std::array<uint8_t, 24> want = {
      0x03, 0x00, 0x18, 0x18, 0x60, 0x00, 0x00, 0x00,  // CH: type 03h, hlen 24, pdo 24, plen 96
      0x01, 0x00,                                      // 9:8   FES: Invalid PDU Header Field
      0x02, 0x00, 0x00, 0x00,                          // 13:10 FEI: byte offset of the bad field
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0,                    // 23:14 reserved
  };
  EXPECT_TRUE(SameBytes(p, want));
}

TEST(WireTermReq, FieldOffsets) {
  TermReqPdu p{};
  p.ch.type = TypeByte(PduType::H2CTermReq);
  p.ch.hlen = 24;
  p.ch.plen = 24;
  p.fes = 0x0605;
  p.fei = 0x44332211;
  const std::array<uint8_t, 24> want = {
      0x02, 0x00, 0x18, 0x00, 0x18, 0x00, 0x00, 0x00,  // CH: type 02h, hlen 24, pdo 0, plen 24
      0x05, 0x06,                                      // 9:8   FES
      0x11, 0x22, 0x33, 0x44,                          // 13:10 FEI (not dword aligned!)
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0,                    // 23:14 reserved
  };
  EXPECT_TRUE(SameBytes(p, want));

  auto q = Sequential<TermReqPdu>();
  EXPECT_EQ(Val(q.fes), 0x0908);
  EXPECT_EQ(Val(q.fei), 0x0D0C0B0Au);
  EXPECT_EQ(Val(q.rsvd[0]), 0x0E);
}

TEST(WireTermReq, FesValues) {
  // NVMe/TCP Fatal Error Status values.
  EXPECT_EQ(static_cast<uint16_t>(Fes::InvalidHeaderField), 0x01);
  EXPECT_EQ(static_cast<uint16_t>(Fes::PduSequenceError), 0x02);
  EXPECT_EQ(static_cast<uint16_t>(Fes::HeaderDigestError), 0x03);
  EXPECT_EQ(static_cast<uint16_t>(Fes::DataOutOfRange), 0x04);
  EXPECT_EQ(static_cast<uint16_t>(Fes::DataLimitExceeded), 0x05);
  EXPECT_EQ(static_cast<uint16_t>(Fes::UnsupportedParameter), 0x06);
  EXPECT_STREQ(fes_name(Fes::HeaderDigestError, PduType::C2HTermReq), "header digest error");
}

TEST(WireTermReq, FesFiveIsNamedByDirection) {
  // 05h is "R2T Limit Exceeded" when a host sends it and "Data Transfer Limit Exceeded" when a
  // controller does.
  EXPECT_EQ(uint16_t(Fes::R2TLimitExceeded), 0x05);
  EXPECT_STREQ(fes_name(Fes::R2TLimitExceeded, PduType::H2CTermReq), "R2T limit exceeded");
  EXPECT_STREQ(fes_name(Fes::DataLimitExceeded, PduType::C2HTermReq), "data transfer limit exceeded");
  EXPECT_STREQ(fes_name(Fes::HeaderDigestError, PduType::H2CTermReq), "header digest error");
}

TEST(WireH2CData, FieldOffsets) {
  // Last H2CData of a write, header and data digests on: plen = 24 + 4 + 4096 + 4.
  H2CDataPdu p{};
  p.ch.type = TypeByte(PduType::H2CData);
  p.ch.flags = kFlagHdgst | kFlagDdgst | kFlagDataLast;
  p.ch.hlen = 24;
  p.ch.pdo = 28;
  p.ch.plen = 24 + 4 + 4096 + 4;
  p.cccid = 0x1A2B;
  p.ttag = 0x3C4D;
  p.datao = 0x00123000;
  p.datal = 0x1000;
  const std::array<uint8_t, 24> want = {
      0x06, 0x07, 0x18, 0x1C, 0x20, 0x10, 0x00, 0x00,  // CH: 06h, HDGSTF|DDGSTF|LAST, plen 4128
      0x2B, 0x1A,                                      // 9:8   CCCID
      0x4D, 0x3C,                                      // 11:10 TTAG
      0x00, 0x30, 0x12, 0x00,                          // 15:12 DATAO
      0x00, 0x10, 0x00, 0x00,                          // 19:16 DATAL
      0x00, 0x00, 0x00, 0x00,                          // 23:20 reserved
  };
  EXPECT_TRUE(SameBytes(p, want));

  auto q = Sequential<H2CDataPdu>();
  EXPECT_EQ(Val(q.cccid), 0x0908);
  EXPECT_EQ(Val(q.ttag), 0x0B0A);
  EXPECT_EQ(Val(q.datao), 0x0F0E0D0Cu);
  EXPECT_EQ(Val(q.datal), 0x13121110u);
}

TEST(WireC2HData, FieldOffsets) {
  // Read data that also completes the command (SUCCESS requires LAST_PDU).
  C2HDataPdu p{};
  p.ch.type = TypeByte(PduType::C2HData);
  p.ch.flags = kFlagDataLast | kFlagDataSuccess;
  p.ch.hlen = 24;
  p.ch.pdo = 24;
  p.ch.plen = 24 + 512;
  p.cccid = 0x00C5;
  p.datao = 0x00ABCDE0;
  p.datal = 0x200;
  const std::array<uint8_t, 24> want = {
      0x07, 0x0C, 0x18, 0x18, 0x18, 0x02, 0x00, 0x00,  // CH: type 07h, LAST_PDU|SUCCESS, plen 536
      0xC5, 0x00,                                      // 9:8   CCCID
      0x00, 0x00,                                      // 11:10 reserved (no TTAG in C2HData)
      0xE0, 0xCD, 0xAB, 0x00,                          // 15:12 DATAO
      0x00, 0x02, 0x00, 0x00,                          // 19:16 DATAL
      0x00, 0x00, 0x00, 0x00,                          // 23:20 reserved
  };
  EXPECT_TRUE(SameBytes(p, want));

  auto q = Sequential<C2HDataPdu>();
  EXPECT_EQ(Val(q.cccid), 0x0908);
  EXPECT_EQ(Val(q.rsvd1), 0x0B0A);
  EXPECT_EQ(Val(q.datao), 0x0F0E0D0Cu);
  EXPECT_EQ(Val(q.datal), 0x13121110u);
}

TEST(WireR2T, FieldOffsets) {
  R2TPdu p{};
  p.ch.type = TypeByte(PduType::R2T);
  p.ch.flags = kFlagHdgst;
  p.ch.hlen = 24;
  p.ch.pdo = 0;
  p.ch.plen = 28;  // header + header digest, no data
  p.cccid = 0x5A5B;
  p.ttag = 0x0107;
  p.r2to = 0x00010000;
  p.r2tl = 0x00020000;
  const std::array<uint8_t, 24> want = {
      0x09, 0x01, 0x18, 0x00, 0x1C, 0x00, 0x00, 0x00,  // CH: 09h, HDGSTF, hlen 24, plen 28
      0x5B, 0x5A,                                      // 9:8   CCCID
      0x07, 0x01,                                      // 11:10 TTAG
      0x00, 0x00, 0x01, 0x00,                          // 15:12 R2TO
      0x00, 0x00, 0x02, 0x00,                          // 19:16 R2TL
      0x00, 0x00, 0x00, 0x00,                          // 23:20 reserved
  };
  EXPECT_TRUE(SameBytes(p, want));

  auto q = Sequential<R2TPdu>();
  EXPECT_EQ(Val(q.cccid), 0x0908);
  EXPECT_EQ(Val(q.ttag), 0x0B0A);
  EXPECT_EQ(Val(q.r2to), 0x0F0E0D0Cu);
  EXPECT_EQ(Val(q.r2tl), 0x13121110u);
}

TEST(WirePdu, ExpectedHlen) {
  // Fixed HLEN of each PDU type (NVMe/TCP PDU definitions).
  EXPECT_EQ(expected_hlen(PduType::ICReq), 128);
  EXPECT_EQ(expected_hlen(PduType::ICResp), 128);
  EXPECT_EQ(expected_hlen(PduType::H2CTermReq), 24);
  EXPECT_EQ(expected_hlen(PduType::C2HTermReq), 24);
  EXPECT_EQ(expected_hlen(PduType::CapsuleCmd), 72);  // 8 CH + 64 SQE
  EXPECT_EQ(expected_hlen(PduType::CapsuleResp), 24);  // 8 CH + 16 CQE
  EXPECT_EQ(expected_hlen(PduType::H2CData), 24);
  EXPECT_EQ(expected_hlen(PduType::C2HData), 24);
  EXPECT_EQ(expected_hlen(PduType::R2T), 24);
  EXPECT_EQ(expected_hlen(static_cast<PduType>(0x08)), 0);  // reserved type
  EXPECT_EQ(expected_hlen(static_cast<PduType>(0x0A)), 0);
  EXPECT_EQ(expected_hlen(static_cast<PduType>(0xFF)), 0);
}

TEST(WirePdu, DataOffset) {
  // PDO = hlen (+ 4 with header digest), padded up to a multiple of (PDA + 1) * 4 bytes.
  EXPECT_EQ(data_offset(24, false, 0), 24u);   // C2HData, no digest
  EXPECT_EQ(data_offset(24, true, 0), 28u);    // 24 + HDGST
  EXPECT_EQ(data_offset(72, false, 0), 72u);   // CapsuleCmd in-capsule data
  EXPECT_EQ(data_offset(72, true, 0), 76u);    // 72 + HDGST
  EXPECT_EQ(data_offset(72, true, 3), 80u);    // 76 -> next multiple of 16
  EXPECT_EQ(data_offset(72, false, 3), 80u);   // 72 -> next multiple of 16
  EXPECT_EQ(data_offset(24, false, 1), 24u);   // already a multiple of 8
  EXPECT_EQ(data_offset(24, true, 1), 32u);    // 28 -> next multiple of 8
  EXPECT_EQ(data_offset(24, true, 2), 36u);    // 28 -> next multiple of 12 (not a power of two)
  EXPECT_EQ(data_offset(72, false, 2), 72u);   // 72 is already a multiple of 12
  EXPECT_EQ(data_offset(72, true, 4), 80u);    // 76 -> next multiple of 20
  EXPECT_EQ(data_offset(24, true, 31), 128u);  // HPDA max: 128-byte alignment
  EXPECT_EQ(data_offset(72, true, 31), 128u);
  EXPECT_EQ(kMaxHeaderBytes, 132u);
}

// ---------------------------------------------------------------------------------------------
// Capsules: SQE, CQE, SGL, Connect and the other fabrics commands
// ---------------------------------------------------------------------------------------------

TEST(WireSqe, EveryFieldOffset) {
  // Each field's bytes number their own offset: byte k of the SQE is 0xA0 + k.
  Sqe s{};
  s.opc = 0xA0;                     // byte 0      OPC
  s.flags = 0xA1;                   // byte 1      FUSE 1:0, PSDT 7:6
  s.cid = 0xA3A2;                   // 3:2         CID
  s.nsid = 0xA7A6A5A4;              // 7:4         NSID
  s.cdw2 = 0xABAAA9A8;              // 11:8
  s.cdw3 = 0xAFAEADAC;              // 15:12
  s.mptr = 0xB7B6B5B4B3B2B1B0ull;   // 23:16       MPTR
  s.sgl.addr = 0xBFBEBDBCBBBAB9B8ull;  // 31:24    SGL1 address
  s.sgl.length = 0xC3C2C1C0;        // 35:32       SGL1 length
  s.sgl.rsvd[0] = 0xC4;
  s.sgl.rsvd[1] = 0xC5;
  s.sgl.rsvd[2] = 0xC6;
  s.sgl.type = 0xC7;                // 39          SGL identifier
  s.cdw10 = 0xCBCAC9C8;             // 43:40
  s.cdw11 = 0xCFCECDCC;             // 47:44
  s.cdw12 = 0xD3D2D1D0;             // 51:48
  s.cdw13 = 0xD7D6D5D4;             // 55:52
  s.cdw14 = 0xDBDAD9D8;             // 59:56
  s.cdw15 = 0xDFDEDDDC;             // 63:60
  const std::array<uint8_t, 64> want = {
      0xA0, 0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7,
      0xA8, 0xA9, 0xAA, 0xAB, 0xAC, 0xAD, 0xAE, 0xAF,
      0xB0, 0xB1, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7,
      0xB8, 0xB9, 0xBA, 0xBB, 0xBC, 0xBD, 0xBE, 0xBF,
      0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0xC7,
      0xC8, 0xC9, 0xCA, 0xCB, 0xCC, 0xCD, 0xCE, 0xCF,
      0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7,
      0xD8, 0xD9, 0xDA, 0xDB, 0xDC, 0xDD, 0xDE, 0xDF,
  };
  EXPECT_TRUE(SameBytes(s, want));
  EXPECT_EQ(s.fctype(), 0xA4);  // fabrics commands: FCTYPE is byte 4
}

TEST(WireSqe, ReadCommandImage) {
  // Read of 16 blocks at SLBA 0x1122334455667788, data by C2HData (Transport SGL Data Block).
  Sqe s{};
  s.opc = static_cast<uint8_t>(IoOpcode::Read);
  s.flags = kSqeFlagsPsdtSgl;
  s.cid = 0x1A2B;
  s.nsid = 1;
  s.sgl.length = 16 * 512;
  s.sgl.type = kSglTransportDataBlock;
  s.cdw10 = 0x55667788;  // SLBA low
  s.cdw11 = 0x11223344;  // SLBA high
  s.cdw12 = 15;          // NLB, 0's based
  const std::array<uint8_t, 64> want = {
      0x02, 0x40, 0x2B, 0x1A,  // OPC Read 02h, PSDT=01b (SGL), CID
      0x01, 0x00, 0x00, 0x00,  // NSID 1
      0, 0, 0, 0, 0, 0, 0, 0,  // CDW2, CDW3
      0, 0, 0, 0, 0, 0, 0, 0,  // MPTR
      0, 0, 0, 0, 0, 0, 0, 0,  // SGL1 address (0 for a transport data block)
      0x00, 0x20, 0x00, 0x00,  // SGL1 length 8192
      0x00, 0x00, 0x00,        // reserved
      0x5A,                    // SGL identifier: type 5h (Transport SGL Data Block), subtype Ah
      0x88, 0x77, 0x66, 0x55,  // CDW10: SLBA 31:0
      0x44, 0x33, 0x22, 0x11,  // CDW11: SLBA 63:32
      0x0F, 0x00, 0x00, 0x00,  // CDW12: NLB 15:0
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  // CDW13..15
  };
  EXPECT_TRUE(SameBytes(s, want));
  EXPECT_EQ(s.slba(), 0x1122334455667788ull);
  EXPECT_EQ(s.nlb(), 16u);
}

TEST(WireSqe, ParseWriteSlbaNlb) {
  std::array<uint8_t, 64> img{};
  img[0] = 0x01;  // Write
  img[40] = 0xEF; img[41] = 0xCD; img[42] = 0xAB; img[43] = 0x89;  // CDW10
  img[44] = 0x67; img[45] = 0x45; img[46] = 0x23; img[47] = 0x01;  // CDW11
  img[48] = 0xFF; img[49] = 0xFF;                                  // NLB 0xFFFF -> 65536 blocks
  img[51] = 0x40;                                                  // CDW12 bit 30 FUA, not NLB
  auto s = FromBytes<Sqe>(img);
  EXPECT_EQ(Val(s.opc), static_cast<uint8_t>(IoOpcode::Write));
  EXPECT_EQ(s.slba(), 0x0123456789ABCDEFull);
  EXPECT_EQ(s.nlb(), 65536u);
}

TEST(WireSqe, OpcodeAndSglConstants) {
  EXPECT_EQ(static_cast<uint8_t>(AdminOpcode::GetLogPage), 0x02);
  EXPECT_EQ(static_cast<uint8_t>(AdminOpcode::Identify), 0x06);
  EXPECT_EQ(static_cast<uint8_t>(AdminOpcode::Abort), 0x08);
  EXPECT_EQ(static_cast<uint8_t>(AdminOpcode::SetFeatures), 0x09);
  EXPECT_EQ(static_cast<uint8_t>(AdminOpcode::GetFeatures), 0x0A);
  EXPECT_EQ(static_cast<uint8_t>(AdminOpcode::AsyncEventRequest), 0x0C);
  EXPECT_EQ(static_cast<uint8_t>(AdminOpcode::KeepAlive), 0x18);
  EXPECT_EQ(static_cast<uint8_t>(AdminOpcode::Fabrics), 0x7F);
  EXPECT_EQ(static_cast<uint8_t>(IoOpcode::Flush), 0x00);
  EXPECT_EQ(static_cast<uint8_t>(IoOpcode::Write), 0x01);
  EXPECT_EQ(static_cast<uint8_t>(IoOpcode::Read), 0x02);
  EXPECT_EQ(static_cast<uint8_t>(IoOpcode::WriteZeroes), 0x08);
  EXPECT_EQ(static_cast<uint8_t>(IoOpcode::DatasetManagement), 0x09);
  // SGL identifier: type in 7:4, subtype in 3:0.
  EXPECT_EQ(kSglDataBlockOffset, (0x0 << 4) | 0x1);     // Data Block, Offset
  EXPECT_EQ(kSglTransportDataBlock, (0x5 << 4) | 0xA);  // Transport SGL Data Block, subtype Ah
  EXPECT_EQ(kSqeFlagsPsdtSgl, 0b01 << 6);
}

TEST(WireSgl, InCapsuleDescriptorImage) {
  SglDescriptor d{};
  d.addr = 0;  // offset from the start of the in-capsule data (ICDOFF 0)
  d.length = 0x0400;
  d.type = kSglDataBlockOffset;
  const std::array<uint8_t, 16> want = {
      0, 0, 0, 0, 0, 0, 0, 0,  // 7:0   address / offset
      0x00, 0x04, 0x00, 0x00,  // 11:8  length 1024
      0x00, 0x00, 0x00,        // 14:12 reserved
      0x01,                    // 15    SGL identifier
  };
  EXPECT_TRUE(SameBytes(d, want));
}

TEST(WireCqe, EveryFieldOffset) {
  Cqe c{};
  c.dw0 = 0x03020100;  // 3:0    DW0 (command specific)
  c.dw1 = 0x07060504;  // 7:4    DW1
  c.sqhd = 0x0908;     // 9:8    SQ head pointer
  c.sqid = 0x0B0A;     // 11:10  SQ identifier
  c.cid = 0x0D0C;      // 13:12  command identifier
  c.status = 0x0F0E;   // 15:14  phase (bit 0) + status field
  const std::array<uint8_t, 16> want = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                                        0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F};
  EXPECT_TRUE(SameBytes(c, want));
}

TEST(WireDsmRange, Layout) {
  DsmRange r{};
  r.cattr = 0x03020100;              // 3:0   context attributes
  r.nlb = 0x07060504;                // 7:4   length in logical blocks
  r.slba = 0x0F0E0D0C0B0A0908ull;    // 15:8  starting LBA
  const std::array<uint8_t, 16> want = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
                                        0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F};
  EXPECT_TRUE(SameBytes(r, want));
}

TEST(WireConnect, CapsuleImage) {
  // Admin-queue Connect as the Linux host builds it: CapsuleCmd with 1 KiB in-capsule data,
  // no digests, SGL Data Block (Offset) pointing at the in-capsule data.
  ConnectCmd c{};
  c.opc = static_cast<uint8_t>(AdminOpcode::Fabrics);
  c.flags = kSqeFlagsPsdtSgl;
  c.cid = 0xBEEF;
  c.fctype = static_cast<uint8_t>(FabricsType::Connect);
  c.sgl.addr = 0;
  c.sgl.length = kConnectDataLen;
  c.sgl.type = kSglDataBlockOffset;
  c.recfmt = 0;
  c.qid = 0x0003;
  c.sqsize = 0x007F;  // 0's based: 128 entries
  c.cattr = kConnectAttrDisableSqFlow;
  c.kato = 5000;      // ms

  CapsuleCmdHeader h{};
  h.ch.type = TypeByte(PduType::CapsuleCmd);
  h.ch.hlen = 72;
  h.ch.pdo = static_cast<uint8_t>(data_offset(72, false, 0));
  h.ch.plen = 72 + kConnectDataLen;
  std::memcpy(h.sqe, &c, sizeof(c));

  const std::array<uint8_t, 72> want = {
      // NVMe/TCP common header
      0x04, 0x00, 0x48, 0x48,  // type CapsuleCmd, flags 0, hlen 72, pdo 72
      0x48, 0x04, 0x00, 0x00,  // plen 1096
      // SQE (PDU byte 8 = SQE byte 0)
      0x7F, 0x40, 0xEF, 0xBE,  // OPC 7Fh, PSDT=01b, CID
      0x01,                    // SQE byte 4: FCTYPE Connect
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  // SQE 23:5 reserved
      0, 0, 0, 0, 0, 0, 0, 0,  // SQE 31:24 SGL1 address 0
      0x00, 0x04, 0x00, 0x00,  // SQE 35:32 SGL1 length 1024
      0x00, 0x00, 0x00,        // SQE 38:36 reserved
      0x01,                    // SQE 39    SGL identifier: Data Block, Offset
      0x00, 0x00,              // SQE 41:40 RECFMT 0
      0x03, 0x00,              // SQE 43:42 QID
      0x7F, 0x00,              // SQE 45:44 SQSIZE
      0x04,                    // SQE 46    CATTR bit 2: disable SQ flow control
      0x00,                    // SQE 47    reserved
      0x88, 0x13, 0x00, 0x00,  // SQE 51:48 KATO 5000
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  // SQE 63:52 reserved
  };
  EXPECT_TRUE(SameBytes(h, want));

  // Parsed back as a generic SQE, the fabrics fields land where the target looks for them.
  Sqe s;
  std::memcpy(&s, h.sqe, sizeof(s));
  EXPECT_EQ(Val(s.opc), 0x7F);
  EXPECT_EQ(s.fctype(), 0x01);
  EXPECT_EQ(Val(s.sgl.type), kSglDataBlockOffset);
  EXPECT_EQ(Val(s.sgl.length), 1024u);
  EXPECT_EQ(Val(s.cdw10), 0x00030000u);  // RECFMT 15:0, QID 31:16
  EXPECT_EQ(Val(s.cdw11), 0x0004007Fu);  // SQSIZE 15:0, CATTR 23:16
  EXPECT_EQ(Val(s.cdw12), 5000u);        // KATO
}

TEST(WireConnect, DataImage) {
  const std::string subnqn = "nqn.2014-08.org.nvmexpress.discovery";
  const std::string hostnqn =
      "nqn.2014-08.org.nvmexpress:uuid:9e1b8f2c-3b1a-4c55-9d0e-2f5a6b7c8d9e";
  ConnectData d{};
  for (int i = 0; i < 16; ++i) d.hostid[i] = static_cast<uint8_t>(0xA0 + i);
  d.cntlid = kDynamicCntlid;
  PutStr(d.subnqn, subnqn);
  PutStr(d.hostnqn, hostnqn);

  std::array<uint8_t, 1024> want{};
  const uint8_t hostid[16] = {0xA0, 0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7,
                              0xA8, 0xA9, 0xAA, 0xAB, 0xAC, 0xAD, 0xAE, 0xAF};
  std::memcpy(want.data(), hostid, 16);  // 15:0    HOSTID
  want[16] = 0xFF;                       // 17:16   CNTLID FFFFh: dynamic controller
  want[17] = 0xFF;
  PutAt(want, 256, subnqn);              // 511:256 SUBNQN
  PutAt(want, 512, hostnqn);             // 767:512 HOSTNQN
  EXPECT_TRUE(SameBytes(d, want));
  EXPECT_EQ(kConnectDataLen, 1024u);

  // Parse: a target reads CNTLID and the NQNs from these offsets.
  std::array<uint8_t, 1024> img{};
  img[16] = 0x34; img[17] = 0x12;
  PutAt(img, 256, "nqn.a");
  PutAt(img, 512, "nqn.b");
  auto q = FromBytes<ConnectData>(img);
  EXPECT_EQ(Val(q.cntlid), 0x1234);
  EXPECT_STREQ(q.subnqn, "nqn.a");
  EXPECT_STREQ(q.hostnqn, "nqn.b");
}

TEST(WireConnect, WholePduOnTheWire) {
  // Header + in-capsule data at PDO, as one buffer: check the offsets a dissector would use.
  ConnectCmd c{};
  c.opc = 0x7F;
  c.flags = kSqeFlagsPsdtSgl;
  c.fctype = static_cast<uint8_t>(FabricsType::Connect);
  c.sgl.length = kConnectDataLen;
  c.sgl.type = kSglDataBlockOffset;
  c.sqsize = 31;
  ConnectData d{};
  d.cntlid = 0x1234;
  PutStr(d.subnqn, "nqn.test:sub");
  PutStr(d.hostnqn, "nqn.test:host");
  CapsuleCmdHeader h{};
  h.ch.type = TypeByte(PduType::CapsuleCmd);
  h.ch.hlen = 72;
  h.ch.pdo = 72;
  h.ch.plen = 72 + 1024;
  std::memcpy(h.sqe, &c, sizeof(c));
  std::vector<uint8_t> pdu(h.ch.plen);
  std::memcpy(pdu.data(), &h, sizeof(h));
  std::memcpy(pdu.data() + h.ch.pdo, &d, sizeof(d));

  EXPECT_EQ(pdu[8 + 0], 0x7F);                  // SQE OPC
  EXPECT_EQ(pdu[8 + 4], 0x01);                  // FCTYPE
  EXPECT_EQ(pdu[8 + 39], 0x01);                 // SGL identifier
  EXPECT_EQ(pdu[8 + 44], 31);                   // SQSIZE low byte
  EXPECT_EQ(pdu[72 + 16], 0x34);                // CNTLID
  EXPECT_EQ(pdu[72 + 17], 0x12);
  EXPECT_EQ(std::memcmp(&pdu[72 + 256], "nqn.test:sub", 13), 0);   // SUBNQN, NUL terminated
  EXPECT_EQ(std::memcmp(&pdu[72 + 512], "nqn.test:host", 14), 0);  // HOSTNQN
}

TEST(WireFabrics, PropertyGetImage) {
  PropertyGetCmd g{};
  g.opc = 0x7F;
  g.cid = 0x0A0B;
  g.fctype = static_cast<uint8_t>(FabricsType::PropertyGet);
  g.attrib = 1;  // 8-byte property
  g.ofst = prop::CAP;
  std::array<uint8_t, 64> want{};
  want[0] = 0x7F;                       // OPC
  want[2] = 0x0B; want[3] = 0x0A;       // CID
  want[4] = 0x04;                       // FCTYPE Property Get
  want[40] = 0x01;                      // ATTRIB: size 8 bytes
  EXPECT_TRUE(SameBytes(g, want));      // OFST 47:44 = 0 (CAP)

  g.attrib = 0;
  g.ofst = prop::CSTS;
  want[40] = 0x00;
  want[44] = 0x1C;                      // OFST: CSTS at 1Ch
  EXPECT_TRUE(SameBytes(g, want));
}

TEST(WireFabrics, PropertySetImage) {
  PropertySetCmd p{};
  p.opc = 0x7F;
  p.cid = 0x0102;
  p.fctype = static_cast<uint8_t>(FabricsType::PropertySet);
  p.attrib = 1;
  p.ofst = 0x00ABCDEF;
  p.value = 0x8877665544332211ull;
  const std::array<uint8_t, 64> want = {
      0x7F, 0x00, 0x02, 0x01, 0x00,  // OPC, reserved, CID, FCTYPE 00h Property Set
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,          // 23:5 reserved
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,                   // 39:24 reserved
      0x01, 0x00, 0x00, 0x00,                          // 40 ATTRIB, 43:41 reserved
      0xEF, 0xCD, 0xAB, 0x00,                          // 47:44 OFST
      0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,  // 55:48 VALUE
      0, 0, 0, 0, 0, 0, 0, 0,                          // 63:56 reserved
  };
  EXPECT_TRUE(SameBytes(p, want));
}

TEST(WireFabrics, DisconnectAndTypes) {
  DisconnectCmd d{};
  d.opc = 0x7F;
  d.cid = 0x0033;
  d.fctype = static_cast<uint8_t>(FabricsType::Disconnect);
  d.recfmt = 0x0201;
  std::array<uint8_t, 64> want{};
  want[0] = 0x7F;
  want[2] = 0x33;
  want[4] = 0x08;                  // FCTYPE Disconnect
  want[40] = 0x01; want[41] = 0x02;  // 41:40 RECFMT
  EXPECT_TRUE(SameBytes(d, want));

  EXPECT_EQ(static_cast<uint8_t>(FabricsType::PropertySet), 0x00);
  EXPECT_EQ(static_cast<uint8_t>(FabricsType::Connect), 0x01);
  EXPECT_EQ(static_cast<uint8_t>(FabricsType::PropertyGet), 0x04);
  EXPECT_EQ(static_cast<uint8_t>(FabricsType::AuthSend), 0x05);
  EXPECT_EQ(static_cast<uint8_t>(FabricsType::AuthReceive), 0x06);
  EXPECT_EQ(static_cast<uint8_t>(FabricsType::Disconnect), 0x08);
  EXPECT_STREQ(kDiscoveryNqn, "nqn.2014-08.org.nvmexpress.discovery");
  EXPECT_EQ(kDiscoveryPort, 8009);
  EXPECT_EQ(kDefaultPort, 4420);
}

TEST(WireProperties, MakeCap) {
  const uint64_t cap = prop::make_cap(127, 30);
  EXPECT_EQ(cap & 0xFFFF, 127u);           // 15:0  MQES (0's based)
  EXPECT_EQ((cap >> 16) & 1, 1u);          // 16    CQR
  EXPECT_EQ((cap >> 17) & 0x3, 0u);        // 18:17 AMS: round robin only
  EXPECT_EQ((cap >> 24) & 0xFF, 30u);      // 31:24 TO, 500 ms units
  EXPECT_EQ((cap >> 32) & 0xF, 0u);        // 35:32 DSTRD
  EXPECT_EQ((cap >> 36) & 1, 0u);          // 36    NSSRS
  EXPECT_EQ((cap >> 37) & 0xFF, 0x01u);    // 44:37 CSS: bit 37 NVM command set only
  EXPECT_EQ(cap, 0x000000201E01007Full);   // the whole value, worked out by hand
  // As the 8 little-endian bytes a Property Get of CAP returns in CQE DW0/DW1.
  uint8_t b[8];
  std::memcpy(b, &cap, 8);
  const uint8_t want[8] = {0x7F, 0x00, 0x01, 0x1E, 0x20, 0x00, 0x00, 0x00};
  EXPECT_EQ(std::memcmp(b, want, 8), 0);

  EXPECT_EQ(prop::cap_mqes(cap), 127);
  EXPECT_EQ(prop::cap_timeout_ms(cap), 15000u);
  EXPECT_EQ(prop::make_cap(0xFFFF, 0xFF), 0x00000020FF01FFFFull);
}

TEST(WireProperties, RegisterOffsetsAndBits) {
  EXPECT_EQ(prop::CAP, 0x00u);
  EXPECT_EQ(prop::VS, 0x08u);
  EXPECT_EQ(prop::CC, 0x14u);
  EXPECT_EQ(prop::CSTS, 0x1Cu);
  EXPECT_EQ(prop::NSSR, 0x20u);
  EXPECT_EQ(prop::kCcEnable, 0x1u);            // CC.EN bit 0
  EXPECT_EQ(prop::kCcShnMask, 0xC000u);        // CC.SHN 15:14
  EXPECT_EQ(prop::kCstsReady, 0x1u);           // CSTS.RDY bit 0
  EXPECT_EQ(prop::kCstsFatal, 0x2u);           // CSTS.CFS bit 1
  EXPECT_EQ(prop::kCstsShstMask, 0xCu);        // CSTS.SHST 3:2
  EXPECT_EQ(prop::kCstsShstComplete, 0x8u);    // SHST 10b: shutdown complete
}

// ---------------------------------------------------------------------------------------------
// Completion status
// ---------------------------------------------------------------------------------------------

TEST(WireStatus, CqeEncoding) {
  const Status s{Sct::CommandSpecific, 0x82};
  // SC 82h in bits 8:1 (0x104), SCT 1 in bits 11:9 (0x200), DNR bit 15 (0x8000), phase 0.
  EXPECT_EQ(s.to_cqe(), 0x8304);
  EXPECT_EQ(s.to_cqe(false), 0x0304);
  EXPECT_EQ(s, sc::ConnectInvalidParameters);

  // Parse: phase tag (bit 0), CRD (13:12), M (14) and DNR (15) do not change SCT/SC.
  for (uint16_t extra : {0x0000, 0x0001, 0x1000, 0x2000, 0x4000, 0x8000, 0xF001}) {
    const Status p = Status::from_cqe(static_cast<uint16_t>(0x0304 | extra));
    EXPECT_EQ(p.sct(), Sct::CommandSpecific) << std::hex << extra;
    EXPECT_EQ(p.sc(), 0x82) << std::hex << extra;
    EXPECT_EQ(p, s);
  }

  EXPECT_EQ(sc::Success.to_cqe(), 0x0000);  // success never carries DNR
  EXPECT_TRUE(Status::from_cqe(0x0001).ok());
  EXPECT_EQ(sc::UnrecoveredReadError.to_cqe(), 0x8000 | (0x2 << 9) | (0x81 << 1));
  EXPECT_EQ(sc::UnrecoveredReadError.to_cqe(), 0x8502);
  EXPECT_EQ(Status(Sct::Vendor, 0xFF).to_cqe(false), 0x0FFE);  // SCT 7, SC FFh fill 11:1 exactly
  EXPECT_EQ(Status::from_cqe(0x0FFE).sct(), Sct::Vendor);
  EXPECT_EQ(sc::TransportError.to_cqe(), 0x8000 | (0x3 << 9) | (0x70 << 1));
  // ANA statuses leave DNR clear: another path may take the command.
  EXPECT_EQ(sc::AnaPersistentLoss.to_cqe(), 0x0602);
  EXPECT_EQ(sc::AnaInaccessible.to_cqe(), 0x0604);
  EXPECT_EQ(sc::AnaTransition.to_cqe(), 0x0606);
}

TEST(WireStatus, CodeValues) {
  // A few codes from the NVMe base and fabrics specifications, as (SCT << 8) | SC.
  EXPECT_EQ(sc::InvalidOpcode.value, 0x001);
  EXPECT_EQ(sc::InvalidField.value, 0x002);
  EXPECT_EQ(sc::InvalidNamespace.value, 0x00B);
  EXPECT_EQ(sc::SglDescriptorTypeInvalid.value, 0x011);
  EXPECT_EQ(sc::SglOffsetInvalid.value, 0x016);
  EXPECT_EQ(sc::KeepAliveExpired.value, 0x019);
  EXPECT_EQ(sc::LbaOutOfRange.value, 0x080);
  EXPECT_EQ(sc::InvalidQueueIdentifier.value, 0x101);
  EXPECT_EQ(sc::InvalidLogPage.value, 0x109);
  EXPECT_EQ(sc::ConnectIncompatibleFormat.value, 0x180);
  EXPECT_EQ(sc::ConnectInvalidHost.value, 0x184);
  EXPECT_EQ(sc::WriteFault.value, 0x280);
}

TEST(WireStatus, Names) {
  const std::string n = status_name(Status{Sct::CommandSpecific, 0x82});
  EXPECT_NE(n.find("Connect Invalid Parameters"), std::string::npos) << n;
  EXPECT_NE(n.find("SCT 1h / SC 82h"), std::string::npos) << n;
  EXPECT_EQ(status_name(sc::InvalidField), "Invalid Field in Command (SCT 0h / SC 02h)");
  const std::string u = status_name(Status{Sct::Media, 0x7E});
  EXPECT_NE(u.find("Unknown"), std::string::npos) << u;
  EXPECT_NE(u.find("SCT 2h / SC 7eh"), std::string::npos) << u;
}

TEST(WireCapsuleResp, ImageAndHeaderDigest) {
  Cqe c{};
  c.dw0 = 0x12345678;
  c.sqhd = 5;
  c.sqid = 1;
  c.cid = 0x002A;
  c.status = Status{Sct::CommandSpecific, 0x82}.to_cqe();
  CapsuleRespPdu p{};
  p.ch.type = TypeByte(PduType::CapsuleResp);
  p.ch.flags = kFlagHdgst;
  p.ch.hlen = 24;
  p.ch.pdo = 0;
  p.ch.plen = 24 + kDigestLen;
  std::memcpy(p.cqe, &c, sizeof(c));
  const std::array<uint8_t, 24> want = {
      0x05, 0x01, 0x18, 0x00, 0x1C, 0x00, 0x00, 0x00,  // CH: CapsuleResp, HDGSTF, hlen 24, plen 28
      0x78, 0x56, 0x34, 0x12,                          // CQE DW0
      0x00, 0x00, 0x00, 0x00,                          // CQE DW1
      0x05, 0x00, 0x01, 0x00,                          // SQHD 5, SQID 1
      0x2A, 0x00,                                      // CID
      0x04, 0x83,                                      // status: SCT 1 / SC 82h, DNR
  };
  EXPECT_TRUE(SameBytes(p, want));
  // CRC32C of those 24 bytes, computed independently with a bitwise reference implementation
  // (reflected polynomial 0x82F63B78, init ~0, final xor ~0). On the wire: 19 BA AF C2.
  EXPECT_EQ(crc32c(want.data(), want.size()), 0xC2AFBA19u);
  EXPECT_EQ(crc32c(&p, sizeof(p)), 0xC2AFBA19u);
}

// ---------------------------------------------------------------------------------------------
// Identify data
// ---------------------------------------------------------------------------------------------

TEST(WireIdentify, ControllerOffsets) {
  IdentifyController id{};
  id.vid = 0x1B36;
  std::memset(id.sn, ' ', sizeof(id.sn));
  PutStr(id.sn, "SN42");
  PutStr(id.mn, "nvtcp");
  PutStr(id.fr, "0.1");
  id.mdts = 5;
  id.cntlid = 0x0102;
  id.ver = 0x00010400;  // 1.4.0
  id.cntrltype = kCntrlTypeIo;
  id.oacs = 0x0304;
  id.acl = 3;
  id.aerl = 7;
  id.lpa = 0x04;
  put_u128(id.tnvmcap, 0x0000010000000000ull);
  id.kas = 100;
  id.sqes = 0x66;
  id.cqes = 0x44;
  id.maxcmd = 128;
  id.nn = 0x0A0B0C0D;
  id.oncs = kOncsDsm | kOncsWriteZeroes;
  id.vwc = 0x01;
  id.sgls = kSglsSupported;
  PutStr(id.subnqn, "nqn.2024-01.io.nvtcp:sub");
  id.ioccsz = 0x00000204;  // (64 + 8192) / 16
  id.iorcsz = 1;
  id.icdoff = 0x0506;
  id.msdbd = 1;
  id.psd[0].mp = 0x09C4;
  id.psd[1].enlat = 0xA1A2A3A4;
  id.vs[1023] = 0x5E;

  std::array<uint8_t, 4096> want{};
  want[0] = 0x36; want[1] = 0x1B;                          // 1:0      VID
  PutAt(want, 4, "SN42" + std::string(16, ' '));                  // 23:4     SN, space padded
  PutAt(want, 24, "nvtcp");                                // 63:24    MN
  PutAt(want, 64, "0.1");                                  // 71:64    FR
  want[77] = 5;                                            // 77       MDTS
  want[78] = 0x02; want[79] = 0x01;                        // 79:78    CNTLID
  want[80] = 0x00; want[81] = 0x04; want[82] = 0x01;       // 83:80    VER 1.4.0
  want[111] = 0x01;                                        // 111      CNTRLTYPE I/O controller
  want[256] = 0x04; want[257] = 0x03;                      // 257:256  OACS
  want[258] = 3;                                           // 258      ACL
  want[259] = 7;                                           // 259      AERL
  want[261] = 0x04;                                        // 261      LPA
  want[285] = 0x01;                                        // 295:280  TNVMCAP = 2^40
  want[320] = 100;                                         // 321:320  KAS
  want[512] = 0x66;                                        // 512      SQES
  want[513] = 0x44;                                        // 513      CQES
  want[514] = 128;                                         // 515:514  MAXCMD
  want[516] = 0x0D; want[517] = 0x0C; want[518] = 0x0B; want[519] = 0x0A;  // 519:516 NN
  want[520] = 0x0C;                                        // 521:520  ONCS: DSM (2) | WZ (3)
  want[525] = 0x01;                                        // 525      VWC
  want[536] = 0x01; want[538] = 0x10;                      // 539:536  SGLS: bits 0 and 20
  PutAt(want, 768, "nqn.2024-01.io.nvtcp:sub");            // 1023:768 SUBNQN
  want[1792] = 0x04; want[1793] = 0x02;                    // 1795:1792 IOCCSZ
  want[1796] = 0x01;                                       // 1799:1796 IORCSZ
  want[1800] = 0x06; want[1801] = 0x05;                    // 1801:1800 ICDOFF
  want[1803] = 0x01;                                       // 1803     MSDBD
  want[2048] = 0xC4; want[2049] = 0x09;                    // PSD0 MP (2048 + 1:0)
  // PSD1 ENLAT: PSD1 starts at 2080, ENLAT is its bytes 7:4.
  want[2084] = 0xA4; want[2085] = 0xA3; want[2086] = 0xA2; want[2087] = 0xA1;
  want[4095] = 0x5E;                                       // 4095:3072 vendor specific
  EXPECT_TRUE(SameBytes(id, want));
}

TEST(WireIdentify, ControllerParse) {
  // What a host reads from a target's Identify Controller buffer.
  std::array<uint8_t, 4096> img{};
  img[78] = 0x01; img[79] = 0x00;                        // 79:78    CNTLID 1
  img[76] = 0x0A;                                        // 76       CMIC: multi-controller, ANA
  img[92] = 0x00; img[93] = 0x08;                        // 95:92    OAES bit 11: ANA change
  img[111] = 0x02;                                       // 111      CNTRLTYPE discovery
  img[342] = 0x0A;                                       // 342      ANATT 10 s
  img[343] = 0x5F;                                       // 343      ANACAP
  img[344] = 0x20;                                       // 347:344  ANAGRPMAX 32
  img[348] = 0x20;                                       // 351:348  NANAGRPID 32
  img[320] = 0x0A;                                       // 321:320  KAS 10 x 100 ms
  img[516] = 0x20;                                       // 519:516  NN 32
  img[536] = 0x01; img[538] = 0x10;                      // 539:536  SGLS
  PutAt(img, 768, std::string(kDiscoveryNqn));           // 1023:768 SUBNQN
  img[1792] = 0x04; img[1793] = 0x01;                    // 1795:1792 IOCCSZ 0x104
  img[1796] = 0x01;                                      // 1799:1796 IORCSZ
  img[1803] = 0x01;                                      // 1803     MSDBD
  img[2051] = 0x03;                                      // PSD0 byte 3: flags NOPS | MXPS
  auto id = FromBytes<IdentifyController>(img);
  EXPECT_EQ(Val(id.cntlid), 1);
  EXPECT_EQ(Val(id.cntrltype), kCntrlTypeDiscovery);
  EXPECT_EQ(Val(id.kas), 10);
  EXPECT_EQ(Val(id.nn), 32u);
  EXPECT_EQ(Val(id.sgls), kSglsSupported);
  EXPECT_STREQ(id.subnqn, kDiscoveryNqn);
  EXPECT_EQ(Val(id.ioccsz), 0x104u);
  EXPECT_EQ(Val(id.iorcsz), 1u);
  EXPECT_EQ(Val(id.msdbd), 1);
  EXPECT_EQ(Val(id.psd[0].flags), 0x03);
  EXPECT_EQ(Val(id.cmic), kCmicMultiController | kCmicAna);
  EXPECT_EQ(Val(id.oaes), kAecAnaChange);
  EXPECT_EQ(Val(id.anatt), kAnaTransitionSeconds);
  EXPECT_EQ(Val(id.anacap), kAnacapStates | kAnacapGroupIdFixed);
  EXPECT_EQ(Val(id.anagrpmax), 32u);
  EXPECT_EQ(Val(id.nanagrpid), 32u);
}

TEST(WireIdentify, NamespaceOffsets) {
  IdentifyNamespace ns{};
  ns.nsze = 0x0000000100000000ull;
  ns.ncap = 0x0000000000A0B0C0ull;
  ns.nuse = 0x1122334455667788ull;
  ns.nlbaf = 1;
  ns.flbas = 1;
  ns.dlfeat = 0x09;
  put_u128(ns.nvmcap, 0x0102030405060708ull);
  ns.anagrpid = 0x00000007;
  for (int i = 0; i < 16; ++i) ns.nguid[i] = static_cast<uint8_t>(0x30 + i);
  for (int i = 0; i < 8; ++i) ns.eui64[i] = static_cast<uint8_t>(0x50 + i);
  ns.lbaf[0] = {0, 9, 0};    // 512-byte blocks
  ns.lbaf[1] = {8, 12, 2};   // 4 KiB blocks, 8 bytes of metadata, relative performance 2

  std::array<uint8_t, 4096> want{};
  want[4] = 0x01;                                              // 7:0    NSZE = 2^32
  want[8] = 0xC0; want[9] = 0xB0; want[10] = 0xA0;             // 15:8   NCAP
  const uint8_t nuse[8] = {0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
  std::memcpy(&want[16], nuse, 8);                             // 23:16  NUSE
  want[25] = 1;                                                // 25     NLBAF (0's based)
  want[26] = 1;                                                // 26     FLBAS
  want[33] = 0x09;                                             // 33     DLFEAT
  const uint8_t nvmcap[8] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
  std::memcpy(&want[48], nvmcap, 8);                           // 63:48  NVMCAP (upper 8 bytes 0)
  want[92] = 0x07;                                             // 95:92  ANAGRPID
  for (int i = 0; i < 16; ++i) want[104 + i] = static_cast<uint8_t>(0x30 + i);  // 119:104 NGUID
  for (int i = 0; i < 8; ++i) want[120 + i] = static_cast<uint8_t>(0x50 + i);   // 127:120 EUI64
  want[128 + 2] = 9;                                           // LBAF0: MS 15:0, LBADS 23:16
  want[132 + 0] = 8; want[132 + 2] = 12; want[132 + 3] = 2;    // LBAF1: MS, LBADS, RP 25:24
  EXPECT_TRUE(SameBytes(ns, want));

  NsIdDescriptorHeader h{kNidtNguid, 16, 0};
  const std::array<uint8_t, 4> hwant = {0x02, 0x10, 0x00, 0x00};  // NIDT 02h NGUID, NIDL 16
  EXPECT_TRUE(SameBytes(h, hwant));
  EXPECT_EQ(static_cast<uint8_t>(Cns::Namespace), 0x00);
  EXPECT_EQ(static_cast<uint8_t>(Cns::Controller), 0x01);
  EXPECT_EQ(static_cast<uint8_t>(Cns::ActiveNamespaceList), 0x02);
  EXPECT_EQ(static_cast<uint8_t>(Cns::NamespaceDescriptors), 0x03);
  EXPECT_EQ(static_cast<uint8_t>(Cns::IoCommandSetController), 0x06);
}

// ---------------------------------------------------------------------------------------------
// Log pages
// ---------------------------------------------------------------------------------------------

TEST(WireLogPages, DiscoveryHeaderAndEntry) {
  DiscoveryLogHeader h{};
  h.genctr = 0x0102030405060708ull;
  h.numrec = 2;
  h.recfmt = 0;
  std::array<uint8_t, 1024> hwant{};
  const uint8_t genctr[8] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
  std::memcpy(hwant.data(), genctr, 8);  // 7:0   GENCTR
  hwant[8] = 2;                          // 15:8  NUMREC
  EXPECT_TRUE(SameBytes(h, hwant));      // 17:16 RECFMT 0

  DiscoveryLogEntry e{};
  e.trtype = kTrtypeTcp;
  e.adrfam = kAdrfamIpv4;
  e.subtype = kSubtypeNvme;
  e.treq = kTreqNotRequired | kTreqDisableSqFlow;
  e.portid = 0x0102;
  e.cntlid = kDynamicCntlid;
  e.asqsz = 32;
  e.eflags = 0x0003;
  PutStr(e.trsvcid, "4420");
  PutStr(e.subnqn, "nqn.2024-01.io.nvtcp:sub");
  PutStr(e.traddr, "127.0.0.1");
  e.tsas[0] = kTcpSectypeNone;
  e.tsas[1] = 0xEE;  // marks where TSAS starts

  std::array<uint8_t, 1024> want{};
  want[0] = 0x03;                             // 0        TRTYPE TCP
  want[1] = 0x01;                             // 1        ADRFAM IPv4
  want[2] = 0x02;                             // 2        SUBTYPE NVM subsystem
  want[3] = 0x06;                             // 3        TREQ: not required (10b) | SQ flow disable
  want[4] = 0x02; want[5] = 0x01;             // 5:4      PORTID
  want[6] = 0xFF; want[7] = 0xFF;             // 7:6      CNTLID
  want[8] = 0x20;                             // 9:8      ASQSZ
  want[10] = 0x03;                            // 11:10    EFLAGS
  PutAt(want, 32, "4420");                    // 63:32    TRSVCID
  PutAt(want, 256, "nqn.2024-01.io.nvtcp:sub");  // 511:256 SUBNQN
  PutAt(want, 512, "127.0.0.1");              // 767:512  TRADDR
  want[769] = 0xEE;                           // 1023:768 TSAS (byte 768 SECTYPE 0)
  EXPECT_TRUE(SameBytes(e, want));
}

TEST(WireLogPages, SmartLog) {
  SmartLog s{};
  s.critical_warning = 0x01;
  s.temperature = 0x0143;  // 323 K
  s.avail_spare = 100;
  s.spare_thresh = 10;
  s.percent_used = 3;
  put_u128(s.data_units_read, 0x1122334455667788ull);
  put_u128(s.data_units_written, 0xA1);
  put_u128(s.host_reads, 0xB2);
  put_u128(s.host_writes, 0xC3);
  put_u128(s.power_cycles, 0xD4);
  put_u128(s.num_err_log_entries, 0xE5);
  s.warning_temp_time = 0x0A0B0C0D;
  s.temp_sensor[0] = 0x0150;
  s.temp_sensor[7] = 0x0160;

  std::array<uint8_t, 512> want{};
  want[0] = 0x01;                          // 0        critical warning
  want[1] = 0x43; want[2] = 0x01;          // 2:1      composite temperature
  want[3] = 100;                           // 3        available spare
  want[4] = 10;                            // 4        available spare threshold
  want[5] = 3;                             // 5        percentage used
  const uint8_t dur[8] = {0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
  std::memcpy(&want[32], dur, 8);          // 47:32    data units read
  want[48] = 0xA1;                         // 63:48    data units written
  want[64] = 0xB2;                         // 79:64    host read commands
  want[80] = 0xC3;                         // 95:80    host write commands
  want[112] = 0xD4;                        // 127:112  power cycles
  want[176] = 0xE5;                        // 191:176  error information log entries
  want[192] = 0x0D; want[193] = 0x0C; want[194] = 0x0B; want[195] = 0x0A;  // 195:192 WCTEMP time
  want[200] = 0x50; want[201] = 0x01;      // 201:200  temperature sensor 1
  want[214] = 0x60; want[215] = 0x01;      // 215:214  temperature sensor 8
  EXPECT_TRUE(SameBytes(s, want));
}

TEST(WireLogPages, PutU128OverwritesLittleEndian) {
  uint8_t f[16];
  std::memset(f, 0xFF, sizeof(f));
  put_u128(f, 0x0807060504030201ull);
  const uint8_t want[16] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(std::memcmp(f, want, 16), 0);
}

TEST(WireLogPages, ErrorLogEntry) {
  auto e = Sequential<ErrorLogEntry>();
  EXPECT_EQ(Val(e.error_count), 0x0706050403020100ull);  // 7:0
  EXPECT_EQ(Val(e.sqid), 0x0908);                        // 9:8
  EXPECT_EQ(Val(e.cid), 0x0B0A);                         // 11:10
  EXPECT_EQ(Val(e.status), 0x0D0C);                      // 13:12
  EXPECT_EQ(Val(e.pel), 0x0F0E);                         // 15:14 parameter error location
  EXPECT_EQ(Val(e.lba), 0x1716151413121110ull);          // 23:16
  EXPECT_EQ(Val(e.nsid), 0x1B1A1918u);                   // 27:24
  EXPECT_EQ(Val(e.vs), 0x1C);                            // 28
  EXPECT_EQ(Val(e.trtype), 0x1D);                        // 29
  EXPECT_EQ(Val(e.csi), 0x2726252423222120ull);          // 39:32 command specific information
  EXPECT_EQ(Val(e.trtype_specific), 0x2928);             // 41:40
}

TEST(WireLogPages, AnaHeaderAndGroupDescriptor) {
  auto h = Sequential<AnaLogHeader>();
  EXPECT_EQ(Val(h.chgcnt), 0x0706050403020100ull);  // 7:0 change count
  EXPECT_EQ(Val(h.ngrps), 0x0908);                  // 9:8 number of group descriptors
  auto d = Sequential<AnaGroupDescriptor>();
  EXPECT_EQ(Val(d.anagrpid), 0x03020100u);          // 3:0
  EXPECT_EQ(Val(d.nnsids), 0x07060504u);            // 7:4 NSIDs that follow
  EXPECT_EQ(Val(d.chgcnt), 0x0F0E0D0C0B0A0908ull);  // 15:8
  EXPECT_EQ(Val(d.state), 0x10);                    // 16, bits 3:0 the state

  AnaGroupDescriptor g{};
  g.anagrpid = 5;
  g.nnsids = 2;
  g.chgcnt = 3;
  g.state = uint8_t(AnaState::Inaccessible);
  std::array<uint8_t, 32> want{};
  want[0] = 5;
  want[4] = 2;
  want[8] = 3;
  want[16] = 0x03;
  EXPECT_TRUE(SameBytes(g, want));
  // The state values and the log's identifiers, as the specification numbers them.
  EXPECT_EQ(uint8_t(AnaState::Optimized), 0x01);
  EXPECT_EQ(uint8_t(AnaState::NonOptimized), 0x02);
  EXPECT_EQ(uint8_t(AnaState::PersistentLoss), 0x04);
  EXPECT_EQ(uint8_t(AnaState::Change), 0x0F);
  EXPECT_EQ(uint8_t(LogPageId::Ana), 0x0C);
  EXPECT_EQ(kLogAnaReturnGroupsOnly, 1u << 8);  // LSP bit 0
  EXPECT_EQ(async_event_dw0(AsyncEventType::Notice, kAsyncNoticeAnaChange, LogPageId::Ana), 0x000C0302u);
  AnaState s{};
  EXPECT_TRUE(ana_state_from_name("non_optimized", s));
  EXPECT_EQ(s, AnaState::NonOptimized);
  EXPECT_FALSE(ana_state_from_name("Optimized", s));
  EXPECT_STREQ(ana_state_name(AnaState::PersistentLoss), "persistent_loss");
}

TEST(WireLogPages, FirmwareSlotAndIds) {
  FirmwareSlotLog f{};
  f.afi = 0x01;
  PutStr(f.frs[0], "1.0");
  PutStr(f.frs[6], "7.7");
  std::array<uint8_t, 512> want{};
  want[0] = 0x01;            // 0      AFI
  PutAt(want, 8, "1.0");     // 15:8   FRS1
  PutAt(want, 56, "7.7");    // 63:56  FRS7
  EXPECT_TRUE(SameBytes(f, want));

  EXPECT_EQ(static_cast<uint8_t>(LogPageId::Error), 0x01);
  EXPECT_EQ(static_cast<uint8_t>(LogPageId::SmartHealth), 0x02);
  EXPECT_EQ(static_cast<uint8_t>(LogPageId::FirmwareSlot), 0x03);
  EXPECT_EQ(static_cast<uint8_t>(LogPageId::ChangedNamespaces), 0x04);
  EXPECT_EQ(static_cast<uint8_t>(LogPageId::Discovery), 0x70);
}

// Log page 04h as a host reads it: little-endian NSIDs in the order they changed, each once,
// zeros after; past 1024 entries FFFFFFFFh alone; a read with RAE cleared starts it again.
TEST(ChangedNamespaceList, ListsEachNsidOnceInOrderAndOverflowsToAllNamespaces) {
  ChangedNamespaceList list;
  std::vector<uint8_t> page;
  EXPECT_TRUE(list.empty());
  list.build(page);
  ASSERT_EQ(page.size(), 4096u);
  EXPECT_EQ(page, std::vector<uint8_t>(4096, 0));

  list.add(7);
  list.add(0x01020304);
  list.add(7);
  EXPECT_FALSE(list.empty());
  list.build(page);
  const std::vector<uint8_t> head = {0x07, 0, 0, 0, 0x04, 0x03, 0x02, 0x01, 0, 0, 0, 0};
  EXPECT_TRUE(std::equal(head.begin(), head.end(), page.begin()));
  EXPECT_TRUE(std::all_of(page.begin() + 8, page.end(), [](uint8_t b) { return b == 0; }));

  list.clear();
  EXPECT_TRUE(list.empty());
  for (uint32_t n = 1; n <= 1024; ++n) list.add(n);
  EXPECT_FALSE(list.overflowed()) << "1024 NSIDs still fit";
  list.build(page);
  EXPECT_EQ(page[4092], 0x00);
  EXPECT_EQ(page[4093], 0x04) << "entry 1023 is NSID 1024";
  list.add(1025);
  EXPECT_TRUE(list.overflowed());
  list.build(page);
  const std::vector<uint8_t> all = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
  EXPECT_TRUE(std::equal(all.begin(), all.end(), page.begin()));
  EXPECT_TRUE(std::all_of(page.begin() + 4, page.end(), [](uint8_t b) { return b == 0; }));
  list.clear();
  EXPECT_TRUE(list.empty());
  EXPECT_FALSE(list.overflowed());
}

}  // namespace wire_test

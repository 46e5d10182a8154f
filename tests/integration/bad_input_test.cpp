// SPDX-License-Identifier: Apache-2.0
// Malformed and out-of-order input fed to the target through a raw TCP socket. Every case
// asserts the exact outcome (a C2HTermReq with its FES/FEI and then EOF, or a completion
// status) and then proves the target still serves a fresh, healthy client.
#include <fmt/format.h>

#include "raw_session.hpp"

namespace nvtcp::test::bad_input_test {
namespace {

// ------------------------------------------------------------------ transport errors

TEST(BadInput, TruncatedPduThenClose) {
  RunningTarget t;
  Session s;
  Cqe cqe{};
  ASSERT_TRUE(s.open_admin(t.port(), cqe));
  EXPECT_EQ(controller_count(t), 1u);

  Bytes capsule = capsule_pdu(rw_sqe(IoOpcode::Read, s.cid(), kRamNsid, 0, 1, 512), {}, false, false);
  ASSERT_TRUE(s.c.send(capsule.data(), capsule.size() / 2));
  // Half a header is not an error yet: the target waits for the rest.
  EXPECT_TRUE(s.c.expect_silence(200));
  s.c.close();

  EXPECT_TRUE(controllers_drop_to(t, 0, std::chrono::milliseconds(2000)));
  expect_healthy(t);
}

TEST(BadInput, UnknownPduType) {
  RunningTarget t;
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  Bytes pdu(24, 0);
  pdu[0] = 0x0A;  // not a PDU type
  pdu[2] = 24;
  uint32_t plen = 24;
  std::memcpy(&pdu[4], &plen, 4);
  ASSERT_TRUE(s.c.send(pdu));
  EXPECT_TRUE(expect_term_req(s, Fes::InvalidHeaderField, offsetof(CommonHeader, type), pdu));
  expect_healthy(t);
}

TEST(BadInput, PlenShorterThanHlen) {
  RunningTarget t;
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  Bytes pdu = capsule_pdu(rw_sqe(IoOpcode::Read, 1, kRamNsid, 0, 1, 512), {}, false, false);
  uint32_t plen = 40;  // hlen is 72
  std::memcpy(&pdu[offsetof(CommonHeader, plen)], &plen, 4);
  ASSERT_TRUE(s.c.send(pdu));
  EXPECT_TRUE(expect_term_req(s, Fes::InvalidHeaderField, offsetof(CommonHeader, plen), pdu));
  expect_healthy(t);
}

TEST(BadInput, PlenOverMaximum) {
  RunningTarget t;
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  // A Write capsule claiming 64 MiB of in-capsule data; only its header is sent.
  Bytes pdu = capsule_pdu(rw_sqe(IoOpcode::Write, 1, kRamNsid, 0, 1, 512, kSglDataBlockOffset), {}, false, false);
  auto* ch = reinterpret_cast<CommonHeader*>(pdu.data());
  ch->pdo = sizeof(CapsuleCmdHeader);
  ch->plen = 64u << 20;
  ASSERT_TRUE(s.c.send(pdu));
  EXPECT_TRUE(expect_term_req(s, Fes::DataLimitExceeded, std::nullopt, pdu));
  expect_healthy(t);
}

TEST(BadInput, SecondICReq) {
  RunningTarget t;
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  Bytes pdu = icreq_pdu(0);
  ASSERT_TRUE(s.c.send(pdu));
  EXPECT_TRUE(expect_term_req(s, Fes::PduSequenceError, std::nullopt, pdu));
  expect_healthy(t);
}

TEST(BadInput, CapsuleBeforeICReq) {
  RunningTarget t;
  Session s;
  ASSERT_TRUE(s.c.connect(t.port()));
  Bytes pdu = capsule_pdu(connect_sqe(1, 0), connect_data(kTestNqn, kHostNqn, kDynamicCntlid), false, false);
  ASSERT_TRUE(s.c.send(pdu));
  EXPECT_TRUE(expect_term_req(s, Fes::PduSequenceError, std::nullopt, pdu));
  EXPECT_EQ(controller_count(t), 0u);
  expect_healthy(t);
}

TEST(BadInput, WrongHeaderDigest) {
  RunningTarget t;
  Session s;
  ASSERT_TRUE(s.open(t.port(), /*digest=*/1));
  Bytes pdu = capsule_pdu(connect_sqe(1, 0), connect_data(kTestNqn, kHostNqn, kDynamicCntlid), true, false);
  pdu[sizeof(CapsuleCmdHeader)] ^= 0x5A;  // corrupt the HDGST
  ASSERT_TRUE(s.c.send(pdu));
  EXPECT_TRUE(expect_term_req(s, Fes::HeaderDigestError, std::nullopt, pdu));
  EXPECT_EQ(controller_count(t), 0u);
  expect_healthy(t);
}

TEST(BadInput, WrongDataDigestOnInCapsuleData) {
  RunningTarget t;
  Session s;
  ASSERT_TRUE(s.open(t.port(), /*digest=*/2));
  Sqe sqe = connect_sqe(s.cid(), 0);
  Bytes pdu = capsule_pdu(sqe, connect_data(kTestNqn, kHostNqn, kDynamicCntlid), false, true);
  pdu.back() ^= 0x01;  // corrupt the DDGST
  ASSERT_TRUE(s.c.send(pdu));
  Cqe cqe{};
  ASSERT_TRUE(s.read_response(sqe.cid, cqe));
  EXPECT_TRUE(status_is(cqe, 0, 0x22));  // Transient Transport Error
  EXPECT_EQ(cqe.status & 0x8000, 0) << "DNR set on a Transient Transport Error: a retry can cure it";
  EXPECT_EQ(controller_count(t), 0u) << "a Connect whose data failed its digest must not create a controller";

  // The connection stays up: the same Connect with a good digest succeeds on it.
  ASSERT_TRUE(s.connect_admin(cqe));
  EXPECT_TRUE(ok(cqe));
  EXPECT_EQ(controller_count(t), 1u);
  expect_healthy(t);
}

TEST(BadInput, H2CDataUnknownTransferTag) {
  RunningTarget t;
  Session s;
  Cqe cqe{};
  ASSERT_TRUE(s.open_admin(t.port(), cqe));
  Bytes pdu = h2c_data_pdu(7, 0x1234, 0, Bytes(512, 0xAB), true);
  ASSERT_TRUE(s.c.send(pdu));
  EXPECT_TRUE(expect_term_req(s, Fes::InvalidHeaderField, offsetof(H2CDataPdu, ttag), pdu));
  EXPECT_TRUE(controllers_drop_to(t, 0, std::chrono::milliseconds(2000)));
  expect_healthy(t);
}

TEST(BadInput, H2CDataOutsideR2TWindow) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  Sqe w = rw_sqe(IoOpcode::Write, io.cid(), kRamNsid, 0, 8, 4096);
  ASSERT_TRUE(io.send_capsule(w));
  R2TPdu r2t{};
  ASSERT_TRUE(r2t_for(io, w.cid, r2t));
  EXPECT_EQ(r2t.r2to, 0u);
  EXPECT_EQ(r2t.r2tl, 4096u);
  Bytes bad = h2c_data_pdu(w.cid, r2t.ttag, r2t.r2to + r2t.r2tl, Bytes(512, 0xCD), true);
  ASSERT_TRUE(io.c.send(bad));
  EXPECT_TRUE(expect_term_req(io, Fes::DataOutOfRange, std::nullopt, bad));

  // The admin queue (another connection) is unaffected.
  Cqe cqe{};
  ASSERT_TRUE(admin.command(property_sqe(admin.cid(), FabricsType::PropertyGet, prop::CSTS, 0), {}, cqe));
  EXPECT_TRUE(ok(cqe));
  EXPECT_EQ(cqe.dw0 & prop::kCstsReady, prop::kCstsReady);
  expect_healthy(t);
}

// A NULL namespace never looks at a Write's data, so the target receives what its R2Ts ask
// for into no buffer; the data digest is still checked on the bytes as they pass. A RAM
// namespace, which keeps the data, holds a buffer for the same write (the check can fail).
TEST(BadInput, NullWritesTakeNoBufferYetCheckTheirDataDigest) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io, /*digest=*/2));
  constexpr uint32_t kNullNsid = 1, kLen = 64 * 1024;
  auto io_buffer_bytes = [&] {
    for (auto& c : t.target().connection_info())
      if (c.qid == 1) return c.buffer_bytes;
    return ~uint64_t(0);
  };
  // A write through R2T whose H2CData carries a good digest, or one with a bit flipped.
  auto write = [&](uint32_t nsid, bool corrupt, Cqe& cqe) -> AssertionResult {
    Sqe w = rw_sqe(IoOpcode::Write, io.cid(), nsid, 0, kLen / 512, kLen);
    if (auto r = io.send_capsule(w); !r) return r;
    Bytes p;
    if (auto r = io.read_pdu(p); !r) return r;
    if (p[0] != uint8_t(PduType::R2T)) return AssertionFailure() << "PDU type " << unsigned(p[0]) << ", not R2T";
    auto r2t = read_as<R2TPdu>(p);
    if (r2t.r2to != 0 || r2t.r2tl != kLen) return AssertionFailure() << "R2T for " << r2t.r2tl << " bytes";
    H2CDataPdu h{};
    h.ch.type = uint8_t(PduType::H2CData);
    h.cccid = w.cid;
    h.ttag = r2t.ttag;
    h.datal = kLen;
    Bytes pdu = build_pdu(bytes_of(h), pattern(kLen, 7), false, true, kFlagDataLast);
    if (corrupt) pdu.back() ^= 0x01;
    if (auto r = io.c.send(pdu); !r) return r;
    return io.read_response(w.cid, cqe);
  };
  const uint64_t connected = io_buffer_bytes();  // the Connect's data took a small buffer
  ASSERT_LT(connected, kLen);
  Cqe cqe{};
  ASSERT_TRUE(write(kNullNsid, false, cqe));
  EXPECT_TRUE(ok(cqe));
  EXPECT_EQ(io_buffer_bytes(), connected) << "a NULL write took a buffer for data it drops";
  ASSERT_TRUE(write(kNullNsid, true, cqe));
  EXPECT_TRUE(status_is(cqe, 0, 0x22)) << "a NULL write whose data failed its digest must not succeed";
  EXPECT_EQ(io_buffer_bytes(), connected);
  ASSERT_TRUE(write(kRamNsid, false, cqe));
  EXPECT_TRUE(ok(cqe));
  EXPECT_GE(io_buffer_bytes(), kLen) << "a RAM write holds its data in a buffer";
  expect_healthy(t);
}

// Beyond the list: a few more header checks with unambiguous FES/FEI.

TEST(BadInput, WrongHlen) {
  RunningTarget t;
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  Bytes pdu = capsule_pdu(rw_sqe(IoOpcode::Read, 1, kRamNsid, 0, 1, 512), {}, false, false);
  pdu[offsetof(CommonHeader, hlen)] = 64;  // a CapsuleCmd header is 72 bytes
  ASSERT_TRUE(s.c.send(pdu));
  EXPECT_TRUE(expect_term_req(s, Fes::InvalidHeaderField, offsetof(CommonHeader, hlen), pdu));
  expect_healthy(t);
}

TEST(BadInput, HeaderDigestFlagWithoutNegotiation) {
  RunningTarget t;
  Session s;
  ASSERT_TRUE(s.open(t.port(), /*digest=*/0));
  Bytes pdu = capsule_pdu(connect_sqe(1, 0), connect_data(kTestNqn, kHostNqn, kDynamicCntlid), true, false);
  ASSERT_TRUE(s.c.send(pdu));
  EXPECT_TRUE(expect_term_req(s, Fes::InvalidHeaderField, offsetof(CommonHeader, flags), pdu));
  expect_healthy(t);
}

TEST(BadInput, ICReqHpdaOutOfRange) {
  RunningTarget t;
  Session s;
  ASSERT_TRUE(s.c.connect(t.port()));
  Bytes pdu = icreq_pdu(0);
  pdu[offsetof(ICReqPdu, hpda)] = 32;  // valid values are 0..31
  ASSERT_TRUE(s.c.send(pdu));
  EXPECT_TRUE(expect_term_req(s, Fes::InvalidHeaderField, offsetof(ICReqPdu, hpda), pdu));
  expect_healthy(t);
}

TEST(BadInput, H2CDataCccidMismatch) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  Sqe w = rw_sqe(IoOpcode::Write, io.cid(), kRamNsid, 0, 8, 4096);
  ASSERT_TRUE(io.send_capsule(w));
  R2TPdu r2t{};
  ASSERT_TRUE(r2t_for(io, w.cid, r2t));
  Bytes bad = h2c_data_pdu(uint16_t(w.cid + 100), r2t.ttag, 0, Bytes(4096, 0xCD), true);
  ASSERT_TRUE(io.c.send(bad));
  EXPECT_TRUE(expect_term_req(io, Fes::InvalidHeaderField, offsetof(H2CDataPdu, cccid), bad));
  expect_healthy(t);
}

// ------------------------------------------------------------------ command errors

TEST(BadInput, ConnectUnknownNqn) {
  RunningTarget t;
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  Cqe cqe{};
  ASSERT_TRUE(s.connect_admin(cqe, "nqn.2026-11.io.nvtcp:no-such-subsystem"));
  EXPECT_TRUE(status_is(cqe, 1, 0x82));  // Connect Invalid Parameters
  EXPECT_EQ(cqe.dw0, uint32_t(offsetof(ConnectData, subnqn)) | (1u << 16));  // IPO 256 in the data (IATTR 1)
  EXPECT_EQ(controller_count(t), 0u);
  expect_healthy(t);
}

TEST(BadInput, ConnectFromHostNotAllowed) {
  auto cfg = default_config();
  cfg.subsystems[0].allow_any_host = false;
  cfg.subsystems[0].hosts = {"nqn.2026-11.io.nvtcp:ok"};
  RunningTarget t(cfg);
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  Cqe cqe{};
  ASSERT_TRUE(s.connect_admin(cqe, kTestNqn, "nqn.2026-11.io.nvtcp:not-ok"));
  EXPECT_TRUE(status_is(cqe, 1, 0x84));  // Connect Invalid Host
  EXPECT_EQ(controller_count(t), 0u);
  expect_healthy(t, "nqn.2026-11.io.nvtcp:ok");
}

TEST(BadInput, IoCommandBeforeConnect) {
  RunningTarget t;
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  Cqe cqe{};
  ASSERT_TRUE(s.command(rw_sqe(IoOpcode::Read, s.cid(), kRamNsid, 0, 1, 512), {}, cqe));
  EXPECT_TRUE(status_is(cqe, 0, 0x0C));  // Command Sequence Error
  // Not fatal: the queue can still connect.
  ASSERT_TRUE(s.connect_admin(cqe));
  EXPECT_TRUE(ok(cqe));
  expect_healthy(t);
}

TEST(BadInput, LbaOutOfRange) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  Cqe cqe{};
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, kRamBlocks, 1, 512), {}, cqe));
  EXPECT_TRUE(status_is(cqe, 0, 0x80)) << "starting LBA just past the end";
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, kRamBlocks - 1, 2, 1024), {}, cqe));
  EXPECT_TRUE(status_is(cqe, 0, 0x80)) << "range crossing the end";
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, 1ull << 40, 1, 512), {}, cqe));
  EXPECT_TRUE(status_is(cqe, 0, 0x80)) << "starting LBA far past the end (upper cdw11 bits)";
  expect_read_works(io);
  expect_healthy(t);
}

TEST(BadInput, DataLengthNotNlbTimesBlockSize) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  Cqe cqe{};
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, 0, 8, 512), {}, cqe));
  EXPECT_TRUE(status_is(cqe, 0, 0x0F)) << "read: SGL 512 bytes for 8 blocks";
  // A write with in-capsule data one block short of its NLB.
  Sqe w = rw_sqe(IoOpcode::Write, io.cid(), kRamNsid, 0, 2, 512, kSglDataBlockOffset);
  ASSERT_TRUE(io.command(w, Bytes(512, 0x11), cqe));
  EXPECT_TRUE(status_is(cqe, 0, 0x0F)) << "write: 512 bytes in capsule for 2 blocks";
  expect_read_works(io);
  expect_healthy(t);
}

TEST(BadInput, UnsupportedSglType) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  Cqe cqe{};
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, 0, 1, 512, kKeyedSglDataBlock), {}, cqe));
  EXPECT_TRUE(status_is(cqe, 0, 0x11));  // SGL Descriptor Type Invalid
  expect_read_works(io);
  expect_healthy(t);
}

// ------------------------------------------------------------------ vanishing peers

TEST(BadInput, PeerVanishesMidTransfer) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  EXPECT_EQ(controller_count(t), 1u);
  Sqe w = rw_sqe(IoOpcode::Write, io.cid(), kRamNsid, 0, 8, 4096);
  ASSERT_TRUE(io.send_capsule(w));
  R2TPdu r2t{};
  ASSERT_TRUE(r2t_for(io, w.cid, r2t));
  ASSERT_EQ(r2t.r2tl, 4096u);
  Bytes h2c = h2c_data_pdu(w.cid, r2t.ttag, 0, Bytes(4096, 0xEE), true);
  ASSERT_TRUE(io.c.send(h2c.data(), sizeof(H2CDataPdu) + 2048));
  io.c.close();

  // The admin queue still works, then its loss tears the controller down.
  Cqe cqe{};
  ASSERT_TRUE(admin.command(property_sqe(admin.cid(), FabricsType::PropertyGet, prop::CSTS, 0), {}, cqe));
  EXPECT_TRUE(ok(cqe));
  admin.c.close();
  EXPECT_TRUE(controllers_drop_to(t, 0, std::chrono::milliseconds(2000)));
  expect_healthy(t);
}

// A silent host's ICReq timeout: tests/unit/connection_deadlines_test.cpp, on a stepped clock.

// A host that terminates the connection and sends more PDUs in the same segment: the target
// closes and executes none of them. (It once ran a Connect found behind the H2CTermReq on the
// closing connection, making a controller and moving the connection from Closing back to
// Connected; the state checks of the Debug build caught it under the fuzzer.)
TEST(BadInput, PdusBehindAnH2CTermReqAreNotExecuted) {
  RunningTarget t;
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  TermReqPdu term{};
  term.ch.type = uint8_t(PduType::H2CTermReq);
  term.ch.hlen = sizeof(term);
  term.ch.plen = sizeof(term);
  term.fes = uint16_t(Fes::InvalidHeaderField);
  Bytes segment = bytes_of(term);
  const Bytes connect = capsule_pdu(connect_sqe(s.cid(), 0), connect_data(kTestNqn, kHostNqn, kDynamicCntlid),
                                    false, false);
  segment.insert(segment.end(), connect.begin(), connect.end());
  ASSERT_TRUE(s.c.send(segment));
  EXPECT_TRUE(s.c.expect_eof());
  // Controller IDs are handed out in turn: the next Connect gets the first one only if the
  // Connect behind the TermReq made no controller.
  Session next;
  ASSERT_TRUE(next.open(t.port()));
  Cqe cqe{};
  ASSERT_TRUE(next.connect_admin(cqe));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(cqe.dw0 & 0xFFFF, 1u) << "a controller was made for the Connect behind the H2CTermReq";
}

// ------------------------------------------------------------------ limits at the edge

// The deepest queue the wire can describe: SQSIZE 0xFFFF asks for 65536 entries, one more
// than a 16-bit head index holds. Refused, through the discovery NQN that any host reaches,
// and the target goes on (it once took a modulo by the wrapped size and died of SIGFPE).
TEST(BadInput, ConnectSqsizeBeyondSixteenBits) {
  target::TargetConfig cfg = default_config();
  cfg.max_queue_depth = 65535;
  RunningTarget t(cfg);
  for (const char* nqn : {nvme::kDiscoveryNqn, kTestNqn}) {
    Session s;
    ASSERT_TRUE(s.open(t.port()));
    Cqe cqe{};
    ASSERT_TRUE(s.command(connect_sqe(s.cid(), 0, 128), connect_data(nqn, kHostNqn, kDynamicCntlid), cqe));
    EXPECT_TRUE(status_is(cqe, 1, 0x82)) << nqn << ": an admin queue of 129 entries";
    ASSERT_TRUE(s.command(connect_sqe(s.cid(), 0, 0xFFFF), connect_data(nqn, kHostNqn, kDynamicCntlid), cqe));
    EXPECT_TRUE(status_is(cqe, 1, 0x82)) << nqn;  // Connect Invalid Parameters
    EXPECT_EQ(cqe.dw0 >> 16, 0u) << "IATTR: the parameter is in the command";
    EXPECT_EQ(cqe.dw0 & 0xFFFF, uint32_t(offsetof(ConnectCmd, sqsize))) << "IPO: SQSIZE";
  }
  // An I/O queue, whose depth only max_queue_depth bounds.
  Session admin, io;
  Cqe cqe{};
  ASSERT_TRUE(admin.open(t.port()));
  ASSERT_TRUE(admin.connect_admin(cqe));
  const uint16_t cntlid = uint16_t(cqe.dw0);
  ASSERT_TRUE(admin.command(property_sqe(admin.cid(), FabricsType::PropertySet, prop::CC, kCcEnable), {}, cqe));
  ASSERT_TRUE(admin.command(set_features_nq_sqe(admin.cid(), 1), {}, cqe));
  ASSERT_TRUE(io.open(t.port()));
  ASSERT_TRUE(io.command(connect_sqe(io.cid(), 1, 0xFFFF), connect_data(kTestNqn, kHostNqn, cntlid), cqe));
  EXPECT_TRUE(status_is(cqe, 1, 0x82)) << "an I/O queue of 65536 entries";
  expect_healthy(t);
}

// A discovery controller is open to any host; one that asks for no keep-alive (KATO 0)
// gets discovery_kato_ms anyway (120 s by default, as the Linux target forces), so idle
// discovery sessions cannot hold connection slots for good. Real time on purpose: through
// the listener, with the target serving others after (expect_eof waits 10 x KATO); the
// deadline to the millisecond is ConnectionDeadlines.DiscoverySessionWithoutKeepAliveTimesOut
// on a stepped clock.
TEST(BadInput, DiscoverySessionWithoutKeepAliveTimesOut) {
  target::TargetConfig cfg = default_config();
  cfg.discovery_kato_ms = 300;
  RunningTarget t(cfg);
  Session s;
  Cqe cqe{};
  ASSERT_TRUE(s.open_admin(t.port(), cqe, nvme::kDiscoveryNqn));
  Sqe gf{};
  gf.opc = uint8_t(AdminOpcode::GetFeatures);
  gf.flags = kSqeFlagsPsdtSgl;
  gf.cid = s.cid();
  gf.cdw10 = 0x0F;  // Keep Alive Timer
  ASSERT_TRUE(s.command(gf, {}, cqe));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(cqe.dw0, 300u) << "the forced keep-alive timeout is what Get Features reports";
  // Asking for none again with Set Features changes nothing.
  Sqe sf = gf;
  sf.opc = uint8_t(AdminOpcode::SetFeatures);
  sf.cid = s.cid();
  sf.cdw11 = 0;
  ASSERT_TRUE(s.command(sf, {}, cqe));
  ASSERT_TRUE(ok(cqe));
  gf.cid = s.cid();
  ASSERT_TRUE(s.command(gf, {}, cqe));
  EXPECT_EQ(cqe.dw0, 300u);
  // Silent from now on: the target ends the session.
  EXPECT_TRUE(s.c.expect_eof());
  expect_healthy(t);
}

// ------------------------------------------------------------------ controller state

Sqe identify_sqe(uint16_t cid, uint8_t cns) { return raw_sqe(cmd::identify(cns), cid, kIdentifyLen); }

uint32_t read_csts(Session& admin) {
  Cqe cqe{};
  EXPECT_TRUE(admin.command(property_sqe(admin.cid(), FabricsType::PropertyGet, prop::CSTS, 0), {}, cqe));
  EXPECT_TRUE(ok(cqe));
  return cqe.dw0;
}

AssertionResult sequence_error(const Cqe& cqe) { return status_is(cqe, 0, 0x0C); }

TEST(ControllerState, AdminCommandsWaitForEnable) {
  RunningTarget t;
  Session s;
  Cqe cqe{};
  ASSERT_TRUE(s.open_admin(t.port(), cqe));
  ASSERT_TRUE(s.command(identify_sqe(s.cid(), 1), {}, cqe));
  EXPECT_TRUE(sequence_error(cqe)) << "Identify before CC.EN=1";
  ASSERT_TRUE(s.command(set_features_nq_sqe(s.cid(), 1), {}, cqe));
  EXPECT_TRUE(sequence_error(cqe)) << "Set Features before CC.EN=1";
  ASSERT_TRUE(s.command(property_sqe(s.cid(), FabricsType::PropertySet, prop::CC, kCcEnable), {}, cqe));
  ASSERT_TRUE(ok(cqe));
  Bytes id;
  ASSERT_TRUE(s.command(identify_sqe(s.cid(), 1), {}, cqe, &id));
  EXPECT_TRUE(ok(cqe));
  EXPECT_EQ(id.size(), 4096u);
}

TEST(ControllerState, ResetStopsIoUntilEnabledAgain) {
  RunningTarget t;
  Session admin, io;
  open_io_queue(t, admin, io);
  expect_read_works(io);
  Cqe cqe{};
  ASSERT_TRUE(admin.command(property_sqe(admin.cid(), FabricsType::PropertySet, prop::CC, 0), {}, cqe));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(read_csts(admin), 0u) << "after CC.EN 1 -> 0: not ready, no shutdown status, no CFS";
  Bytes data;
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, 0, 1, 512), {}, cqe, &data));
  EXPECT_TRUE(sequence_error(cqe)) << "I/O on a reset controller";
  EXPECT_TRUE(data.empty());
  // A new I/O queue may not connect to it either.
  Session io2;
  ASSERT_TRUE(io2.open(t.port()));
  const uint16_t cntlid = 1;  // the only controller of a fresh target
  ASSERT_TRUE(io2.command(connect_sqe(io2.cid(), 1), connect_data(kTestNqn, kHostNqn, cntlid), cqe));
  EXPECT_TRUE(sequence_error(cqe)) << "an I/O queue connecting to a reset controller";
  ASSERT_TRUE(admin.command(identify_sqe(admin.cid(), 1), {}, cqe));
  EXPECT_TRUE(sequence_error(cqe)) << "admin commands on a reset controller";
  // Enabled again, the queue it kept works again (the Linux target behaves the same).
  ASSERT_TRUE(admin.command(property_sqe(admin.cid(), FabricsType::PropertySet, prop::CC, kCcEnable), {}, cqe));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(read_csts(admin) & prop::kCstsReady, prop::kCstsReady);
  expect_read_works(io);
}

TEST(ControllerState, ShutdownCompletesWithoutReadyAndStopsIo) {
  RunningTarget t;
  Session admin, io;
  open_io_queue(t, admin, io);
  Cqe cqe{};
  const uint32_t shn_normal = 1u << 14;
  ASSERT_TRUE(admin.command(property_sqe(admin.cid(), FabricsType::PropertySet, prop::CC, kCcEnable | shn_normal), {},
                            cqe));
  ASSERT_TRUE(ok(cqe));
  const uint32_t csts = read_csts(admin);
  EXPECT_EQ(csts & prop::kCstsShstMask, prop::kCstsShstComplete);
  EXPECT_EQ(csts & prop::kCstsReady, 0u) << "RDY together with SHST complete";
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, 0, 1, 512), {}, cqe));
  EXPECT_TRUE(sequence_error(cqe)) << "I/O after shutdown";
  // A reset clears the shutdown status; enabling again serves I/O.
  ASSERT_TRUE(admin.command(property_sqe(admin.cid(), FabricsType::PropertySet, prop::CC, 0), {}, cqe));
  EXPECT_EQ(read_csts(admin), 0u);
  ASSERT_TRUE(admin.command(property_sqe(admin.cid(), FabricsType::PropertySet, prop::CC, kCcEnable), {}, cqe));
  expect_read_works(io);
}

TEST(ControllerState, UnsupportedControllerConfigurationSetsCfs) {
  RunningTarget t;
  const struct {
    const char* what;
    uint32_t cc;
  } bad[] = {{"MPS 15", kCcEnable | (15u << 7)}, {"AMS 7", kCcEnable | (7u << 11)}, {"CSS 7", kCcEnable | (7u << 4)},
             {"IOSQES 5", (kCcEnable & ~(0xFu << 16)) | (5u << 16)}};
  for (const auto& b : bad) {
    Session s;
    ASSERT_TRUE(s.open(t.port()));
    Cqe cqe{};
    ASSERT_TRUE(s.connect_admin(cqe));
    ASSERT_TRUE(s.command(property_sqe(s.cid(), FabricsType::PropertySet, prop::CC, b.cc), {}, cqe));
    ASSERT_TRUE(ok(cqe)) << b.what;
    const uint32_t csts = read_csts(s);
    EXPECT_EQ(csts & prop::kCstsFatal, prop::kCstsFatal) << b.what << ": CSTS.CFS";
    EXPECT_EQ(csts & prop::kCstsReady, 0u) << b.what << ": CSTS.RDY";
    ASSERT_TRUE(s.command(identify_sqe(s.cid(), 1), {}, cqe));
    EXPECT_TRUE(sequence_error(cqe)) << b.what;
  }
  expect_healthy(t);
}

TEST(ControllerState, FusedAndPrpCommandsAreRefused) {
  RunningTarget t;
  Session admin, io;
  open_io_queue(t, admin, io);
  Cqe cqe{};
  Sqe w = rw_sqe(IoOpcode::Write, io.cid(), kRamNsid, 0, 1, 512, kSglDataBlockOffset);
  w.flags |= 0x1;  // FUSE: first command of a fused operation
  ASSERT_TRUE(io.command(w, Bytes(512, 0x77), cqe));
  EXPECT_TRUE(status_is(cqe, 0, 0x02)) << "a fused write";
  Sqe r = rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, 0, 1, 512);
  r.flags = 0;  // PSDT 00b: PRPs, which fabrics do not carry
  ASSERT_TRUE(io.command(r, {}, cqe));
  EXPECT_TRUE(status_is(cqe, 0, 0x02)) << "a PRP read";
  Sqe id = identify_sqe(admin.cid(), 1);
  id.flags = 0x80;  // PSDT 10b
  ASSERT_TRUE(admin.command(id, {}, cqe));
  EXPECT_TRUE(status_is(cqe, 0, 0x02)) << "an admin command with PSDT 10b";
  // The fused write did not run.
  Bytes data;
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, 0, 1, 512), {}, cqe, &data));
  ASSERT_TRUE(ok(cqe));
  EXPECT_TRUE(all_of(data.begin(), data.end(), [](uint8_t b) { return b == 0; }));
}

// Once the admin queue is gone its controller is, and its I/O queues stop at once (they used
// to serve commands until their next periodic check, up to 100 ms later).
TEST(ControllerState, IoQueueEndsWithItsAdminQueue) {
  RunningTarget t;
  Session admin, io;
  open_io_queue(t, admin, io);
  expect_read_works(io);
  admin.c.close();
  ASSERT_TRUE(controllers_drop_to(t, 0, std::chrono::seconds(5)));
  ASSERT_TRUE(io.send_capsule(rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, 0, 1, 512)));
  EXPECT_TRUE(io.c.expect_eof()) << "an I/O queue of a torn-down controller answered";
}

// ------------------------------------------------------------------ discovery memory

// A Get Log Page of the discovery log (70h) asking for len bytes.
Sqe discovery_log_sqe(uint16_t cid, uint32_t len) {
  return raw_sqe(cmd::get_log_page(uint8_t(LogPageId::Discovery), 0, len), cid, len);
}

// Discovery is open to any host. 1 MiB reads of a log that holds 2 KiB, pipelined on a few
// connections that never read the answers, used to take 1 MiB of buffer each (the whole
// budget, for as long as the connections stayed); now the buffers hold what the log holds.
TEST(DiscoveryMemory, PipelinedLogReadsHoldOnlyWhatTheLogHolds) {
  RunningTarget t;
  std::vector<std::unique_ptr<Session>> idle;
  for (int i = 0; i < 4; ++i) {
    auto s = std::make_unique<Session>();
    ASSERT_TRUE(s->open(t.port()));
    Cqe cqe{};
    ASSERT_TRUE(s->connect_admin(cqe, nvme::kDiscoveryNqn));
    ASSERT_TRUE(ok(cqe));
    for (int k = 0; k < 30; ++k) ASSERT_TRUE(s->send_capsule(discovery_log_sqe(s->cid(), 1u << 20)));
    idle.push_back(std::move(s));
  }
  // Until each connection's answers back up (the socket buffers are full and the rest is
  // queued or waiting): then everything that could take memory has.
  ASSERT_TRUE(wait_for(
      [&] {
        auto info = t.target().connection_info();
        return std::count_if(info.begin(), info.end(), [](const auto& c) { return c.send_queue_bytes > 0; }) >= 4;
      },
      10000));
  const uint64_t held = t.target().buffer_bytes();
  RecordProperty("buffer_bytes_held", std::to_string(held));
  EXPECT_LT(held, 1u << 20) << "120 pipelined 1 MiB discovery log reads hold " << held << " bytes of buffers";
  expect_healthy(t);
  // What one of them gets: the log, then zeros up to the length asked for.
  Session& s = *idle[0];
  Cqe cqe{};
  Bytes log;
  ASSERT_TRUE(s.read_response(2, cqe, &log));  // cid 1 was the Connect
  ASSERT_TRUE(ok(cqe));
  ASSERT_EQ(log.size(), 1u << 20);
  const auto numrec = read_as<uint64_t>(log, 8);
  EXPECT_GE(numrec, 2u);
  const size_t used = 1024 + numrec * 1024;
  EXPECT_TRUE(std::all_of(log.begin() + long(used), log.end(), [](uint8_t b) { return b == 0; }));
}

// Answered log reads give their memory back: eight discovery connections read 1 MiB logs,
// 30 at a time each, and then sit idle; the process (target and these clients) keeps no more than
// a few MiB of it (it kept about 250 MB).
TEST(DiscoveryMemory, AnsweredLogReadsGiveTheirMemoryBack) {
  RunningTarget t;
  std::vector<std::unique_ptr<Session>> idle;
  const uint64_t rss0 = rss_bytes();
  for (int i = 0; i < 8; ++i) {
    auto s = std::make_unique<Session>();
    ASSERT_TRUE(s->open(t.port()));
    Cqe cqe{};
    ASSERT_TRUE(s->connect_admin(cqe, nvme::kDiscoveryNqn));
    const uint16_t first = s->next_cid;
    for (int k = 0; k < 30; ++k) ASSERT_TRUE(s->send_capsule(discovery_log_sqe(s->cid(), 1u << 20)));  // pipelined
    for (int k = 0; k < 30; ++k) {
      Bytes log;
      ASSERT_TRUE(s->read_response(uint16_t(first + k), cqe, &log));
      ASSERT_TRUE(ok(cqe));
      ASSERT_EQ(log.size(), 1u << 20);
    }
    idle.push_back(std::move(s));
  }
  const uint64_t rss1 = rss_bytes();
  RecordProperty("rss_growth_kib", std::to_string((rss1 - std::min(rss0, rss1)) / 1024));
#if !defined(__SANITIZE_ADDRESS__)  // ASan keeps freed memory in its quarantine on purpose
  EXPECT_LT(rss1, rss0 + (16u << 20)) << "240 answered 1 MiB log reads left " << (rss1 - rss0) / (1 << 20)
                                      << " MiB behind";
#endif
  EXPECT_LT(t.target().buffer_bytes(), 1u << 20);
}

// A host that sends commands and never reads the answers holds what is queued for it: past
// send_timeout_ms without progress its connection is closed and that memory freed. Real
// time on purpose: 30 MiB of discovery log through a real socket, with the buffers counted
// back (waits of 33 x the timeout); the send-stall deadline to the millisecond is tested on a
// stepped clock in tests/unit/connection_deadlines_test.cpp.
TEST(DiscoveryMemory, AHostThatNeverReadsIsClosedAfterTheSendTimeout) {
  target::TargetConfig cfg = default_config();
  cfg.send_timeout_ms = 300;
  RunningTarget t(cfg);
  Session s;
  Cqe cqe{};
  ASSERT_TRUE(s.open_admin(t.port(), cqe, nvme::kDiscoveryNqn));
  // 30 MiB of answers: more than the socket buffers take, so the target's queue stops moving.
  for (int k = 0; k < 30; ++k) ASSERT_TRUE(s.send_capsule(discovery_log_sqe(s.cid(), 1u << 20)));
  EXPECT_TRUE(wait_for([&] { return t.target().live_connections() == 0; }, 10000))
      << "a connection whose host reads nothing is still open";
  EXPECT_EQ(t.target().buffer_bytes(), 0u);
  expect_healthy(t);
}

// ------------------------------------------------------------------ buffer budgets

// Sends n writes of len bytes (R2T path) on io and reads their R2Ts where they come, never
// sending any data: each holds a len-byte buffer until the target gives up on it.
void hold_write_buffers(Session& io, int n, uint32_t len) {
  for (int i = 0; i < n; ++i)
    ASSERT_TRUE(io.send_capsule(rw_sqe(IoOpcode::Write, io.cid(), kRamNsid, uint64_t(i) * (len / 512), len / 512, len)));
}

// That the data an R2T asks for is due within h2c_data_timeout_ms of the R2T however the
// host trickles it is tested on a stepped clock: H2CData.TrickledDataDoesNotMoveTheDeadline
// in tests/unit/connection_deadlines_test.cpp.

// One host cannot take the target's whole buffer budget: its connections together hold at
// most max_host_buffer_memory, and another host's writes run meanwhile.
// (The hosts are listed: on a subsystem open to any host, all hosts of one address share a budget.)
TEST(BufferBudgets, OneHostCannotTakeTheWholeBudget) {
  const std::string other = "nqn.2026-11.io.nvtcp:other-host";
  target::TargetConfig cfg = default_config();
  cfg.max_buffer_memory = 8u << 20;
  cfg.max_host_buffer_memory = 2u << 20;
  cfg.subsystems[0].allow_any_host = false;
  cfg.subsystems[0].hosts = {kHostNqn, other};
  RunningTarget t(cfg);
  Session admin, io;
  open_io_queue(t, admin, io);
  hold_write_buffers(io, 8, 1u << 20);  // 8 MiB asked for, no data ever sent
  ASSERT_TRUE(wait_for([&] { return t.target().usage().memory_waits.load() > 0; }, 5000));
  EXPECT_LE(t.target().buffer_bytes(), (2u << 20) + (64u << 10)) << "one host holds more than its budget";
  // Another host connects and moves megabytes meanwhile.
  expect_healthy(t, other);
  host::ControllerOptions opts;
  opts.hostnqn = other;
  opts.kato_ms = 0;
  std::string err;
  auto ctrl = host::Controller::connect(t.trid(kTestNqn, kRamNsid), opts, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(4, err);
  ASSERT_TRUE(qp) << err;
  std::vector<uint8_t> data = pattern(1u << 20, 77), back(1u << 20);
  struct Done {
    bool done = false;
    host::Completion c;
  } wd, rd;
  auto cb = [](void* ctx, const host::Completion& c) {
    static_cast<Done*>(ctx)->done = true;
    static_cast<Done*>(ctx)->c = c;
  };
  ASSERT_EQ(qp->write(kRamNsid, 40000, 2048, data.data(), cb, &wd), 0);
  ASSERT_TRUE(wait_for([&] { qp->process_completions(1000); return wd.done; }, 10000));
  ASSERT_TRUE(wd.c.status.ok()) << status_name(wd.c.status);
  ASSERT_EQ(qp->read(kRamNsid, 40000, 2048, back.data(), cb, &rd), 0);
  ASSERT_TRUE(wait_for([&] { qp->process_completions(1000); return rd.done; }, 10000));
  EXPECT_TRUE(back == data);
}

// I/O queues leave a sixteenth of the budget to admin queues and to connections not yet past
// Connect: when I/O has taken the rest, a new host still connects (its Connect data and
// Identify need buffers too) instead of getting Command Interrupted for as long as the I/O stays.
TEST(BufferBudgets, IoCannotLockHostsOutOfConnecting) {
  target::TargetConfig cfg = default_config();
  cfg.max_buffer_memory = 8u << 20;
  cfg.max_host_buffer_memory = 0;
  RunningTarget t(cfg);
  Session admin, io;
  open_io_queue(t, admin, io);
  hold_write_buffers(io, 12, 1u << 20);
  ASSERT_TRUE(wait_for([&] { return t.target().usage().memory_waits.load() > 0; }, 5000));
  EXPECT_GE(t.target().buffer_bytes(), 7u << 20) << "the I/O did not fill the budget: this test tests nothing";
  expect_healthy(t, "nqn.2026-11.io.nvtcp:newcomer");
}

// ------------------------------------------------------------------ connection limits

TEST(ConnectionLimits, PerSourceAddress) {
  target::TargetConfig cfg = default_config();
  cfg.max_connections_per_address = 4;
  RunningTarget t(cfg);
  std::vector<std::unique_ptr<Session>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<Session>());
    ASSERT_TRUE(held.back()->open(t.port()));
  }
  RawClient extra;
  ASSERT_TRUE(extra.connect(t.port()));
  EXPECT_TRUE(extra.expect_eof()) << "a fifth connection from 127.0.0.1 was kept";
  held.pop_back();  // one leaves: a newcomer from the same address is served
  ASSERT_TRUE(wait_for([&] { return t.target().live_connections() == 3; }, 5000));
  Session newcomer;
  ASSERT_TRUE(newcomer.open(t.port()));
  Cqe cqe{};
  ASSERT_TRUE(newcomer.connect_admin(cqe));
  EXPECT_TRUE(ok(cqe));
  // (expect_healthy() would open two connections at once: over this test's limit of 4.)
}

TEST(ConnectionLimits, PerHostNqn) {
  target::TargetConfig cfg = default_config();
  cfg.max_connections_per_host = 2;
  cfg.subsystems[0].allow_any_host = false;
  cfg.subsystems[0].hosts = {kHostNqn, "nqn.2026-11.io.nvtcp:another-host"};
  RunningTarget t(cfg);
  Session admin, io;
  open_io_queue(t, admin, io);  // two queues of kHostNqn
  Session third;
  ASSERT_TRUE(third.open(t.port()));
  Cqe cqe{};
  ASSERT_TRUE(third.connect_admin(cqe));
  EXPECT_TRUE(status_is(cqe, 1, 0x81)) << "a third queue of one host: Connect Controller Busy";
  expect_healthy(t, "nqn.2026-11.io.nvtcp:another-host");
  io.c.close();  // a queue ends: the host may connect again
  ASSERT_TRUE(wait_for([&] { return t.target().live_connections() == 2; }, 5000));
  Session again;
  ASSERT_TRUE(again.open(t.port()));
  ASSERT_TRUE(again.connect_admin(cqe));
  EXPECT_TRUE(ok(cqe));
}

// On a subsystem open to any host, a host NQN is whatever the sender claims: a fresh one per
// connection must not buy a fresh budget. Hosts nothing vouches for count under their address
// (here all of them are 127.0.0.1), and a listed host keeps its own.
TEST(ConnectionLimits, FreshNqnsFromOneAddressShareOneLimit) {
  const std::string listed = "nqn.2026-11.io.nvtcp:listed-host";
  target::TargetConfig cfg = default_config();
  cfg.max_connections_per_host = 2;
  target::SubsystemConfig closed = cfg.subsystems[0];
  closed.nqn = "nqn.2026-11.io.nvtcp:closed";
  closed.allow_any_host = false;
  closed.hosts = {listed};
  cfg.subsystems.push_back(closed);
  RunningTarget t(cfg);
  std::vector<std::unique_ptr<Session>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(std::make_unique<Session>());
    ASSERT_TRUE(held.back()->open(t.port()));
    Cqe cqe{};
    ASSERT_TRUE(held.back()->connect_admin(cqe, kTestNqn, fmt::format("nqn.2026-11.io.nvtcp:made-up-{}", i)));
    ASSERT_TRUE(ok(cqe));
  }
  Session third;
  ASSERT_TRUE(third.open(t.port()));
  Cqe cqe{};
  ASSERT_TRUE(third.connect_admin(cqe, kTestNqn, "nqn.2026-11.io.nvtcp:made-up-2"));
  EXPECT_TRUE(status_is(cqe, 1, 0x81)) << "a third made-up NQN from one address: Controller Busy";
  // The listed host is not held up by what the others took.
  Session named;
  ASSERT_TRUE(named.open(t.port()));
  ASSERT_TRUE(named.connect_admin(cqe, closed.nqn, listed));
  EXPECT_TRUE(ok(cqe));
}

// Each queue's request pool (SQSIZE requests of about 600 bytes: 600 KB at 1024 entries)
// counts in the buffer budget: queues cannot grow the target's memory past it. Admin queues of
// 128 entries (the most an admin queue may have) against the smallest budget allowed, 2 MiB.
TEST(ConnectionLimits, RequestPoolsCountInTheBufferBudget) {
  target::TargetConfig cfg = default_config();
  cfg.max_buffer_memory = 2u << 20;
  RunningTarget t(cfg);
  std::vector<std::unique_ptr<Session>> queues;
  int accepted = 0;
  for (int i = 0; i < 60; ++i) {
    auto s = std::make_unique<Session>();
    ASSERT_TRUE(s->open(t.port()));
    Cqe cqe{};
    ASSERT_TRUE(s->command(connect_sqe(s->cid(), 0, 127), connect_data(kTestNqn, kHostNqn, kDynamicCntlid), cqe));
    if (!ok(cqe)) {
      EXPECT_TRUE(status_is(cqe, 0, 0x21)) << "a Connect over the budget: Command Interrupted (retry later)";
      break;
    }
    ++accepted;
    queues.push_back(std::move(s));
  }
  EXPECT_GE(accepted, 10);
  EXPECT_LT(accepted, 60) << "sixty 128-entry queues fit in a 2 MiB budget: pools are not counted";
  EXPECT_LE(t.target().buffer_bytes(), cfg.max_buffer_memory);
  queues.clear();
  ASSERT_TRUE(wait_for([&] { return t.target().live_connections() == 0; }, 5000));
  EXPECT_EQ(t.target().buffer_bytes(), 0u);
  expect_healthy(t);
}

}  // namespace
}  // namespace nvtcp::test::bad_input_test

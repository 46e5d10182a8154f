// SPDX-License-Identifier: Apache-2.0
// A raw host side for integration tests: NVMe/TCP PDUs built byte by byte, a blocking TCP
// client and a Session that speaks just enough of the protocol to drive the target (ICReq,
// Connect, Property Set, capsules, responses and TermReqs), so a test can send exactly what a
// misbehaving or a very particular host sends.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"
#include "test_target.hpp"
#include "wire/features.hpp"
#include "wire/commands.hpp"
#include "wire/digest.hpp"
#include "wire/fabrics.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::test {

using namespace nvtcp::wire;
using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;
using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

constexpr const char* kHostNqn = "nqn.2026-11.io.nvtcp:bad-input";
constexpr uint8_t kHostId[16] = {0xba, 0xd1, 0x4e, 0x70, 0x00, 0x11, 0x22, 0x33,
                                 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb};
constexpr uint64_t kRamBlocks = (64ull << 20) / 512;
constexpr uint32_t kCcEnable = 0x00460001;                // EN, IOSQES 6, IOCQES 4
constexpr uint8_t kKeyedSglDataBlock = 0x40;              // RDMA's keyed SGL: not for TCP
constexpr int kRecvTimeoutMs = 3000;

// ------------------------------------------------------------------ byte helpers

inline void put_u32(Bytes& b, uint32_t v) {
  uint8_t t[4];
  std::memcpy(t, &v, 4);
  b.insert(b.end(), t, t + 4);
}

template <class T>
inline Bytes bytes_of(const T& v) {
  Bytes b(sizeof(T));
  std::memcpy(b.data(), &v, sizeof(T));
  return b;
}

template <class T>
inline T read_as(const Bytes& b, size_t off = 0) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

inline std::string hex(unsigned v) { return fmt::format("0x{:02x}", v); }

inline uint8_t sc_of(const Cqe& c) { return uint8_t((c.status >> 1) & 0xFF); }
inline uint8_t sct_of(const Cqe& c) { return uint8_t((c.status >> 9) & 0x7); }

// Completes a PDU whose header (type and the type-specific fields already set) is hdr:
// fills in flags/hlen/pdo/plen and appends the header digest, data and data digest. The
// target announces CPDA 0, so data starts right after the header (and its digest).
inline Bytes build_pdu(Bytes hdr, const Bytes& data, bool hdgst, bool ddgst, uint8_t flags = 0) {
  auto* ch = reinterpret_cast<CommonHeader*>(hdr.data());
  const uint32_t hlen = uint32_t(hdr.size());
  const uint32_t header_total = hlen + (hdgst ? kDigestLen : 0);
  const bool dd = ddgst && !data.empty();
  ch->flags = uint8_t(flags | (hdgst ? kFlagHdgst : 0) | (dd ? kFlagDdgst : 0));
  ch->hlen = uint8_t(hlen);
  ch->pdo = data.empty() ? 0 : uint8_t(header_total);
  ch->plen = header_total + uint32_t(data.size()) + (dd ? kDigestLen : 0);
  Bytes out;
  out.reserve(ch->plen);
  out.insert(out.end(), hdr.begin(), hdr.end());
  if (hdgst) put_u32(out, crc32c(hdr.data(), hlen));
  out.insert(out.end(), data.begin(), data.end());
  if (dd) put_u32(out, crc32c(data.data(), data.size()));
  return out;
}

inline Bytes icreq_pdu(uint8_t digest) {
  return bytes_of(make_icreq(0, digest & kIcDigestHeader, digest & kIcDigestData, 0));
}

inline Bytes capsule_pdu(const Sqe& sqe, const Bytes& data, bool hdgst, bool ddgst) {
  CapsuleCmdHeader h{};
  h.ch.type = uint8_t(PduType::CapsuleCmd);
  std::memcpy(h.sqe, &sqe, sizeof(Sqe));
  return build_pdu(bytes_of(h), data, hdgst, ddgst);
}

inline Bytes h2c_data_pdu(uint16_t cccid, uint16_t ttag, uint32_t datao, const Bytes& data, bool last) {
  H2CDataPdu h{};
  h.ch.type = uint8_t(PduType::H2CData);
  h.cccid = cccid;
  h.ttag = ttag;
  h.datao = datao;
  h.datal = uint32_t(data.size());
  return build_pdu(bytes_of(h), data, false, false, last ? kFlagDataLast : 0);
}

inline Sqe connect_sqe(uint16_t cid, uint16_t qid, uint16_t sqsize = 31) {
  Sqe s = cmd::connect(qid, sqsize, 0);
  s.cid = cid;
  return s;
}

inline Bytes connect_data(const std::string& subnqn, const std::string& hostnqn, uint16_t cntlid) {
  return bytes_of(cmd::connect_data(kHostId, cntlid, subnqn, hostnqn));
}

// A command as a raw session sends it: SGL PSDT, its CID, and an SGL for data_len bytes of
// data moved by R2T/H2CData or C2HData (or in the capsule, with kSglDataBlockOffset).
inline Sqe raw_sqe(Sqe s, uint16_t cid, uint32_t data_len = 0, uint8_t sgl_type = kSglTransportDataBlock) {
  s.flags = uint8_t((s.flags & ~kSqeFlagsPsdtMask) | kSqeFlagsPsdtSgl);
  s.cid = cid;
  s.sgl.length = data_len;
  s.sgl.type = sgl_type;
  return s;
}

// A Property Get or Set of 4 bytes (raw sessions send SGL PSDT on every command).
inline Sqe property_sqe(uint16_t cid, FabricsType t, uint32_t ofst, uint64_t value) {
  return raw_sqe(t == FabricsType::PropertyGet ? cmd::property_get(ofst, false) : cmd::property_set(ofst, value), cid);
}

inline Sqe set_features_nq_sqe(uint16_t cid, uint16_t nq) {
  return raw_sqe(cmd::set_number_of_queues(nq, nq), cid);
}

inline Sqe rw_sqe(IoOpcode opc, uint16_t cid, uint32_t nsid, uint64_t slba, uint32_t nlb, uint32_t sgl_len,
                  uint8_t sgl_type = kSglTransportDataBlock) {
  return raw_sqe(cmd::block_range(opc, nsid, slba, nlb), cid, sgl_len, sgl_type);
}

// ------------------------------------------------------------------ raw client

class RawClient {
 public:
  RawClient() = default;
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  // from: the loopback address to connect from (another 127.x address is another host).
  AssertionResult connect(uint16_t port, const char* from = nullptr) {
    close();
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return AssertionFailure() << "socket: " << strerror(errno);
    if (from) {
      sockaddr_in src{};
      src.sin_family = AF_INET;
      if (inet_pton(AF_INET, from, &src.sin_addr) != 1 || ::bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof(src)) < 0)
        return AssertionFailure() << "bind to " << from << ": " << strerror(errno);
    }
    timeval tv{kRecvTimeoutMs / 1000, (kRecvTimeoutMs % 1000) * 1000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) < 0)
      return AssertionFailure() << "connect to port " << port << ": " << strerror(errno);
    return AssertionSuccess();
  }

  AssertionResult send(const Bytes& b) { return send(b.data(), b.size()); }
  AssertionResult send(const uint8_t* p, size_t n) {
    while (n > 0) {
      ssize_t r = ::send(fd_, p, n, MSG_NOSIGNAL);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return AssertionFailure() << "send: " << (r < 0 ? strerror(errno) : "0 bytes");
      p += r;
      n -= size_t(r);
    }
    return AssertionSuccess();
  }

  // One whole PDU: the 8-byte common header, then plen - 8 bytes.
  AssertionResult read_pdu(Bytes& out) {
    out.assign(sizeof(CommonHeader), 0);
    if (auto r = read_exact(out.data(), out.size()); !r) return r << " (reading a common header)";
    auto ch = read_as<CommonHeader>(out);
    if (ch.plen < sizeof(CommonHeader) || ch.plen > (4u << 20))
      return AssertionFailure() << "PDU type " << hex(ch.type) << " with plen "
                                << ch.plen;
    out.resize(ch.plen);
    if (auto r = read_exact(out.data() + 8, ch.plen - 8); !r) return r << " (reading the rest of a PDU)";
    return AssertionSuccess();
  }

  // The peer closed the connection in order: recv gives 0 (FIN). Every PDU here is sent
  // with one send() and the target reads 128 KiB at a time, so it has nothing left unread
  // when it closes and a reset (ECONNRESET) would be a real deviation.
  AssertionResult expect_eof() {
    uint8_t b[256];
    for (;;) {
      ssize_t r = ::recv(fd_, b, sizeof(b), 0);
      if (r == 0) return AssertionSuccess();
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && errno == ECONNRESET)
        return AssertionFailure() << "the target reset the connection instead of closing it (bytes left unread?)";
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return AssertionFailure() << "connection still open after " << kRecvTimeoutMs << " ms";
      if (r < 0) return AssertionFailure() << "recv: " << strerror(errno);
      return AssertionFailure() << "expected EOF, got " << r << " more bytes (first byte " << hex(b[0])
                                << ")";
    }
  }

  // Nothing arrives (and the connection stays open) for ms milliseconds.
  int fd() const { return fd_; }

  AssertionResult expect_silence(int ms) {
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, ms);
    if (r == 0) return AssertionSuccess();
    uint8_t b;
    ssize_t n = ::recv(fd_, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return AssertionFailure() << "the target closed the connection";
    return AssertionFailure() << "the target sent something (first byte " << hex(b) << ")";
  }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  AssertionResult read_exact(uint8_t* p, size_t n) {
    size_t got = 0;
    while (got < n) {
      ssize_t r = ::recv(fd_, p + got, n - got, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) return AssertionFailure() << "EOF after " << got << " of " << n << " bytes";
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return AssertionFailure() << "timed out (" << kRecvTimeoutMs << " ms) after " << got << " of " << n
                                  << " bytes";
      if (r < 0) return AssertionFailure() << "recv: " << strerror(errno);
      got += size_t(r);
    }
    return AssertionSuccess();
  }

  int fd_ = -1;
};

// A raw host-side connection that speaks just enough NVMe/TCP to drive the target.
class Session {
 public:
  RawClient c;
  bool hdgst = false, ddgst = false;
  uint16_t next_cid = 1;

  // TCP connect, ICReq (digest: bit 0 HDGST, bit 1 DDGST) and a checked ICResp.
  AssertionResult open(uint16_t port, uint8_t digest = 0, const char* from = nullptr) {
    if (auto r = c.connect(port, from); !r) return r;
    if (auto r = c.send(icreq_pdu(digest)); !r) return r;
    Bytes p;
    if (auto r = c.read_pdu(p); !r) return r << " (waiting for ICResp)";
    auto ch = read_as<CommonHeader>(p);
    if (ch.type != uint8_t(PduType::ICResp) || ch.hlen != 128 || ch.plen != 128)
      return AssertionFailure() << "expected ICResp, got type " << unsigned(ch.type) << " hlen " << unsigned(ch.hlen)
                                << " plen " << ch.plen;
    auto resp = read_as<ICRespPdu>(p);
    if (resp.pfv != kPfv || resp.digest != digest)
      return AssertionFailure() << "ICResp pfv " << resp.pfv << " digest " << unsigned(resp.digest)
                                << " (asked for " << unsigned(digest) << ")";
    hdgst = digest & 1;
    ddgst = digest & 2;
    return AssertionSuccess();
  }

  AssertionResult send_capsule(const Sqe& sqe, const Bytes& data = {}) {
    return c.send(capsule_pdu(sqe, data, hdgst, ddgst));
  }

  // A PDU from the target, with its digests (when negotiated) verified.
  AssertionResult read_pdu(Bytes& p) {
    if (auto r = c.read_pdu(p); !r) return r;
    auto ch = read_as<CommonHeader>(p);
    bool term = ch.type == uint8_t(PduType::C2HTermReq);
    if (!term && bool(ch.flags & kFlagHdgst) != hdgst)
      return AssertionFailure() << "PDU type " << unsigned(ch.type) << " HDGSTF " << (ch.flags & kFlagHdgst);
    if (!term && hdgst) {
      if (p.size() < ch.hlen + 4u) return AssertionFailure() << "PDU too short for its header digest";
      uint32_t got = read_as<uint32_t>(p, ch.hlen);
      if (got != crc32c(p.data(), ch.hlen)) return AssertionFailure() << "bad header digest from the target";
    }
    if (!term && (ch.flags & kFlagDdgst)) {
      uint32_t got = read_as<uint32_t>(p, p.size() - 4);
      if (got != crc32c(p.data() + ch.pdo, p.size() - 4 - ch.pdo))
        return AssertionFailure() << "bad data digest from the target";
    }
    return AssertionSuccess();
  }

  // Reads PDUs up to the CapsuleResp for cid, collecting C2HData payload into data.
  AssertionResult read_response(uint16_t cid, Cqe& cqe, Bytes* data = nullptr) {
    for (;;) {
      Bytes p;
      if (auto r = read_pdu(p); !r) return r << " (waiting for the response to cid " << cid << ")";
      auto ch = read_as<CommonHeader>(p);
      if (ch.type == uint8_t(PduType::C2HData)) {
        auto d = read_as<C2HDataPdu>(p);
        if (d.cccid != cid) return AssertionFailure() << "C2HData for cid " << d.cccid << ", expected " << cid;
        if (data) {
          if (d.datao != data->size()) return AssertionFailure() << "C2HData datao " << d.datao;
          data->insert(data->end(), p.begin() + ch.pdo, p.begin() + ch.pdo + d.datal);
        }
        continue;
      }
      if (ch.type == uint8_t(PduType::CapsuleResp)) {
        if (ch.hlen != sizeof(CapsuleRespPdu))
          return AssertionFailure() << "CapsuleResp hlen " << unsigned(ch.hlen);
        cqe = read_as<Cqe>(p, sizeof(CommonHeader));
        if (cqe.cid != cid) return AssertionFailure() << "CapsuleResp for cid " << cqe.cid << ", expected " << cid;
        return AssertionSuccess();
      }
      if (ch.type == uint8_t(PduType::C2HTermReq)) {
        auto t = read_as<TermReqPdu>(p);
        return AssertionFailure() << "C2HTermReq FES " << t.fes << " FEI " << t.fei << " instead of a response";
      }
      return AssertionFailure() << "unexpected PDU type " << hex(ch.type);
    }
  }

  AssertionResult command(const Sqe& sqe, const Bytes& out, Cqe& cqe, Bytes* in = nullptr) {
    if (auto r = send_capsule(sqe, out); !r) return r;
    return read_response(sqe.cid, cqe, in);
  }

  uint16_t cid() { return next_cid++; }

  // Admin Connect (qid 0, dynamic controller); the new cntlid lands in cqe.dw0.
  AssertionResult connect_admin(Cqe& cqe, const std::string& subnqn = kTestNqn,
                                const std::string& hostnqn = kHostNqn) {
    return command(connect_sqe(cid(), 0), connect_data(subnqn, hostnqn, kDynamicCntlid), cqe);
  }

  // open() and connect_admin() with the Connect's success checked: where most raw cases
  // start. The new cntlid lands in cqe.dw0.
  AssertionResult open_admin(uint16_t port, Cqe& cqe, const std::string& subnqn = kTestNqn,
                             const std::string& hostnqn = kHostNqn) {
    if (auto r = open(port); !r) return r;
    if (auto r = connect_admin(cqe, subnqn, hostnqn); !r) return r;
    if (((cqe.status >> 1) & 0x7FF) != 0)  // SCT and SC, as ok() reads them
      return AssertionFailure() << "admin Connect failed: SCT " << unsigned((cqe.status >> 9) & 0x7) << " SC "
                                << hex((cqe.status >> 1) & 0xFF);
    return AssertionSuccess();
  }
};

inline AssertionResult status_is(const Cqe& cqe, uint8_t sct, uint8_t sc) {
  if (sct_of(cqe) == sct && sc_of(cqe) == sc) return AssertionSuccess();
  return AssertionFailure() << "status SCT " << unsigned(sct_of(cqe)) << " SC " << hex(sc_of(cqe)) << " ("
                            << status_name(Status::from_cqe(cqe.status)) << "), expected SCT " << unsigned(sct)
                            << " SC " << hex(sc);
}

inline AssertionResult ok(const Cqe& cqe) { return status_is(cqe, 0, 0); }

// The next PDU is a C2HTermReq with fes (and fei, if given), quoting (a prefix of) the
// offending PDU's header, and then the target closes the connection.
inline AssertionResult expect_term_req(Session& s, Fes fes, std::optional<uint32_t> fei, const Bytes& offending) {
  Bytes p;
  if (auto r = s.c.read_pdu(p); !r) return r << " (waiting for C2HTermReq)";
  auto ch = read_as<CommonHeader>(p);
  if (ch.type != uint8_t(PduType::C2HTermReq))
    return AssertionFailure() << "expected C2HTermReq (0x03), got PDU type " << hex(ch.type);
  if (ch.hlen != sizeof(TermReqPdu)) return AssertionFailure() << "C2HTermReq hlen " << unsigned(ch.hlen);
  if (ch.flags & (kFlagHdgst | kFlagDdgst)) return AssertionFailure() << "C2HTermReq carries digest flags";
  auto t = read_as<TermReqPdu>(p);
  if (t.fes != uint16_t(fes))
    return AssertionFailure() << "C2HTermReq FES " << t.fes << " (" << fes_name(Fes(t.fes), PduType::C2HTermReq)
                              << "), expected " << unsigned(fes) << " (" << fes_name(fes, PduType::C2HTermReq)
                              << "); FEI " << t.fei;
  if (fei && t.fei != *fei) return AssertionFailure() << "C2HTermReq FEI " << t.fei << ", expected " << *fei;
  size_t quoted = p.size() - sizeof(TermReqPdu);
  // A C2HTermReq is at most 152 bytes (Linux hosts reject longer ones): 128 quoted bytes.
  if (quoted > 128) return AssertionFailure() << "C2HTermReq quotes " << quoted << " bytes (plen over 152)";
  if (quoted > offending.size() ||
      !std::equal(p.begin() + sizeof(TermReqPdu), p.end(), offending.begin()))
    return AssertionFailure() << "C2HTermReq data (" << quoted << " bytes) is not the offending PDU header";
  if (auto r = s.c.expect_eof(); !r) return r << " (after C2HTermReq)";
  ::testing::Test::RecordProperty("termreq_quoted_bytes", int(quoted));
  return AssertionSuccess();
}

// A fresh client gets served: raw ICReq + admin Connect, and the host library's full
// controller bring-up (Connect, enable, Identify, queue count).
inline void expect_healthy(RunningTarget& t, const std::string& hostnqn = kHostNqn) {
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  Cqe cqe{};
  ASSERT_TRUE(s.connect_admin(cqe, kTestNqn, hostnqn));
  EXPECT_TRUE(ok(cqe));
  EXPECT_NE(cqe.dw0 & 0xFFFF, 0u);
  s.c.close();

  host::ControllerOptions opts;
  opts.hostnqn = hostnqn;
  // No keep-alive: this check is about surviving bad input, and keep-alive expiry has its
  // own tests (a KATO here would also expose it to a separate, timing-dependent issue).
  opts.kato_ms = 0;
  std::string err;
  auto ctrl = host::Controller::connect(t.trid(), opts, err);
  ASSERT_NE(ctrl, nullptr) << "host library could not connect: " << err;
  EXPECT_NE(ctrl->cntlid(), 0u);
}

inline size_t controller_count(RunningTarget& t) {
  return t.target().state().find_subsystem(kTestNqn)->controller_count();
}

inline AssertionResult controllers_drop_to(RunningTarget& t, size_t want, std::chrono::milliseconds within) {
  auto deadline = Clock::now() + within;
  for (;;) {
    size_t n = controller_count(t);
    if (n == want) return AssertionSuccess();
    if (Clock::now() > deadline)
      return AssertionFailure() << "subsystem still has " << n << " controllers after " << within.count()
                                << " ms (want " << want << ")";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Admin queue connected and enabled with one I/O queue granted, and I/O queue 1 connected.
inline void open_io_queue(RunningTarget& t, Session& admin, Session& io, uint8_t digest = 0) {
  Cqe cqe{};
  ASSERT_TRUE(admin.open(t.port()));
  ASSERT_TRUE(admin.connect_admin(cqe));
  ASSERT_TRUE(ok(cqe));
  uint16_t cntlid = uint16_t(cqe.dw0);
  ASSERT_TRUE(admin.command(property_sqe(admin.cid(), FabricsType::PropertySet, prop::CC, kCcEnable), {}, cqe));
  ASSERT_TRUE(ok(cqe));
  ASSERT_TRUE(admin.command(set_features_nq_sqe(admin.cid(), 1), {}, cqe));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(cqe.dw0, 0u);  // one SQ and one CQ, 0's based
  ASSERT_TRUE(io.open(t.port(), digest));
  ASSERT_TRUE(io.command(connect_sqe(io.cid(), 1), connect_data(kTestNqn, kHostNqn, cntlid), cqe));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(uint16_t(cqe.dw0), cntlid);
}

// The next PDU on io is the R2T for cid.
inline AssertionResult r2t_for(Session& io, uint16_t cid, R2TPdu& r2t) {
  Bytes p;
  if (auto r = io.read_pdu(p); !r) return r;
  if (p[0] != uint8_t(PduType::R2T)) return AssertionFailure() << "PDU type " << hex(p[0]) << " instead of R2T";
  r2t = read_as<R2TPdu>(p);
  if (r2t.cccid != cid) return AssertionFailure() << "R2T for cid " << r2t.cccid;
  return AssertionSuccess();
}

// A one-block read on the ram namespace still works on this queue.
inline void expect_read_works(Session& io) {
  Cqe cqe{};
  Bytes data;
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, 0, 1, 512), {}, cqe, &data));
  EXPECT_TRUE(ok(cqe));
  EXPECT_EQ(data.size(), 512u);
}

// ---- admin-queue scaffolding for asynchronous events and log pages

inline Sqe admin_sqe(AdminOpcode opc, uint16_t cid, uint32_t nsid = 0) {
  Sqe s{};
  s.opc = uint8_t(opc);
  s.cid = cid;
  s.nsid = nsid;
  s.flags = kSqeFlagsPsdtSgl;
  s.sgl.type = kSglTransportDataBlock;  // no data unless a length is set
  return s;
}

inline Sqe get_log_sqe(uint16_t cid, LogPageId lid, uint32_t len, bool retain = false, uint32_t nsid = 0) {
  return raw_sqe(cmd::get_log_page(uint8_t(lid), nsid, len, 0, retain), cid, len);
}

// An admin queue, connected and enabled, with host NQN hostnqn.
struct AdminQueue {
  Session s;
  uint16_t cntlid = 0;
  std::string hostnqn;
  // Connected, enabled, one I/O queue granted.
  void open(uint16_t port, const std::string& nqn) {
    hostnqn = nqn;
    Cqe cqe{};
    ASSERT_TRUE(s.open(port));
    ASSERT_TRUE(s.command(connect_sqe(s.cid(), 0), connect_data(kTestNqn, hostnqn, kDynamicCntlid), cqe));
    ASSERT_TRUE(ok(cqe));
    cntlid = uint16_t(cqe.dw0);
    ASSERT_TRUE(s.command(property_sqe(s.cid(), FabricsType::PropertySet, prop::CC, kCcEnable), {}, cqe));
    ASSERT_TRUE(ok(cqe));
    ASSERT_TRUE(s.command(set_features_nq_sqe(s.cid(), 1), {}, cqe));
    ASSERT_TRUE(ok(cqe));
  }
  void open_io(uint16_t port, Session& io) {
    Cqe cqe{};
    ASSERT_TRUE(io.open(port));
    ASSERT_TRUE(io.command(connect_sqe(io.cid(), 1), connect_data(kTestNqn, hostnqn, cntlid), cqe));
    ASSERT_TRUE(ok(cqe));
  }
  void enable_events(uint32_t aec) {
    Sqe sqe = admin_sqe(AdminOpcode::SetFeatures, s.cid());
    sqe.cdw10 = kFeatureAsyncEventConfig;
    sqe.cdw11 = aec;
    Cqe cqe{};
    ASSERT_TRUE(s.command(sqe, {}, cqe));
    ASSERT_TRUE(ok(cqe));
  }
  // Sends an Asynchronous Event Request; its response comes when an event does.
  uint16_t hold_aer() {
    const uint16_t cid = s.cid();
    EXPECT_TRUE(s.send_capsule(admin_sqe(AdminOpcode::AsyncEventRequest, cid)));
    return cid;
  }
  std::vector<uint32_t> changed_namespaces(bool retain) {
    Cqe cqe{};
    Bytes data;
    EXPECT_TRUE(s.command(get_log_sqe(s.cid(), LogPageId::ChangedNamespaces, 4096, retain), {}, cqe, &data));
    EXPECT_TRUE(ok(cqe));
    std::vector<uint32_t> out;
    for (size_t off = 0; off + 4 <= data.size(); off += 4) {
      const uint32_t nsid = read_as<uint32_t>(data, off);
      if (nsid == 0) break;
      out.push_back(nsid);
    }
    return out;
  }
  uint64_t nsze(uint32_t nsid) {
    Sqe sqe = admin_sqe(AdminOpcode::Identify, s.cid(), nsid);
    sqe.cdw10 = uint32_t(Cns::Namespace);
    sqe.sgl.length = kIdentifyLen;
    Cqe cqe{};
    Bytes data;
    EXPECT_TRUE(s.command(sqe, {}, cqe, &data));
    EXPECT_TRUE(ok(cqe));
    return data.size() >= 8 ? read_as<uint64_t>(data, 0) : 0;
  }
};

// The response to a held Asynchronous Event Request, read with a deadline long enough for
// its cause to be seen (the target looks at backing files once a second).
inline constexpr int kEventDueMs = 5000;
inline AssertionResult event_arrives(Session& s, uint16_t cid, uint32_t& dw0) {
  timeval tv{kEventDueMs / 1000, 0};
  setsockopt(s.c.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  Cqe cqe{};
  auto r = s.read_response(cid, cqe);
  tv = {kRecvTimeoutMs / 1000, 0};
  setsockopt(s.c.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (!r) return r;
  if (auto st = ok(cqe); !st) return st;
  dw0 = cqe.dw0;
  return AssertionSuccess();
}

}  // namespace nvtcp::test

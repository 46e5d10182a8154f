// SPDX-License-Identifier: Apache-2.0
// The receive state machine against byte streams split at every possible point.
#include "transport/pdu_receiver.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "nvtcp/sqe.hpp"
#include "wire/digest.hpp"

namespace pdu_receiver_test {

using namespace nvtcp::wire;
using nvtcp::transport::PduHandler;
using nvtcp::transport::PduReceiver;
using nvtcp::transport::Side;

namespace {

struct Recorder : PduHandler {
  struct Pdu {
    uint8_t type;
    std::vector<uint8_t> header;
    std::vector<uint8_t> data;
    bool data_ok;
  };
  std::vector<Pdu> pdus;
  std::vector<uint8_t> sink;
  bool error = false;
  Fes fes{};
  uint32_t fei = 0;

  bool on_pdu_header(const uint8_t*, uint32_t data_len, uint8_t*& dst) override {
    sink.assign(data_len, 0);
    dst = sink.data();
    return true;
  }
  void on_pdu_complete(const uint8_t* hdr, bool data_ok) override {
    const auto* ch = reinterpret_cast<const CommonHeader*>(hdr);
    pdus.push_back({ch->type, std::vector<uint8_t>(hdr, hdr + ch->hlen), sink, data_ok});
  }
  void on_pdu_error(Fes f, uint32_t i, const std::string&) override {
    error = true;
    fes = f;
    fei = i;
  }
};

// A CapsuleCmd with in-capsule data, built the way a host with the given options would.
std::vector<uint8_t> capsule(uint16_t cid, const std::vector<uint8_t>& data, bool hdgst, bool ddgst, uint8_t cpda) {
  CapsuleCmdHeader h{};
  h.ch.type = uint8_t(PduType::CapsuleCmd);
  h.ch.flags = uint8_t((hdgst ? kFlagHdgst : 0) | (ddgst && !data.empty() ? kFlagDdgst : 0));
  h.ch.hlen = sizeof(h);
  Sqe sqe{};
  sqe.opc = 0x01;
  sqe.cid = cid;
  sqe.sgl.length = uint32_t(data.size());
  sqe.sgl.type = kSglDataBlockOffset;
  std::memcpy(h.sqe, &sqe, sizeof(sqe));
  uint32_t pdo = data.empty() ? 0 : data_offset(sizeof(h), hdgst, cpda);
  h.ch.pdo = uint8_t(pdo);
  h.ch.plen = data.empty() ? sizeof(h) + (hdgst ? 4 : 0) : pdo + uint32_t(data.size()) + (ddgst ? 4 : 0);
  std::vector<uint8_t> out(reinterpret_cast<uint8_t*>(&h), reinterpret_cast<uint8_t*>(&h) + sizeof(h));
  if (hdgst) {
    uint32_t c = crc32c(&h, sizeof(h));
    out.insert(out.end(), reinterpret_cast<uint8_t*>(&c), reinterpret_cast<uint8_t*>(&c) + 4);
  }
  if (!data.empty()) {
    out.resize(pdo, 0);
    out.insert(out.end(), data.begin(), data.end());
    if (ddgst) {
      uint32_t c = crc32c(data.data(), data.size());
      out.insert(out.end(), reinterpret_cast<uint8_t*>(&c), reinterpret_cast<uint8_t*>(&c) + 4);
    }
  }
  return out;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(seed + i * 31);
  return v;
}

struct Mode {
  bool hdgst, ddgst;
  uint8_t cpda;
};

class ReceiverSplit : public ::testing::TestWithParam<Mode> {};

TEST_P(ReceiverSplit, EverySplitPointYieldsTheSamePdus) {
  Mode m = GetParam();
  std::vector<uint8_t> stream;
  auto d1 = pattern(100, 1), d2 = pattern(0, 0), d3 = pattern(513, 7);
  for (auto* d : {&d1, &d2, &d3}) {
    auto c = capsule(uint16_t(stream.size()), *d, m.hdgst, m.ddgst, m.cpda);
    stream.insert(stream.end(), c.begin(), c.end());
  }
  // Feed the stream in two pieces, cut at every byte boundary, and once byte by byte.
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    Recorder r;
    PduReceiver rx(Side::Target, &r);
    rx.set_digests(m.hdgst, m.ddgst);
    rx.feed(stream.data(), cut);
    rx.feed(stream.data() + cut, stream.size() - cut);
    ASSERT_FALSE(r.error) << "cut at " << cut;
    ASSERT_EQ(r.pdus.size(), 3u) << "cut at " << cut;
    EXPECT_EQ(r.pdus[0].data, d1);
    EXPECT_TRUE(r.pdus[1].data.empty());
    EXPECT_EQ(r.pdus[2].data, d3);
    for (auto& p : r.pdus) EXPECT_TRUE(p.data_ok);
  }
  Recorder r;
  PduReceiver rx(Side::Target, &r);
  rx.set_digests(m.hdgst, m.ddgst);
  for (uint8_t b : stream) rx.feed(&b, 1);
  EXPECT_EQ(r.pdus.size(), 3u);
}

INSTANTIATE_TEST_SUITE_P(Digests, ReceiverSplit,
                         ::testing::Values(Mode{false, false, 0}, Mode{true, false, 0}, Mode{false, true, 0},
                                           Mode{true, true, 0}, Mode{true, true, 3}, Mode{false, false, 31}));

TEST(Receiver, BadDataDigestIsReportedPerPdu) {
  auto d = pattern(64, 3);
  auto c = capsule(1, d, false, true, 0);
  c.back() ^= 0xFF;  // corrupt the data digest
  Recorder r;
  PduReceiver rx(Side::Target, &r);
  rx.set_digests(false, true);
  rx.feed(c.data(), c.size());
  ASSERT_EQ(r.pdus.size(), 1u);
  EXPECT_FALSE(r.pdus[0].data_ok);
  EXPECT_FALSE(r.error);  // a data digest error does not break framing
}

TEST(Receiver, BadHeaderDigestIsFatal) {
  auto c = capsule(1, {}, true, false, 0);
  c[sizeof(CapsuleCmdHeader)] ^= 1;
  Recorder r;
  PduReceiver rx(Side::Target, &r);
  rx.set_digests(true, false);
  EXPECT_FALSE(rx.feed(c.data(), c.size()));
  EXPECT_TRUE(r.error);
  EXPECT_EQ(r.fes, Fes::HeaderDigestError);
}

TEST(Receiver, RejectsWrongDirectionAndBadLengths) {
  struct Case {
    uint8_t type, hlen;
    uint32_t plen;
    Fes fes;
    uint32_t fei;
  };
  for (Case c : {Case{uint8_t(PduType::C2HData), 24, 24, Fes::InvalidHeaderField, 0},    // host-bound PDU
                 Case{0x0A, 24, 24, Fes::InvalidHeaderField, 0},                          // unknown type
                 Case{uint8_t(PduType::CapsuleCmd), 24, 72, Fes::InvalidHeaderField, 2},  // wrong hlen
                 Case{uint8_t(PduType::CapsuleCmd), 72, 40, Fes::InvalidHeaderField, 4},  // plen < hlen
                 Case{uint8_t(PduType::CapsuleCmd), 72, 1u << 30, Fes::DataLimitExceeded, 4}}) {
    CommonHeader ch{c.type, 0, c.hlen, 0, c.plen};
    Recorder r;
    PduReceiver rx(Side::Target, &r);
    EXPECT_FALSE(rx.feed(reinterpret_cast<uint8_t*>(&ch), sizeof(ch)));
    EXPECT_TRUE(r.error);
    EXPECT_EQ(r.fes, c.fes) << "type " << int(c.type);
    EXPECT_EQ(r.fei, c.fei) << "type " << int(c.type);
  }
}

TEST(PduReceiver, AnOverlongPduIsAnInvalidPlenOnTheHostSide) {
  // 05h in a host's H2CTermReq means "R2T limit exceeded": a C2HData longer than the host takes
  // is an invalid PLEN instead (FEI 4, the field's offset).
  CommonHeader ch{uint8_t(PduType::C2HData), 0, 24, 0, 1u << 30};
  Recorder r;
  PduReceiver rx(Side::Host, &r);
  EXPECT_FALSE(rx.feed(reinterpret_cast<uint8_t*>(&ch), sizeof(ch)));
  EXPECT_TRUE(r.error);
  EXPECT_EQ(r.fes, Fes::InvalidHeaderField);
  EXPECT_EQ(r.fei, 4u);
}

TEST(Receiver, DigestFlagMustMatchNegotiation) {
  auto c = capsule(1, {}, false, false, 0);  // no HDGSTF although negotiated
  Recorder r;
  PduReceiver rx(Side::Target, &r);
  rx.set_digests(true, false);
  EXPECT_FALSE(rx.feed(c.data(), c.size()));
  EXPECT_EQ(r.fes, Fes::InvalidHeaderField);
  EXPECT_EQ(r.fei, 1u);
}

}  // namespace

}  // namespace pdu_receiver_test

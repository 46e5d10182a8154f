// SPDX-License-Identifier: Apache-2.0
// The shared TermReq-then-linger piece, without a socket: the PDU it builds from a failed
// receiver, and when it tells its owner to close.
#include "transport/terminator.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace terminator_test {

using namespace nvtcp::wire;
using nvtcp::transport::PduHandler;
using nvtcp::transport::PduReceiver;
using nvtcp::transport::Side;
using nvtcp::transport::Terminator;

namespace {

constexpr uint64_t kLinger = 250'000'000;

// Plays the owner: on a fatal error it starts the Terminator, as QueuePairImpl does.
struct Owner : PduHandler {
  PduReceiver rx{Side::Host, this};
  Terminator term{kLinger};
  uint64_t now = 1'000'000;
  std::vector<uint8_t> sent;
  Fes fes{};
  uint32_t fei = 0;

  bool on_pdu_header(const uint8_t*, uint32_t, uint8_t*& dst) override {
    dst = nullptr;
    return true;
  }
  void on_pdu_complete(const uint8_t*, bool) override {}
  void on_pdu_error(Fes f, uint32_t i, const std::string&) override {
    fes = f;
    fei = i;
    auto pdu = term.start(rx, PduType::H2CTermReq, f, i, now);
    sent.assign(pdu.begin(), pdu.end());
  }
};

// A common header of a PDU the host never receives (a CapsuleCmd): fatal at once.
std::vector<uint8_t> bad_header() {
  CommonHeader ch{};
  ch.type = uint8_t(PduType::CapsuleCmd);
  ch.hlen = sizeof(CapsuleCmdHeader);
  ch.plen = sizeof(CapsuleCmdHeader);
  std::vector<uint8_t> b(sizeof(ch));
  std::memcpy(b.data(), &ch, sizeof(ch));
  return b;
}

TEST(Terminator, QuotesTheOffendingHeaderAndLingers) {
  Owner o;
  const auto hdr = bad_header();
  EXPECT_FALSE(o.rx.feed(hdr.data(), hdr.size()));
  ASSERT_EQ(o.term.state(), Terminator::State::Lingering);
  ASSERT_EQ(o.sent.size(), sizeof(TermReqPdu) + hdr.size());
  TermReqPdu t;
  std::memcpy(&t, o.sent.data(), sizeof(t));
  EXPECT_EQ(t.ch.type, uint8_t(PduType::H2CTermReq));
  EXPECT_EQ(t.ch.hlen, sizeof(TermReqPdu));
  EXPECT_EQ(uint32_t(t.ch.plen), o.sent.size());
  EXPECT_EQ(uint16_t(t.fes), uint16_t(o.fes));
  EXPECT_EQ(uint32_t(t.fei), o.fei);
  EXPECT_EQ(0, std::memcmp(o.sent.data() + sizeof(TermReqPdu), hdr.data(), hdr.size()));
  EXPECT_EQ(o.term.close_at_ns(), o.now + kLinger);
}

TEST(Terminator, ClosesWhenTheLingerPasses) {
  Owner o;
  const auto hdr = bad_header();
  o.rx.feed(hdr.data(), hdr.size());
  EXPECT_FALSE(o.term.expired(o.now));
  EXPECT_FALSE(o.term.expired(o.now + kLinger - 1));
  EXPECT_TRUE(o.term.expired(o.now + kLinger));
  o.term.closing();
  EXPECT_EQ(o.term.state(), Terminator::State::Done);
  EXPECT_FALSE(o.term.expired(o.now + 10 * kLinger));  // closed once, never asked again
}

TEST(Terminator, APeerThatClosesEndsTheLingerEarly) {
  Owner o;
  const auto hdr = bad_header();
  o.rx.feed(hdr.data(), hdr.size());
  o.term.peer_closed();
  EXPECT_EQ(o.term.state(), Terminator::State::Done);
  EXPECT_FALSE(o.term.lingering());
  EXPECT_FALSE(o.term.expired(o.now + kLinger));
}

TEST(Terminator, OneTermReqPerConnectionUntilReset) {
  Owner o;
  const auto hdr = bad_header();
  o.rx.feed(hdr.data(), hdr.size());
  const uint64_t first_close = o.term.close_at_ns();
  // A second error while lingering sends nothing and does not move the deadline.
  EXPECT_TRUE(o.term.start(o.rx, PduType::H2CTermReq, Fes::PduSequenceError, 0, o.now + 5).empty());
  EXPECT_EQ(o.term.close_at_ns(), first_close);
  o.term.peer_closed();
  EXPECT_TRUE(o.term.start(o.rx, PduType::H2CTermReq, Fes::PduSequenceError, 0, o.now).empty());
  // A new connection (a host queue reconnecting) may terminate again.
  o.term.reset();
  EXPECT_EQ(o.term.state(), Terminator::State::Idle);
  auto pdu = o.term.start(o.rx, PduType::C2HTermReq, Fes::PduSequenceError, 7, o.now + 5);
  ASSERT_GE(pdu.size(), sizeof(TermReqPdu));
  TermReqPdu t;
  std::memcpy(&t, pdu.data(), sizeof(t));
  EXPECT_EQ(t.ch.type, uint8_t(PduType::C2HTermReq));
  EXPECT_EQ(uint32_t(t.fei), 7u);
  EXPECT_EQ(o.term.close_at_ns(), o.now + 5 + kLinger);
}

TEST(Terminator, NothingToDoBeforeAnError) {
  Terminator t;
  EXPECT_EQ(t.state(), Terminator::State::Idle);
  EXPECT_EQ(t.linger_ns(), nvtcp::transport::kTermReqLingerNs);
  EXPECT_FALSE(t.expired(~0ull));
  t.peer_closed();  // a connection that simply ends: still nothing sent, nothing to linger for
  EXPECT_EQ(t.state(), Terminator::State::Idle);
}

}  // namespace

}  // namespace terminator_test

// SPDX-License-Identifier: Apache-2.0
// The DH-HMAC-CHAP transaction machines against each other and against broken peers: every
// hash with the NULL group and two FFDHE groups, one way and both ways; wrong secrets on either
// side; nothing in common; messages out of sequence, replayed, cut short or of another
// transaction. Each failure ends with the AUTH_Failure the other side would see and its reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "auth/dhchap_transaction.hpp"

namespace nvtcp::auth::dhchap_transaction_test {
namespace {

using wire::AuthFailureReason;

constexpr const char* kHost = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
constexpr const char* kSub = "nqn.2026-11.io.nvtcp:auth";

DhchapSecret secret(uint8_t transform, uint8_t fill, size_t len = 32) {
  DhchapSecret s;
  s.transform = transform;
  s.key = SecretBytes(len);
  std::memset(s.key.data(), fill, len);
  return s;
}

struct Pair {
  DhchapController ctrl;
  DhchapHost host;
  std::vector<uint8_t> last_receive;  // what the controller last returned
  Pair(DhchapKeys ck, DhchapKeys hk, DhchapPolicy cp = {}, DhchapPolicy hp = {}, uint16_t tid = 7)
      : ctrl(std::move(ck), std::move(cp)), host(std::move(hk), std::move(hp), tid) {}

  // Runs the transaction as a transport would: each message the host sends goes to the
  // controller; each receive gets a 4096-byte buffer (AL as the Linux host asks), zero-filled
  // past the message.
  void run() {
    for (int step = 0; step < 12 && !host.authenticated() && !host.failed(); ++step) {
      std::vector<uint8_t> m = host.next_message();
      if (!m.empty()) ctrl.on_send(m);
      if (host.expects_receive()) {
        last_receive.assign(wire::kAuthHostReceiveLength, 0xEE);
        size_t n = ctrl.on_receive(last_receive);
        ASSERT_LE(n, last_receive.size());
        host.on_receive(last_receive);
        last_receive.resize(n);
      }
    }
    // A Failure2 the host still owes goes out.
    if (host.state() == DhchapHost::State::Failure2Ready) ctrl.on_send(host.next_message());
  }
};

DhchapKeys keys(const DhchapSecret* host, const DhchapSecret* ctrl) { return {host, ctrl, kHost, kSub}; }

struct Combo {
  uint8_t hash;
  uint8_t group;
  bool bidirectional;
};

class DhchapBothSides : public ::testing::TestWithParam<Combo> {};

TEST_P(DhchapBothSides, AuthenticateEachOther) {
  const Combo c = GetParam();
  DhchapSecret hs = secret(c.hash, 0x11, c.hash == 3 ? 64 : 32), cs = secret(0, 0x22, 48);
  DhchapPolicy only;  // the controller picks exactly this hash and group
  only.hashes = {c.hash};
  only.dh_groups = {c.group};
  Pair p(keys(&hs, &cs), keys(&hs, c.bidirectional ? &cs : nullptr), only);
  p.run();
  EXPECT_TRUE(p.host.authenticated()) << p.host.failure_detail() << " / " << p.ctrl.failure_detail();
  EXPECT_TRUE(p.ctrl.authenticated()) << to_string(p.ctrl.state()) << ": " << p.ctrl.failure_detail();
  EXPECT_EQ(p.host.hash(), c.hash);
  EXPECT_EQ(p.host.dh_group(), c.group);
  EXPECT_EQ(p.ctrl.bidirectional(), c.bidirectional);
  EXPECT_FALSE(p.ctrl.in_progress());
}

INSTANTIATE_TEST_SUITE_P(Combos, DhchapBothSides,
                         ::testing::Values(Combo{1, 0, false}, Combo{2, 0, true}, Combo{3, 0, false},
                                           Combo{1, 1, true}, Combo{2, 2, false}, Combo{3, 1, true},
                                           Combo{1, 3, false}),
                         [](const auto& p) {
                           return "hash" + std::to_string(p.param.hash) + "_group" +
                                  std::to_string(p.param.group) + (p.param.bidirectional ? "_bi" : "_uni");
                         });

TEST(DhchapTransaction, ChallengeLayoutAsTheHostReadsIt) {
  DhchapSecret hs = secret(1, 0x11);
  DhchapPolicy p;
  p.dh_groups = {uint8_t(wire::DhGroup::Ffdhe2048)};
  DhchapController ctrl(keys(&hs, nullptr), p);
  DhchapHost host(keys(&hs, nullptr), {}, 0x0203);
  std::vector<uint8_t> neg = host.next_message();
  ASSERT_EQ(neg.size(), 72u) << "one descriptor, as Linux sends";
  ctrl.on_send(neg);
  ASSERT_EQ(ctrl.state(), DhchapController::State::ChallengeReady);
  std::vector<uint8_t> buf(4096, 0xEE);
  ASSERT_EQ(ctrl.on_receive(buf), 16u + 32 + 256);
  EXPECT_EQ(buf[0], 0x01);  // DH-HMAC-CHAP
  EXPECT_EQ(buf[1], 0x01);  // Challenge
  EXPECT_EQ(buf[4], 0x03);  // T_ID, little-endian
  EXPECT_EQ(buf[5], 0x02);
  EXPECT_EQ(buf[6], 32);    // HL
  EXPECT_EQ(buf[8], 1);     // SHA-256: the first of the controller's list the host offers
  EXPECT_EQ(buf[9], 1);     // ffdhe2048
  EXPECT_EQ(buf[10] | buf[11] << 8, 256);
  uint32_t s1;
  std::memcpy(&s1, &buf[12], 4);
  EXPECT_NE(s1, 0u);
  EXPECT_EQ(buf[16 + 32 + 256], 0) << "zero-filled past the message";
}

TEST(DhchapTransaction, WrongHostSecretIsRefusedWithFailure1) {
  DhchapSecret right = secret(1, 0x11), wrong = secret(1, 0x12);
  Pair p(keys(&right, nullptr), keys(&wrong, nullptr));
  p.run();
  EXPECT_TRUE(p.ctrl.failed());
  EXPECT_EQ(p.ctrl.failure_reason(), uint8_t(AuthFailureReason::Failed));
  EXPECT_NE(p.ctrl.failure_detail().find("does not match"), std::string::npos);
  EXPECT_TRUE(p.host.failed());
  EXPECT_EQ(p.host.failure_reason(), uint8_t(AuthFailureReason::Failed));
  ASSERT_GE(p.last_receive.size(), 8u);
  EXPECT_EQ(p.last_receive[1], uint8_t(wire::AuthId::Failure1));
}

TEST(DhchapTransaction, WrongControllerSecretIsRefusedWithFailure2) {
  DhchapSecret hs = secret(2, 0x11, 48), cs = secret(0, 0x22), other = secret(0, 0x23);
  Pair p(keys(&hs, &cs), keys(&hs, &other));
  p.run();
  EXPECT_TRUE(p.host.failed());
  EXPECT_NE(p.host.failure_detail().find("controller's response does not match"), std::string::npos);
  EXPECT_TRUE(p.ctrl.failed()) << "the host's Failure2 ends the controller's side";
  EXPECT_FALSE(p.ctrl.authenticated());
}

TEST(DhchapTransaction, BidirectionalWithoutAControllerSecretFails) {
  DhchapSecret hs = secret(1, 0x11), cs = secret(0, 0x22);
  Pair p(keys(&hs, nullptr), keys(&hs, &cs));
  p.run();
  EXPECT_TRUE(p.ctrl.failed());
  EXPECT_NE(p.ctrl.failure_detail().find("no controller secret"), std::string::npos);
  EXPECT_TRUE(p.host.failed());
}

TEST(DhchapTransaction, NothingInCommon) {
  DhchapSecret hs = secret(1, 0x11);
  DhchapPolicy sha512_only, sha256_only, ffdhe8192_only;
  sha512_only.hashes = {3};
  sha256_only.hashes = {1};
  ffdhe8192_only.dh_groups = {5};
  {
    Pair p(keys(&hs, nullptr), keys(&hs, nullptr), sha512_only, sha256_only);
    p.run();
    EXPECT_EQ(p.ctrl.failure_reason(), uint8_t(AuthFailureReason::HashUnusable));
    EXPECT_EQ(p.host.failure_reason(), uint8_t(AuthFailureReason::HashUnusable));
  }
  {
    DhchapPolicy null_only;
    null_only.dh_groups = {0};
    Pair p(keys(&hs, nullptr), keys(&hs, nullptr), ffdhe8192_only, null_only);
    p.run();
    EXPECT_EQ(p.ctrl.failure_reason(), uint8_t(AuthFailureReason::DhGroupUnusable));
    EXPECT_TRUE(p.host.failed());
  }
}

// Drives a controller to AwaitReply and returns the host that got the challenge.
struct Underway {
  DhchapSecret hs = secret(1, 0x11);
  DhchapController ctrl{keys(&hs, nullptr), {}};
  DhchapHost host{keys(&hs, nullptr), {}, 9};
  std::vector<uint8_t> reply;
  Underway() {
    ctrl.on_send(host.next_message());
    std::vector<uint8_t> buf(4096);
    ctrl.on_receive(buf);
    host.on_receive(buf);
    reply = host.next_message();
  }
  uint8_t refuse(const std::vector<uint8_t>& m) {
    ctrl.on_send(m);
    std::vector<uint8_t> buf(64);
    ctrl.on_receive(buf);
    EXPECT_EQ(buf[1], uint8_t(wire::AuthId::Failure1));
    EXPECT_TRUE(ctrl.failed());
    return buf[7];
  }
};

TEST(DhchapTransaction, MalformedRepliesAreRefused) {
  // Each a good reply with one thing wrong, and the reason the controller must give.
  struct Case {
    const char* what;
    std::function<void(std::vector<uint8_t>&)> spoil;
    AuthFailureReason reason;
  };
  const Case cases[] = {
      {"one byte short", [](std::vector<uint8_t>& r) { r.pop_back(); }, AuthFailureReason::IncorrectPayload},
      {"another T_ID", [](std::vector<uint8_t>& r) { r[4] ^= 1; }, AuthFailureReason::IncorrectMessage},
      {"HL 48", [](std::vector<uint8_t>& r) { r[6] = 48; }, AuthFailureReason::IncorrectPayload},
      {"the host's DH value replaced by 1: not a valid public value",
       [](std::vector<uint8_t>& r) {
         std::fill(r.begin() + 16 + 64, r.end(), 0);
         r.back() = 1;
       },
       AuthFailureReason::DhGroupUnusable},
      {"R1 flipped", [](std::vector<uint8_t>& r) { r[16] ^= 0x80; }, AuthFailureReason::Failed},
      {"too short for a header", [](std::vector<uint8_t>& r) { r = {1, 2, 0}; }, AuthFailureReason::IncorrectMessage},
  };
  for (const Case& c : cases) {
    Underway u;
    auto reply = u.reply;
    c.spoil(reply);
    EXPECT_EQ(u.refuse(reply), uint8_t(c.reason)) << c.what;
  }
}

TEST(DhchapTransaction, OutOfSequenceAndReplayedMessages) {
  // A Reply before any Negotiate.
  {
    Underway u;
    DhchapSecret hs = secret(1, 0x11);
    DhchapController fresh(keys(&hs, nullptr), {});
    fresh.on_send(u.reply);
    std::vector<uint8_t> buf(64);
    fresh.on_receive(buf);
    EXPECT_EQ(buf[7], uint8_t(AuthFailureReason::IncorrectMessage));
    EXPECT_TRUE(fresh.failed());
  }
  // A receive with nothing to return.
  {
    DhchapSecret hs = secret(1, 0x11);
    DhchapController idle(keys(&hs, nullptr), {});
    std::vector<uint8_t> buf(64);
    EXPECT_EQ(idle.on_receive(buf), 8u);
    EXPECT_EQ(buf[1], uint8_t(wire::AuthId::Failure1));
    EXPECT_TRUE(idle.failed());
  }
  // The same Reply twice: the transaction is over after the first.
  {
    Underway u;
    u.ctrl.on_send(u.reply);
    std::vector<uint8_t> buf(4096);
    u.ctrl.on_receive(buf);
    ASSERT_TRUE(u.ctrl.authenticated());
    EXPECT_EQ(u.refuse(u.reply), uint8_t(AuthFailureReason::IncorrectMessage));
  }
  // Re-authentication: a new Negotiate on an authenticated queue starts over, and succeeds.
  {
    DhchapSecret hs = secret(1, 0x11);
    Pair p(keys(&hs, nullptr), keys(&hs, nullptr));
    p.run();
    ASSERT_TRUE(p.ctrl.authenticated());
    DhchapHost again(keys(&hs, nullptr), {}, 8);
    p.ctrl.on_send(again.next_message());
    EXPECT_EQ(p.ctrl.state(), DhchapController::State::ChallengeReady);
    std::vector<uint8_t> buf(4096);
    p.ctrl.on_receive(buf);
    again.on_receive(buf);
    p.ctrl.on_send(again.next_message());
    p.ctrl.on_receive(buf);
    again.on_receive(buf);
    EXPECT_TRUE(again.authenticated());
    EXPECT_TRUE(p.ctrl.authenticated());
  }
}

TEST(DhchapTransaction, NegotiateFieldsChecked) {
  DhchapSecret hs = secret(1, 0x11);
  DhchapHost host(keys(&hs, nullptr), {}, 1);
  const std::vector<uint8_t> neg = host.next_message();
  auto refused = [&](std::vector<uint8_t> m) {
    DhchapController c(keys(&hs, nullptr), {});
    c.on_send(m);
    std::vector<uint8_t> buf(64);
    c.on_receive(buf);
    return buf[7];
  };
  // The Negotiate with byte off set to v.
  auto with = [&](size_t off, uint8_t v) {
    auto m = neg;
    m[off] = v;
    return m;
  };
  EXPECT_EQ(refused(with(6, 1)), uint8_t(AuthFailureReason::ConcatMismatch)) << "secure channel concatenation";
  EXPECT_EQ(refused(with(7, 0)), uint8_t(AuthFailureReason::IncorrectPayload)) << "no descriptor";
  EXPECT_EQ(refused(with(7, 2)), uint8_t(AuthFailureReason::IncorrectPayload))
      << "claims a second descriptor that is not there";
  EXPECT_EQ(refused(with(8, 0x02)), uint8_t(AuthFailureReason::NotUsable)) << "another protocol";
  EXPECT_EQ(refused(with(10, 31)), uint8_t(AuthFailureReason::IncorrectPayload)) << "a list too long";
}

TEST(DhchapTransaction, HostChecksTheChallenge) {
  DhchapSecret hs = secret(1, 0x11);
  auto host_after = [&](auto edit) {
    DhchapController c(keys(&hs, nullptr), {});
    DhchapHost h(keys(&hs, nullptr), {}, 4);
    c.on_send(h.next_message());
    std::vector<uint8_t> buf(4096);
    c.on_receive(buf);
    edit(buf);
    h.on_receive(buf);
    EXPECT_EQ(h.state(), DhchapHost::State::Failure2Ready);
    std::vector<uint8_t> f2 = h.next_message();
    EXPECT_EQ(f2.size(), 8u);
    EXPECT_EQ(f2[1], uint8_t(wire::AuthId::Failure2));
    EXPECT_TRUE(h.failed());
    return h.failure_reason();
  };
  EXPECT_EQ(host_after([](auto& b) { b[8] = 9; }), uint8_t(AuthFailureReason::HashUnusable));
  EXPECT_EQ(host_after([](auto& b) { b[6] = 20; }), uint8_t(AuthFailureReason::HashUnusable));
  EXPECT_EQ(host_after([](auto& b) { b[9] = 7; }), uint8_t(AuthFailureReason::DhGroupUnusable));
  EXPECT_EQ(host_after([](auto& b) { b[10] = b[11] = 0; }), uint8_t(AuthFailureReason::DhGroupUnusable));
  EXPECT_EQ(host_after([](auto& b) { b[4] ^= 1; }), uint8_t(AuthFailureReason::IncorrectMessage));
  EXPECT_EQ(host_after([](auto& b) { b[1] = uint8_t(wire::AuthId::Success1); }),
            uint8_t(AuthFailureReason::IncorrectMessage));
  // The NULL group with a DH value.
  EXPECT_EQ(host_after([](auto& b) {
              b[9] = 0;
              b[10] = 4;
              b[11] = 0;
            }),
            uint8_t(AuthFailureReason::IncorrectPayload));
}

TEST(DhchapTransaction, SequenceNumbersAreNeverZero) {
  uint32_t a = next_sequence_number(), b = next_sequence_number();
  EXPECT_NE(a, 0u);
  EXPECT_NE(b, 0u);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace nvtcp::auth::dhchap_transaction_test

// SPDX-License-Identifier: Apache-2.0
// The target's in-band authentication, driven by a raw host that runs the host's DH-HMAC-CHAP
// machine over Authentication Send/Receive: a host configured with a key is told to
// authenticate (ATR) on every queue and is refused everything else until it has; one way and
// both ways; a wrong secret ends that queue and no other host's; malformed commands get their
// status; a queue that never authenticates is closed; a host without a key needs none.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "auth/dhchap_transaction.hpp"
#include "raw_session.hpp"
#include "test_target.hpp"
#include "wire/auth.hpp"

namespace nvtcp::test::auth_target_test {
namespace {

constexpr const char* kOtherHost = "nqn.2026-11.io.nvtcp:no-key";

auth::DhchapSecret secret(uint8_t fill) {
  auth::DhchapSecret s;
  s.transform = 1;
  s.key = auth::SecretBytes(32);
  std::memset(s.key.data(), fill, 32);
  return s;
}

target::TargetConfig auth_config(bool with_ctrl_key, uint32_t icreq_timeout_ms = 10000) {
  target::TargetConfig cfg = default_config();
  auto& sc = cfg.subsystems.at(0);
  sc.allow_any_host = false;
  sc.hosts = {kHostNqn, kOtherHost};
  target::HostKeys keys;
  keys.dhchap = std::make_shared<auth::DhchapSecret>(secret(0x11));
  if (with_ctrl_key) keys.dhchap_ctrl = std::make_shared<auth::DhchapSecret>(secret(0x22));
  sc.host_keys[kHostNqn] = keys;
  cfg.icreq_timeout_ms = icreq_timeout_ms;
  return cfg;
}

Sqe auth_sqe(uint16_t cid, FabricsType t, uint32_t len, uint8_t secp = wire::kAuthSecp) {
  wire::AuthTransferCmd c{};
  c.opc = uint8_t(AdminOpcode::Fabrics);
  c.fctype = uint8_t(t);
  c.spsp0 = wire::kAuthSpsp0;
  c.spsp1 = wire::kAuthSpsp1;
  c.secp = secp;
  c.length = len;
  Sqe s;
  std::memcpy(&s, &c, sizeof(s));
  return raw_sqe(s, cid, len, t == FabricsType::AuthSend ? kSglDataBlockOffset : kSglTransportDataBlock);
}

// Runs the host's side of the transaction on session s; returns the host machine's end state.
AssertionResult authenticate(Session& s, auth::DhchapHost& host) {
  for (int step = 0; step < 8 && !host.authenticated() && !host.failed(); ++step) {
    std::vector<uint8_t> m = host.next_message();
    if (!m.empty()) {
      Cqe cqe{};
      if (auto r = s.command(auth_sqe(s.cid(), FabricsType::AuthSend, uint32_t(m.size())), m, cqe); !r) return r;
      if (!ok(cqe)) return AssertionFailure() << "Authentication Send: " << status_name(Status::from_cqe(cqe.status));
    }
    if (host.expects_receive()) {
      Cqe cqe{};
      Bytes in;
      if (auto r = s.command(auth_sqe(s.cid(), FabricsType::AuthReceive, wire::kAuthHostReceiveLength), {}, cqe, &in);
          !r)
        return r;
      if (!ok(cqe)) return AssertionFailure() << "Authentication Receive: " << status_name(Status::from_cqe(cqe.status));
      if (in.size() != wire::kAuthHostReceiveLength) return AssertionFailure() << "received " << in.size() << " bytes";
      host.on_receive(in);
    }
  }
  if (host.authenticated()) return AssertionSuccess();
  return AssertionFailure() << "host " << auth::to_string(host.state()) << ": " << host.failure_detail();
}

auth::DhchapKeys host_keys(const auth::DhchapSecret* h, const auth::DhchapSecret* c) {
  return {h, c, kHostNqn, kTestNqn};
}

// The keyed host's admin queue, authenticated (with the controller too when cs is given), its
// controller enabled with io_queues I/O queues granted; cntlid names it for the I/O Connects.
AssertionResult authenticated_controller(Session& admin, uint16_t port, const auth::DhchapSecret& hs,
                                         const auth::DhchapSecret* cs, uint16_t& cntlid, uint16_t io_queues = 1) {
  Cqe cqe{};
  if (auto r = admin.open(port); !r) return r;
  if (auto r = admin.connect_admin(cqe, kTestNqn, kHostNqn); !r) return r;
  if (!ok(cqe)) return AssertionFailure() << "Connect: " << status_name(Status::from_cqe(cqe.status));
  cntlid = uint16_t(cqe.dw0);
  auth::DhchapHost host(host_keys(&hs, cs), {}, 1);
  if (auto r = authenticate(admin, host); !r) return r;
  for (const Sqe& sqe : {property_sqe(admin.cid(), FabricsType::PropertySet, 0x14, kCcEnable),
                         set_features_nq_sqe(admin.cid(), io_queues)}) {
    if (auto r = admin.command(sqe, {}, cqe); !r) return r;
    if (!ok(cqe)) return AssertionFailure() << "enabling the controller: " << status_name(Status::from_cqe(cqe.status));
  }
  return AssertionSuccess();
}

TEST(AuthTarget, AHostWithAKeyAuthenticatesBeforeAnythingElse) {
  RunningTarget t(auth_config(false));
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  Cqe cqe{};
  ASSERT_TRUE(s.connect_admin(cqe, kTestNqn, kHostNqn));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(cqe.dw0 & wire::kConnectResultAtr, wire::kConnectResultAtr) << "Connect says: authenticate";
  EXPECT_NE(cqe.dw0 & 0xFFFF, 0u);
  ASSERT_TRUE(s.command(property_sqe(s.cid(), FabricsType::PropertyGet, 0x1C, 0), {}, cqe));
  EXPECT_TRUE(status_is(cqe, 1, 0x91)) << "Authentication Required before authenticating";
  Sqe identify = raw_sqe(cmd::identify(0, 1, 0), s.cid(), 4096);
  ASSERT_TRUE(s.command(identify, {}, cqe));
  EXPECT_TRUE(status_is(cqe, 1, 0x91));

  const auth::DhchapSecret hs = secret(0x11);
  auth::DhchapHost host(host_keys(&hs, nullptr), {}, 1);
  ASSERT_TRUE(authenticate(s, host));
  EXPECT_EQ(host.dh_group(), uint8_t(wire::DhGroup::Ffdhe2048));
  ASSERT_TRUE(s.command(property_sqe(s.cid(), FabricsType::PropertyGet, 0x1C, 0), {}, cqe));
  EXPECT_TRUE(ok(cqe)) << "authenticated: the queue runs commands";
}

TEST(AuthTarget, BothWaysAndEveryQueueOnItsOwn) {
  RunningTarget t(auth_config(true));
  const auth::DhchapSecret hs = secret(0x11), cs = secret(0x22);
  Session admin;
  uint16_t cntlid = 0;
  ASSERT_TRUE(authenticated_controller(admin, t.port(), hs, &cs, cntlid));
  Cqe cqe{};

  Session io;
  ASSERT_TRUE(io.open(t.port()));
  ASSERT_TRUE(io.command(connect_sqe(io.cid(), 1), connect_data(kTestNqn, kHostNqn, cntlid), cqe));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(cqe.dw0 & wire::kConnectResultAtr, wire::kConnectResultAtr) << "I/O queues authenticate too";
  Sqe read = rw_sqe(IoOpcode::Read, io.cid(), 1, 0, 1, 512);
  ASSERT_TRUE(io.command(read, {}, cqe));
  EXPECT_TRUE(status_is(cqe, 1, 0x91));
  auth::DhchapHost io_host(host_keys(&hs, &cs), {}, 2);
  ASSERT_TRUE(authenticate(io, io_host));
  Bytes data;
  read.cid = io.cid();
  ASSERT_TRUE(io.command(read, {}, cqe, &data));
  EXPECT_TRUE(ok(cqe));
  EXPECT_EQ(data.size(), 512u);
}

TEST(AuthTarget, AWrongSecretEndsThatQueueAndOthersGoOn) {
  RunningTarget t(auth_config(false));
  const auth::DhchapSecret wrong = secret(0x12);
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  Cqe cqe{};
  ASSERT_TRUE(s.connect_admin(cqe, kTestNqn, kHostNqn));
  auth::DhchapHost host(host_keys(&wrong, nullptr), {}, 1);
  EXPECT_FALSE(authenticate(s, host));
  EXPECT_TRUE(host.failed());
  EXPECT_EQ(host.failure_reason(), uint8_t(wire::AuthFailureReason::Failed)) << host.failure_detail();
  // The target closes the queue after its Failure1.
  Bytes p;
  EXPECT_FALSE(s.c.read_pdu(p)) << "the connection should be closed";
  expect_healthy(t, kOtherHost);
}

TEST(AuthTarget, TheControllerMustProveItsKeyWhenAsked) {
  // The target has no controller key for this host, the host asks for one: refused.
  RunningTarget t(auth_config(false));
  const auth::DhchapSecret hs = secret(0x11), cs = secret(0x22);
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  Cqe cqe{};
  ASSERT_TRUE(s.connect_admin(cqe, kTestNqn, kHostNqn));
  auth::DhchapHost host(host_keys(&hs, &cs), {}, 1);
  EXPECT_FALSE(authenticate(s, host));
  EXPECT_TRUE(host.failed());
}

TEST(AuthTarget, TheLargestGroupsOnlyForAHostConfiguredWithThem) {
  // Before the host proves anything the target computes its DH values; a host offering only
  // ffdhe8192 (about 100 ms of the reactor per exchange) is refused unless configured for it.
  target::TargetConfig cfg = auth_config(false);
  cfg.subsystems.at(0).hosts.push_back(kOtherHost);
  RunningTarget t(cfg);
  const auth::DhchapSecret hs = secret(0x11);
  auth::DhchapPolicy only_8192;
  only_8192.dh_groups = {uint8_t(wire::DhGroup::Ffdhe8192)};
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  Cqe cqe{};
  ASSERT_TRUE(s.connect_admin(cqe, kTestNqn, kHostNqn));
  auth::DhchapHost host(host_keys(&hs, nullptr), only_8192, 1);
  EXPECT_FALSE(authenticate(s, host));
  EXPECT_EQ(host.failure_reason(), uint8_t(wire::AuthFailureReason::DhGroupUnusable)) << host.failure_detail();

  target::TargetConfig big = auth_config(false);
  big.subsystems.at(0).host_keys[kHostNqn].dhchap_groups = {uint8_t(wire::DhGroup::Ffdhe8192)};
  RunningTarget t2(big);
  Session s2;
  ASSERT_TRUE(s2.open(t2.port()));
  ASSERT_TRUE(s2.connect_admin(cqe, kTestNqn, kHostNqn));
  auth::DhchapHost host2(host_keys(&hs, nullptr), {}, 1);
  EXPECT_TRUE(authenticate(s2, host2));
  EXPECT_EQ(host2.dh_group(), uint8_t(wire::DhGroup::Ffdhe8192));
}

TEST(AuthTarget, AHostWithoutAKeyNeedsNone) {
  RunningTarget t(auth_config(false));
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  Cqe cqe{};
  ASSERT_TRUE(s.connect_admin(cqe, kTestNqn, kOtherHost));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(cqe.dw0 & wire::kConnectResultAtr, 0u);
  ASSERT_TRUE(s.command(property_sqe(s.cid(), FabricsType::PropertyGet, 0x1C, 0), {}, cqe));
  EXPECT_TRUE(ok(cqe));
}

TEST(AuthTarget, MalformedAuthenticationCommands) {
  RunningTarget t(auth_config(false));
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  Cqe cqe{};
  ASSERT_TRUE(s.connect_admin(cqe, kTestNqn, kHostNqn));
  const Bytes neg(72, 0);
  ASSERT_TRUE(s.command(auth_sqe(s.cid(), FabricsType::AuthSend, 72, 0xEA), neg, cqe));
  EXPECT_TRUE(status_is(cqe, 0, 0x02)) << "another security protocol: Invalid Field";
  ASSERT_TRUE(s.command(auth_sqe(s.cid(), FabricsType::AuthReceive, 0), {}, cqe));
  EXPECT_TRUE(status_is(cqe, 0, 0x02)) << "AL 0";
  ASSERT_TRUE(s.command(auth_sqe(s.cid(), FabricsType::AuthReceive, 1u << 20), {}, cqe));
  EXPECT_TRUE(status_is(cqe, 0, 0x02)) << "AL past any message";
  Sqe short_sgl = auth_sqe(s.cid(), FabricsType::AuthSend, 72);
  short_sgl.sgl.length = 40;
  ASSERT_TRUE(s.command(short_sgl, Bytes(40, 0), cqe));
  EXPECT_FALSE(ok(cqe)) << "TL and the SGL disagree";
  // A Negotiate of zeros is not DH-HMAC-CHAP: the receive that follows says why, and the
  // queue, which had to authenticate, closes.
  ASSERT_TRUE(s.command(auth_sqe(s.cid(), FabricsType::AuthSend, 72), neg, cqe));
  ASSERT_TRUE(ok(cqe)) << "protocol errors are answered in the protocol";
  Bytes in;
  ASSERT_TRUE(s.command(auth_sqe(s.cid(), FabricsType::AuthReceive, 64), {}, cqe, &in));
  ASSERT_EQ(in.size(), 64u);
  EXPECT_EQ(in[1], uint8_t(wire::AuthId::Failure1));
  Bytes p;
  EXPECT_FALSE(s.c.read_pdu(p));
  expect_healthy(t, kOtherHost);
}

TEST(AuthTarget, AQueueThatNeverAuthenticatesIsClosed) {
  RunningTarget t(auth_config(false, 200));
  Session s;
  ASSERT_TRUE(s.open(t.port()));
  Cqe cqe{};
  ASSERT_TRUE(s.connect_admin(cqe, kTestNqn, kHostNqn));
  ASSERT_TRUE(ok(cqe));
  Bytes p;
  EXPECT_FALSE(s.c.read_pdu(p)) << "closed once icreq_timeout_ms has passed without authentication";
}

// A sender that claims a keyed host's NQN without its key counts under its own address, not
// under that NQN: it cannot take the host's connection slots (max_connections_per_host) away.
// The host's queues move to its NQN once they authenticate, and its own limit holds there.
TEST(AuthTarget, ClaimingAKeyedHostsNqnDoesNotTakeItsConnectionSlots) {
  target::TargetConfig cfg = auth_config(false);
  cfg.max_connections_per_host = 2;
  RunningTarget t(cfg);
  std::vector<std::unique_ptr<Session>> claimers;
  Cqe cqe{};
  for (int i = 0; i < 2; ++i) {
    claimers.push_back(std::make_unique<Session>());
    ASSERT_TRUE(claimers.back()->open(t.port(), 0, "127.0.0.2"));
    ASSERT_TRUE(claimers.back()->connect_admin(cqe, kTestNqn, kHostNqn));
    ASSERT_TRUE(ok(cqe)) << "a Connect as the keyed host: answered with ATR";
  }
  Session third;
  ASSERT_TRUE(third.open(t.port(), 0, "127.0.0.2"));
  ASSERT_TRUE(third.connect_admin(cqe, kTestNqn, kHostNqn));
  EXPECT_TRUE(status_is(cqe, 1, 0x81)) << "the claimers' address is at its limit: Controller Busy";

  // The host itself, from another address, with its key: two queues, both authenticated.
  const auth::DhchapSecret hs = secret(0x11);
  Session admin;
  uint16_t cntlid = 0;
  ASSERT_TRUE(authenticated_controller(admin, t.port(), hs, nullptr, cntlid)) << "the claimers hold no slot of the host's";
  Session io;
  ASSERT_TRUE(io.open(t.port()));
  ASSERT_TRUE(io.command(connect_sqe(io.cid(), 1), connect_data(kTestNqn, kHostNqn, cntlid), cqe));
  ASSERT_TRUE(ok(cqe));
  auth::DhchapHost io_host(host_keys(&hs, nullptr), {}, 2);
  ASSERT_TRUE(authenticate(io, io_host));
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), 1, 0, 1, 512), {}, cqe));
  EXPECT_TRUE(ok(cqe));

  // A third queue of the host authenticates, and then meets the host's own limit: it closes.
  Session extra;
  ASSERT_TRUE(extra.open(t.port()));
  ASSERT_TRUE(extra.connect_admin(cqe, kTestNqn, kHostNqn));
  ASSERT_TRUE(ok(cqe)) << "before it authenticates it counts under its address";
  auth::DhchapHost extra_host(host_keys(&hs, nullptr), {}, 3);
  ASSERT_TRUE(authenticate(extra, extra_host));
  Bytes p;
  EXPECT_FALSE(extra.c.read_pdu(p)) << "over the host's limit once it is the host: closed";
  // The host's two queues go on.
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), 1, 0, 1, 512), {}, cqe));
  EXPECT_TRUE(ok(cqe));
}

// A stranger names the keyed host's controller (host NQN, host ID and CNTLID all travel in the
// clear) on an I/O queue it never authenticates: no command runs there, fused or not. A fused
// Compare would be an oracle on any block and its Write would land in the host's namespace.
TEST(AuthTarget, AFusedPairOnAQueueThatNeverAuthenticatedRunsNothing) {
  RunningTarget t(auth_config(false));
  const auth::DhchapSecret hs = secret(0x11);
  Session admin;
  uint16_t cntlid = 0;
  ASSERT_TRUE(authenticated_controller(admin, t.port(), hs, nullptr, cntlid, 2));

  Session stranger;
  Cqe cqe{};
  ASSERT_TRUE(stranger.open(t.port()));
  ASSERT_TRUE(stranger.command(connect_sqe(stranger.cid(), 1), connect_data(kTestNqn, kHostNqn, cntlid), cqe));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(cqe.dw0 & wire::kConnectResultAtr, wire::kConnectResultAtr);
  constexpr uint64_t kLba = 200;
  auto fused = [&](IoOpcode opc, uint8_t fuse) {
    Sqe s = rw_sqe(opc, stranger.cid(), kRamNsid, kLba, 1, 512, kSglDataBlockOffset);
    s.flags |= fuse;
    return s;
  };
  const Sqe c = fused(IoOpcode::Compare, kSqeFlagsFuseFirst), w = fused(IoOpcode::Write, kSqeFlagsFuseSecond);
  ASSERT_TRUE(stranger.send_capsule(c, Bytes(512, 0)));
  ASSERT_TRUE(stranger.send_capsule(w, Bytes(512, 0xA5)));
  Cqe cmp{}, wr{};
  ASSERT_TRUE(stranger.read_response(c.cid, cmp));
  ASSERT_TRUE(stranger.read_response(w.cid, wr));
  EXPECT_TRUE(status_is(cmp, 1, 0x91)) << "the Compare: Authentication Required";
  EXPECT_TRUE(status_is(wr, 1, 0x91)) << "the Write: Authentication Required";
  // A Compare alone (a first half whose Write never comes) answers nothing about the blocks.
  ASSERT_TRUE(stranger.command(fused(IoOpcode::Compare, kSqeFlagsFuseFirst), Bytes(512, 0), cqe));
  EXPECT_TRUE(status_is(cqe, 1, 0x91));
  ASSERT_TRUE(stranger.command(fused(IoOpcode::Write, kSqeFlagsFuseSecond), Bytes(512, 0xA5), cqe));
  EXPECT_TRUE(status_is(cqe, 1, 0x91));

  // The host's own authenticated queue reads the block as it was: nothing was written.
  Session io;
  ASSERT_TRUE(io.open(t.port()));
  ASSERT_TRUE(io.command(connect_sqe(io.cid(), 2), connect_data(kTestNqn, kHostNqn, cntlid), cqe));
  ASSERT_TRUE(ok(cqe));
  auth::DhchapHost io_host(host_keys(&hs, nullptr), {}, 2);
  ASSERT_TRUE(authenticate(io, io_host));
  Bytes data;
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, kLba, 1, 512), {}, cqe, &data));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(data, Bytes(512, 0)) << "the stranger's bytes reached the namespace";
  // And its own fused pair runs.
  const Sqe c2 = rw_sqe(IoOpcode::Compare, io.cid(), kRamNsid, kLba, 1, 512, kSglDataBlockOffset);
  Sqe c2f = c2;
  c2f.flags |= kSqeFlagsFuseFirst;
  Sqe w2 = rw_sqe(IoOpcode::Write, io.cid(), kRamNsid, kLba, 1, 512, kSglDataBlockOffset);
  w2.flags |= kSqeFlagsFuseSecond;
  ASSERT_TRUE(io.send_capsule(c2f, Bytes(512, 0)));
  ASSERT_TRUE(io.send_capsule(w2, Bytes(512, 0x5A)));
  ASSERT_TRUE(io.read_response(c2f.cid, cmp));
  ASSERT_TRUE(io.read_response(w2.cid, wr));
  EXPECT_TRUE(ok(cmp));
  EXPECT_TRUE(ok(wr));
}

// An I/O Connect that names the keyed host's controller and never authenticates holds none of its
// qids: the host's own queue takes the same qid meanwhile. Two queues that both prove the key
// for one qid: the second closes.
TEST(AuthTarget, AnIoConnectThatNeverAuthenticatesHoldsNoQid) {
  RunningTarget t(auth_config(false));
  const auth::DhchapSecret hs = secret(0x11);
  Session admin;
  uint16_t cntlid = 0;
  ASSERT_TRUE(authenticated_controller(admin, t.port(), hs, nullptr, cntlid));
  Cqe cqe{};
  Session squatter;
  ASSERT_TRUE(squatter.open(t.port()));
  ASSERT_TRUE(squatter.command(connect_sqe(squatter.cid(), 1), connect_data(kTestNqn, kHostNqn, cntlid), cqe));
  ASSERT_TRUE(ok(cqe));

  Session io;
  ASSERT_TRUE(io.open(t.port()));
  ASSERT_TRUE(io.command(connect_sqe(io.cid(), 1), connect_data(kTestNqn, kHostNqn, cntlid), cqe));
  ASSERT_TRUE(ok(cqe)) << "the squatter holds qid 1 without having proven anything";
  auth::DhchapHost io_host(host_keys(&hs, nullptr), {}, 1);
  ASSERT_TRUE(authenticate(io, io_host));
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, 0, 1, 512), {}, cqe));
  EXPECT_TRUE(ok(cqe));

  // A second queue proving the key for the qid the first holds: it closes, the first goes on.
  Session second;
  ASSERT_TRUE(second.open(t.port()));
  ASSERT_TRUE(second.command(connect_sqe(second.cid(), 1), connect_data(kTestNqn, kHostNqn, cntlid), cqe));
  ASSERT_TRUE(ok(cqe));
  auth::DhchapHost second_host(host_keys(&hs, nullptr), {}, 1);
  (void)authenticate(second, second_host);  // its last answer may race the close
  const bool answered = second.command(rw_sqe(IoOpcode::Read, second.cid(), kRamNsid, 0, 1, 512), {}, cqe);
  EXPECT_FALSE(answered && ok(cqe)) << "two authenticated queues on one qid";
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, 0, 1, 512), {}, cqe));
  EXPECT_TRUE(ok(cqe));
  // The squatter still runs nothing.
  ASSERT_TRUE(squatter.command(rw_sqe(IoOpcode::Read, squatter.cid(), kRamNsid, 0, 1, 512), {}, cqe));
  EXPECT_TRUE(status_is(cqe, 1, 0x91));
}

// A host may authenticate an authenticated queue again (a new Negotiate): the queue's commands go
// on meanwhile, as with nvmet, and a transaction that fails ends the queue.
TEST(AuthTarget, ReauthenticationKeepsTheQueueRunningUntilItFails) {
  RunningTarget t(auth_config(false));
  const auth::DhchapSecret hs = secret(0x11), wrong = secret(0x12);
  Session admin;
  uint16_t cntlid = 0;
  ASSERT_TRUE(authenticated_controller(admin, t.port(), hs, nullptr, cntlid));
  Session io;
  Cqe cqe{};
  ASSERT_TRUE(io.open(t.port()));
  ASSERT_TRUE(io.command(connect_sqe(io.cid(), 1), connect_data(kTestNqn, kHostNqn, cntlid), cqe));
  ASSERT_TRUE(ok(cqe));
  auth::DhchapHost first(host_keys(&hs, nullptr), {}, 2);
  ASSERT_TRUE(authenticate(io, first));
  auto read_ok = [&] {
    Cqe c{};
    return io.command(rw_sqe(IoOpcode::Read, io.cid(), 1, 0, 1, 512), {}, c) && ok(c);
  };
  ASSERT_TRUE(read_ok());

  // Again, with a read between each step: the queue stays authenticated throughout.
  auth::DhchapHost again(host_keys(&hs, nullptr), {}, 3);
  const std::vector<uint8_t> negotiate = again.next_message();
  ASSERT_TRUE(io.command(auth_sqe(io.cid(), FabricsType::AuthSend, uint32_t(negotiate.size())), negotiate, cqe));
  ASSERT_TRUE(ok(cqe));
  EXPECT_TRUE(read_ok()) << "commands go on while the host re-authenticates";
  ASSERT_TRUE(authenticate(io, again));
  EXPECT_TRUE(read_ok());

  // A re-authentication with the wrong secret fails, and the queue closes after its answer.
  auth::DhchapHost bad(host_keys(&wrong, nullptr), {}, 4);
  EXPECT_FALSE(authenticate(io, bad));
  Bytes p;
  EXPECT_FALSE(io.c.read_pdu(p)) << "the queue closes once its re-authentication has failed";
  // The admin queue, authenticated on its own, goes on.
  ASSERT_TRUE(admin.command(property_sqe(admin.cid(), FabricsType::PropertyGet, 0x1C, 0), {}, cqe));
  EXPECT_TRUE(ok(cqe));
}

// Holds every piece of work a queue takes off its reactor until the test lets it go.
struct HeldWork final : target::OffloadHook {
  std::mutex mu;
  std::condition_variable cv;
  int entered = 0;
  bool released = false;
  void before_work() override {
    std::unique_lock lk(mu);
    ++entered;
    cv.notify_all();
    cv.wait(lk, [&] { return released; });
  }
  bool wait_entered(int n) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(10), [&] { return entered >= n; });
  }
  void release() {
    std::lock_guard lk(mu);
    released = true;
    cv.notify_all();
  }
};

// The keyed host's admin queue with its Negotiate sent and not yet answered (cid: its command).
AssertionResult negotiate_unanswered(Session& s, uint16_t port, auth::DhchapHost& host, uint16_t& cid) {
  Cqe cqe{};
  if (auto r = s.open(port); !r) return r;
  if (auto r = s.connect_admin(cqe, kTestNqn, kHostNqn); !r) return r;
  if (!ok(cqe)) return AssertionFailure() << "Connect: " << status_name(Status::from_cqe(cqe.status));
  const std::vector<uint8_t> negotiate = host.next_message();
  cid = s.cid();
  return s.send_capsule(auth_sqe(cid, FabricsType::AuthSend, uint32_t(negotiate.size())), negotiate);
}

// The DH computations of an Authentication Send run on a worker: while one is held there, the
// reactor (one for the whole target here) answers other hosts' commands, and the same queue's
// next Authentication command is out of sequence; once it is back the transaction goes on.
TEST(AuthTarget, TheReactorGoesOnWhileAnExponentiationRuns) {
  target::TargetConfig cfg = auth_config(false);
  cfg.cores = 1;
  RunningTarget t(cfg);
  HeldWork held;
  t.target().state().offload_hook.store(&held);
  struct Unhook {
    RunningTarget& t;
    HeldWork& h;
    ~Unhook() {
      h.release();
      t.target().state().offload_hook.store(nullptr);
    }
  } unhook{t, held};

  Session s;
  const auth::DhchapSecret hs = secret(0x11);
  auth::DhchapHost host(host_keys(&hs, nullptr), {}, 1);
  uint16_t first = 0;
  ASSERT_TRUE(negotiate_unanswered(s, t.port(), host, first));
  ASSERT_TRUE(held.wait_entered(1)) << "the Negotiate's key pair is computed on a worker";
  Cqe cqe{};

  // Another host, on the same reactor, is answered meanwhile.
  Session other;
  ASSERT_TRUE(other.open(t.port()));
  ASSERT_TRUE(other.connect_admin(cqe, kTestNqn, kOtherHost));
  ASSERT_TRUE(ok(cqe));
  ASSERT_TRUE(other.command(property_sqe(other.cid(), FabricsType::PropertyGet, 0x1C, 0), {}, cqe));
  EXPECT_TRUE(ok(cqe));
  // The same queue's next Authentication command does not wait for, nor touch, the held one.
  Cqe second{};
  ASSERT_TRUE(s.command(auth_sqe(s.cid(), FabricsType::AuthReceive, wire::kAuthHostReceiveLength), {}, second));
  EXPECT_TRUE(status_is(second, 0, 0x0C)) << "Command Sequence Error while the last one is being computed";

  held.release();
  ASSERT_TRUE(s.read_response(first, cqe));
  EXPECT_TRUE(ok(cqe));
  ASSERT_TRUE(authenticate(s, host));
  ASSERT_TRUE(s.command(property_sqe(s.cid(), FabricsType::PropertyGet, 0x1C, 0), {}, cqe));
  EXPECT_TRUE(ok(cqe)) << "authenticated";
}

// A target stopped while a queue's computation is on a worker waits for it to come back (it
// comes back through the queue's reactor), then frees the queue: nothing is touched after it
// is gone (the sanitizer builds check).
TEST(AuthTarget, StoppingWhileAnExponentiationRunsWaitsForIt) {
  auto t = std::make_unique<RunningTarget>(auth_config(false));
  HeldWork held;
  t->target().state().offload_hook.store(&held);
  Session s;
  const auth::DhchapSecret hs = secret(0x11);
  auth::DhchapHost host(host_keys(&hs, nullptr), {}, 1);
  uint16_t cid = 0;
  ASSERT_TRUE(negotiate_unanswered(s, t->port(), host, cid));
  ASSERT_TRUE(held.wait_entered(1));
  s.c.close();  // the host goes too: its queue closes with the work still out
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    t->target().stop();
    stopped = true;
  });
  held.release();
  stopper.join();
  EXPECT_TRUE(stopped);
  EXPECT_EQ(t->target().state().usage.connections.load(), 0u);
  t->target().state().offload_hook.store(nullptr);
  t.reset();
}

// ---- the nvtcp host library against the nvtcp target -------------------------------------------

host::ControllerOptions host_options(const std::string& secret, const std::string& ctrl_secret = {}) {
  host::ControllerOptions o;
  o.hostnqn = kHostNqn;
  o.kato_ms = 0;
  o.io_queues = 2;
  o.dhchap_secret = secret;
  o.dhchap_ctrl_secret = ctrl_secret;
  return o;
}

std::string text_of(const auth::DhchapSecret& s) { return std::string(auth::format_dhchap_secret(s.transform, s.key.span()).view()); }

void write_and_read_back(host::Controller& ctrl) {
  std::string err;
  auto qp = ctrl.create_io_qpair(32, err);
  ASSERT_NE(qp, nullptr) << err;
  std::vector<uint8_t> data = pattern(4096, 27), back(4096, 0);
  EXPECT_TRUE(one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->write(2, 8, 8, data.data(), cb, ctx); }).ok());
  EXPECT_TRUE(one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->read(2, 8, 8, back.data(), cb, ctx); }).ok());
  EXPECT_EQ(back, data);
}

TEST(AuthHost, TheHostLibraryAuthenticatesEveryQueue) {
  RunningTarget t(auth_config(false));
  std::string err;
  auto ctrl = host::Controller::connect(t.trid(), host_options(text_of(secret(0x11))), err);
  ASSERT_NE(ctrl, nullptr) << err;
  write_and_read_back(*ctrl);
}

// Counts the Authentication commands the target answers, per queue.
struct AuthResponses final : target::ResponseObserver {
  std::mutex mu;
  std::map<uint16_t, int> ok_by_qid, failed_by_qid;
  void on_response(uint16_t qid, const nvme::Sqe& sqe, nvme::Status status, const backend::BlockIo&) override {
    if (sqe.opc != uint8_t(AdminOpcode::Fabrics)) return;
    const auto t = FabricsType(sqe.fctype());
    if (t != FabricsType::AuthSend && t != FabricsType::AuthReceive) return;
    std::lock_guard lk(mu);
    ++(status.ok() ? ok_by_qid : failed_by_qid)[qid];
  }
  int ok(uint16_t qid) {
    std::lock_guard lk(mu);
    return ok_by_qid[qid];
  }
};

// The host re-authenticates when asked, both ways, the admin queue through the controller and an
// I/O queue pair on its own thread while its reads are outstanding: each runs a whole new
// transaction (Negotiate to Success2), and the I/O goes on.
TEST(AuthHost, TheHostReauthenticatesWhenAsked) {
  RunningTarget t(auth_config(true));
  AuthResponses seen;
  t.target().state().response_observer.store(&seen);
  struct Unobserve {
    RunningTarget& t;
    ~Unobserve() { t.target().state().response_observer.store(nullptr); }
  } unobserve{t};
  std::string err;
  auto ctrl = host::Controller::connect(t.trid(), host_options(text_of(secret(0x11)), text_of(secret(0x22))), err);
  ASSERT_NE(ctrl, nullptr) << err;
  auto qp = ctrl->create_io_qpair(16, err);
  ASSERT_NE(qp, nullptr) << err;
  const int admin_before = seen.ok(0), io_before = seen.ok(qp->qid());
  EXPECT_EQ(admin_before, 5) << "Negotiate, Challenge, Reply, Success1, Success2 at connect";

  ASSERT_EQ(ctrl->reauthenticate(err), 0) << err;
  EXPECT_EQ(seen.ok(0), admin_before + 5) << "a whole transaction again on the admin queue";

  std::vector<uint8_t> buf(8 * 4096);
  int done = 0, failed = 0;
  struct Ctx {
    int* done;
    int* failed;
  } ctx{&done, &failed};
  auto cb = [](void* c, const host::Completion& cpl) {
    auto* x = static_cast<Ctx*>(c);
    ++*(cpl.status.ok() ? x->done : x->failed);
  };
  for (int i = 0; i < 8; ++i) ASSERT_EQ(qp->read(1, uint64_t(i) * 8, 8, buf.data() + i * 4096, cb, &ctx), 0);
  ASSERT_EQ(qp->reauthenticate(err), 0) << err;
  EXPECT_EQ(seen.ok(qp->qid()), io_before + 5) << "a whole transaction again on the I/O queue";
  while (done + failed < 8) qp->process_completions(1000);
  EXPECT_EQ(failed, 0) << "reads beside the re-authentication";
  EXPECT_EQ(qp->read(1, 0, 8, buf.data(), cb, &ctx), 0);
  while (done + failed < 9) qp->process_completions(1000);
  EXPECT_EQ(failed, 0);
}

// Without a secret there is nothing to re-authenticate with, and the call says so.
TEST(AuthHost, ReauthenticatingWithoutASecretIsRefused) {
  RunningTarget t;
  host::ControllerOptions o;
  o.kato_ms = 0;
  std::string err;
  auto ctrl = host::Controller::connect(t.trid(), o, err);
  ASSERT_NE(ctrl, nullptr) << err;
  EXPECT_EQ(ctrl->reauthenticate(err), -EINVAL);
  EXPECT_NE(err.find("no DH-HMAC-CHAP secret"), std::string::npos) << err;
  auto qp = ctrl->create_io_qpair(4, err);
  ASSERT_NE(qp, nullptr) << err;
  EXPECT_EQ(qp->reauthenticate(err), -EINVAL);
}

TEST(AuthHost, BothWaysFromAKeyFile) {
  RunningTarget t(auth_config(true));
  std::string path = "/tmp/nvtcp-auth-host-key-" + std::to_string(getpid());
  {
    std::ofstream f(path);
    f << text_of(secret(0x11)) << "\n";
  }
  chmod(path.c_str(), 0600);
  std::string err;
  auto ctrl = host::Controller::connect(t.trid(), host_options("@" + path, text_of(secret(0x22))), err);
  std::remove(path.c_str());
  ASSERT_NE(ctrl, nullptr) << err;
  write_and_read_back(*ctrl);
}

TEST(AuthHost, WrongOrMissingSecretsAreRefusedClearly) {
  RunningTarget t(auth_config(true));
  std::string err;
  EXPECT_EQ(host::Controller::connect(t.trid(), host_options(""), err), nullptr);
  EXPECT_NE(err.find("requires DH-HMAC-CHAP authentication"), std::string::npos) << err;
  EXPECT_EQ(host::Controller::connect(t.trid(), host_options(text_of(secret(0x12))), err), nullptr);
  EXPECT_NE(err.find("authentication failed"), std::string::npos) << err;
  // The controller answers the host's challenge with the wrong controller secret's response.
  EXPECT_EQ(host::Controller::connect(t.trid(), host_options(text_of(secret(0x11)), text_of(secret(0x23))), err),
            nullptr);
  EXPECT_NE(err.find("controller's response does not match"), std::string::npos) << err;
  EXPECT_EQ(host::Controller::connect(t.trid(), host_options("DHHC-1:01:bm90IGEga2V5:"), err), nullptr);
  EXPECT_NE(err.find("DH-HMAC-CHAP host secret"), std::string::npos) << err;
  EXPECT_EQ(err.find("bm90IGEga2V5"), std::string::npos) << "no key in errors: " << err;
  EXPECT_EQ(host::Controller::connect(t.trid(), host_options("", text_of(secret(0x22))), err), nullptr);
  EXPECT_NE(err.find("needs the host secret"), std::string::npos) << err;
  expect_healthy(t, kOtherHost);
  // And the right secrets still work after all that.
  auto ctrl = host::Controller::connect(t.trid(), host_options(text_of(secret(0x11)), text_of(secret(0x22))), err);
  ASSERT_NE(ctrl, nullptr) << err;
}

}  // namespace
}  // namespace nvtcp::test::auth_target_test

// SPDX-License-Identifier: Apache-2.0
// Asymmetric Namespace Access on the target, as a host sees it on the wire: Identify
// announces it (CMIC bit 3, ANACAP, ANAGRPMAX, NANAGRPID, OAES bit 11, each namespace's
// ANAGRPID) only for a subsystem with ana_reporting; log 0Ch gives each group's state through
// the host's own listener, with and without RGO; a state set through one listener answers I/O
// there with the ANA path statuses (DNR clear) and leaves the other listener's hosts alone; an
// ANA change notice reaches the controllers of that listener once until they read log 0Ch; an
// I/O queue must come in on its controller's listener.
#include <cstring>

#include "raw_session.hpp"

namespace nvtcp::test::ana_test {
namespace {

constexpr uint32_t kAnaChanged = async_event_dw0(AsyncEventType::Notice, kAsyncNoticeAnaChange, LogPageId::Ana);
constexpr uint32_t kNamespaceChanged =
    async_event_dw0(AsyncEventType::Notice, kAsyncNoticeNamespaceChanged, LogPageId::ChangedNamespaces);

// Two listeners; namespaces 1 and 2 in ANA group 1, namespace 3 in group 5.
target::TargetConfig ana_config(bool ana_reporting) {
  target::TargetConfig cfg = default_config();
  cfg.listeners.push_back({"127.0.0.1", 0});
  cfg.subsystems[0].ana_reporting = ana_reporting;
  cfg.subsystems[0].namespaces[0].anagrpid = 1;
  cfg.subsystems[0].namespaces[1].anagrpid = 1;
  cfg.subsystems[0].namespaces[2].anagrpid = 5;
  return cfg;
}

struct AnaLog {
  AnaLogHeader header{};
  struct Group {
    AnaGroupDescriptor desc{};
    std::vector<uint32_t> nsids;
  };
  std::vector<Group> groups;
  size_t bytes = 0;  // the log's own length (the rest of the read is zeros)
};

AssertionResult read_ana_log(AdminQueue& a, bool groups_only, AnaLog& out, bool retain = false) {
  Sqe sqe = get_log_sqe(a.s.cid(), LogPageId::Ana, 4096, retain);
  if (groups_only) sqe.cdw10 |= kLogAnaReturnGroupsOnly;
  Cqe cqe{};
  Bytes data;
  if (auto r = a.s.command(sqe, {}, cqe, &data); !r) return r;
  if (auto r = ok(cqe); !r) return r;
  if (data.size() != 4096) return AssertionFailure() << "log 0Ch: " << data.size() << " bytes";
  out = {};
  out.header = read_as<AnaLogHeader>(data, 0);
  size_t off = sizeof(AnaLogHeader);
  for (uint16_t i = 0; i < out.header.ngrps; ++i) {
    AnaLog::Group g;
    g.desc = read_as<AnaGroupDescriptor>(data, off);
    off += sizeof(AnaGroupDescriptor);
    for (uint32_t n = 0; n < g.desc.nnsids; ++n, off += 4) g.nsids.push_back(read_as<uint32_t>(data, off));
    out.groups.push_back(g);
  }
  out.bytes = off;
  return AssertionSuccess();
}

Bytes identify(AdminQueue& a, Cns cns, uint32_t nsid = 0) {
  Sqe sqe = admin_sqe(AdminOpcode::Identify, a.s.cid(), nsid);
  sqe.cdw10 = uint32_t(cns);
  sqe.sgl.length = kIdentifyLen;
  Cqe cqe{};
  Bytes data;
  EXPECT_TRUE(a.s.command(sqe, {}, cqe, &data));
  EXPECT_TRUE(ok(cqe));
  return data;
}

// A one-block read of nsid on io, its completion returned.
Cqe read_block(Session& io, uint32_t nsid, uint32_t block_bytes = 512) {
  Cqe cqe{};
  Bytes data;
  EXPECT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), nsid, 0, 1, block_bytes), {}, cqe, &data));
  return cqe;
}

bool dnr_of(const Cqe& c) { return c.status & (1u << 15); }

class Ana : public ::testing::Test {
 protected:
  void start(bool ana_reporting) { t_ = std::make_unique<RunningTarget>(ana_config(ana_reporting)); }
  std::string set(size_t listener, uint32_t grp, AnaState state) {
    return t_->target().live_config().set_ana_state(kTestNqn, "127.0.0.1", t_->port(listener), grp, state);
  }
  // The host's controller through each listener, an I/O queue of each.
  void open_both_paths(AdminQueue& a1, Session& io1, AdminQueue& a2, Session& io2) {
    ASSERT_NO_FATAL_FAILURE(a1.open(t_->port(0), kHostNqn));
    ASSERT_NO_FATAL_FAILURE(a1.open_io(t_->port(0), io1));
    ASSERT_NO_FATAL_FAILURE(a2.open(t_->port(1), kHostNqn));
    ASSERT_NO_FATAL_FAILURE(a2.open_io(t_->port(1), io2));
  }
  std::unique_ptr<RunningTarget> t_;
};

TEST_F(Ana, IdentifySaysNothingOfAnaWithoutReporting) {
  start(false);
  AdminQueue a;
  ASSERT_NO_FATAL_FAILURE(a.open(t_->port(), kHostNqn));
  const Bytes id = identify(a, Cns::Controller);
  const auto c = read_as<IdentifyController>(id);
  EXPECT_EQ(c.cmic, kCmicMultiController);
  EXPECT_EQ(c.oaes, kAecNamespaceAttribute);
  EXPECT_EQ(c.anacap, 0);
  EXPECT_EQ(c.anagrpmax, 0u);
  EXPECT_EQ(c.nanagrpid, 0u);
  EXPECT_EQ(read_as<IdentifyNamespace>(identify(a, Cns::Namespace, 3)).anagrpid, 0u);
  // No log 0Ch, and enabling ANA notices is refused as any unsupported bit is.
  Cqe cqe{};
  ASSERT_TRUE(a.s.command(get_log_sqe(a.s.cid(), LogPageId::Ana, 4096), {}, cqe));
  EXPECT_TRUE(status_is(cqe, 1, sc::InvalidLogPage.sc()));
  Sqe sqe = admin_sqe(AdminOpcode::SetFeatures, a.s.cid());
  sqe.cdw10 = kFeatureAsyncEventConfig;
  sqe.cdw11 = kAecAnaChange;
  ASSERT_TRUE(a.s.command(sqe, {}, cqe));
  EXPECT_TRUE(status_is(cqe, 0, sc::InvalidField.sc()));
  EXPECT_NE(set(0, 1, AnaState::Inaccessible), "");  // nothing to set
}

TEST_F(Ana, IdentifyAnnouncesAnaAndEachNamespacesGroup) {
  start(true);
  AdminQueue a;
  ASSERT_NO_FATAL_FAILURE(a.open(t_->port(), kHostNqn));
  const auto c = read_as<IdentifyController>(identify(a, Cns::Controller));
  EXPECT_EQ(c.cmic, kCmicMultiController | kCmicAna);
  EXPECT_EQ(c.oaes, kAecNamespaceAttribute | kAecAnaChange);
  EXPECT_EQ(c.anatt, kAnaTransitionSeconds);
  EXPECT_EQ(c.anacap, kAnacapStates | kAnacapGroupIdFixed);
  EXPECT_EQ(c.anagrpmax, target::kDefaultMaxNamespaces);
  EXPECT_EQ(c.nanagrpid, target::kDefaultMaxNamespaces);
  EXPECT_EQ(read_as<IdentifyNamespace>(identify(a, Cns::Namespace, 1)).anagrpid, 1u);
  EXPECT_EQ(read_as<IdentifyNamespace>(identify(a, Cns::Namespace, 3)).anagrpid, 5u);
  // Log 0Ch is listed as supported.
  Cqe cqe{};
  Bytes data;
  ASSERT_TRUE(a.s.command(get_log_sqe(a.s.cid(), LogPageId::SupportedLogPages, 1024), {}, cqe, &data));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(read_as<uint32_t>(data, 4 * uint8_t(LogPageId::Ana)), kLogSupported);
}

// The log's exact bytes for a known state: header, then group 1 (NSIDs 1, 2) and group 5
// (NSID 3), both optimized, CHGCNT 0; with RGO, the descriptors alone.
TEST_F(Ana, LogListsEachGroupWithItsNamespacesOrGroupsOnly) {
  start(true);
  AdminQueue a;
  ASSERT_NO_FATAL_FAILURE(a.open(t_->port(), kHostNqn));
  AnaLog log;
  ASSERT_TRUE(read_ana_log(a, false, log));
  EXPECT_EQ(log.header.chgcnt, 0u);
  ASSERT_EQ(log.header.ngrps, 2);
  EXPECT_EQ(log.bytes, 16u + 32 + 8 + 32 + 4);
  EXPECT_EQ(log.groups[0].desc.anagrpid, 1u);
  EXPECT_EQ(log.groups[0].desc.state, uint8_t(AnaState::Optimized));
  EXPECT_EQ(log.groups[0].nsids, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(log.groups[1].desc.anagrpid, 5u);
  EXPECT_EQ(log.groups[1].nsids, (std::vector<uint32_t>{3}));

  Cqe cqe{};
  Bytes raw;
  ASSERT_TRUE(a.s.command(get_log_sqe(a.s.cid(), LogPageId::Ana, 64), {}, cqe, &raw));
  ASSERT_TRUE(ok(cqe));
  const Bytes want_head = {0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,  // CHGCNT 0, NGRPS 2
                           1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  // group 1, 2 NSIDs, CHGCNT 0
                           1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  // optimized
                           1, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0}; // NSIDs 1, 2; group 5, 1 NSID
  EXPECT_EQ(raw, want_head);

  AnaLog rgo;
  ASSERT_TRUE(read_ana_log(a, true, rgo));
  ASSERT_EQ(rgo.header.ngrps, 2);
  EXPECT_EQ(rgo.bytes, 16u + 2 * 32);
  EXPECT_EQ(rgo.groups[0].desc.nnsids, 0u);
  EXPECT_EQ(rgo.groups[1].desc.anagrpid, 5u);
}

TEST_F(Ana, InaccessibleGroupAnswersPathStatusThroughThatListenerOnly) {
  start(true);
  AdminQueue a1, a2;
  Session io1, io2;
  ASSERT_NO_FATAL_FAILURE(open_both_paths(a1, io1, a2, io2));
  EXPECT_TRUE(ok(read_block(io1, kRamNsid)));

  ASSERT_EQ(set(0, 1, AnaState::Inaccessible), "");
  Cqe c = read_block(io1, kRamNsid);
  EXPECT_TRUE(status_is(c, 3, sc::AnaInaccessible.sc()));
  EXPECT_FALSE(dnr_of(c)) << "a path status must leave DNR clear (another path may serve it)";
  EXPECT_TRUE(status_is(read_block(io1, 1), 3, sc::AnaInaccessible.sc()));  // group 1 too
  EXPECT_TRUE(ok(read_block(io1, 3, 4096)));                                // group 5 is not
  EXPECT_TRUE(ok(read_block(io2, kRamNsid)));                               // nor the other listener
  // A Flush of every namespace reaches group 1: refused the same way.
  Cqe cqe{};
  Sqe flush{};
  flush.opc = uint8_t(IoOpcode::Flush);
  flush.nsid = kNsidAll;
  ASSERT_TRUE(io1.command(raw_sqe(flush, io1.cid()), {}, cqe));
  EXPECT_TRUE(status_is(cqe, 3, sc::AnaInaccessible.sc()));

  ASSERT_EQ(set(0, 1, AnaState::PersistentLoss), "");
  EXPECT_TRUE(status_is(read_block(io1, kRamNsid), 3, sc::AnaPersistentLoss.sc()));
  ASSERT_EQ(set(0, 1, AnaState::Change), "");
  EXPECT_TRUE(status_is(read_block(io1, kRamNsid), 3, sc::AnaTransition.sc()));
  ASSERT_EQ(set(0, 1, AnaState::NonOptimized), "");
  EXPECT_TRUE(ok(read_block(io1, kRamNsid)));
  ASSERT_EQ(set(0, 0, AnaState::Optimized), "");
  EXPECT_TRUE(ok(read_block(io1, kRamNsid)));

  // The log through each listener says what that listener's hosts see.
  ASSERT_EQ(set(1, 5, AnaState::NonOptimized), "");
  AnaLog l1, l2;
  ASSERT_TRUE(read_ana_log(a1, true, l1));
  ASSERT_TRUE(read_ana_log(a2, true, l2));
  EXPECT_EQ(l1.groups[1].desc.state, uint8_t(AnaState::Optimized));
  EXPECT_EQ(l2.groups[1].desc.state, uint8_t(AnaState::NonOptimized));
  EXPECT_EQ(l1.header.chgcnt, 5u);  // five changes through listener 0
  EXPECT_EQ(l2.header.chgcnt, 1u);
}

// A fused Compare and Write on a namespace its group makes unreachable through this port gets the
// path status a Write would, and writes nothing; through the other listener the pair runs.
TEST_F(Ana, AFusedPairOnAnInaccessibleGroupGetsThePathStatus) {
  start(true);
  AdminQueue a1, a2;
  Session io1, io2;
  ASSERT_NO_FATAL_FAILURE(open_both_paths(a1, io1, a2, io2));
  ASSERT_EQ(set(0, 1, AnaState::Inaccessible), "");
  auto pair = [](Session& io, uint8_t fill, Cqe& cmp, Cqe& wr) {
    Sqe c = rw_sqe(IoOpcode::Compare, io.cid(), kRamNsid, 300, 1, 512, kSglDataBlockOffset);
    c.flags |= kSqeFlagsFuseFirst;
    Sqe w = rw_sqe(IoOpcode::Write, io.cid(), kRamNsid, 300, 1, 512, kSglDataBlockOffset);
    w.flags |= kSqeFlagsFuseSecond;
    ASSERT_TRUE(io.send_capsule(c, Bytes(512, 0)));
    ASSERT_TRUE(io.send_capsule(w, Bytes(512, fill)));
    ASSERT_TRUE(io.read_response(c.cid, cmp));
    ASSERT_TRUE(io.read_response(w.cid, wr));
  };
  Cqe cmp{}, wr{};
  ASSERT_NO_FATAL_FAILURE(pair(io1, 0x77, cmp, wr));
  EXPECT_TRUE(status_is(cmp, 3, sc::AnaInaccessible.sc())) << "the Compare: " << hex(sc_of(cmp));
  EXPECT_FALSE(ok(wr)) << "the Write of a pair through an inaccessible path";
  Cqe rd{};
  Bytes data;
  ASSERT_TRUE(io2.command(rw_sqe(IoOpcode::Read, io2.cid(), kRamNsid, 300, 1, 512), {}, rd, &data));
  ASSERT_TRUE(ok(rd));
  EXPECT_EQ(data, Bytes(512, 0)) << "written through the inaccessible path";
  ASSERT_NO_FATAL_FAILURE(pair(io2, 0x55, cmp, wr));
  EXPECT_TRUE(ok(cmp));
  EXPECT_TRUE(ok(wr));
}

// A controller lives on the port its admin queue came in on: an I/O queue that names it through
// another listener is refused (its ANA states would be the other path's), and one through the
// same listener is taken.
TEST_F(Ana, AnIoQueueThroughAnotherListenerThanItsControllersIsRefused) {
  start(true);
  AdminQueue a;
  ASSERT_NO_FATAL_FAILURE(a.open(t_->port(0), kHostNqn));
  Session elsewhere;
  ASSERT_TRUE(elsewhere.open(t_->port(1)));
  Cqe cqe{};
  ASSERT_TRUE(elsewhere.command(connect_sqe(elsewhere.cid(), 1), connect_data(kTestNqn, kHostNqn, a.cntlid), cqe));
  EXPECT_TRUE(status_is(cqe, uint8_t(sc::ConnectInvalidParameters.sct()), sc::ConnectInvalidParameters.sc()));
  EXPECT_EQ(cqe.dw0, (1u << 16) | uint32_t(offsetof(ConnectData, cntlid)));
  Session io;
  ASSERT_NO_FATAL_FAILURE(a.open_io(t_->port(0), io));
  EXPECT_TRUE(ok(read_block(io, kRamNsid)));
}

TEST_F(Ana, ChangeNoticeReachesThatListenersControllersOnceUntilLogIsRead) {
  start(true);
  AdminQueue a1, a2;
  ASSERT_NO_FATAL_FAILURE(a1.open(t_->port(0), kHostNqn));
  ASSERT_NO_FATAL_FAILURE(a2.open(t_->port(1), kHostNqn));
  ASSERT_NO_FATAL_FAILURE(a1.enable_events(kAecAnaChange | kAecNamespaceAttribute));
  ASSERT_NO_FATAL_FAILURE(a2.enable_events(kAecAnaChange));
  const uint16_t aer1 = a1.hold_aer();
  const uint16_t aer2 = a2.hold_aer();

  ASSERT_EQ(set(0, 1, AnaState::Inaccessible), "");
  uint32_t dw0 = 0;
  ASSERT_TRUE(event_arrives(a1.s, aer1, dw0));
  EXPECT_EQ(dw0, kAnaChanged);

  // Masked until log 0Ch is read: a second change is not reported, nor does a namespace
  // notice wait behind it (each notice has its own log).
  const uint16_t again = a1.hold_aer();
  ASSERT_EQ(set(0, 1, AnaState::Optimized), "");
  uint32_t resized = 0;
  ASSERT_EQ(t_->target().live_config().resize_bdev("null0", 2ull << 30), "");
  ASSERT_TRUE(event_arrives(a1.s, again, resized));
  EXPECT_EQ(resized, kNamespaceChanged);

  // Reading the log (without RAE) unmasks: the next change is reported.
  AnaLog log;
  ASSERT_TRUE(read_ana_log(a1, false, log));
  EXPECT_EQ(log.header.chgcnt, 2u);
  const uint16_t third = a1.hold_aer();
  ASSERT_EQ(set(0, 5, AnaState::Inaccessible), "");
  ASSERT_TRUE(event_arrives(a1.s, third, dw0));
  EXPECT_EQ(dw0, kAnaChanged);

  // Listener 1's controller heard nothing of listener 0's changes; its own change reaches it.
  ASSERT_EQ(set(1, 1, AnaState::NonOptimized), "");
  ASSERT_TRUE(event_arrives(a2.s, aer2, dw0));
  EXPECT_EQ(dw0, kAnaChanged);
  AnaLog log2;
  ASSERT_TRUE(read_ana_log(a2, true, log2));
  EXPECT_EQ(log2.header.chgcnt, 1u);
  EXPECT_EQ(log2.groups[0].desc.state, uint8_t(AnaState::NonOptimized));
}

TEST_F(Ana, NotEnabledNoticesAreNotSent) {
  start(true);
  AdminQueue a;
  ASSERT_NO_FATAL_FAILURE(a.open(t_->port(), kHostNqn));
  ASSERT_NO_FATAL_FAILURE(a.enable_events(kAecNamespaceAttribute));  // ANA notices off
  const uint16_t aer = a.hold_aer();
  ASSERT_EQ(set(0, 1, AnaState::Inaccessible), "");
  ASSERT_EQ(t_->target().live_config().resize_bdev("null0", 2ull << 30), "");
  uint32_t dw0 = 0;
  ASSERT_TRUE(event_arrives(a.s, aer, dw0));
  EXPECT_EQ(dw0, kNamespaceChanged);  // the first event it was sent is the namespace one
}

TEST_F(Ana, NamespaceAddedInANewGroupIsListedAndChecksItsRange) {
  start(true);
  AdminQueue a;
  ASSERT_NO_FATAL_FAILURE(a.open(t_->port(), kHostNqn));
  target::NamespaceConfig bdev;
  bdev.name = "extra";
  bdev.type = "null";
  bdev.size = 1 << 20;
  ASSERT_EQ(t_->target().live_config().create_bdev(bdev), "");
  target::NamespaceConfig nc;
  nc.name = "extra";
  nc.anagrpid = target::kDefaultMaxNamespaces + 1;
  uint32_t nsid = 0;
  EXPECT_NE(t_->target().live_config().add_namespace(kTestNqn, nc, nsid), "");  // above ANAGRPMAX
  nc.anagrpid = 7;
  ASSERT_EQ(t_->target().live_config().add_namespace(kTestNqn, nc, nsid), "");
  AnaLog log;
  ASSERT_TRUE(read_ana_log(a, false, log));
  ASSERT_EQ(log.header.ngrps, 3);
  EXPECT_EQ(log.groups[2].desc.anagrpid, 7u);
  EXPECT_EQ(log.groups[2].nsids, (std::vector<uint32_t>{nsid}));
  EXPECT_EQ(read_as<IdentifyNamespace>(identify(a, Cns::Namespace, nsid)).anagrpid, 7u);
}

TEST_F(Ana, SetStateRefusesUnknownListenersAndGroups) {
  start(true);
  EXPECT_NE(t_->target().live_config().set_ana_state(kTestNqn, "127.0.0.2", t_->port(), 1, AnaState::Inaccessible), "");
  EXPECT_NE(t_->target().live_config().set_ana_state("nqn.2026-12.io.nvtcp:none", "127.0.0.1", t_->port(), 1,
                                       AnaState::Inaccessible),
            "");
  EXPECT_NE(set(0, target::kDefaultMaxNamespaces + 1, AnaState::Inaccessible), "");
  EXPECT_EQ(set(0, target::kDefaultMaxNamespaces, AnaState::Inaccessible), "");  // a group with no namespace yet
}

}  // namespace
}  // namespace nvtcp::test::ana_test

// SPDX-License-Identifier: Apache-2.0
// Subsystems and listeners created and taken away while the target serves, through the
// target's control calls (what nvmf_create_subsystem, nvmf_delete_subsystem and
// nvmf_subsystem_add_listener / _remove_listener run): a new subsystem is reachable through the
// listeners added to it and nothing else; deleting one ends its hosts' connections, waits for
// the commands on its devices and gives them back, and leaves every other subsystem's hosts
// alone; a listener added accepts, one removed closes and takes the controllers that came in
// through it; hosts on persistent discovery connections hear of each change (AEN F0h).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>

#include "nvtcp/host.hpp"
#include "raw_session.hpp"
#include "test_devices.hpp"

namespace nvtcp::test::live_subsystems_test {
namespace {

constexpr const char* kNewNqn = "nqn.2026-12.io.nvtcp:live";
constexpr int kDueMs = 5000;

target::SubsystemConfig new_subsystem(const std::string& nqn = kNewNqn) {
  target::SubsystemConfig sc;
  sc.nqn = nqn;
  sc.allow_any_host = true;
  return sc;
}

// An admin queue (qid 0) to subnqn through port, connected and enabled; the CQE of Connect.
AssertionResult admin_connect(Session& s, uint16_t port, const std::string& subnqn, Cqe& cqe) {
  if (auto r = s.open(port); !r) return r;
  if (auto r = s.command(connect_sqe(s.cid(), 0), connect_data(subnqn, kHostNqn, kDynamicCntlid), cqe); !r) return r;
  if (cqe.status != 0) return AssertionSuccess();
  Cqe en{};
  if (auto r = s.command(property_sqe(s.cid(), FabricsType::PropertySet, prop::CC, kCcEnable), {}, en); !r) return r;
  return ok(en);
}

size_t controllers_of(target::Target& t, const std::string& nqn) {
  auto s = t.state().find_subsystem(nqn);
  return s ? s->controller_count() : 0;
}

TEST(LiveSubsystems, ACreatedSubsystemServesHostsOnlyThroughTheListenersAddedToIt) {
  RunningTarget t;
  auto& tgt = t.target();
  ASSERT_EQ(tgt.live_config().create_subsystem(new_subsystem()), "");
  EXPECT_NE(tgt.live_config().create_subsystem(new_subsystem()), "") << "an NQN is unique";
  EXPECT_NE(tgt.live_config().create_subsystem(new_subsystem(nvme::kDiscoveryNqn)), "");
  EXPECT_NE(tgt.live_config().create_subsystem(new_subsystem("not-an-nqn")), "");
  ASSERT_EQ(tgt.live_config().create_bdev(bdev_config("Malloc0", "ram", 8 << 20)), "");
  uint32_t nsid = 0;
  auto nc = bdev_config("Malloc0", "", 0);
  ASSERT_EQ(tgt.live_config().add_namespace(kNewNqn, nc, nsid), "");

  // Made by RPC, it is on no listener yet (as in SPDK): Connect is refused.
  Session early;
  Cqe cqe{};
  ASSERT_TRUE(admin_connect(early, t.port(), kNewNqn, cqe));
  EXPECT_TRUE(status_is(cqe, 1, 0x82));  // Connect Invalid Parameters

  target::ListenerConfig lc{"127.0.0.1", t.port()};
  ASSERT_EQ(tgt.live_config().add_listener(kNewNqn, lc), "");
  EXPECT_EQ(lc.port, t.port()) << "the listener the target has at that address is shared";
  std::string err;
  host::ControllerOptions o;
  o.kato_ms = 0;
  auto ctrl = host::Controller::connect(t.trid(kNewNqn), o, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(16, err);
  ASSERT_TRUE(qp) << err;
  auto data = pattern(4096, 3);
  std::vector<uint8_t> back(4096);
  EXPECT_TRUE(one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->write(nsid, 8, 8, data.data(), cb, ctx); }).ok());
  EXPECT_TRUE(one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->read(nsid, 8, 8, back.data(), cb, ctx); }).ok());
  EXPECT_EQ(back, data);
  EXPECT_EQ(controllers_of(tgt, kNewNqn), 1u);
}

TEST(LiveSubsystems, DeletingOneEndsItsConnectionsWaitsForItsCommandsAndLeavesTheOthers) {
  GatedFactory gated;
  RunningTarget t(default_config(), gated.factory());
  auto& tgt = t.target();
  ASSERT_EQ(tgt.live_config().create_subsystem(new_subsystem()), "");
  ASSERT_EQ(tgt.live_config().create_bdev(bdev_config("gated", "null", 64 << 20)), "");
  uint32_t nsid = 0;
  auto nc = bdev_config("gated", "", 0);
  ASSERT_EQ(tgt.live_config().add_namespace(kNewNqn, nc, nsid), "");
  target::ListenerConfig lc{"127.0.0.1", t.port()};
  ASSERT_EQ(tgt.live_config().add_listener(kNewNqn, lc), "");

  // A host on the untouched subsystem, doing I/O before, during and after.
  std::string err;
  host::ControllerOptions o;
  o.kato_ms = 0;
  auto other = host::Controller::connect(t.trid(), o, err);
  ASSERT_TRUE(other) << err;
  auto other_qp = other->create_io_qpair(16, err);
  ASSERT_TRUE(other_qp) << err;
  std::vector<uint8_t> buf(512);
  auto read_other = [&] {
    return one_command(*other_qp, [&](host::CompletionFn cb, void* ctx) { return other_qp->read(2, 0, 1, buf.data(), cb, ctx); });
  };
  ASSERT_TRUE(read_other().ok());

  // A host on the doomed one, with a Deallocate its device holds.
  AdminQueue admin;
  Cqe cqe{};
  ASSERT_TRUE(admin_connect(admin.s, t.port(), kNewNqn, cqe));
  ASSERT_TRUE(ok(cqe));
  admin.cntlid = uint16_t(cqe.dw0);
  admin.hostnqn = kHostNqn;
  ASSERT_TRUE(admin.s.command(set_features_nq_sqe(admin.s.cid(), 1), {}, cqe));
  Session io;
  ASSERT_TRUE(io.open(t.port()));
  ASSERT_TRUE(io.command(connect_sqe(io.cid(), 1), connect_data(kNewNqn, kHostNqn, admin.cntlid), cqe));
  ASSERT_TRUE(ok(cqe));
  const Bytes range = bytes_of(DsmRange{0, 8, 0});  // 8 blocks at LBA 0
  Sqe dsm{};
  dsm.opc = uint8_t(IoOpcode::DatasetManagement);
  dsm = raw_sqe(dsm, io.cid(), uint32_t(range.size()), kSglDataBlockOffset);
  dsm.nsid = nsid;
  dsm.cdw11 = 1u << 2;  // AD
  ASSERT_TRUE(io.send_capsule(dsm, range));
  ASSERT_TRUE(wait_for([&] { return gated.dev.load() && gated.dev.load()->held() == 1; }, kDueMs));

  auto deleted = std::async(std::launch::async, [&] { return tgt.live_config().delete_subsystem(kNewNqn); });
  ASSERT_TRUE(wait_for([&] { return tgt.state().find_subsystem(kNewNqn) == nullptr; }, kDueMs));
  EXPECT_TRUE(admin.s.c.expect_eof()) << "the deleted subsystem's admin queue stays open";
  EXPECT_TRUE(io.c.expect_eof()) << "the deleted subsystem's I/O queue stays open";
  EXPECT_EQ(deleted.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "the deletion did not wait for the command on the device";
  EXPECT_TRUE(read_other().ok()) << "a host of another subsystem lost its service";
  gated.dev.load()->release_one();
  ASSERT_EQ(deleted.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(deleted.get(), "");

  // Gone: Connect is refused, the bdev is free for another namespace, the others go on.
  Session late;
  ASSERT_TRUE(admin_connect(late, t.port(), kNewNqn, cqe));
  EXPECT_TRUE(status_is(cqe, 1, 0x82));  // Connect Invalid Parameters
  uint32_t again = 0;
  ASSERT_NO_FATAL_FAILURE(expect_bdev_free_and_reusable(tgt, "gated", again));
  EXPECT_TRUE(read_other().ok());
  EXPECT_EQ(controllers_of(tgt, kTestNqn), 1u);
  EXPECT_NE(tgt.live_config().delete_subsystem(kNewNqn), "") << "deleting twice";
  EXPECT_NE(tgt.live_config().delete_subsystem(nvme::kDiscoveryNqn), "");
}

TEST(LiveSubsystems, AnAddedListenerAcceptsAndARemovedOneClosesAndEndsItsControllers) {
  RunningTarget t;
  auto& tgt = t.target();
  const uint16_t first = t.port();
  target::ListenerConfig lc{"127.0.0.1", 0};
  ASSERT_EQ(tgt.live_config().add_listener(kTestNqn, lc), "");
  const uint16_t second = lc.port;
  ASSERT_NE(second, 0);
  ASSERT_NE(second, first);

  AdminQueue via_first, via_second;
  via_first.open(first, "nqn.2014-08.org.nvmexpress:uuid:first");
  via_second.open(second, "nqn.2014-08.org.nvmexpress:uuid:second");
  ASSERT_EQ(controllers_of(tgt, kTestNqn), 2u);

  ASSERT_EQ(tgt.live_config().remove_listener(kTestNqn, "127.0.0.1", second), "");
  EXPECT_TRUE(via_second.s.c.expect_eof()) << "a controller that came in through the removed listener lives on";
  EXPECT_TRUE(controllers_drop_to(t, 1, std::chrono::milliseconds(kDueMs)));
  EXPECT_TRUE(wait_for([&] { return !tcp_connects(second); }, kDueMs))
      << "no subsystem is reachable through it, yet it still accepts";
  Cqe cqe{};
  Sqe sqe = admin_sqe(AdminOpcode::KeepAlive, via_first.s.cid());
  ASSERT_TRUE(via_first.s.command(sqe, {}, cqe));
  EXPECT_TRUE(ok(cqe)) << "the host on the other listener lost its controller";
  EXPECT_NE(tgt.live_config().remove_listener(kTestNqn, "127.0.0.1", second), "") << "removing twice";

  // The first listener, taken from the only subsystem, closes too; put back, it serves again.
  ASSERT_EQ(tgt.live_config().remove_listener(kTestNqn, "127.0.0.1", first), "");
  EXPECT_TRUE(via_first.s.c.expect_eof());
  target::ListenerConfig again{"127.0.0.1", 0};
  ASSERT_EQ(tgt.live_config().add_listener(kTestNqn, again), "");
  std::string err;
  host::TransportId trid = t.trid();
  trid.trsvcid = again.port;
  host::ControllerOptions o;
  o.kato_ms = 0;
  EXPECT_TRUE(host::Controller::connect(trid, o, err)) << err;
}

// The discovery service's own port (--discovery-port) goes as SPDK's rpc.py asks for it: a
// listener removed from the discovery subsystem. Its discovery controllers end, the port stops
// accepting, and the subsystems' listeners go on serving I/O and discovery alike.
TEST(LiveSubsystems, TheDiscoveryServicesOwnPortIsRemovedAsAListenerOfTheDiscoverySubsystem) {
  target::TargetConfig cfg = default_config();
  cfg.discovery_port = unused_port();
  RunningTarget t(cfg);
  auto& tgt = t.target();
  const uint16_t dport = tgt.discovery_port();
  ASSERT_NE(dport, 0) << "the discovery port was not bound";
  Session disc;
  Cqe cqe{};
  ASSERT_TRUE(admin_connect(disc, dport, nvme::kDiscoveryNqn, cqe));
  ASSERT_EQ(cqe.status, 0);
  EXPECT_EQ(controllers_of(tgt, nvme::kDiscoveryNqn), 1u);

  ASSERT_EQ(tgt.live_config().remove_listener(nvme::kDiscoveryNqn, "127.0.0.1", dport), "");
  EXPECT_TRUE(disc.c.expect_eof()) << "the discovery controller on the removed port lives on";
  EXPECT_TRUE(wait_for([&] { return !tcp_connects(dport); }, kDueMs)) << "the discovery port still accepts";
  EXPECT_EQ(tgt.discovery_port(), 0);
  EXPECT_NE(tgt.live_config().remove_listener(nvme::kDiscoveryNqn, "127.0.0.1", dport), "") << "removing twice";

  Session again;
  ASSERT_TRUE(admin_connect(again, t.port(), nvme::kDiscoveryNqn, cqe));
  EXPECT_EQ(cqe.status, 0) << "the subsystem's listener no longer serves discovery";
  std::string err;
  host::ControllerOptions o;
  o.kato_ms = 0;
  EXPECT_TRUE(host::Controller::connect(t.trid(), o, err)) << err;
}

TEST(LiveSubsystems, HostsOnPersistentDiscoveryConnectionsHearOfEachChange) {
  RunningTarget t;
  auto& tgt = t.target();
  AdminQueue disc;
  Cqe cqe{};
  ASSERT_TRUE(disc.s.open(t.port()));
  ASSERT_TRUE(disc.s.command(connect_sqe(disc.s.cid(), 0), connect_data(nvme::kDiscoveryNqn, kHostNqn, kDynamicCntlid), cqe));
  ASSERT_TRUE(ok(cqe));
  Bytes id;
  Sqe identify = admin_sqe(AdminOpcode::Identify, disc.s.cid());
  identify.cdw10 = uint32_t(Cns::Controller);
  identify.sgl.length = kIdentifyLen;
  ASSERT_TRUE(disc.s.command(identify, {}, cqe, &id));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(read_as<IdentifyController>(id).oaes, kAecDiscoveryLogChange)
      << "a discovery controller announces discovery log change notices (OAES bit 31), as nvmet";
  disc.enable_events(kAecDiscoveryLogChange);
  auto genctr = [&] {
    Bytes log;
    EXPECT_TRUE(disc.s.command(get_log_sqe(disc.s.cid(), LogPageId::Discovery, 1024), {}, cqe, &log));
    EXPECT_TRUE(ok(cqe));
    return log.size() >= 8 ? read_as<uint64_t>(log, 0) : 0;
  };
  uint64_t gen = genctr();
  const uint32_t notice = async_event_dw0(AsyncEventType::Notice, kAsyncNoticeDiscoveryLogChange, LogPageId::Discovery);

  // Each change: one notice, then the log (read, which unmasks the notice) has a new GENCTR.
  auto expect_notice = [&](const char* what, const std::function<std::string()>& change) {
    SCOPED_TRACE(what);
    const uint16_t aer = disc.hold_aer();
    ASSERT_EQ(change(), "");
    uint32_t dw0 = 0;
    ASSERT_TRUE(event_arrives(disc.s, aer, dw0));
    EXPECT_EQ(dw0, notice) << hex(dw0);
    const uint64_t now = genctr();
    EXPECT_GT(now, gen);
    gen = now;
  };
  expect_notice("subsystem created", [&] { return tgt.live_config().create_subsystem(new_subsystem()); });
  target::ListenerConfig lc{"127.0.0.1", t.port()};
  expect_notice("listener added", [&] { return tgt.live_config().add_listener(kNewNqn, lc); });
  expect_notice("listener removed", [&] { return tgt.live_config().remove_listener(kNewNqn, "127.0.0.1", t.port()); });
  expect_notice("subsystem deleted", [&] { return tgt.live_config().delete_subsystem(kNewNqn); });
}

}  // namespace
}  // namespace nvtcp::test::live_subsystems_test

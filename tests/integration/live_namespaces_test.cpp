// SPDX-License-Identifier: Apache-2.0
// Namespaces added, resized and removed while hosts are connected, through the target's
// control calls (what the RPC methods run): the nvtcp host hears of each change from a
// namespace attribute notice and rescans by itself; a removed namespace answers Invalid
// Namespace to new commands while a command already on its device completes with success,
// and the removal waits for it; a device comes back to its bdev when its namespace goes.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <future>
#include <thread>
#include <unistd.h>

#include "nvtcp/host.hpp"
#include "test_devices.hpp"
#include "test_target.hpp"

namespace nvtcp::test::live_namespaces_test {
namespace {

using host::Completion;
using host::Controller;
using host::QueuePair;

uint64_t host_blocks(Controller& c, uint32_t nsid) {
  host::NamespaceInfo ni;
  std::string err;
  return c.namespace_info(nsid, ni, err) ? ni.blocks : 0;
}

bool has_namespace(Controller& c, uint32_t nsid) {
  auto active = c.active_namespaces();
  return std::find(active.begin(), active.end(), nsid) != active.end();
}

constexpr int kDueMs = 5000;

// No keep-alive: these tests wait on namespace changes, and keep-alive has tests of its own.
host::ControllerOptions without_keep_alive() {
  host::ControllerOptions o;
  o.kato_ms = 0;
  return o;
}

TEST(LiveNamespaces, AnAddedNamespaceAppearsToAConnectedHostAndServesIO) {
  RunningTarget t;
  auto& tgt = t.target();
  std::string err;
  host::ControllerOptions o = without_keep_alive();
  std::atomic<int> notices{0};
  o.on_namespace_change = [&](uint32_t) { ++notices; };
  auto ctrl = Controller::connect(t.trid(), o, err);
  ASSERT_TRUE(ctrl) << err;
  EXPECT_EQ(ctrl->active_namespaces(), (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_EQ(reinterpret_cast<const nvme::IdentifyController*>(ctrl->identify_data())->nn, target::kDefaultMaxNamespaces)
      << "NN is the most namespaces the subsystem can hold, so hosts look beyond the ones it has";

  ASSERT_EQ(tgt.live_config().create_bdev(bdev_config("Malloc9", "ram", 8 << 20, 4096)), "");
  EXPECT_NE(tgt.live_config().create_bdev(bdev_config("Malloc9", "ram", 8 << 20)), "") << "a bdev name is unique";
  uint32_t nsid = 0;
  auto nc = bdev_config("Malloc9", "", 0);
  ASSERT_EQ(tgt.live_config().add_namespace(kTestNqn, nc, nsid), "");
  EXPECT_EQ(nsid, 4u) << "the lowest free NSID";
  ASSERT_TRUE(wait_for([&] { return has_namespace(*ctrl, 4); }, kDueMs)) << "the host never saw namespace 4";
  EXPECT_EQ(host_blocks(*ctrl, 4), (8u << 20) / 4096);
  // The callback runs once the new state shows, so it may still be on its way.
  EXPECT_TRUE(wait_for([&] { return notices.load() >= 1; }, kDueMs)) << "on_namespace_change never ran";
  // A bdev serves one namespace at a time.
  uint32_t again = 0;
  auto taken = bdev_config("Malloc9", "", 0);
  EXPECT_NE(tgt.live_config().add_namespace(kTestNqn, taken, again), "");

  auto qp = ctrl->create_io_qpair(16, err);
  ASSERT_TRUE(qp) << err;
  auto data = pattern(4096, 9);
  std::vector<uint8_t> back(4096);
  EXPECT_TRUE(one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->write(4, 3, 1, data.data(), cb, ctx); }).ok());
  EXPECT_TRUE(one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->read(4, 3, 1, back.data(), cb, ctx); }).ok());
  EXPECT_EQ(back, data);
}

TEST(LiveNamespaces, AResizedNullNamespaceShowsItsNewSize) {
  RunningTarget t;
  auto& tgt = t.target();
  std::string err;
  auto ctrl = Controller::connect(t.trid(), without_keep_alive(), err);
  ASSERT_TRUE(ctrl) << err;
  ASSERT_EQ(tgt.live_config().create_bdev(bdev_config("Null7", "null", 64 << 20)), "");
  uint32_t nsid = 0;
  auto nc = bdev_config("Null7", "", 0);
  nc.nsid = 7;
  ASSERT_EQ(tgt.live_config().add_namespace(kTestNqn, nc, nsid), "");
  ASSERT_TRUE(wait_for([&] { return host_blocks(*ctrl, 7) == (64u << 20) / 512; }, kDueMs));
  ASSERT_EQ(tgt.live_config().resize_bdev("Null7", 128 << 20), "");
  EXPECT_TRUE(wait_for([&] { return host_blocks(*ctrl, 7) == (128u << 20) / 512; }, kDueMs))
      << "the host still has " << host_blocks(*ctrl, 7) << " blocks";
  EXPECT_NE(tgt.live_config().resize_bdev("ram0", 1 << 20), "") << "only NULL and RBD bdevs resize";
}

TEST(LiveNamespaces, RemovalWaitsForTheCommandOnTheDeviceAndRefusesNewOnes) {
  GatedFactory gated;
  RunningTarget t(default_config(), gated.factory());
  auto& tgt = t.target();
  ASSERT_EQ(tgt.live_config().create_bdev(bdev_config("gated", "null", 64 << 20)), "");
  uint32_t nsid = 0;
  auto nc = bdev_config("gated", "", 0);
  nc.nsid = 5;
  ASSERT_EQ(tgt.live_config().add_namespace(kTestNqn, nc, nsid), "");
  ASSERT_NE(gated.dev.load(), nullptr);
  std::string err;
  auto ctrl = Controller::connect(t.trid(), without_keep_alive(), err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(16, err);
  ASSERT_TRUE(qp) << err;
  // A Deallocate the device holds: the command is on the namespace while it is removed.
  struct Done {
    std::atomic<bool> done{false};
    Completion c;
  } dsm;
  nvme::DsmRange range{};
  range.nlb = 8;
  range.slba = 0;
  ASSERT_EQ(qp->deallocate(5, &range, 1,
                           [](void* ctx, const Completion& c) {
                             auto* d = static_cast<Done*>(ctx);
                             d->c = c;
                             d->done = true;
                           },
                           &dsm),
            0);
  ASSERT_TRUE(wait_for([&] { qp->process_completions(); return gated.dev.load()->held() == 1; }, kDueMs));
  auto removed = std::async(std::launch::async, [&] { return tgt.live_config().remove_namespace(kTestNqn, 5); });
  ASSERT_TRUE(wait_for([&] { return tgt.state().find_subsystem(kTestNqn)->find_namespace(5) == nullptr; }, kDueMs));
  // Not done while the command is on the device; meanwhile namespace 5 takes no new command.
  // Sent as a raw command: the host itself may already have dropped namespace 5 (the notice).
  std::vector<uint8_t> buf(512);
  nvme::Sqe read{};
  read.opc = uint8_t(nvme::IoOpcode::Read);
  read.nsid = 5;
  read.cdw12 = 0;  // one block at LBA 0
  auto st = one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->submit(read, buf.data(), 512, false, cb, ctx); });
  EXPECT_EQ(st, nvme::sc::InvalidNamespace) << nvme::status_name(st);
  EXPECT_EQ(removed.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "the removal did not wait for the command on the device";
  EXPECT_TRUE(one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->read(1, 0, 1, buf.data(), cb, ctx); }).ok())
      << "another namespace stopped serving";
  gated.dev.load()->release_one();
  ASSERT_TRUE(wait_for([&] { qp->process_completions(); return dsm.done.load(); }, kDueMs));
  EXPECT_TRUE(dsm.c.status.ok()) << "the command under way completes as it would have: " << nvme::status_name(dsm.c.status);
  ASSERT_EQ(removed.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(removed.get(), "");
  EXPECT_TRUE(wait_for([&] { return !has_namespace(*ctrl, 5); }, kDueMs)) << "the host still lists namespace 5";
  // The device is the bdev's again: it can serve a namespace once more, or be deleted.
  uint32_t again = 0;
  ASSERT_NO_FATAL_FAILURE(expect_bdev_free_and_reusable(tgt, "gated", again));
  EXPECT_EQ(tgt.live_config().delete_bdev("gated"), "") << "deleting a bdev a namespace has removes the namespace first";
  target::BdevTable::Info info;
  EXPECT_FALSE(tgt.state().bdevs.find("gated", info));
  EXPECT_TRUE(wait_for([&] { return !has_namespace(*ctrl, again); }, kDueMs));
  EXPECT_NE(tgt.live_config().remove_namespace(kTestNqn, 5), "") << "removing twice";
}

TEST(LiveNamespaces, NamespacesComingAndGoingUnderLoadLoseNoCommand) {
  RunningTarget t;
  auto& tgt = t.target();
  std::string err;
  auto ctrl = Controller::connect(t.trid(), without_keep_alive(), err);
  ASSERT_TRUE(ctrl) << err;
  // 32 reads outstanding, half on namespace 2 (RAM, untouched), half on namespace 4 (added and
  // removed over and over), from a queue pair of the thread that uses it. Namespace 2's all
  // succeed; namespace 4's succeed or, while it is gone, answer Invalid Namespace; every one
  // is answered.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ok2{0}, ok4{0}, gone4{0}, failed{0};
  std::thread io([&] {
    std::string qerr;
    auto qp = ctrl->create_io_qpair(64, qerr);
    if (!qp) {
      ++failed;
      return;
    }
    struct Slot {
      uint32_t nsid = 2;
      std::atomic<uint64_t>* ok;
      std::atomic<uint64_t>* gone;
      std::atomic<uint64_t>* failed;
      std::vector<uint8_t> buf = std::vector<uint8_t>(4096);
      bool busy = false;
    };
    std::vector<Slot> slots;
    for (int i = 0; i < 32; ++i)
      slots.push_back(i % 2 ? Slot{4, &ok4, &gone4, &failed} : Slot{2, &ok2, &failed, &failed});
    auto cb = [](void* ctx, const Completion& c) {
      auto* s = static_cast<Slot*>(ctx);
      if (c.status.ok()) ++*s->ok;
      else if (c.status == nvme::sc::InvalidNamespace) ++*s->gone;
      else ++*s->failed;
      s->busy = false;
    };
    uint64_t lba = 0;
    while (!stop.load()) {
      for (auto& s : slots)
        if (!s.busy && qp->read(s.nsid, (lba++ * 8) % 30000, 8, s.buf.data(), cb, &s) == 0) s.busy = true;
      qp->process_completions();
    }
    while (std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.busy; })) qp->process_completions();
  });
  EXPECT_TRUE(wait_for([&] { return ok2.load() > 100 || failed.load() > 0; }, kDueMs)) << "no reads complete";
  for (int round = 0; round < 20; ++round) {
    const std::string name = fmt::format("Null{}", round);
    EXPECT_EQ(tgt.live_config().create_bdev(bdev_config(name, "null", 16 << 20)), "");
    uint32_t nsid = 0;
    auto nc = bdev_config(name, "", 0);
    nc.nsid = 4;
    EXPECT_EQ(tgt.live_config().add_namespace(kTestNqn, nc, nsid), "");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(tgt.live_config().delete_bdev(name), "");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop = true;
  io.join();
  EXPECT_GT(ok2.load(), 0u);
  EXPECT_GT(ok4.load(), 0u) << "no read found namespace 4 while it was there";
  EXPECT_GT(gone4.load(), 0u);
  EXPECT_EQ(failed.load(), 0u) << "a command failed otherwise, or one on the untouched namespace failed";
  EXPECT_TRUE(wait_for([&] { return ctrl->active_namespaces() == std::vector<uint32_t>{1, 2, 3}; }, kDueMs));
}


// Masking (SPDK's no_auto_visible and nvmf_ns_add_host): a namespace added with no_auto_visible
// is seen only by the hosts named for it. To another host it is not in the active list, Identify
// gives zeros and its I/O answers Invalid Namespace; naming that host shows it at once (the
// host hears of it from a namespace attribute notice and rescans), and taking the name back
// hides it again. Hosts that see it are not told when another host is named.
TEST(LiveNamespaces, AMaskedNamespaceIsSeenOnlyByTheHostsNamedForIt) {
  RunningTarget t;
  auto& tgt = t.target();
  const std::string host_a = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-0000-0000-000000000001";
  const std::string host_b = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-0000-0000-000000000002";
  auto connect_as = [&](const std::string& hostnqn, std::atomic<int>& notices) {
    host::TransportId id = t.trid();
    id.hostnqn = hostnqn;
    host::ControllerOptions o = without_keep_alive();
    o.on_namespace_change = [&notices](uint32_t) { ++notices; };
    std::string err;
    auto c = Controller::connect(id, o, err);
    EXPECT_TRUE(c) << err;
    return c;
  };
  std::atomic<int> notices_a{0}, notices_b{0};
  auto a = connect_as(host_a, notices_a);
  ASSERT_TRUE(a);

  ASSERT_EQ(tgt.live_config().create_bdev(bdev_config("Masked0", "ram", 8 << 20, 4096)), "");
  auto nc = bdev_config("Masked0", "", 0);
  nc.nsid = 6;
  nc.no_auto_visible = true;
  uint32_t nsid = 0;
  ASSERT_EQ(tgt.live_config().add_namespace(kTestNqn, nc, nsid), "");
  auto sub = tgt.state().find_subsystem(kTestNqn);
  ASSERT_TRUE(sub);
  EXPECT_EQ(sub->set_namespace_visible(6, host_a, true), 0);
  EXPECT_EQ(sub->set_namespace_visible(1, host_a, true), -EPERM) << "namespace 1 is seen by every host";
  EXPECT_EQ(sub->set_namespace_visible(9, host_a, true), -ENOENT);
  ASSERT_TRUE(wait_for([&] { return has_namespace(*a, 6); }, kDueMs)) << "host A, named for it, never saw it";

  auto b = connect_as(host_b, notices_b);  // joins after the namespace and A's name
  ASSERT_TRUE(b);
  EXPECT_EQ(b->active_namespaces(), (std::vector<uint32_t>{1, 2, 3})) << "namespace 6 is masked from B";
  std::string err;
  auto qa = a->create_io_qpair(16, err);
  ASSERT_TRUE(qa) << err;
  auto qb = b->create_io_qpair(16, err);
  ASSERT_TRUE(qb) << err;
  auto data = pattern(4096, 6);
  std::vector<uint8_t> back(4096);
  auto write = [&](QueuePair& q) {
    return one_command(q, [&](host::CompletionFn cb, void* ctx) { return q.write(6, 2, 1, data.data(), cb, ctx); });
  };
  // A raw Read: the host library keeps to the namespaces it knows, and this asks the target.
  auto read = [&](QueuePair& q) {
    return one_command(q, [&](host::CompletionFn cb, void* ctx) {
      nvme::Sqe sqe{};
      sqe.opc = uint8_t(nvme::IoOpcode::Read);
      sqe.nsid = 6;
      sqe.cdw10 = 2;  // SLBA 2, one block (NLB 0's based)
      return q.submit(sqe, back.data(), 4096, false, cb, ctx);
    });
  };
  EXPECT_TRUE(write(*qa).ok());
  EXPECT_EQ(read(*qb), nvme::sc::InvalidNamespace) << "B's I/O to a namespace masked from it";
  // Identify Namespace of an NSID B cannot see: zero-filled, as for one that does not exist.
  std::vector<uint8_t> idns(4096, 0xFF);
  ASSERT_TRUE(b->identify(0x00, 6, idns.data()).status.ok());
  EXPECT_EQ(idns, std::vector<uint8_t>(4096, 0)) << "Identify Namespace for B";

  const int a_before = notices_a.load();
  EXPECT_EQ(sub->set_namespace_visible(6, host_b, true), 0);
  ASSERT_TRUE(wait_for([&] { return has_namespace(*b, 6); }, kDueMs)) << "B named for it never saw it";
  EXPECT_TRUE(wait_for([&] { return notices_b.load() >= 1; }, kDueMs));
  EXPECT_TRUE(read(*qb).ok());
  EXPECT_EQ(back, data) << "B reads what A wrote";
  EXPECT_EQ(notices_a.load(), a_before) << "A, which saw it all along, is not told";

  EXPECT_EQ(sub->set_namespace_visible(6, host_b, false), 0);
  ASSERT_TRUE(wait_for([&] { return !has_namespace(*b, 6); }, kDueMs)) << "B still sees it after its name went";
  EXPECT_EQ(read(*qb), nvme::sc::InvalidNamespace);
  EXPECT_TRUE(has_namespace(*a, 6));
  EXPECT_TRUE(write(*qa).ok()) << "A still sees it";
}

}  // namespace
}  // namespace nvtcp::test::live_namespaces_test

namespace nvtcp::test::live_namespaces_test {
namespace {

// Namespaces the configuration (or the command line) makes without identifiers take them from
// their storage, not from their NSID: the same file keeps its identity across a restart, another
// file put at the same path does not (a host must not take it for the old one and keep the old
// one's cached data), and no two devices of one target share one.
TEST(LiveNamespaces, ConfiguredNamespacesTakeTheirIdentityFromTheirStorage) {
  const std::string path = fmt::format("/tmp/nvtcp-identity-{}.img", ::getpid());
  std::remove(path.c_str());
  auto ids = [](RunningTarget& t, uint32_t nsid) {
    const auto* ns = t.target().state().find_subsystem(kTestNqn)->find_namespace(nsid);
    EXPECT_NE(ns, nullptr) << "nsid " << nsid;
    if (!ns) return std::string();
    return std::string(reinterpret_cast<const char*>(ns->nguid), 16) +
           std::string(reinterpret_cast<const char*>(ns->eui64), 8) +
           std::string(reinterpret_cast<const char*>(ns->uuid), 16);
  };
  std::string first;
  {
    RunningTarget t(default_config(path));
    first = ids(t, 4);
    std::vector<std::string> all{ids(t, 1), ids(t, 2), ids(t, 3), first};
    std::sort(all.begin(), all.end());
    EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "two namespaces share an identity";
  }
  {
    RunningTarget t(default_config(path));
    EXPECT_EQ(ids(t, 4), first) << "the same file, after a restart";
  }
  std::remove(path.c_str());
  {
    RunningTarget t(default_config(path));
    EXPECT_NE(ids(t, 4), first) << "another file at the same path";
  }
  std::remove(path.c_str());
}


}  // namespace
}  // namespace nvtcp::test::live_namespaces_test

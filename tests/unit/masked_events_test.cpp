// SPDX-License-Identifier: Apache-2.0
// A namespace masked from a host (SPDK's no_auto_visible, named for other hosts only) must not
// show in anything that host can read: not in its Changed Namespace List when the namespace is
// added, resized or moved to another ANA group, not as a group of its ANA log, and no ANA change
// notice for a group of namespaces it does not see. Identify and I/O already answer as for an
// NSID that does not exist; these are the indirect routes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "fake_command_transport.hpp"
#include "nvtcp/log_pages.hpp"
#include "nvtcp/properties.hpp"
#include "target/bdevs.hpp"
#include "target/subsystem.hpp"
#include "wire/commands.hpp"
#include "wire/fabrics.hpp"
#include "wire/features.hpp"

namespace masked_events_test {

using namespace nvtcp;
using namespace nvtcp::wire;
using test::command_layer::Bytes;
using test::command_layer::FakeTransport;
using test::command_layer::with_sgl;

constexpr const char* kNqn = "nqn.2026-12.io.nvtcp:masked-events";
constexpr const char* kNamed = "nqn.2026-12.io.nvtcp:named-host";
constexpr const char* kOther = "nqn.2026-12.io.nvtcp:other-host";
constexpr uint8_t kNamedId[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
constexpr uint8_t kOtherId[16] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
constexpr uint32_t kMasked = 1;   // seen by kNamed only
constexpr uint32_t kShared = 2;   // seen by every host
constexpr uint32_t kAdded = 3;    // added live, seen by kNamed only

class MaskedEvents : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_.listeners.push_back({"127.0.0.1", 4420});
    target::SubsystemConfig sub;
    sub.nqn = kNqn;
    sub.ana_reporting = true;
    target::NamespaceConfig masked{kMasked, "ram", 1u << 20, "", 512};
    masked.name = "masked";
    masked.no_auto_visible = true;
    masked.visible_hosts = {kNamed};
    masked.anagrpid = 7;
    sub.namespaces.push_back(masked);
    target::NamespaceConfig shared{kShared, "null", 1u << 20, "", 512};
    shared.name = "shared";
    sub.namespaces.push_back(shared);
    cfg_.subsystems.push_back(sub);
    ASSERT_EQ(target::finalize_config(cfg_), "");
    state_ = std::make_unique<target::TargetState>();
    ASSERT_EQ(target::build_state(cfg_, *state_), "");
    named_ = std::make_unique<FakeTransport>(reactor_, set_, *state_);
    other_ = std::make_unique<FakeTransport>(reactor_, set_, *state_);
    ASSERT_NO_FATAL_FAILURE(bring_up(*named_, kNamedId, kNamed));
    ASSERT_NO_FATAL_FAILURE(bring_up(*other_, kOtherId, kOther));
    sub_ = &named_->commands().controller()->subsystem();
    settle();
    changed_namespaces(*named_);  // read: the lists start empty
    changed_namespaces(*other_);
  }
  void TearDown() override {
    named_.reset();
    other_.reset();
    state_.reset();
  }

  void bring_up(FakeTransport& admin, const uint8_t (&id)[16], const char* hostnqn) {
    admin.run(cmd::connect(0, 31, 0), test::command_layer::bytes_of(cmd::connect_data(id, kDynamicCntlid, kNqn, hostnqn)));
    ASSERT_TRUE(done(admin).ok());
    admin.run(with_sgl(cmd::property_set(prop::CC, prop::kCcEnableNvm), 1, 0));
    ASSERT_TRUE(done(admin).ok());
  }
  static Status done(FakeTransport& q) { return test::command_layer::last_status(q); }
  // Events are queued on the admin queue's reactor: run it until they are in.
  void settle() {
    for (int i = 0; i < 5; ++i) reactor_.run_once(0);
  }
  Bytes log_page(FakeTransport& admin, LogPageId lid, uint32_t len) {
    admin.run(with_sgl(cmd::get_log_page(uint8_t(lid), 0, len), 20, len));
    for (int i = 0; i < 20 && admin.completed.empty(); ++i) reactor_.run_once(0);
    Bytes page = admin.sent.back();
    EXPECT_TRUE(done(admin).ok());
    return page;
  }
  // The NSIDs in the host's Changed Namespace List (read, so the list starts again).
  std::vector<uint32_t> changed_namespaces(FakeTransport& admin) {
    settle();
    const Bytes page = log_page(admin, LogPageId::ChangedNamespaces, 4096);
    std::vector<uint32_t> nsids;
    for (size_t off = 0; off + 4 <= page.size(); off += 4) {
      uint32_t n;
      std::memcpy(&n, page.data() + off, 4);
      if (n) nsids.push_back(n);
    }
    return nsids;
  }
  // The ANA groups the host's ANA log lists.
  std::vector<uint32_t> ana_groups(FakeTransport& admin) {
    const Bytes page = log_page(admin, LogPageId::Ana, 4096);
    nvme::AnaLogHeader h;
    std::memcpy(&h, page.data(), sizeof(h));
    std::vector<uint32_t> groups;
    size_t off = sizeof(h);
    for (uint16_t i = 0; i < h.ngrps; ++i) {
      nvme::AnaGroupDescriptor d;
      std::memcpy(&d, page.data() + off, sizeof(d));
      groups.push_back(d.anagrpid);
      off += sizeof(d) + d.nnsids * sizeof(uint32_t);
    }
    return groups;
  }
  bool holds(const std::vector<uint32_t>& v, uint32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

  reactor::Reactor reactor_;
  target::ReactorCommands set_;
  target::TargetConfig cfg_;
  std::unique_ptr<target::TargetState> state_;
  std::unique_ptr<FakeTransport> named_, other_;
  target::Subsystem* sub_ = nullptr;
};

TEST_F(MaskedEvents, AChangeToAMaskedNamespaceReachesOnlyTheHostsThatSeeIt) {
  // Resized (what revalidation and bdev resize announce).
  sub_->notify_namespace_changed(kMasked);
  EXPECT_EQ(changed_namespaces(*named_), std::vector<uint32_t>{kMasked});
  EXPECT_EQ(changed_namespaces(*other_), std::vector<uint32_t>{}) << "the other host heard of a masked NSID";
  // Moved to another ANA group.
  ASSERT_EQ(sub_->set_namespace_ana_group(kMasked, 9), 0);
  EXPECT_EQ(changed_namespaces(*named_), std::vector<uint32_t>{kMasked});
  EXPECT_EQ(changed_namespaces(*other_), std::vector<uint32_t>{}) << "a move of a masked namespace was announced";
  // Added live, named for one host.
  target::NamespaceConfig nc = cfg_.subsystems[0].namespaces[0];
  nc.nsid = kAdded;
  nc.name = "added";
  std::string err;
  auto device = backend::make_ram(1u << 20, 512, 1, err);
  ASSERT_TRUE(device) << err;
  auto ns = target::make_namespace(cfg_, kNqn, nc, std::move(device), err);
  ASSERT_TRUE(ns) << err;
  ASSERT_TRUE(sub_->add_namespace(std::move(ns)));
  sub_->notify_namespace_changed(kAdded);
  EXPECT_EQ(changed_namespaces(*named_), std::vector<uint32_t>{kAdded});
  EXPECT_EQ(changed_namespaces(*other_), std::vector<uint32_t>{}) << "an added masked namespace was announced";
  // A change to the shared namespace still reaches both.
  sub_->notify_namespace_changed(kShared);
  EXPECT_EQ(changed_namespaces(*named_), std::vector<uint32_t>{kShared});
  EXPECT_EQ(changed_namespaces(*other_), std::vector<uint32_t>{kShared});
}

TEST_F(MaskedEvents, TheAnaLogListsTheGroupsOfTheNamespacesTheHostSees) {
  const std::vector<uint32_t> named = ana_groups(*named_), other = ana_groups(*other_);
  EXPECT_TRUE(holds(named, 7));
  EXPECT_TRUE(holds(named, kShared));
  EXPECT_FALSE(holds(other, 7)) << "the group of a masked namespace was listed";
  EXPECT_TRUE(holds(other, kShared));
}

// An ANA state change through a host's listener is noticed to it only when it concerns a group
// of a namespace it sees.
TEST_F(MaskedEvents, AnAnaChangeOfAMaskedNamespacesGroupIsNoticedOnlyToTheHostsThatSeeIt) {
  for (FakeTransport* admin : {named_.get(), other_.get()}) {
    admin->run(with_sgl(cmd::set_features(kFeatureAsyncEventConfig, kAecAnaChange), 30, 0));
    ASSERT_TRUE(done(*admin).ok());
    admin->run(with_sgl(cmd::async_event_request(), 31, 0));
    ASSERT_EQ(admin->command_count(test::command_layer::S::HeldAer), 1u);
  }
  ASSERT_FALSE(sub_->set_ana_state(1, 7, nvme::AnaState::Inaccessible).empty());
  settle();
  EXPECT_EQ(named_->command_count(test::command_layer::S::HeldAer), 0u) << "the host that sees it was not told";
  EXPECT_EQ(other_->command_count(test::command_layer::S::HeldAer), 1u)
      << "a host was told of a change to a group of namespaces it does not see";
  // A change to the shared namespace's group reaches both.
  ASSERT_FALSE(sub_->set_ana_state(1, kShared, nvme::AnaState::NonOptimized).empty());
  settle();
  EXPECT_EQ(other_->command_count(test::command_layer::S::HeldAer), 0u);
}

}  // namespace masked_events_test

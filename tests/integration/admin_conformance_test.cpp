// Admin commands as nvme-cli issues them (id-ns --csi, list-ns --csi, supported-log-pages,
// effects-log): the data a Linux or SPDK host reads, and the status of each bad form.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "nvtcp/host.hpp"
#include "test_target.hpp"
#include "wire/identify.hpp"
#include "wire/log_pages.hpp"

namespace nvtcp::test {
namespace {

using host::Completion;
using host::Controller;
using host::ControllerOptions;
namespace sc = wire::sc;

class AdminConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string err;
    ctrl_ = Controller::connect(t_.trid(), ControllerOptions{}, err);
    ASSERT_TRUE(ctrl_) << err;
  }
  Completion identify(wire::Cns cns, uint32_t nsid, uint8_t csi = wire::kCsiNvm) {
    std::memset(buf_, 0xA5, sizeof(buf_));  // every byte the target does not write shows
    return ctrl_->identify(uint8_t(cns), nsid, buf_, uint32_t(csi) << 24);
  }
  bool all_zero(size_t from = 0) const {
    for (size_t i = from; i < sizeof(buf_); ++i)
      if (buf_[i]) return false;
    return true;
  }
  Completion log(wire::LogPageId lid, uint32_t len, uint8_t csi = wire::kCsiNvm) {
    std::memset(buf_, 0xA5, sizeof(buf_));
    wire::Sqe sqe{};
    sqe.opc = uint8_t(wire::AdminOpcode::GetLogPage);
    sqe.nsid = wire::kNsidAll;
    const uint32_t numd = len / 4 - 1;
    sqe.cdw10 = uint8_t(lid) | ((numd & 0xFFFF) << 16);
    sqe.cdw11 = numd >> 16;
    sqe.cdw14 = uint32_t(csi) << 24;
    return ctrl_->admin(sqe, buf_, len, false);
  }

  RunningTarget t_;
  std::unique_ptr<Controller> ctrl_;
  alignas(8) uint8_t buf_[wire::kIdentifyLen];
};

TEST_F(AdminConformance, IdentifyControllerSaysWhichLogsExist) {
  const auto* id = reinterpret_cast<const wire::IdentifyController*>(ctrl_->identify_data());
  EXPECT_EQ(id->lpa & 0x2, 0x2) << "Commands Supported and Effects log";
  EXPECT_EQ(id->lpa & 0x4, 0x4) << "extended data for Get Log Page";
  EXPECT_EQ(id->lpa & 0x1, 0) << "no SMART per namespace yet";
  EXPECT_EQ(id->lpa & 0x20, 0) << "bit 5 would promise LIDs 12h and 13h";
}

TEST_F(AdminConformance, IoCommandSetNamespaceIsZeroForNvm) {
  ASSERT_TRUE(identify(wire::Cns::IoCommandSetNamespace, 1).status.ok());
  EXPECT_TRUE(all_zero());
  EXPECT_EQ(identify(wire::Cns::IoCommandSetNamespace, 1, 2).status, sc::InvalidField) << "ZNS is not supported";
  EXPECT_EQ(identify(wire::Cns::IoCommandSetNamespace, 0).status, sc::InvalidNamespace);
  EXPECT_EQ(identify(wire::Cns::IoCommandSetNamespace, wire::kNsidAll).status, sc::InvalidNamespace);
}

TEST_F(AdminConformance, IoCommandSetActiveListMatchesTheActiveList) {
  ASSERT_TRUE(identify(wire::Cns::IoCommandSetActiveNamespaceList, 0).status.ok());
  std::vector<uint8_t> by_csi(buf_, buf_ + sizeof(buf_));
  ASSERT_TRUE(identify(wire::Cns::ActiveNamespaceList, 0).status.ok());
  EXPECT_EQ(by_csi, std::vector<uint8_t>(buf_, buf_ + sizeof(buf_)));
  uint32_t first[4];
  std::memcpy(first, by_csi.data(), sizeof(first));
  EXPECT_EQ(first[0], 1u);
  EXPECT_EQ(first[1], 2u);
  EXPECT_EQ(first[2], 3u);
  EXPECT_EQ(first[3], 0u);
  ASSERT_TRUE(identify(wire::Cns::IoCommandSetActiveNamespaceList, 2).status.ok());
  std::memcpy(first, buf_, sizeof(first));
  EXPECT_EQ(first[0], 3u) << "NSIDs above the one given";
  EXPECT_EQ(identify(wire::Cns::IoCommandSetActiveNamespaceList, 0, 2).status, sc::InvalidField);
  EXPECT_EQ(identify(wire::Cns::IoCommandSetActiveNamespaceList, 0xFFFFFFFE).status, sc::InvalidField);
}

TEST_F(AdminConformance, IndependentNamespaceDataForActiveAndInactiveNamespaces) {
  ASSERT_TRUE(identify(wire::Cns::IndependentNamespace, 2).status.ok());
  wire::IndependentIdentifyNamespace id;
  std::memcpy(&id, buf_, sizeof(id));
  EXPECT_EQ(id.nstat & wire::kNstatReady, wire::kNstatReady);
  EXPECT_EQ(id.nmic, 1);
  EXPECT_EQ(id.anagrpid, 0u);
  EXPECT_TRUE(all_zero(offsetof(wire::IndependentIdentifyNamespace, nstat) + 1));
  ASSERT_TRUE(identify(wire::Cns::IndependentNamespace, 99).status.ok()) << "inactive: zero-filled";
  EXPECT_TRUE(all_zero());
  EXPECT_EQ(identify(wire::Cns::IndependentNamespace, 0).status, sc::InvalidNamespace);
  EXPECT_EQ(identify(wire::Cns::IndependentNamespace, wire::kNsidAll).status, sc::InvalidNamespace);
}

TEST_F(AdminConformance, IoCommandSetCombinationsIsNvmOnly) {
  ASSERT_TRUE(identify(wire::Cns::IoCommandSetCombinations, 0).status.ok());
  wire::IoCommandSetVectors v;
  std::memcpy(&v, buf_, sizeof(v));
  EXPECT_EQ(v.vector[0], 1u);
  EXPECT_TRUE(all_zero(8));
}

TEST_F(AdminConformance, SupportedLogPagesListsWhatGetLogPageAnswers) {
  ASSERT_TRUE(log(wire::LogPageId::SupportedLogPages, sizeof(wire::SupportedLogPagesLog)).status.ok());
  wire::SupportedLogPagesLog l;
  std::memcpy(&l, buf_, sizeof(l));
  for (unsigned lid = 0; lid < 256; ++lid) {
    const bool listed = l.lid[lid] & wire::kLogSupported;
    EXPECT_EQ(l.lid[lid] & ~wire::kLogSupported, 0u) << "lid " << lid;
    if (lid == 0x70) continue;  // the discovery log belongs to discovery controllers
    // A listed log answers; an unlisted one gets Invalid Log Page (4 bytes are enough to ask).
    alignas(8) uint8_t small[512];
    Completion c = ctrl_->get_log_page(uint8_t(lid), wire::kNsidAll, small, sizeof(small));
    if (listed) EXPECT_TRUE(c.status.ok()) << "lid " << lid << ": " << wire::status_name(c.status);
    else EXPECT_EQ(c.status, sc::InvalidLogPage) << "lid " << lid;
  }
  EXPECT_TRUE(l.lid[0x05] & wire::kLogSupported);
  EXPECT_TRUE(l.lid[0x00] & wire::kLogSupported);
}

TEST_F(AdminConformance, CommandEffectsLogMarksEveryCommandTheTargetRuns) {
  ASSERT_TRUE(log(wire::LogPageId::CommandEffects, sizeof(wire::CommandEffectsLog)).status.ok());
  wire::CommandEffectsLog e;
  std::memcpy(&e, buf_, sizeof(e));
  using wire::kEffectsCsupp;
  using wire::kEffectsLbcc;
  for (auto op : {wire::AdminOpcode::GetLogPage, wire::AdminOpcode::Identify, wire::AdminOpcode::Abort,
                  wire::AdminOpcode::SetFeatures, wire::AdminOpcode::GetFeatures,
                  wire::AdminOpcode::AsyncEventRequest, wire::AdminOpcode::KeepAlive})
    EXPECT_EQ(e.admin[uint8_t(op)], kEffectsCsupp) << "admin opcode " << int(op);
  EXPECT_EQ(e.io[0x00], kEffectsCsupp);                 // Flush
  EXPECT_EQ(e.io[0x01], kEffectsCsupp | kEffectsLbcc);  // Write
  EXPECT_EQ(e.io[0x02], kEffectsCsupp);                 // Read
  EXPECT_EQ(e.io[0x08], kEffectsCsupp | kEffectsLbcc);  // Write Zeroes
  EXPECT_EQ(e.io[0x09], kEffectsCsupp | kEffectsLbcc);  // Dataset Management (deallocate)
  unsigned admin = 0, io = 0;
  for (unsigned i = 0; i < 256; ++i) {
    admin += e.admin[i] != 0;
    io += e.io[i] != 0;
  }
  EXPECT_EQ(admin, 7u) << "only commands the target runs";
  EXPECT_EQ(io, 5u);
  for (uint8_t b : e.rsvd2048) ASSERT_EQ(b, 0);
  // Only the NVM command set.
  EXPECT_EQ(log(wire::LogPageId::CommandEffects, sizeof(wire::CommandEffectsLog), 2).status, sc::InvalidField);
}

}  // namespace
}  // namespace nvtcp::test

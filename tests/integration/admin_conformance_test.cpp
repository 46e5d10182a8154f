// SPDX-License-Identifier: Apache-2.0
// Admin commands as nvme-cli issues them (id-ns --csi, list-ns --csi, supported-log-pages,
// effects-log): the data a Linux or SPDK host reads, and the status of each bad form.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nvtcp/host.hpp"
#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"
#include "test_target.hpp"
#include "wire/fabrics.hpp"
#include "wire/features.hpp"

namespace nvtcp::test::admin_conformance_test {
namespace {

using host::Completion;
using host::Controller;
using host::ControllerOptions;
namespace sc = nvme::sc;

constexpr uint8_t kHostId[16] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
                                  0x99, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xF0, 0x01};

class AdminConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string err;
    ControllerOptions o;
    std::memcpy(o.hostid, kHostId, sizeof(kHostId));
    ctrl_ = Controller::connect(t_.trid(), o, err);
    ASSERT_TRUE(ctrl_) << err;
  }
  Completion set_feature(uint8_t fid, uint32_t cdw11, bool save = false) {
    nvme::Sqe sqe{};
    sqe.opc = uint8_t(nvme::AdminOpcode::SetFeatures);
    sqe.cdw10 = fid | (save ? 1u << 31 : 0);
    sqe.cdw11 = cdw11;
    return ctrl_->admin(sqe, nullptr, 0, false);
  }
  Completion get_feature(uint8_t fid, uint32_t sel, uint32_t cdw11 = 0, void* data = nullptr, uint32_t len = 0) {
    nvme::Sqe sqe{};
    sqe.opc = uint8_t(nvme::AdminOpcode::GetFeatures);
    sqe.cdw10 = fid | (sel << 8);
    sqe.cdw11 = cdw11;
    return ctrl_->admin(sqe, data, len, false);
  }
  Completion identify(nvme::Cns cns, uint32_t nsid, uint8_t csi = nvme::kCsiNvm) {
    std::memset(buf_, 0xA5, sizeof(buf_));  // every byte the target does not write shows
    return ctrl_->identify(uint8_t(cns), nsid, buf_, uint32_t(csi) << 24);
  }
  bool all_zero(size_t from = 0) const {
    for (size_t i = from; i < sizeof(buf_); ++i)
      if (buf_[i]) return false;
    return true;
  }
  Completion log(nvme::LogPageId lid, uint32_t len, uint8_t csi = nvme::kCsiNvm) {
    std::memset(buf_, 0xA5, sizeof(buf_));
    nvme::Sqe sqe{};
    sqe.opc = uint8_t(nvme::AdminOpcode::GetLogPage);
    sqe.nsid = nvme::kNsidAll;
    const uint32_t numd = len / 4 - 1;
    sqe.cdw10 = uint8_t(lid) | ((numd & 0xFFFF) << 16);
    sqe.cdw11 = numd >> 16;
    sqe.cdw14 = uint32_t(csi) << 24;
    return ctrl_->admin(sqe, buf_, len, false);
  }

  RunningTarget t_;
  std::unique_ptr<Controller> ctrl_;
  alignas(8) uint8_t buf_[nvme::kIdentifyLen];
};

TEST_F(AdminConformance, IdentifyControllerSaysWhichLogsExist) {
  const auto* id = reinterpret_cast<const nvme::IdentifyController*>(ctrl_->identify_data());
  EXPECT_EQ(id->lpa & 0x2, 0x2) << "Commands Supported and Effects log";
  EXPECT_EQ(id->lpa & 0x4, 0x4) << "extended data for Get Log Page";
  EXPECT_EQ(id->lpa & 0x1, 0x1) << "SMART per namespace";
  EXPECT_EQ(id->lpa & 0x20, 0) << "bit 5 would promise LIDs 12h and 13h";
}

TEST_F(AdminConformance, IoCommandSetNamespaceIsZeroForNvm) {
  ASSERT_TRUE(identify(nvme::Cns::IoCommandSetNamespace, 1).status.ok());
  EXPECT_TRUE(all_zero());
  EXPECT_EQ(identify(nvme::Cns::IoCommandSetNamespace, 1, 2).status, sc::InvalidField) << "ZNS is not supported";
  EXPECT_EQ(identify(nvme::Cns::IoCommandSetNamespace, 0).status, sc::InvalidNamespace);
  EXPECT_EQ(identify(nvme::Cns::IoCommandSetNamespace, nvme::kNsidAll).status, sc::InvalidNamespace);
}

TEST_F(AdminConformance, IoCommandSetActiveListMatchesTheActiveList) {
  ASSERT_TRUE(identify(nvme::Cns::IoCommandSetActiveNamespaceList, 0).status.ok());
  std::vector<uint8_t> by_csi(buf_, buf_ + sizeof(buf_));
  ASSERT_TRUE(identify(nvme::Cns::ActiveNamespaceList, 0).status.ok());
  EXPECT_EQ(by_csi, std::vector<uint8_t>(buf_, buf_ + sizeof(buf_)));
  uint32_t first[4];
  std::memcpy(first, by_csi.data(), sizeof(first));
  EXPECT_EQ(first[0], 1u);
  EXPECT_EQ(first[1], 2u);
  EXPECT_EQ(first[2], 3u);
  EXPECT_EQ(first[3], 0u);
  ASSERT_TRUE(identify(nvme::Cns::IoCommandSetActiveNamespaceList, 2).status.ok());
  std::memcpy(first, buf_, sizeof(first));
  EXPECT_EQ(first[0], 3u) << "NSIDs above the one given";
  EXPECT_EQ(identify(nvme::Cns::IoCommandSetActiveNamespaceList, 0, 2).status, sc::InvalidField);
  EXPECT_EQ(identify(nvme::Cns::IoCommandSetActiveNamespaceList, 0xFFFFFFFE).status, sc::InvalidField);
}

TEST_F(AdminConformance, IndependentNamespaceDataForActiveAndInactiveNamespaces) {
  ASSERT_TRUE(identify(nvme::Cns::IndependentNamespace, 2).status.ok());
  nvme::IndependentIdentifyNamespace id;
  std::memcpy(&id, buf_, sizeof(id));
  EXPECT_EQ(id.nstat & nvme::kNstatReady, nvme::kNstatReady);
  EXPECT_EQ(id.nmic, 1);
  EXPECT_EQ(id.anagrpid, 0u);
  EXPECT_TRUE(all_zero(offsetof(nvme::IndependentIdentifyNamespace, nstat) + 1));
  ASSERT_TRUE(identify(nvme::Cns::IndependentNamespace, 99).status.ok()) << "inactive: zero-filled";
  EXPECT_TRUE(all_zero());
  EXPECT_EQ(identify(nvme::Cns::IndependentNamespace, 0).status, sc::InvalidNamespace);
  EXPECT_EQ(identify(nvme::Cns::IndependentNamespace, nvme::kNsidAll).status, sc::InvalidNamespace);
}

TEST_F(AdminConformance, IoCommandSetCombinationsIsNvmOnly) {
  ASSERT_TRUE(identify(nvme::Cns::IoCommandSetCombinations, 0).status.ok());
  nvme::IoCommandSetVectors v;
  std::memcpy(&v, buf_, sizeof(v));
  EXPECT_EQ(v.vector[0], 1u);
  EXPECT_TRUE(all_zero(8));
}

TEST_F(AdminConformance, SupportedLogPagesListsWhatGetLogPageAnswers) {
  ASSERT_TRUE(log(nvme::LogPageId::SupportedLogPages, sizeof(nvme::SupportedLogPagesLog)).status.ok());
  nvme::SupportedLogPagesLog l;
  std::memcpy(&l, buf_, sizeof(l));
  for (unsigned lid = 0; lid < 256; ++lid) {
    const bool listed = l.lid[lid] & nvme::kLogSupported;
    EXPECT_EQ(l.lid[lid] & ~nvme::kLogSupported, 0u) << "lid " << lid;
    if (lid == 0x70) continue;  // the discovery log belongs to discovery controllers
    // A listed log answers; an unlisted one gets Invalid Log Page (4 bytes are enough to ask).
    alignas(8) uint8_t small[512];
    Completion c = ctrl_->get_log_page(uint8_t(lid), nvme::kNsidAll, small, sizeof(small));
    if (listed) EXPECT_TRUE(c.status.ok()) << "lid " << lid << ": " << nvme::status_name(c.status);
    else EXPECT_EQ(c.status, sc::InvalidLogPage) << "lid " << lid;
  }
  EXPECT_TRUE(l.lid[0x05] & nvme::kLogSupported);
  EXPECT_TRUE(l.lid[0x00] & nvme::kLogSupported);
}

TEST_F(AdminConformance, CommandEffectsLogMarksEveryCommandTheTargetRuns) {
  ASSERT_TRUE(log(nvme::LogPageId::CommandEffects, sizeof(nvme::CommandEffectsLog)).status.ok());
  nvme::CommandEffectsLog e;
  std::memcpy(&e, buf_, sizeof(e));
  using nvme::kEffectsCsupp;
  using nvme::kEffectsLbcc;
  for (auto op : {nvme::AdminOpcode::GetLogPage, nvme::AdminOpcode::Identify, nvme::AdminOpcode::Abort,
                  nvme::AdminOpcode::SetFeatures, nvme::AdminOpcode::GetFeatures,
                  nvme::AdminOpcode::AsyncEventRequest, nvme::AdminOpcode::KeepAlive})
    EXPECT_EQ(e.admin[uint8_t(op)], kEffectsCsupp) << "admin opcode " << int(op);
  EXPECT_EQ(e.io[0x00], kEffectsCsupp);                 // Flush
  EXPECT_EQ(e.io[0x01], kEffectsCsupp | kEffectsLbcc);  // Write
  EXPECT_EQ(e.io[0x02], kEffectsCsupp);                 // Read
  EXPECT_EQ(e.io[0x08], kEffectsCsupp | kEffectsLbcc);  // Write Zeroes
  EXPECT_EQ(e.io[0x09], kEffectsCsupp | kEffectsLbcc);  // Dataset Management (deallocate)
  EXPECT_EQ(e.io[0x0C], kEffectsCsupp);                 // Verify
  EXPECT_EQ(e.io[0x05], kEffectsCsupp);                 // Compare
  EXPECT_EQ(e.io[0x19], kEffectsCsupp | kEffectsLbcc);  // Copy
  for (unsigned op : {0x0Du, 0x0Eu, 0x11u, 0x15u}) EXPECT_EQ(e.io[op], kEffectsCsupp) << "reservation opcode " << op;
  unsigned admin = 0, io = 0;
  for (unsigned i = 0; i < 256; ++i) {
    admin += e.admin[i] != 0;
    io += e.io[i] != 0;
  }
  EXPECT_EQ(admin, 7u) << "only commands the target runs";
  EXPECT_EQ(io, 12u);
  for (uint8_t b : e.rsvd2048) ASSERT_EQ(b, 0);
  // Only the NVM command set.
  EXPECT_EQ(log(nvme::LogPageId::CommandEffects, sizeof(nvme::CommandEffectsLog), 2).status, sc::InvalidField);
}

// Every feature nvme-cli's get-feature asks for, with each select: what was set reads back
// as current, default and saved read as the default (nothing is saveable), and the
// capabilities say "changeable".
TEST_F(AdminConformance, FeaturesReadBackWhatWasSetUnderEverySelect) {
  struct Case {
    uint8_t fid;
    uint32_t set, cdw11_for_get, want_current, want_default;
  };
  const uint32_t under = 1u << 20;  // feature 04h THSEL 01b
  const Case cases[] = {
      {wire::kFeaturePowerManagement, 0, 0, 0, 0},
      {wire::kFeatureTemperatureThreshold, 0x150, 0, 0x150, wire::kTemperatureOverDefault},
      {wire::kFeatureTemperatureThreshold, under | 0x110, under, under | 0x110, under},
      {wire::kFeatureErrorRecovery, 0x30, 0, 0x30, 0},
      {wire::kFeatureInterruptCoalescing, 0x0A05, 0, 0x0A05, 0},
      {wire::kFeatureWriteAtomicity, 1, 0, 1, 0},
      {wire::kFeatureAsyncEventConfig, 0x100, 0, 0x100, 0},
      {wire::kFeatureKeepAliveTimer, 20000, 0, 20000, 30000},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(testing::Message() << "feature " << std::hex << int(c.fid) << " set " << c.set);
    ASSERT_TRUE(set_feature(c.fid, c.set).status.ok());
    Completion g = get_feature(c.fid, wire::kSelCurrent, c.cdw11_for_get);
    ASSERT_TRUE(g.status.ok()) << nvme::status_name(g.status);
    EXPECT_EQ(g.dw0, c.want_current);
    for (uint32_t sel : {wire::kSelDefault, wire::kSelSaved}) {
      g = get_feature(c.fid, sel, c.cdw11_for_get);
      ASSERT_TRUE(g.status.ok());
      EXPECT_EQ(g.dw0, c.want_default) << "sel " << sel;
    }
    g = get_feature(c.fid, wire::kSelSupportedCapabilities, c.cdw11_for_get);
    ASSERT_TRUE(g.status.ok());
    EXPECT_EQ(g.dw0, wire::kFeatureCapChangeable);
    EXPECT_EQ(get_feature(c.fid, 4, c.cdw11_for_get).status, sc::InvalidField) << "SEL 100b is reserved";
  }
  // The over threshold kept its own value beside the under one.
  EXPECT_EQ(get_feature(wire::kFeatureTemperatureThreshold, wire::kSelCurrent).dw0, 0x150u);
  // Number of Queues: what the host library asked for at bring-up, for every select.
  const uint32_t queues = get_feature(wire::kFeatureNumberOfQueues, wire::kSelCurrent).dw0;
  EXPECT_EQ(get_feature(wire::kFeatureNumberOfQueues, wire::kSelDefault).dw0, queues);
}

TEST_F(AdminConformance, FeatureValuesTheTargetCannotHonourAreRefused) {
  EXPECT_EQ(set_feature(wire::kFeaturePowerManagement, 1).status, sc::InvalidField) << "only power state 0";
  EXPECT_EQ(set_feature(wire::kFeatureTemperatureThreshold, (1u << 16) | 0x150).status, sc::InvalidField)
      << "no temperature sensor 1";
  EXPECT_EQ(set_feature(wire::kFeatureTemperatureThreshold, (2u << 20) | 0x150).status, sc::InvalidField)
      << "THSEL 10b is reserved";
  EXPECT_EQ(get_feature(wire::kFeatureTemperatureThreshold, wire::kSelCurrent, 3u << 20).status, sc::InvalidField);
  EXPECT_EQ(set_feature(wire::kFeatureErrorRecovery, 1u << 16).status, sc::InvalidField)
      << "DULBE: deallocated blocks read as zeros";
  EXPECT_EQ(set_feature(wire::kFeatureAsyncEventConfig, 1u << 9).status, sc::InvalidField)
      << "firmware activation notices are not in OAES";
  EXPECT_EQ(set_feature(wire::kFeatureWriteAtomicity, 1, true).status, sc::FeatureNotSaveable);
  EXPECT_EQ(set_feature(0x7E, 0).status, sc::InvalidField);
  EXPECT_EQ(get_feature(0x7E, wire::kSelCurrent).status, sc::InvalidField);
  // Nothing refused changed anything.
  EXPECT_EQ(get_feature(wire::kFeaturePowerManagement, wire::kSelCurrent).dw0, 0u);
  EXPECT_EQ(get_feature(wire::kFeatureTemperatureThreshold, wire::kSelCurrent).dw0, wire::kTemperatureOverDefault);
  EXPECT_EQ(get_feature(wire::kFeatureErrorRecovery, wire::kSelCurrent).dw0, 0u);
  EXPECT_EQ(get_feature(wire::kFeatureAsyncEventConfig, wire::kSelCurrent).dw0 & (1u << 9), 0u);
}

TEST_F(AdminConformance, HostIdentifierIsTheOneConnectCarried) {
  alignas(8) uint8_t id[16] = {};
  Completion c = get_feature(wire::kFeatureHostIdentifier, wire::kSelCurrent, 1, id, sizeof(id));
  ASSERT_TRUE(c.status.ok()) << nvme::status_name(c.status);
  EXPECT_EQ(std::memcmp(id, kHostId, sizeof(id)), 0);
  EXPECT_EQ(get_feature(wire::kFeatureHostIdentifier, wire::kSelCurrent, 0, id, sizeof(id)).status, sc::InvalidField)
      << "64-bit host identifiers do not exist over fabrics (EXHID 0)";
  EXPECT_EQ(set_feature(wire::kFeatureHostIdentifier, 1).status, sc::CommandSequenceError);
}

// nvme set-feature -f 0x16 / get-feature -f 0x16: 512 bytes each way; ACRE is kept, the
// behaviours the target cannot offer are refused and leave it alone.
TEST_F(AdminConformance, HostBehaviorSupportKeepsAcreAndRefusesWhatTheTargetCannotDo) {
  auto set = [&](const std::vector<uint8_t>& data) {
    nvme::Sqe sqe{};
    sqe.opc = uint8_t(nvme::AdminOpcode::SetFeatures);
    sqe.cdw10 = wire::kFeatureHostBehaviorSupport;
    std::vector<uint8_t> copy = data;
    return ctrl_->admin(sqe, copy.data(), uint32_t(copy.size()), true).status;
  };
  auto get = [&](uint32_t sel) {
    std::vector<uint8_t> data(wire::kHostBehaviorLen, 0xEE);
    Completion c = get_feature(wire::kFeatureHostBehaviorSupport, sel, 0, data.data(), uint32_t(data.size()));
    EXPECT_TRUE(c.status.ok()) << nvme::status_name(c.status);
    return data;
  };
  std::vector<uint8_t> want(wire::kHostBehaviorLen, 0);
  EXPECT_EQ(get(wire::kSelCurrent), want);
  std::vector<uint8_t> acre(wire::kHostBehaviorLen, 0);
  acre[0] = 1;
  ASSERT_TRUE(set(acre).ok());
  EXPECT_EQ(get(wire::kSelCurrent), acre);
  EXPECT_EQ(get(wire::kSelDefault), want);
  EXPECT_EQ(get(wire::kSelSaved), want);
  EXPECT_EQ(get_feature(wire::kFeatureHostBehaviorSupport, wire::kSelSupportedCapabilities).dw0,
            wire::kFeatureCapChangeable);
  std::vector<uint8_t> lbafee(wire::kHostBehaviorLen, 0);
  lbafee[2] = 1;
  EXPECT_EQ(set(lbafee), sc::InvalidField) << "LBA format extension";
  std::vector<uint8_t> acre2(wire::kHostBehaviorLen, 0);
  acre2[0] = 2;
  EXPECT_EQ(set(acre2), sc::InvalidField);
  EXPECT_EQ(set(std::vector<uint8_t>(256, 0)), sc::DataSglLengthInvalid) << "half the structure";
  EXPECT_EQ(get(wire::kSelCurrent), acre) << "refused values change nothing";
  EXPECT_EQ(get_feature(wire::kFeatureHostBehaviorSupport, 4).status, sc::InvalidField);
}

uint64_t smart_error_entries(Controller& ctrl) {
  nvme::SmartLog smart{};
  EXPECT_TRUE(ctrl.get_log_page(uint8_t(nvme::LogPageId::SmartHealth), nvme::kNsidAll, &smart, sizeof(smart))
                  .status.ok());
  uint64_t n = 0;
  std::memcpy(&n, smart.num_err_log_entries, sizeof(n));
  return n;
}

std::vector<nvme::ErrorLogEntry> error_log(Controller& ctrl) {
  std::vector<nvme::ErrorLogEntry> log(64);
  EXPECT_TRUE(ctrl.get_log_page(uint8_t(nvme::LogPageId::Error), nvme::kNsidAll, log.data(),
                                uint32_t(log.size() * sizeof(nvme::ErrorLogEntry)))
                  .status.ok());
  return log;
}

// nvme error-log: every failed command, admin or I/O, newest first, with its queue, command
// ID, status, namespace and LBA; SMART counts them.
TEST_F(AdminConformance, ErrorLogRecordsFailedCommands) {
  const auto* id = reinterpret_cast<const nvme::IdentifyController*>(ctrl_->identify_data());
  EXPECT_EQ(id->elpe, 63) << "64 entries";
  const uint64_t before = smart_error_entries(*ctrl_);

  EXPECT_EQ(identify(nvme::Cns(0x10), 0).status, sc::InvalidField);  // an admin command that fails
  std::string err;
  auto qp = ctrl_->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  std::vector<uint8_t> data(512);
  const uint64_t lba = (64ull << 20) / 512 + 7;  // past the end of nsid 2 (64 MiB)
  EXPECT_EQ(one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->read(2, lba, 1, data.data(), cb, ctx); }),
            sc::LbaOutOfRange);

  EXPECT_EQ(smart_error_entries(*ctrl_), before + 2);
  auto log = error_log(*ctrl_);
  const nvme::ErrorLogEntry& io = log[0];
  EXPECT_EQ(io.error_count, before + 2);
  EXPECT_EQ(io.sqid, qp->qid());
  EXPECT_EQ(io.status, sc::LbaOutOfRange.to_cqe());
  EXPECT_EQ(io.nsid, 2u);
  EXPECT_EQ(io.lba, lba);
  EXPECT_EQ(io.pel, 0xFFFF);
  EXPECT_EQ(io.trtype, nvme::kTrtypeTcp);
  const nvme::ErrorLogEntry& admin = log[1];
  EXPECT_EQ(admin.error_count, before + 1);
  EXPECT_EQ(admin.sqid, 0);
  EXPECT_EQ(admin.status, sc::InvalidField.to_cqe());
  EXPECT_EQ(admin.lba, 0u);
}

TEST_F(AdminConformance, ErrorLogKeepsTheLastSixtyFourNewestFirst) {
  const uint64_t before = smart_error_entries(*ctrl_);
  for (int i = 0; i < 70; ++i) ASSERT_EQ(identify(nvme::Cns(0x10), 0).status, sc::InvalidField);
  const uint64_t last = before + 70;
  EXPECT_EQ(smart_error_entries(*ctrl_), last);
  auto log = error_log(*ctrl_);
  for (size_t i = 0; i < log.size(); ++i) EXPECT_EQ(log[i].error_count, last - i) << "entry " << i;
  // A window of the log (LPO) starts at that entry.
  nvme::ErrorLogEntry two[2];
  ASSERT_TRUE(ctrl_->get_log_page(uint8_t(nvme::LogPageId::Error), nvme::kNsidAll, two, sizeof(two),
                                  10 * sizeof(nvme::ErrorLogEntry))
                  .status.ok());
  EXPECT_EQ(two[0].error_count, last - 10);
  EXPECT_EQ(two[1].error_count, last - 11);
}

struct SmartCounts {
  uint64_t reads = 0, writes = 0, units_read = 0, units_written = 0;
};

SmartCounts smart(Controller& ctrl, uint32_t nsid, nvme::Status* st = nullptr) {
  nvme::SmartLog log{};
  Completion c = ctrl.get_log_page(uint8_t(nvme::LogPageId::SmartHealth), nsid, &log, sizeof(log));
  if (st) *st = c.status;
  else EXPECT_TRUE(c.status.ok()) << nvme::status_name(c.status);
  SmartCounts s;
  std::memcpy(&s.reads, log.host_reads, 8);
  std::memcpy(&s.writes, log.host_writes, 8);
  std::memcpy(&s.units_read, log.data_units_read, 8);
  std::memcpy(&s.units_written, log.data_units_written, 8);
  return s;
}

// nvme smart-log with and without -n: each namespace counts its own commands, the
// controller-wide log their sum.
TEST_F(AdminConformance, SmartLogPerNamespaceAndForTheController) {
  std::string err;
  auto qp = ctrl_->create_io_qpair(16, err);
  ASSERT_TRUE(qp) << err;
  std::vector<uint8_t> data(64 * 1024, 0x5A);
  int pending = 0;
  auto done = [](void* ctx, const Completion& c) {
    EXPECT_TRUE(c.status.ok()) << nvme::status_name(c.status);
    --*static_cast<int*>(ctx);
  };
  for (int i = 0; i < 3; ++i, ++pending) ASSERT_EQ(qp->write(2, uint64_t(i) * 128, 128, data.data(), done, &pending), 0);
  for (int i = 0; i < 5; ++i, ++pending) ASSERT_EQ(qp->read(3, uint64_t(i) * 16, 1, data.data(), done, &pending), 0);
  // Bounded by time, not by calls: a spinning reactor's turn returns at once.
  wait_for([&] {
    qp->process_completions(1000);
    return pending == 0;
  }, 10000);
  ASSERT_EQ(pending, 0);

  const SmartCounts ns1 = smart(*ctrl_, 1), ns2 = smart(*ctrl_, 2), ns3 = smart(*ctrl_, 3);
  const SmartCounts all = smart(*ctrl_, nvme::kNsidAll), zero = smart(*ctrl_, 0);
  EXPECT_EQ(ns1.reads + ns1.writes, 0u);
  EXPECT_EQ(ns2.writes, 3u);
  EXPECT_EQ(ns2.reads, 0u);
  EXPECT_EQ(ns2.units_written, (3u * 65536 / 512 + 999) / 1000);  // thousands of 512-byte units, rounded up
  EXPECT_EQ(ns3.reads, 5u);
  EXPECT_EQ(ns3.units_read, 1u);  // 5 x 4 KiB = 40 units of 512 bytes: one thousand, rounded up
  EXPECT_EQ(all.writes, 3u);
  EXPECT_EQ(all.reads, 5u);
  EXPECT_EQ(zero.reads, all.reads);
  nvme::Status st;
  smart(*ctrl_, 99, &st);
  EXPECT_EQ(st, sc::InvalidNamespace);
}

// nvme verify: the range is read as a read would be and nothing is sent back; it is bounded
// by VSL (CNS 06h), which equals MDTS; ONCS says Verify and Save/Select are supported.
TEST_F(AdminConformance, VerifyReadsItsRangeAndSendsNothing) {
  const auto* id = reinterpret_cast<const nvme::IdentifyController*>(ctrl_->identify_data());
  EXPECT_TRUE(id->oncs & nvme::kOncsVerify);
  EXPECT_TRUE(id->oncs & nvme::kOncsSaveSelect);
  ASSERT_TRUE(identify(nvme::Cns::IoCommandSetController, 0).status.ok());
  nvme::NvmIdentifyController nvm;
  std::memcpy(&nvm, buf_, sizeof(nvm));
  EXPECT_EQ(nvm.vsl, id->mdts);
  EXPECT_EQ(nvm.wzsl, 0) << "Write Zeroes has no limit";

  std::string err;
  auto qp = ctrl_->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  auto verify = [&](uint32_t nsid, uint64_t slba, uint32_t nlb) {
    nvme::Sqe sqe{};
    sqe.opc = uint8_t(nvme::IoOpcode::Verify);
    sqe.nsid = nsid;
    sqe.cdw10 = uint32_t(slba);
    sqe.cdw11 = uint32_t(slba >> 32);
    sqe.cdw12 = nlb - 1;
    return one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->submit(sqe, nullptr, 0, false, cb, ctx); });
  };
  const uint64_t blocks2 = (64ull << 20) / 512;
  EXPECT_TRUE(verify(2, 0, 8).ok());
  EXPECT_TRUE(verify(2, blocks2 - 16, 16).ok()) << "up to the last block";
  EXPECT_TRUE(verify(3, 0, 256).ok()) << "1 MiB of 4 KiB blocks: exactly MDTS";
  EXPECT_EQ(verify(3, 0, 257), sc::InvalidField) << "beyond VSL";
  EXPECT_EQ(verify(2, blocks2 - 8, 16), sc::LbaOutOfRange);
  EXPECT_EQ(verify(99, 0, 1), sc::InvalidNamespace);
  EXPECT_FALSE(qp->failed());
}

TEST(AdminConformanceDiscovery, DiscoveryControllersHaveOnlyKeepAliveAndEventFeatures) {
  RunningTarget t;
  std::string err;
  auto disc = Controller::connect(t.trid(nvme::kDiscoveryNqn), ControllerOptions{}, err);
  ASSERT_TRUE(disc) << err;
  auto get = [&](uint8_t fid) {
    nvme::Sqe sqe{};
    sqe.opc = uint8_t(nvme::AdminOpcode::GetFeatures);
    sqe.cdw10 = fid;
    return disc->admin(sqe, nullptr, 0, false).status;
  };
  EXPECT_TRUE(get(wire::kFeatureKeepAliveTimer).ok());
  EXPECT_TRUE(get(wire::kFeatureAsyncEventConfig).ok());
  for (uint8_t fid : {wire::kFeaturePowerManagement, wire::kFeatureNumberOfQueues, wire::kFeatureWriteAtomicity,
                      wire::kFeatureHostIdentifier})
    EXPECT_EQ(get(fid), sc::InvalidField) << "feature " << int(fid);
}

}  // namespace
}  // namespace nvtcp::test::admin_conformance_test

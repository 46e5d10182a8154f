// SPDX-License-Identifier: Apache-2.0
// Asynchronous events as a host sees them on the wire: held Asynchronous Event Requests
// complete when their cause happens (a namespace's backing file resized, a device failing a
// command), once per event type until the host reads that type's log page, and only for
// the events the host enabled with feature 0Bh (errors always).
#include <fcntl.h>
#include <sys/stat.h>

#include <cstdlib>

#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"
#include "raw_session.hpp"
#include "test_devices.hpp"
#include "wire/features.hpp"

namespace nvtcp::test::async_events_test {
namespace {

constexpr uint32_t kFileNsid = 4;
constexpr uint64_t kBlock = 512;
constexpr uint32_t kNamespaceChanged = async_event_dw0(AsyncEventType::Notice, kAsyncNoticeNamespaceChanged,
                                                       LogPageId::ChangedNamespaces);

class NamespaceResize : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(make_temp_file("nvtcp-aer", 8 << 20, path_));
    target::TargetConfig cfg = default_config();
    // No size: the namespace is the whole file and follows it when it is resized.
    cfg.subsystems[0].namespaces.push_back({kFileNsid, "file", 0, path_, 512});
    t_ = std::make_unique<RunningTarget>(cfg);
  }
  void TearDown() override {
    t_.reset();
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  void resize(uint64_t bytes) { ASSERT_EQ(::truncate(path_.c_str(), off_t(bytes)), 0); }
  std::string path_;
  std::unique_ptr<RunningTarget> t_;
};

TEST_F(NamespaceResize, GrowingTheFileIsANamespaceNoticeWithItsNsidInTheChangedList) {
  AdminQueue a;
  ASSERT_NO_FATAL_FAILURE(a.open(t_->port(), "nqn.2026-11.io.nvtcp:aer-a"));
  EXPECT_EQ(a.nsze(kFileNsid), (8u << 20) / kBlock);
  ASSERT_NO_FATAL_FAILURE(a.enable_events(kAecNamespaceAttribute));
  const uint16_t aer = a.hold_aer();
  ASSERT_TRUE(a.s.c.expect_silence(300)) << "an event before any cause";

  resize(16 << 20);
  uint32_t dw0 = 0;
  ASSERT_TRUE(event_arrives(a.s, aer, dw0));
  EXPECT_EQ(dw0, kNamespaceChanged);
  EXPECT_EQ(a.nsze(kFileNsid), (16u << 20) / kBlock);
  // The list, then (read with RAE 0) an empty one.
  EXPECT_EQ(a.changed_namespaces(false), std::vector<uint32_t>{kFileNsid});
  EXPECT_TRUE(a.changed_namespaces(false).empty());
  // I/O reaches the new blocks, and not one past them.
  Session io;
  ASSERT_NO_FATAL_FAILURE(a.open_io(t_->port(), io));
  const uint64_t last = (16u << 20) / kBlock - 1;
  Cqe cqe{};
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Write, io.cid(), kFileNsid, last, 1, 512, kSglDataBlockOffset), Bytes(512, 0x5A), cqe));
  EXPECT_TRUE(ok(cqe));
  Bytes back;
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kFileNsid, last, 1, 512), {}, cqe, &back));
  EXPECT_TRUE(ok(cqe));
  EXPECT_EQ(back, Bytes(512, 0x5A));
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kFileNsid, last + 1, 1, 512), {}, cqe));
  EXPECT_TRUE(status_is(cqe, 0, sc::LbaOutOfRange.value & 0xFF));
}

TEST_F(NamespaceResize, OneNoticeUntilTheLogIsReadAndNoneWhenNotEnabled) {
  AdminQueue a, quiet;
  ASSERT_NO_FATAL_FAILURE(a.open(t_->port(), "nqn.2026-11.io.nvtcp:aer-a"));
  ASSERT_NO_FATAL_FAILURE(quiet.open(t_->port(), "nqn.2026-11.io.nvtcp:aer-quiet"));
  ASSERT_NO_FATAL_FAILURE(a.enable_events(kAecNamespaceAttribute));
  const uint16_t first = a.hold_aer(), second = a.hold_aer();
  const uint16_t never = quiet.hold_aer();

  resize(12 << 20);
  uint32_t dw0 = 0;
  ASSERT_TRUE(event_arrives(a.s, first, dw0));
  EXPECT_EQ(dw0, kNamespaceChanged);
  // Masked until the log is read: the second change is listed, not reported. RAE 1 reads
  // the list and leaves the mask on.
  resize(20 << 20);
  ASSERT_TRUE(wait_for([&] { return a.nsze(kFileNsid) == (20u << 20) / kBlock; }, kEventDueMs));
  EXPECT_TRUE(a.s.c.expect_silence(1500)) << "a second notice before the log was read";
  EXPECT_EQ(a.changed_namespaces(true), std::vector<uint32_t>{kFileNsid});
  EXPECT_TRUE(a.s.c.expect_silence(1500)) << "a notice after a read with RAE 1";
  EXPECT_EQ(a.changed_namespaces(false), std::vector<uint32_t>{kFileNsid});
  resize(24 << 20);
  ASSERT_TRUE(event_arrives(a.s, second, dw0)) << "no notice after the log was read";
  EXPECT_EQ(dw0, kNamespaceChanged);

  // The controller that did not enable notices still has the changed-namespace list, and
  // its request stays held.
  EXPECT_EQ(quiet.changed_namespaces(false), std::vector<uint32_t>{kFileNsid});
  EXPECT_TRUE(quiet.s.c.expect_silence(300)) << "a notice the host did not enable (cid " << never << ")";
}

TEST_F(NamespaceResize, AFileWithAConfiguredSizeDoesNotFollowItsFile) {
  // Namespace 4 follows its file; the 64 MiB RAM namespaces and a sized file never change.
  AdminQueue a;
  ASSERT_NO_FATAL_FAILURE(a.open(t_->port(), "nqn.2026-11.io.nvtcp:aer-a"));
  ASSERT_NO_FATAL_FAILURE(a.enable_events(kAecNamespaceAttribute));
  const uint16_t aer = a.hold_aer();
  EXPECT_TRUE(a.s.c.expect_silence(2500)) << "a notice with no namespace resized";
  EXPECT_TRUE(a.changed_namespaces(false).empty());
  (void)aer;
}

TEST(AsyncEvents, ADeviceErrorIsAnErrorEventClearedByTheErrorLog) {
  target::TargetConfig cfg = default_config();
  cfg.subsystems[0].namespaces = {{1, "ram", 1 << 20, "", 512}};
  auto factory = [](const target::NamespaceConfig& nc, std::string&) -> std::unique_ptr<backend::BlockDevice> {
    return std::make_unique<FailingReadDevice>(nc.size, nc.block_size);
  };
  RunningTarget t(cfg, factory);

  AdminQueue a;
  ASSERT_NO_FATAL_FAILURE(a.open(t.port(), kHostNqn));
  // Error events need no enabling (feature 0Bh stays 0).
  const uint16_t first = a.hold_aer(), second = a.hold_aer();

  Session io;
  ASSERT_NO_FATAL_FAILURE(a.open_io(t.port(), io));
  Cqe cqe{};
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), 1, 0, 1, 512), {}, cqe));
  EXPECT_TRUE(ok(cqe));
  EXPECT_TRUE(a.s.c.expect_silence(300)) << "an event for a read that worked";
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), 1, 7, 1, 512), {}, cqe));
    EXPECT_TRUE(status_is(cqe, uint8_t(Sct::Media), sc::UnrecoveredReadError.value & 0xFF));
  }
  uint32_t dw0 = 0;
  ASSERT_TRUE(event_arrives(a.s, first, dw0));
  EXPECT_EQ(dw0, async_event_dw0(AsyncEventType::Error, kAsyncErrorTransientInternal, LogPageId::Error));
  // Three failures, one event: the type is masked until the error log is read.
  EXPECT_TRUE(a.s.c.expect_silence(300));
  Bytes log;
  ASSERT_TRUE(a.s.command(get_log_sqe(a.s.cid(), LogPageId::Error, 64 * sizeof(ErrorLogEntry)), {}, cqe, &log));
  ASSERT_TRUE(ok(cqe));
  const auto newest = read_as<ErrorLogEntry>(log);
  EXPECT_EQ(uint64_t{newest.error_count}, 3u);  // copied: packed members may be misaligned
  EXPECT_EQ(uint16_t{newest.sqid}, 1u);
  EXPECT_EQ(uint64_t{newest.lba}, 7u);
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), 1, 7, 1, 512), {}, cqe));
  ASSERT_TRUE(event_arrives(a.s, second, dw0)) << "no event after the error log was read";
  EXPECT_EQ(dw0 & 0x7, uint32_t(AsyncEventType::Error));
}

}  // namespace
}  // namespace nvtcp::test::async_events_test

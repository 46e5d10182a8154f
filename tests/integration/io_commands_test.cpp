// SPDX-License-Identifier: Apache-2.0
// Compare (05h) and Copy (19h) as nvme-cli's `compare` and `copy` send them, on a RAM
// namespace (whose reads lend the device's memory) and a file namespace (read with O_DIRECT
// into the command's buffer), with in-capsule data and with R2Ts; and each bad form, with
// nothing written by a Copy that is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nvtcp/host.hpp"
#include "nvtcp/identify.hpp"
#include "target/controller.hpp"
#include "test_target.hpp"

namespace nvtcp::test::io_commands_test {
namespace {

namespace sc = nvme::sc;
using Bytes = std::vector<uint8_t>;

constexpr uint32_t kFileNsid = 4;  // 64 MiB, 512-byte blocks
constexpr uint32_t kBlock = 512;

class IoCommands : public ::testing::TestWithParam<uint32_t> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/nvtcp-iocmd-XXXXXX";
    const int fd = mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    ::close(fd);
    path_ = tmpl;
    t_ = std::make_unique<RunningTarget>(default_config(path_));
    std::string err;
    ctrl_ = host::Controller::connect(t_->trid(), {}, err);
    ASSERT_TRUE(ctrl_) << err;
    qp_ = ctrl_->create_io_qpair(8, err);
    ASSERT_TRUE(qp_) << err;
    buf_ = static_cast<uint8_t*>(ctrl_->alloc_io_buffer(1 << 20));
    ASSERT_TRUE(buf_);
  }
  void TearDown() override {
    qp_.reset();
    if (buf_) ctrl_->free_io_buffer(buf_);
    ctrl_.reset();
    t_.reset();
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  uint32_t nsid() const { return GetParam(); }

  nvme::Status write(uint64_t slba, const Bytes& data) {
    std::memcpy(buf_, data.data(), data.size());
    return one_command(*qp_, [&](host::CompletionFn cb, void* ctx) {
      return qp_->write(nsid(), slba, uint32_t(data.size() / kBlock), buf_, cb, ctx);
    });
  }
  Bytes read(uint64_t slba, uint32_t nlb) {
    const nvme::Status st = one_command(
        *qp_, [&](host::CompletionFn cb, void* ctx) { return qp_->read(nsid(), slba, nlb, buf_, cb, ctx); });
    EXPECT_TRUE(st.ok()) << nvme::status_name(st);
    return Bytes(buf_, buf_ + size_t(nlb) * kBlock);
  }
  nvme::Status compare(uint64_t slba, const Bytes& data) {
    nvme::Sqe sqe{};
    sqe.opc = uint8_t(nvme::IoOpcode::Compare);
    sqe.nsid = nsid();
    sqe.cdw10 = uint32_t(slba);
    sqe.cdw11 = uint32_t(slba >> 32);
    sqe.cdw12 = uint32_t(data.size() / kBlock) - 1;
    std::memcpy(buf_, data.data(), data.size());
    return one_command(*qp_, [&](host::CompletionFn cb, void* ctx) {
      return qp_->submit(sqe, buf_, uint32_t(data.size()), true, cb, ctx);
    });
  }
  // ranges: (slba, nlb) pairs, written as format 0h entries.
  nvme::Status copy(uint64_t sdlba, const std::vector<std::pair<uint64_t, uint32_t>>& ranges, uint32_t format = 0,
                    uint32_t nr_override = 0) {
    std::vector<nvme::CopySourceRange> list(ranges.size());
    for (size_t i = 0; i < ranges.size(); ++i) {
      list[i] = {};
      list[i].slba = ranges[i].first;
      list[i].nlb = uint16_t(ranges[i].second - 1);
    }
    nvme::Sqe sqe{};
    sqe.opc = uint8_t(nvme::IoOpcode::Copy);
    sqe.nsid = nsid();
    sqe.cdw10 = uint32_t(sdlba);
    sqe.cdw11 = uint32_t(sdlba >> 32);
    sqe.cdw12 = ((nr_override ? nr_override : uint32_t(ranges.size())) - 1) | format << 8;
    const uint32_t len = uint32_t(list.size() * sizeof(nvme::CopySourceRange));
    std::memcpy(buf_, list.data(), len);
    return one_command(
        *qp_, [&](host::CompletionFn cb, void* ctx) { return qp_->submit(sqe, buf_, len, true, cb, ctx); });
  }

  std::string path_;
  std::unique_ptr<RunningTarget> t_;
  std::unique_ptr<host::Controller> ctrl_;
  std::unique_ptr<host::QueuePair> qp_;
  uint8_t* buf_ = nullptr;
};

TEST_P(IoCommands, CompareSucceedsOnEqualDataAndFailsOnOneDifferentByte) {
  for (uint32_t nlb : {1u, 8u, 256u}) {  // in the capsule, and (128 KiB) through R2Ts
    SCOPED_TRACE("blocks " + std::to_string(nlb));
    const uint64_t slba = 1000 + nlb;
    const Bytes data = pattern(size_t(nlb) * kBlock, nlb);
    ASSERT_TRUE(write(slba, data).ok());
    EXPECT_TRUE(compare(slba, data).ok());
    Bytes other = data;
    other[other.size() - 1] ^= 1;
    EXPECT_EQ(compare(slba, other), sc::CompareFailure);
    EXPECT_EQ(compare(slba + 1, data), sc::CompareFailure) << "the same data one block further";
  }
  const uint64_t blocks = (64ull << 20) / kBlock;
  EXPECT_EQ(compare(blocks - 1, Bytes(2 * kBlock)), sc::LbaOutOfRange);
  EXPECT_TRUE(compare(blocks - 2, Bytes(2 * kBlock)).ok()) << "never-written blocks read as zeros";
  EXPECT_FALSE(qp_->failed());
}

TEST_P(IoCommands, CopyGathersSourceRangesAtTheDestination) {
  const Bytes a = pattern(8 * kBlock, 1), b = pattern(3 * kBlock, 2), c = pattern(256 * kBlock, 3);
  ASSERT_TRUE(write(100, a).ok());
  ASSERT_TRUE(write(300, b).ok());
  ASSERT_TRUE(write(5000, c).ok());
  ASSERT_TRUE(copy(20000, {{100, 8}, {300, 3}, {5000, 256}}).ok());
  Bytes want = a;
  want.insert(want.end(), b.begin(), b.end());
  want.insert(want.end(), c.begin(), c.end());
  EXPECT_EQ(read(20000, 8 + 3 + 256), want);
  // Overlapping source and destination: the range is read whole before it is written.
  ASSERT_TRUE(copy(102, {{100, 8}}).ok());
  EXPECT_EQ(read(102, 8), a);
  EXPECT_FALSE(qp_->failed());
}

// A range larger than one piece of a Copy's step (kCopyPieceBytes) goes through in pieces, and
// reads as if copied whole: an overlapping destination gets the source as it was.
TEST_P(IoCommands, ALargeRangeIsCopiedInPiecesAsIfWhole) {
  const uint32_t nlb = uint32_t((1u << 20) / kBlock);  // MSSRL: MDTS, 1 MiB
  ASSERT_GT(uint64_t(nlb) * kBlock, target::kCopyPieceBytes);
  const Bytes src = pattern(size_t(nlb) * kBlock, 9);
  ASSERT_TRUE(write(8000, src).ok());
  ASSERT_TRUE(copy(40000, {{8000, nlb}, {8000, 7}}).ok());
  EXPECT_EQ(read(40000, nlb), src);  // the test's buffer holds 1 MiB: two reads
  EXPECT_EQ(read(40000 + nlb, 7), Bytes(src.begin(), src.begin() + 7 * kBlock));
  ASSERT_TRUE(copy(8000 + 5, {{8000, nlb}}).ok());
  EXPECT_EQ(read(8000 + 5, nlb), src) << "a piece read what an earlier piece had written";
  EXPECT_FALSE(qp_->failed());
}

TEST_P(IoCommands, CopyThatIsRefusedWritesNothing) {
  const uint64_t blocks = (64ull << 20) / kBlock;
  const Bytes before = read(40000, 16);
  ASSERT_TRUE(write(100, pattern(8 * kBlock, 9)).ok());
  EXPECT_EQ(copy(40000, {{100, 8}, {blocks - 4, 8}}), sc::LbaOutOfRange) << "a source past the end";
  EXPECT_EQ(copy(blocks - 4, {{100, 8}}), sc::LbaOutOfRange) << "a destination past the end";
  EXPECT_EQ(copy(40000, {{100, 8}}, 1), sc::InvalidField) << "source range format 1h";
  const uint32_t mssrl = (1u << 20) / kBlock;  // MDTS, 1 MiB by default
  EXPECT_EQ(copy(40000, {{0, mssrl + 1}}), sc::CommandSizeLimitExceeded) << "a range longer than MSSRL";
  std::vector<std::pair<uint64_t, uint32_t>> many(target::kCopyMaxRanges + 1, {100, 1});
  EXPECT_EQ(copy(40000, many), sc::CommandSizeLimitExceeded) << "more ranges than MSRC allows";
  EXPECT_EQ(copy(40000, {{100, 8}, {200, 8}}, 0, 1), sc::DataSglLengthInvalid) << "two ranges sent, NR says one";
  EXPECT_EQ(read(40000, 16), before);
  EXPECT_FALSE(qp_->failed());
}

INSTANTIATE_TEST_SUITE_P(Namespaces, IoCommands, ::testing::Values(kRamNsid, kFileNsid),
                         [](const auto& p) { return p.param == kRamNsid ? "Ram" : "File"; });

TEST(IoCommandsIdentify, CompareAndCopyAreAnnouncedWithTheirLimits) {
  RunningTarget t;
  std::string err;
  auto ctrl = host::Controller::connect(t.trid(), {}, err);
  ASSERT_TRUE(ctrl) << err;
  const auto* id = reinterpret_cast<const nvme::IdentifyController*>(ctrl->identify_data());
  EXPECT_TRUE(id->oncs & nvme::kOncsCompare);
  EXPECT_TRUE(id->oncs & nvme::kOncsCopy);
  EXPECT_EQ(id->ocfs, nvme::kOcfsFormat0);
  alignas(8) uint8_t buf[nvme::kIdentifyLen];
  ASSERT_TRUE(ctrl->identify(uint8_t(nvme::Cns::Namespace), 3, buf).status.ok());  // 4 KiB blocks
  const auto* ns = reinterpret_cast<const nvme::IdentifyNamespace*>(buf);
  EXPECT_EQ(ns->msrc, target::kCopyMaxRanges - 1);
  EXPECT_EQ(ns->mssrl, (1u << 20) / 4096) << "one range is at most MDTS";
  EXPECT_EQ(ns->mcl, target::kCopyMaxRanges * ns->mssrl);
}

}  // namespace
}  // namespace nvtcp::test::io_commands_test

namespace nvtcp::test::io_commands_test {
namespace {

// A NULL namespace reads from one shared zero region, without a buffer of its own: every
// read and Verify the largest MDTS allows is served from it, and the target stays up (a
// read beyond a region shorter than MDTS once wrote through a null buffer).
TEST(IoCommandsLimits, NullReadsAndVerifiesUpToTheLargestMdtsReturnZeros) {
  target::TargetConfig cfg = default_config();
  cfg.mdts_bytes = target::kMaxMdtsBytes;
  RunningTarget t(cfg);
  std::string err;
  auto ctrl = host::Controller::connect(t.trid(), {}, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(4, err);
  ASSERT_TRUE(qp) << err;
  auto* buf = static_cast<uint8_t*>(ctrl->alloc_io_buffer(target::kMaxMdtsBytes));
  ASSERT_TRUE(buf);
  constexpr uint32_t kNullNsid = 1;
  for (uint32_t bytes : {(1u << 20) + 512, 2u << 20, target::kMaxMdtsBytes}) {
    SCOPED_TRACE("bytes " + std::to_string(bytes));
    const uint32_t nlb = bytes / kBlock;
    std::memset(buf, 0xA5, bytes);
    ASSERT_TRUE(one_command(*qp, [&](host::CompletionFn cb, void* ctx) {
                  return qp->read(kNullNsid, 7, nlb, buf, cb, ctx);
                }).ok());
    EXPECT_TRUE(std::all_of(buf, buf + bytes, [](uint8_t b) { return b == 0; })) << "a NULL read is zeros";
    nvme::Sqe verify{};
    verify.opc = uint8_t(nvme::IoOpcode::Verify);
    verify.nsid = kNullNsid;
    verify.cdw10 = 7;
    verify.cdw12 = nlb - 1;
    EXPECT_TRUE(one_command(*qp, [&](host::CompletionFn cb, void* ctx) {
                  return qp->submit(verify, nullptr, 0, false, cb, ctx);
                }).ok());
  }
  EXPECT_FALSE(qp->failed());
  ctrl->free_io_buffer(buf);
  auto other = host::Controller::connect(t.trid(), {}, err);
  EXPECT_TRUE(other) << "the target no longer serves a new host: " << err;
}

}  // namespace
}  // namespace nvtcp::test::io_commands_test

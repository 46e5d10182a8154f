// SPDX-License-Identifier: Apache-2.0
// The engine's shared region: its layout, its header, and data pointers checked against the
// application's own data region.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "shm/region.hpp"

namespace nvtcp::shm::shm_region_test {
namespace {

TEST(ShmRegion, LayoutIsAlignedAndEveryQueuePairFitsApart) {
  auto l = RegionLayout::compute(5, 1024, 3 << 20);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->queues_offset, 4096u);
  EXPECT_EQ(l->pair_bytes % 4096, 0u);
  EXPECT_GE(l->pair_bytes, sizeof(QueueWords) + 1024 * (64 + 16));
  EXPECT_EQ(l->data_offset % 4096, 0u);
  EXPECT_EQ(l->data_offset, l->queues_offset + 5 * l->pair_bytes);
  EXPECT_EQ(l->total_bytes, l->data_offset + (3u << 20));
  std::vector<uint8_t> region(l->total_bytes);
  for (uint32_t i = 0; i < 5; ++i) {
    QueueMemory m = l->queue_pair(region.data(), i);
    auto* end = reinterpret_cast<uint8_t*>(m.cq + m.cq_size);
    EXPECT_LE(end, region.data() + l->queues_offset + (i + 1) * l->pair_bytes) << "queue pair " << i;
    EXPECT_EQ((reinterpret_cast<uint8_t*>(m.words) - region.data()) % 4096, 0) << "each pair starts on a page";
  }
}

TEST(ShmRegion, OutOfRangeNumbersHaveNoLayout) {
  EXPECT_FALSE(RegionLayout::compute(0, 64, 0));
  EXPECT_FALSE(RegionLayout::compute(kMaxQueuePairs + 1, 64, 0));
  EXPECT_FALSE(RegionLayout::compute(2, 1, 0));
  EXPECT_FALSE(RegionLayout::compute(2, kMaxQueueEntries + 1, 0));
  EXPECT_FALSE(RegionLayout::compute(2, 64, std::numeric_limits<uint64_t>::max()));
  EXPECT_TRUE(RegionLayout::compute(kMaxQueuePairs, kMaxQueueEntries, 0));
}

TEST(ShmRegion, HeaderSaysWhatTheLayoutIs) {
  auto l = RegionLayout::compute(2, 32, 8192);
  ASSERT_TRUE(l);
  std::vector<uint8_t> region(l->total_bytes);
  EXPECT_FALSE(l->matches(region.data()));
  l->write_header(region.data());
  EXPECT_TRUE(l->matches(region.data()));
  auto other = RegionLayout::compute(2, 64, 8192);
  EXPECT_FALSE(other->matches(region.data())) << "an application expecting other queue sizes must notice";
}

nvme::Sqe with_sgl(uint64_t offset, uint32_t length, uint8_t type = 0x01) {
  nvme::Sqe s{};
  s.opc = uint8_t(nvme::IoOpcode::Read);
  s.flags = nvme::kSqeFlagsPsdtSgl;
  s.sgl.addr = offset;
  s.sgl.length = length;
  s.sgl.type = type;
  return s;
}

TEST(ShmRegion, DataPointersMustLieInsideTheDataRegion) {
  std::vector<uint8_t> data(1 << 20);
  const uint64_t n = data.size();
  DataSpan d = resolve_data(with_sgl(4096, 8192), data.data(), n, 8192);
  EXPECT_TRUE(d.status.ok());
  EXPECT_EQ(d.data, data.data() + 4096);
  EXPECT_EQ(d.length, 8192u);
  EXPECT_TRUE(resolve_data(with_sgl(n - 4096, 4096), data.data(), n, 4096).status.ok()) << "the last 4 KiB";
  EXPECT_EQ(resolve_data(with_sgl(n - 4095, 4096), data.data(), n, 4096).status, nvme::sc::SglOffsetInvalid);
  EXPECT_EQ(resolve_data(with_sgl(n, 1), data.data(), n, 1).status, nvme::sc::SglOffsetInvalid);
  EXPECT_EQ(resolve_data(with_sgl(~uint64_t(0) - 10, 4096), data.data(), n, 4096).status,
            nvme::sc::SglOffsetInvalid) << "offset + length wrapping around 2^64";
  EXPECT_EQ(resolve_data(with_sgl(0, 4096), data.data(), n, 8192).status, nvme::sc::DataSglLengthInvalid);
  EXPECT_EQ(resolve_data(with_sgl(0, 4096, 0x5A), data.data(), n, 4096).status, nvme::sc::SglDescriptorTypeInvalid)
      << "a transport descriptor means nothing in shared memory";
  nvme::Sqe prp = with_sgl(0, 4096);
  prp.flags = 0;  // PSDT 00b: PRPs
  EXPECT_EQ(resolve_data(prp, data.data(), n, 4096).status, nvme::sc::SglDescriptorTypeInvalid);
  EXPECT_TRUE(resolve_data(nvme::Sqe{}, data.data(), n, 0).status.ok()) << "no data, nothing to check";
}

}  // namespace
}  // namespace nvtcp::shm::shm_region_test

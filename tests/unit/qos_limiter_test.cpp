// SPDX-License-Identifier: Apache-2.0
// A namespace's rate limits (bdev_set_qos_limit) on a clock the test sets: 1 ms slices, each with
// 1/1000 of every limit; an operation goes while each budget it draws on has something left and
// takes its whole cost (a debt is paid from the next slice); reads do not draw on the write
// budget nor writes on the read one.
#include <gtest/gtest.h>

#include "target/qos.hpp"

namespace nvtcp::target::qos_limiter_test {
namespace {

constexpr uint64_t kMs = QosLimiter::kSliceNs;
constexpr uint64_t kMiB = 1 << 20;

// How many operations of `bytes` go in the slice that starts at now_ns.
int admitted_in_slice(QosLimiter& q, bool read, uint64_t bytes, uint64_t now_ns, int tries = 1000) {
  int n = 0;
  for (int i = 0; i < tries && q.admit(read, bytes, now_ns); ++i) ++n;
  return n;
}

TEST(QosLimiter, WithoutLimitsEverythingGoes) {
  QosLimiter q;
  EXPECT_FALSE(q.enabled());
  EXPECT_EQ(admitted_in_slice(q, true, 4096, 0), 1000);
}

TEST(QosLimiter, IopsAreCountedPerOneMillisecondSlice) {
  QosLimiter q;
  q.set(QosLimits{.rw_ios_per_sec = 10000});
  EXPECT_TRUE(q.enabled());
  EXPECT_EQ(admitted_in_slice(q, true, 4096, 5 * kMs), 10) << "10 000 IO/s: 10 a millisecond";
  EXPECT_EQ(admitted_in_slice(q, false, 4096, 5 * kMs + kMs / 2), 0) << "the same slice: its budget is spent";
  EXPECT_EQ(admitted_in_slice(q, false, 4096, 6 * kMs), 10) << "the next slice";
  // A thousand slices: ten thousand operations, a second's worth.
  int total = 0;
  for (uint64_t s = 10; s < 1010; ++s) total += admitted_in_slice(q, s % 2, 512, s * kMs);
  EXPECT_EQ(total, 10000);
}

// Checks come when they come (the waiters' timer of each reactor, arrivals), never exactly when
// a slice ends. A slice begun at the first check after the last one ended would last that much
// longer each time, and the limit would lose as much (3 % in a real run: bench/qos-accuracy).
// Slices keep to their grid: with a check every 300 us, a second still lets the limit through.
TEST(QosLimiter, SlicesKeepToTheirGridWhateverTimeTheChecksCome) {
  QosLimiter q;
  q.set(QosLimits{.rw_ios_per_sec = 1000});  // one a slice
  const uint64_t start = 7 * kMs + 123;
  int total = 0;
  uint64_t t = start;
  for (; t < start + 1'000 * kMs; t += 300'000) total += admitted_in_slice(q, true, 4096, t);
  EXPECT_EQ(total, 1000) << "one a slice, a thousand slices in the second (slices begun at a check: 833)";
  // A pause longer than a slice starts a new grid: no burst for the slices nobody used.
  t += 10 * kMs + 45'678;
  EXPECT_EQ(admitted_in_slice(q, true, 4096, t), 1);
  EXPECT_EQ(admitted_in_slice(q, true, 4096, t + kMs - 1), 0) << "within the new slice";
  EXPECT_EQ(admitted_in_slice(q, true, 4096, t + kMs), 1);
}

TEST(QosLimiter, AnOperationLargerThanABudgetGoesAndItsDebtIsPaidLater) {
  QosLimiter q;
  q.set(QosLimits{.rw_mbytes_per_sec = 100});  // 104 857 bytes a slice
  const uint64_t slice = 100 * kMiB / 1000;
  EXPECT_TRUE(q.admit(false, 1 * kMiB, 0)) << "a budget with something left lets a large write go";
  EXPECT_FALSE(q.admit(false, 4096, 0));
  // 1 MiB is about 10 slices' budget: the debt keeps the next ones closed.
  int waited = 0;
  uint64_t t = kMs;
  while (!q.admit(false, 4096, t)) {
    ++waited;
    t += kMs;
  }
  // Its own slice paid `slice` of it; each slice after pays as much, and one with nothing left
  // after its refill stays closed.
  EXPECT_EQ(waited, int((1 * kMiB - slice) / slice)) << "slices until the debt of one large write is paid";
}

TEST(QosLimiter, ReadAndWriteBudgetsAreApart) {
  QosLimiter q;
  q.set(QosLimits{.r_mbytes_per_sec = 8});  // reads only: 8388 bytes a slice, two 4 KiB reads and a third over
  EXPECT_EQ(admitted_in_slice(q, true, 4096, 0), 3);
  EXPECT_EQ(admitted_in_slice(q, false, 4096, 0), 1000) << "writes are not limited";
  q.set(QosLimits{.w_mbytes_per_sec = 8});
  EXPECT_EQ(admitted_in_slice(q, false, 4096, kMs), 3);
  EXPECT_EQ(admitted_in_slice(q, true, 4096, kMs), 1000) << "reads are not limited any more";
  q.set(QosLimits{});
  EXPECT_FALSE(q.enabled()) << "all limits 0: none";
  EXPECT_EQ(admitted_in_slice(q, false, 4096, kMs), 1000);
}

}  // namespace
}  // namespace nvtcp::target::qos_limiter_test

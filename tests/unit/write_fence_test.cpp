// SPDX-License-Identifier: Apache-2.0
// The namespace write fence that makes a fused Compare and Write atomic against other writes:
// writes and fused operations take turns, so neither side can starve the other.
#include <gtest/gtest.h>

#include "target/subsystem.hpp"

namespace nvtcp::target::write_fence_test {
namespace {

TEST(WriteFence, WritesStartFreelyAndAFusedOperationWaitsForThemToDrain) {
  WriteFence f;
  f.init(2);
  bool waiting = false;
  ASSERT_TRUE(f.begin_write(0, waiting));
  ASSERT_TRUE(f.begin_write(1, waiting));
  EXPECT_FALSE(waiting) << "a write that started never registers as waiting";
  ASSERT_TRUE(f.try_own());
  EXPECT_FALSE(f.drained());
  f.end_write(0);
  EXPECT_FALSE(f.drained());
  f.end_write(1);
  EXPECT_TRUE(f.drained());
  EXPECT_FALSE(f.try_own()) << "one fused operation at a time";
  f.release();
}

// Two fused operations back to back (two hosts issuing pairs in a loop) would keep the fence
// owned nearly all the time; a write held back by the first goes before the second.
TEST(WriteFence, AWriteHeldBackByOneFusedOperationGoesBeforeTheNext) {
  WriteFence f;
  f.init(1);
  ASSERT_TRUE(f.try_own());  // host 1's pair
  bool w1 = false, w2 = false;
  EXPECT_FALSE(f.begin_write(0, w1));
  EXPECT_FALSE(f.begin_write(0, w1));  // retried: still one waiter
  EXPECT_FALSE(f.begin_write(0, w2));
  EXPECT_TRUE(w1 && w2);
  EXPECT_EQ(f.writers_waiting(), 2u);
  f.release();
  EXPECT_FALSE(f.try_own()) << "host 2's pair took the fence before the writes it had held back";
  ASSERT_TRUE(f.begin_write(0, w1));
  EXPECT_FALSE(w1);
  EXPECT_FALSE(f.try_own()) << "one held-back write still waits";
  ASSERT_TRUE(f.begin_write(0, w2));
  EXPECT_EQ(f.writers_waiting(), 0u);
  ASSERT_TRUE(f.try_own()) << "the fused operation's turn once the held-back writes are in";
  EXPECT_FALSE(f.drained());
  f.end_write(0);
  f.end_write(0);
  EXPECT_TRUE(f.drained());
  // Writes that arrive now wait for this one: the fused side is not starved either.
  bool w3 = false;
  EXPECT_FALSE(f.begin_write(0, w3));
  f.release();
}

TEST(WriteFence, AWaitingWriteThatLeavesGivesUpItsTurn) {
  WriteFence f;
  f.init(1);
  ASSERT_TRUE(f.try_own());
  bool w = false;
  EXPECT_FALSE(f.begin_write(0, w));
  f.release();
  f.stop_waiting(w);  // its connection closed before the write could start
  EXPECT_FALSE(w);
  f.stop_waiting(w);  // twice is harmless
  EXPECT_EQ(f.writers_waiting(), 0u);
  EXPECT_TRUE(f.try_own());
  f.release();
}

}  // namespace
}  // namespace nvtcp::target::write_fence_test

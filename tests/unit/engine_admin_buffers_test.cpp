// SPDX-License-Identifier: Apache-2.0
// The engine's budget of admin data buffers: what fits is taken (zeroed), what does not
// waits or is refused for good, and every buffer's bytes come back when it goes.
#include <gtest/gtest.h>

#include "engine/admin_buffers.hpp"

namespace nvtcp::engine::engine_admin_buffers_test {
namespace {

TEST(EngineAdminBuffers, TheBudgetBoundsWhatIsHeldAndBuffersGiveTheirBytesBack) {
  AdminBufferPool pool(64 << 10);
  AdminBuffer a, b, c;
  ASSERT_EQ(pool.take(40 << 10, a), AdminBufferPool::Take::Taken);
  EXPECT_EQ(a.size(), 40u << 10);
  EXPECT_EQ(a.data()[0] | a.data()[a.size() - 1], 0) << "a buffer starts zeroed";
  EXPECT_EQ(pool.take(30 << 10, b), AdminBufferPool::Take::Wait) << "beyond the budget while a is held";
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.take(1, b), AdminBufferPool::Take::Taken);
  EXPECT_EQ(pool.in_use(), (40u << 10) + 4096) << "charged in whole pages";
  EXPECT_EQ(pool.take(65 << 10, c), AdminBufferPool::Take::TooLarge) << "never fits";
  AdminBuffer moved = std::move(a);
  EXPECT_EQ(pool.in_use(), (40u << 10) + 4096) << "a move gives nothing back";
  moved.reset();
  b = AdminBuffer();
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(pool.peak(), (40u << 10) + 4096);
  EXPECT_EQ(pool.take(0, c), AdminBufferPool::Take::Taken);
  EXPECT_TRUE(c.empty()) << "no data, no buffer";
}

}  // namespace
}  // namespace nvtcp::engine::engine_admin_buffers_test

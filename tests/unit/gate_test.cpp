// SPDX-License-Identifier: Apache-2.0
// Gate: work enters until the gate closes; the release runs exactly once, when the gate is
// closed and the last work has left, and may free the gate's owner.
#include "util/gate.hpp"

#include <gtest/gtest.h>

namespace gate_test {

namespace {

struct Counted {
  int released = 0;
  nvtcp::Gate gate{[](void* c) { ++static_cast<Counted*>(c)->released; }, this};
};

TEST(Gate, ClosedWithNothingInFlightReleasesAtOnce) {
  Counted c;
  EXPECT_FALSE(c.gate.closed());
  c.gate.close();
  EXPECT_TRUE(c.gate.closed());
  EXPECT_EQ(c.released, 1);
  c.gate.close();
  EXPECT_EQ(c.released, 1) << "closing twice released twice";
}

TEST(Gate, OpenGateNeverReleasesEvenWhenEmpty) {
  Counted c;
  ASSERT_TRUE(c.gate.enter());
  c.gate.leave();
  EXPECT_EQ(c.gate.inflight(), 0u);
  EXPECT_EQ(c.released, 0);
}

TEST(Gate, ClosedGateWaitsForTheLastWorkToLeave) {
  Counted c;
  ASSERT_TRUE(c.gate.enter());
  ASSERT_TRUE(c.gate.enter());
  c.gate.close();
  EXPECT_EQ(c.released, 0) << "released with work still in flight";
  EXPECT_FALSE(c.gate.enter()) << "a closed gate let new work in";
  EXPECT_EQ(c.gate.inflight(), 2u);
  c.gate.leave();
  EXPECT_EQ(c.released, 0);
  c.gate.leave();
  EXPECT_EQ(c.released, 1);
  c.gate.close();
  EXPECT_EQ(c.released, 1);
}

// The connection's use: the release deletes the owner, gate and all (ASan checks that
// nothing touches it afterwards).
struct SelfFreeing {
  int* freed;
  nvtcp::Gate gate{[](void* c) { delete static_cast<SelfFreeing*>(c); }, this};
  explicit SelfFreeing(int* f) : freed(f) {}
  ~SelfFreeing() { ++*freed; }
};

TEST(Gate, ReleaseMayFreeTheOwner) {
  int freed = 0;
  auto* now = new SelfFreeing(&freed);
  now->gate.close();
  EXPECT_EQ(freed, 1);
  auto* later = new SelfFreeing(&freed);
  ASSERT_TRUE(later->gate.enter());
  later->gate.close();
  EXPECT_EQ(freed, 1);
  later->gate.leave();
  EXPECT_EQ(freed, 2);
}

}  // namespace

}  // namespace gate_test

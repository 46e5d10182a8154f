// SPDX-License-Identifier: Apache-2.0
// DeadlineSet with a clock the test steps: each named deadline runs its own handler once it
// is due, in Id order, and never before.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "target_tcp/deadline_set.hpp"

namespace deadline_set_test {

using namespace nvtcp;
using namespace nvtcp::target;

namespace {

struct SteppedClock : reactor::Clock {
  uint64_t now = 1'000'000;
  uint64_t now_ns() const override { return now; }
};

enum class Id : uint8_t { First, Second, Periodic, kCount };

struct Owner {
  std::vector<std::string> fired;
  DeadlineSet<Owner, Id, 3>* set = nullptr;
  void on_first(uint64_t) { fired.push_back("first"); }
  void on_second(uint64_t) { fired.push_back("second"); }
  void on_periodic(uint64_t) {
    fired.push_back("periodic");
    set->arm(Id::Periodic, 100);  // handlers may arm their own deadline again
  }
};

struct DeadlineSetTest : ::testing::Test {
  reactor::Reactor reactor{64};
  SteppedClock clock;
  Owner owner;
  DeadlineSet<Owner, Id, 3> set{&owner, reactor, clock, {&Owner::on_first, &Owner::on_second, &Owner::on_periodic}};
  DeadlineSetTest() { owner.set = &set; }
  std::vector<std::string> step(uint64_t ns) {
    clock.now += ns;
    owner.fired.clear();
    set.run_due();
    return owner.fired;
  }
};

using Fired = std::vector<std::string>;

TEST_F(DeadlineSetTest, EachDeadlineRunsItsHandlerOnceWhenDue) {
  set.arm(Id::First, 300);
  set.arm(Id::Second, 100);
  EXPECT_TRUE(set.armed(Id::First));
  EXPECT_EQ(set.deadline(Id::Second), clock.now + 100);
  EXPECT_EQ(step(99), Fired{});
  EXPECT_EQ(step(1), Fired{"second"});
  EXPECT_FALSE(set.armed(Id::Second));
  EXPECT_EQ(step(199), Fired{});
  EXPECT_EQ(step(1), Fired{"first"});
  EXPECT_EQ(step(1000), Fired{});  // one-shot: nothing left
}

TEST_F(DeadlineSetTest, DeadlinesDueTogetherRunInIdOrder) {
  set.arm(Id::Second, 50);
  set.arm(Id::First, 60);
  EXPECT_EQ(step(100), (Fired{"first", "second"}));
}

TEST_F(DeadlineSetTest, CancelledAndReplacedDeadlines) {
  set.arm(Id::First, 100);
  set.cancel(Id::First);
  EXPECT_EQ(step(200), Fired{});
  set.arm(Id::Second, 100);
  set.arm_at(Id::First, set.deadline(Id::Second) + 50);  // an absolute deadline, kept as given
  set.arm(Id::Second, 500);  // arming again moves the deadline
  EXPECT_EQ(step(150), Fired{"first"});
  set.cancel_all();
  EXPECT_EQ(step(1000), Fired{});
}

TEST_F(DeadlineSetTest, PeriodicHandlerRunsEveryPeriod) {
  set.arm(Id::Periodic, 100);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(step(99), Fired{}) << i;
    EXPECT_EQ(step(1), Fired{"periodic"}) << i;
  }
}

}  // namespace

}  // namespace deadline_set_test

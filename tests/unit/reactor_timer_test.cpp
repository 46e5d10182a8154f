// SPDX-License-Identifier: Apache-2.0
// The reactor's timers: a due timer fires once, one that is not due (moved later, cancelled)
// never does, and one armed again from its own callback keeps firing. Deadlines are either
// now (due on the next turn) or an hour away (never due in a test): no timing is asserted.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "reactor/reactor.hpp"

namespace nvtcp::reactor::reactor_timer_test {
namespace {

constexpr uint64_t kHour = 3600ull * 1'000'000'000ull;

struct Counted {
  Timer timer;
  int fired = 0;
  Reactor* r = nullptr;
  uint64_t rearm_ns = 0;  // armed again from its own callback when non-zero
};

void on_fire(Timer* t) {
  auto* c = reinterpret_cast<Counted*>(t);  // timer is Counted's first member
  ++c->fired;
  if (c->rearm_ns) c->r->arm_timer(&c->timer, c->rearm_ns);
}

class ReactorTimer : public ::testing::Test {
 protected:
  Counted make() {
    Counted c;
    c.timer.fn = on_fire;
    c.r = &r_;
    return c;
  }
  void turns(int n) {
    for (int i = 0; i < n; ++i) r_.run_once(0);
  }
  // Turns until c has fired (bounded: a timer due now fires on the next turn or two).
  bool fires(const Counted& c, int at_least = 1) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (c.fired < at_least && std::chrono::steady_clock::now() < until) r_.run_once(0);
    return c.fired >= at_least;
  }
  Reactor r_{64, PollMode::Busy};
};

TEST_F(ReactorTimer, ATimerDueNowFiresOnceAndOneAnHourAwayDoesNot) {
  Counted now = make(), later = make();
  r_.arm_timer(&later.timer, kHour);
  r_.arm_timer(&now.timer, 0);
  ASSERT_TRUE(fires(now));
  turns(100);
  EXPECT_EQ(now.fired, 1);
  EXPECT_EQ(later.fired, 0);
  r_.cancel_timer(&later.timer);
}

TEST_F(ReactorTimer, ATimerMovedLaterDoesNotFireAtItsOldDeadline) {
  Counted moved = make();
  r_.arm_timer(&moved.timer, 0);
  r_.arm_timer(&moved.timer, kHour);
  turns(100);
  EXPECT_EQ(moved.fired, 0);
  // And a timer armed after that still fires.
  Counted next = make();
  r_.arm_timer(&next.timer, 0);
  EXPECT_TRUE(fires(next));
  EXPECT_EQ(moved.fired, 0);
  r_.cancel_timer(&moved.timer);
}

TEST_F(ReactorTimer, ACancelledTimerNeverFires) {
  Counted c = make(), other = make();
  r_.arm_timer(&c.timer, 0);
  r_.arm_timer(&other.timer, 0);
  r_.cancel_timer(&c.timer);
  ASSERT_TRUE(fires(other));
  turns(100);
  EXPECT_EQ(c.fired, 0);
}

TEST_F(ReactorTimer, ATimerArmedAgainFromItsCallbackKeepsFiring) {
  Counted periodic = make();
  periodic.rearm_ns = 1;  // due again at once: it must fire on later turns, not be lost
  r_.arm_timer(&periodic.timer, 0);
  EXPECT_TRUE(fires(periodic, 5));
  periodic.rearm_ns = 0;
  r_.cancel_timer(&periodic.timer);
}

TEST_F(ReactorTimer, ManyTimersEachFireWhenDue) {
  // Half due now, half an hour away, interleaved in the list: every due one fires, once.
  std::vector<Counted> all(64);
  for (size_t i = 0; i < all.size(); ++i) {
    all[i] = make();
    r_.arm_timer(&all[i].timer, i % 2 ? kHour : 0);
  }
  ASSERT_TRUE(fires(all[62]));
  turns(100);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].fired, i % 2 ? 0 : 1) << "timer " << i;
  for (auto& c : all) r_.cancel_timer(&c.timer);
}

// Many timers, armed, moved and cancelled in a scrambled order (a target holds a few per
// connection, thousands in all): the due ones fire once each, in deadline order, within one
// turn; the moved-away and cancelled ones never do.
struct Ordered {
  Timer timer;  // first member
  int id = 0;
  std::vector<int>* order = nullptr;
};

void on_ordered(Timer* t) {
  auto* o = reinterpret_cast<Ordered*>(t);
  o->order->push_back(o->id);
}

TEST_F(ReactorTimer, ThousandsOfTimersFireInDeadlineOrderAndOnlyTheDueOnes) {
  constexpr int kTimers = 3000;
  std::vector<Ordered> timers(kTimers);
  std::vector<int> order;
  std::vector<uint64_t> deadline(kTimers);
  for (int i = 0; i < kTimers; ++i) {
    timers[i].timer.fn = on_ordered;
    timers[i].id = i;
    timers[i].order = &order;
  }
  // Scrambled: timer i due i microseconds after it is armed (at most 3 ms); every third moved an hour
  // away after being armed, every seventh cancelled.
  for (int k = 0; k < kTimers; ++k) {
    const int i = int((uint64_t(k) * 7919) % kTimers);
    r_.arm_timer(&timers[i].timer, uint64_t(i) * 1000);
    deadline[i] = timers[i].timer.deadline_ns;
  }
  for (int i = 0; i < kTimers; i += 3) r_.arm_timer(&timers[i].timer, kHour);
  for (int i = 0; i < kTimers; i += 7) r_.cancel_timer(&timers[i].timer);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // every one left is due
  r_.run_once(0);
  std::vector<int> expected;
  for (int i = 0; i < kTimers; ++i)
    if (i % 3 != 0 && i % 7 != 0) expected.push_back(i);
  std::vector<int> fired = order;
  std::sort(fired.begin(), fired.end());
  EXPECT_EQ(fired, expected) << "not exactly the due ones fired";
  for (size_t k = 1; k < order.size(); ++k)
    ASSERT_LE(deadline[order[k - 1]], deadline[order[k]]) << "fired out of deadline order at " << k;
  turns(10);
  EXPECT_EQ(order.size(), expected.size()) << "a timer fired twice, or one moved away fired";
  for (int i = 0; i < kTimers; i += 3) r_.cancel_timer(&timers[i].timer);
}

}  // namespace
}  // namespace nvtcp::reactor::reactor_timer_test

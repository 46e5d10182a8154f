// SPDX-License-Identifier: Apache-2.0
// A reactor's budget of work per turn (ReactorCommands::take_turn and its line): while a light
// queue (a QD1 reader) shares the reactor with a heavy one, device operations take at most
// kTurnBytes a turn, the first of a turn whatever its size; small ones never wait; those over it
// wait in arrival order and run on later turns, the head of the line whatever the budget; queues
// all alike never wait, and the budgets linger a while after the light or the heavy one left.
// One real reactor; no clock is read but the one the test passes.
#include <gtest/gtest.h>

#include <vector>

#include "reactor/reactor.hpp"
#include "target/reactor_commands.hpp"

namespace nvtcp::target::turn_budget_test {
namespace {

using RC = ReactorCommands;
using Load = RC::Load;
constexpr uint64_t kNow = 1'000'000'000;

// A command waiting in the line: records the turn it ran in.
struct Waiter : reactor::OwnedCompletion<Waiter> {
  reactor::Reactor* r = nullptr;
  std::vector<int>* order = nullptr;
  int index = 0;
  uint64_t ran_in_turn = 0;
  Waiter() {
    owner = this;
    fn = [](reactor::Completion* c, int, uint32_t) {
      Waiter& w = *static_cast<Waiter*>(c);
      w.ran_in_turn = w.r->turn();
      w.order->push_back(w.index);
    };
  }
};

class TurnBudget : public ::testing::Test {
 protected:
  void contend() {
    set_.queue_load(Load::Idle, Load::Light, kNow);
    set_.queue_load(Load::Idle, Load::Heavy, kNow);
  }
  void wait(Waiter& w, int index, uint64_t bytes) {
    w.r = &r_;
    w.order = &order_;
    w.index = index;
    set_.wait_for_turn(r_, &w, bytes);
  }
  reactor::Reactor r_;
  RC set_;
  std::vector<int> order_;
};

TEST_F(TurnBudget, QueuesAllAlikeNeverWait) {
  for (int i = 0; i < 8; ++i) set_.queue_load(Load::Idle, Load::Heavy, kNow);  // eight hosts' large reads
  set_.queue_load(Load::Idle, Load::Medium, kNow);
  for (int i = 0; i < 16; ++i) EXPECT_TRUE(set_.take_turn(r_.turn(), kNow, 1 << 20)) << i;
  EXPECT_EQ(set_.turn_waits(), 0u);
  EXPECT_EQ(set_.send_limit()->until_ns, 0u) << "heavy queues alone have their sends limited";
  EXPECT_FALSE(set_.take_turn(r_.turn(), kNow, 1 << 20, true)) << "data moved inside the target is always budgeted";
}

TEST_F(TurnBudget, ALoadIsLightHeavyOrNeitherByItsDataOutstanding) {
  EXPECT_EQ(RC::load_of(0, 0), Load::Idle);
  EXPECT_EQ(RC::load_of(1, 4096), Load::Light);
  EXPECT_EQ(RC::load_of(2, 8192), Load::Light);
  EXPECT_EQ(RC::load_of(3, 12288), Load::Medium) << "QD3 of 4 KiB";
  EXPECT_EQ(RC::load_of(7, 28 * 1024), Load::Medium) << "QD7 of 4 KiB";
  EXPECT_EQ(RC::load_of(16, 0), Load::Heavy) << "QD16 of Verify or Write Zeroes (no data on the wire)";
  EXPECT_EQ(RC::load_of(1, 1 << 20), Load::Heavy) << "one 1 MiB read";
  EXPECT_EQ(RC::load_of(2, RC::kHeavyBytes), Load::Heavy);
}

TEST_F(TurnBudget, TheFirstOfATurnRunsWhateverItsSizeAndTheNextWaits) {
  contend();
  EXPECT_TRUE(set_.take_turn(r_.turn(), kNow, 1 << 20));
  EXPECT_FALSE(set_.take_turn(r_.turn(), kNow, 32 * 1024));
  EXPECT_EQ(set_.turn_waits(), 1u);
  EXPECT_EQ(set_.most_bytes_in_a_turn(), uint64_t(1) << 20);
}

TEST_F(TurnBudget, SmallCommandsNeverWaitButTheyCount) {
  contend();
  for (int i = 0; i < 40; ++i) EXPECT_TRUE(set_.take_turn(r_.turn(), kNow, 4096)) << i;  // 160 KiB
  EXPECT_FALSE(set_.take_turn(r_.turn(), kNow, 64 * 1024)) << "the turn's budget is spent by small commands";
  EXPECT_TRUE(set_.take_turn(r_.turn(), kNow, RC::kNeverWaitBytes)) << "a small one waited";
}

TEST_F(TurnBudget, TheLineRunsInArrivalOrderItsHeadWhateverTheBudget) {
  contend();
  ASSERT_TRUE(set_.take_turn(r_.turn(), kNow, RC::kTurnBytes));
  Waiter w[4];
  const uint64_t sizes[4] = {RC::kTurnBytes * 2, 64 * 1024, 64 * 1024, 64 * 1024};
  for (int i = 0; i < 4; ++i) {
    ASSERT_FALSE(set_.take_turn(r_.turn(), kNow, sizes[i]));
    wait(w[i], i, sizes[i]);
  }
  const uint64_t t0 = r_.turn();
  r_.run_once(0);  // the wake's no-op is submitted: the head runs, over the budget alone
  for (int i = 0; i < 10 && order_.size() < 4; ++i) r_.run_once(0);
  ASSERT_EQ(order_, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_GT(w[0].ran_in_turn, t0);
  EXPECT_GT(w[1].ran_in_turn, w[0].ran_in_turn) << "a command ran in the turn the head spent";
  EXPECT_EQ(w[2].ran_in_turn, w[1].ran_in_turn) << "two of 64 KiB fit in one turn";
  EXPECT_GT(w[3].ran_in_turn, w[2].ran_in_turn);
  EXPECT_EQ(set_.waiting_for_turn(), 0u);
}

TEST_F(TurnBudget, ANewCommandGoesBehindTheLineEvenInATurnWithRoom) {
  contend();
  ASSERT_TRUE(set_.take_turn(r_.turn(), kNow, RC::kTurnBytes));
  Waiter w;
  ASSERT_FALSE(set_.take_turn(r_.turn(), kNow, 64 * 1024));
  wait(w, 0, 64 * 1024);
  const uint64_t next = r_.turn() + 1000;  // a later turn, before the line was woken
  EXPECT_FALSE(set_.take_turn(next, kNow, 64 * 1024)) << "it overtook the line";
  EXPECT_TRUE(set_.take_turn(next, kNow, 4096)) << "a small one waited behind the line";
  for (int i = 0; i < 10 && order_.empty(); ++i) r_.run_once(0);
  EXPECT_EQ(order_.size(), 1u);
}

TEST_F(TurnBudget, ADeepQueueThatDipsIsNotLight) {
  RC::QueueLoad q;
  EXPECT_EQ(q.update(32, 32 * 4096, kNow), Load::Heavy);
  EXPECT_EQ(q.update(2, 8192, kNow + 1'000'000), Load::Heavy) << "a QD32 queue dipping to 2 counted as light";
  EXPECT_EQ(q.update(1, 4096, kNow + RC::kLoadWindowNs + 1), Load::Heavy) << "the last window's peak is forgotten";
  EXPECT_EQ(q.update(1, 4096, kNow + 2 * RC::kLoadWindowNs + 2), Load::Light) << "a queue that stays at QD1 is light";
  EXPECT_EQ(q.update(0, 0, kNow + 2 * RC::kLoadWindowNs + 3), Load::Idle);
  RC::QueueLoad reader;
  EXPECT_EQ(reader.update(1, 4096, kNow), Load::Light);
}

TEST_F(TurnBudget, TheBudgetsLingerAfterTheLastOtherQueueGoesIdle) {
  EXPECT_FALSE(set_.contended(kNow));
  contend();
  EXPECT_TRUE(set_.contended(kNow + 3'600'000'000'000ull)) << "light beside heavy: contended for as long as they are";
  EXPECT_EQ(set_.send_limit()->bytes, RC::kSendBytesPerTurn);
  set_.queue_load(Load::Light, Load::Idle, kNow + 10);  // the reader's answer is out
  EXPECT_TRUE(set_.contended(kNow + 10 + RC::kContendedLingerNs - 1));
  EXPECT_FALSE(set_.contended(kNow + 10 + RC::kContendedLingerNs));
  EXPECT_EQ(set_.send_limit()->until_ns, kNow + 10 + RC::kContendedLingerNs);
  EXPECT_TRUE(set_.take_turn(r_.turn(), kNow + 10 + RC::kContendedLingerNs, 1 << 20));
  EXPECT_TRUE(set_.take_turn(r_.turn(), kNow + 10 + RC::kContendedLingerNs, 1 << 20)) << "the budget outlived its linger";
  set_.queue_load(Load::Idle, Load::Light, kNow + 20);  // its next command
  EXPECT_TRUE(set_.contended(kNow + 3'600'000'000'000ull));
}

}  // namespace
}  // namespace nvtcp::target::turn_budget_test

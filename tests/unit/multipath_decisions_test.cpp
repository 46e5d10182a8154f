// SPDX-License-Identifier: Apache-2.0
// The host multipath decisions on values: which path a command takes under each policy and ANA
// state, which completions move a command to another path, and log 0Ch parsed from known bytes
// into the per-namespace table the data path reads.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "host/ana_table.hpp"
#include "host/path_selector.hpp"

namespace nvtcp::host::detail::multipath_decisions_test {
namespace {

using nvme::AnaState;

PathCandidate path(AnaState s, uint32_t outstanding = 0, bool usable = true) { return {usable, s, outstanding}; }

TEST(ChoosePath, RoundRobinTakesTheOptimizedPathsInTurn) {
  const PathCandidate p[] = {path(AnaState::Optimized), path(AnaState::NonOptimized), path(AnaState::Optimized)};
  uint32_t cursor = 0;
  std::vector<int> picks;
  for (int i = 0; i < 4; ++i) picks.push_back(choose_path(p, 3, PathPolicy::RoundRobin, cursor));
  EXPECT_EQ(picks, (std::vector<int>{2, 0, 2, 0}));  // never the non-optimized one while an optimized is up
}

TEST(ChoosePath, NonOptimizedOnlyWhenNoOptimizedPathIsUsable) {
  PathCandidate p[] = {path(AnaState::Optimized, 0, false), path(AnaState::NonOptimized),
                       path(AnaState::Inaccessible), path(AnaState::NonOptimized)};
  uint32_t cursor = 0;
  EXPECT_EQ(choose_path(p, 4, PathPolicy::RoundRobin, cursor), 1);
  EXPECT_EQ(choose_path(p, 4, PathPolicy::RoundRobin, cursor), 3);
  EXPECT_EQ(choose_path(p, 4, PathPolicy::RoundRobin, cursor), 1);
  p[0].usable = true;  // the optimized path is back
  EXPECT_EQ(choose_path(p, 4, PathPolicy::RoundRobin, cursor), 0);
}

TEST(ChoosePath, NoPathInAStateThatTakesIo) {
  const PathCandidate p[] = {path(AnaState::Inaccessible), path(AnaState::PersistentLoss), path(AnaState::Change),
                             path(AnaState::Optimized, 0, false)};
  uint32_t cursor = 2;
  EXPECT_EQ(choose_path(p, 4, PathPolicy::RoundRobin, cursor), -1);
  EXPECT_EQ(choose_path(p, 4, PathPolicy::QueueDepth, cursor), -1);
  EXPECT_EQ(cursor, 2u);  // unmoved
  EXPECT_EQ(choose_path(p, 0, PathPolicy::RoundRobin, cursor), -1);
}

TEST(ChoosePath, QueueDepthTakesTheLeastBusyOfTheBestStateAndBreaksTiesInTurn) {
  PathCandidate p[] = {path(AnaState::Optimized, 5), path(AnaState::Optimized, 2), path(AnaState::NonOptimized, 0),
                       path(AnaState::Optimized, 2)};
  uint32_t cursor = 0;
  EXPECT_EQ(choose_path(p, 4, PathPolicy::QueueDepth, cursor), 1);  // 2 beats 5; the idle one is non-optimized
  EXPECT_EQ(choose_path(p, 4, PathPolicy::QueueDepth, cursor), 3);  // the tie goes to the next in turn
  EXPECT_EQ(choose_path(p, 4, PathPolicy::QueueDepth, cursor), 1);
  p[0].outstanding = 0;
  EXPECT_EQ(choose_path(p, 4, PathPolicy::QueueDepth, cursor), 0);
}

TEST(FailoverStatus, PathRelatedStatusesMoveTheCommandAndNothingElseDoes) {
  EXPECT_TRUE(is_failover_status(nvme::sc::AnaInaccessible));
  EXPECT_TRUE(is_failover_status(nvme::sc::AnaPersistentLoss));
  EXPECT_TRUE(is_failover_status(nvme::sc::AnaTransition));
  EXPECT_TRUE(is_failover_status(nvme::sc::TransportError));
  EXPECT_TRUE(is_failover_status(nvme::sc::HostAbortedCommand));
  EXPECT_FALSE(is_failover_status(nvme::sc::Success));
  EXPECT_FALSE(is_failover_status(nvme::sc::LbaOutOfRange));
  EXPECT_FALSE(is_failover_status(nvme::sc::InvalidNamespace));
  EXPECT_FALSE(is_failover_status(nvme::sc::ReservationConflict));
  EXPECT_FALSE(is_failover_status(nvme::sc::UnrecoveredReadError));
  EXPECT_EQ(ana_state_of_status(nvme::sc::AnaInaccessible), AnaState::Inaccessible);
  EXPECT_EQ(ana_state_of_status(nvme::sc::AnaPersistentLoss), AnaState::PersistentLoss);
  EXPECT_EQ(ana_state_of_status(nvme::sc::AnaTransition), AnaState::Change);
  EXPECT_EQ(ana_state_of_status(nvme::sc::TransportError), AnaState::Optimized);
}

TEST(PathPolicyNames, ParseWhatTheyPrint) {
  PathPolicy p = PathPolicy::RoundRobin;
  ASSERT_TRUE(parse_path_policy("queue-depth", p));
  EXPECT_EQ(p, PathPolicy::QueueDepth);
  EXPECT_STREQ(path_policy_name(p), "queue-depth");
  ASSERT_TRUE(parse_path_policy("round-robin", p));
  EXPECT_EQ(p, PathPolicy::RoundRobin);
  EXPECT_FALSE(parse_path_policy("numa", p));
  EXPECT_EQ(p, PathPolicy::RoundRobin);
}

// Log 0Ch as the specification lays it out: CHGCNT 7, two groups; group 1 (optimized, CHGCNT 3)
// with namespaces 1 and 2, group 5 (inaccessible) with namespace 3.
std::vector<uint8_t> two_group_log() {
  const uint8_t bytes[] = {
      7, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,  // header: CHGCNT, NGRPS
      1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0,  // group 1: ANAGRPID, NNSIDS, CHGCNT
      0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  // state optimized
      1, 0, 0, 0, 2, 0, 0, 0,                         // NSIDs 1, 2
      5, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0,  // group 5
      0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  // inaccessible
      3, 0, 0, 0,                                     // NSID 3
  };
  std::vector<uint8_t> v(bytes, bytes + sizeof bytes);
  v.resize(4096);  // the rest of the read
  return v;
}

TEST(AnaLog, KnownBytesGiveEachNamespaceItsGroupsState) {
  const auto log = two_group_log();
  std::vector<uint8_t> states;
  uint32_t groups = 0;
  std::string why;
  ASSERT_TRUE(parse_ana_log(log.data(), log.size(), states, groups, why)) << why;
  EXPECT_EQ(groups, 2u);
  EXPECT_EQ(states[1], uint8_t(AnaState::Optimized));
  EXPECT_EQ(states[2], uint8_t(AnaState::Optimized));
  EXPECT_EQ(states[3], uint8_t(AnaState::Inaccessible));
  EXPECT_EQ(states[4], 0);

  AnaTable t;
  EXPECT_EQ(t.state(3), AnaState::Optimized);  // nothing reported yet
  EXPECT_FALSE(t.reported(3));
  const uint64_t g = t.generation();
  t.publish(states);
  EXPECT_EQ(t.generation(), g + 1);
  EXPECT_EQ(t.state(3), AnaState::Inaccessible);
  EXPECT_EQ(t.state(1), AnaState::Optimized);
  EXPECT_TRUE(t.reported(1));
  EXPECT_FALSE(t.reported(4));
  EXPECT_EQ(t.state(4), AnaState::Optimized);
  // A group's state in the upper bits of the byte is reserved and ignored.
  auto upper = log;
  upper[32] = 0xF2;
  ASSERT_TRUE(parse_ana_log(upper.data(), upper.size(), states, groups, why)) << why;
  EXPECT_EQ(states[1], uint8_t(AnaState::NonOptimized));
}

TEST(AnaLog, ALogThatRunsPastWhatWasReadOrNamesAReservedStateIsRefused) {
  auto log = two_group_log();
  std::vector<uint8_t> states;
  uint32_t groups = 0;
  std::string why;
  EXPECT_FALSE(parse_ana_log(log.data(), 8, states, groups, why));
  EXPECT_NE(why.find("header"), std::string::npos) << why;
  EXPECT_FALSE(parse_ana_log(log.data(), 40, states, groups, why));  // cut inside group 1's descriptor
  EXPECT_FALSE(parse_ana_log(log.data(), 52, states, groups, why));  // cut inside its NSID list
  EXPECT_NE(why.find("group 1"), std::string::npos) << why;
  auto big = log;
  big[20] = 0xFF;  // group 1 claims 65535 namespaces: 256 KiB of NSIDs, past the 4 KiB read
  big[21] = 0xFF;
  EXPECT_FALSE(parse_ana_log(big.data(), big.size(), states, groups, why));
  auto reserved = log;
  reserved[32] = 0x05;
  EXPECT_FALSE(parse_ana_log(reserved.data(), reserved.size(), states, groups, why));
  EXPECT_NE(why.find("reserved"), std::string::npos) << why;
}

}  // namespace
}  // namespace nvtcp::host::detail::multipath_decisions_test

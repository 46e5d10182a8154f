// SPDX-License-Identifier: Apache-2.0
// The kernel's send buffers shared out by source address (target_tcp/send_shares.hpp): an
// address keeps the ceiling while its budget covers it, is cut in powers of two as it opens
// more, is refused when its next share would fall under the floor, and gets its share back as
// its connections end; the target's budget cuts everyone alike; a lease sets what moved.
#include "target_tcp/send_shares.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

namespace nvtcp::target::send_shares_test {
namespace {

constexpr uint32_t KiB = 1024;

SendShares::Limits limits(uint64_t target, uint64_t address, uint32_t ceiling = 256 * KiB, uint32_t floor = 64 * KiB) {
  SendShares::Limits l;
  l.target_bytes = target;
  l.address_bytes = address;
  l.ceiling_bytes = ceiling;
  l.floor_bytes = floor;
  return l;
}

std::vector<SendShares::Lease> admit_n(SendShares& s, const std::string& addr, int n) {
  std::vector<SendShares::Lease> out;
  for (int i = 0; i < n; ++i) {
    auto a = s.admit(addr, -1);
    EXPECT_TRUE(a.lease) << addr << " connection " << i + 1 << " refused";
    out.push_back(std::move(a.lease));
  }
  return out;
}

TEST(SendShares, AnAddressIsCutInPowersOfTwoThenRefusedAndOthersKeepTheCeiling) {
  SendShares s(limits(0, 1024 * KiB));
  auto first = admit_n(s, "10.0.0.2", 4);
  EXPECT_EQ(s.share_of("10.0.0.2"), 256 * KiB) << "four fit at the ceiling";
  auto a5 = s.admit("10.0.0.2", -1);
  ASSERT_TRUE(a5.lease);
  EXPECT_EQ(a5.share, 128 * KiB) << "1 MiB / 5 rounds down to 128 KiB";
  EXPECT_NE(a5.log.find("cut to 128 KiB"), std::string::npos) << a5.log;
  auto more = admit_n(s, "10.0.0.2", 3);  // 8: 128 KiB each
  EXPECT_EQ(s.share_of("10.0.0.2"), 128 * KiB);
  auto a9 = s.admit("10.0.0.2", -1);
  EXPECT_EQ(a9.share, 64 * KiB);
  EXPECT_TRUE(a9.log.empty()) << "slowed is said once: " << a9.log;
  auto rest = admit_n(s, "10.0.0.2", 7);  // 16: the floor
  EXPECT_EQ(s.connections_of("10.0.0.2"), 16u);
  auto refused = s.admit("10.0.0.2", -1);
  EXPECT_FALSE(refused.lease);
  EXPECT_EQ(refused.refused, SendShares::Refusal::AddressShare);
  EXPECT_NE(refused.log.find("refused"), std::string::npos);
  auto again = s.admit("10.0.0.2", -1);
  EXPECT_FALSE(again.lease);
  EXPECT_TRUE(again.log.empty()) << "refusing is said once";
  EXPECT_EQ(s.refused(), 2u);
  EXPECT_EQ(s.connections_of("10.0.0.2"), 16u);
  // Another address is not touched by the first's crowd.
  auto other = s.admit("10.0.0.3", -1);
  ASSERT_TRUE(other.lease);
  EXPECT_EQ(other.share, 256 * KiB);
  EXPECT_TRUE(other.log.empty());
  // Connections end: the share comes back.
  rest.clear();
  a9.lease = {};
  EXPECT_EQ(s.connections_of("10.0.0.2"), 8u);
  EXPECT_EQ(s.share_of("10.0.0.2"), 128 * KiB);
  more.clear();
  a5.lease = {};
  EXPECT_EQ(s.share_of("10.0.0.2"), 256 * KiB);
  first.clear();
  EXPECT_EQ(s.connections_of("10.0.0.2"), 0u);
  EXPECT_EQ(s.connections(), 1u);
  // Under the level where it was refused, refusing is said again.
  auto crowd = admit_n(s, "10.0.0.2", 16);
  auto refused_again = s.admit("10.0.0.2", -1);
  EXPECT_FALSE(refused_again.lease);
  EXPECT_FALSE(refused_again.log.empty());
}

TEST(SendShares, TheTargetsBudgetCutsEveryAddressAlike) {
  SendShares s(limits(2048 * KiB, 0));
  auto a = admit_n(s, "10.0.0.2", 4);
  auto b = admit_n(s, "10.0.0.3", 4);
  EXPECT_EQ(s.share_of("10.0.0.2"), 256 * KiB);
  EXPECT_EQ(s.share_of("10.0.0.3"), 256 * KiB);
  auto c = s.admit("10.0.0.4", -1);  // nine: 2 MiB / 9 -> 128 KiB for all
  ASSERT_TRUE(c.lease);
  EXPECT_EQ(c.share, 128 * KiB);
  EXPECT_EQ(s.share_of("10.0.0.2"), 128 * KiB);
  EXPECT_EQ(s.share_of("10.0.0.3"), 128 * KiB);
  // The target's budget never refuses (max_connections does): it stops at the floor.
  auto many = admit_n(s, "10.0.0.5", 40);
  EXPECT_EQ(s.share_of("10.0.0.2"), 64 * KiB);
  many.clear();
  c.lease = {};
  EXPECT_EQ(s.share_of("10.0.0.2"), 256 * KiB);
}

TEST(SendShares, MaxConnectionsPerAddressRefusesFirst) {
  auto l = limits(0, 0);
  l.max_per_address = 2;
  SendShares s(l);
  auto a = admit_n(s, "10.0.0.2", 2);
  auto r = s.admit("10.0.0.2", -1);
  EXPECT_FALSE(r.lease);
  EXPECT_EQ(r.refused, SendShares::Refusal::PerAddressLimit);
  EXPECT_NE(r.log.find("max_connections_per_address"), std::string::npos) << r.log;
  a.pop_back();
  EXPECT_TRUE(s.admit("10.0.0.2", -1).lease);
}

TEST(SendShares, AutotunedConnectionsAreLeftAloneUntilABudgetBinds) {
  auto l = limits(0, 4096 * KiB, 0);
  l.autotuned_up_to = 2048 * KiB;  // what autotuning reaches
  SendShares s(l);
  auto a = admit_n(s, "10.0.0.2", 2);
  EXPECT_EQ(s.share_of("10.0.0.2"), SendShares::kAutotuned) << "2 MiB each: nothing set, the kernel autotunes";
  auto b = s.admit("10.0.0.2", -1);
  EXPECT_EQ(b.share, 1024 * KiB) << "three: each fixed at its share";
  EXPECT_FALSE(b.log.empty());
}

// A lease sets SO_SNDBUF on its socket when its address's share moved, and only then.
TEST(SendShares, ALeaseSetsTheSocketsSendBufferWhenItsShareMoved) {
  SendShares s(limits(0, 512 * KiB));
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  auto sndbuf = [&] {
    int v = 0;
    socklen_t len = sizeof(v);
    ::getsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &v, &len);
    return v;
  };
  auto first = s.admit("10.0.0.2", sv[0]);
  ASSERT_TRUE(first.lease);
  EXPECT_EQ(first.share, 256 * KiB);
  EXPECT_FALSE(first.lease.apply()) << "nothing moved since accept";
  auto others = admit_n(s, "10.0.0.2", 3);  // four: 128 KiB each
  EXPECT_TRUE(first.lease.apply());
  EXPECT_EQ(sndbuf(), int(2 * 128 * KiB)) << "the kernel reports twice what is set";
  EXPECT_FALSE(first.lease.apply());
  others.clear();
  EXPECT_TRUE(first.lease.apply());
  EXPECT_EQ(sndbuf(), int(2 * 256 * KiB));
  ::close(sv[0]);
  ::close(sv[1]);
}

// When a crowd has gone (half of the peak, and at least kManyGone connections), the target is told
// once, so that the allocator gives the crowd's memory back; a few coming and going never tell it.
TEST(SendShares, ACrowdThatLeftIsToldOnceAndAFewNever) {
  SendShares s(limits(0, 0));
  int told = 0;
  s.on_many_gone([&] { ++told; });
  auto few = admit_n(s, "10.0.0.2", 10);
  few.resize(4);
  EXPECT_EQ(told, 0);
  auto crowd = admit_n(s, "10.0.0.3", 596);  // 600 in all
  crowd.resize(400);                          // 404 left: not half yet
  EXPECT_EQ(told, 0);
  crowd.resize(296);  // 300: half of the peak, 300 gone
  EXPECT_EQ(told, 1);
  crowd.clear();  // 4 left: 296 more gone, from a new peak of 300, and under half of it
  EXPECT_EQ(told, 2);
  few.clear();
  EXPECT_EQ(told, 2) << "four more gone is not a crowd";
}

}  // namespace
}  // namespace nvtcp::target::send_shares_test

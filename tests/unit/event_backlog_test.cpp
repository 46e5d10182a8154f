// SPDX-License-Identifier: Apache-2.0
// The bounds on what a controller's asynchronous events cost the host: the backlog keeps each
// event once and at most a fixed number, and a flood of one event logs a handful of lines.
#include <gtest/gtest.h>

#include <cstdint>

#include "host/event_backlog.hpp"

namespace nvtcp::host::detail::event_backlog_test {
namespace {

// dw0 of an AER completion: type, information, log page.
constexpr uint32_t event(uint8_t type, uint8_t info, uint8_t lid) {
  return uint32_t(type) | (uint32_t(info) << 8) | (uint32_t(lid) << 16);
}

TEST(EventBacklog, AnEventWaitingIsNotQueuedTwice) {
  EventBacklog b;
  EXPECT_EQ(b.push(event(0, 1, 0x01)), EventBacklog::Push::Queued);
  EXPECT_EQ(b.push(event(1, 0, 0x02)), EventBacklog::Push::Queued);
  for (int i = 0; i < 100000; ++i) EXPECT_EQ(b.push(event(0, 1, 0x01)), EventBacklog::Push::Coalesced);
  EXPECT_EQ(b.size(), 2u);
  uint32_t dw0 = 0;
  ASSERT_TRUE(b.pop(dw0));
  EXPECT_EQ(dw0, event(0, 1, 0x01));  // oldest first
  ASSERT_TRUE(b.pop(dw0));
  EXPECT_EQ(dw0, event(1, 0, 0x02));
  EXPECT_FALSE(b.pop(dw0));
  // Once handled, the same event is queued again when reported again.
  EXPECT_EQ(b.push(event(0, 1, 0x01)), EventBacklog::Push::Queued);
}

TEST(EventBacklog, BitsOutsideTypeInformationAndLogPageDoNotMakeAnotherEvent) {
  EventBacklog b;
  EXPECT_EQ(b.push(event(0, 1, 0x01) | 0xFF000000u), EventBacklog::Push::Queued);
  EXPECT_EQ(b.push(event(0, 1, 0x01) | 0x000000F8u), EventBacklog::Push::Coalesced);
}

TEST(EventBacklog, DifferentEventsPastTheCapacityAreCountedNotKept) {
  EventBacklog b;
  for (uint32_t i = 0; i < EventBacklog::kCapacity; ++i)
    EXPECT_EQ(b.push(event(7, uint8_t(i), 0xC0)), EventBacklog::Push::Queued);
  for (uint32_t i = 0; i < 1000; ++i) EXPECT_EQ(b.push(event(7, uint8_t(i % 200 + 50), 0xC1)), EventBacklog::Push::Dropped);
  EXPECT_EQ(b.size(), EventBacklog::kCapacity);
  EXPECT_EQ(b.dropped(), 1000u);
  // The ring wraps: pop some, push others, order kept.
  uint32_t dw0 = 0;
  ASSERT_TRUE(b.pop(dw0));
  EXPECT_EQ(dw0, event(7, 0, 0xC0));
  EXPECT_EQ(b.push(event(2, 0, 0x03)), EventBacklog::Push::Queued);
  for (uint32_t i = 1; i < EventBacklog::kCapacity; ++i) {
    ASSERT_TRUE(b.pop(dw0));
    EXPECT_EQ(dw0, event(7, uint8_t(i), 0xC0));
  }
  ASSERT_TRUE(b.pop(dw0));
  EXPECT_EQ(dw0, event(2, 0, 0x03));
  EXPECT_TRUE(b.empty());
}

TEST(EventLogLimiter, AFloodLogsAtPowersOfTwo) {
  EventLogLimiter l;
  const uint32_t e = event(0, 1, 0x01);
  int lines = 0;
  uint64_t last = 0;
  for (uint64_t i = 1; i <= 100000; ++i) {
    const uint64_t n = l.note(e, i * 1000);  // a microsecond apart
    if (n) {
      ++lines;
      EXPECT_EQ(n, i);
      last = n;
    }
  }
  EXPECT_EQ(lines, 17);  // 1, 2, 4, ..., 65536
  EXPECT_EQ(last, 65536u);
}

TEST(EventLogLimiter, AnEventAfterAQuietSpellIsLoggedAgain) {
  EventLogLimiter l;
  const uint32_t e = event(1, 0, 0x02);
  uint64_t now = 0;
  EXPECT_EQ(l.note(e, now), 1u);
  EXPECT_EQ(l.note(e, now += 1), 2u);
  EXPECT_EQ(l.note(e, now += 1), 0u);  // the 3rd
  now += EventLogLimiter::kQuietNs;
  EXPECT_EQ(l.note(e, now), 1u);  // counting starts again
  EXPECT_EQ(l.note(e, now + EventLogLimiter::kQuietNs - 1), 2u);
}

TEST(EventLogLimiter, EventsAreCountedApartAndANewOneTakesTheOldestPlace) {
  EventLogLimiter l;
  uint64_t now = 0;
  for (uint32_t i = 0; i < EventLogLimiter::kTracked; ++i) EXPECT_EQ(l.note(event(7, uint8_t(i), 0xC0), ++now), 1u);
  EXPECT_EQ(l.note(event(7, 1, 0xC0), ++now), 2u);
  // A new event: the oldest (information 0) makes room; information 1 keeps its count.
  EXPECT_EQ(l.note(event(7, 99, 0xC0), ++now), 1u);
  EXPECT_EQ(l.note(event(7, 1, 0xC0), ++now), 0u);   // its 3rd
  EXPECT_EQ(l.note(event(7, 1, 0xC0), ++now), 4u);
  EXPECT_EQ(l.note(event(7, 0, 0xC0), ++now), 1u);   // forgotten, so counted from 1
}

}  // namespace
}  // namespace nvtcp::host::detail::event_backlog_test

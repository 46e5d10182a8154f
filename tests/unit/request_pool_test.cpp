// SPDX-License-Identifier: Apache-2.0
// RequestPool without a socket: requests, their transport states and the memory budgets
// (QueueMemory) behind them.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "target_tcp/request_pool.hpp"
#include "util/state_machine.hpp"

namespace request_pool_test {

using namespace nvtcp;
using namespace nvtcp::target;
using S = TcpRequest::State;

namespace {

void no_send_done(reactor::SendDone*) {}

struct PoolTest : ::testing::Test {
  TargetConfig cfg;
  ResourceUsage usage;
  PoolTest() {
    cfg.max_buffer_memory = 1 << 20;
    cfg.max_connection_buffer_memory = 256 << 10;
    cfg.max_host_buffer_memory = 512 << 10;
  }
};

// Drives a fresh request to Executing along the shortest legal path, as a read would go.
void to_executing(RequestPool& pool, TcpRequest* r) {
  pool.set_state(r, S::NeedBuffer);
  pool.set_state(r, S::Executing);
}

// ... and on to Sending.
TcpRequest* sent_request(RequestPool& pool) {
  TcpRequest* r = pool.alloc();
  if (!r) return nullptr;
  to_executing(pool, r);
  pool.set_state(r, S::Sending);
  return r;
}

}  // namespace

TEST_F(PoolTest, AllocatesEveryRequestOnceThenRunsOut) {
  QueueMemory memory(cfg, usage, sizeof(TcpRequest));
  RequestPool pool(memory, nullptr, no_send_done);
  pool.resize(3);
  EXPECT_EQ(pool.size(), 3u);
  EXPECT_EQ(pool.count(S::Free), 3u);
  TcpRequest* a = pool.alloc();
  TcpRequest* b = pool.alloc();
  TcpRequest* c = pool.alloc();
  ASSERT_TRUE(a && b && c);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_NE(a, c);
  EXPECT_EQ(pool.alloc(), nullptr);  // the queue depth is the limit
  EXPECT_EQ(a->state(), S::ReceivingCapsule);
  EXPECT_EQ(pool.count(S::ReceivingCapsule), 3u);
  EXPECT_EQ(pool.count(S::Free), 0u);
  // Each request knows its slot: the transfer tag its R2Ts carry.
  for (uint32_t i = 0; i < pool.size(); ++i) EXPECT_EQ(pool.at(i)->index, i);
}

TEST_F(PoolTest, ReleaseReturnsARequestToTheFreeList) {
  QueueMemory memory(cfg, usage, sizeof(TcpRequest));
  RequestPool pool(memory, nullptr, no_send_done);
  pool.resize(1);
  TcpRequest* r = sent_request(pool);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(pool.alloc(), nullptr);
  EXPECT_EQ(pool.count(S::Sending), 1u);
  pool.release(r, false);
  EXPECT_EQ(r->state(), S::Free);
  EXPECT_EQ(pool.count(S::Free), 1u);
  EXPECT_EQ(pool.count(S::Sending), 0u);
  EXPECT_EQ(pool.alloc(), r);
}

TEST_F(PoolTest, CountsFollowEveryStateAndSumToThePoolSize) {
  QueueMemory memory(cfg, usage, sizeof(TcpRequest));
  RequestPool pool(memory, nullptr, no_send_done);
  pool.resize(TcpRequest::kStateCount);
  // One request in each state, each reached along a legal path.
  std::vector<TcpRequest*> in(TcpRequest::kStateCount, nullptr);
  auto take = [&](S s) {
    TcpRequest* r = pool.alloc();
    in[size_t(s)] = r;
    return r;
  };
  take(S::ReceivingCapsule);
  pool.set_state(take(S::Queued), S::Queued);
  pool.set_state(take(S::NeedBuffer), S::NeedBuffer);
  TcpRequest* write = take(S::AwaitingH2C);
  pool.set_state(write, S::NeedBuffer);
  pool.set_state(write, S::AwaitingH2C);  // an R2T is outstanding
  to_executing(pool, take(S::Executing));
  to_executing(pool, take(S::Sending));
  pool.set_state(in[size_t(S::Sending)], S::Sending);
  // The one request left is Free: it was never taken.
  for (uint32_t i = 0; i < pool.size(); ++i)
    if (std::find(in.begin(), in.end(), pool.at(i)) == in.end()) in[size_t(S::Free)] = pool.at(i);
  for (size_t s = 0; s < TcpRequest::kStateCount; ++s) {
    EXPECT_EQ(pool.count(S(s)), 1u) << request_state_name(S(s));
    ASSERT_NE(in[s], nullptr) << request_state_name(S(s));
    EXPECT_EQ(in[s]->state(), S(s));
  }
  uint32_t sum = 0;
  for (uint32_t n : pool.counts()) sum += n;
  EXPECT_EQ(sum, pool.size());

  // Every one of them back to Free, along legal paths.
  pool.set_state(in[size_t(S::AwaitingH2C)], S::Executing);
  pool.set_state(in[size_t(S::NeedBuffer)], S::Executing);
  for (size_t s = 0; s < TcpRequest::kStateCount; ++s) {
    TcpRequest* r = in[s];
    if (r->state() == S::Free || r->state() == S::Sending) continue;
    pool.set_state(r, S::Sending);  // a bad capsule, a failed parse or a held command: answered
  }
  for (TcpRequest* r : in)
    if (r->state() == S::Sending) pool.release(r, false);
  EXPECT_EQ(pool.count(S::Free), pool.size());
}

TEST(RequestTransitions, TableAllowsExactlyTheDocumentedMoves) {
  auto legal = [](S from, S to) { return kRequestTransitions.allows(from, to); };
  int n = 0;
  for (size_t from = 0; from < TcpRequest::kStateCount; ++from)
    for (size_t to = 0; to < TcpRequest::kStateCount; ++to) n += legal(S(from), S(to));
  EXPECT_EQ(n, 18);  // the moves listed in kRequestTransitions
  EXPECT_TRUE(legal(S::Free, S::ReceivingCapsule));
  EXPECT_TRUE(legal(S::ReceivingCapsule, S::NeedBuffer));
  EXPECT_TRUE(legal(S::ReceivingCapsule, S::Sending));
  EXPECT_TRUE(legal(S::NeedBuffer, S::AwaitingH2C));
  EXPECT_TRUE(legal(S::AwaitingH2C, S::Executing));
  EXPECT_TRUE(legal(S::Executing, S::NeedBuffer));
  EXPECT_TRUE(legal(S::Executing, S::Sending));
  EXPECT_TRUE(legal(S::Queued, S::Sending));
  EXPECT_TRUE(legal(S::Sending, S::Free));
  // A request is never reused before its response has left, nor answered twice, nor run
  // before its data is in.
  EXPECT_FALSE(legal(S::Executing, S::Free));
  EXPECT_FALSE(legal(S::Sending, S::Sending));
  EXPECT_FALSE(legal(S::Free, S::Sending));
  EXPECT_FALSE(legal(S::Free, S::Executing));
  // A request held back runs in its turn, and only from the wait list.
  EXPECT_FALSE(legal(S::Executing, S::Queued));
  EXPECT_FALSE(legal(S::AwaitingH2C, S::Queued));
  for (size_t s = 0; s < TcpRequest::kStateCount; ++s) EXPECT_FALSE(legal(S(s), S(s))) << request_state_name(S(s));
}

TEST_F(PoolTest, IllegalTransitionAborts) {
  if (!NVTCP_STATE_CHECKS) GTEST_SKIP() << "state checks are compiled out of this build";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  QueueMemory memory(cfg, usage, sizeof(TcpRequest));
  RequestPool pool(memory, nullptr, no_send_done);
  pool.resize(1);
  TcpRequest* r = pool.alloc();
  EXPECT_DEATH(pool.set_state(r, S::Free), "illegal request transition ReceivingCapsule -> Free in RequestPool::set_state");
}

TEST_F(PoolTest, BuffersAreAlignedCountedAndReused) {
  QueueMemory memory(cfg, usage, sizeof(TcpRequest));
  RequestPool pool(memory, nullptr, no_send_done);
  pool.resize(2);
  TcpRequest* r = pool.alloc();
  ASSERT_EQ(pool.ensure_buffer(r, 5000, true), RequestPool::BufferResult::Ok);
  EXPECT_EQ(r->buf_cap, 8192u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r->buf) % 4096, 0u);
  EXPECT_EQ(memory.buffer_bytes(), 8192u);
  EXPECT_EQ(usage.buffer_bytes.load(), 8192u);
  uint8_t* first = r->buf;
  EXPECT_EQ(pool.ensure_buffer(r, 4096, true), RequestPool::BufferResult::Ok);  // fits: no new buffer
  EXPECT_EQ(r->buf, first);
  sent_request(pool);  // the other slot, to be released without a buffer
  to_executing(pool, r);
  pool.set_state(r, S::Sending);
  pool.release(r, false);  // under half the budget: the buffer stays for the next command
  EXPECT_EQ(r->buf_cap, 8192u);
  EXPECT_EQ(memory.buffer_bytes(), 8192u);
}

// A buffer of 128 KiB or more is a mapping of its own, so that freeing it gives the memory back
// to the system (the target leaves glibc's own threshold alone: librbd's messenger in the same
// process relies on it). msync fails with ENOMEM on a range that is not mapped.
TEST_F(PoolTest, LargeBuffersAreMappingsOfTheirOwnAndGoBackWhenFreed) {
  // As any library in the process may do: a large block freed raises glibc's threshold, so that
  // later blocks below it come from its heap and stay with the process when freed.
  void* raise = std::malloc(4 << 20);
  static_cast<volatile char*>(raise)[0] = 1;
  std::free(raise);
  QueueMemory memory(cfg, usage, sizeof(TcpRequest));
  RequestPool pool(memory, nullptr, no_send_done);
  pool.resize(1);
  TcpRequest* r = pool.alloc();
  ASSERT_EQ(pool.ensure_buffer(r, 64 << 10, true), RequestPool::BufferResult::Ok);
  ASSERT_EQ(pool.ensure_buffer(r, 200 << 10, true), RequestPool::BufferResult::Ok);  // grows: 200 KiB, mapped
  EXPECT_EQ(r->buf_cap, 200u << 10);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r->buf) % 4096, 0u);
  r->buf[0] = 1;
  r->buf[r->buf_cap - 1] = 2;
  uint8_t* big = r->buf;
  const size_t len = r->buf_cap;
  EXPECT_EQ(::msync(big, len, MS_ASYNC), 0) << "mapped while the request holds it";
  pool.free_buffer(r);
  errno = 0;
  EXPECT_EQ(::msync(big, len, MS_ASYNC), -1);
  EXPECT_EQ(errno, ENOMEM) << "a freed large buffer stays mapped";
  EXPECT_EQ(memory.buffer_bytes(), 0u);
}

TEST_F(PoolTest, ConnectionBudgetExhaustionWaitsUntilIdleBuffersAreReclaimed) {
  QueueMemory memory(cfg, usage, sizeof(TcpRequest));
  RequestPool pool(memory, nullptr, no_send_done);
  pool.resize(2);
  TcpRequest* a = pool.alloc();
  TcpRequest* b = pool.alloc();
  ASSERT_EQ(pool.ensure_buffer(a, 200 << 10, true), RequestPool::BufferResult::Ok);
  // 200 KiB + 100 KiB is over the 256 KiB a connection may hold, and nothing idle to give back.
  EXPECT_EQ(pool.ensure_buffer(b, 100 << 10, true), RequestPool::BufferResult::Wait);
  EXPECT_EQ(b->buf_cap, 0u);
  EXPECT_EQ(usage.buffer_bytes.load(), 200u << 10);
  // a finishes and idles with its buffer; b's next try takes it back from the free list.
  to_executing(pool, a);
  pool.set_state(a, S::Sending);
  pool.release(a, false);
  EXPECT_EQ(a->buf_cap, 200u << 10);
  EXPECT_EQ(pool.ensure_buffer(b, 100 << 10, true), RequestPool::BufferResult::Ok);
  EXPECT_EQ(a->buf_cap, 0u);
  EXPECT_EQ(memory.buffer_bytes(), 100u << 10);
  EXPECT_EQ(usage.buffer_bytes.load(), 100u << 10);
}

TEST_F(PoolTest, IoQueuesLeaveTheAdminReserve) {
  cfg.max_connection_buffer_memory = 0;
  cfg.max_host_buffer_memory = 0;
  QueueMemory memory(cfg, usage, sizeof(TcpRequest));
  RequestPool pool(memory, nullptr, no_send_done);
  pool.resize(2);
  TcpRequest* io = pool.alloc();
  TcpRequest* admin = pool.alloc();
  const uint64_t reserve = admin_buffer_reserve(cfg);
  ASSERT_EQ(pool.ensure_buffer(io, uint32_t(cfg.max_buffer_memory - reserve), true), RequestPool::BufferResult::Ok);
  // What is left is the reserve: a command on an I/O queue may not take it, one on an admin
  // queue may.
  EXPECT_EQ(pool.ensure_buffer(admin, 4096, true), RequestPool::BufferResult::Wait);
  EXPECT_EQ(pool.ensure_buffer(admin, uint32_t(reserve), false), RequestPool::BufferResult::Ok);
  EXPECT_EQ(usage.buffer_bytes.load(), cfg.max_buffer_memory);
}

TEST_F(PoolTest, ReleaseFreesBuffersForAdminQueuesAndOverHalfTheBudget) {
  cfg.max_connection_buffer_memory = 0;
  QueueMemory memory(cfg, usage, sizeof(TcpRequest));
  RequestPool pool(memory, nullptr, no_send_done);
  pool.resize(2);
  TcpRequest* r = sent_request(pool);
  ASSERT_EQ(pool.ensure_buffer(r, 4096, false), RequestPool::BufferResult::Ok);
  pool.release(r, true);  // an admin command's buffer goes back at once
  EXPECT_EQ(r->buf_cap, 0u);
  EXPECT_EQ(usage.buffer_bytes.load(), 0u);

  TcpRequest* big = sent_request(pool);
  ASSERT_EQ(pool.ensure_buffer(big, 600 << 10, false), RequestPool::BufferResult::Ok);  // over half of 1 MiB
  pool.release(big, false);
  EXPECT_EQ(big->buf_cap, 0u);
  EXPECT_EQ(memory.buffer_bytes(), 0u);
}

TEST_F(PoolTest, HostBudgetBoundsAllItsConnectionsAndDestructionGivesEverythingBack) {
  HostBudget host;
  cfg.max_connection_buffer_memory = 0;
  {
    QueueMemory memory(cfg, usage, sizeof(TcpRequest));
    RequestPool pool(memory, nullptr, no_send_done);
    pool.resize(2);
    TcpRequest* before_connect = pool.alloc();
    ASSERT_EQ(pool.ensure_buffer(before_connect, 8192, false), RequestPool::BufferResult::Ok);
    // Connect: the pool itself is reserved, then the host owns what the pool holds.
    const uint64_t pool_bytes = 2 * sizeof(TcpRequest);
    ASSERT_TRUE(memory.reserve_budgets(&host, pool_bytes, cfg.max_buffer_memory));
    memory.attach_host(&host, pool_bytes);
    EXPECT_EQ(host.bytes.load(), 8192 + pool_bytes);
    EXPECT_EQ(memory.pool_bytes(), pool_bytes);
    // Another connection of the same host has taken most of its budget.
    const uint64_t others = cfg.max_host_buffer_memory - host.bytes.load() - 4096;
    ASSERT_TRUE(host.reserve(others, cfg.max_host_buffer_memory));
    TcpRequest* r = pool.alloc();
    EXPECT_EQ(pool.ensure_buffer(r, 8192, true), RequestPool::BufferResult::Wait);
    EXPECT_EQ(pool.ensure_buffer(r, 4096, true), RequestPool::BufferResult::Ok);
    host.release(others);
  }
  EXPECT_EQ(host.bytes.load(), 0u);
  EXPECT_EQ(usage.buffer_bytes.load(), 0u);
}

}  // namespace request_pool_test

// RequestPool without a socket: requests, their states and the memory budgets behind them.
#include <gtest/gtest.h>

#include <cstdint>

#include "target/request_pool.hpp"
#include "util/state_machine.hpp"

using namespace nvtcp;
using namespace nvtcp::target;
using S = Request::State;

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

// Drives a fresh request to Sending along the shortest legal path, as a read would go.
Request* sent_request(RequestPool& pool) {
  Request* r = pool.alloc();
  if (!r) return nullptr;
  pool.set_state(r, S::Executing);
  pool.set_state(r, S::Sending);
  return r;
}

}  // namespace

TEST_F(PoolTest, AllocatesEveryRequestOnceThenRunsOut) {
  RequestPool pool(cfg, usage, nullptr, no_send_done);
  pool.resize(3);
  EXPECT_EQ(pool.size(), 3u);
  EXPECT_EQ(pool.count(S::Free), 3u);
  Request* a = pool.alloc();
  Request* b = pool.alloc();
  Request* c = pool.alloc();
  ASSERT_TRUE(a && b && c);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_NE(a, c);
  EXPECT_EQ(pool.alloc(), nullptr);  // the queue depth is the limit
  EXPECT_EQ(a->state(), S::ReceivingData);
  EXPECT_EQ(pool.count(S::ReceivingData), 3u);
  EXPECT_EQ(pool.count(S::Free), 0u);
  // Each request knows its slot: the transfer tag its R2Ts carry.
  for (uint32_t i = 0; i < pool.size(); ++i) EXPECT_EQ(pool.at(i)->index, i);
}

TEST_F(PoolTest, ReleaseReturnsARequestToTheFreeList) {
  RequestPool pool(cfg, usage, nullptr, no_send_done);
  pool.resize(1);
  Request* r = sent_request(pool);
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
  RequestPool pool(cfg, usage, nullptr, no_send_done);
  pool.resize(8);
  Request* write = pool.alloc();
  pool.set_state(write, S::Executing);
  pool.set_state(write, S::AwaitingH2C);  // an R2T is outstanding
  Request* parked = pool.alloc();
  pool.set_state(parked, S::Executing);
  pool.set_state(parked, S::Waiting);
  Request* aer = pool.alloc();
  pool.set_state(aer, S::Executing);
  pool.set_state(aer, S::HeldAer);
  Request* abort = pool.alloc();
  pool.set_state(abort, S::Executing);
  pool.set_state(abort, S::HeldAbort);
  Request* reading = pool.alloc();
  pool.set_state(reading, S::Executing);
  Request* answered = sent_request(pool);
  Request* arriving = pool.alloc();
  EXPECT_EQ(pool.count(S::AwaitingH2C), 1u);
  EXPECT_EQ(pool.count(S::Waiting), 1u);
  EXPECT_EQ(pool.count(S::HeldAer), 1u);
  EXPECT_EQ(pool.count(S::HeldAbort), 1u);
  EXPECT_EQ(pool.count(S::Executing), 1u);
  EXPECT_EQ(pool.count(S::Sending), 1u);
  EXPECT_EQ(pool.count(S::ReceivingData), 1u);
  EXPECT_EQ(pool.count(S::Free), 1u);
  uint32_t sum = 0;
  for (uint32_t n : pool.counts()) sum += n;
  EXPECT_EQ(sum, pool.size());

  // Every one of them back to Free, along legal paths.
  pool.set_state(write, S::Executing);
  pool.set_state(parked, S::Executing);
  for (Request* r : {write, parked, aer, abort, reading}) pool.set_state(r, S::Sending);
  pool.set_state(arriving, S::Sending);  // a bad capsule is answered at once
  for (Request* r : {write, parked, aer, abort, reading, answered, arriving}) pool.release(r, false);
  EXPECT_EQ(pool.count(S::Free), 8u);
}

TEST(RequestTransitions, TableAllowsExactlyTheDocumentedMoves) {
  auto legal = [](S from, S to) { return request_transition_legal(from, to); };
  const S all[] = {S::Free, S::ReceivingData, S::AwaitingH2C, S::Waiting,
                   S::Executing, S::Sending, S::HeldAer, S::HeldAbort};
  int n = 0;
  for (S from : all)
    for (S to : all) n += legal(from, to);
  EXPECT_EQ(n, 14);  // the moves listed beside request_transition_legal()
  EXPECT_TRUE(legal(S::Free, S::ReceivingData));
  EXPECT_TRUE(legal(S::ReceivingData, S::Executing));
  EXPECT_TRUE(legal(S::ReceivingData, S::Sending));
  EXPECT_TRUE(legal(S::Executing, S::AwaitingH2C));
  EXPECT_TRUE(legal(S::AwaitingH2C, S::Executing));
  EXPECT_TRUE(legal(S::Waiting, S::Sending));
  EXPECT_TRUE(legal(S::Sending, S::Free));
  // A request is never reused before its response has left, nor answered twice.
  EXPECT_FALSE(legal(S::Executing, S::Free));
  EXPECT_FALSE(legal(S::Sending, S::Sending));
  EXPECT_FALSE(legal(S::Free, S::Sending));
  EXPECT_FALSE(legal(S::AwaitingH2C, S::Sending));
  for (S s : all) EXPECT_FALSE(legal(s, s)) << request_state_name(s);
}

TEST_F(PoolTest, IllegalTransitionAborts) {
  if (!NVTCP_STATE_CHECKS) GTEST_SKIP() << "state checks are compiled out of this build";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  RequestPool pool(cfg, usage, nullptr, no_send_done);
  pool.resize(1);
  Request* r = pool.alloc();
  EXPECT_DEATH(pool.set_state(r, S::Free), "illegal request transition ReceivingData -> Free in RequestPool::set_state");
}

TEST_F(PoolTest, BuffersAreAlignedCountedAndReused) {
  RequestPool pool(cfg, usage, nullptr, no_send_done);
  pool.resize(2);
  Request* r = pool.alloc();
  ASSERT_EQ(pool.ensure_buffer(r, 5000, true), RequestPool::BufferResult::Ok);
  EXPECT_EQ(r->buf_cap, 8192u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r->buf.get()) % 4096, 0u);
  EXPECT_EQ(pool.buffer_bytes(), 8192u);
  EXPECT_EQ(usage.buffer_bytes.load(), 8192u);
  uint8_t* first = r->buf.get();
  EXPECT_EQ(pool.ensure_buffer(r, 4096, true), RequestPool::BufferResult::Ok);  // fits: no new buffer
  EXPECT_EQ(r->buf.get(), first);
  sent_request(pool);  // the other slot, to be released without a buffer
  pool.set_state(r, S::Executing);
  pool.set_state(r, S::Sending);
  pool.release(r, false);  // under half the budget: the buffer stays for the next command
  EXPECT_EQ(r->buf_cap, 8192u);
  EXPECT_EQ(pool.buffer_bytes(), 8192u);
}

TEST_F(PoolTest, ConnectionBudgetExhaustionWaitsUntilIdleBuffersAreReclaimed) {
  RequestPool pool(cfg, usage, nullptr, no_send_done);
  pool.resize(2);
  Request* a = pool.alloc();
  Request* b = pool.alloc();
  ASSERT_EQ(pool.ensure_buffer(a, 200 << 10, true), RequestPool::BufferResult::Ok);
  // 200 KiB + 100 KiB is over the 256 KiB a connection may hold, and nothing idle to give back.
  EXPECT_EQ(pool.ensure_buffer(b, 100 << 10, true), RequestPool::BufferResult::Wait);
  EXPECT_EQ(b->buf_cap, 0u);
  EXPECT_EQ(usage.buffer_bytes.load(), 200u << 10);
  // a finishes and idles with its buffer; b's next try takes it back from the free list.
  pool.set_state(a, S::Executing);
  pool.set_state(a, S::Sending);
  pool.release(a, false);
  EXPECT_EQ(a->buf_cap, 200u << 10);
  EXPECT_EQ(pool.ensure_buffer(b, 100 << 10, true), RequestPool::BufferResult::Ok);
  EXPECT_EQ(a->buf_cap, 0u);
  EXPECT_EQ(pool.buffer_bytes(), 100u << 10);
  EXPECT_EQ(usage.buffer_bytes.load(), 100u << 10);
}

TEST_F(PoolTest, IoQueuesLeaveTheAdminReserve) {
  cfg.max_connection_buffer_memory = 0;
  cfg.max_host_buffer_memory = 0;
  RequestPool pool(cfg, usage, nullptr, no_send_done);
  pool.resize(2);
  Request* io = pool.alloc();
  Request* admin = pool.alloc();
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
  RequestPool pool(cfg, usage, nullptr, no_send_done);
  pool.resize(2);
  Request* r = sent_request(pool);
  ASSERT_EQ(pool.ensure_buffer(r, 4096, false), RequestPool::BufferResult::Ok);
  pool.release(r, true);  // an admin command's buffer goes back at once
  EXPECT_EQ(r->buf_cap, 0u);
  EXPECT_EQ(usage.buffer_bytes.load(), 0u);

  Request* big = sent_request(pool);
  ASSERT_EQ(pool.ensure_buffer(big, 600 << 10, false), RequestPool::BufferResult::Ok);  // over half of 1 MiB
  pool.release(big, false);
  EXPECT_EQ(big->buf_cap, 0u);
  EXPECT_EQ(pool.buffer_bytes(), 0u);
}

TEST_F(PoolTest, HostBudgetBoundsAllItsConnectionsAndDestructionGivesEverythingBack) {
  HostBudget host;
  cfg.max_connection_buffer_memory = 0;
  {
    RequestPool pool(cfg, usage, nullptr, no_send_done);
    pool.resize(2);
    Request* before_connect = pool.alloc();
    ASSERT_EQ(pool.ensure_buffer(before_connect, 8192, false), RequestPool::BufferResult::Ok);
    // Connect: the pool itself is reserved, then the host owns what the pool holds.
    const uint64_t pool_bytes = 2 * sizeof(Request);
    ASSERT_TRUE(pool.reserve_budgets(&host, pool_bytes, cfg.max_buffer_memory));
    pool.attach_host(&host, pool_bytes);
    EXPECT_EQ(host.bytes.load(), 8192 + pool_bytes);
    EXPECT_EQ(pool.pool_bytes(), pool_bytes);
    // Another connection of the same host has taken most of its budget.
    const uint64_t others = cfg.max_host_buffer_memory - host.bytes.load() - 4096;
    ASSERT_TRUE(host.reserve(others, cfg.max_host_buffer_memory));
    Request* r = pool.alloc();
    EXPECT_EQ(pool.ensure_buffer(r, 8192, true), RequestPool::BufferResult::Wait);
    EXPECT_EQ(pool.ensure_buffer(r, 4096, true), RequestPool::BufferResult::Ok);
    host.release(others);
  }
  EXPECT_EQ(host.bytes.load(), 0u);
  EXPECT_EQ(usage.buffer_bytes.load(), 0u);
}

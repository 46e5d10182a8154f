// SPDX-License-Identifier: Apache-2.0
// The control path's worker pool: keys (source addresses) take turns, so one peer's backlog of
// work it causes before proving anything delays another's job by one job per thread, not by the
// whole backlog; each key's jobs run in the order given; the destructor runs what is left.
// The pool runs its jobs on std::thread workers: these suites run under ThreadSanitizer too.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "util/worker_pool.hpp"

namespace nvtcp::worker_pool_test {
namespace {

// Holds the pool's one thread until opened, so that the jobs given meanwhile all wait.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false, entered = false;
  void hold() {
    std::unique_lock lk(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lk, [this] { return open; });
  }
  void wait_entered() {
    std::unique_lock lk(mu);
    cv.wait(lk, [this] { return entered; });
  }
  void release() {
    std::lock_guard lk(mu);
    open = true;
    cv.notify_all();
  }
};

TEST(WorkerPool, KeysTakeTurnsAndEachKeysJobsKeepTheirOrder) {
  std::vector<std::string> ran;
  std::mutex ran_mu;
  Gate gate;
  {
    WorkerPool pool(1, "test-pool");
    pool.submit("flood", [&] { gate.hold(); });
    gate.wait_entered();
    auto job = [&](std::string name) {
      return [&ran, &ran_mu, name] {
        std::lock_guard lk(ran_mu);
        ran.push_back(name);
      };
    };
    for (int i = 1; i <= 5; ++i) pool.submit("flood", job("f" + std::to_string(i)));
    pool.submit("host", job("h1"));
    pool.submit("host", job("h2"));
    pool.submit("other", job("o1"));
    gate.release();
  }  // the destructor runs everything given
  const std::vector<std::string> want = {"f1", "h1", "o1", "f2", "h2", "f3", "f4", "f5"};
  EXPECT_EQ(ran, want) << "the host's job waited behind the flood's backlog";
}

// One key on at most per_key threads: with two threads and a limit of one, a flood's jobs never
// run two at a time, and another key's job takes the other thread while they do.
TEST(WorkerPool, AKeyRunsOnAtMostItsShareOfTheThreads) {
  std::mutex mu;
  std::condition_variable cv;
  int flood_running = 0, flood_most = 0;
  bool host_ran_beside_flood = false, release = false;
  {
    WorkerPool pool(2, "test-pool", 1);
    for (int i = 0; i < 6; ++i)
      pool.submit("flood", [&] {
        std::unique_lock lk(mu);
        flood_most = std::max(flood_most, ++flood_running);
        cv.notify_all();
        // A flood job holds its thread until the host's job has run beside it, or until a
        // second flood job runs too (the limit broken: both go on, and the test says so).
        cv.wait(lk, [&] { return release || flood_running > 1; });
        --flood_running;
      });
    pool.submit("host", [&] {
      std::unique_lock lk(mu);
      // The other thread may take this job before the first flood job has begun: beside it
      // means while it runs. A pool that ran no flood job at all ends the wait, and fails.
      cv.wait_for(lk, std::chrono::seconds(10), [&] { return flood_running > 0; });
      host_ran_beside_flood = flood_running == 1;
      release = true;
      cv.notify_all();
    });
  }
  EXPECT_EQ(flood_most, 1) << "one key took both threads";
  EXPECT_TRUE(host_ran_beside_flood) << "the host's job waited for the flood's thread";
}

TEST(WorkerPool, JobsWithoutAKeyRunInTheOrderGiven) {
  std::vector<int> ran;
  std::mutex ran_mu;
  {
    WorkerPool pool(1, "test-pool");
    for (int i = 0; i < 20; ++i)
      pool.submit([&ran, &ran_mu, i] {
        std::lock_guard lk(ran_mu);
        ran.push_back(i);
      });
  }
  ASSERT_EQ(ran.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(ran[size_t(i)], i);
}

}  // namespace
}  // namespace nvtcp::worker_pool_test

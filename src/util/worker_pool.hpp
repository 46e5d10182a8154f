// SPDX-License-Identifier: Apache-2.0
// A few threads for CPU-heavy control-path work that a reactor must not do inline: a
// DH-HMAC-CHAP modular exponentiation takes about 7 ms in ffdhe2048 and 100 ms in ffdhe8192,
// and every other connection of the reactor would wait that long. Jobs start in the order
// given, each on whichever thread is free; what a job reports back goes through its reactor's
// post(). Control path only: a lock and a heap-allocated job per piece of work are fine here.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nvtcp {

class WorkerPool {
 public:
  // threads: at least one; name: the threads' name (pthread, 15 characters at most).
  WorkerPool(unsigned threads, std::string name);
  // Runs the jobs already given, then joins the threads.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void submit(std::function<void()> job);

 private:
  void run();

  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace nvtcp

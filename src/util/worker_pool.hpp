// SPDX-License-Identifier: Apache-2.0
// A few threads for CPU-heavy control-path work that a reactor must not do inline: a
// DH-HMAC-CHAP modular exponentiation takes about 7 ms in ffdhe2048 and 100 ms in ffdhe8192,
// and every other connection of the reactor would wait that long. Each job comes with a key
// (who asked: a source address); keys take turns, one key's jobs start in the order given, each
// on whichever thread is free, and one key runs on at most per_key threads at once. So a peer
// that floods the pool with work it can cause before proving anything (a Negotiate claiming a
// keyed host's NQN costs a key pair) delays another address's job by at most one job of its own,
// and holds per_key of the threads (their cores), not all of them. What a job reports back goes
// through its reactor's post(). Control path only: a lock and a heap-allocated job per piece of
// work are fine here.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nvtcp {

class WorkerPool {
 public:
  // threads: at least one; name: the threads' name (pthread, 15 characters at most); per_key:
  // the most threads one key's jobs run on at once (0: all of them).
  WorkerPool(unsigned threads, std::string name, unsigned per_key = 0);
  // Runs the jobs already given, then joins the threads.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void submit(std::function<void()> job) { submit({}, std::move(job)); }
  void submit(const std::string& key, std::function<void()> job);

 private:
  void run();

  std::string name_;
  unsigned per_key_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Waiting jobs by key, and the keys that have some in the order they take their turns.
  std::map<std::string, std::deque<std::function<void()>>> jobs_;
  std::deque<std::string> turns_;
  std::map<std::string, unsigned> running_;  // keys with jobs on a thread now, and how many
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace nvtcp

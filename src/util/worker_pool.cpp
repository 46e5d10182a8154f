// SPDX-License-Identifier: Apache-2.0
#include "util/worker_pool.hpp"

#include <pthread.h>

#include <algorithm>

namespace nvtcp {

WorkerPool::WorkerPool(unsigned threads, std::string name) : name_(std::move(name)) {
  threads = std::max(1u, threads);
  threads_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) {
    threads_.emplace_back([this] { run(); });
    pthread_setname_np(threads_.back().native_handle(), name_.substr(0, 15).c_str());
  }
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::submit(const std::string& key, std::function<void()> job) {
  {
    std::lock_guard lk(mu_);
    auto& q = jobs_[key];
    if (q.empty()) turns_.push_back(key);
    q.push_back(std::move(job));
  }
  cv_.notify_one();
}

void WorkerPool::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [this] { return stopping_ || !turns_.empty(); });
      if (turns_.empty()) return;  // stopping, and nothing is left to run
      // The key whose turn it is runs its oldest job, and goes to the back if it has more.
      const std::string key = std::move(turns_.front());
      turns_.pop_front();
      auto it = jobs_.find(key);
      job = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty())
        jobs_.erase(it);
      else
        turns_.push_back(key);
    }
    job();
  }
}

}  // namespace nvtcp

// SPDX-License-Identifier: Apache-2.0
#include "util/worker_pool.hpp"

#include <pthread.h>

#include <algorithm>

namespace nvtcp {

WorkerPool::WorkerPool(unsigned threads, std::string name, unsigned per_key) : name_(std::move(name)) {
  threads = std::max(1u, threads);
  per_key_ = per_key ? std::min(per_key, threads) : threads;
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
    std::string key;
    {
      std::unique_lock lk(mu_);
      // The first key in turn that is below its limit of threads.
      auto next = turns_.end();
      cv_.wait(lk, [&] {
        next = std::find_if(turns_.begin(), turns_.end(), [&](const std::string& k) {
          auto r = running_.find(k);
          return r == running_.end() || r->second < per_key_;
        });
        return next != turns_.end() || (stopping_ && turns_.empty());
      });
      if (next == turns_.end()) return;  // stopping, and nothing is left to run
      // That key runs its oldest job, and goes to the back if it has more.
      key = std::move(*next);
      turns_.erase(next);
      auto it = jobs_.find(key);
      job = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) jobs_.erase(it);
      else turns_.push_back(key);
      ++running_[key];
    }
    job();
    {
      std::lock_guard lk(mu_);
      if (--running_[key] == 0) running_.erase(key);
    }
    cv_.notify_all();  // a key back below its limit may have jobs waiting
  }
}

}  // namespace nvtcp

// SPDX-License-Identifier: Apache-2.0
#include "target/io_queue_table.hpp"

#include <algorithm>

#include "target/subsystem.hpp"

namespace nvtcp::target {

IoQueueTable::IoQueueTable(uint32_t max_io_queues, uint32_t ns_slots)
    : max_io_queues_(max_io_queues), ns_slots_(ns_slots) {
  const uint32_t n = max_io_queues + 1;
  claimed_.reset(new std::atomic<bool>[n]);
  stats_.reset(new std::atomic<QueueStats*>[n]);
  for (uint32_t i = 0; i < n; ++i) {
    claimed_[i] = false;
    stats_[i].store(nullptr, std::memory_order_relaxed);
  }
}

IoQueueTable::~IoQueueTable() {
  for (uint32_t i = 0; i <= max_io_queues_; ++i) delete[] stats_[i].load(std::memory_order_acquire);
}

uint32_t IoQueueTable::grant(uint32_t asked) {
  if (!grant_made_) {
    granted_.store(std::min(asked, max_io_queues_));
    grant_made_ = true;
  }
  return granted();
}

bool IoQueueTable::claim(uint16_t qid) {
  if (qid == 0 || qid > granted()) return false;
  bool expected = false;
  return claimed_[qid].compare_exchange_strong(expected, true);
}

void IoQueueTable::release(uint16_t qid) {
  if (qid > 0 && qid <= max_io_queues_) claimed_[qid] = false;
}

void IoQueueTable::add(uint16_t qid, reactor::Reactor* r, CommandAborter* q) {
  std::lock_guard lk(mu_);
  if (queues_.size() <= qid) queues_.resize(qid + 1);
  queues_[qid] = {r, q};
}

void IoQueueTable::remove(uint16_t qid, CommandAborter* q) {
  std::lock_guard lk(mu_);
  if (qid < queues_.size() && queues_[qid].queue == q) queues_[qid] = {};
}

IoQueueTable::Entry IoQueueTable::find(uint16_t qid) {
  std::lock_guard lk(mu_);
  return qid < queues_.size() ? queues_[qid] : Entry{};
}

bool IoQueueTable::abort(uint16_t qid, CommandAborter* q, uint16_t cid) {
  std::lock_guard lk(mu_);
  return qid < queues_.size() && queues_[qid].queue == q && q->abort_command(cid);
}

QueueStats* IoQueueTable::stats(uint16_t qid) {
  QueueStats* row = stats_[qid].load(std::memory_order_acquire);
  if (!row) {  // only this queue's Connect gets here; a reconnect finds the row it left
    row = new QueueStats[ns_slots_];
    stats_[qid].store(row, std::memory_order_release);
  }
  return row;
}

QueueStats::Totals IoQueueTable::totals(const Namespace* ns) const {
  QueueStats::Totals t;
  for (uint32_t q = 1; q <= max_io_queues_; ++q) {
    const QueueStats* row = stats_[q].load(std::memory_order_acquire);
    if (!row) continue;
    if (ns) row[ns->index].add_to(t);
    else
      for (uint32_t i = 0; i < ns_slots_; ++i) row[i].add_to(t);
  }
  return t;
}

}  // namespace nvtcp::target

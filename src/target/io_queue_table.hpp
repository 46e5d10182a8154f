// SPDX-License-Identifier: Apache-2.0
// The I/O queues of one controller: how many the host was granted (Set Features 07h), which
// qids are claimed, where Abort finds each queue (its reactor), and each queue's counters. The
// queues of one controller run on different reactors: claims and counters are atomics, the
// Abort registry takes a lock (Abort is rare).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace nvtcp::reactor {
class Reactor;
}

namespace nvtcp::target {

struct Namespace;

// Per I/O queue counters: one writer (that queue's reactor), read by SMART log requests.
struct QueueStats {
  std::atomic<uint64_t> reads{0}, writes{0}, read_bytes{0}, write_bytes{0};
  void add_read(uint64_t bytes) {
    reads.store(reads.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    read_bytes.store(read_bytes.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
  }
  void add_write(uint64_t bytes) {
    writes.store(writes.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    write_bytes.store(write_bytes.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
  }
  struct Totals {
    uint64_t reads = 0, writes = 0, read_bytes = 0, write_bytes = 0;
  };
  void add_to(Totals& t) const {
    t.reads += reads.load(std::memory_order_relaxed);
    t.writes += writes.load(std::memory_order_relaxed);
    t.read_bytes += read_bytes.load(std::memory_order_relaxed);
    t.write_bytes += write_bytes.load(std::memory_order_relaxed);
  }
};

// An I/O queue, as Abort reaches it (its own reactor only).
class CommandAborter {
 public:
  virtual ~CommandAborter() = default;
  // Ends command cid with Command Abort Requested if it is still held before the device
  // (waiting for memory or the send queue, or for its data from the host); false if it is
  // not there or already running.
  virtual bool abort_command(uint16_t cid) = 0;
};

class IoQueueTable {
 public:
  // max_io_queues: the most a host may be granted; ns_slots: counters per queue (by
  // Namespace::index).
  IoQueueTable(uint32_t max_io_queues, uint32_t ns_slots);
  ~IoQueueTable();
  IoQueueTable(const IoQueueTable&) = delete;
  IoQueueTable& operator=(const IoQueueTable&) = delete;

  // The first grant gives the host up to asked I/O queues (within max_io_queues); later ones
  // change nothing. The number granted.
  uint32_t grant(uint32_t asked);
  uint32_t granted() const { return granted_.load(std::memory_order_relaxed); }
  // Claims an I/O queue id for a connecting queue; false if taken or out of range. A
  // claimed queue registers where Abort finds it (its reactor) until it is released.
  bool claim(uint16_t qid);
  void release(uint16_t qid);
  void add(uint16_t qid, reactor::Reactor* r, CommandAborter* q);
  void remove(uint16_t qid, CommandAborter* q);
  // Where Abort finds queue qid (queue null: none registered).
  struct Entry {
    reactor::Reactor* reactor = nullptr;
    CommandAborter* queue = nullptr;
  };
  Entry find(uint16_t qid);
  // On that queue's reactor: Abort of command cid, if q is still registered as qid (it is
  // alive then: it leaves the table on this same reactor).
  bool abort(uint16_t qid, CommandAborter* q, uint16_t cid);
  // One I/O queue's counters, one per namespace (by Namespace::index), written by that
  // queue's reactor only. Made at the queue's Connect, kept for the controller's life.
  QueueStats* stats(uint16_t qid);
  // Reads, writes and their bytes over every I/O queue: of one namespace, or all (nullptr).
  QueueStats::Totals totals(const Namespace* ns) const;

 private:
  const uint32_t max_io_queues_;
  const uint32_t ns_slots_;
  std::atomic<uint32_t> granted_{0};
  bool grant_made_ = false;  // admin reactor only
  std::unique_ptr<std::atomic<bool>[]> claimed_;
  // Per I/O queue: its per-namespace counters, published with release for SMART readers.
  std::unique_ptr<std::atomic<QueueStats*>[]> stats_;
  std::mutex mu_;
  std::vector<Entry> queues_;  // by qid
};

}  // namespace nvtcp::target

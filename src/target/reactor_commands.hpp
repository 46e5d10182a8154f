// SPDX-License-Identifier: Apache-2.0
// What the command queues of one reactor share: the reactor's slot in per-reactor counters,
// the commands it completed, the budget of data its commands may move inside the target per
// loop turn, and the count of their work on worker threads, which shutdown waits for. The
// transport's list of connections (ConnectionSet, tcp_queue.hpp) is one of these.
//
// Written by its reactor only; the counters are atomics so that anyone may read them.
#pragma once
#include <atomic>
#include <cstdint>

namespace nvtcp::target {

class ReactorCommands {
 public:
  // This reactor's number (0 .. cores-1): its slot in per-reactor counters.
  void set_index(uint32_t i) { index_ = i; }
  uint32_t index() const { return index_; }

  // Work of this reactor's queues on a worker thread: shutdown waits until it has come back
  // (its task has run here) and until the worker has left post() (which still writes to this
  // reactor's eventfd after queueing the task).
  void offload_started() {
    ++offloads_;
    offload_posts_.fetch_add(1, std::memory_order_relaxed);
  }
  void offload_returned() { --offloads_; }           // on this reactor, in the posted task
  void offload_post_done() { offload_posts_.fetch_sub(1, std::memory_order_release); }  // on the worker
  bool offloads_out() const { return offloads_ > 0 || offload_posts_.load(std::memory_order_acquire) > 0; }

  // I/O commands completed on this reactor: one writer (the reactor), read by anyone.
  void count_io() { bump(ios_); }
  uint64_t ios() const { return ios_.load(std::memory_order_relaxed); }
  // Durability commands completed with success on this reactor: Flush commands, and
  // writes (Write, Write Zeroes) that carried FUA.
  void count_flush() { bump(flushes_); }
  void count_fua_write() { bump(fua_writes_); }
  uint64_t flushes() const { return flushes_.load(std::memory_order_relaxed); }
  uint64_t fua_writes() const { return fua_writes_.load(std::memory_order_relaxed); }

  // Data a command moves inside the target (Copy) costs the reactor as a read of the same bytes
  // would, whoever sends it: all such steps of this reactor's queues together take at most
  // kStepBytesPerTurn per loop turn (the first step of a turn always runs). A step over the
  // budget waits for a later turn; the turns in between serve everything else.
  static constexpr uint64_t kStepBytesPerTurn = 256 * 1024;
  bool take_step_budget(uint64_t turn, uint64_t bytes) {
    if (turn != budget_turn_) {
      budget_turn_ = turn;
      budget_used_ = 0;
    }
    if (budget_used_ && budget_used_ + bytes > kStepBytesPerTurn) {
      bump(steps_deferred_);
      return false;
    }
    budget_used_ += bytes;
    if (budget_used_ > most_step_bytes_.load(std::memory_order_relaxed))
      most_step_bytes_.store(budget_used_, std::memory_order_relaxed);
    return true;
  }
  // Steps that waited for a later turn, and the most bytes steps moved in one turn.
  uint64_t steps_deferred() const { return steps_deferred_.load(std::memory_order_relaxed); }
  uint64_t most_step_bytes_in_a_turn() const { return most_step_bytes_.load(std::memory_order_relaxed); }

 private:
  static void bump(std::atomic<uint64_t>& c) { c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  uint32_t index_ = 0;
  uint32_t offloads_ = 0;
  std::atomic<uint32_t> offload_posts_{0};
  std::atomic<uint64_t> ios_{0}, flushes_{0}, fua_writes_{0};
  uint64_t budget_turn_ = UINT64_MAX, budget_used_ = 0;
  std::atomic<uint64_t> steps_deferred_{0}, most_step_bytes_{0};
};

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
// What the command queues of one reactor share: the reactor's slot in per-reactor counters,
// the commands it completed, the budget of work its commands may do per loop turn with the line
// of those that wait for a later turn, and the count of their work on worker threads, which
// shutdown waits for. The
// transport's list of connections (ConnectionSet, tcp_queue.hpp) is one of these.
//
// Written by its reactor only; the counters are atomics so that anyone may read them.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "reactor/byte_stream.hpp"
#include "reactor/reactor.hpp"

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

  // The reactor's work per loop turn, by the bytes its commands' device operations move (a
  // command counts at least kMinTurnCost, its work beside its bytes): every Read, Write, Write
  // Zeroes, Verify, Compare, Copy piece and Dataset Management range of this reactor's queues,
  // whoever sends it. Together they take at most kTurnBytes a turn; one over it waits in this
  // reactor's line, in arrival order, for a later turn, and the turns in between serve
  // everything else. A command of at most kNeverWaitBytes never waits (it counts, though): a
  // small read beside any load is answered in the turn it came, behind at most one turn's
  // budget. The line's head runs on the turn it is woken, whatever the budget, unless one that
  // could have waited ran in that turn already; nothing large overtakes the line, so it always
  // moves. (Without a budget, one host with 16 commands of 1 MiB made every turn 16 MiB
  // of work, and a QD1 reader beside it kept 5-8% of its rate: bench/reactor-fairness in
  // bench/RESULTS.md, 2026-12-07.)
  static constexpr uint64_t kTurnBytes = 128 * 1024;
  static constexpr uint64_t kNeverWaitBytes = 16 * 1024;
  static constexpr uint64_t kMinTurnCost = 4096;
  // A Read or Write on a device that copies on the reactor goes in pieces of this
  // (CommandQueue::start_device), each taking its own part of a turn's budget.
  static constexpr uint64_t kPieceBytes = 64 * 1024;
  // True: a command of `bytes` runs now (its cost is taken); false: it must wait_for_turn().
  // always: the budget holds whether the reactor is contended or not (data a Copy moves inside
  // the target: its own host's other commands wait behind it too).
  bool take_turn(uint64_t turn, uint64_t now_ns, uint64_t bytes, bool always = false) {
    const uint64_t cost = std::max(bytes, kMinTurnCost);
    start_turn(turn);
    if (cost <= kNeverWaitBytes || (!always && !contended(now_ns) && line_first_ == line_.size())) {
      budget_used_ += cost;
      return true;
    }
    if (line_first_ < line_.size() || (budget_used_ && budget_used_ + cost > kTurnBytes)) {
      bump(turn_waits_);
      return false;
    }
    take(cost);
    return true;
  }
  // Waits (the caller's command in its wait state) until a later turn has room: then woken's
  // fn runs, on this reactor, its cost taken.
  void wait_for_turn(reactor::Reactor& r, reactor::Completion* woken, uint64_t bytes) {
    line_.push_back({woken, std::max(bytes, kMinTurnCost)});
    wake_reactor_ = &r;
    arm_wake();
  }
  size_t waiting_for_turn() const { return line_.size() - line_first_; }

  // The budgets hold while a light queue of this reactor (a few small commands outstanding: a
  // QD1 reader) shares it with a heavy one (a lot of data, or a deep queue, outstanding: the
  // transport sees no data for a Verify or a Write Zeroes, whatever their length), and for
  // kContendedLingerNs after. Queues that are all alike have nobody to be fair to and go as fast
  // as they can: a send limit of 64 KiB a turn on every stream cut eight queues' 128 KiB reads at
  // QD4 from 66 K to 38 K IOPS (bench/RESULTS.md, 2026-12-07, under bench/queues-alike). The linger covers a QD1 reader's
  // gaps, between its answer and its next command: when the budgets lapsed in them, the heavy
  // host's 1 MiB sends went whole, and the reader kept 0.1 of its rate. Each queue says when its
  // load changes (load_of), with its reactor's time.
  enum class Load : uint8_t { Idle, Light, Medium, Heavy, kCount };
  static constexpr uint64_t kLightBytes = 64 * 1024, kHeavyBytes = 256 * 1024;
  static constexpr uint32_t kLightCommands = 2, kHeavyCommands = 8;
  static Load load_of(uint32_t commands, uint64_t bytes) {
    if (commands == 0) return Load::Idle;
    if (bytes < kLightBytes && commands <= kLightCommands) return Load::Light;
    return bytes >= kHeavyBytes || commands >= kHeavyCommands ? Load::Heavy : Load::Medium;
  }
  // A queue's load, by the most commands it had outstanding lately (this window of
  // kLoadWindowNs and the last): a deep queue whose host is slow to send the next commands dips
  // to one or two outstanding now and then, and is not light for it (counted by what it had at
  // each moment, eight hosts' QD32 4 KiB reads lost 15%: each dip set the budgets for 20 ms).
  static constexpr uint64_t kLoadWindowNs = 10'000'000;
  struct QueueLoad {
    Load load = Load::Idle;
    uint32_t peak = 0, last_peak = 0;
    uint64_t window_start = 0;
    Load update(uint32_t commands, uint64_t bytes, uint64_t now_ns) {
      if (now_ns - window_start >= kLoadWindowNs) {
        last_peak = now_ns - window_start < 2 * kLoadWindowNs ? peak : 0;
        peak = 0;
        window_start = now_ns;
      }
      peak = std::max(peak, commands);
      return commands ? load_of(std::max(peak, last_peak), bytes) : Load::Idle;
    }
  };
  static constexpr uint64_t kContendedLingerNs = 20'000'000;
  void queue_load(Load from, Load to, uint64_t now_ns) {
    --loads_[size_t(from)];
    ++loads_[size_t(to)];
    note_contention(now_ns);
  }
  bool contended(uint64_t now_ns) const { return now_ns < send_limit_.until_ns; }
  // What each connection of this reactor hands the kernel per turn at most (TcpStream reads it
  // at each send): bytes until until_ns, then no limit. A 1 MiB response sent whole cost the
  // core about 170 us in one turn; with 64 KiB a turn a QD1 reader beside 16 such reads keeps
  // 0.51 of its rate alone (bench/reactor-fairness); with 128 KiB it kept about 0.2 (two runs by
  // hand, not recorded).
  static constexpr size_t kSendBytesPerTurn = 64 * 1024;
  const reactor::SendLimit* send_limit() const { return &send_limit_; }
  // Commands that waited for a later turn, and the most bytes commands that can wait moved in
  // one turn (at most kTurnBytes, or one command larger than that alone).
  uint64_t turn_waits() const { return turn_waits_.load(std::memory_order_relaxed); }
  uint64_t most_bytes_in_a_turn() const { return most_turn_bytes_.load(std::memory_order_relaxed); }

 private:
  static void bump(std::atomic<uint64_t>& c) { c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  uint32_t index_ = 0;
  uint32_t offloads_ = 0;
  std::atomic<uint32_t> offload_posts_{0};
  std::atomic<uint64_t> ios_{0}, flushes_{0}, fua_writes_{0};
  void start_turn(uint64_t turn) {
    if (turn == budget_turn_) return;
    budget_turn_ = turn;
    budget_used_ = waiting_used_ = 0;
  }
  void take(uint64_t cost) {
    budget_used_ += cost;
    waiting_used_ += cost;
    if (waiting_used_ > most_turn_bytes_.load(std::memory_order_relaxed))
      most_turn_bytes_.store(waiting_used_, std::memory_order_relaxed);
  }
  // The line moves while the turn has room; its head runs whatever the budget unless a command
  // that could have waited ran this turn already (small ones do not count: they cannot hold
  // the line back).
  static void on_wake(reactor::Completion* c, int, uint32_t) {
    ReactorCommands& self = *static_cast<Wake*>(c)->owner;
    self.wake_.armed = false;
    self.start_turn(self.wake_reactor_->turn());
    while (self.line_first_ < self.line_.size()) {
      const InLine head = self.line_[self.line_first_];
      if (self.waiting_used_ && self.budget_used_ + head.cost > kTurnBytes) break;
      ++self.line_first_;
      self.take(head.cost);
      head.woken->fn(head.woken, 0, 0);  // may queue more: they go behind
    }
    if (self.line_first_ == self.line_.size()) {
      self.line_.clear();
      self.line_first_ = 0;
    } else {
      self.arm_wake();
    }
  }
  // The line is looked at on the next turn: a no-op's completion, among that turn's others.
  void arm_wake() {
    if (wake_.armed) return;
    wake_.armed = true;
    wake_.owner = this;
    wake_.fn = on_wake;
    io_uring_sqe* sqe = wake_reactor_->get_sqe();
    io_uring_prep_nop(sqe);
    wake_reactor_->prep(sqe, &wake_);
  }
  void note_contention(uint64_t now_ns) {
    if (loads_[size_t(Load::Light)] && loads_[size_t(Load::Heavy)]) send_limit_.until_ns = UINT64_MAX;
    else if (send_limit_.until_ns == UINT64_MAX) send_limit_.until_ns = now_ns + kContendedLingerNs;
  }
  uint32_t loads_[size_t(Load::kCount)] = {};  // queues in each Load (Idle: not counted here)
  reactor::SendLimit send_limit_{kSendBytesPerTurn, 0};
  uint64_t budget_turn_ = UINT64_MAX, budget_used_ = 0;
  uint64_t waiting_used_ = 0;  // of budget_used_, by commands that could have waited
  struct InLine {
    reactor::Completion* woken;
    uint64_t cost;
  };
  std::vector<InLine> line_;  // in arrival order; line_ before line_first_ have gone
  size_t line_first_ = 0;
  struct Wake : reactor::Completion {
    ReactorCommands* owner = nullptr;
    bool armed = false;
  } wake_;
  reactor::Reactor* wake_reactor_ = nullptr;
  std::atomic<uint64_t> turn_waits_{0}, most_turn_bytes_{0};
};

}  // namespace nvtcp::target

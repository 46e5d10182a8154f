// SPDX-License-Identifier: Apache-2.0
// The time that timing logic reads, on both sides: the target connection's deadlines (ICReq,
// Connect, keep-alive, H2C data, send stalls) and the host's (keep-alive, command and admin
// timeouts, the reconnect delay, ctrl_loss_tmo, fast_io_fail_tmo, the shutdown wait). Behind an
// interface so that the decisions can be tested by stepping a fake clock instead of sleeping.
#pragma once
#include <atomic>
#include <cstdint>

namespace nvtcp::reactor {

class Reactor;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t now_ns() const = 0;
  // The time of this reactor turn, for per-command stamps on the data path. The real clock
  // answers with the reactor's cached reading (the same clock, read once a turn), so a command
  // costs no clock read; a fake clock answers with its own time so stamps and checks agree.
  virtual uint64_t turn_ns(const Reactor& r) const;
  // How long a reactor that waits for something delay_ns of this clock away may sleep (real
  // time) before it reads the clock again. The real clock: the whole delay. A fake clock is
  // stepped by a test thread, which wakes no one; so whoever waits on it re-reads it at least
  // every kFakeClockPollNs, and a step is seen within that much real time (see FakeClock).
  virtual uint64_t poll_period_ns(uint64_t delay_ns) const { return delay_ns; }
};

// CLOCK_MONOTONIC, as reactor::monotonic_ns() reads it: the default everywhere.
const Clock& monotonic_clock();

// The longest real sleep between two readings of a fake clock by a host wait (reactor timers,
// the admin thread's loops): what a test waits, in real time, for a step to be seen.
inline constexpr uint64_t kFakeClockPollNs = 1'000'000;

// Time moves only when the test says so. Atomic because the admin thread and a test thread may
// both read it. A step is only a store: the host's waits find it by polling (poll_period_ns())
// rather than by being woken, so the clock needs to know nothing about reactors or threads.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(uint64_t start_ns = 1'000'000'000) : now_(start_ns) {}
  uint64_t now_ns() const override { return now_.load(std::memory_order_acquire); }
  uint64_t turn_ns(const Reactor&) const override { return now_ns(); }
  uint64_t poll_period_ns(uint64_t delay_ns) const override {
    return delay_ns < kFakeClockPollNs ? delay_ns : kFakeClockPollNs;
  }
  void step_ns(uint64_t ns) { now_.fetch_add(ns, std::memory_order_acq_rel); }
  void step_ms(uint64_t ms) { step_ns(ms * 1'000'000); }

 private:
  std::atomic<uint64_t> now_;
};

}  // namespace nvtcp::reactor

// SPDX-License-Identifier: Apache-2.0
// Named deadlines of one owner (a connection), each with its own handler, carried by a single
// reactor timer armed for the earliest of them: the reactor scans its timer list every loop
// turn, so it keeps one entry per connection however many deadlines that connection has.
//
// Deadlines are read from an injectable Clock. When the reactor timer fires (or a test that
// stepped a fake clock calls run_due()), every deadline due by the clock runs its handler,
// in Id order; handlers may arm or cancel any deadline, their own included.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include "reactor/clock.hpp"
#include "reactor/reactor.hpp"

namespace nvtcp::target {

template <class Owner, class Id, size_t N>
class DeadlineSet {
 public:
  using Handler = void (Owner::*)(uint64_t now_ns);

  DeadlineSet(Owner* owner, reactor::Reactor& r, const reactor::Clock& clock, const std::array<Handler, N>& handlers)
      : reactor_(r), clock_(clock), handlers_(handlers) {
    timer_.set = this;
    timer_.owner = owner;
    timer_.fn = [](reactor::Timer* t) { static_cast<Wakeup*>(t)->set->run_due(); };
  }
  ~DeadlineSet() { reactor_.cancel_timer(&timer_); }
  DeadlineSet(const DeadlineSet&) = delete;
  DeadlineSet& operator=(const DeadlineSet&) = delete;

  const reactor::Clock& clock() const { return clock_; }
  void arm(Id id, uint64_t delay_ns) { arm_at(id, clock_.now_ns() + delay_ns); }
  void arm_at(Id id, uint64_t at_ns) {
    at_[size_t(id)] = at_ns;
    armed_[size_t(id)] = true;
    if (!running_) wake_at_earliest();
  }
  void cancel(Id id) {
    armed_[size_t(id)] = false;
    if (!running_) wake_at_earliest();
  }
  void cancel_all() {
    armed_.fill(false);
    reactor_.cancel_timer(&timer_);
  }
  bool armed(Id id) const { return armed_[size_t(id)]; }
  uint64_t deadline(Id id) const { return at_[size_t(id)]; }

  // Runs the handler of each deadline due now (it is disarmed first), then sets the reactor
  // timer for the earliest deadline left.
  void run_due() {
    running_ = true;
    const uint64_t now = clock_.now_ns();
    for (size_t i = 0; i < N; ++i) {
      if (!armed_[i] || at_[i] > now) continue;
      armed_[i] = false;
      (timer_.owner->*handlers_[i])(now);
    }
    running_ = false;
    wake_at_earliest();
  }

 private:
  void wake_at_earliest() {
    bool any = false;
    uint64_t earliest = 0;
    for (size_t i = 0; i < N; ++i)
      if (armed_[i] && (!any || at_[i] < earliest)) {
        earliest = at_[i];
        any = true;
      }
    if (!any) {
      reactor_.cancel_timer(&timer_);
      return;
    }
    const uint64_t now = clock_.now_ns();
    reactor_.arm_timer(&timer_, earliest > now ? earliest - now : 0);
  }

  struct Wakeup : reactor::Timer {
    DeadlineSet* set = nullptr;
    Owner* owner = nullptr;
  } timer_;
  reactor::Reactor& reactor_;
  const reactor::Clock& clock_;
  std::array<Handler, N> handlers_;
  std::array<uint64_t, N> at_{};
  std::array<bool, N> armed_{};
  bool running_ = false;
};

}  // namespace nvtcp::target

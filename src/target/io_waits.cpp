// SPDX-License-Identifier: Apache-2.0
// The lines I/O commands wait in (io_waits.hpp).
#include "target/io_waits.hpp"

#include <algorithm>

#include "target/io_commands.hpp"
#include "target/qos.hpp"
#include "target/subsystem.hpp"
#include "wire/commands.hpp"

namespace nvtcp::target {

namespace {
// How often writes waiting for a fused Compare and Write look at its namespace's fence again.
constexpr uint64_t kFenceRetryNs = 20'000;
}  // namespace

IoWaits::IoWaits(IoCommands& io, reactor::Reactor& reactor, const reactor::Clock& clock, const bool& closing)
    : io_(io), reactor_(reactor), clock_(clock), closing_(closing) {
  rate_timer_.owner = fence_timer_.owner = this;
  rate_timer_.fn = on_rate_timer;
  fence_timer_.fn = on_fence_timer;
}

IoWaits::~IoWaits() {
  reactor_.cancel_timer(&rate_timer_);
  reactor_.cancel_timer(&fence_timer_);
}

void IoWaits::wait_for_slice(Command& r, Namespace& ns) {
  rate_.push_back({&r, &ns});
  if (!rate_timer_.linked) reactor_.arm_timer(&rate_timer_, QosLimiter::kSliceNs);
}

void IoWaits::wait_for_fence(Command& r) {
  fence_.push_back(&r);
  if (!fence_timer_.linked) reactor_.arm_timer(&fence_timer_, kFenceRetryNs);
}

// The line moves in order while the slice has budget for its head; a head that ends as it
// resumes (its host may no longer run it) uses none, and the next one is looked at.
void IoWaits::on_rate_timer(reactor::Timer* t) {
  IoWaits& self = *static_cast<Timer*>(t)->owner;
  const uint64_t now = self.clock_.turn_ns(self.reactor_);
  while (self.rate_first_ < self.rate_.size() && !self.closing_) {
    const InLine head = self.rate_[self.rate_first_];
    if (!head.r) {
      ++self.rate_first_;
      continue;
    }
    // Past the head before it resumes: what it runs into may queue it again, behind the rest.
    const size_t at = self.rate_first_++;
    if (!self.io_.resume_from_qos(*head.r, *head.ns, now)) {
      self.rate_first_ = at;
      break;
    }
  }
  if (self.closing_) return;  // drop_all() clears the line
  if (self.rate_first_ == self.rate_.size()) {
    self.rate_.clear();
    self.rate_first_ = 0;
  } else {
    self.reactor_.arm_timer(&self.rate_timer_, QosLimiter::kSliceNs);
  }
}

void IoWaits::on_fence_timer(reactor::Timer* t) {
  IoWaits& self = *static_cast<Timer*>(t)->owner;
  std::vector<Command*> waiting;
  waiting.swap(self.fence_);
  for (size_t i = 0; i < waiting.size(); ++i) {
    if (self.closing_) {  // still in the list: drop_all() lets go of what they hold
      self.fence_.insert(self.fence_.end(), waiting.begin() + long(i), waiting.end());
      return;
    }
    self.io_.resume_from_fence(*waiting[i]);
  }
}

bool IoWaits::leave(Command& r) {
  if (r.state() == Command::State::AwaitingQos) {
    for (size_t i = rate_first_; i < rate_.size(); ++i)
      if (rate_[i].r == &r) {
        rate_[i].r = nullptr;
        // Gaps at the head of the line go now, so that a line of nothing but gaps does not hold
        // back the next command until the timer clears it.
        while (rate_first_ < rate_.size() && !rate_[rate_first_].r) ++rate_first_;
        if (rate_first_ == rate_.size()) {
          rate_.clear();
          rate_first_ = 0;
        }
        return true;
      }
    return false;
  }
  if (r.state() == Command::State::AwaitingFence) {
    auto it = std::find(fence_.begin(), fence_.end(), &r);
    if (it == fence_.end()) return false;
    fence_.erase(it);
    return true;
  }
  return false;
}

void IoWaits::drop_all() {
  reactor_.cancel_timer(&rate_timer_);
  for (size_t i = rate_first_; i < rate_.size(); ++i)
    if (rate_[i].r) let_go(*rate_[i].r);
  rate_.clear();
  rate_first_ = 0;
  reactor_.cancel_timer(&fence_timer_);
  for (Command* w : fence_) let_go(*w);
  fence_.clear();
}

void IoWaits::let_go(Command& r) {
  const bool owns = r.fence_owner && ((r.fused() && r.sqe.opc == uint8_t(wire::IoOpcode::Compare)) ||
                                      std::holds_alternative<Command::FenceDrain>(r.steps));
  if (owns) r.fence_ns->fence.release();
  r.fence_owner = false;
  if (r.fence_waiting) r.fence_ns->fence.stop_waiting(r.fence_waiting);
}

}  // namespace nvtcp::target

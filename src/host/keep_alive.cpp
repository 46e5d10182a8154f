// SPDX-License-Identifier: Apache-2.0
// Keep Alive on the admin queue, from a timer on the admin thread, so it keeps going whatever
// the application's threads do.
#include <algorithm>

#include "host/controller_state.hpp"
#include "host/timing.hpp"
#include "util/log.hpp"
#include "wire/commands.hpp"

namespace nvtcp::host {

using namespace nvtcp::wire;

// When the next Keep Alive is due is read on the controller's clock; the reactor timer only wakes
// the thread to look. On the real clock it wakes at the due time itself; on a test's fake clock
// every millisecond (poll_period_ns), since nothing wakes the thread when the test steps it.
void Controller::State::arm_keep_alive() {
  uint32_t kato = opts.kato_ms;
  if (kato == 0 || discovery) return;
  const uint64_t interval_ns = detail::keep_alive_interval_ms(kato, opts.keep_alive_interval_ms) * detail::kNsPerMs;
  ka_due_ns = now_ns() + interval_ns;
  reactor->arm_timer(&ka_timer, clock->poll_period_ns(interval_ns));
}

void Controller::State::keep_alive(reactor::Timer* t) {
  State* st = static_cast<KaTimer*>(t)->st;
  if (!st->admin || st->admin->failed()) return;
  const uint64_t now = st->now_ns();
  if (now < st->ka_due_ns) {  // woken to look (fake clock), or early by a hair: not due yet
    st->reactor->arm_timer(&st->ka_timer, st->clock->poll_period_ns(st->ka_due_ns - now));
    return;
  }
  if (!st->ka_outstanding) {
    st->ka_outstanding = true;
    const detail::HostError refused =
        st->admin->submit(cmd::keep_alive(), nullptr, 0, false,
                          [](void* ctx, const Completion& c) {
                            auto* s = static_cast<State*>(ctx);
                            s->ka_outstanding = false;
                            if (!c.status.ok()) log::warn("Keep Alive failed: {}", status_name(c.status));
                          },
                          st);
    if (!refused.ok()) st->ka_outstanding = false;
  }
  st->arm_keep_alive();
}

}  // namespace nvtcp::host

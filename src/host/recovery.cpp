// SPDX-License-Identifier: Apache-2.0
// Controller recovery: after a lost admin queue or an I/O queue's reset request, reconnect every
// reconnect_delay_ms until ctrl_loss_tmo_ms, or give the controller up.
#include <string>

#include "host/controller_state.hpp"
#include "host/timing.hpp"
#include "util/log.hpp"

namespace nvtcp::host {

void Controller::State::recover(const std::string& why) {
  if (!opts.ctrl_loss_tmo_ms) {
    set_link_state(LinkState::Deleted);
    log::error("{} (controller {}): {}; reconnect is off (ctrl_loss_tmo 0)", trid.subnqn, cntlid_now.load(), why);
    return;
  }
  // The outage, and the first attempt's time, date from the loss: not from whenever closing
  // the old admin queue below lets go (it runs the reactor until the kernel has the socket back).
  const uint64_t lost_at = now_ns();
  set_link_state(LinkState::Resetting);
  reset_count.fetch_add(1, std::memory_order_relaxed);
  // The same outage rules as the I/O queues' (fast_io_fail_tmo is theirs alone); the delay
  // between attempts is waited out below, so only ctrl_loss_tmo is asked of it here.
  detail::Outage outage({opts.ctrl_loss_tmo_ms, -1, opts.reconnect_delay_ms});
  outage.lost(lost_at);
  const uint64_t delay_ns = uint64_t(opts.reconnect_delay_ms) * detail::kNsPerMs;
  uint64_t next_attempt_ns = lost_at + delay_ns;
  log::warn("{} (controller {}): resetting: {}; reconnecting every {} ms for up to {} ms", trid.subnqn,
            cntlid_now.load(), why, opts.reconnect_delay_ms, opts.ctrl_loss_tmo_ms);
  reactor->cancel_timer(&ka_timer);
  admin.reset();  // ends its outstanding commands with a path error
  ka_outstanding = false;
  for (unsigned attempt = 1; !stop.load(std::memory_order_relaxed); ++attempt) {
    wait_until(next_attempt_ns);
    if (stop.load(std::memory_order_relaxed)) return;
    const uint64_t now = now_ns();
    if (outage.ctrl_loss_passed(now)) {
      set_link_state(LinkState::Deleted);
      log::error("{}: no connection for {} ms (ctrl_loss_tmo): controller lost", trid.subnqn, outage.elapsed_ms(now));
      return;
    }
    HostError e;
    reset_requested.store(false, std::memory_order_release);
    // Events first, then the scan: a change after the scan's Identify is then reported.
    // The scan comes before the I/O queues reconnect (gen), so on_namespace_change tells
    // of a replaced namespace before held commands go out again.
    if (associate(false, e) && start_events(e) && scan_namespaces(nullptr, true, e) && refresh_ana(e)) {
      gen.fetch_add(1, std::memory_order_acq_rel);
      set_link_state(LinkState::Live);
      arm_keep_alive();
      log::info("{}: reconnected as controller {} after {} ms ({} attempts)", trid.subnqn, cntlid_now.load(),
                outage.elapsed_ms(now_ns()), attempt);
      return;
    }
    if (e.kind == HostError::Kind::WrongController) {
      // Said before the link is Deleted: whoever sees failed() finds the reason logged.
      log::error("{}: reconnect refused: {}: controller failed for good", trid.subnqn, e.message);
      set_link_state(LinkState::Deleted);
      admin.reset();
      return;
    }
    log::warn("{}: reconnect attempt {} failed: {}", trid.subnqn, attempt, e.message);
    admin.reset();
    next_attempt_ns = now_ns() + delay_ns;  // a delay after the failed attempt, as before
  }
}

}  // namespace nvtcp::host

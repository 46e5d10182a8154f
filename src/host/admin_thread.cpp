// SPDX-License-Identifier: Apache-2.0
// The controller's admin thread: its run loop, the setter every change of the association's
// state goes through, and the ways other threads reach the thread (post_to_admin,
// request_reset, abort_command). Bring-up, recovery, keep-alive and events are in files of
// their own; the run loop is what calls them.
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "host/controller_state.hpp"
#include "util/log.hpp"
#include "wire/commands.hpp"
#include "wire/fabrics.hpp"

namespace nvtcp::host {

using namespace nvtcp::wire;

const char* Controller::State::link_state_name(LinkState s) {
  switch (s) {
    case LinkState::Live: return "Live";
    case LinkState::Resetting: return "Resetting";
    case LinkState::Deleted: return "Deleted";
  }
  return "?";
}

void Controller::State::set_link_state(LinkState to) {
  const LinkState from = lstate.load(std::memory_order_relaxed);  // this thread is the only writer
  if (kCheckTransitions && !kLinkTransitions.allows(from, to))
    illegal_transition("controller link", link_state_name(from), link_state_name(to), "set_link_state");
  log::debug("{} (controller {}): {} -> {}", trid.subnqn, cntlid_now.load(), link_state_name(from),
             link_state_name(to));
  lstate.store(to, std::memory_order_release);
}

void Controller::State::request_reset(uint32_t generation, const std::string& why) {
  if (!opts.ctrl_loss_tmo_ms || generation != gen.load(std::memory_order_acquire)) return;
  {
    std::lock_guard lk(mu);
    if (!reset_requested.load()) reset_reason = why;
  }
  reset_requested.store(true, std::memory_order_release);
  post_to_admin([] {});  // wakes the admin thread
}

void Controller::State::abort_command(uint16_t sqid, uint16_t cid) {
  post_to_admin([this, sqid, cid] {
    if (link_state() != LinkState::Live || !admin) return;
    admin->submit(cmd::abort(sqid, cid), nullptr, 0, false,
                  [](void*, const Completion& c) {
                    // dw0 bit 0: 0 = the command was aborted, 1 = it was not.
                    log::info("Abort: {}", !c.status.ok()       ? status_name(c.status)
                                           : (c.dw0 & 1) == 0 ? std::string("command aborted")
                                                              : std::string("command not aborted"));
                  },
                  nullptr);
  });
}

void Controller::State::post_to_admin(std::function<void()> fn) {
  std::lock_guard lk(mu);
  if (reactor) reactor->post(std::move(fn));
}

void Controller::State::wait_ms(uint64_t ms) { wait_until(now_ns() + ms * 1000000ull); }

void Controller::State::wait_until(uint64_t until) {
  // Each turn re-reads the clock; poll_period_ns bounds the sleep so a fake clock's step is seen.
  while (!stop.load(std::memory_order_relaxed)) {
    uint64_t now = now_ns();
    if (now >= until) break;
    reactor->run_once(uint32_t(clock->poll_period_ns(std::min<uint64_t>(until - now, 50'000'000)) / 1000));
  }
}

Completion Controller::State::admin_sync(const Sqe& sqe, void* data, uint32_t len, bool to_controller) {
  struct Wait {
    bool done = false;
    Completion cpl;
  } w;
  Completion fail_cpl;
  fail_cpl.status = sc::TransportError;
  // A controller being destroyed sends nothing more: a scan or event still under way ends at
  // its next command instead of keeping ~Controller waiting for the whole of it.
  if (!admin || stop.load(std::memory_order_relaxed)) return fail_cpl;
  const HostError refused = admin->submit(sqe, data, len, to_controller,
                                          [](void* ctx, const Completion& c) {
                                            auto* wp = static_cast<Wait*>(ctx);
                                            wp->cpl = c;
                                            wp->done = true;
                                          },
                                          &w);
  if (!refused.ok()) return fail_cpl;
  // The command's own bound, and during connect() the bring-up's as a whole: a target that
  // answers each command just in time must not hold connect() for ever.
  const uint64_t deadline =
      std::min<uint64_t>(now_ns() + (uint64_t(opts.admin_timeout_ms) * 2 + 5000) * 1000000ull, bring_up_deadline_ns);
  while (!w.done) {
    if (now_ns() > deadline) admin->shutdown();  // ends w before it goes out of scope
    else reactor->run_once(uint32_t(clock->poll_period_ns(10'000'000) / 1000));
  }
  return w.cpl;
}

void Controller::State::run(std::promise<HostError>* connected) {
  admin_tid = std::this_thread::get_id();
  reactor::Reactor r(256);
  {
    std::lock_guard lk(mu);
    reactor = &r;
  }
  HostError e;
  // Connecting, CAP.TO for CSTS.RDY (associate() adds it once CAP is read) and the admin
  // commands after it: Identify, events, the namespace scan, the ANA log.
  bring_up_deadline_ns = now_ns() + (uint64_t(opts.connect_timeout_ms) + 2ull * opts.admin_timeout_ms +
                                     kBringUpCommandsMs) * 1000000ull;
  bool ok = associate(true, e) && start_events(e) && (discovery || scan_namespaces(nullptr, false, e)) &&
            refresh_ana(e);
  if (!ok && now_ns() > bring_up_deadline_ns)
    e = HostError::make(HostError::Kind::Timeout,
                        fmt::format("controller bring-up did not finish in time (last step: {})", e.message));
  bring_up_deadline_ns = UINT64_MAX;  // from now on each command has only its own bound
  if (ok) {
    gen.store(1, std::memory_order_release);
    set_link_state(LinkState::Live);
    arm_keep_alive();
  }
  connected->set_value(ok ? HostError() : e);  // connected is gone after this
  while (ok && !stop.load(std::memory_order_relaxed)) {
    r.run_once(50000);
    if (stop.load(std::memory_order_relaxed)) continue;
    if (link_state() == LinkState::Deleted) {
      for (auto& w : rescan_waiters) w->finish(HostError::make(HostError::Kind::Transport, "the controller is lost"));
      rescan_waiters.clear();
      continue;
    }
    if (!admin || admin->failed()) {
      recover(admin ? "admin queue: " + admin->error() : "admin queue lost");
    } else if (reset_requested.exchange(false, std::memory_order_acq_rel)) {
      std::string why;
      {
        std::lock_guard lk(mu);
        why = reset_reason;
      }
      recover(why);
    } else if (link_state() == LinkState::Live) {
      service_events();
    }
  }
  r.cancel_timer(&ka_timer);
  admin.reset();
  for (auto& w : rescan_waiters)
    w->finish(HostError::make(HostError::Kind::Transport, "the controller is shutting down"));
  rescan_waiters.clear();
  std::lock_guard lk(mu);
  reactor = nullptr;
}

}  // namespace nvtcp::host

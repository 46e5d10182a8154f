// Keep Alive on the admin queue, from a timer on the admin thread, so it keeps going whatever
// the application's threads do.
#include <algorithm>

#include "host/controller_state.hpp"
#include "host/timing.hpp"
#include "util/log.hpp"
#include "wire/commands.hpp"

namespace nvtcp::host {

using namespace nvtcp::wire;

void Controller::State::arm_keep_alive() {
  uint32_t kato = opts.kato_ms;
  if (kato == 0 || discovery) return;
  reactor->arm_timer(&ka_timer, detail::keep_alive_interval_ms(kato, opts.keep_alive_interval_ms) * 1000000ull);
}

void Controller::State::keep_alive(reactor::Timer* t) {
  State* st = static_cast<KaTimer*>(t)->st;
  if (!st->admin || st->admin->failed()) return;
  if (!st->ka_outstanding) {
    st->ka_outstanding = true;
    int rc = st->admin->submit(cmd::keep_alive(), nullptr, 0, false,
                               [](void* ctx, const Completion& c) {
                                 auto* s = static_cast<State*>(ctx);
                                 s->ka_outstanding = false;
                                 if (!c.status.ok()) log::warn("Keep Alive failed: {}", status_name(c.status));
                               },
                               st);
    if (rc != 0) st->ka_outstanding = false;
  }
  st->arm_keep_alive();
}

}  // namespace nvtcp::host

// SPDX-License-Identifier: Apache-2.0
// The listeners hosts reach one subsystem through, and the subsystem as seen through each of
// them: the ANA state of each of its groups there, and the I/O its hosts did through it.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "nvtcp/log_pages.hpp"
#include "target/io_metrics.hpp"

namespace nvtcp::target {

// A subsystem as seen through one listener (port): the ANA state of each of its groups there,
// and the I/O its hosts did through it. Made on the first use of that port; a controller holds
// a shared_ptr to its port's, so an I/O command reads its group's state with one relaxed load
// of a byte and counts itself into its reactor's slot, with no lock. The subsystem lets go of it
// when the listener is taken from it (remove()); controllers that came in through it
// keep it until they go. States change on the control path only.
struct SubsystemPort {
  SubsystemPort(uint32_t groups, uint32_t reactors) : states(std::make_unique<std::atomic<uint8_t>[]>(groups + 1)) {
    for (uint32_t g = 0; g <= groups; ++g) states[g].store(uint8_t(nvme::AnaState::Optimized), std::memory_order_relaxed);
    io.init(std::max(1u, reactors));
  }
  std::unique_ptr<std::atomic<uint8_t>[]> states;  // by ANAGRPID (0 unused)
  // Log 0Ch's CHGCNT for this port: one more at every change of a state it reports.
  std::atomic<uint64_t> change_count{0};
  IoMetrics io;  // the subsystem's I/O through this listener (the metrics endpoint)
  nvme::AnaState state(uint32_t grp) const { return nvme::AnaState(states[grp].load(std::memory_order_relaxed)); }
};

// Listeners are named by port ID (0: the discovery-only port). The discovery subsystem is
// bound to every listener; the others to those build_state or RPC gives them (Connect and
// the discovery log read this, under a mutex; never the I/O path).
class SubsystemListeners {
 public:
  // groups: the subsystem's ANA groups (1 .. groups); reactors: one I/O counter slot each.
  SubsystemListeners(uint32_t groups, uint32_t reactors) : groups_(groups), reactors_(std::max(1u, reactors)) {}

  // Whether hosts reach the subsystem through the listener with this port ID.
  bool reachable_through(uint16_t portid) const;
  bool bound_to_every_listener() const;
  void bind(std::vector<uint16_t> portids);
  bool add(uint16_t portid);  // false: it was reachable through it already
  // false: it was not. One bound to every listener is bound to the others of every_portid after.
  // The listener's states and counters (port()) go with it.
  bool remove(uint16_t portid, const std::vector<uint16_t>& every_portid);

  // The subsystem through the listener with port ID portid, made on first use; null when the
  // subsystem is not reachable through that listener (it was taken away meanwhile).
  std::shared_ptr<SubsystemPort> port(uint16_t portid);
  // The one of portid if there is one (null: no host came in, and no state was set, through it).
  std::shared_ptr<const SubsystemPort> find_port(uint16_t portid) const;
  // Sets group grp (0: every group) to state through listener portid; returns the groups
  // whose state changed (Subsystem::set_ana_state tells the controllers).
  std::vector<uint32_t> set_ana_state(uint16_t portid, uint32_t grp, nvme::AnaState state);
  // What log 0Ch reports changed for every port (a namespace moved to another group): each
  // port's CHGCNT goes up.
  void note_change();

 private:
  const uint32_t groups_, reactors_;
  // portids_, every_listener_ and ports_: one lock, so that a port is made only while the
  // listener is the subsystem's, and goes in the same step as the listener.
  mutable std::mutex mu_;
  bool every_listener_ = true;
  std::vector<uint16_t> portids_;  // when not every_listener_
  std::map<uint16_t, std::shared_ptr<SubsystemPort>> ports_;
};

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
#include "target/subsystem_listeners.hpp"

namespace nvtcp::target {

bool SubsystemListeners::reachable_through(uint16_t portid) const {
  std::lock_guard lk(mu_);
  return every_listener_ || std::find(portids_.begin(), portids_.end(), portid) != portids_.end();
}

bool SubsystemListeners::bound_to_every_listener() const {
  std::lock_guard lk(mu_);
  return every_listener_;
}

void SubsystemListeners::bind(std::vector<uint16_t> portids) {
  std::lock_guard lk(mu_);
  every_listener_ = false;
  portids_ = std::move(portids);
}

bool SubsystemListeners::add(uint16_t portid) {
  std::lock_guard lk(mu_);
  if (every_listener_ || std::find(portids_.begin(), portids_.end(), portid) != portids_.end()) return false;
  portids_.push_back(portid);
  return true;
}

bool SubsystemListeners::remove(uint16_t portid, const std::vector<uint16_t>& every_portid) {
  std::lock_guard lk(mu_);
  if (every_listener_) {
    every_listener_ = false;
    portids_ = every_portid;
  }
  auto it = std::find(portids_.begin(), portids_.end(), portid);
  if (it == portids_.end()) return false;
  portids_.erase(it);
  ports_.erase(portid);
  return true;
}

std::shared_ptr<SubsystemPort> SubsystemListeners::port(uint16_t portid) {
  std::lock_guard lk(mu_);
  if (!every_listener_ && std::find(portids_.begin(), portids_.end(), portid) == portids_.end()) return nullptr;
  auto& p = ports_[portid];
  if (!p) p = std::make_shared<SubsystemPort>(groups_, reactors_);
  return p;
}

std::shared_ptr<const SubsystemPort> SubsystemListeners::find_port(uint16_t portid) const {
  std::lock_guard lk(mu_);
  auto it = ports_.find(portid);
  return it == ports_.end() ? nullptr : it->second;
}

void SubsystemListeners::note_change() {
  std::lock_guard lk(mu_);
  for (auto& [portid, p] : ports_) p->change_count.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint32_t> SubsystemListeners::set_ana_state(uint16_t portid, uint32_t grp, nvme::AnaState state) {
  std::vector<uint32_t> changed;
  const std::shared_ptr<SubsystemPort> p = port(portid);
  if (!p) return changed;  // the listener was taken away meanwhile
  const uint32_t first = grp ? grp : 1, last = grp ? grp : groups_;
  for (uint32_t g = first; g <= last && g <= groups_; ++g)
    if (p->states[g].exchange(uint8_t(state), std::memory_order_relaxed) != uint8_t(state)) changed.push_back(g);
  if (!changed.empty()) p->change_count.fetch_add(1, std::memory_order_relaxed);
  return changed;
}

}  // namespace nvtcp::target

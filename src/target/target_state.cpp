// SPDX-License-Identifier: Apache-2.0
#include "target/target_state.hpp"

#include <fmt/format.h>

#include "target/controller.hpp"

namespace nvtcp::target {

std::shared_ptr<HostBudget> TargetState::host_budget(const std::string& principal) {
  std::lock_guard lk(hosts_mu_);
  if (auto b = hosts_[principal].lock()) return b;
  // Forget hosts that have gone, so that made-up NQNs cannot grow the table for good.
  for (auto it = hosts_.begin(); it != hosts_.end();) it = it->second.expired() ? hosts_.erase(it) : std::next(it);
  auto b = std::make_shared<HostBudget>();
  b->principal = principal;
  hosts_[principal] = b;
  return b;
}

WorkerPool& TargetState::workers() {
  // Two threads: a burst of hosts authenticating does not queue behind one exponentiation, and
  // the reactors keep the other cores. One source address runs on one of them at a time: a
  // stranger's flood of key exchanges (which it can cause before proving anything) holds one
  // core at most, and the other serves every other address.
  std::call_once(workers_once_, [this] { workers_ = std::make_unique<WorkerPool>(2, "nvtcp-auth", 1); });
  return *workers_;
}

std::vector<std::shared_ptr<Subsystem>> TargetState::subsystems() const {
  std::lock_guard lk(table_mu_);
  return subsystems_;
}

std::shared_ptr<Subsystem> TargetState::find_subsystem(const std::string& nqn) const {
  if (nqn == nvme::kDiscoveryNqn) return discovery;
  std::lock_guard lk(table_mu_);
  for (auto& s : subsystems_)
    if (s->nqn() == nqn) return s;
  return nullptr;
}

bool TargetState::add_subsystem(std::shared_ptr<Subsystem> sub) {
  std::lock_guard lk(table_mu_);
  if (sub->nqn() == nvme::kDiscoveryNqn) return false;
  for (auto& s : subsystems_)
    if (s->nqn() == sub->nqn()) return false;
  subsystems_.push_back(std::move(sub));
  return true;
}

std::shared_ptr<Subsystem> TargetState::take_subsystem(const std::string& nqn) {
  std::lock_guard lk(table_mu_);
  for (auto it = subsystems_.begin(); it != subsystems_.end(); ++it)
    if ((*it)->nqn() == nqn) {
      auto s = std::move(*it);
      subsystems_.erase(it);
      return s;
    }
  return nullptr;
}

std::vector<Listener> TargetState::listeners() const {
  std::lock_guard lk(table_mu_);
  return listeners_;
}

std::optional<Listener> TargetState::find_listener(const std::string& address, uint16_t port) const {
  std::lock_guard lk(table_mu_);
  for (const auto& l : listeners_)
    if (l.address == address && l.port == port) return l;
  return std::nullopt;
}

uint16_t TargetState::next_portid() {
  std::lock_guard lk(table_mu_);
  return next_portid_++;
}

void TargetState::add_listener(Listener l) {
  std::lock_guard lk(table_mu_);
  listeners_.push_back(l);
}

void TargetState::set_listener_port(uint16_t portid, uint16_t port) {
  std::lock_guard lk(table_mu_);
  for (auto& l : listeners_)
    if (l.portid == portid) l.port = port;
}

bool TargetState::remove_listener(uint16_t portid) {
  std::lock_guard lk(table_mu_);
  for (auto it = listeners_.begin(); it != listeners_.end(); ++it)
    if (it->portid == portid) {
      listeners_.erase(it);
      return true;
    }
  return false;
}

Listener listener_of(const ListenerConfig& l) {
  return {l.address, l.port, 0, l.address.find(':') != std::string::npos, l.wildcard(), l.tls_required};
}

std::string build_state(const TargetConfig& cfg, TargetState& st, const DeviceFactory& factory) {
  st.config = cfg;
  SubsystemConfig dc;
  dc.nqn = nvme::kDiscoveryNqn;
  dc.serial = "NVTCP-DISCOVERY";
  dc.model = "nvtcp discovery";
  st.discovery = std::make_shared<Subsystem>(dc, true, cfg.cores);
  std::vector<Listener> listeners;
  for (const auto& l : cfg.listeners) {
    listeners.push_back(listener_of(l));
    listeners.back().portid = st.next_portid();
    st.add_listener(listeners.back());
  }
  for (const auto& c : cfg.rbd_clusters)  // finalize_config checked that each name is unique
    st.rbd_clusters.add(c);
  // An RBD device of a registered cluster connects with that cluster's settings.
  auto device_of = [&](NamespaceConfig nc, std::string& err) -> std::unique_ptr<backend::BlockDevice> {
    if (nc.type == "rbd" && !st.rbd_clusters.resolve(nc.rbd, err)) return nullptr;
    return make_device(nc, cfg.cores, factory, err);
  };
  for (const auto& sc : cfg.subsystems) {
    auto sub = std::make_shared<Subsystem>(sc, false, cfg.cores);
    // Bound to the listeners it names, or to every one configured and the discovery port (0);
    // not to those RPC adds later, which belong to the subsystems they are added to.
    std::vector<uint16_t> bound;
    if (sc.listeners.empty()) {
      bound.push_back(0);
      for (const Listener& l : listeners) bound.push_back(l.portid);
    }
    for (const auto& name : sc.listeners)  // finalize_config checked that every name is a listener
      if (const int i = listener_index(cfg, name); i >= 0) bound.push_back(listeners[size_t(i)].portid);
    sub->listeners().bind(std::move(bound));
    for (const auto& nc : sc.namespaces) {
      std::string err;
      auto device = device_of(nc, err);
      if (!device) return fmt::format("subsystem {} namespace {}: {}", sc.nqn, nc.nsid, err);
      const std::string device_uuid = configured_device_uuid(nc, sc.nqn, device.get());
      auto ns = make_namespace(cfg, sc.nqn, nc, std::move(device), err, device_uuid);
      if (!ns) return fmt::format("subsystem {} namespace {}: {}", sc.nqn, nc.nsid, err);
      if (!sub->add_namespace(std::move(ns)))
        return fmt::format("subsystem {} namespace {}: NSID taken or above max_namespaces", sc.nqn, nc.nsid);
      NamespaceConfig bdev = nc;  // the identifiers given are the namespace's; the device has its UUID
      bdev.nguid.clear();
      bdev.eui64.clear();
      bdev.uuid = device_uuid;
      st.bdevs.add(bdev, nullptr, sc.nqn, nc.nsid);
    }
    if (!st.add_subsystem(std::move(sub))) return fmt::format("subsystem {} is listed twice", sc.nqn);
  }
  for (const auto& b : cfg.bdevs) {
    std::string err;
    auto device = device_of(b, err);
    if (!device) return fmt::format("bdev {}: {}", b.name, err);
    st.bdevs.add(b, std::move(device));
  }
  return {};
}

}  // namespace nvtcp::target

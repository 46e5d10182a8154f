// SPDX-License-Identifier: Apache-2.0
// Target::metrics(): the snapshot the metrics endpoint renders (control path).
#include "target/metrics.hpp"

#include <map>
#include <tuple>

#include <fmt/format.h>

#include "target/controller.hpp"
#include "target/target.hpp"

namespace nvtcp::target {

namespace {
std::string host_port(const std::string& address, uint16_t port) {
  return address.find(':') != std::string::npos ? fmt::format("[{}]:{}", address, port)
                                                 : fmt::format("{}:{}", address, port);
}
}  // namespace

TargetMetrics Target::metrics() {
  TargetMetrics m;
  if (!started_) return m;
  {
    // No namespace is destroyed while it is read: removal holds this lock until it is gone.
    std::lock_guard lk(control_mu_);
    for (const auto& s : state_->subsystems()) {
      const std::vector<Namespace*> nss = s->namespaces();
      m.subsystems.push_back({s->nqn(), uint64_t(s->controller_count()), uint64_t(nss.size())});
      for (const Namespace* ns : nss) {
        TargetMetrics::NamespaceEntry e;
        e.subsystem = s->nqn();
        e.nsid = ns->nsid;
        e.name = ns->name;
        e.size_bytes = ns->blocks.load(std::memory_order_relaxed) * ns->block_size;
        e.outstanding = ns->holds.total();
        e.io = ns->metrics.totals();
        m.namespaces.push_back(std::move(e));
      }
    }
  }
  // Queues past Connect, by subsystem and listener (asked on each reactor).
  std::map<std::tuple<std::string, uint16_t>, TargetMetrics::ListenerEntry> by_listener;
  for (const ConnectionInfo& c : connection_info()) {
    if (!c.connected) continue;
    TargetMetrics::ListenerEntry& e = by_listener[{c.subnqn, c.portid}];
    e.subsystem = c.subnqn;
    if (c.qid == 0) ++e.admin_queues;
    else ++e.io_queues;
  }
  const std::vector<Listener> listeners = state_->listeners();
  for (auto& [key, e] : by_listener) {
    const uint16_t portid = std::get<1>(key);
    for (const Listener& l : listeners)
      if (l.portid == portid) e.listener = host_port(l.address, l.port);
    if (e.listener.empty() && portid == 0 && discovery_port())
      e.listener = host_port(cfg_.listeners[0].address, discovery_port());
    m.listeners.push_back(std::move(e));
  }
  const std::vector<double> busy = busy_seconds_per_reactor(), cpu = cpu_seconds_per_reactor();
  const std::vector<uint64_t> ios = io_counts_per_reactor();
  for (size_t i = 0; i < ios.size(); ++i) m.reactors.push_back({busy[i], cpu[i], ios[i]});
  const ResourceUsage& u = state_->usage;
  m.connections = u.connections.load(std::memory_order_relaxed);
  m.connections_accepted = accepted_.load(std::memory_order_relaxed);
  m.connections_refused = u.refused_connections.load(std::memory_order_relaxed);
  m.buffer_bytes = u.buffer_bytes.load(std::memory_order_relaxed);
  m.memory_waits = u.memory_waits.load(std::memory_order_relaxed);
  return m;
}

}  // namespace nvtcp::target

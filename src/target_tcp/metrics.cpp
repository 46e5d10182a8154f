// SPDX-License-Identifier: Apache-2.0
// Target::metrics(): the snapshot the metrics endpoint renders (control path).
#include "target/metrics.hpp"

#include <map>
#include <tuple>

#include <fmt/format.h>

#include "target/controller.hpp"
#include "target_tcp/target.hpp"

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
  // A subsystem through each listener: its queues, and the I/O of an NVM subsystem.
  std::map<std::tuple<std::string, uint16_t>, TargetMetrics::ListenerEntry> by_listener;
  const std::vector<Listener> listeners = state_->listeners();
  std::vector<uint16_t> portids;
  for (const Listener& l : listeners) portids.push_back(l.portid);
  if (discovery_port()) portids.push_back(0);
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
      if (s->is_discovery()) continue;
      for (uint16_t portid : portids) {
        if (!s->listeners().reachable_through(portid)) continue;
        TargetMetrics::ListenerEntry& e = by_listener[{s->nqn(), portid}];
        e.io_counted = true;
        if (const auto port = s->listeners().find_port(portid)) e.io = port->io.totals();
      }
    }
  }
  // Queues past Connect, and the commands on them (asked on each reactor).
  for (const ConnectionInfo& c : connection_info()) {
    if (!c.connected) continue;
    TargetMetrics::ListenerEntry& e = by_listener[{c.subnqn, c.portid}];
    if (c.qid == 0) {
      ++e.admin_queues;
      continue;
    }
    ++e.io_queues;
    for (size_t st = 0; st < c.request_states.size(); ++st)
      if (TcpRequest::State(st) != TcpRequest::State::Free) e.outstanding += c.request_states[st];
  }
  for (auto& [key, e] : by_listener) {
    const auto& [subnqn, portid] = key;
    e.subsystem = subnqn;
    for (const Listener& l : listeners)
      if (l.portid == portid) e.listener = host_port(l.address, l.port);
    if (e.listener.empty() && portid == 0 && discovery_port())
      e.listener = host_port(cfg_.listeners[0].address, discovery_port());
    if (e.listener.empty()) continue;  // taken away while it was being read
    m.listeners.push_back(std::move(e));
  }
  const std::vector<double> busy = busy_seconds_per_reactor(), cpu = cpu_seconds_per_reactor();
  const std::vector<uint64_t> ios = io_counts_per_reactor();
  for (size_t i = 0; i < ios.size(); ++i) m.reactors.push_back({busy[i], cpu[i], ios[i]});
  const RequestStateCounts requests = request_states();
  const RequestStateEntries request_moves = request_entries();
  for (size_t i = 0; i < requests.size(); ++i)
    m.request_states.push_back({request_state_name(TcpRequest::State(i)), requests[i], request_moves[i]});
  const CommandStateCounts commands = command_states();
  const CommandStateEntries command_moves = command_entries();
  for (size_t i = 0; i < commands.size(); ++i)
    m.command_states.push_back({command_state_name(Command::State(i)), commands[i], command_moves[i]});
  const ResourceUsage& u = state_->usage;
  m.connections = u.connections.load(std::memory_order_relaxed);
  m.connections_accepted = sockets_.accepted();
  m.connections_refused = u.refused_connections.load(std::memory_order_relaxed);
  m.buffer_bytes = u.buffer_bytes.load(std::memory_order_relaxed);
  m.memory_waits = u.memory_waits.load(std::memory_order_relaxed);
  return m;
}

}  // namespace nvtcp::target

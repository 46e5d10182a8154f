// SPDX-License-Identifier: Apache-2.0
#include "control/target_metrics.hpp"

#include <array>

#include <fmt/format.h>

#include "util/prometheus.hpp"

namespace nvtcp::control {

namespace {

using prometheus::Labels;
using prometheus::Type;
using Entry = target::TargetMetrics::NamespaceEntry;

Labels namespace_labels(const Entry& e) {
  return {{"subsystem", e.subsystem}, {"nsid", fmt::format("{}", e.nsid)}, {"bdev", e.name}};
}

Labels listener_labels(const target::TargetMetrics::ListenerEntry& l) {
  return {{"subsystem", l.subsystem}, {"listener", l.listener}};
}

// Subsystems, and each namespace's I/O.
void render_namespaces(prometheus::TextWriter& w, const target::TargetMetrics& m) {
  const auto& nss = m.namespaces;
  auto per_namespace = [&](const char* name, Type type, const char* help, auto get) {
    w.family(name, type, help);
    for (const Entry& e : nss) w.sample(namespace_labels(e), uint64_t(get(e)));
  };

  w.family("nvtcp_subsystem_controllers", Type::Gauge, "Controllers of the subsystem (one per host association).");
  for (const auto& s : m.subsystems) w.sample({{"subsystem", s.nqn}}, s.controllers);
  w.family("nvtcp_subsystem_namespaces", Type::Gauge, "Active namespaces of the subsystem.");
  for (const auto& s : m.subsystems) w.sample({{"subsystem", s.nqn}}, s.namespaces);
  w.family("nvtcp_subsystem_queues", Type::Gauge,
           "Connected queues (TCP connections past Connect) of the subsystem, by the listener they came in on.");
  for (const auto& l : m.listeners) {
    w.sample({{"subsystem", l.subsystem}, {"listener", l.listener}, {"queue", "admin"}}, l.admin_queues);
    w.sample({{"subsystem", l.subsystem}, {"listener", l.listener}, {"queue", "io"}}, l.io_queues);
  }

  per_namespace("nvtcp_namespace_reads_total", Type::Counter, "Read commands completed with success.",
                [](const Entry& e) { return e.io.reads; });
  per_namespace("nvtcp_namespace_writes_total", Type::Counter, "Write commands completed with success.",
                [](const Entry& e) { return e.io.writes; });
  per_namespace("nvtcp_namespace_read_bytes_total", Type::Counter, "Bytes read by successful Read commands.",
                [](const Entry& e) { return e.io.read_bytes; });
  per_namespace("nvtcp_namespace_write_bytes_total", Type::Counter, "Bytes written by successful Write commands.",
                [](const Entry& e) { return e.io.write_bytes; });
  w.family("nvtcp_namespace_errors_total", Type::Counter,
           "Commands on the namespace that completed with an error status, by opcode (read, write, other).");
  for (const Entry& e : nss) {
    for (auto [op, n] : {std::pair{"read", e.io.read_errors}, std::pair{"write", e.io.write_errors},
                         std::pair{"other", e.io.other_errors}}) {
      Labels l = namespace_labels(e);
      l.emplace_back("op", op);
      w.sample(l, n);
    }
  }
  const auto bounds = latency_bounds_seconds();
  w.family("nvtcp_namespace_read_latency_seconds", Type::Histogram,
           "Successful Read commands, from the reactor turn their capsule arrived in to the turn the socket took their response.");
  for (const Entry& e : nss)
    w.histogram(namespace_labels(e), bounds, e.io.read_latency, double(e.io.read_latency_ns) / 1e9);
  w.family("nvtcp_namespace_write_latency_seconds", Type::Histogram,
           "Successful Write commands, from the reactor turn their capsule arrived in to the turn the socket took their response.");
  for (const Entry& e : nss)
    w.histogram(namespace_labels(e), bounds, e.io.write_latency, double(e.io.write_latency_ns) / 1e9);
  per_namespace("nvtcp_namespace_outstanding_commands", Type::Gauge,
                "Commands on the namespace now, from their parse to their release (queue depth).",
                [](const Entry& e) { return e.outstanding; });
  per_namespace("nvtcp_namespace_size_bytes", Type::Gauge, "Size of the namespace.",
                [](const Entry& e) { return e.size_bytes; });
}

// The same I/O figures for each subsystem through each listener it is reachable through.
void render_listeners(prometheus::TextWriter& w, const target::TargetMetrics& m) {
  const auto bounds = latency_bounds_seconds();
  using ListenerEntry = target::TargetMetrics::ListenerEntry;
  auto per_listener = [&](const char* name, Type type, const char* help, auto get) {
    w.family(name, type, help);
    for (const ListenerEntry& l : m.listeners)
      if (l.io_counted) w.sample(listener_labels(l), uint64_t(get(l)));
  };
  per_listener("nvtcp_listener_reads_total", Type::Counter,
               "Read commands completed with success, by the subsystem and the listener their host came in on.",
               [](const ListenerEntry& l) { return l.io.reads; });
  per_listener("nvtcp_listener_writes_total", Type::Counter,
               "Write commands completed with success, by the subsystem and the listener their host came in on.",
               [](const ListenerEntry& l) { return l.io.writes; });
  per_listener("nvtcp_listener_read_bytes_total", Type::Counter, "Bytes read by successful Read commands, by listener.",
               [](const ListenerEntry& l) { return l.io.read_bytes; });
  per_listener("nvtcp_listener_write_bytes_total", Type::Counter,
               "Bytes written by successful Write commands, by listener.",
               [](const ListenerEntry& l) { return l.io.write_bytes; });
  w.family("nvtcp_listener_errors_total", Type::Counter,
           "I/O commands that completed with an error status (an ANA status among them), by listener and opcode.");
  for (const ListenerEntry& l : m.listeners) {
    if (!l.io_counted) continue;
    for (auto [op, n] : {std::pair{"read", l.io.read_errors}, std::pair{"write", l.io.write_errors},
                         std::pair{"other", l.io.other_errors}}) {
      Labels labels = listener_labels(l);
      labels.emplace_back("op", op);
      w.sample(labels, n);
    }
  }
  w.family("nvtcp_listener_read_latency_seconds", Type::Histogram,
           "Successful Read commands by listener, timed as nvtcp_namespace_read_latency_seconds.");
  for (const ListenerEntry& l : m.listeners)
    if (l.io_counted) w.histogram(listener_labels(l), bounds, l.io.read_latency, double(l.io.read_latency_ns) / 1e9);
  w.family("nvtcp_listener_write_latency_seconds", Type::Histogram,
           "Successful Write commands by listener, timed as nvtcp_namespace_write_latency_seconds.");
  for (const ListenerEntry& l : m.listeners)
    if (l.io_counted) w.histogram(listener_labels(l), bounds, l.io.write_latency, double(l.io.write_latency_ns) / 1e9);
  per_listener("nvtcp_listener_outstanding_commands", Type::Gauge,
               "Commands on the I/O queues that came in on the listener now, from capsule to response sent (queue depth).",
               [](const ListenerEntry& l) { return l.outstanding; });
}

// The reactors, the requests and commands by state, connections and memory.
void render_process(prometheus::TextWriter& w, const target::TargetMetrics& m) {
  w.family("nvtcp_reactor_busy_seconds_total", Type::Counter,
           "Time the reactor spent in loop turns that had work (the rest it polled or slept idle).");
  for (size_t i = 0; i < m.reactors.size(); ++i) w.sample({{"reactor", fmt::format("{}", i)}}, m.reactors[i].busy_seconds);
  w.family("nvtcp_reactor_cpu_seconds_total", Type::Counter, "CPU time (user and system) of the reactor's thread.");
  for (size_t i = 0; i < m.reactors.size(); ++i) w.sample({{"reactor", fmt::format("{}", i)}}, m.reactors[i].cpu_seconds);
  w.family("nvtcp_reactor_io_commands_total", Type::Counter, "Commands the reactor completed on I/O queues (their Connect included).");
  for (size_t i = 0; i < m.reactors.size(); ++i) w.sample({{"reactor", fmt::format("{}", i)}}, m.reactors[i].ios);

  using StateEntry = target::TargetMetrics::StateEntry;
  auto per_state = [&](const char* name, Type type, const char* help, const std::vector<StateEntry>& states,
                       auto get) {
    w.family(name, type, help);
    for (const StateEntry& e : states) w.sample({{"state", e.state}}, uint64_t(get(e)));
  };
  per_state("nvtcp_requests", Type::Gauge,
            "Requests of every connection (closed ones still in a device included) by transport state now.",
            m.request_states, [](const StateEntry& e) { return e.now; });
  per_state("nvtcp_request_state_entries_total", Type::Counter,
            "Times requests entered each transport state since start.", m.request_states,
            [](const StateEntry& e) { return e.entered; });
  per_state("nvtcp_commands", Type::Gauge,
            "Those requests' commands by command-layer state now (Idle: the transport holds them).", m.command_states,
            [](const StateEntry& e) { return e.now; });
  per_state("nvtcp_command_state_entries_total", Type::Counter,
            "Times commands entered each command-layer state since start (waits: a fence, the device, a worker...).",
            m.command_states, [](const StateEntry& e) { return e.entered; });

  w.family("nvtcp_connections", Type::Gauge, "TCP connections open now, in any state.");
  w.sample({}, m.connections);
  w.family("nvtcp_connections_accepted_total", Type::Counter, "TCP connections accepted since start.");
  w.sample({}, m.connections_accepted);
  w.family("nvtcp_connections_refused_total", Type::Counter,
           "TCP connections closed at accept for being over a connection limit.");
  w.sample({}, m.connections_refused);
  w.family("nvtcp_buffer_bytes", Type::Gauge, "Memory held by request data buffers now.");
  w.sample({}, m.buffer_bytes);
  w.family("nvtcp_memory_waits_total", Type::Counter, "Commands that had to wait for buffer memory.");
  w.sample({}, m.memory_waits);
}

}  // namespace

std::string render_target_metrics(const target::TargetMetrics& m) {
  prometheus::TextWriter w;
  render_namespaces(w, m);
  render_listeners(w, m);
  render_process(w, m);
  return w.take();
}

}  // namespace nvtcp::control

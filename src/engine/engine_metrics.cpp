// SPDX-License-Identifier: Apache-2.0
#include "engine/engine_metrics.hpp"

#include <fmt/format.h>

#include "util/prometheus.hpp"

namespace nvtcp::engine {

namespace {

using prometheus::Labels;
using prometheus::Type;

Labels core_labels(size_t i, const EngineCoreStats& c) {
  return {{"core", fmt::format("{}", i)}, {"cpu", c.cpu >= 0 ? fmt::format("{}", c.cpu) : std::string("any")}};
}

}  // namespace

std::string render_engine_metrics(const EngineStats& s) {
  prometheus::TextWriter w;
  auto one = [&](const char* name, Type type, const char* help, auto value) {
    w.family(name, type, help);
    w.sample({}, value);
  };
  auto per_core = [&](const char* name, Type type, const char* help, auto get) {
    w.family(name, type, help);
    for (size_t i = 0; i < s.cores.size(); ++i) w.sample(core_labels(i, s.cores[i]), get(s.cores[i]));
  };
  auto per_remote = [&](const char* name, Type type, const char* help, auto get) {
    w.family(name, type, help);
    for (const auto& r : s.remotes) w.sample({{"subsystem", r.subnqn}}, get(r));
  };

  one("nvtcp_engine_applications", Type::Gauge, "Applications attached now (those whose queues are draining included).",
      uint64_t(s.applications));
  one("nvtcp_engine_attaches_total", Type::Counter, "Applications attached since start.", s.attached);
  w.family("nvtcp_engine_attaches_refused_total", Type::Counter,
           "Attach requests refused, by reason: a limit of the engine, or another (unknown subsystem, bad request).");
  w.sample({{"reason", "limit"}}, s.refused_for_limits);
  // The two are read one after the other while attaches go on: never below zero.
  w.sample({{"reason", "other"}}, s.refused > s.refused_for_limits ? s.refused - s.refused_for_limits : 0);
  one("nvtcp_engine_mapped_bytes", Type::Gauge, "Shared memory regions of the applications attached now.",
      s.mapped_bytes);
  one("nvtcp_engine_admin_buffer_bytes", Type::Gauge, "Admin data buffers held now for forwarded admin commands.",
      s.admin_buffer_bytes);
  one("nvtcp_engine_admin_buffer_peak_bytes", Type::Gauge, "The most admin data buffer memory ever held at once.",
      s.admin_buffer_peak_bytes);
  one("nvtcp_engine_admin_in_flight_peak", Type::Gauge,
      "The most admin commands one application ever had forwarded at once.", uint64_t(s.admin_in_flight_peak));
  one("nvtcp_engine_doorbell_hangups_total", Type::Counter,
      "Applications detached for hanging up their doorbell-notice pipe.", s.broken_doorbells);
  one("nvtcp_engine_ublk_requests_total", Type::Counter, "Block requests the ublk devices served.", s.ublk_requests);
  one("nvtcp_engine_control_cpu_seconds_total", Type::Counter,
      "CPU time (user and system) of the control thread (attaches, admin queues, lifelines).", s.control_cpu_seconds);
  one("nvtcp_engine_control_wakeups_total", Type::Counter, "Times the control thread woke.", s.control_wakeups);

  per_core("nvtcp_engine_core_busy_seconds_total", Type::Counter,
           "Time the engine core spent in turns that moved a command or a completion (the rest it polled idle or slept).",
           [](const EngineCoreStats& c) { return c.busy_seconds; });
  per_core("nvtcp_engine_core_cpu_seconds_total", Type::Counter,
           "CPU time (user and system) of the engine core's thread, idle spinning included.",
           [](const EngineCoreStats& c) { return c.cpu_seconds; });
  per_core("nvtcp_engine_core_queues", Type::Gauge, "Application I/O queues placed on the engine core now.",
           [](const EngineCoreStats& c) { return uint64_t(c.queues); });
  per_core("nvtcp_engine_core_in_flight_commands", Type::Gauge,
           "The engine core's commands on the remote controllers now (queue depth).",
           [](const EngineCoreStats& c) { return uint64_t(c.in_flight); });
  per_core("nvtcp_engine_core_commands_forwarded_total", Type::Counter,
           "I/O commands the engine core took from application queues and sent to a remote controller.",
           [](const EngineCoreStats& c) { return c.forwarded; });
  per_core("nvtcp_engine_core_completions_total", Type::Counter,
           "Completions the engine core posted to application queues.",
           [](const EngineCoreStats& c) { return c.completed; });
  per_core("nvtcp_engine_core_completions_dropped_total", Type::Counter,
           "Answers of the remote controllers for applications that were gone.",
           [](const EngineCoreStats& c) { return c.dropped; });
  per_core("nvtcp_engine_core_commands_refused_total", Type::Counter,
           "I/O commands the engine core answered itself (a data pointer outside the region, an opcode not carried, a queue being deleted).",
           [](const EngineCoreStats& c) { return c.refused_io; });
  per_core("nvtcp_engine_core_interrupts_total", Type::Counter, "Interrupts (vector signals) sent to applications.",
           [](const EngineCoreStats& c) { return c.interrupts; });
  per_core("nvtcp_engine_core_sleeps_total", Type::Counter, "Times the engine core went to sleep after its idle spin.",
           [](const EngineCoreStats& c) { return c.sleeps; });

  per_remote("nvtcp_engine_remote_applications", Type::Gauge, "Applications attached to the subsystem now.",
             [](const EngineRemoteStats& r) { return uint64_t(r.applications); });
  per_remote("nvtcp_engine_remote_namespaces", Type::Gauge, "Active namespaces of the subsystem, as last scanned.",
             [](const EngineRemoteStats& r) { return uint64_t(r.namespaces); });
  per_remote("nvtcp_engine_remote_namespace_notices_total", Type::Counter,
             "Namespace changes of the subsystem passed on to its applications.",
             [](const EngineRemoteStats& r) { return r.namespace_notices; });
  per_remote("nvtcp_engine_remote_commands_forwarded_total", Type::Counter,
             "I/O commands sent to the subsystem, all engine cores.",
             [](const EngineRemoteStats& r) { return r.forwarded; });
  per_remote("nvtcp_engine_remote_completions_total", Type::Counter,
             "Completions of the subsystem's commands posted to applications, all engine cores.",
             [](const EngineRemoteStats& r) { return r.completed; });
  per_remote("nvtcp_engine_remote_in_flight_commands", Type::Gauge,
             "Commands on the subsystem now, all engine cores.",
             [](const EngineRemoteStats& r) { return uint64_t(r.in_flight); });
  per_remote("nvtcp_engine_remote_reads_total", Type::Counter, "Read commands the subsystem completed with success.",
             [](const EngineRemoteStats& r) { return r.reads.commands; });
  per_remote("nvtcp_engine_remote_writes_total", Type::Counter, "Write commands the subsystem completed with success.",
             [](const EngineRemoteStats& r) { return r.writes.commands; });
  per_remote("nvtcp_engine_remote_read_bytes_total", Type::Counter, "Bytes read by successful Read commands.",
             [](const EngineRemoteStats& r) { return r.reads.bytes; });
  per_remote("nvtcp_engine_remote_write_bytes_total", Type::Counter, "Bytes written by successful Write commands.",
             [](const EngineRemoteStats& r) { return r.writes.bytes; });
  w.family("nvtcp_engine_remote_errors_total", Type::Counter,
           "Read and Write commands the subsystem answered with an error status (path errors included), by opcode.");
  for (const auto& r : s.remotes) {
    w.sample({{"subsystem", r.subnqn}, {"op", "read"}}, r.reads.errors);
    w.sample({{"subsystem", r.subnqn}, {"op", "write"}}, r.writes.errors);
  }
  // The target's buckets: one query reads the latency both sides of the wire.
  const auto bounds = latency_bounds_seconds();
  w.family("nvtcp_engine_remote_read_latency_seconds", Type::Histogram,
           "Successful Read commands, from the engine core's turn that took them from the application's SQ to the turn the subsystem's answer came in.");
  for (const auto& r : s.remotes)
    w.histogram({{"subsystem", r.subnqn}}, bounds, r.reads.latency, double(r.reads.latency_ns) / 1e9);
  w.family("nvtcp_engine_remote_write_latency_seconds", Type::Histogram,
           "Successful Write commands, from the engine core's turn that took them from the application's SQ to the turn the subsystem's answer came in.");
  for (const auto& r : s.remotes)
    w.histogram({{"subsystem", r.subnqn}}, bounds, r.writes.latency, double(r.writes.latency_ns) / 1e9);
  w.family("nvtcp_engine_path_connected", Type::Gauge, "1 while the path's controller is connected, else 0.");
  for (const auto& r : s.remotes)
    for (const auto& p : r.paths) w.sample({{"subsystem", r.subnqn}, {"path", p.address}}, uint64_t(p.connected));
  w.family("nvtcp_engine_path_resets_total", Type::Counter, "Times the path's controller reconnected.");
  for (const auto& r : s.remotes)
    for (const auto& p : r.paths) w.sample({{"subsystem", r.subnqn}, {"path", p.address}}, uint64_t(p.resets));
  return w.take();
}

}  // namespace nvtcp::engine

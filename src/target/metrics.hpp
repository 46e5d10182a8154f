// SPDX-License-Identifier: Apache-2.0
// A snapshot of what the target has done and holds, for the metrics endpoint (Target::metrics,
// control path). Plain values: the endpoint renders them (control/target_metrics.hpp), and a
// unit test renders a snapshot it makes up.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "target/io_metrics.hpp"

namespace nvtcp::target {

struct TargetMetrics {
  struct NamespaceEntry {
    std::string subsystem;
    uint32_t nsid = 0;
    std::string name;          // its bdev name
    uint64_t size_bytes = 0;
    uint64_t outstanding = 0;  // commands holding it now (NamespaceHolds), parse to release
    IoTotals io;
  };
  struct SubsystemEntry {
    std::string nqn;
    uint64_t controllers = 0;
    uint64_t namespaces = 0;
  };
  // A subsystem through one listener: its queues past Connect that came in on it, and (for an
  // NVM subsystem, through each listener it is reachable through) the I/O they did.
  struct ListenerEntry {
    std::string subsystem;
    std::string listener;  // ADDRESS:PORT ("[v6]:PORT"); the discovery-only port too
    uint64_t admin_queues = 0, io_queues = 0;
    bool io_counted = false;  // an NVM subsystem's: io and outstanding below mean something
    IoTotals io;              // since the listener was given to the subsystem
    uint64_t outstanding = 0; // commands on its I/O queues now, from capsule to response sent
  };
  struct ReactorEntry {
    double busy_seconds = 0;
    double cpu_seconds = 0;
    uint64_t ios = 0;  // I/O commands completed
  };
  std::vector<SubsystemEntry> subsystems;
  std::vector<NamespaceEntry> namespaces;
  std::vector<ListenerEntry> listeners;
  std::vector<ReactorEntry> reactors;
  // Requests per transport state (TcpRequest::State) and their commands per command-layer
  // state (Command::State), by name: how many are in each now, and entries since start.
  struct StateEntry {
    std::string state;
    uint64_t now = 0;
    uint64_t entered = 0;
  };
  std::vector<StateEntry> request_states, command_states;
  uint64_t connections = 0;           // TCP connections open (any state)
  uint64_t connections_accepted = 0;  // since start
  uint64_t connections_refused = 0;   // closed at accept: over a connection limit
  uint64_t buffer_bytes = 0;          // request data buffers held now
  uint64_t memory_waits = 0;          // commands that waited for buffer memory, since start
};

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
// nvtcp engine: the offload engine. A process (or an object inside one, for tests) that owns
// the NVMe/TCP connections to remote controllers and shows each local application plain
// NVMe queues in shared memory, the way a PCIe NVMe controller shows the host queues in host
// memory.
//
//   control thread: the attach socket, each application's controller (registers and admin
//                   queue, AppController), application lifelines; wakes sleeping cores
//   engine cores:   one thread each (pinned when CPUs are given); per remote controller a
//                   host library queue pair and an IoForwarder carrying every application
//                   queue placed on that core
//
// The control thread and the cores talk through mailboxes (a mutex and a vector, looked at
// once per core turn through an atomic flag): adding and removing queues, queues gone,
// queues faulted. Nothing per I/O crosses threads.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/io_totals.hpp"
#include "engine/limits.hpp"
#include "engine/ublk_device.hpp"
#include "nvtcp/host.hpp"

namespace nvtcp::engine {

struct EngineOptions {
  // The engine's cores poll; by default their NVMe/TCP queue pairs receive by polling too
  // (hybrid: spin while bytes keep coming, sleep in io_uring after a quiet spell).

  std::string socket_path = "/run/nvtcp/engine.sock";
  std::vector<int> cpus;                      // one engine core each; empty: one core, not pinned
  std::vector<host::TransportId> controllers; // the remote controllers
  host::ControllerOptions host;               // keep-alive, reconnect, digests, congestion control
  // Of each host queue pair (per core per controller): every application queue on the core
  // shares it, so it is deep (bounded by the remote controller's CAP.MQES).
  uint32_t queue_depth = 1024;
  uint32_t max_queue_pairs = 129;             // per application, admin included
  // An engine core with nothing to do spins this long before it sleeps (an application's
  // doorbell or a completion wakes it). 0: sleep at once; a negative value: never sleep.
  int64_t idle_spin_us = 200;
  uint32_t budget_per_queue = 32;             // SQEs taken from one application queue per turn
  // Also show every active namespace of every remote controller as /dev/ublkbN (ublk).
  bool ublk = false;
  UblkOptions ublk_options;
  // What applications may hold of the engine (limits.hpp); checked by start().
  EngineLimits limits;
};

// One engine core's figures (its counters are published as it goes idle and every 1024 turns).
struct EngineCoreStats {
  int cpu = -1;                 // the CPU it is pinned to; -1: not pinned
  uint32_t queues = 0;          // application I/O queues placed on it now
  uint32_t in_flight = 0;       // its commands on the remote controllers now
  uint64_t forwarded = 0;
  uint64_t completed = 0;
  uint64_t dropped = 0;
  uint64_t refused_io = 0;
  uint64_t interrupts = 0;
  uint64_t sleeps = 0;
  double cpu_seconds = 0;       // CPU time of its thread (spinning included)
  double busy_seconds = 0;      // time in turns that moved a command or a completion
};

// One path of a remote controller.
struct EnginePathStats {
  std::string address;          // traddr:trsvcid
  bool connected = false;
  uint32_t resets = 0;          // times its controller reconnected
};

// One remote controller (subsystem), over one path or several.
struct EngineRemoteStats {
  std::string subnqn;
  uint32_t applications = 0;    // attached to it now
  uint32_t namespaces = 0;      // active namespaces as the engine last scanned them
  uint64_t namespace_notices = 0;  // namespace changes passed on to its applications
  uint32_t in_flight = 0;       // commands on it now, all cores
  uint64_t forwarded = 0;       // I/O commands sent to it, all cores
  uint64_t completed = 0;
  IoTotals reads, writes;       // answered Reads and Writes, all cores
  std::vector<EnginePathStats> paths;
};

struct EngineStats {
  uint64_t attached = 0;        // applications attached since start
  uint64_t refused = 0;         // attach requests refused
  uint32_t applications = 0;    // attached now (including those whose queues are draining)
  uint64_t forwarded = 0;       // I/O commands sent to remote controllers
  uint64_t completed = 0;       // I/O completions posted to applications
  uint64_t dropped = 0;         // answers of applications that were gone
  uint64_t refused_io = 0;      // I/O commands answered by the engine (bad pointer, deletion)
  uint64_t interrupts = 0;
  uint64_t core_sleeps = 0;
  uint64_t ublk_requests = 0;   // block requests the ublk devices served
  uint64_t refused_opcodes = 0; // of refused_io: I/O opcodes not carried (fabrics, reservations, ...)
  uint64_t refused_for_limits = 0;  // of refused: attaches beyond a limit (applications, bytes, vectors)
  uint64_t broken_doorbells = 0;    // applications detached for hanging up their doorbell-notice pipe
  uint64_t control_wakeups = 0;     // times the control thread's epoll_wait returned
  uint64_t mapped_bytes = 0;        // regions of the applications attached now
  uint32_t admin_in_flight_peak = 0;      // the most admin commands one application had forwarded at once
  uint64_t admin_buffer_bytes = 0;        // admin data buffers held now
  uint64_t admin_buffer_peak_bytes = 0;   // the most ever held at once
  double cpu_seconds = 0;       // CPU time of the engine's threads (cores and control)
  double control_cpu_seconds = 0;  // of cpu_seconds: the control thread's
  std::vector<EngineCoreStats> cores;
  std::vector<EngineRemoteStats> remotes;
};

class Engine {
 public:
  explicit Engine(EngineOptions opts);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Connects every remote controller, starts the cores and listens on the socket.
  bool start(std::string& err);
  // Runs the control thread until stop is set (the caller's thread).
  void run(const std::atomic<bool>& stop);
  // Stops the cores and disconnects; applications still attached see their queues stop.
  void shutdown();

  EngineStats stats() const;
  // The block devices made with EngineOptions::ublk.
  std::vector<std::string> ublk_devices() const;
  const EngineOptions& options() const { return opts_; }

  struct Impl;  // engine.cpp only

 private:
  EngineOptions opts_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvtcp::engine

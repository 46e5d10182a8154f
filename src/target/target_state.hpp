// SPDX-License-Identifier: Apache-2.0
// What a target holds for all its connections: its configuration, subsystems and listeners,
// devices, and the budgets its connections draw on (ResourceUsage, HostBudget);
// with the test hooks every connection consults (ResponseObserver, OffloadHook).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "target/bdevs.hpp"
#include "target/config.hpp"
#include "target/subsystem.hpp"
#include "util/worker_pool.hpp"

namespace nvtcp::target {

// What the target holds across all reactors, against the limits in TargetConfig. Touched
// when a connection comes or goes and when a request's buffer must grow (warm-up, or a
// larger transfer than that slot has seen), never per I/O in steady state.
struct ResourceUsage {
  std::atomic<uint32_t> connections{0};         // TcpQueue objects alive
  std::atomic<uint32_t> handoff{0};             // accepted, not yet a TcpQueue
  std::atomic<uint64_t> refused_connections{0}; // closed at accept: over max_connections
  std::atomic<uint64_t> buffer_bytes{0};        // request data buffers, all connections
  std::atomic<uint64_t> buffer_peak{0};
  std::atomic<uint64_t> memory_waits{0};        // commands that waited for buffer memory

  // Takes bytes from the budget (cap 0 = unlimited); false if that would go over it.
  bool reserve_buffer(uint64_t bytes, uint64_t cap) {
    uint64_t cur = buffer_bytes.load(std::memory_order_relaxed);
    do {
      if (cap && cur + bytes > cap) return false;
    } while (!buffer_bytes.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed));
    uint64_t peak = buffer_peak.load(std::memory_order_relaxed);
    while (cur + bytes > peak && !buffer_peak.compare_exchange_weak(peak, cur + bytes, std::memory_order_relaxed)) {
    }
    return true;
  }
  void release_buffer(uint64_t bytes) { buffer_bytes.fetch_sub(bytes, std::memory_order_relaxed); }
};

// Test hook: told about every response a connection is about to send (on that
// connection's reactor), with the request's block I/O so a test can match the response
// to what the device did for it. Unset outside tests: one load per response.
class ResponseObserver {
 public:
  virtual ~ResponseObserver() = default;
  virtual void on_response(uint16_t qid, const nvme::Sqe& sqe, nvme::Status status, const backend::BlockIo& io) = 0;
};


// Buffer memory and queues held by all the connections of one host, against
// TargetConfig::max_host_buffer_memory and max_connections_per_host: so that one host, with many
// connections, cannot take the whole budget from the others. A host is its NQN when something
// vouches for it (its TLS PSK, its DH-HMAC-CHAP key, or a subsystem's list of allowed hosts);
// a host that may claim any NQN it likes is its address (FabricsCommands::reserve_queue).
struct HostBudget {
  std::string principal;  // "host NQN" or "unauthenticated hosts at ADDRESS"
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint32_t> connections{0};  // its connections past Connect
  bool reserve(uint64_t n, uint64_t cap) {
    uint64_t cur = bytes.load(std::memory_order_relaxed);
    do {
      if (cap && cur + n > cap) return false;
    } while (!bytes.compare_exchange_weak(cur, cur + n, std::memory_order_relaxed));
    return true;
  }
  void release(uint64_t n) { bytes.fetch_sub(n, std::memory_order_relaxed); }
};

// Test hook: runs on the worker thread before each piece of work a queue takes off its
// reactor (CommandTransport::run_off_reactor), so a test can hold it there.
class OffloadHook {
 public:
  virtual ~OffloadHook() = default;
  virtual void before_work() = 0;
};

// Everything a connection needs to know about the target it belongs to.
struct TargetState {
  TargetConfig config;
  ResourceUsage usage;
  std::shared_ptr<Subsystem> discovery;
  BdevTable bdevs;  // every namespace's device by name, and those RPC made for later
  RbdClusterTable rbd_clusters;  // Ceph clusters registered by name
  uint64_t start_ns = 0;
  std::atomic<uint64_t> genctr{1};
  std::atomic<ResponseObserver*> response_observer{nullptr};
  std::atomic<OffloadHook*> offload_hook{nullptr};
  // The threads that run the DH-HMAC-CHAP computations off the reactors (Target::start makes
  // them; else the first call).
  // Every reactor waits at shutdown until its queues' work has come back, so none is left
  // when this goes.
  WorkerPool& workers();

  // The subsystems and listeners come and go by RPC while reactors read them at Connect, in a
  // TLS handshake and for the discovery log (never on the I/O path): both tables sit under one
  // mutex and are read as copies. A subsystem copied out stays alive while it is held (its
  // controllers hold it too), even if it is deleted meanwhile.
  std::vector<std::shared_ptr<Subsystem>> subsystems() const;
  // fn(Subsystem&) for each, under the table's lock (no copy: reactor 0's once-a-second look
  // at the namespaces allocates nothing). fn must not change the table.
  template <typename Fn>
  void for_each_subsystem(Fn fn) const {
    std::lock_guard lk(table_mu_);
    for (const auto& s : subsystems_) fn(*s);
  }
  std::shared_ptr<Subsystem> find_subsystem(const std::string& nqn) const;  // the discovery NQN too
  bool add_subsystem(std::shared_ptr<Subsystem> s);                          // false: its NQN exists
  std::shared_ptr<Subsystem> take_subsystem(const std::string& nqn);         // out of the table
  std::vector<Listener> listeners() const;
  std::optional<Listener> find_listener(const std::string& address, uint16_t port) const;
  // Port IDs are never reused, so a removed listener's ANA states and controllers cannot be
  // mistaken for a later one's.
  uint16_t next_portid();
  void add_listener(Listener l);
  void set_listener_port(uint16_t portid, uint16_t port);  // the port bind() really gave
  bool remove_listener(uint16_t portid);
  // The budget of a principal (a vouched-for host NQN, or an address), shared by its
  // connections (made on its first Connect; control path, under a mutex).
  std::shared_ptr<HostBudget> host_budget(const std::string& principal);

 private:
  std::mutex hosts_mu_;
  std::unordered_map<std::string, std::weak_ptr<HostBudget>> hosts_;
  std::once_flag workers_once_;
  std::unique_ptr<WorkerPool> workers_;
  mutable std::mutex table_mu_;  // subsystems_, listeners_, next_portid_
  std::vector<std::shared_ptr<Subsystem>> subsystems_;
  std::vector<Listener> listeners_;
  uint16_t next_portid_ = 1;
};

// What the tables hold for a configured listener (its port ID not yet given).
Listener listener_of(const ListenerConfig& l);

// Builds subsystems and namespaces from a finalized configuration.
std::string build_state(const TargetConfig& cfg, TargetState& state, const DeviceFactory& factory = {});

}  // namespace nvtcp::target

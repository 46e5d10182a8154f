// SPDX-License-Identifier: Apache-2.0
// The target: reactor threads (one per core) that own connections, listeners that accept
// on reactor 0 and hand each new connection to a reactor in turn (listen_sockets.hpp), and
// its configuration changed while it serves (live_config.hpp).
#pragma once
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "target/config.hpp"
#include "target/metrics.hpp"
#include "target_tcp/tcp_queue.hpp"
#include "target/target_state.hpp"
#include "target/tls_keys.hpp"
#include "target_tcp/listen_sockets.hpp"
#include "target_tcp/live_config.hpp"

namespace nvtcp::target {

class Target {
 public:
  explicit Target(TargetConfig cfg, DeviceFactory factory = {});
  ~Target();

  // Builds namespaces, binds listeners and starts the reactors; returns an error or empty.
  std::string start();
  // Closes every connection and joins the reactors.
  void stop();

  // The port each listener really got (useful with port 0).
  uint16_t port(size_t listener = 0) const;
  // The discovery service's own port (0: none, or taken away by remove_listener).
  uint16_t discovery_port() const { return discovery_port_.load(std::memory_order_relaxed); }
  // Where it listens, and whether TLS comes first there: the first configured listener's.
  const std::string& discovery_address() const { return cfg_.listeners[0].address; }
  bool discovery_tls() const { return cfg_.listeners[0].tls_required; }
  TargetState& state() { return *state_; }
  // CPU seconds used by the reactor threads so far (user + system).
  double cpu_seconds() const;
  // The same per reactor, and the time each spent in turns that had work (Reactor::busy_ns);
  // both sampled by the reactor once a millisecond.
  std::vector<double> cpu_seconds_per_reactor() const;
  std::vector<double> busy_seconds_per_reactor() const;
  // Per reactor (thread_get_stats): nanoseconds in turns that had work and since it started,
  // both from the same once-a-millisecond sample, and the CPU it is pinned to (-1: none).
  struct ReactorTimes {
    uint64_t busy_ns = 0, run_ns = 0;
    int cpu = -1;
  };
  std::vector<ReactorTimes> reactor_times() const;
  // What the metrics endpoint reports (control path: takes the live-change lock so that no
  // namespace goes while it is read, and asks the reactors for their connections).
  TargetMetrics metrics();
  uint64_t connections_accepted() const { return sockets_.accepted(); }
  // The kernel send buffers' shares by source address (send_shares.hpp).
  const SendShares& send_shares() const { return sockets_.send_shares(); }
  // What the target holds now, against the limits of its configuration.
  const ResourceUsage& usage() const { return state_->usage; }
  uint32_t live_connections() const { return state_ ? state_->usage.connections.load() : 0; }
  uint64_t buffer_bytes() const { return state_ ? state_->usage.buffer_bytes.load() : 0; }
  // Live configuration, from the control thread (RPC): devices, namespaces, subsystems,
  // listeners and ANA states changed while the target serves (live_config.hpp).
  LiveConfig& live_config() { return live_; }
  // Returns once every reactor has finished the turn it was in (none still uses what the
  // caller took out of a shared table before calling).
  void quiesce();

  // One entry per live connection, gathered on the reactors (control path; never call it
  // from a reactor thread). Empty when the target is not running.
  std::vector<ConnectionInfo> connection_info();
  // The requests in each TcpRequest::State, and their commands in each Command::State (control
  // path, gathered on the reactors like connection_info()): those of every live connection,
  // and those of closed connections that still wait for a device. With no I/O outstanding,
  // every request is Free and every command Idle.
  RequestStateCounts request_states();
  CommandStateCounts command_states();
  // Entries into each state since start, over every connection (control path, as above).
  RequestStateEntries request_entries();
  CommandStateEntries command_entries();
  // I/O commands completed by all reactors so far, and by each.
  uint64_t io_count() const;
  std::vector<uint64_t> io_counts_per_reactor() const;
  unsigned reactor_count() const { return unsigned(reactors_.size()); }
  // Flush commands and FUA writes completed with success so far.
  uint64_t flush_count() const;
  uint64_t fua_write_count() const;
  // Device operations (commands, Copy pieces, Dataset Management ranges) that waited for a later
  // reactor turn under the budget of work per turn, and the most bytes operations that could
  // wait moved in one turn (any reactor): ConnectionSet::take_turn.
  uint64_t turn_waits() const;
  uint64_t most_bytes_in_a_turn() const;

 private:
  friend class ListenSockets;
  friend class LiveConfig;
  struct ReactorThread {
    std::thread thread;
    reactor::Reactor* reactor = nullptr;  // created on, and owned by, the thread
    ConnectionSet connections;
    std::atomic<double> cpu{0};
    std::atomic<uint64_t> busy_ns{0};  // Reactor::busy_ns(), sampled with cpu
    std::atomic<uint64_t> run_ns{0};   // since the reactor started, sampled with busy_ns
    int pinned_cpu = -1;               // the CPU it is pinned to (-1: none)
    std::mutex mu;
    std::condition_variable cv;
    bool ready = false;
  };
  // Reactor 0, once a second: namespaces whose backing file was resized take the new size
  // and their controllers are told (Subsystem::revalidate_namespaces).
  struct RevalidateTimer : reactor::Timer {
    Target* target = nullptr;
  } revalidate_timer_;
  static void on_revalidate_timer(reactor::Timer* t);
  void run_reactor(ReactorThread* raw, bool accept_here, int cpu);

  TargetConfig cfg_;
  DeviceFactory factory_;
  std::mutex control_mu_;  // one live change at a time
  LiveConfig live_;
  std::unique_ptr<TargetState> state_;
  std::unique_ptr<TargetPskResolver> psk_resolver_;  // over state_: TLS listeners' keys
  std::vector<std::unique_ptr<ReactorThread>> reactors_;
  template <typename Counts, typename Get>
  Counts sum_over_reactors(Get get);
  ListenSockets sockets_;
  std::atomic<uint16_t> discovery_port_{0};  // set by start(), cleared under control_mu_
  std::atomic<bool> stopping_{false};
  std::atomic<unsigned> quiesced_{0};  // reactors done shutting down, still alive (see run_reactor())
  bool started_ = false;
};

}  // namespace nvtcp::target

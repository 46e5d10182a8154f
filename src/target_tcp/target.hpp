// SPDX-License-Identifier: Apache-2.0
// The target: reactor threads (one per core) that own connections, listeners that accept
// on reactor 0 and hand each new connection to a reactor in turn.
#pragma once
#include <atomic>
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
  // What the metrics endpoint reports (control path: takes the live-change lock so that no
  // namespace goes while it is read, and asks the reactors for their connections).
  TargetMetrics metrics();
  uint64_t connections_accepted() const { return accepted_.load(); }
  // What the target holds now, against the limits of its configuration.
  const ResourceUsage& usage() const { return state_->usage; }
  uint32_t live_connections() const { return state_ ? state_->usage.connections.load() : 0; }
  uint64_t buffer_bytes() const { return state_ ? state_->usage.buffer_bytes.load() : 0; }
  // Live configuration, from the control thread (RPC; never a reactor: these wait for the
  // reactors). Each returns an error, or empty.
  // A device by name (nc: name, type, size, path, block size) for namespaces to take later.
  std::string create_bdev(const NamespaceConfig& nc);
  // Deletes a device; one a namespace has is removed from it first (as SPDK hot-removes).
  std::string delete_bdev(const std::string& name);
  // A NULL device's new size; the hosts of its namespace are told.
  std::string resize_bdev(const std::string& name, uint64_t bytes);
  // A namespace of subnqn over the device named nc.name, at nc.nsid (0: the lowest free), with
  // nc's identifiers if given; its NSID comes back in nsid. The subsystem's controllers get a
  // namespace attribute notice (hosts rescan).
  std::string add_namespace(const std::string& subnqn, NamespaceConfig nc, uint32_t& nsid);
  // Takes a namespace away: new commands for it fail (Invalid Namespace), commands already
  // under way complete as they would have, then its device goes back to its bdev and hosts are
  // told. Waits for those commands (a device that never answers: gives up after 60 s).
  std::string remove_namespace(const std::string& subnqn, uint32_t nsid);
  // Sets the ANA state of group anagrpid (0: every group) of subnqn as hosts see it through
  // the listener at address:port (as configured; the port it really got); the controllers that
  // came in through it get an ANA change notice. Subsystems without ANA reporting refuse.
  std::string set_ana_state(const std::string& subnqn, const std::string& address, uint16_t port, uint32_t anagrpid,
                            nvme::AnaState state);
  // A subsystem (nqn, serial, model, max_namespaces, allow_any_host, hosts, ana_reporting of
  // sc; no namespaces, no listeners yet: RPC adds them). The NQN must be new.
  std::string create_subsystem(SubsystemConfig sc);
  // Takes a subsystem away: Connect to it fails from now on, its controllers are torn down
  // (their connections close), the commands under way on its namespaces finish, and their
  // devices go back to their bdevs. Hosts of other subsystems are untouched.
  std::string delete_subsystem(const std::string& nqn);
  // Makes subnqn reachable through the listener lc (opened if the target has none at that
  // address and port; port 0: any free one); lc's port becomes the real one. The discovery
  // NQN only opens the listener. Hosts on persistent discovery connections are told.
  std::string add_listener(const std::string& subnqn, ListenerConfig& lc);
  // Takes the listener address:port from subnqn: the controllers of hosts that came in
  // through it are torn down. A listener no subsystem is reachable through any more is
  // closed; the discovery NQN closes it at once, for every subsystem.
  std::string remove_listener(const std::string& subnqn, const std::string& address, uint16_t port);
  // The discovery log changed (subsystems, listeners, allowed hosts): a new generation, and a
  // notice to the hosts on persistent discovery connections.
  void discovery_log_changed();
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
  // Steps of commands that move data inside the target (Copy) which waited for a later reactor
  // turn under the per-turn budget, and the most bytes such steps moved in one turn (any
  // reactor): ConnectionSet::take_step_budget.
  uint64_t steps_deferred() const;
  uint64_t most_step_bytes_in_a_turn() const;

 private:
  struct ReactorThread;
  struct ListenSocket;
  bool over_connection_limit();
  // Reactor 0, once a second: namespaces whose backing file was resized take the new size
  // and their controllers are told (Subsystem::revalidate_namespaces).
  struct RevalidateTimer : reactor::Timer {
    Target* target = nullptr;
  } revalidate_timer_;
  static void on_revalidate_timer(reactor::Timer* t);
  static void arm_accept(ListenSocket* sock);
  std::unique_ptr<ListenSocket> bind_listener(const std::string& addr, uint16_t port, std::string& err);
  void start_accepting(ListenSocket* ls);  // reactor 0
  void retire_socket(ListenSocket* sock);  // reactor 0
  // Runs fn on reactor 0 and waits for it (control thread).
  template <typename Fn>
  void on_reactor0(Fn fn);
  // Control thread: a socket for listener l (its port ID given) accepting on reactor 0; port
  // gets the port it really has. Error or empty.
  std::string open_listener(const Listener& l, bool ktls, uint16_t& port);
  // Control thread: listener portid stops accepting and its socket closes (connections made
  // through it are not touched here).
  void close_listener(uint16_t portid);

  void on_accept(ListenSocket* sock, int res, uint32_t flags);
  void raise_descriptor_limit();

  TargetConfig cfg_;
  DeviceFactory factory_;
  std::mutex control_mu_;  // one live change at a time
  // Detaches every namespace of sub, waits for the commands on them, gives their devices
  // back to their bdevs (control_mu_ held).
  void release_namespaces(Subsystem& sub, std::vector<std::unique_ptr<Namespace>> nss);
  // Namespaces removed whose commands never finished (a device that stopped answering): kept
  // alive rather than freed under them.
  std::mutex graveyard_mu_;
  std::vector<std::unique_ptr<Namespace>> graveyard_;
  std::unique_ptr<TargetState> state_;
  std::unique_ptr<TargetPskResolver> psk_resolver_;  // over state_: TLS listeners' keys
  std::vector<std::unique_ptr<ReactorThread>> reactors_;
  template <typename Counts, typename Get>
  Counts sum_over_reactors(Get get);
  std::vector<std::unique_ptr<ListenSocket>> sockets_;
  std::atomic<uint16_t> discovery_port_{0};  // set by start(), cleared under control_mu_
  std::atomic<bool> stopping_{false};
  std::atomic<unsigned> quiesced_{0};  // reactors done shutting down, still alive (see start())
  std::atomic<uint64_t> accepted_{0};
  std::atomic<unsigned> next_reactor_{0};
  bool started_ = false;
  uint64_t last_refusal_log_ns_ = 0;   // reactor 0 only
};

}  // namespace nvtcp::target

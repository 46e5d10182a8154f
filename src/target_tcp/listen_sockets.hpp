// SPDX-License-Identifier: Apache-2.0
// The target's listening sockets, what nvmet-tcp's ports are: bound at start or by RPC, each
// accepting on reactor 0 with a multishot accept, refusing what max_connections,
// max_connections_per_address and an address's share of the kernel's send buffers
// (send_shares.hpp) do not allow, and handing each connection to a reactor in turn, where it becomes a TcpQueue (behind a TLS handshake on a TLS listener). Accept failing for
// want of descriptors backs off; a socket taken away goes once nothing of it is in the ring.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "target_tcp/send_shares.hpp"

namespace nvtcp::target {

class Target;
struct Listener;

class ListenSockets {
 public:
  explicit ListenSockets(Target& target);
  ~ListenSockets();
  ListenSockets(const ListenSockets&) = delete;
  ListenSockets& operator=(const ListenSockets&) = delete;

  // Target::start, before any reactor runs: a socket for every configured listener (the first
  // that fails is the error), then the discovery port's (a failure there is only logged).
  std::string bind_configured();
  // On reactor 0, once every reactor exists to take connections.
  void start_accepting_all();
  // On reactor 0, shutting down: every socket stops accepting.
  void shut_down_all();
  // Once the reactors are gone.
  void clear();
  // Control thread: a socket for listener l (its port ID given) accepting on reactor 0; port
  // gets the port it really has. Error or empty.
  std::string open_listener(const Listener& l, bool ktls, uint16_t& port);
  // Control thread: listener portid stops accepting and its socket closes (connections made
  // through it are not touched here).
  void close_listener(uint16_t portid);
  uint64_t accepted() const { return accepted_.load(); }
  const SendShares& send_shares() const { return shares_; }

 private:
  struct ListenSocket;
  std::unique_ptr<ListenSocket> bind_listener(const std::string& addr, uint16_t port, std::string& err);
  void start_accepting(ListenSocket* ls);  // reactor 0
  static void arm_accept(ListenSocket* sock);
  void on_accept(ListenSocket* sock, int res, uint32_t flags);
  void retire_socket(ListenSocket* sock);  // reactor 0
  bool over_connection_limit();
  // Runs fn on reactor 0 and waits for it (control thread).
  template <typename Fn>
  void on_reactor0(Fn fn);

  Target& t_;
  std::vector<std::unique_ptr<ListenSocket>> sockets_;  // reactor 0's while the reactors run
  SendShares shares_;  // outlives every connection (the reactors stop first)
  std::atomic<uint64_t> accepted_{0};
  std::atomic<unsigned> next_reactor_{0};
  uint64_t last_refusal_log_ns_ = 0;  // reactor 0 only
};

}  // namespace nvtcp::target

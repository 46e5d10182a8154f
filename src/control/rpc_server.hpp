// SPDX-License-Identifier: Apache-2.0
// The JSON-RPC server on a UNIX stream socket (the target's --rpc-socket): one control thread,
// never a reactor, serving every client through poll() (PollServer), so a client that sends
// half a request and stops, or never reads its answers, holds up no other. Requests run one
// at a time, in arrival order per client. The socket is owner-only (0600): whoever can connect can
// reconfigure the target.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "control/json_rpc.hpp"
#include "control/poll_server.hpp"

namespace nvtcp::control {

struct RpcServerOptions {
  size_t max_request_bytes = 4u << 20;  // one JSON text; longer: Parse Error and the socket closes
  size_t max_clients = 16;              // more are closed at once (with a log line)
  size_t max_unsent_bytes = 16u << 20;  // answers a client has not read; over this it is closed
  // A request must be whole within this many ms of its first byte (a client's first, of its
  // connect): past it the client is told so and closed. A client that keeps its connection
  // open between requests (ceph-nvmeof does) is not timed while it sends nothing.
  uint32_t request_timeout_ms = 30'000;
  // Every slot taken: a new client closes the one whose request has been unfinished longest
  // (one that connected and never sent a whole request, first), so that clients that hang
  // cannot keep an orchestrator's failover call out.
  bool evict_unfinished = true;
  std::function<uint64_t()> clock;  // milliseconds, monotonic; tests step their own
};

class RpcServer {
 public:
  explicit RpcServer(Dispatcher& methods, RpcServerOptions opts = {});
  ~RpcServer();
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // Listens on path (its directory is made when missing; a socket left by a process that is
  // gone is replaced, one another process still serves is not) and starts the thread.
  // Returns an error or empty.
  std::string start(const std::string& path);
  // Stops the thread, closes every client and removes the socket file (if it is still ours).
  void stop();
  const std::string& path() const { return path_; }
  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  uint64_t clients_refused() const { return server_.clients_refused(); }
  uint64_t clients_evicted() const { return server_.clients_evicted(); }

 private:
  class Session;

  Dispatcher& methods_;
  RpcServerOptions opts_;
  PollServer server_;
  std::string path_;
  int listen_fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  std::atomic<uint64_t> requests_{0};
};

}  // namespace nvtcp::control

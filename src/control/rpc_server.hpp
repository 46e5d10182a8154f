// SPDX-License-Identifier: Apache-2.0
// The JSON-RPC server on a UNIX stream socket (the target's --rpc-socket): one control thread,
// never a reactor, serving every client through poll() (PollServer), so a client that sends
// half a request and stops, or never reads its answers, holds up no other. Requests run one
// at a time on that thread, in arrival order per client, except the blocking part of a slow
// method (method_table.hpp), which runs on one of a few worker threads: meanwhile every other
// client is served, and the client that sent it waits for its answer before its next request
// is read. The socket is owner-only (0600): whoever can connect can reconfigure the target.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "control/json_rpc.hpp"
#include "control/poll_server.hpp"
#include "util/worker_pool.hpp"

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
  // Threads for the blocking parts of slow methods: so many run at once, the rest wait for a
  // thread, in order. Each client has at most one slow request in flight (its next waits for
  // its answer), so at most max_clients wait: no client piles up threads or work.
  unsigned slow_workers = 4;
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
  // Slow requests in flight are carried out first (their clients answered): stop() waits for
  // their blocking parts (a line in the log says so), those that have not begun yet are
  // answered that the server stops, as are slow requests that come meanwhile.
  void stop();
  const std::string& path() const { return path_; }
  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  uint64_t clients_refused() const { return server_.clients_refused(); }
  uint64_t clients_evicted() const { return server_.clients_evicted(); }
  size_t clients() const { return server_.clients(); }
  // Slow requests carried out whose client had gone by then (their answers dropped).
  uint64_t slow_answers_dropped() const { return slow_dropped_.load(std::memory_order_relaxed); }

 private:
  class Session;
  // Hands a's slow method's blocking part to a worker; its commit comes back through the
  // server's post(). False (a answered at once, on this thread) once the server stops.
  bool run_slow(PollServer::ClientId client, Answering& a);
  // On the server's thread: the blocking part of job's slow method ran and gave commit.
  bool slow_part_done(PollServer::ClientId client, const std::shared_ptr<Answering>& job, const SlowCommit& commit,
                      PollServer::Session* session, std::string& out);

  Dispatcher& methods_;
  RpcServerOptions opts_;
  PollServer server_;
  std::string path_;
  int listen_fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> slow_dropped_{0};
  std::mutex slow_mu_;
  std::condition_variable slow_done_;
  size_t slow_in_flight_ = 0;  // handed to workers and not yet committed (slow_mu_)
  bool slow_refused_ = false;  // stop() has begun: no more slow work (slow_mu_)
  // Made at the first slow request, on the server's thread; joined by stop() once the loop is
  // done with it. Last: the jobs it runs reach the members above.
  std::unique_ptr<WorkerPool> workers_;
};

}  // namespace nvtcp::control

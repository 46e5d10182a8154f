// SPDX-License-Identifier: Apache-2.0
// nvtcp host multipath: one subsystem reached through several controllers (one per path: a
// listener's address and port), I/O sent on the paths the controller reports as ANA optimized
// (non-optimized ones only when no optimized path is up), and moved to another path, without
// an error to the application, when its path dies or turns inaccessible.
//
//   auto mp = nvtcp::host::MultipathController::connect({trid_a, trid_b}, opts, mopts, err);
//   auto qp = mp->create_io_qpair(128, err);     // one queue pair (one TCP connection) per path
//   qp->read(1, lba, nlb, buf, on_done, ctx);    // as QueuePair::read
//   while (...) qp->process_completions();
//
// As Linux's native NVMe multipath: each path is a controller of its own that reconnects by
// itself (ctrl_loss_tmo), and whose I/O fails over at once rather than waiting for it
// (fast_io_fail_tmo 0). A path that could not be connected, or whose controller was lost for
// good, is connected again every path_retry_ms. Commands that find no usable path wait for one
// while any path may come back (Linux's queue_if_no_path), or no_path_timeout_ms.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nvtcp/host.hpp"

namespace nvtcp::host {

// How a command picks among the paths of the best ANA state: each in turn (Linux's
// round-robin), or the one with the fewest commands outstanding from this queue pair (Linux's
// queue-depth).
enum class PathPolicy : uint8_t { RoundRobin, QueueDepth };
// "round-robin" or "queue-depth"; false for anything else.
bool parse_path_policy(const std::string& text, PathPolicy& out);
const char* path_policy_name(PathPolicy p);

struct MultipathOptions {
  PathPolicy policy = PathPolicy::RoundRobin;
  // How often a path that is not connected (it failed at connect, or its controller was lost
  // for good) is tried again.
  uint32_t path_retry_ms = 2000;
  // A command that finds no usable path waits for one this long, then fails with a path error
  // (sc::TransportError); -1: it waits while any path's controller is reconnecting, and fails
  // only once none is (every path lost for good or never connected).
  int32_t no_path_timeout_ms = -1;
  // How many times one command may move off a path that failed it (a lost connection, an ANA
  // status) before it completes with that path's status; -1: no limit (as Linux's native
  // multipath). A bound keeps a target that answers ANA statuses while its log 0Ch says the
  // path is optimized from bouncing a command between paths for ever; a path that dies or
  // turns inaccessible costs a command one move.
  int32_t max_failovers = 32;
};

// One path as the application may inspect it.
struct PathStatus {
  TransportId trid;
  bool connected = false;        // its controller is associated (live) now
  uint32_t resets = 0;           // times its controller reconnected
  nvme::AnaState ana = nvme::AnaState::Optimized;  // for the namespace asked about
};

class MultipathQueuePair;

class MultipathController {
 public:
  // Connects a controller on each path (all with the same subnqn; hostnqn and options shared).
  // At least one must connect; the others are tried again in the background. Reconnect is on
  // for every path (ctrl_loss_tmo_ms 0 in opts becomes 600 s, Linux's default) and
  // fast_io_fail_tmo is 0: the multipath layer, not the path, decides what waits.
  static std::unique_ptr<MultipathController> connect(const std::vector<TransportId>& paths,
                                                      const ControllerOptions& opts, const MultipathOptions& mopts,
                                                      std::string& err);
  // Every path the discovery log at `discovery` offers for `subnqn` (TCP entries, any address
  // family), as nvme connect-all finds them; the namespace and digests come from `discovery`.
  static std::unique_ptr<MultipathController> connect_discovered(const TransportId& discovery,
                                                                 const std::string& subnqn,
                                                                 const ControllerOptions& opts,
                                                                 const MultipathOptions& mopts, std::string& err);
  ~MultipathController();
  MultipathController(const MultipathController&) = delete;
  MultipathController& operator=(const MultipathController&) = delete;

  // A queue pair for the calling thread, with a queue of `depth` on every path that is
  // connected now (connected before it returns). A path that comes later, or whose controller
  // was replaced, gets its queue from process_completions(): the queue's connect is started
  // there and goes on as the thread's reactor turns, so the other paths' I/O does not wait for
  // it; the path takes I/O once its queue is up.
  std::unique_ptr<MultipathQueuePair> create_io_qpair(uint32_t depth, std::string& err);

  size_t path_count() const;
  PathStatus path(size_t i, uint32_t nsid) const;
  // The path's controller now (nullptr while it has none): for admin commands and identify.
  std::shared_ptr<Controller> controller(size_t i) const;
  // A connected path's controller, optimized first; nullptr when none is connected.
  std::shared_ptr<Controller> any_controller() const;
  const MultipathOptions& options() const;

  struct Shared;  // the path table, shared with the queue pairs and the retry thread

 private:
  explicit MultipathController(std::shared_ptr<Shared> s);
  std::shared_ptr<Shared> s_;
};

class MultipathQueuePair {
 public:
  // Closes every path's queue; commands still outstanding complete (inside the destructor)
  // with a path error.
  ~MultipathQueuePair();
  MultipathQueuePair(const MultipathQueuePair&) = delete;
  MultipathQueuePair& operator=(const MultipathQueuePair&) = delete;

  // As QueuePair's: 0 (the command is on a path, or waits for one), -EBUSY when `depth`
  // commands are outstanding, -EINVAL for a command no path would take.
  int read(uint32_t nsid, uint64_t slba, uint32_t nlb, void* buf, CompletionFn cb, void* ctx);
  int write(uint32_t nsid, uint64_t slba, uint32_t nlb, const void* buf, CompletionFn cb, void* ctx,
            WriteFlags flags = {});
  int flush(uint32_t nsid, CompletionFn cb, void* ctx);
  int write_zeroes(uint32_t nsid, uint64_t slba, uint32_t nlb, CompletionFn cb, void* ctx);
  int deallocate(uint32_t nsid, const nvme::DsmRange* ranges, uint32_t n, CompletionFn cb, void* ctx);
  // Any other I/O command; it too is sent again on another path after a path error, so it
  // must be one that may run twice.
  int submit(const nvme::Sqe& sqe, void* data, uint32_t len, bool to_controller, CompletionFn cb, void* ctx);

  // Runs this thread's reactor (every path's queue is on it), sends commands waiting for a
  // path, and delivers completions. Returns how many completions it delivered.
  int process_completions(uint32_t timeout_us = 0);

  uint32_t depth() const;
  uint32_t outstanding() const;  // submitted and not yet completed, waiting ones included
  uint32_t waiting() const;      // outstanding, but on no path now
  uint32_t block_size(uint32_t nsid) const;
  // Commands sent on path i (a command moved to another path counts on both), and how many
  // commands were moved after a path error.
  uint64_t path_commands(size_t i) const;
  uint64_t failovers() const;
  // Commands completed with a path's error because they had moved max_failovers times.
  uint64_t failovers_exhausted() const;

  struct Impl;

 private:
  friend class MultipathController;
  explicit MultipathQueuePair(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvtcp::host

// SPDX-License-Identifier: Apache-2.0
// The host library's side of the offload engine (trtype:engine): the application attaches
// to the engine's socket, and from then on drives a plain NVMe controller in shared memory
// as a PCIe host driver would: it enables the controller through CC, sends admin commands on
// the admin queue, creates I/O queue pairs with Create I/O CQ/SQ and moves data to and from
// its region. The engine runs NVMe/TCP; nothing per I/O is a system call here while the
// engine polls (a doorbell notice is sent only when the engine asked for one).
//
// Namespace changes: the engine's controller announces namespace attribute notices (OAES bit
// 8); the client enables them and keeps one Asynchronous Event Request outstanding. A notice
// thread waits for it, reads the changed-namespace log, identifies the namespaces it lists,
// publishes their block sizes and calls on_namespace_change for each that changed, as the
// TCP controller's admin thread does.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "host/host_error.hpp"
#include "host/io_queue.hpp"
#include "nvtcp/host.hpp"
#include "shm/attach.hpp"
#include "shm/shm_queue.hpp"

namespace nvtcp::host::detail {

class EngineClient : public std::enable_shared_from_this<EngineClient> {
 public:
  static std::shared_ptr<EngineClient> connect(const TransportId& trid, const ControllerOptions& opts,
                                               HostError& err);
  ~EngineClient();

  // wait_ms: how long to wait for the answer (0: the admin timeout; kUntilGone: until the
  // engine answers, stops the controller or goes away).
  static constexpr uint32_t kUntilGone = 0xFFFFFFFFu;
  Completion admin(const nvme::Sqe& sqe, void* data, uint32_t len, bool to_controller, uint32_t wait_ms = 0);
  std::unique_ptr<IoQueue> create_io_queue(uint32_t depth, HostError& err);
  // Resets the controller (CC.EN = 0) and detaches: the engine drops the queues.
  void shutdown();

  // The namespaces as of the last scan, as a Controller on the wire reports them: a namespace
  // listed here is one the data path already knows the format of, so I/O to it is accepted.
  std::vector<uint32_t> active_namespaces() const;
  bool namespace_info(uint32_t nsid, NamespaceInfo& out, std::string& err) const;
  // Scans every namespace now, publishes the block sizes and reports what changed since the
  // last scan (on_namespace_change); not from on_namespace_change itself.
  bool rescan_namespaces(std::string& err);
  uint64_t namespace_generation() const { return ns_generation_.load(std::memory_order_acquire); }
  // Stops the notice thread (the Controller goes: its callback must not run any more).
  void stop_notices();

  void* alloc(size_t len);
  void free(void* p);
  // The offset of [p, p + len) in the data region, or -1 when it is not inside the part
  // given out for I/O.
  int64_t offset_of(const void* p, uint32_t len) const {
    const auto* b = static_cast<const uint8_t*>(p);
    if (b < io_base_ || b > io_end_ || len > uint64_t(io_end_ - b)) return -1;
    return b - data_;
  }

  const uint8_t* identify_data() const { return ident_; }
  uint16_t cntlid() const;
  uint32_t io_queues_granted() const { return granted_; }
  uint32_t max_transfer_bytes() const { return max_transfer_; }
  uint64_t cap() const { return at_.registers().cap; }
  uint32_t version() const { return at_.registers().vs; }
  const TransportId& trid() const { return trid_; }
  const std::string& hostnqn() const { return hostnqn_; }
  // The controller stopped (CSTS.CFS) or the engine went away.
  bool failed() const;
  bool polling() const { return polling_; }
  // More I/O queues than interrupt vectors: queues share vectors, and a signal one takes may
  // have been another's, so waits are kept short.
  bool vectors_shared() const { return granted_ + 1 > at_.vector_fds().size(); }
  const shm::Attachment& attachment() const { return at_; }
  void kick() const;
  // Whether the engine's lifeline closed (waiting up to wait_ms): then it is gone, and
  // failed() says so from now on. Any thread.
  bool lifeline_closed(int wait_ms);

 private:
  EngineClient() = default;
  bool enable(HostError& err);
  // Enables namespace attribute notices and starts the notice thread, when the engine's
  // controller announces them.
  void start_notices();
  void notice_loop();
  // Under admin_mu_: submits the Asynchronous Event Request.
  void submit_aer_locked();
  // Under admin_mu_: an admin completion that is no synchronous command's (the AER's).
  void route_admin_cqe_locked(const nvme::Cqe& c);
  // listed: the NSIDs to identify again (nullptr: every namespace). Under scan_mu_.
  bool scan_locked(const std::vector<uint32_t>* listed, bool report, std::string& err);
  // What the engine's controller shows now (each call asks it): the scan's inputs.
  std::vector<uint32_t> query_active_namespaces();
  bool identify_namespace(uint32_t nsid, NamespaceInfo& out, std::string& err);
  void rescan_after_notice();
  bool wait_csts(uint32_t mask, uint32_t want, uint32_t timeout_ms);
  void release_qid(uint16_t qid);

  shm::Attachment at_;
  TransportId trid_;
  ControllerOptions opts_;
  std::string hostnqn_;
  bool polling_ = false;
  alignas(8) uint8_t ident_[4096] = {};
  uint32_t granted_ = 0;
  uint32_t max_transfer_ = 0;
  std::shared_ptr<BlockSizeTable> block_sizes_ = std::make_shared<BlockSizeTable>();

  std::mutex admin_mu_;
  std::unique_ptr<shm::AppQueuePair> admin_;
  uint16_t admin_cid_ = 0;
  // The Asynchronous Event Request's command ID: synchronous commands never take it.
  static constexpr uint16_t kAerCid = 0xFFFF;
  bool aer_outstanding_ = false;  // under admin_mu_
  bool aer_done_ = false;         // under admin_mu_: aer_cqe_ holds its answer
  nvme::Cqe aer_cqe_{};
  int notice_fd_ = -1;            // an eventfd: the AER answered, or stop
  std::atomic<bool> notice_stop_{false};
  std::thread notice_thread_;
  // One scan at a time (scan_mu_). known_ is the last scan, what on_namespace_change reports
  // against; it is replaced under known_mu_ too, so readers never wait for a scan's commands.
  std::mutex scan_mu_;
  mutable std::mutex known_mu_;
  std::map<uint32_t, NamespaceInfo> known_;
  std::atomic<uint64_t> ns_generation_{0};
  uint8_t* admin_buf_ = nullptr;  // the first part of the data region
  uint32_t admin_buf_len_ = 0;

  std::mutex qid_mu_;
  std::vector<bool> qid_used_;

  // The data region past the admin buffer, handed out first fit.
  std::mutex alloc_mu_;
  uint8_t* data_ = nullptr;
  uint8_t* io_base_ = nullptr;
  uint8_t* io_end_ = nullptr;
  std::map<uint64_t, uint64_t> free_;   // offset -> length
  std::map<uint64_t, uint64_t> given_;  // offset -> length
  std::atomic<bool> gone_{false};
};

}  // namespace nvtcp::host::detail

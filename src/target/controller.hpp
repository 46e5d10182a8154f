// SPDX-License-Identifier: Apache-2.0
// One NVMe controller: created by an admin-queue Connect, shared by that queue and the
// I/O queues that connect to it (possibly on other reactors). Admin commands and
// properties run on the admin queue's reactor; I/O queues read only atomics.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nvtcp/log_pages.hpp"
#include "nvtcp/sqe.hpp"
#include "nvtcp/status.hpp"
#include "reactor/clock.hpp"
#include "target/io_queue_table.hpp"
#include "target/target_state.hpp"
#include "wire/changed_namespaces.hpp"
#include "wire/features.hpp"
#include "wire/reservations.hpp"

namespace nvtcp::reactor {
class Reactor;
}

namespace nvtcp::target {

// Copy (19h), source range format 0h, as Identify Namespace reports it (MSRC, MSSRL, MCL):
// up to 128 source ranges (their list fills 4 KiB), each at most MDTS long, because one
// range at a time is read and then written through the command's buffer.
inline constexpr uint32_t kCopyMaxRanges = 128;
inline constexpr uint32_t kCopyRangesBytes = kCopyMaxRanges * sizeof(wire::CopySourceRange);
// A Copy moves each range through its buffer in pieces of at most this (a block at least).
inline constexpr uint64_t kCopyPieceBytes = 128 * 1024;
inline uint32_t copy_max_range_blocks(uint32_t mdts_bytes, uint8_t lbads) {
  return std::min<uint32_t>(mdts_bytes >> lbads, 0xFFFF);
}

// The admin queue of a controller: where asynchronous events and the outcome of Abort
// commands are delivered (that queue's reactor only).
class AdminQueueSink {
 public:
  virtual ~AdminQueueSink() = default;
  // Events may be ready: complete held Asynchronous Event Requests with them.
  virtual void deliver_async_events() = 0;
  // The Abort command abort_cid is done: whether it aborted its command.
  virtual void abort_done(uint16_t abort_cid, bool aborted) = 0;
  // Abort of an admin command: a held Asynchronous Event Request is the only one that waits.
  virtual bool abort_held_aer(uint16_t cid) = 0;
};

class AdminCommands;
class IdentifyData;
class LogPages;

class Controller : public std::enable_shared_from_this<Controller> {
 public:
  static constexpr uint32_t kVersion = 0x00020000;  // NVMe 2.0

  // clock: what keep-alive is measured on; the admin queue that makes the controller passes
  // the clock its own deadlines read, so that a test stepping it steps both.
  Controller(TargetState& target, Subsystem& subsys, uint16_t cntlid, std::string hostnqn,
             const uint8_t hostid[16], uint32_t kato_ms, const reactor::Clock& clock = reactor::monotonic_clock());
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  uint16_t cntlid() const { return cntlid_; }
  Subsystem& subsystem() { return subsys_; }
  const Subsystem& subsystem() const { return subsys_; }
  const std::string& hostnqn() const { return hostnqn_; }
  // The namespace nsid as this controller's host sees it: null when there is none, or when it
  // is masked from this host (no_auto_visible and not named for it). Every command that names
  // a namespace finds it here: one byte load beyond the subsystem's table.
  Namespace* find_namespace(uint32_t nsid) const {
    Namespace* ns = subsys_.find_namespace(nsid);
    return ns && !hidden_[nsid].load(std::memory_order_acquire) ? ns : nullptr;
  }
  // Whether nsid is masked from this host, whether or not a namespace is there now (a removed
  // one keeps the answer it had): who hears of a namespace's changes.
  bool masked(uint32_t nsid) const { return hidden_[nsid].load(std::memory_order_acquire); }
  // Subsystem only, under its controller lock: whether nsid is masked from this host. True when
  // that changed.
  bool set_hidden(uint32_t nsid, bool hidden) {
    return hidden_[nsid].exchange(hidden, std::memory_order_acq_rel) != hidden;
  }

  // The Error Information log (01h): every failed command of any of this controller's
  // queues, the last kErrorLogEntries kept. Called from each queue's reactor; failures are
  // rare, so the lock is never taken on the success path.
  static constexpr uint32_t kErrorLogEntries = 64;
  void record_error(uint16_t sqid, const wire::Sqe& sqe, wire::Status st);
  // Where the host came in (set at Connect, before any I/O queue): the listener, whose ANA
  // states are the ones this controller reports and applies, and the address the host reached
  // the target on, which a discovery controller advertises for wildcard listeners. False: the
  // subsystem is no longer reachable through that listener (taken away meanwhile).
  bool set_arrival(uint16_t portid, std::string local_address);
  uint16_t portid() const { return portid_; }
  // The subsystem through that listener (null before Connect and for discovery controllers).
  SubsystemPort* port() const { return port_.get(); }
  // What an I/O command to ns gets through this port: Success on an optimized or
  // non-optimized path, else the ANA status of its group's state (one relaxed byte load).
  wire::Status ana_status(const Namespace& ns) const {
    if (!port_) return wire::sc::Success;
    switch (port_->state(ns.anagrpid)) {
      case nvme::AnaState::Optimized:
      case nvme::AnaState::NonOptimized: return wire::sc::Success;
      case nvme::AnaState::Inaccessible: return wire::sc::AnaInaccessible;
      case nvme::AnaState::PersistentLoss: return wire::sc::AnaPersistentLoss;
      case nvme::AnaState::Change: return wire::sc::AnaTransition;
    }
    return wire::sc::AnaInaccessible;
  }
  const uint8_t* hostid() const { return hostid_; }
  bool ready() const { return csts_.load(std::memory_order_relaxed) & 1; }
  uint32_t num_io_queues() const { return io_queues.granted(); }
  uint32_t kato_ms() const { return kato_ms_; }
  // The keep-alive timeout this controller runs with when the host asks for asked_ms.
  uint32_t effective_kato_ms(uint32_t asked_ms) const;
  uint32_t mdts_bytes() const { return target_.config.mdts_bytes; }

  // Fabrics property access (admin queue reactor only).
  wire::Status property_get(uint32_t offset, bool eight_bytes, uint64_t& value);
  struct PropertySetResult {
    wire::Status status;
    // A shutdown was notified: flush every namespace, then call shutdown_complete().
    bool flush_for_shutdown = false;
  };
  PropertySetResult property_set(uint32_t offset, bool eight_bytes, uint64_t value);
  void shutdown_complete();

  // Asynchronous events. The admin queue attaches itself at Connect and detaches at
  // teardown (its reactor); raise() may be called from any thread and runs the event on
  // the admin queue's reactor. An event is reported when the host enabled it (feature 0Bh;
  // errors always), an Asynchronous Event Request is held, and its type is not masked.
  void attach_admin_queue(reactor::Reactor* r, AdminQueueSink* sink);
  void detach_admin_queue();
  // nsid: for a namespace attribute notice, the namespace for the changed-namespace log.
  void raise(wire::AsyncEventType type, uint8_t info, wire::LogPageId lid, uint32_t nsid = 0);
  // A backend failed one of this controller's commands (any reactor; at most one event in
  // flight, so a failing device under load does not flood the admin reactor).
  void raise_device_error();
  // Admin reactor, for a held Asynchronous Event Request: the dw0 of the next event to report,
  // if there is one.
  bool take_async_event(uint32_t& dw0);
  // Abort of command cid of I/O queue sqid (admin reactor): asks that queue's reactor, which
  // answers the admin queue's (AdminQueueSink::abort_done for the Abort abort_cid). False: no
  // such queue.
  bool post_abort(uint16_t sqid, uint16_t cid, uint16_t abort_cid);
  // A reservation command of any host changed what this controller's host may do (any
  // reactor): queued for log 80h and reported as an I/O command set event, unless the host
  // masked that notice for the namespace (feature 82h).
  void add_reservation_notice(wire::ReservationNotice type, uint32_t nsid);

  // Keep-alive: any admin command counts as a sign of life.
  void touch() { last_seen_ns_ = clock_.now_ns(); }
  bool keep_alive_expired(uint64_t now_ns) const { return now_ns >= keep_alive_deadline(); }
  // The first instant at which keep-alive has expired if no command comes before it (KATO
  // after the last one); never, with KATO 0.
  uint64_t keep_alive_deadline() const {
    return kato_ms_ == 0 ? UINT64_MAX : last_seen_ns_ + uint64_t(kato_ms_) * 1000000ull + 1;
  }

  // Its I/O queues: granted, claimed, where Abort finds them, their counters.
  IoQueueTable io_queues;

  // Set when the controller is torn down (keep-alive expiry, admin queue loss); I/O
  // queues poll it and close.
  std::atomic<bool> dead{false};

 private:
  // Admin commands read and change what they report and set (admin reactor only).
  friend class AdminCommands;
  friend class IdentifyData;
  friend class LogPages;

  TargetState& target_;
  Subsystem& subsys_;
  // Keeps a subsystem deleted by RPC alive until its last controller goes (null for one not
  // owned by a shared_ptr: tests).
  std::shared_ptr<Subsystem> subsys_keep_;
  uint16_t cntlid_;
  std::string hostnqn_;
  std::string local_address_;
  uint16_t portid_ = 0;
  std::shared_ptr<SubsystemPort> port_;  // the subsystem through portid_: its ANA states, its I/O counters
  uint8_t hostid_[16];
  uint32_t kato_ms_;
  uint32_t connect_kato_ms_;  // what Connect set: feature 0Fh's default
  const reactor::Clock& clock_;
  uint64_t last_seen_ns_ = 0;

  uint32_t cc_ = 0;
  std::atomic<uint32_t> csts_{0};
  uint32_t async_event_config_ = 0;
  // Features kept as the host set them (no effect on a software device, but reported back
  // as set, as a drive does): power state, temperature thresholds (over, under), error
  // recovery, interrupt coalescing, write atomicity.
  uint32_t power_management_ = 0;
  uint16_t temperature_threshold_[2] = {wire::kTemperatureOverDefault, 0};
  uint32_t error_recovery_ = 0;
  uint32_t interrupt_coalescing_ = 0;
  uint32_t write_atomicity_ = 0;
  // Feature 16h: ACRE only (the target's CRDT are 0, so a retry delay asks for no wait);
  // the other host behaviours need capabilities the target does not have.
  uint8_t host_behavior_acre_ = 0;
  // Asynchronous events (admin reactor): per kind of event, one pending report and whether
  // the kind is masked (reported, its log not yet read). Each kind is cleared by its own log
  // page, so the slots go by log: errors (01h), SMART (02h), namespace attribute notices
  // (04h), ANA change notices (0Ch), discovery log changes (70h, discovery controllers),
  // reservation notices (80h); two notices of type Notice never hide each other. The
  // changed-namespace log (04h) collects NSIDs until it is read.
  static constexpr std::array<wire::LogPageId, 6> kEventLogs = {
      wire::LogPageId::Error,     wire::LogPageId::SmartHealth, wire::LogPageId::ChangedNamespaces,
      wire::LogPageId::Ana,       wire::LogPageId::Discovery,   wire::LogPageId::ReservationNotification};
  struct EventSlot {
    bool pending = false, masked = false;
    wire::AsyncEventType type{};
    uint8_t info = 0;
  };
  std::array<EventSlot, kEventLogs.size()> events_{};
  static EventSlot* slot_in(std::array<EventSlot, kEventLogs.size()>& slots, wire::LogPageId lid);
  wire::ChangedNamespaceList changed_ns_;
  // Log 80h (admin reactor): notices not yet read, oldest first, at most kMaxReservationNotices
  // (older ones are dropped and counted: the count field of the next read skips them).
  static constexpr size_t kMaxReservationNotices = 64;
  std::vector<wire::ReservationNotificationLog> resv_notices_;
  uint64_t resv_notice_count_ = 0;
  // Feature 82h per namespace (index: NSID), written by this controller's admin queue and
  // read on the reactor that queues a notice.
  std::unique_ptr<std::atomic<uint32_t>[]> resv_masks_;
  std::atomic<uint32_t>* resv_mask(uint32_t nsid) const;
  void queue_event(wire::AsyncEventType type, uint8_t info, wire::LogPageId lid, uint32_t nsid);
  void unmask_event_for_log(wire::LogPageId lid);
  bool event_enabled(wire::AsyncEventType type, wire::LogPageId lid) const;
  // Feature 0Bh bits this controller takes (and Identify OAES announces).
  uint32_t async_events_supported() const;
  AdminQueueSink* event_sink_ = nullptr;   // admin reactor only
  std::mutex admin_mu_;                     // guards admin_reactor_ for raise() from any thread
  reactor::Reactor* admin_reactor_ = nullptr;
  std::atomic<bool> device_error_posted_{false};

  mutable std::mutex errors_mu_;
  std::array<wire::ErrorLogEntry, kErrorLogEntries> errors_{};  // a ring; slot = count % size
  uint64_t error_count_ = 0;

  uint32_t ns_slots_ = 1;
  std::unique_ptr<std::atomic<bool>[]> hidden_;  // by NSID: masked from this host (find_namespace)
};

}  // namespace nvtcp::target

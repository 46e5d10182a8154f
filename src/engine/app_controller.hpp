// SPDX-License-Identifier: Apache-2.0
// The NVMe controller one attached application sees: the registers in its region's header
// (CAP, VS, CC, CSTS), its admin queue (queue pair 0), and the I/O queues it creates with
// Create I/O Completion/Submission Queue, as the NVMe base specification has a PCIe
// controller do. It runs on the engine's control thread: admin commands are the slow path.
//
// What it answers itself: the controller's life cycle (CC.EN, CC.SHN, CSTS.RDY/SHST/CFS),
// queue management, Number of Queues, Interrupt Coalescing, Async Event Configuration,
// Keep Alive (the engine keeps the remote controller alive, never the application), Abort,
// Asynchronous Event Requests, the Changed Namespace List (log 04h) and Doorbell Buffer
// Config (the doorbells always are shadow words).
//
// Namespace changes: the engine's remote controller hears of them (its namespace notices and
// rescans), and the engine tells every application's controller (namespace_changed). Each
// keeps its own changed-namespace list and reports a namespace attribute notice on a held
// Asynchronous Event Request when the application enabled it (feature 0Bh bit 8), once, until
// the application reads log 04h with RAE cleared, as a controller of its own would. Other
// events (errors, SMART, ANA) are not passed on: Identify OAES announces namespace notices
// alone. Identify Controller is the remote controller's with this controller's ID; other
// Identify, Get Log Page (with RAE set) and Get Features of the other features are forwarded
// to the remote controller, answered when it answers (an admin worker waits on it; the
// admin queue goes on meanwhile); Set Features of those is refused, since every
// application of the engine shares that controller.
//
// Admin work is bounded per application (AdminLimits): at most max_in_flight commands
// forwarded at once and max_buffer_bytes of their data buffers (taken from the engine's
// AdminBufferPool). Beyond either, the admin SQ is not fetched (its head stays where it
// is) until a forwarded command completes, as a controller fetches SQEs as it has room;
// the application's other commands wait behind it, the other applications do not.
// A command that cannot be buffered at all, or for which the system has no memory, gets
// an NVMe status, and nothing thrown while running one escapes: it fails that command.
//
// What an application may not do to the shared remote controller is answered here, never
// forwarded: fabrics commands (7Fh: Property Set, Disconnect, Authentication) and every
// admin opcode not listed above (Namespace Management and Attachment, Format NVM,
// Sanitize, Firmware Commit and Download, Directive Send, Security Send, Virtualization
// and Capacity Management, vendor-specific) get Invalid Command Opcode, as a controller
// answers an opcode it does not support; Abort is answered here (the engine's commands
// at the remote are not the application's to abort) and so is Keep Alive. Get Log Page
// always retains events (RAE), and is refused for logs a read changes for every other
// reader: Reservation Notification (80h, each read takes entries away: Invalid Log Page)
// and any log-specific action on Telemetry Host-Initiated (07h, LSP creates a new
// snapshot) or the Persistent Event Log (0Dh, LSP establishes or releases the reading
// context): Invalid Field.
//
// Data pointers of admin commands are SGL Data Block descriptors whose address is an offset
// into the application's data region, as for I/O; anything else gets an NVMe status.
// The application's memory is read once per SQE and never trusted: an impossible doorbell
// value stops the controller (CSTS.CFS) until the application resets it (CC.EN 1 -> 0).
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/admin_buffers.hpp"
#include "engine/app_admin_commands.hpp"
#include "nvtcp/host.hpp"
#include "shm/attach.hpp"
#include "shm/shm_queue.hpp"
#include "wire/changed_namespaces.hpp"

namespace nvtcp::engine {

// What one application's admin queue may hold of the engine (see the comment above).
struct AdminLimits {
  uint32_t max_in_flight = 8;
  uint64_t max_buffer_bytes = 2ull << 20;
};

class AppController {
 public:
  // What the engine does for the controller.
  struct Backend {
    virtual ~Backend() = default;
    // A command for the remote controller, run elsewhere (the remote may take seconds):
    // data is the engine's own buffer from admin_buffers() (filled when to_controller). The
    // answer comes back through AppController::admin_forwarded(tag, ...) on the control
    // thread; the buffer goes back to the pool once that has read it.
    virtual void forward_admin(AppController& app, const nvme::Sqe& sqe, AdminBuffer data, bool to_controller,
                               uint64_t tag) = 0;
    // The engine's budget of admin data buffers (shared by every application).
    virtual AdminBufferPool& admin_buffers() = 0;
    // The remote controller's Identify Controller structure (4 KiB).
    virtual const uint8_t* remote_identify() = 0;
    // Starts carrying I/O queue pair qid (its SQ and CQ, the CQ going on from cq); false if
    // it cannot (no engine core).
    virtual bool start_io_queue(AppController& app, uint16_t qid, const shm::QueueMemory& m, int vector_fd,
                                shm::EngineQueuePair::CqPosition cq) = 0;
    // Takes I/O queue pair qid away; io_queue_stopped() says when it is gone.
    virtual void stop_io_queue(AppController& app, uint16_t qid, bool abandon) = 0;
    // Interrupt Coalescing (feature 08h) changed: applies to every I/O queue of the app.
    virtual void set_coalescing(AppController& app, uint32_t value) = 0;
  };

  AppController(shm::Attachment at, Backend& backend, uint16_t cntlid, uint32_t io_queues_max, AdminLimits limits = {});
  ~AppController();
  AppController(const AppController&) = delete;
  AppController& operator=(const AppController&) = delete;

  // The application kicked the engine: look at CC and the admin queue.
  void on_kick();
  // The application is gone (its lifeline closed): every queue is abandoned.
  void detach();
  // The remote controller's namespace nsid was added, removed or changed (control thread).
  void namespace_changed(uint32_t nsid);
  // The engine cannot go on serving this controller (an internal error): CSTS.CFS, as for an
  // impossible doorbell value, until the application resets it.
  void stop_controller(const std::string& why) { fatal(why); }
  // The remote controller answered a forwarded command (data: what it returned).
  // data: the command's buffer, given back to the pool here once read (before anything
  // more of this application's is fetched).
  void admin_forwarded(uint64_t tag, const host::Completion& c, AdminBuffer data);
  // A fetched command waits for admin buffer budget (held by any application's commands):
  // the engine calls resume_admin() when some was given back.
  bool admin_waiting() const { return waiting_.has_value(); }
  void resume_admin();
  // Forwarded commands out now (answers of before a reset included: they hold buffers), and
  // the most there ever were.
  uint32_t admin_in_flight() const { return uint32_t(forwarded_.size()); }
  uint32_t admin_in_flight_peak() const { return admin_in_flight_peak_; }
  uint64_t admin_buffer_bytes() const { return admin_buffer_bytes_; }
  // From the engine: an I/O queue asked to stop is gone; one faulted.
  void io_queue_stopped(uint16_t qid, shm::EngineQueuePair::CqPosition cq = {});
  void io_queue_faulted(uint16_t qid);

  // Detached, every I/O queue gone and no forwarded command out: the engine may destroy it.
  bool finished() const { return detached_ && live_io_queues() == 0 && forwarded_.empty(); }
  bool detached() const { return detached_; }
  const shm::Attachment& attachment() const { return at_; }
  uint16_t cntlid() const { return cntlid_; }
  uint32_t coalescing() const { return commands_.coalescing(); }
  std::string name() const;
  uint32_t live_io_queues() const;

 private:
  // The admin commands act on the controller's queues, events and admin budget.
  friend class AppAdminCommands;
  static constexpr uint32_t kAerLimit = 4;  // AERL 3: four held at once

  enum class QueueState : uint8_t { None, CqOnly, Running, Stopping };
  struct IoQueue {
    QueueState state = QueueState::None;
    uint32_t cq_entries = 0;
    uint32_t sq_entries = 0;
    int vector = -1;              // -1: interrupts off (IEN = 0)
    shm::EngineQueuePair::CqPosition cq;  // where the CQ stands between two SQs on it
    bool deleting = false;        // a Delete I/O SQ waits for it
    uint16_t delete_cid = 0;
  };

  void set_queue_state(uint16_t qid, QueueState to);
  // Every running or stopping queue is taken away with nothing more posted to it.
  void abandon_queues();
  void enable();
  void begin_disable(bool shutdown_notice);
  void finish_disable_if_done();
  void fatal(const std::string& why);
  void process_admin();
  // Whether the admin SQ may be fetched from now (the application's admin budget).
  bool admin_room() const;
  // Completes a held Asynchronous Event Request with the namespace notice if one is due.
  void deliver_events();
  void complete(uint16_t cid, nvme::Status st, uint32_t dw0 = 0);
  void flush_admin_cq();
  uint32_t csts() const;
  void set_csts(uint32_t v);

  shm::Attachment at_;
  Backend& backend_;
  uint16_t cntlid_;
  uint32_t io_queues_max_;        // queue pairs of the region, less the admin pair
  uint32_t cc_seen_ = 0;
  bool enabled_ = false;
  bool disabling_ = false;
  bool shutdown_pending_ = false;
  bool faulted_ = false;
  bool detached_ = false;
  shm::EngineQueuePair admin_;
  std::deque<nvme::Cqe> admin_backlog_;  // answers the admin CQ had no room for
  std::vector<uint16_t> held_aers_;
  // Namespace attribute notices: the list the application reads as log 04h, a notice waiting
  // for an AER, and whether one was reported and log 04h not yet read with RAE cleared.
  wire::ChangedNamespaceList changed_ns_;
  bool ns_notice_pending_ = false;
  bool ns_notice_masked_ = false;
  std::vector<IoQueue> io_;             // index = qid
  AppAdminCommands commands_;
  // Forwarded admin commands out at the remote controller, by tag: where the answer goes.
  struct Forwarded {
    uint16_t cid;
    uint8_t* app_data;  // in the application's region (nullptr: no data back)
    uint32_t len;
    uint64_t charged;   // of admin_buffer_bytes_
  };
  std::map<uint64_t, Forwarded> forwarded_;
  AdminLimits limits_;
  uint64_t admin_buffer_bytes_ = 0;   // buffers of the commands in forwarded_
  uint32_t admin_in_flight_peak_ = 0;
  // Fetched, waiting for buffer budget: the one command the SQ head has moved past and
  // that is not yet running (nothing more is fetched meanwhile).
  std::optional<nvme::Sqe> waiting_;
  uint64_t next_tag_ = 1;
  uint32_t epoch_ = 0;                  // a reset starts a new one: older answers are dropped
};

}  // namespace nvtcp::engine

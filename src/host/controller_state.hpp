// SPDX-License-Identifier: Apache-2.0
// The controller's private state (Controller::State) and what its admin thread does. Declared
// here, defined by concern: admin_thread.cpp (the run loop, the association's state and how
// other threads reach the thread), bring_up.cpp, recovery.cpp, keep_alive.cpp,
// async_events.cpp and controller_namespaces.cpp. Only src/host includes this.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "host/ana_table.hpp"
#include "host/block_size_table.hpp"
#include "host/event_backlog.hpp"
#include "host/queue_pair_impl.hpp"
#include "nvtcp/host.hpp"
#include "nvtcp/identify.hpp"
#include "reactor/clock.hpp"
#include "util/state_machine.hpp"

namespace nvtcp::host {

namespace detail {
// A rescan_namespaces() caller waiting for the admin thread.
struct ScanWait {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  HostError err;  // ok(): the scan finished
  void finish(HostError e) {
    {
      std::lock_guard lk(mu);
      err = std::move(e);
      done = true;
    }
    cv.notify_all();
  }
};
}  // namespace detail

// The controller as its queues see it. Everything that touches the admin queue runs on the
// admin thread; other threads read the atomics or post() work to that thread.
struct Controller::State : detail::ControllerLink {
  using QueuePairImpl = detail::QueuePairImpl;
  using ScanWait = detail::ScanWait;
  using HostError = detail::HostError;

  TransportId trid;
  ControllerOptions opts;
  std::string hostnqn;
  // The DH-HMAC-CHAP secrets of ControllerOptions, parsed once; every queue uses them.
  std::shared_ptr<const auth::DhchapSecret> dhchap_secret;
  std::shared_ptr<const auth::DhchapSecret> dhchap_ctrl_secret;
  // Transaction IDs of the admin queue's re-authentications (Controller::reauthenticate); its
  // queue pair numbers its Connect-time ones from 1.
  std::atomic<uint16_t> auth_transactions{0x8000};
  uint16_t next_auth_transaction() { return auth_transactions.fetch_add(1, std::memory_order_relaxed); }
  std::shared_ptr<const tls::Psk> tls_psk;  // set: every queue starts with a TLS handshake
  // The same key derived the legacy way, tried once if the target refuses tls_psk's first
  // handshake (neither derivation forced); cleared once a handshake has shown which one works.
  std::shared_ptr<const tls::Psk> tls_psk_fallback;
  uint8_t hostid[16] = {};
  bool discovery = false;
  // What every timing decision of the controller and its queues reads. The real clock unless a
  // test sets another before connecting (detail::ControllerSeam, test_seams.hpp); a fake one
  // must then be stepped, or waits never end.
  const reactor::Clock* clock = &reactor::monotonic_clock();
  uint64_t now_ns() const { return clock->now_ns(); }

  std::thread thread;
  std::thread::id admin_tid;  // set by the admin thread before connect() returns
  std::atomic<bool> stop{false};
  reactor::Reactor* reactor = nullptr;   // lives on the admin thread; guarded by mu for post()
  std::unique_ptr<QueuePairImpl> admin;
  struct KaTimer : reactor::Timer {
    State* st = nullptr;
  } ka_timer;
  bool ka_outstanding = false;
  uint64_t ka_due_ns = 0;  // on `clock`: when the next Keep Alive goes out

  alignas(8) uint8_t ident[nvme::kIdentifyLen] = {};
  // The current association's Identify Controller (admin thread only): its OAES and AERL
  // decide the events asked for; `ident` stays as connect() returned it.
  alignas(8) uint8_t ident_now[nvme::kIdentifyLen] = {};
  uint64_t cap = 0;
  uint32_t vs = 0;
  uint32_t ioq_granted = 0;
  uint32_t max_transfer = 1u << 20;
  uint32_t in_capsule_max = 0;

  // The namespaces as last scanned. Only the admin thread writes them, under ns_mu, so that
  // namespace_info() and active_namespaces() elsewhere see one whole scan; the data path
  // reads block sizes from the lock-free table instead.
  mutable std::mutex ns_mu;
  std::map<uint32_t, NamespaceInfo> namespaces;
  std::shared_ptr<detail::BlockSizeTable> block_sizes = std::make_shared<detail::BlockSizeTable>();
  std::atomic<uint64_t> ns_generation{0};
  // Each namespace's ANA state through this controller, from log 0Ch (a controller that does
  // not report ANA leaves it empty: every namespace optimized). Published by the admin thread,
  // read lock-free by multipath queue pairs.
  std::shared_ptr<detail::AnaTable> ana = std::make_shared<detail::AnaTable>();
  std::atomic<bool> ana_refresh_asked{false};  // Controller::request_ana_refresh() posted, not yet run

  // Asynchronous events, admin thread only. An AER's completion only notes what to do; the
  // run loop does it, since reading a log or identifying a namespace is an admin command
  // that must not be waited for inside another's completion, and asks for more events once
  // it has (so a controller cannot report faster than the host handles).
  struct Events {
    uint32_t aers_wanted = 0;        // kept outstanding on this association
    uint32_t aers_outstanding = 0;
    bool ns_changed = false;         // a namespace attribute notice: read log 04h, rescan
    bool ana_changed = false;        // an ANA change notice: read log 0Ch again
    detail::EventBacklog to_clear;   // dw0 of other events, whose log page is read with RAE 0
    detail::EventLogLimiter log_limit;  // which of clear_event()'s lines are written
  } ev;
  std::vector<std::shared_ptr<ScanWait>> rescan_waiters;

  std::mutex mu;
  std::vector<bool> qid_used;

  // Association state, read by the I/O queues' threads; written only through set_link_state(),
  // by the admin thread (or by ~Controller once that thread has ended).
  std::atomic<LinkState> lstate{LinkState::Resetting};
  std::atomic<uint32_t> gen{0};
  std::atomic<uint16_t> cntlid_now{0};
  std::atomic<uint32_t> reset_count{0};
  std::atomic<bool> reset_requested{false};
  std::string reset_reason;  // guarded by mu

  // ControllerLink
  LinkState link_state() const override { return lstate.load(std::memory_order_acquire); }
  uint32_t generation() const override { return gen.load(std::memory_order_acquire); }
  uint16_t link_cntlid() const override { return cntlid_now.load(std::memory_order_acquire); }

  // ---------------------------------------------------------------- admin_thread.cpp
  // The admin thread's body: brings the controller up, tells connect() how that went, then
  // serves posted work, events and recovery until stopped.
  void run(std::promise<HostError>* connected);
  // Every change of lstate: checks the transition against kLinkTransitions and logs it.
  void set_link_state(LinkState to);
  static const char* link_state_name(LinkState s);
  // Resetting until the first association is up; Deleted is final.
  static constexpr TransitionTable<LinkState, 3> kLinkTransitions{
      {LinkState::Resetting, LinkState::Live},     // an association is up (the first, or a reconnect)
      {LinkState::Live, LinkState::Resetting},     // the admin queue failed, or an I/O queue asked for a reset
      {LinkState::Live, LinkState::Deleted},       // reconnect is off, or the controller is destroyed
      {LinkState::Resetting, LinkState::Deleted},  // ctrl_loss_tmo, another controller answered, or destroyed
  };
  void request_reset(uint32_t generation, const std::string& why) override;
  void abort_command(uint16_t sqid, uint16_t cid) override;
  void post_to_admin(std::function<void()> fn);
  // Runs the admin thread's reactor for ms milliseconds, or until the clock reads until_ns
  // (posted work keeps being served).
  void wait_ms(uint64_t ms);
  void wait_until(uint64_t until_ns);
  // An admin command from the admin thread itself (bring-up): submit and run the reactor
  // until it completes. The admin queue's command timeout bounds it; a lost connection
  // ends it at once.
  Completion admin_sync(const nvme::Sqe& sqe, void* data, uint32_t len, bool to_controller);
  bool admin_up() const { return admin && !admin->failed() && !stop.load(std::memory_order_relaxed); }
  // While connect() waits for the first association: when admin_sync() gives up on any
  // command (the clock's reading). UINT64_MAX otherwise.
  uint64_t bring_up_deadline_ns = UINT64_MAX;
  // The bring-up's allowance for its admin commands beyond the timeouts it is given: time
  // for a scan of many namespaces on a slow link.
  static constexpr uint64_t kBringUpCommandsMs = 30000;

  // ---------------------------------------------------------------- bring_up.cpp
  // Connects the admin queue and brings the controller up the way the specification
  // orders it: CAP, VS, CC.EN, CSTS.RDY, Identify, Number of Queues. On the first
  // association the results are kept; a reconnect only checks them.
  // Another controller answering at this address fails with Kind::WrongController.
  bool associate(bool first, HostError& err);
  // associate()'s first step: a new admin queue, connected (TLS with the fallback derivation
  // of the PSK when the target refuses the first).
  bool connect_admin(HostError& err);

  // ---------------------------------------------------------------- recovery.cpp
  // The admin queue failed or an I/O queue asked for a reset: reconnect every
  // reconnect_delay_ms until ctrl_loss_tmo_ms, or give the controller up.
  void recover(const std::string& why);

  // ---------------------------------------------------------------- keep_alive.cpp
  void arm_keep_alive();
  static void keep_alive(reactor::Timer* t);

  // ---------------------------------------------------------------- async_events.cpp
  // Feature 0Bh and the Asynchronous Event Requests of a new association: namespace attribute
  // notices when OAES announces them, and SMART critical warnings. A controller that refuses
  // costs us only the notices; a lost admin queue fails the association.
  bool start_events(HostError& err);
  void submit_aers();
  static void on_aer(void* ctx, const Completion& c) { static_cast<State*>(ctx)->aer_completed(c); }
  void aer_completed(const Completion& c);
  // Reads the log page an event names with RAE 0 (which lets the controller report that type
  // again) and logs the event in one line.
  void clear_event(uint32_t dw0);
  // A namespace attribute notice: the changed-namespace log, read with RAE 0 first (so a
  // change during the scan is reported again), names what to identify again. An empty list
  // (someone else read it) or FFFFFFFFh means every namespace.
  bool rescan_after_notice(HostError& err);
  // The run loop's part of event handling, between reactor turns. Each step is a few admin
  // commands run with admin_sync(), which keeps serving the reactor (keep-alive, posted
  // admin() commands) meanwhile.
  void service_events();
  // Reads log 0Ch (RAE 0, which lets the controller send the next ANA change notice) and
  // publishes each namespace's state; logs each namespace whose state changed. A controller
  // without ANA reporting (CMIC bit 3) publishes nothing. False only when the admin queue went.
  bool refresh_ana(HostError& err);

  // ---------------------------------------------------------------- controller_namespaces.cpp
  // The active namespace list (Identify CNS 02h), 1024 NSIDs a page, at most NN/1024 pages
  // (rounded up) and kMaxActiveNamespaces NSIDs. False with refused set: the controller
  // answered the command with an error (it has no list: older than NVMe 1.1). False without:
  // the queue was lost, or the list is malformed (logged; err says how).
  bool read_active_list(std::vector<uint32_t>& out, bool& refused, HostError& err);
  // Identifies the active namespaces again (those in `listed`, and any not known yet; all
  // when listed is null) and publishes what changed. notify: log the changes, count a
  // generation and call on_namespace_change (not for the scan at connect).
  bool scan_namespaces(const std::vector<uint32_t>* listed, bool notify, HostError& err);
};

}  // namespace nvtcp::host

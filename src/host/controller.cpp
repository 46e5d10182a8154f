// Host controller: the admin queue on a thread of its own (so Keep Alive keeps going
// whatever the application does), and I/O queue pairs on the application's threads.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "host/block_size_table.hpp"
#include "host/engine_client.hpp"
#include "host/namespace_scan.hpp"
#include "host/queue_pair_impl.hpp"
#include "host/state_transitions.hpp"
#include "nvtcp/host.hpp"
#include "util/log.hpp"
#include "wire/fabrics.hpp"
#include "wire/features.hpp"
#include "wire/identify.hpp"
#include "wire/log_pages.hpp"

namespace nvtcp::host {

using namespace nvtcp::wire;
using detail::QueueParams;
using detail::QueuePairImpl;

namespace {
// One reactor per application thread, shared by that thread's queue pairs.
reactor::Reactor& thread_reactor(const ControllerOptions& o) {
  thread_local std::unique_ptr<reactor::Reactor> r;
  if (!r) r = std::make_unique<reactor::Reactor>(4096, reactor::PollMode::Interrupt, o.sqpoll);
  // The last controller set up on this thread decides for all of its queue pairs.
  r->set_poll_mode(o.poll == PollMode::Busy        ? reactor::PollMode::BusyPoll
                   : o.poll == PollMode::Interrupt ? reactor::PollMode::Interrupt
                                                   : reactor::PollMode::Hybrid);  // Default over TCP
  return *r;
}

Sqe property_get_cmd(uint32_t ofst, bool eight) {
  PropertyGetCmd c{};
  c.opc = uint8_t(AdminOpcode::Fabrics);
  c.fctype = uint8_t(FabricsType::PropertyGet);
  c.attrib = eight ? 1 : 0;
  c.ofst = ofst;
  Sqe s;
  std::memcpy(&s, &c, sizeof(s));
  return s;
}

Sqe property_set_cmd(uint32_t ofst, uint32_t value) {
  PropertySetCmd c{};
  c.opc = uint8_t(AdminOpcode::Fabrics);
  c.fctype = uint8_t(FabricsType::PropertySet);
  c.ofst = ofst;
  c.value = value;
  Sqe s;
  std::memcpy(&s, &c, sizeof(s));
  return s;
}

Sqe identify_cmd(uint8_t cns, uint32_t nsid, uint32_t cdw11) {
  Sqe sqe{};
  sqe.opc = uint8_t(AdminOpcode::Identify);
  sqe.nsid = nsid;
  sqe.cdw10 = cns;
  sqe.cdw11 = cdw11;
  return sqe;
}

Sqe set_features_cmd(uint8_t fid, uint32_t cdw11) {
  Sqe sqe{};
  sqe.opc = uint8_t(AdminOpcode::SetFeatures);
  sqe.cdw10 = fid;
  sqe.cdw11 = cdw11;
  return sqe;
}

// retain: RAE 1, the read leaves the event type masked (nvme-cli's default is to clear).
Sqe get_log_cmd(uint8_t lid, uint32_t nsid, uint32_t len, uint64_t offset, bool retain) {
  Sqe sqe{};
  sqe.opc = uint8_t(AdminOpcode::GetLogPage);
  sqe.nsid = nsid;
  const uint32_t numd = len / 4 - 1;
  sqe.cdw10 = lid | (retain ? kLogRetainAsyncEvent : 0) | ((numd & 0xFFFF) << 16);
  sqe.cdw11 = numd >> 16;
  sqe.cdw12 = uint32_t(offset);
  sqe.cdw13 = uint32_t(offset >> 32);
  return sqe;
}

const char* async_event_type_name(uint8_t type) {
  switch (AsyncEventType(type)) {
    case AsyncEventType::Error: return "error";
    case AsyncEventType::SmartHealth: return "SMART / health";
    case AsyncEventType::Notice: return "notice";
    case AsyncEventType::IoCommandSpecific: return "I/O command set specific";
  }
  return type == 7 ? "vendor specific" : "reserved type";
}

// A rescan_namespaces() caller waiting for the admin thread.
struct ScanWait {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string err;
  void finish(std::string e) {
    {
      std::lock_guard lk(mu);
      err = std::move(e);
      done = true;
    }
    cv.notify_all();
  }
};

struct AdminWait {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Completion cpl;
  // The command's data lives here, not in the caller's buffer: a caller that gave up
  // waiting must not have its memory written by a completion that comes late.
  std::vector<uint8_t> bounce;
};
}  // namespace

// The controller as its queues see it. Everything that touches the admin queue runs on the
// admin thread; other threads read the atomics or post() work to that thread.
struct Controller::State : detail::ControllerLink {
  TransportId trid;
  ControllerOptions opts;
  std::string hostnqn;
  uint8_t hostid[16] = {};
  bool discovery = false;

  std::thread thread;
  std::thread::id admin_tid;  // set by the admin thread before connect() returns
  std::atomic<bool> stop{false};
  reactor::Reactor* reactor = nullptr;   // lives on the admin thread; guarded by mu for post()
  std::unique_ptr<QueuePairImpl> admin;
  struct KaTimer : reactor::Timer {
    State* st = nullptr;
  } ka_timer;
  bool ka_outstanding = false;

  alignas(8) uint8_t ident[kIdentifyLen] = {};
  // The current association's Identify Controller (admin thread only): its OAES and AERL
  // decide the events asked for; `ident` stays as connect() returned it.
  alignas(8) uint8_t ident_now[kIdentifyLen] = {};
  bool refused = false;  // the last associate() met another controller: reconnecting is pointless
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

  // Asynchronous events, admin thread only. An AER's completion only notes what to do; the
  // run loop does it, since reading a log or identifying a namespace is an admin command
  // that must not be waited for inside another's completion.
  struct Events {
    uint32_t aers_wanted = 0;        // kept outstanding on this association
    uint32_t aers_outstanding = 0;
    bool ns_changed = false;         // a namespace attribute notice: read log 04h, rescan
    std::vector<uint32_t> to_clear;  // dw0 of other events, whose log page is read with RAE 0
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

  static const char* link_state_name(LinkState s) {
    switch (s) {
      case LinkState::Live: return "Live";
      case LinkState::Resetting: return "Resetting";
      case LinkState::Deleted: return "Deleted";
    }
    return "?";
  }
  // Resetting until the first association is up; Deleted is final.
  static constexpr detail::TransitionTable<LinkState, 3> kLinkTransitions{
      {LinkState::Resetting, LinkState::Live},     // an association is up (the first, or a reconnect)
      {LinkState::Live, LinkState::Resetting},     // the admin queue failed, or an I/O queue asked for a reset
      {LinkState::Live, LinkState::Deleted},       // reconnect is off, or the controller is destroyed
      {LinkState::Resetting, LinkState::Deleted},  // ctrl_loss_tmo, another controller answered, or destroyed
  };
  void set_link_state(LinkState to) {
    const LinkState from = lstate.load(std::memory_order_relaxed);  // this thread is the only writer
    if (detail::kCheckTransitions && !kLinkTransitions.allows(from, to))
      detail::illegal_transition("controller link", link_state_name(from), link_state_name(to), "set_link_state");
    log::debug("{} (controller {}): {} -> {}", trid.subnqn, cntlid_now.load(), link_state_name(from),
               link_state_name(to));
    lstate.store(to, std::memory_order_release);
  }

  // ControllerLink
  LinkState link_state() const override { return lstate.load(std::memory_order_acquire); }
  uint32_t generation() const override { return gen.load(std::memory_order_acquire); }
  uint16_t link_cntlid() const override { return cntlid_now.load(std::memory_order_acquire); }
  void request_reset(uint32_t generation, const std::string& why) override {
    if (!opts.ctrl_loss_tmo_ms || generation != gen.load(std::memory_order_acquire)) return;
    {
      std::lock_guard lk(mu);
      if (!reset_requested.load()) reset_reason = why;
    }
    reset_requested.store(true, std::memory_order_release);
    post_to_admin([] {});  // wakes the admin thread
  }
  void abort_command(uint16_t sqid, uint16_t cid) override {
    post_to_admin([this, sqid, cid] {
      if (link_state() != LinkState::Live || !admin) return;
      Sqe sqe{};
      sqe.opc = uint8_t(AdminOpcode::Abort);
      sqe.cdw10 = sqid | (uint32_t(cid) << 16);
      admin->submit(sqe, nullptr, 0, false,
                    [](void*, const Completion& c) {
                      // dw0 bit 0: 0 = the command was aborted, 1 = it was not.
                      log::info("Abort: {}", !c.status.ok()       ? status_name(c.status)
                                             : (c.dw0 & 1) == 0 ? std::string("command aborted")
                                                                : std::string("command not aborted"));
                    },
                    nullptr);
    });
  }
  void post_to_admin(std::function<void()> fn) {
    std::lock_guard lk(mu);
    if (reactor) reactor->post(std::move(fn));
  }

  void arm_keep_alive() {
    uint32_t kato = opts.kato_ms;
    if (kato == 0 || discovery) return;
    // By default send at half the timeout, so one late packet is no loss.
    uint64_t interval_ms = opts.keep_alive_interval_ms ? opts.keep_alive_interval_ms : kato / 2;
    reactor->arm_timer(&ka_timer, std::max<uint64_t>(interval_ms, 1) * 1000000ull);
  }
  static void keep_alive(reactor::Timer* t) {
    State* st = static_cast<KaTimer*>(t)->st;
    if (!st->admin || st->admin->failed()) return;
    if (!st->ka_outstanding) {
      Sqe sqe{};
      sqe.opc = uint8_t(AdminOpcode::KeepAlive);
      st->ka_outstanding = true;
      int rc = st->admin->submit(sqe, nullptr, 0, false,
                                 [](void* ctx, const Completion& c) {
                                   auto* s = static_cast<State*>(ctx);
                                   s->ka_outstanding = false;
                                   if (!c.status.ok()) log::warn("Keep Alive failed: {}", status_name(c.status));
                                 },
                                 st);
      if (rc != 0) st->ka_outstanding = false;
    }
    st->arm_keep_alive();
  }

  // Runs the admin thread's reactor for ms milliseconds (posted work keeps being served).
  void wait_ms(uint64_t ms) {
    uint64_t until = reactor::monotonic_ns() + ms * 1000000ull;
    while (!stop.load(std::memory_order_relaxed)) {
      uint64_t now = reactor::monotonic_ns();
      if (now >= until) break;
      reactor->run_once(uint32_t(std::min<uint64_t>((until - now) / 1000, 50000)));
    }
  }

  // An admin command from the admin thread itself (bring-up): submit and run the reactor
  // until it completes. The admin queue's command timeout bounds it; a lost connection
  // ends it at once.
  Completion admin_sync(const Sqe& sqe, void* data, uint32_t len, bool to_controller) {
    struct Wait {
      bool done = false;
      Completion cpl;
    } w;
    Completion fail_cpl;
    fail_cpl.status = sc::TransportError;
    if (!admin) return fail_cpl;
    int rc = admin->submit(sqe, data, len, to_controller,
                           [](void* ctx, const Completion& c) {
                             auto* wp = static_cast<Wait*>(ctx);
                             wp->cpl = c;
                             wp->done = true;
                           },
                           &w);
    if (rc != 0) return fail_cpl;
    uint64_t deadline = reactor::monotonic_ns() + (uint64_t(opts.admin_timeout_ms) * 2 + 5000) * 1000000ull;
    while (!w.done) {
      if (reactor::monotonic_ns() > deadline) admin->shutdown();  // ends w before it goes out of scope
      else reactor->run_once(10000);
    }
    return w.cpl;
  }

  bool admin_up() const { return admin && !admin->failed(); }

  // ---------------------------------------------------------------- asynchronous events

  // Feature 0Bh and the Asynchronous Event Requests of a new association: namespace attribute
  // notices when OAES announces them, and SMART critical warnings. A controller that refuses
  // costs us only the notices; a lost admin queue fails the association.
  bool start_events(std::string& err) {
    ev = Events{};
    if (discovery) return true;
    const auto* id = reinterpret_cast<const IdentifyController*>(ident_now);
    const uint32_t notices = id->oaes & kAecNamespaceAttribute;
    uint32_t aec = notices | kAecSmartWarningsDefined;
    Completion c = admin_sync(set_features_cmd(kFeatureAsyncEventConfig, aec), nullptr, 0, false);
    if (!c.status.ok() && admin_up() && notices) {
      aec = notices;  // a controller may take only what OAES lists
      c = admin_sync(set_features_cmd(kFeatureAsyncEventConfig, aec), nullptr, 0, false);
    }
    if (!admin_up()) {
      err = "admin queue lost while enabling asynchronous events";
      return false;
    }
    if (!c.status.ok())
      log::warn("{}: Set Features (Asynchronous Event Configuration {:#x}): {}; namespace changes will be seen "
                "only at a reconnect or rescan_namespaces()",
                trid.subnqn, aec, status_name(c.status));
    else if (!notices)
      log::info("{}: the controller sends no namespace attribute notices (OAES {:#x}); namespace changes will be "
                "seen only at a reconnect or rescan_namespaces()",
                trid.subnqn, uint32_t(id->oaes));
    // As many as AERL allows (several events can then be reported at once), but never more
    // than an eighth of the admin queue: the rest is for commands. Linux keeps one.
    ev.aers_wanted = std::max<uint32_t>(1, std::min<uint32_t>(id->aerl + 1u, admin->depth() / 8));
    submit_aers();
    return true;
  }

  void submit_aers() {
    while (ev.aers_outstanding < ev.aers_wanted && admin_up()) {
      Sqe sqe{};
      sqe.opc = uint8_t(AdminOpcode::AsyncEventRequest);
      if (admin->submit(sqe, nullptr, 0, false, on_aer, this) != 0) break;
      ++ev.aers_outstanding;
    }
  }

  static void on_aer(void* ctx, const Completion& c) { static_cast<State*>(ctx)->aer_completed(c); }
  void aer_completed(const Completion& c) {
    if (ev.aers_outstanding) --ev.aers_outstanding;
    if (!c.status.ok()) {
      // A path error: the connection is going (the next association asks again). Any other
      // status would only come back again: not asking again is what the Linux host does too.
      if (c.status != sc::TransportError)
        log::warn("{}: Asynchronous Event Request failed: {}; {} left outstanding", trid.subnqn,
                  status_name(c.status), ev.aers_outstanding);
      return;
    }
    submit_aers();  // at once: another event may be waiting for a request
    const uint8_t type = c.dw0 & 0x7, info = (c.dw0 >> 8) & 0xFF;
    const uint8_t lid = (c.dw0 >> 16) & 0xFF;
    if (type == uint8_t(AsyncEventType::Notice) && info == kAsyncNoticeNamespaceChanged) {
      ev.ns_changed = true;
    } else if (type == uint8_t(AsyncEventType::IoCommandSpecific) &&
               lid == uint8_t(LogPageId::ReservationNotification)) {
      // The notices are the application's (a cluster manager reads them with get_log_page);
      // reading them here would lose them. The type stays masked until it does.
      log::info("{}: reservation notice waiting in log page 0x80", trid.subnqn);
    } else {
      ev.to_clear.push_back(c.dw0);
    }
  }

  // Reads the log page an event names with RAE 0 (which lets the controller report that type
  // again) and logs the event in one line.
  void clear_event(uint32_t dw0) {
    const uint8_t type = dw0 & 0x7, info = (dw0 >> 8) & 0xFF, lid = (dw0 >> 16) & 0xFF;
    alignas(8) uint8_t buf[sizeof(SmartLog)] = {};
    const uint32_t len = lid == uint8_t(LogPageId::SmartHealth) ? sizeof(SmartLog) : sizeof(ErrorLogEntry);
    Completion c = admin_sync(get_log_cmd(lid, kNsidAll, len, 0, false), buf, len, false);
    std::string what;
    if (!c.status.ok()) {
      what = fmt::format("; reading log page {:#04x}: {}", lid, status_name(c.status));
    } else if (lid == uint8_t(LogPageId::Error)) {
      const auto* e = reinterpret_cast<const ErrorLogEntry*>(buf);  // the newest: the log lists newest first
      what = fmt::format(": error {} on queue {} command {}: {} (namespace {}, LBA {})", e->error_count, e->sqid,
                         e->cid, status_name(Status::from_cqe(e->status)), e->nsid, e->lba);
    } else if (lid == uint8_t(LogPageId::SmartHealth)) {
      const auto* h = reinterpret_cast<const SmartLog*>(buf);
      what = fmt::format(": critical warning {:#04x}, temperature {} K, spare {}%", h->critical_warning,
                         uint16_t(h->temperature), h->avail_spare);
    }
    log::warn("{}: asynchronous event {:#010x} ({}, information {:#04x}, log page {:#04x}){}", trid.subnqn, dw0,
              async_event_type_name(type), info, lid, what);
  }

  // A namespace attribute notice: the changed-namespace log, read with RAE 0 first (so a
  // change during the scan is reported again), names what to identify again. An empty list
  // (someone else read it) or FFFFFFFFh means every namespace.
  bool rescan_after_notice(std::string& err) {
    std::vector<uint8_t> log(kChangedNamespacesMax * 4);
    const uint32_t len = uint32_t(log.size());
    Completion c = admin_sync(get_log_cmd(uint8_t(LogPageId::ChangedNamespaces), kNsidAll, len, 0, false), log.data(),
                              len, false);
    bool all = true;
    std::vector<uint32_t> listed;
    if (c.status.ok()) listed = detail::parse_changed_namespaces(log.data(), len, all);
    else if (admin_up()) log::warn("{}: reading the changed-namespace log: {}", trid.subnqn, status_name(c.status));
    all = all || listed.empty();
    log::info("{}: namespace attribute notice: rescanning {}", trid.subnqn,
              all ? std::string("every namespace") : fmt::format("namespace(s) {}", fmt::join(listed, ", ")));
    return scan_namespaces(all ? nullptr : &listed, true, err);
  }

  // The run loop's part of event handling, between reactor turns. Each step is a few admin
  // commands run with admin_sync(), which keeps serving the reactor (keep-alive, posted
  // admin() commands) meanwhile.
  void service_events() {
    while (!stop.load(std::memory_order_relaxed) && admin_up()) {
      std::string e;
      if (!ev.to_clear.empty()) {
        const uint32_t dw0 = ev.to_clear.front();
        ev.to_clear.erase(ev.to_clear.begin());
        clear_event(dw0);
      } else if (ev.ns_changed) {
        ev.ns_changed = false;
        if (!rescan_after_notice(e)) log::warn("{}: namespace rescan failed: {}", trid.subnqn, e);
      } else if (!rescan_waiters.empty()) {
        auto waiters = std::move(rescan_waiters);  // callers from now on wait for the next scan
        rescan_waiters.clear();
        const bool ok = scan_namespaces(nullptr, true, e);
        for (auto& w : waiters) w->finish(ok ? std::string() : e);
      } else {
        return;
      }
    }
  }

  // ---------------------------------------------------------------- namespaces

  // The active namespace list (Identify CNS 02h), 1024 NSIDs a page.
  bool read_active_list(std::vector<uint32_t>& out, std::string& err) {
    out.clear();
    alignas(8) uint8_t buf[kIdentifyLen];
    uint32_t after = 0;
    for (;;) {
      Completion c = admin_sync(identify_cmd(uint8_t(Cns::ActiveNamespaceList), after, 0), buf, kIdentifyLen, false);
      if (!c.status.ok()) {
        err = fmt::format("Identify (active namespace list): {}", status_name(c.status));
        return false;
      }
      uint32_t ids[kIdentifyLen / 4];
      std::memcpy(ids, buf, sizeof(ids));
      size_t n = 0;
      while (n < kIdentifyLen / 4 && ids[n] > after) out.push_back(ids[n++]);  // ascending, zero-terminated
      if (n < kIdentifyLen / 4) return true;
      after = ids[n - 1];
    }
  }

  // Identifies the active namespaces again (those in `listed`, and any not known yet; all
  // when listed is null) and publishes what changed. notify: log the changes, count a
  // generation and call on_namespace_change (not for the scan at connect).
  bool scan_namespaces(const std::vector<uint32_t>* listed, bool notify, std::string& err) {
    std::vector<uint32_t> active;
    bool sequential = false;  // NSIDs tried one by one: most of them are expected to be inactive
    if (!read_active_list(active, err)) {
      if (!admin_up()) return false;
      // A controller older than NVMe 1.1 has no list: try every NSID up to NN, as Linux does.
      const uint32_t nn = std::min<uint32_t>(reinterpret_cast<const IdentifyController*>(ident_now)->nn,
                                             detail::BlockSizeTable::kCapacity);
      log::info("{}: {}; identifying namespaces 1 to {} instead", trid.subnqn, err, nn);
      for (uint32_t nsid = 1; nsid <= nn; ++nsid) active.push_back(nsid);
      sequential = true;
      err.clear();
    }
    std::map<uint32_t, NamespaceInfo> next;
    alignas(8) uint8_t buf[kIdentifyLen];
    for (uint32_t nsid : active) {
      auto known = namespaces.find(nsid);  // this thread is the only writer: no lock to read
      if (listed && known != namespaces.end() && std::find(listed->begin(), listed->end(), nsid) == listed->end()) {
        next.emplace(nsid, known->second);
        continue;
      }
      Completion c = admin_sync(identify_cmd(uint8_t(Cns::Namespace), nsid, 0), buf, kIdentifyLen, false);
      if (!admin_up()) {
        err = fmt::format("Identify Namespace {}: {}", nsid, status_name(c.status));
        return false;
      }
      if (!c.status.ok()) {
        // As the Linux host: an error is no reason to drop a namespace we know.
        if (known != namespaces.end() || !sequential)
          log::warn("{}: Identify Namespace {}: {}{}", trid.subnqn, nsid, status_name(c.status),
                    known != namespaces.end() ? "; keeping what was known" : "; not used");
        if (known != namespaces.end()) next.emplace(nsid, known->second);
        continue;
      }
      const auto* id = reinterpret_cast<const IdentifyNamespace*>(buf);
      if (id->nsze == 0) continue;  // inactive (removed since the list was read)
      NamespaceInfo ni;
      std::string why;
      if (detail::namespace_from_identify(nsid, *id, ni, why)) next.emplace(nsid, ni);
      else log::warn("{}: {}: not used", trid.subnqn, why);
    }
    const auto changes = detail::diff_namespaces(namespaces, next);
    if (changes.empty()) return true;
    std::vector<std::pair<uint32_t, uint32_t>> sizes;
    for (const auto& [nsid, ni] : next) sizes.emplace_back(nsid, ni.block_size);
    if (!block_sizes->publish(sizes))
      log::warn("{}: {} namespaces; read()/write() know the block size of the first {} only", trid.subnqn,
                sizes.size(), detail::BlockSizeTable::kCapacity);
    {
      std::lock_guard lk(ns_mu);
      namespaces = std::move(next);
    }
    if (!notify) return true;
    for (const auto& ch : changes) {
      using Kind = detail::NamespaceChangeKind;
      // What was written there is gone for the application: louder than a size change.
      if (ch.kind == Kind::Removed || ch.kind == Kind::Replaced) log::warn("{}: {}", trid.subnqn, detail::describe(ch));
      else log::info("{}: {}", trid.subnqn, detail::describe(ch));
    }
    ns_generation.fetch_add(1, std::memory_order_release);  // after the publish above
    if (opts.on_namespace_change)
      for (const auto& ch : changes) opts.on_namespace_change(ch.nsid);
    return true;
  }

  // Connects the admin queue and brings the controller up the way the specification
  // orders it: CAP, VS, CC.EN, CSTS.RDY, Identify, Number of Queues. On the first
  // association the results are kept; a reconnect only checks them.
  bool associate(bool first, std::string& err) {
    QueueParams p;
    p.trid = trid;
    p.qid = 0;
    p.depth = std::max<uint16_t>(opts.admin_queue_depth, 4);
    p.kato_ms = discovery ? 0 : opts.kato_ms;
    std::memcpy(p.hostid, hostid, 16);
    p.hostnqn = hostnqn;
    p.hdgst = opts.hdgst;
    p.ddgst = opts.ddgst;
    p.in_capsule_max = 8192;
    p.max_transfer = 1u << 20;
    p.timeout_ms = opts.connect_timeout_ms;
    p.tcp_congestion = opts.tcp_congestion;
    p.io_timeout_ms = opts.admin_timeout_ms;
    admin = std::make_unique<QueuePairImpl>(*reactor, p);
    if (!admin->connect(err)) return false;

    auto failed = [&](const std::string& what, const Completion& cpl) {
      err = fmt::format("{}: {}", what, status_name(cpl.status));
      return false;
    };
    Completion cpl = admin_sync(property_get_cmd(prop::CAP, true), nullptr, 0, false);
    if (!cpl.status.ok()) return failed("Property Get CAP", cpl);
    uint64_t new_cap = (uint64_t(cpl.dw1) << 32) | cpl.dw0;
    cpl = admin_sync(property_get_cmd(prop::VS, false), nullptr, 0, false);
    if (!cpl.status.ok()) return failed("Property Get VS", cpl);
    if (first) {
      cap = new_cap;
      vs = cpl.dw0;
    }
    // CC: enable, NVM command set, 4 KiB pages, round robin, 64-byte SQEs, 16-byte CQEs.
    uint32_t cc = prop::kCcEnable | (6u << 16) | (4u << 20);
    cpl = admin_sync(property_set_cmd(prop::CC, cc), nullptr, 0, false);
    if (!cpl.status.ok()) return failed("Property Set CC", cpl);
    uint32_t timeout_ms = std::max<uint32_t>(prop::cap_timeout_ms(new_cap), 500);
    uint64_t deadline = reactor::monotonic_ns() + uint64_t(timeout_ms) * 1000000ull;
    for (;;) {
      cpl = admin_sync(property_get_cmd(prop::CSTS, false), nullptr, 0, false);
      if (!cpl.status.ok()) return failed("Property Get CSTS", cpl);
      if (cpl.dw0 & prop::kCstsFatal) {
        err = "controller reported a fatal status (CSTS.CFS) while enabling";
        return false;
      }
      if (cpl.dw0 & prop::kCstsReady) break;
      if (reactor::monotonic_ns() > deadline) {
        err = fmt::format("controller not ready after {} ms (CAP.TO)", timeout_ms);
        return false;
      }
      wait_ms(1);
    }
    // Other threads read ident once connect() has returned: a reconnect leaves it alone.
    cpl = admin_sync(identify_cmd(uint8_t(Cns::Controller), 0, 0), ident_now, kIdentifyLen, false);
    if (!cpl.status.ok()) return failed("Identify Controller", cpl);
    const auto* was = reinterpret_cast<const IdentifyController*>(ident);
    const auto* now = reinterpret_cast<const IdentifyController*>(ident_now);
    if (!first) {
      // Whatever answers at this address must be the controller we had: writing another
      // subsystem's namespaces as if they were ours would destroy data.
      const std::string why = detail::identity_mismatch(*was, *now);
      if (!why.empty()) {
        err = fmt::format("another controller answered ({})", why);
        refused = true;
        return false;
      }
      if (detail::firmware_revision(*was) != detail::firmware_revision(*now))
        log::info("{}: firmware revision {} is now {}", trid.subnqn, detail::firmware_revision(*was),
                  detail::firmware_revision(*now));
    }
    if (first) {
      std::memcpy(ident, ident_now, kIdentifyLen);
      const auto* id = reinterpret_cast<const IdentifyController*>(ident);
      // MDTS is in units of the minimum page size (CAP.MPSMIN, 4 KiB << n); 0 = no limit.
      uint32_t mpsmin = 4096u << ((cap >> 48) & 0xF);
      max_transfer = id->mdts ? std::min<uint64_t>(uint64_t(mpsmin) << id->mdts, 8u << 20) : (8u << 20);
      in_capsule_max = id->ioccsz >= 4 ? id->ioccsz * 16 - 64 : 0;
    }
    if (!discovery) {
      Sqe sf{};
      sf.opc = uint8_t(AdminOpcode::SetFeatures);
      sf.cdw10 = 0x07;
      uint32_t n = std::max<uint32_t>(opts.io_queues, 1) - 1;
      sf.cdw11 = n | (n << 16);
      cpl = admin_sync(sf, nullptr, 0, false);
      if (!cpl.status.ok()) return failed("Set Features (Number of Queues)", cpl);
      uint32_t granted = std::min(cpl.dw0 & 0xFFFF, cpl.dw0 >> 16) + 1;
      if (first) {
        ioq_granted = granted;
        qid_used.assign(ioq_granted + 1, false);
      } else if (granted < ioq_granted) {
        log::warn("{}: the controller now grants {} I/O queues, not {}: queues above that will not reconnect",
                  trid.subnqn, granted, ioq_granted);
      }
    }
    cntlid_now.store(admin->cntlid(), std::memory_order_release);
    return true;
  }

  // The admin queue failed or an I/O queue asked for a reset: reconnect every
  // reconnect_delay_ms until ctrl_loss_tmo_ms, or give the controller up.
  void recover(const std::string& why) {
    if (!opts.ctrl_loss_tmo_ms) {
      set_link_state(LinkState::Deleted);
      log::error("{} (controller {}): {}; reconnect is off (ctrl_loss_tmo 0)", trid.subnqn, cntlid_now.load(), why);
      return;
    }
    set_link_state(LinkState::Resetting);
    reset_count.fetch_add(1, std::memory_order_relaxed);
    uint64_t lost = reactor::monotonic_ns();
    log::warn("{} (controller {}): resetting: {}; reconnecting every {} ms for up to {} ms", trid.subnqn,
              cntlid_now.load(), why, opts.reconnect_delay_ms, opts.ctrl_loss_tmo_ms);
    reactor->cancel_timer(&ka_timer);
    admin.reset();  // ends its outstanding commands with a path error
    ka_outstanding = false;
    for (unsigned attempt = 1; !stop.load(std::memory_order_relaxed); ++attempt) {
      wait_ms(opts.reconnect_delay_ms);
      if (stop.load(std::memory_order_relaxed)) return;
      uint64_t elapsed_ms = (reactor::monotonic_ns() - lost) / 1000000ull;
      if (elapsed_ms >= opts.ctrl_loss_tmo_ms) {
        set_link_state(LinkState::Deleted);
        log::error("{}: no connection for {} ms (ctrl_loss_tmo): controller lost", trid.subnqn, elapsed_ms);
        return;
      }
      std::string e;
      reset_requested.store(false, std::memory_order_release);
      // Events first, then the scan: a change after the scan's Identify is then reported.
      // The scan comes before the I/O queues reconnect (gen), so on_namespace_change tells
      // of a replaced namespace before held commands go out again.
      if (associate(false, e) && start_events(e) && scan_namespaces(nullptr, true, e)) {
        gen.fetch_add(1, std::memory_order_acq_rel);
        set_link_state(LinkState::Live);
        arm_keep_alive();
        log::info("{}: reconnected as controller {} after {} ms ({} attempts)", trid.subnqn, cntlid_now.load(),
                  (reactor::monotonic_ns() - lost) / 1000000ull, attempt);
        return;
      }
      if (refused) {
        set_link_state(LinkState::Deleted);
        log::error("{}: reconnect refused: {}: controller failed for good", trid.subnqn, e);
        admin.reset();
        return;
      }
      log::warn("{}: reconnect attempt {} failed: {}", trid.subnqn, attempt, e);
      admin.reset();
    }
  }

  void run(std::promise<std::string>* connected) {
    admin_tid = std::this_thread::get_id();
    reactor::Reactor r(256);
    {
      std::lock_guard lk(mu);
      reactor = &r;
    }
    std::string e;
    bool ok = associate(true, e) && start_events(e) && (discovery || scan_namespaces(nullptr, false, e));
    if (ok) {
      gen.store(1, std::memory_order_release);
      set_link_state(LinkState::Live);
      arm_keep_alive();
    }
    connected->set_value(ok ? std::string() : e);  // connected is gone after this
    while (ok && !stop.load(std::memory_order_relaxed)) {
      r.run_once(50000);
      if (stop.load(std::memory_order_relaxed)) continue;
      if (link_state() == LinkState::Deleted) {
        for (auto& w : rescan_waiters) w->finish("the controller is lost");
        rescan_waiters.clear();
        continue;
      }
      if (!admin || admin->failed()) {
        recover(admin ? "admin queue: " + admin->error() : "admin queue lost");
      } else if (reset_requested.exchange(false, std::memory_order_acq_rel)) {
        std::string why;
        {
          std::lock_guard lk(mu);
          why = reset_reason;
        }
        recover(why);
      } else if (link_state() == LinkState::Live) {
        service_events();
      }
    }
    r.cancel_timer(&ka_timer);
    admin.reset();
    for (auto& w : rescan_waiters) w->finish("the controller is shutting down");
    rescan_waiters.clear();
    std::lock_guard lk(mu);
    reactor = nullptr;
  }
};

Controller::Controller() = default;

std::unique_ptr<Controller> Controller::connect(const TransportId& trid, const ControllerOptions& opts,
                                                std::string& err) {
  std::unique_ptr<Controller> c(new Controller());
  if (trid.trtype == "engine") {
    c->engine_ = detail::EngineClient::connect(trid, opts, err);
    if (!c->engine_) return nullptr;
    std::vector<std::pair<uint32_t, uint32_t>> block_sizes;
    for (uint32_t nsid : c->active_namespaces()) {
      NamespaceInfo ni;
      std::string e;
      if (c->namespace_info(nsid, ni, e)) block_sizes.emplace_back(nsid, ni.block_size);
    }
    c->engine_->set_block_sizes(std::move(block_sizes));
    log::debug("attached to {} through the engine at {} (controller {}, {} I/O queues)", trid.subnqn, trid.traddr,
               c->cntlid(), c->io_queues_granted());
    return c;
  }
  c->s_ = std::make_shared<State>();
  State& st = *c->s_;
  st.trid = trid;
  st.opts = opts;
  st.opts.hdgst = opts.hdgst || trid.hdgst;
  st.opts.ddgst = opts.ddgst || trid.ddgst;
  st.discovery = trid.subnqn.empty() || trid.subnqn == kDiscoveryNqn;
  if (st.discovery) st.trid.subnqn = kDiscoveryNqn;
  std::memcpy(st.hostid, opts.hostid, 16);
  if (std::all_of(st.hostid, st.hostid + 16, [](uint8_t b) { return b == 0; })) {
    std::random_device rd;
    for (auto& b : st.hostid) b = uint8_t(rd());
    st.hostid[6] = uint8_t((st.hostid[6] & 0x0F) | 0x40);
    st.hostid[8] = uint8_t((st.hostid[8] & 0x3F) | 0x80);
  }
  st.hostnqn = !trid.hostnqn.empty() ? trid.hostnqn : !opts.hostnqn.empty() ? opts.hostnqn : default_hostnqn(st.hostid);
  st.ka_timer.st = &st;
  st.ka_timer.fn = State::keep_alive;

  // The admin thread connects and enables the controller, then serves until stopped.
  std::promise<std::string> connected;
  auto connected_f = connected.get_future();
  st.thread = std::thread([sp = &st, &connected] { sp->run(&connected); });
  err = connected_f.get();
  if (!err.empty()) {
    st.stop = true;
    st.thread.join();
    return nullptr;
  }
  log::debug("connected to {} (controller {}, {} I/O queues)", st.trid.subnqn, c->cntlid(), st.ioq_granted);
  return c;
}

Controller::~Controller() {
  if (!s_) return;
  State& st = *s_;
  if (st.link_state() == State::LinkState::Live) {
    // Normal shutdown: CC.SHN = 01b, then wait briefly for CSTS.SHST = complete.
    uint32_t cc = prop::kCcEnable | (6u << 16) | (4u << 20) | (1u << prop::kCcShnShift);
    Completion cpl = admin(property_set_cmd(prop::CC, cc), nullptr, 0, false);
    if (cpl.status.ok()) {
      for (int i = 0; i < 100; ++i) {
        cpl = admin(property_get_cmd(prop::CSTS, false), nullptr, 0, false);
        if (!cpl.status.ok() || (cpl.dw0 & prop::kCstsShstMask) == prop::kCstsShstComplete) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
  st.stop = true;
  st.post_to_admin([] {});
  if (st.thread.joinable()) st.thread.join();
  // Queue pairs may outlive this object: nothing will reconnect them any more.
  if (st.link_state() != State::LinkState::Deleted) st.set_link_state(State::LinkState::Deleted);
}

Completion Controller::admin(const Sqe& sqe, void* data, uint32_t len, bool to_controller) {
  if (engine_) return engine_->admin(sqe, data, len, to_controller);
  State& st = *s_;
  // From the admin thread itself (an on_namespace_change callback): waiting for that thread
  // would wait for ourselves.
  if (std::this_thread::get_id() == st.admin_tid) return st.admin_sync(sqe, data, len, to_controller);
  auto w = std::make_shared<AdminWait>();
  Completion fail_cpl;
  fail_cpl.status = sc::TransportError;
  if (st.link_state() != State::LinkState::Live) return fail_cpl;
  w->bounce.assign(len, 0);
  if (to_controller && len) std::memcpy(w->bounce.data(), data, len);
  st.post_to_admin([&st, w, sqe, len, to_controller] {
    auto* holder = new std::shared_ptr<AdminWait>(w);
    void* buf = len ? w->bounce.data() : nullptr;
    bool live = st.admin && st.link_state() == State::LinkState::Live;
    int rc = live ? st.admin->submit(sqe, buf, len, to_controller,
                                     [](void* ctx, const Completion& c) {
                                       auto* h = static_cast<std::shared_ptr<AdminWait>*>(ctx);
                                       {
                                         std::lock_guard lk((*h)->mu);
                                         (*h)->cpl = c;
                                         (*h)->done = true;
                                       }
                                       (*h)->cv.notify_all();
                                       delete h;
                                     },
                                     holder)
                  : -ENOTCONN;
    if (rc != 0) {
      delete holder;
      std::lock_guard lk(w->mu);
      w->cpl.status = sc::TransportError;
      w->done = true;
      w->cv.notify_all();
    }
  });
  std::unique_lock lk(w->mu);
  // The admin queue times commands out itself (and then resets); this is a backstop for
  // an admin thread that is gone.
  uint32_t limit_ms = st.opts.admin_timeout_ms * 2 + 5000;
  if (!w->cv.wait_for(lk, std::chrono::milliseconds(limit_ms), [&] { return w->done; })) {
    log::warn("admin command 0x{:02x} not answered after {} ms", sqe.opc, limit_ms);
    return fail_cpl;
  }
  // Completed: the admin thread is done with the bounce buffer.
  if (!to_controller && len) std::memcpy(data, w->bounce.data(), len);
  return w->cpl;
}

Completion Controller::identify(uint8_t cns, uint32_t nsid, void* buf, uint32_t cdw11) {
  return admin(identify_cmd(cns, nsid, cdw11), buf, kIdentifyLen, false);
}

Completion Controller::get_log_page(uint8_t lid, uint32_t nsid, void* buf, uint32_t len, uint64_t offset) {
  return admin(get_log_cmd(lid, nsid, len, offset, false), buf, len, false);
}

std::vector<uint32_t> Controller::active_namespaces() {
  if (!engine_) {
    std::lock_guard lk(s_->ns_mu);
    std::vector<uint32_t> out;
    for (const auto& [nsid, ni] : s_->namespaces) out.push_back(nsid);
    return out;
  }
  std::vector<uint32_t> out;
  alignas(8) uint8_t buf[kIdentifyLen];
  uint32_t after = 0;
  for (;;) {
    Completion c = identify(uint8_t(Cns::ActiveNamespaceList), after, buf);
    if (!c.status.ok()) break;
    const auto* ids = reinterpret_cast<const uint32_t*>(buf);
    size_t n = 0;
    while (n < kIdentifyLen / 4 && ids[n]) out.push_back(ids[n++]);
    if (n < kIdentifyLen / 4) break;
    after = ids[n - 1];
  }
  return out;
}

bool Controller::namespace_info(uint32_t nsid, NamespaceInfo& out, std::string& err) {
  if (!engine_) {
    std::lock_guard lk(s_->ns_mu);
    auto it = s_->namespaces.find(nsid);
    if (it == s_->namespaces.end()) {
      err = fmt::format("namespace {} is not active (as of the last scan)", nsid);
      return false;
    }
    out = it->second;
    return true;
  }
  alignas(8) uint8_t buf[kIdentifyLen];
  Completion c = identify(uint8_t(Cns::Namespace), nsid, buf);
  if (!c.status.ok()) {
    err = fmt::format("Identify Namespace {}: {}", nsid, status_name(c.status));
    return false;
  }
  return detail::namespace_from_identify(nsid, *reinterpret_cast<const IdentifyNamespace*>(buf), out, err);
}

uint64_t Controller::namespace_generation() const {
  return engine_ ? 0 : s_->ns_generation.load(std::memory_order_acquire);
}

bool Controller::rescan_namespaces(std::string& err) {
  if (engine_) {
    // The engine is asked at every namespace_info(); only read()/write()'s block sizes are kept.
    std::vector<std::pair<uint32_t, uint32_t>> sizes;
    for (uint32_t nsid : active_namespaces()) {
      NamespaceInfo ni;
      std::string e;
      if (namespace_info(nsid, ni, e)) sizes.emplace_back(nsid, ni.block_size);
    }
    engine_->set_block_sizes(sizes);
    return true;
  }
  State& st = *s_;
  if (std::this_thread::get_id() == st.admin_tid) {
    err = "rescan_namespaces() called on the admin thread (from on_namespace_change?)";
    return false;
  }
  if (st.discovery) {
    err = "a discovery controller has no namespaces";
    return false;
  }
  if (!live()) {
    err = failed() ? "the controller is lost" : "the controller is resetting";
    return false;
  }
  auto w = std::make_shared<ScanWait>();
  st.post_to_admin([&st, w] { st.rescan_waiters.push_back(w); });
  std::unique_lock lk(w->mu);
  // Bounded like admin(): each command of the scan is bounded by the admin timeout.
  const uint32_t limit_ms = st.opts.admin_timeout_ms * 4 + 5000;
  if (!w->cv.wait_for(lk, std::chrono::milliseconds(limit_ms), [&] { return w->done; })) {
    err = fmt::format("namespace rescan not finished after {} ms", limit_ms);
    return false;
  }
  err = w->err;
  return err.empty();
}

bool Controller::discovery_log(std::vector<uint8_t>& out, std::string& err) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::vector<uint8_t> head(sizeof(DiscoveryLogHeader));
    Completion c = get_log_page(uint8_t(LogPageId::Discovery), 0, head.data(), uint32_t(head.size()));
    if (!c.status.ok()) {
      err = fmt::format("Get Log Page (discovery): {}", status_name(c.status));
      return false;
    }
    const auto* h = reinterpret_cast<const DiscoveryLogHeader*>(head.data());
    uint64_t numrec = std::min<uint64_t>(h->numrec, 1000);
    uint64_t genctr = h->genctr;
    out.assign(sizeof(DiscoveryLogHeader) + numrec * sizeof(DiscoveryLogEntry), 0);
    if (numrec) {
      c = get_log_page(uint8_t(LogPageId::Discovery), 0, out.data(), uint32_t(out.size()));
      if (!c.status.ok()) {
        err = fmt::format("Get Log Page (discovery entries): {}", status_name(c.status));
        return false;
      }
    } else {
      out = head;
    }
    // The log changed between the two reads: read it again.
    if (reinterpret_cast<const DiscoveryLogHeader*>(out.data())->genctr == genctr) return true;
  }
  err = "discovery log kept changing while being read";
  return false;
}

std::unique_ptr<QueuePair> Controller::create_io_qpair(uint32_t depth, std::string& err) {
  if (engine_) {
    auto q = engine_->create_io_queue(depth, err);
    if (!q) return nullptr;
    return std::unique_ptr<QueuePair>(new QueuePair(std::move(q), max_transfer_bytes()));
  }
  State& st = *s_;
  if (st.discovery) {
    err = "a discovery controller has no I/O queues";
    return nullptr;
  }
  if (!live()) {
    err = failed() ? "the controller is lost" : "the controller is resetting";
    return nullptr;
  }
  uint32_t mqes = prop::cap_mqes(st.cap);
  if (depth < 1 || depth > mqes) {
    err = fmt::format("queue depth {} out of range (1..{}, from CAP.MQES)", depth, mqes);
    return nullptr;
  }
  uint16_t qid = 0;
  {
    std::lock_guard lk(st.mu);
    for (uint32_t q = 1; q < st.qid_used.size(); ++q) {
      if (!st.qid_used[q]) {
        st.qid_used[q] = true;
        qid = uint16_t(q);
        break;
      }
    }
  }
  if (qid == 0) {
    err = fmt::format("all {} I/O queues the controller granted are in use", st.ioq_granted);
    return nullptr;
  }
  auto lease = std::shared_ptr<void>(nullptr, [keep = s_, qid](void*) {
    std::lock_guard lk(keep->mu);
    keep->qid_used[qid] = false;
  });
  QueueParams p;
  p.trid = st.trid;
  p.qid = qid;
  p.cntlid = cntlid();
  p.depth = depth;
  std::memcpy(p.hostid, st.hostid, 16);
  p.hostnqn = st.hostnqn;
  p.hdgst = st.opts.hdgst;
  p.ddgst = st.opts.ddgst;
  p.in_capsule_max = st.in_capsule_max;
  p.max_transfer = st.max_transfer;
  p.timeout_ms = st.opts.connect_timeout_ms;
  p.tcp_congestion = st.opts.tcp_congestion;
  p.ctrl_loss_tmo_ms = st.opts.ctrl_loss_tmo_ms;
  p.reconnect_delay_ms = st.opts.reconnect_delay_ms;
  p.fast_io_fail_tmo_ms = st.opts.fast_io_fail_tmo_ms;
  p.io_timeout_ms = st.opts.io_timeout_ms;
  p.max_retries = st.opts.max_retries;
  auto impl = std::make_unique<QueuePairImpl>(thread_reactor(st.opts), p, s_);
  impl->lease = lease;
  impl->block_sizes = st.block_sizes;
  if (!impl->connect(err)) return nullptr;
  return std::unique_ptr<QueuePair>(new QueuePair(std::move(impl), max_transfer_bytes()));
}

const uint8_t* Controller::identify_data() const { return engine_ ? engine_->identify_data() : s_->ident; }
uint16_t Controller::cntlid() const { return engine_ ? engine_->cntlid() : s_->link_cntlid(); }
uint32_t Controller::io_queues_granted() const { return engine_ ? engine_->io_queues_granted() : s_->ioq_granted; }
uint32_t Controller::max_transfer_bytes() const { return engine_ ? engine_->max_transfer_bytes() : s_->max_transfer; }
uint64_t Controller::cap() const { return engine_ ? engine_->cap() : s_->cap; }
uint32_t Controller::version() const { return engine_ ? engine_->version() : s_->vs; }
const TransportId& Controller::trid() const { return engine_ ? engine_->trid() : s_->trid; }
const std::string& Controller::hostnqn() const { return engine_ ? engine_->hostnqn() : s_->hostnqn; }
bool Controller::failed() const {
  return engine_ ? engine_->failed() : s_->link_state() == State::LinkState::Deleted;
}
bool Controller::live() const { return engine_ ? !engine_->failed() : s_->link_state() == State::LinkState::Live; }
uint32_t Controller::resets() const { return engine_ ? 0 : s_->reset_count.load(std::memory_order_relaxed); }

void* Controller::alloc_io_buffer(size_t len) {
  if (engine_) return engine_->alloc(len);
  return std::aligned_alloc(4096, (len + 4095) & ~size_t(4095));
}

void Controller::free_io_buffer(void* p) {
  if (engine_) return engine_->free(p);
  std::free(p);
}

// ---------------------------------------------------------------- QueuePair

namespace detail {
// Split reads and writes in flight on one queue pair: at most one per slot, made once.
class SplitPool {
 public:
  explicit SplitPool(uint32_t n) : slots_(n) {
    for (auto& s : slots_) {
      s.pool = this;
      s.next = free_;
      free_ = &s;
    }
  }
  struct Split {
    SplitPool* pool = nullptr;
    Split* next = nullptr;
    CompletionFn cb = nullptr;
    void* ctx = nullptr;
    uint32_t remaining = 0;  // parts not yet completed
    Completion result;       // the first failure, else success
  };
  Split* take() {
    Split* s = free_;
    if (s) free_ = s->next;
    return s;
  }
  void give_back(Split* s) {
    s->next = free_;
    free_ = s;
  }
  // One part done; the caller hears once, after the last.
  static void on_part(void* ctx, const Completion& c) {
    auto* s = static_cast<Split*>(ctx);
    if (!c.status.ok() && s->result.status.ok()) s->result = c;
    if (--s->remaining == 0) s->pool->finish(s);
  }
  void finish(Split* s) {
    const CompletionFn cb = s->cb;
    void* const ctx = s->ctx;
    const Completion result = s->result;
    give_back(s);
    cb(ctx, result);
  }

 private:
  std::vector<Split> slots_;
  Split* free_ = nullptr;
};
}  // namespace detail

QueuePair::QueuePair(std::unique_ptr<detail::IoQueue> impl, uint32_t max_transfer)
    : max_transfer_(max_transfer), impl_(std::move(impl)) {}
QueuePair::~QueuePair() {
  impl_.reset();  // its outstanding commands complete now, while the split pool still exists
}

int QueuePair::submit(const Sqe& sqe, void* data, uint32_t len, bool to_controller, CompletionFn cb, void* ctx) {
  return impl_->submit(sqe, data, len, to_controller, cb, ctx);
}

uint32_t QueuePair::block_size(uint32_t nsid) const {
  return impl_->block_sizes ? impl_->block_sizes->find(nsid) : 0;
}

namespace {
Sqe rw_cmd(IoOpcode op, uint32_t nsid, uint64_t slba, uint32_t nlb) {
  Sqe s{};
  s.opc = uint8_t(op);
  s.nsid = nsid;
  s.cdw10 = uint32_t(slba);
  s.cdw11 = uint32_t(slba >> 32);
  s.cdw12 = (nlb - 1) & 0xFFFF;
  return s;
}
}  // namespace

int QueuePair::read(uint32_t nsid, uint64_t slba, uint32_t nlb, void* buf, CompletionFn cb, void* ctx) {
  return read_write(IoOpcode::Read, nsid, slba, nlb, buf, false, 0, cb, ctx);
}

int QueuePair::write(uint32_t nsid, uint64_t slba, uint32_t nlb, const void* buf, CompletionFn cb, void* ctx,
                     WriteFlags flags) {
  return read_write(IoOpcode::Write, nsid, slba, nlb, const_cast<void*>(buf), true, flags.fua ? Sqe::kRwFua : 0,
                    cb, ctx);
}

int QueuePair::read_write(IoOpcode op, uint32_t nsid, uint64_t slba, uint32_t nlb, void* buf, bool to_controller,
                          uint32_t cdw12_flags, CompletionFn cb, void* ctx) {
  const uint32_t bs = block_size(nsid);
  if (!bs || nlb == 0 || nlb > 65536) return -EINVAL;
  const uint32_t per = max_transfer_ / bs;  // blocks one command may carry
  if (max_transfer_ == 0 || per == 0 || nlb <= per) {
    Sqe s = rw_cmd(op, nsid, slba, nlb);
    s.cdw12 |= cdw12_flags;
    return impl_->submit(s, buf, nlb * bs, to_controller, cb, ctx);
  }
  const uint32_t parts = (nlb + per - 1) / per;
  if (parts > impl_->depth()) return -EINVAL;  // could never be in flight at once
  if (impl_->depth() - impl_->outstanding() < parts) return -EBUSY;
  if (!splits_) splits_ = std::make_unique<detail::SplitPool>(impl_->depth());  // once per queue pair
  detail::SplitPool::Split* split = splits_->take();
  if (!split) return -EBUSY;
  split->cb = cb;
  split->ctx = ctx;
  split->remaining = parts;
  split->result = {};
  for (uint32_t i = 0; i < parts; ++i) {
    const uint32_t n = std::min(per, nlb - i * per);
    Sqe s = rw_cmd(op, nsid, slba + uint64_t(i) * per, n);
    s.cdw12 |= cdw12_flags;
    const int rc = impl_->submit(s, static_cast<uint8_t*>(buf) + uint64_t(i) * per * bs, n * bs, to_controller,
                                 &detail::SplitPool::on_part, split);
    if (rc == 0) continue;
    if (i == 0) {
      splits_->give_back(split);
      return rc;
    }
    // Some parts are out: they complete, and the caller hears the failure of the rest then.
    split->remaining -= parts - i;
    if (split->result.status.ok()) split->result.status = sc::TransportError;
    break;
  }
  return 0;
}

int QueuePair::flush(uint32_t nsid, CompletionFn cb, void* ctx) {
  Sqe s{};
  s.opc = uint8_t(IoOpcode::Flush);
  s.nsid = nsid;
  return impl_->submit(s, nullptr, 0, false, cb, ctx);
}

int QueuePair::write_zeroes(uint32_t nsid, uint64_t slba, uint32_t nlb, CompletionFn cb, void* ctx) {
  if (nlb == 0 || nlb > 65536) return -EINVAL;
  return impl_->submit(rw_cmd(IoOpcode::WriteZeroes, nsid, slba, nlb), nullptr, 0, false, cb, ctx);
}

int QueuePair::deallocate(uint32_t nsid, const DsmRange* ranges, uint32_t n, CompletionFn cb, void* ctx) {
  if (n == 0 || n > 256) return -EINVAL;
  Sqe s{};
  s.opc = uint8_t(IoOpcode::DatasetManagement);
  s.nsid = nsid;
  s.cdw10 = n - 1;
  s.cdw11 = 1u << 2;  // AD: deallocate
  return impl_->submit(s, const_cast<DsmRange*>(ranges), n * uint32_t(sizeof(DsmRange)), true, cb, ctx);
}

int QueuePair::process_completions(uint32_t timeout_us) { return impl_->poll(timeout_us); }
uint16_t QueuePair::qid() const { return impl_->qid(); }
uint32_t QueuePair::depth() const { return impl_->depth(); }
uint32_t QueuePair::outstanding() const { return impl_->outstanding(); }
bool QueuePair::failed() const { return impl_->failed(); }
bool QueuePair::connected() const { return impl_->ready(); }
uint32_t QueuePair::reconnects() const { return impl_->reconnects(); }

}  // namespace nvtcp::host

// SPDX-License-Identifier: Apache-2.0
#include "engine/engine.hpp"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <cstring>
#include <future>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_set>

#include <fmt/format.h>

#include "engine/admin_buffers.hpp"
#include "engine/app_controller.hpp"
#include "engine/io_forwarder.hpp"
#include "reactor/reactor.hpp"
#include "shm/attach.hpp"
#include "util/log.hpp"

namespace nvtcp::engine {

namespace {
uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

using reactor::monotonic_ns;
}  // namespace

// A remote subsystem: one controller, or (several --controller entries with its subnqn) one
// multipath controller over every path, whose first connected path's controller is ctrl.
// What stats() reads of a remote controller while the engine runs.
struct RemoteCounters {
  std::atomic<uint32_t> applications{0};
  std::atomic<uint64_t> namespace_notices{0};
};

struct Remote {
  host::TransportId trid;
  std::vector<host::TransportId> paths;  // more than one: multipath
  std::unique_ptr<host::MultipathController> mp;
  std::shared_ptr<host::Controller> ctrl;
  std::vector<uint8_t> identify;  // Identify Controller, 4 KiB
  std::unique_ptr<RemoteCounters> counters = std::make_unique<RemoteCounters>();
  // The controller admin commands go to: with several paths, one that is connected now.
  std::shared_ptr<host::Controller> admin_controller() const {
    if (!mp) return ctrl;
    auto c = mp->any_controller();
    return c ? c : ctrl;
  }
};

struct AppSlot;

// Work for an engine core, from the control thread.
struct CoreOp {
  enum class Kind { Add, Remove, Coalescing } kind;
  AppController* owner;
  uint16_t qid;
  size_t remote = 0;
  shm::QueueMemory mem{};
  uint8_t* data = nullptr;
  uint64_t data_bytes = 0;
  int vector_fd = -1;
  bool abandon = false;
  uint32_t coalescing = 0;  // feature 08h's value
  shm::EngineQueuePair::CqPosition cq;  // Add: where the CQ goes on from
};

// What a core tells the control thread.
struct CoreEvent {
  enum class Kind { Stopped, Faulted } kind;
  AppController* owner;
  uint16_t qid;
  shm::EngineQueuePair::CqPosition cq;  // Stopped: where the queue's CQ stands
};

// An application's admin command for a remote controller, run by the admin worker.
struct AdminJob {
  AppController* owner;
  size_t remote;
  nvme::Sqe sqe;
  AdminBuffer data;  // from the engine's AdminBufferPool; given back when the job is done
  bool to_controller;
  uint64_t tag;
  host::Completion result;
};

struct Engine::Impl {
  struct Core final : IoForwarder::Events {
    Impl* engine = nullptr;
    int cpu = -1;
    size_t index = 0;
    std::thread thread;
    std::vector<std::unique_ptr<host::QueuePair>> qps;  // per remote controller
    std::vector<std::unique_ptr<host::MultipathQueuePair>> mqps;  // per multipath remote, instead
    std::vector<std::unique_ptr<IoForwarder>> fwds;     // per remote controller
    reactor::Reactor* reactor = nullptr;
    std::mutex mu;
    std::vector<CoreOp> inbox;
    std::atomic<bool> has_mail{false};
    std::atomic<bool> sleeping{false};
    std::atomic<uint32_t> queues{0};  // placed here (for placement only)
    struct Placed {
      AppController* owner;
      uint16_t qid;
      size_t remote;
      IoForwarder::Queue* q;
    };
    std::vector<Placed> placed;
    // Published for stats() from time to time.
    std::atomic<uint64_t> forwarded{0}, completed{0}, dropped{0}, refused{0}, refused_opcodes{0}, interrupts{0},
        sleeps{0}, cpu_ns{0};
    std::atomic<uint32_t> in_flight{0};
    std::atomic<uint64_t> busy_ns{0};
    uint64_t busy_ns_turns = 0;  // the core's own count, published as busy_ns
    // Per remote controller (index as fwds), made before the core's thread starts.
    struct PerRemote {
      std::atomic<uint64_t> forwarded{0}, completed{0};
      std::atomic<uint32_t> in_flight{0};
      PublishedIoTotals reads, writes;
    };
    std::unique_ptr<PerRemote[]> per_remote;

    void on_queue_removed(void* owner, uint16_t qid, shm::EngineQueuePair::CqPosition cq) override {
      auto it = std::find_if(placed.begin(), placed.end(),
                             [&](const Placed& p) { return p.owner == owner && p.qid == qid; });
      if (it != placed.end()) placed.erase(it);
      queues.fetch_sub(1, std::memory_order_relaxed);
      engine->post_event({CoreEvent::Kind::Stopped, static_cast<AppController*>(owner), qid, cq});
    }
    void on_queue_fault(void* owner, uint16_t qid, shm::EngineQueuePair::Fault) override {
      engine->post_event({CoreEvent::Kind::Faulted, static_cast<AppController*>(owner), qid, {}});
    }
    // Wakes the core's reactor (only when it sleeps, unless always). The reactor is the
    // thread's own and goes with the thread: reactor_mu keeps it from going mid-post.
    void wake(bool always = false) {
      if (!always && !sleeping.load(std::memory_order_seq_cst)) return;
      std::lock_guard lk(reactor_mu);
      if (reactor) reactor->post([] {});
    }
    std::mutex reactor_mu;
    void send(CoreOp op) {
      {
        std::lock_guard lk(mu);
        inbox.push_back(op);
        has_mail.store(true, std::memory_order_seq_cst);  // before reading sleeping (Dekker)
      }
      wake();
    }
    void take_mail();
    void publish_stats();
    void run(std::promise<std::string>& started);
  };

  explicit Impl(const EngineOptions& o) : opts(o), admin_pool(o.limits.max_admin_buffer_bytes) {}

  // One application and the controller it sees; the Backend that controller uses.
  struct PendingSlot;
  struct Watch {
    AppSlot* slot;
    enum class Kind { Lifeline, Kick, Pending } kind;
    PendingSlot* pending = nullptr;
  };
  // A connection whose attach request has not come yet (it gets a few seconds).
  struct PendingSlot {
    shm::PendingAttach conn;
    uint64_t deadline_ns = 0;
    Watch watch{nullptr, Watch::Kind::Pending, this};
  };
  // Why an attached application is taken away.
  enum class DetachCause { LifelineClosed, LifelineMisused, DoorbellHungUp };

  // Any thread (a remote controller's admin thread): namespace nsid of remote changed.
  void post_namespace_notice(size_t remote, uint32_t nsid) {
    {
      std::lock_guard lk(events_mu);
      namespace_notices.emplace_back(remote, nsid);
    }
    shm::signal_eventfd(events_fd);
  }
  void post_event(CoreEvent ev) {
    {
      std::lock_guard lk(events_mu);
      events.push_back(ev);
    }
    shm::signal_eventfd(events_fd);
  }

  bool start(std::string& err);
  // start()'s steps: the open files limit the limits need, the remote controllers (one per
  // subsystem, its controllers its paths), and connecting to each.
  void raise_open_files_limit();
  bool group_remotes(std::string& err);
  bool connect_remotes(std::string& err);
  void run(const std::atomic<bool>& stop);
  // The admin worker: forwarded admin commands wait on the remote controller here, not on the
  // control thread (which serves every application).
  void admin_worker();
  void queue_admin(AdminJob job) {
    {
      std::lock_guard lk(admin_mu);
      admin_jobs.push_back(std::move(job));
    }
    admin_cv.notify_one();
  }
  // The next job for the admin worker: the oldest of an application other than the one
  // served last, if any, so one application's flood (at most its max_admin_in_flight)
  // delays another's command by one command, not by the whole flood. Under admin_mu.
  AdminJob next_admin_job() {
    auto it = std::find_if(admin_jobs.begin(), admin_jobs.end(),
                           [&](const AdminJob& j) { return j.owner != admin_last_owner; });
    if (it == admin_jobs.end()) it = admin_jobs.begin();
    AdminJob job = std::move(*it);
    admin_jobs.erase(it);
    admin_last_owner = job.owner;
    return job;
  }
  // Every Watch in the epoll set is in live_watches: an event reported for one that was
  // taken out earlier in the same batch (its application freed, say) is recognised as stale
  // before anything of it is read.
  void watch(int fd, uint32_t mask, Watch* w) {
    live_watches.insert(w);  // first: if it throws, no event names w
    epoll_event ev{};
    ev.events = mask;
    ev.data.ptr = w;
    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
  }
  void unwatch(int fd, Watch* w) {
    if (live_watches.erase(w) && fd >= 0) epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
  }
  void accept_application();
  // accept() failing for want of descriptors or memory leaves the listening socket readable:
  // it is taken out of the epoll set for a while instead of spinning the control thread.
  void pause_accepting(int e);
  // A refused attach is logged, but at most kRefusalLogsPerSecond a second: a program that
  // attaches in a loop must not fill the log (the rest are counted and said so).
  static constexpr uint32_t kRefusalLogsPerSecond = 10;
  uint64_t refusal_log_second = 0;
  uint32_t refusal_logs = 0, refusal_logs_dropped = 0;
  void log_refusal(const std::string& why) {
    const uint64_t second = monotonic_ns() / 1'000'000'000ull;
    if (second != refusal_log_second) {
      if (refusal_logs_dropped)
        log::warn("engine: {} more attach refusals were not logged", refusal_logs_dropped);
      refusal_log_second = second;
      refusal_logs = refusal_logs_dropped = 0;
    }
    if (refusal_logs++ < kRefusalLogsPerSecond) log::warn("engine: attach refused: {}", why);
    else ++refusal_logs_dropped;
  }
  void resume_accepting_if_due();
  // Why an attach request is beyond the engine's limits (0: it is not); uid from SO_PEERCRED.
  int check_limits_for(const shm::AttachRequest& req, uid_t uid, std::string& why) const;
  void answer_pending(PendingSlot& p);
  void drop_pending(PendingSlot& p);
  void expire_pendings();
  void add_application(shm::Attachment at, size_t remote);
  void handle_events();
  void dispatch(const epoll_event& ev);
  void lifeline(AppSlot& slot);
  void take_away(AppSlot& slot, DetachCause cause);
  // Runs one application's controller work: whatever it throws stops that application's
  // controller (CSTS.CFS), never the engine serving the others.
  template <class F>
  void guarded(AppSlot& slot, F&& f);
  void doorbell(AppSlot& slot, uint32_t revents);
  void reap(AppSlot& slot);
  void stop_cores();

  EngineOptions opts;
  std::vector<Remote> remotes;
  std::vector<std::unique_ptr<Core>> cores;
  std::atomic<bool> cores_stop{false};
  shm::AttachServer server;
  int epfd = -1;
  int events_fd = -1;
  std::mutex events_mu;
  std::vector<CoreEvent> events;
  std::vector<AdminJob> admin_done;  // under events_mu
  std::vector<std::pair<size_t, uint32_t>> namespace_notices;  // (remote, NSID), under events_mu
  std::thread admin_thread;
  std::mutex admin_mu;
  std::condition_variable admin_cv;
  std::deque<AdminJob> admin_jobs;
  bool admin_stop = false;
  std::list<std::unique_ptr<AppSlot>> apps;
  std::list<std::unique_ptr<PendingSlot>> pendings;
  std::unordered_set<const void*> live_watches;
  std::vector<std::unique_ptr<UblkDevice>> ublk_devices;
  uint16_t next_cntlid = 1;
  std::atomic<uint64_t> attached{0}, refused{0}, control_cpu_ns{0};
  std::atomic<uint32_t> app_count{0};
  const AppController* admin_last_owner = nullptr;  // under admin_mu
  AdminBufferPool admin_pool;
  // What the applications attached now hold (control thread; stats() reads the atomics).
  std::map<uid_t, uint32_t> apps_per_user;
  std::atomic<uint64_t> mapped_bytes{0};
  std::atomic<uint64_t> refused_for_limits{0}, broken_doorbells{0}, control_wakeups{0};
  std::atomic<uint32_t> admin_in_flight_peak{0};
  bool accepting = true;
  uint64_t accept_resume_ns = 0;
  uint64_t accept_pause_ns = 0;      // the current back-off (10 ms doubling to 1 s)
};

struct AppSlot final : AppController::Backend {
  Engine::Impl* engine = nullptr;
  size_t remote = 0;
  uid_t uid = 0;              // the peer's, counted in apps_per_user
  uint64_t region_bytes = 0;  // counted in mapped_bytes
  std::unique_ptr<AppController> ctl;
  Engine::Impl::Watch lifeline_watch{this, Engine::Impl::Watch::Kind::Lifeline};
  Engine::Impl::Watch kick_watch{this, Engine::Impl::Watch::Kind::Kick};
  std::map<uint16_t, Engine::Impl::Core*> core_of;  // I/O queue -> the core carrying it
  bool watching = false;

  void forward_admin(AppController& app, const nvme::Sqe& sqe, AdminBuffer data, bool to_controller,
                     uint64_t tag) override {
    engine->queue_admin(AdminJob{&app, remote, sqe, std::move(data), to_controller, tag, {}});
  }
  AdminBufferPool& admin_buffers() override { return engine->admin_pool; }
  const uint8_t* remote_identify() override { return engine->remotes[remote].identify.data(); }
  bool start_io_queue(AppController& app, uint16_t qid, const shm::QueueMemory& m, int vector_fd,
                      shm::EngineQueuePair::CqPosition cq) override {
    if (engine->cores.empty()) return false;
    // The core carrying the fewest queues.
    auto* core = std::min_element(engine->cores.begin(), engine->cores.end(), [](const auto& a, const auto& b) {
                   return a->queues.load(std::memory_order_relaxed) < b->queues.load(std::memory_order_relaxed);
                 })->get();
    core->queues.fetch_add(1, std::memory_order_relaxed);
    core_of[qid] = core;
    const shm::Attachment& at = app.attachment();
    CoreOp op{CoreOp::Kind::Add, &app, qid};
    op.remote = remote;
    op.mem = m;
    op.data = at.data();
    op.data_bytes = at.layout().data_bytes;
    op.vector_fd = vector_fd;
    op.coalescing = app.coalescing();
    op.cq = cq;
    core->send(op);
    return true;
  }
  void set_coalescing(AppController& app, uint32_t value) override {
    std::set<Engine::Impl::Core*> cores;
    for (auto& [qid, core] : core_of) cores.insert(core);
    for (auto* core : cores) {
      CoreOp op{CoreOp::Kind::Coalescing, &app, 0};
      op.coalescing = value;
      core->send(op);
    }
  }
  void stop_io_queue(AppController& app, uint16_t qid, bool abandon) override {
    auto it = core_of.find(qid);
    if (it == core_of.end()) return;
    CoreOp op{CoreOp::Kind::Remove, &app, qid};
    op.remote = remote;
    op.abandon = abandon;
    it->second->send(op);
  }
  void wake_cores() {
    for (auto& [qid, core] : core_of) core->wake();
  }
};

template <class F>
void Engine::Impl::guarded(AppSlot& slot, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    slot.ctl->stop_controller(fmt::format("internal error: {}", e.what()));
  }
  const uint32_t peak = slot.ctl->admin_in_flight_peak();
  if (peak > admin_in_flight_peak.load(std::memory_order_relaxed))
    admin_in_flight_peak.store(peak, std::memory_order_relaxed);
}

void Engine::Impl::Core::take_mail() {
  std::vector<CoreOp> ops;
  {
    std::lock_guard lk(mu);
    ops.swap(inbox);
    has_mail.store(false, std::memory_order_relaxed);
  }
  for (const CoreOp& op : ops) {
    if (op.kind == CoreOp::Kind::Add) {
      IoForwarder::Queue* q =
          fwds[op.remote]->add_queue(op.owner, op.qid, op.mem, op.data, op.data_bytes, op.vector_fd, op.cq);
      fwds[op.remote]->set_coalescing(q, op.coalescing);
      placed.push_back({op.owner, op.qid, op.remote, q});
      continue;
    }
    if (op.kind == CoreOp::Kind::Coalescing) {
      for (const Placed& p : placed)
        if (p.owner == op.owner) fwds[p.remote]->set_coalescing(p.q, op.coalescing);
      continue;
    }
    for (const Placed& p : placed)
      if (p.owner == op.owner && p.qid == op.qid)
        fwds[p.remote]->remove_queue(p.q, op.abandon ? IoForwarder::Removal::Abandon : IoForwarder::Removal::Delete);
  }
}

void Engine::Impl::Core::publish_stats() {
  uint64_t f = 0, c = 0, d = 0, r = 0, i = 0, o = 0;
  uint32_t n = 0;
  for (size_t k = 0; k < fwds.size(); ++k) {
    const auto& fw = fwds[k];
    per_remote[k].forwarded.store(fw->stats().forwarded, std::memory_order_relaxed);
    per_remote[k].completed.store(fw->stats().completed, std::memory_order_relaxed);
    per_remote[k].in_flight.store(fw->in_flight(), std::memory_order_relaxed);
    per_remote[k].reads.store(fw->stats().reads);
    per_remote[k].writes.store(fw->stats().writes);
    n += fw->in_flight();
    o += fw->stats().refused_opcodes;
    f += fw->stats().forwarded;
    c += fw->stats().completed;
    d += fw->stats().dropped;
    r += fw->stats().refused;
    i += fw->stats().interrupts;
  }
  forwarded.store(f, std::memory_order_relaxed);
  completed.store(c, std::memory_order_relaxed);
  dropped.store(d, std::memory_order_relaxed);
  refused.store(r, std::memory_order_relaxed);
  refused_opcodes.store(o, std::memory_order_relaxed);
  interrupts.store(i, std::memory_order_relaxed);
  in_flight.store(n, std::memory_order_relaxed);
  busy_ns.store(busy_ns_turns, std::memory_order_relaxed);
  cpu_ns.store(thread_cpu_ns(), std::memory_order_relaxed);
}

void Engine::Impl::Core::run(std::promise<std::string>& started) {
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0)
      log::warn("engine: core {}: cannot pin to CPU {}", index, cpu);
  }
  pthread_setname_np(pthread_self(), fmt::format("nvtcp-eng{}", index).c_str());
  for (Remote& r : engine->remotes) {
    std::string err;
    const uint32_t depth = std::min<uint32_t>(engine->opts.queue_depth, uint32_t(r.ctrl->cap() & 0xFFFF));  // CAP.MQES
    if (r.mp) {
      auto mqp = r.mp->create_io_qpair(depth, err);
      if (!mqp) {
        started.set_value(fmt::format("engine core {}: I/O queue pairs to {}: {}", index, r.trid.subnqn, err));
        return;
      }
      mqps.push_back(std::move(mqp));
      fwds.push_back(std::make_unique<IoForwarder>(*mqps.back(), this));
      continue;
    }
    auto qp = r.ctrl->create_io_qpair(depth, err);
    if (!qp) {
      started.set_value(fmt::format("engine core {}: I/O queue pair to {}: {}", index, r.trid.subnqn, err));
      return;
    }
    qps.push_back(std::move(qp));
    fwds.push_back(std::make_unique<IoForwarder>(*qps.back(), this));
  }
  {
    std::lock_guard lk(reactor_mu);
    reactor = reactor::Reactor::current();
  }
  started.set_value("");

  const int64_t spin_us = engine->opts.idle_spin_us;
  const unsigned budget = engine->opts.budget_per_queue;
  uint64_t idle_since = 0;
  // The figures are published every millisecond, whatever a turn's length: a reader's window
  // of a run (nvtcp bench takes the seconds the initiator measured) then starts and ends
  // where it says, and the thread's CPU clock (a system call) is still read rarely.
  constexpr uint64_t kPublishNs = 1'000'000;
  constexpr uint32_t kYieldInFlight = 8;  // see the idle spin below
  uint64_t next_publish = 0;
  // Busy time: turns that moved a command or a completion, one clock read per turn.
  uint64_t turn_start = monotonic_ns();
  while (!engine->cores_stop.load(std::memory_order_relaxed)) {
    if (has_mail.load(std::memory_order_acquire)) take_mail();
    uint64_t progress = 0;
    for (auto& fw : fwds) {
      const uint64_t before = fw->stats().completed;
      progress += fw->poll(budget, turn_start);
      progress += fw->stats().completed - before;
    }
    const uint64_t now = monotonic_ns();
    if (progress) busy_ns_turns += now - turn_start;
    turn_start = now;
    if (now >= next_publish) {
      publish_stats();
      next_publish = now + kPublishNs;
    }
    if (progress || spin_us < 0) {
      idle_since = 0;
      continue;
    }
    if (!idle_since) idle_since = now;
    if (now - idle_since < uint64_t(spin_us) * 1000) {
      // With many commands in flight, a turn that found nothing gives the CPU to whatever
      // else is ready on it. An engine core may share its CPU with the target (nvtcp bench's
      // default) or other work, and the scheduler shares a CPU between the threads that want
      // it: a spin that kept it took the very time the target needed to answer (16 KiB writes
      // through the engine, 32 jobs: 75-77 K IOPS, 137-147 K with the yield). With a few in
      // flight the spin is for latency, and a yield in every turn cost more than it gave (QD1
      // reads: 21-23 K IOPS without, 17 K with). Alone on its CPU the core is straight back.
      uint32_t waiting = 0;  // commands in flight on this core
      for (auto& fw : fwds) waiting += fw->in_flight();
      if (waiting >= kYieldInFlight) sched_yield();
      continue;
    }
    // Going to sleep: every queue asks for a doorbell notice first, then is looked at once
    // more; the control thread wakes this core when an application kicks.
    publish_stats();
    sleeping.store(true, std::memory_order_seq_cst);
    bool work = has_mail.load(std::memory_order_seq_cst);
    for (auto& fw : fwds) work |= fw->prepare_to_sleep();
    if (!work) {
      sleeps.fetch_add(1, std::memory_order_relaxed);
      // Completions of every queue pair (all on this thread's reactor), or a wake.
      if (!qps.empty()) qps.front()->process_completions(100000);
      else mqps.front()->process_completions(100000);
    }
    sleeping.store(false, std::memory_order_relaxed);
    for (auto& fw : fwds) fw->resume_polling();
    idle_since = 0;
    turn_start = monotonic_ns();
  }
  publish_stats();
  fwds.clear();  // each waits for the commands it sent
  qps.clear();
  mqps.clear();
  std::lock_guard lk(reactor_mu);
  reactor = nullptr;  // the thread's reactor goes with the thread
}

// Every application holds its lifeline, its doorbell pipe and one pipe per vector here;
// pending connections one each; the engine itself a few dozen (epoll, io_urings, sockets).
// The soft limit is raised to what that needs if the hard one allows; otherwise attaches
// beyond it are refused (EMFILE, with that reason) rather than the engine failing.
void Engine::Impl::raise_open_files_limit() {
  const uint64_t need = opts.limits.max_applications * (2 + opts.limits.max_vectors) +
                        opts.limits.max_pending_attaches + 64 + 8 * (opts.cpus.size() + 1) * opts.controllers.size();
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
    rlimit want = rl;
    want.rlim_cur = rl.rlim_max == RLIM_INFINITY ? rlim_t(need) : std::min<rlim_t>(rlim_t(need), rl.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &want) == 0) rl = want;
    if (rl.rlim_cur < need)
      log::warn("engine: open files limit {} is below the {} that max_applications {} with max_vectors {} may need; "
                "attaches beyond it are refused",
                uint64_t(rl.rlim_cur), need, opts.limits.max_applications, opts.limits.max_vectors);
  }
}

bool Engine::Impl::group_remotes(std::string& err) {
  // Controllers of one subsystem (the same subnqn) are paths to it: one remote, driven as a
  // multipath controller. Applications name a remote by its subnqn, so two remotes with one
  // subnqn could never both be reached anyway.
  for (const auto& trid : opts.controllers) {
    // A data digest is computed over the bytes as they are sent; an application could change
    // its (shared) write buffer in between, and the digest error would cost every
    // application on that connection. Until writes go through a private copy, no digests.
    if (trid.ddgst || opts.host.ddgst) {
      err = fmt::format("controller {}: data digests are not carried by the engine yet", trid.to_string());
      return false;
    }
    auto same = std::find_if(remotes.begin(), remotes.end(), [&](const Remote& x) { return x.trid.subnqn == trid.subnqn; });
    if (same != remotes.end()) {
      same->paths.push_back(trid);
      continue;
    }
    Remote r;
    r.trid = trid;
    r.paths = {trid};
    remotes.push_back(std::move(r));
  }
  return true;
}

bool Engine::Impl::connect_remotes(std::string& err) {
  // Namespace changes the remote controllers hear of (on their admin threads) are posted to
  // the control thread, which passes them on to the applications of that remote.
  events_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (events_fd < 0) {
    err = fmt::format("eventfd: {}", strerror(errno));
    return false;
  }
  for (size_t index = 0; index < remotes.size(); ++index) {
    Remote& r = remotes[index];
    const host::TransportId& trid = r.trid;
    host::ControllerOptions ho = opts.host;
    ho.on_namespace_change = [this, index, user = opts.host.on_namespace_change](uint32_t nsid) {
      if (user) user(nsid);
      post_namespace_notice(index, nsid);
    };
    std::string e;
    if (r.paths.size() > 1) {
      r.mp = host::MultipathController::connect(r.paths, ho, {}, e);
      if (r.mp) r.ctrl = r.mp->any_controller();
      if (r.mp && !r.ctrl) e = "no path is connected";
      if (r.ctrl) log::info("engine: {} over {} paths", trid.subnqn, r.paths.size());
    } else {
      r.ctrl = host::Controller::connect(trid, ho, e);
    }
    if (!r.ctrl) {
      err = fmt::format("controller {}: {}", trid.to_string(), e);
      return false;
    }
    r.identify.assign(r.ctrl->identify_data(), r.ctrl->identify_data() + 4096);
    log::info("engine: connected to {} (controller {}, {} I/O queues granted)", trid.to_string(), r.ctrl->cntlid(),
              r.ctrl->io_queues_granted());
  }
  return true;
}

bool Engine::Impl::start(std::string& err) {
  // An application that dies closes the read ends of its interrupt pipes; signalling it
  // then must fail with EPIPE (its queues are being taken down anyway), not kill the engine
  // and every other application with SIGPIPE. A handler the embedding program set stays.
  struct sigaction old_action {};
  if (sigaction(SIGPIPE, nullptr, &old_action) == 0 && old_action.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  if (opts.controllers.empty()) {
    err = "no remote controller given";
    return false;
  }
  if (!check_limits(opts.limits, err)) return false;
  raise_open_files_limit();
  if (!group_remotes(err) || !connect_remotes(err)) return false;
  const std::vector<int> cpus = opts.cpus.empty() ? std::vector<int>{-1} : opts.cpus;
  for (size_t i = 0; i < cpus.size(); ++i) {
    auto core = std::make_unique<Core>();
    core->engine = this;
    core->cpu = cpus[i];
    core->index = i;
    core->per_remote = std::make_unique<Core::PerRemote[]>(remotes.size());
    std::promise<std::string> started;
    auto done = started.get_future();
    Core* c = core.get();
    core->thread = std::thread([c, &started] { c->run(started); });
    cores.push_back(std::move(core));
    const std::string e = done.get();
    if (!e.empty()) {
      err = e;
      return false;
    }
  }
  if (opts.ublk) {
    std::string why;
    if (!UblkDevice::available(why)) {
      err = why;
      return false;
    }
    for (Remote& r : remotes) {
      for (uint32_t nsid : r.ctrl->active_namespaces()) {
        auto dev = UblkDevice::create(*r.ctrl, r.mp.get(), nsid, opts.ublk_options, err);
        if (!dev) {
          err = fmt::format("namespace {} of {} as a ublk device: {}", nsid, r.trid.subnqn, err);
          return false;
        }
        ublk_devices.push_back(std::move(dev));
      }
    }
  }
  // The default place, /run/nvtcp, is made for the engine's user alone.
  const auto slash = opts.socket_path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = opts.socket_path.substr(0, slash);
    struct stat st{};
    if (stat(dir.c_str(), &st) != 0 && mkdir(dir.c_str(), 0700) != 0) {
      err = fmt::format("cannot make {}: {}", dir, strerror(errno));
      return false;
    }
  }
  if (!server.listen(opts.socket_path, err)) return false;
  server.set_max_vectors(uint32_t(opts.limits.max_vectors));
  epfd = epoll_create1(EPOLL_CLOEXEC);
  admin_thread = std::thread([this] { admin_worker(); });
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the listening socket
  epoll_ctl(epfd, EPOLL_CTL_ADD, server.fd(), &ev);
  ev.data.ptr = &events_fd;
  epoll_ctl(epfd, EPOLL_CTL_ADD, events_fd, &ev);
  log::info("engine: serving applications on {} with {} core(s)", opts.socket_path, cores.size());
  return true;
}

// A new connection on the attach socket: its request is read when it comes, never waited
// for here (the control thread serves every application).
void Engine::Impl::accept_application() {
  auto p = std::make_unique<PendingSlot>();
  std::string err;
  if (!server.accept_connection(p->conn, err)) {
    const int e = errno;
    if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) pause_accepting(e);
    else if (e != EAGAIN && e != EINTR && e != ECONNABORTED) log::warn("engine: {}", err);
    return;
  }
  accept_pause_ns = 0;
  // Connections that have not sent their request yet are bounded: each holds a descriptor
  // for up to 5 s, and anyone may open them.
  if (pendings.size() >= opts.limits.max_pending_attaches) {
    refused.fetch_add(1, std::memory_order_relaxed);
    refused_for_limits.fetch_add(1, std::memory_order_relaxed);
    log_refusal(fmt::format("pid {}: {} connections already wait to attach (max_pending_attaches)", p->conn.pid,
                            pendings.size()));
    return;  // closed unanswered: the peer sees its connection reset
  }
  p->deadline_ns = monotonic_ns() + 5'000'000'000ull;
  // Kept before it is watched: nothing in the epoll set points at a slot that is not held.
  pendings.push_back(std::move(p));
  watch(pendings.back()->conn.fd, EPOLLIN | EPOLLRDHUP, &pendings.back()->watch);
  answer_pending(*pendings.back());  // the request is often there already
}

void Engine::Impl::pause_accepting(int e) {
  accept_pause_ns = std::clamp<uint64_t>(accept_pause_ns * 2, 10'000'000, 1'000'000'000);
  if (accepting) epoll_ctl(epfd, EPOLL_CTL_DEL, server.fd(), nullptr);
  accepting = false;
  accept_resume_ns = monotonic_ns() + accept_pause_ns;
  log::warn("engine: cannot accept an application: {}; not accepting for {} ms", strerror(e),
            accept_pause_ns / 1'000'000);
}

void Engine::Impl::resume_accepting_if_due() {
  if (accepting || monotonic_ns() < accept_resume_ns) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the listening socket
  epoll_ctl(epfd, EPOLL_CTL_ADD, server.fd(), &ev);
  accepting = true;
}

int Engine::Impl::check_limits_for(const shm::AttachRequest& req, uid_t uid, std::string& why) const {
  const EngineLimits& l = opts.limits;
  if (apps.size() >= l.max_applications) {
    why = fmt::format("the engine serves {} applications already (max_applications)", apps.size());
    return EBUSY;
  }
  const auto u = apps_per_user.find(uid);
  if (u != apps_per_user.end() && u->second >= l.max_applications_per_user) {
    why = fmt::format("uid {} has {} applications attached already (max_applications_per_user)", uid, u->second);
    return EUSERS;
  }
  // A request out of range altogether is refused with its own reason by the attach server.
  const auto layout = shm::RegionLayout::compute(req.queue_pairs, req.queue_entries, req.data_bytes);
  if (!layout) return 0;
  if (layout->total_bytes > l.max_region_bytes) {
    why = fmt::format("a region of {} bytes asked for, at most {} (max_region_bytes)", layout->total_bytes,
                      l.max_region_bytes);
    return EFBIG;
  }
  const uint64_t mapped = mapped_bytes.load(std::memory_order_relaxed);
  if (layout->total_bytes > l.max_mapped_bytes - mapped) {
    why = fmt::format("a region of {} bytes asked for, {} of the engine's {} are mapped already (max_mapped_bytes)",
                      layout->total_bytes, mapped, l.max_mapped_bytes);
    return ENOMEM;
  }
  return 0;
}

void Engine::Impl::answer_pending(PendingSlot& p) {
  size_t remote = 0;
  bool over_limit = false;
  const uid_t uid = p.conn.uid;
  auto check = [&](const shm::AttachRequest& req, std::string& why) {
    if (const int e = check_limits_for(req, uid, why)) {
      over_limit = true;
      return e;
    }
    for (size_t i = 0; i < remotes.size(); ++i) {
      if (remotes[i].trid.subnqn == req.subnqn) {
        remote = i;
        return 0;
      }
    }
    why = fmt::format("no remote controller with subsystem NQN '{}'", req.subnqn);
    return ENOENT;
  };
  const int fd = p.conn.fd;
  shm::Attachment at;
  std::string err;
  const shm::AttachServer::Answer a = server.answer(p.conn, at, err, check);
  if (a == shm::AttachServer::Answer::NotYet) return;
  unwatch(fd, &p.watch);  // answered: the socket is the attachment's now
  if (a == shm::AttachServer::Answer::Refused) {
    refused.fetch_add(1, std::memory_order_relaxed);
    if (over_limit) refused_for_limits.fetch_add(1, std::memory_order_relaxed);
    log_refusal(err);
  } else {
    add_application(std::move(at), remote);
  }
  drop_pending(p);
}

void Engine::Impl::drop_pending(PendingSlot& p) {
  unwatch(p.conn.fd, &p.watch);
  for (auto it = pendings.begin(); it != pendings.end(); ++it) {
    if (it->get() == &p) {
      pendings.erase(it);
      return;
    }
  }
}

void Engine::Impl::expire_pendings() {
  const uint64_t now = monotonic_ns();
  for (auto it = pendings.begin(); it != pendings.end();) {
    PendingSlot& p = **it++;
    if (now < p.deadline_ns) continue;
    refused.fetch_add(1, std::memory_order_relaxed);
    log_refusal(fmt::format("pid {}: no attach request within 5 s", p.conn.pid));
    drop_pending(p);
  }
}

void Engine::Impl::add_application(shm::Attachment at, size_t remote) {
  auto slot = std::make_unique<AppSlot>();
  slot->engine = this;
  slot->remote = remote;
  const uint16_t cntlid = next_cntlid;
  next_cntlid = next_cntlid >= 0xFFEF ? 1 : next_cntlid + 1;
  slot->uid = at.peer_uid();
  slot->region_bytes = at.layout().total_bytes;
  AdminLimits admin_limits;
  admin_limits.max_in_flight = uint32_t(opts.limits.max_admin_in_flight);
  admin_limits.max_buffer_bytes = opts.limits.max_app_admin_buffer_bytes;
  slot->ctl = std::make_unique<AppController>(std::move(at), *slot, cntlid, opts.max_queue_pairs - 1, admin_limits);
  // Held and counted before it is watched: nothing in the epoll set points at a slot that
  // is not held, and reap() uncounts only what was counted.
  apps.push_back(std::move(slot));
  AppSlot& held = *apps.back();
  app_count.fetch_add(1, std::memory_order_relaxed);
  remotes[remote].counters->applications.fetch_add(1, std::memory_order_relaxed);
  ++apps_per_user[held.uid];
  mapped_bytes.fetch_add(held.region_bytes, std::memory_order_relaxed);
  held.watching = true;
  watch(held.ctl->attachment().socket(), EPOLLIN | EPOLLRDHUP, &held.lifeline_watch);
  // EPOLLHUP (the application closed its end) is reported whether asked for or not.
  watch(held.ctl->attachment().kick_fd(), EPOLLIN, &held.kick_watch);
  log::info("engine: {} attached to {} ({} queue pairs of {} entries, {} MiB of data region)", held.ctl->name(),
            remotes[remote].trid.subnqn, held.ctl->attachment().layout().queue_pairs,
            held.ctl->attachment().layout().queue_entries, held.ctl->attachment().layout().data_bytes >> 20);
  attached.fetch_add(1, std::memory_order_relaxed);
}

// The application closed its lifeline: it detached or died (a SIGKILL closes it too).
// Nothing is sent on a lifeline after the attach: an application that does is broken (and
// would keep the level-triggered socket readable), so it is taken away as well.
void Engine::Impl::lifeline(AppSlot& slot) {
  char b;
  const ssize_t n = ::recv(slot.ctl->attachment().socket(), &b, 1, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  take_away(slot, n > 0 ? DetachCause::LifelineMisused : DetachCause::LifelineClosed);
}

// The doorbell-notice pipe: a notice, or its write end closed. A pipe whose writer is gone
// stays readable (EOF) and reports EPOLLHUP on every epoll_wait, so it must leave the epoll
// set at once; an application that closed it can never ring again, so it is taken away
// (its queues drained, its lifeline closed when it is freed: it sees the engine go).
void Engine::Impl::doorbell(AppSlot& slot, uint32_t revents) {
  const int fd = slot.ctl->attachment().kick_fd();
  if (revents & (EPOLLHUP | EPOLLERR)) {
    shm::drain_fd(fd);
    // An application that exits (or is killed) closes every descriptor it has, this pipe
    // and its lifeline alike, in no order the engine sees: a lifeline already closed says
    // it left; one still open says it broke its doorbell and stays.
    char b;
    const bool left = ::recv(slot.ctl->attachment().socket(), &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    take_away(slot, left ? DetachCause::LifelineClosed : DetachCause::DoorbellHungUp);
    return;
  }
  shm::drain_fd(fd);
  guarded(slot, [&] { slot.ctl->on_kick(); });
  slot.wake_cores();
}

void Engine::Impl::take_away(AppSlot& slot, DetachCause cause) {
  if (slot.watching) {
    unwatch(slot.ctl->attachment().socket(), &slot.lifeline_watch);
    unwatch(slot.ctl->attachment().kick_fd(), &slot.kick_watch);
    slot.watching = false;
  }
  if (slot.ctl->detached()) return;
  switch (cause) {
    case DetachCause::LifelineClosed:
      log::info("engine: {} detached; {} I/O queue(s) to drain", slot.ctl->name(), slot.ctl->live_io_queues());
      break;
    case DetachCause::LifelineMisused:
      log::warn("engine: {} sent data on its lifeline after attaching; detached, {} I/O queue(s) to drain",
                slot.ctl->name(), slot.ctl->live_io_queues());
      break;
    case DetachCause::DoorbellHungUp:
      broken_doorbells.fetch_add(1, std::memory_order_relaxed);
      log::warn("engine: {} closed its doorbell-notice pipe; detached, {} I/O queue(s) to drain", slot.ctl->name(),
                slot.ctl->live_io_queues());
      break;
  }
  slot.ctl->detach();
  slot.wake_cores();
  reap(slot);
}

void Engine::Impl::reap(AppSlot& slot) {
  if (!slot.ctl->finished()) return;
  for (auto it = apps.begin(); it != apps.end(); ++it) {
    if (it->get() != &slot) continue;
    log::debug("engine: {} freed", slot.ctl->name());
    if (auto u = apps_per_user.find(slot.uid); u != apps_per_user.end() && --u->second == 0) apps_per_user.erase(u);
    mapped_bytes.fetch_sub(slot.region_bytes, std::memory_order_relaxed);
    remotes[slot.remote].counters->applications.fetch_sub(1, std::memory_order_relaxed);
    apps.erase(it);
    app_count.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
}

void Engine::Impl::admin_worker() {
  pthread_setname_np(pthread_self(), "nvtcp-engadm");
  for (;;) {
    AdminJob job;
    {
      std::unique_lock lk(admin_mu);
      admin_cv.wait(lk, [&] { return admin_stop || !admin_jobs.empty(); });
      if (admin_stop) return;
      job = next_admin_job();
    }
    const std::shared_ptr<host::Controller> ctrl = remotes[job.remote].admin_controller();
    job.result = ctrl->failed() ? host::Completion{nvme::sc::TransportError}
                                : ctrl->admin(job.sqe, job.data.data(), job.data.size(), job.to_controller);
    {
      std::lock_guard lk(events_mu);
      admin_done.push_back(std::move(job));
    }
    shm::signal_eventfd(events_fd);
  }
}

void Engine::Impl::handle_events() {
  uint64_t n;
  (void)::read(events_fd, &n, sizeof(n));
  std::vector<CoreEvent> evs;
  std::vector<AdminJob> done;
  std::vector<std::pair<size_t, uint32_t>> notices;
  {
    std::lock_guard lk(events_mu);
    evs.swap(events);
    done.swap(admin_done);
    notices.swap(namespace_notices);
  }
  for (const auto& notice : notices) {
    // Named copies: clang before 16 cannot capture a structured binding in a lambda.
    const size_t remote = notice.first;
    const uint32_t nsid = notice.second;
    uint32_t told = 0;
    for (auto& slot : apps) {
      if (slot->remote != remote || slot->ctl->detached()) continue;
      guarded(*slot, [&] { slot->ctl->namespace_changed(nsid); });
      ++told;
    }
    remotes[remote].counters->namespace_notices.fetch_add(1, std::memory_order_relaxed);
    log::info("engine: namespace {} of {} changed; {} application(s) notified", nsid, remotes[remote].trid.subnqn,
              told);
  }
  for (AdminJob& job : done) {
    auto it = std::find_if(apps.begin(), apps.end(), [&](const auto& s) { return s->ctl.get() == job.owner; });
    if (it == apps.end()) continue;
    AppSlot& slot = **it;
    guarded(slot, [&] { slot.ctl->admin_forwarded(job.tag, job.result, std::move(job.data)); });
    reap(slot);
  }
  // Buffers came back: commands waiting for budget try again.
  if (!done.empty())
    for (auto& slot : apps)
      if (slot->ctl->admin_waiting()) guarded(*slot, [&] { slot->ctl->resume_admin(); });
  for (const CoreEvent& ev : evs) {
    auto it = std::find_if(apps.begin(), apps.end(), [&](const auto& s) { return s->ctl.get() == ev.owner; });
    if (it == apps.end()) continue;
    AppSlot& slot = **it;
    if (ev.kind == CoreEvent::Kind::Faulted) {
      guarded(slot, [&] { slot.ctl->io_queue_faulted(ev.qid); });
      continue;
    }
    slot.core_of.erase(ev.qid);
    guarded(slot, [&] { slot.ctl->io_queue_stopped(ev.qid, ev.cq); });
    reap(slot);
  }
}

void Engine::Impl::run(const std::atomic<bool>& stop) {
  epoll_event evs[64];
  while (!stop.load(std::memory_order_relaxed)) {
    const int n = epoll_wait(epfd, evs, 64, 100);
    control_wakeups.fetch_add(1, std::memory_order_relaxed);
    control_cpu_ns.store(thread_cpu_ns(), std::memory_order_relaxed);
    if (!pendings.empty()) expire_pendings();
    resume_accepting_if_due();
    for (int i = 0; i < n; ++i) {
      // The control thread serves every application: an allocation failing for one event
      // (an attach, say) drops that event, never the engine.
      try {
        dispatch(evs[i]);
      } catch (const std::exception& e) {
        log::error("engine: control thread: {}; that event is dropped", e.what());
      }
    }
  }
}

void Engine::Impl::dispatch(const epoll_event& ev) {
  void* tag = ev.data.ptr;
  if (tag == nullptr) return accept_application();
  if (tag == &events_fd) return handle_events();
  if (!live_watches.count(tag)) return;  // taken out earlier in this batch
  auto* w = static_cast<Watch*>(tag);
  if (w->kind == Watch::Kind::Pending) return answer_pending(*w->pending);
  if (w->kind == Watch::Kind::Lifeline) return lifeline(*w->slot);
  doorbell(*w->slot, ev.events);
}

void Engine::Impl::stop_cores() {
  {
    std::lock_guard lk(admin_mu);
    admin_stop = true;
  }
  admin_cv.notify_all();
  if (admin_thread.joinable()) admin_thread.join();  // its command in flight ends with the remote's timeout
  // Their buffers go back to the pool while it is still there.
  admin_jobs.clear();
  {
    std::lock_guard lk(events_mu);
    admin_done.clear();
  }
  ublk_devices.clear();  // each stops its device and waits for what is in flight
  for (auto& slot : apps) slot->ctl->detach();
  cores_stop.store(true);
  for (auto& c : cores) {
    c->wake(true);
    if (c->thread.joinable()) c->thread.join();
  }
  pendings.clear();
  apps.clear();
  remotes.clear();
  if (epfd >= 0) ::close(epfd);
  if (events_fd >= 0) ::close(events_fd);
  epfd = events_fd = -1;
}

Engine::Engine(EngineOptions opts) : opts_(std::move(opts)), impl_(std::make_unique<Impl>(opts_)) {}
Engine::~Engine() { shutdown(); }

bool Engine::start(std::string& err) { return impl_->start(err); }
void Engine::run(const std::atomic<bool>& stop) { impl_->run(stop); }
void Engine::shutdown() {
  if (impl_) impl_->stop_cores();
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.attached = impl_->attached.load();
  s.refused = impl_->refused.load();
  s.applications = impl_->app_count.load();
  uint64_t cpu_ns = impl_->control_cpu_ns.load();
  s.control_cpu_seconds = double(cpu_ns) / 1e9;
  for (const auto& r : impl_->remotes) {
    EngineRemoteStats rs;
    rs.subnqn = r.trid.subnqn;
    rs.applications = r.counters->applications.load(std::memory_order_relaxed);
    rs.namespace_notices = r.counters->namespace_notices.load(std::memory_order_relaxed);
    if (r.ctrl) rs.namespaces = uint32_t(r.ctrl->active_namespaces().size());
    for (size_t i = 0; i < r.paths.size(); ++i) {
      EnginePathStats ps;
      ps.address = fmt::format("{}:{}", r.paths[i].traddr, r.paths[i].trsvcid);
      if (r.mp) {
        const host::PathStatus st = r.mp->path(i, 0);
        ps.connected = st.connected;
        ps.resets = st.resets;
      } else if (r.ctrl) {
        ps.connected = r.ctrl->live();
        ps.resets = r.ctrl->resets();
      }
      rs.paths.push_back(std::move(ps));
    }
    s.remotes.push_back(std::move(rs));
  }
  for (const auto& c : impl_->cores) {
    EngineCoreStats cs;
    cs.cpu = c->cpu;
    cs.queues = c->queues.load(std::memory_order_relaxed);
    cs.in_flight = c->in_flight.load(std::memory_order_relaxed);
    cs.forwarded = c->forwarded.load(std::memory_order_relaxed);
    cs.completed = c->completed.load(std::memory_order_relaxed);
    cs.dropped = c->dropped.load(std::memory_order_relaxed);
    cs.refused_io = c->refused.load(std::memory_order_relaxed);
    cs.interrupts = c->interrupts.load(std::memory_order_relaxed);
    cs.sleeps = c->sleeps.load(std::memory_order_relaxed);
    cs.cpu_seconds = double(c->cpu_ns.load(std::memory_order_relaxed)) / 1e9;
    cs.busy_seconds = double(c->busy_ns.load(std::memory_order_relaxed)) / 1e9;
    s.cores.push_back(cs);
    for (size_t k = 0; k < s.remotes.size(); ++k) {
      s.remotes[k].forwarded += c->per_remote[k].forwarded.load(std::memory_order_relaxed);
      s.remotes[k].completed += c->per_remote[k].completed.load(std::memory_order_relaxed);
      s.remotes[k].in_flight += c->per_remote[k].in_flight.load(std::memory_order_relaxed);
      s.remotes[k].reads += c->per_remote[k].reads.load();
      s.remotes[k].writes += c->per_remote[k].writes.load();
    }
    s.forwarded += c->forwarded.load(std::memory_order_relaxed);
    s.completed += c->completed.load(std::memory_order_relaxed);
    s.dropped += c->dropped.load(std::memory_order_relaxed);
    s.refused_io += c->refused.load(std::memory_order_relaxed);
    s.refused_opcodes += c->refused_opcodes.load(std::memory_order_relaxed);
    s.interrupts += c->interrupts.load(std::memory_order_relaxed);
    s.core_sleeps += c->sleeps.load(std::memory_order_relaxed);
    cpu_ns += c->cpu_ns.load(std::memory_order_relaxed);
  }
  s.cpu_seconds = double(cpu_ns) / 1e9;
  s.refused_for_limits = impl_->refused_for_limits.load(std::memory_order_relaxed);
  s.broken_doorbells = impl_->broken_doorbells.load(std::memory_order_relaxed);
  s.control_wakeups = impl_->control_wakeups.load(std::memory_order_relaxed);
  s.mapped_bytes = impl_->mapped_bytes.load(std::memory_order_relaxed);
  s.admin_in_flight_peak = impl_->admin_in_flight_peak.load(std::memory_order_relaxed);
  s.admin_buffer_bytes = impl_->admin_pool.in_use();
  s.admin_buffer_peak_bytes = impl_->admin_pool.peak();
  for (const auto& d : impl_->ublk_devices) s.ublk_requests += d->requests();
  return s;
}

std::vector<std::string> Engine::ublk_devices() const {
  std::vector<std::string> out;
  for (const auto& d : impl_->ublk_devices) out.push_back(d->block_path());
  return out;
}

}  // namespace nvtcp::engine

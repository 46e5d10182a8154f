// SPDX-License-Identifier: Apache-2.0
// Host multipath: a controller per path, a retry thread that connects the paths that have
// none, and queue pairs that send each command on the best path and move it when its path
// fails it. The data path (MultipathQueuePair) takes no lock: per command it reads each path's
// connection state and ANA state (atomics the path's own threads publish); the path table is
// looked at under its mutex only when its generation moves or a path is due for a queue.
#include "nvtcp/multipath.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "host/ana_table.hpp"
#include "host/namespace_scan.hpp"
#include "host/path_selector.hpp"
#include "nvtcp/log_pages.hpp"
#include "reactor/reactor.hpp"
#include "util/log.hpp"
#include "util/state_machine.hpp"

namespace nvtcp::host {

bool parse_path_policy(const std::string& text, PathPolicy& out) {
  if (text == "round-robin") out = PathPolicy::RoundRobin;
  else if (text == "queue-depth") out = PathPolicy::QueueDepth;
  else return false;
  return true;
}

const char* path_policy_name(PathPolicy p) { return p == PathPolicy::QueueDepth ? "queue-depth" : "round-robin"; }

namespace {
constexpr uint64_t kNsPerMs = 1000000;
constexpr uint32_t kDefaultCtrlLossTmoMs = 600000;  // Linux's ctrl_loss_tmo default
}  // namespace

// ------------------------------------------------------------------------ the path table

struct MultipathController::Shared {
  std::vector<TransportId> trids;
  ControllerOptions opts;  // as every path connects with (reconnect on, fast_io_fail_tmo 0)
  MultipathOptions mopts;

  struct Path {
    std::shared_ptr<Controller> ctrl;  // nullptr: not connected (yet, or any more)
    uint64_t incarnation = 0;          // moves when ctrl is replaced
    std::string last_error;
  };
  mutable std::mutex mu;
  std::vector<Path> paths;           // guarded by mu
  std::atomic<uint64_t> table_gen{0};  // moves with every change of paths

  std::thread retry;
  std::condition_variable cv;
  bool stop = false;  // guarded by mu

  // Connects path i (outside the lock: a connect takes up to connect_timeout_ms).
  bool connect_path(size_t i, std::string& err) {
    auto c = Controller::connect(trids[i], opts, err);
    if (!c) return false;
    std::shared_ptr<Controller> other;
    {
      std::lock_guard lk(mu);
      for (size_t k = 0; k < paths.size() && !other; ++k)
        if (k != i && paths[k].ctrl) other = paths[k].ctrl;
    }
    if (other && !same_namespaces(*other, *c, err)) return false;
    std::lock_guard lk(mu);
    paths[i].ctrl = std::shared_ptr<Controller>(std::move(c));
    ++paths[i].incarnation;
    paths[i].last_error.clear();
    table_gen.fetch_add(1, std::memory_order_acq_rel);
    return true;
  }

  // Writes meant for one namespace must not land on another: a path joins only if its
  // controller names the same subsystem and shows each namespace both know with the same NGUID
  // and EUI-64 (a namespace one of them does not have yet is not a conflict).
  static bool same_namespaces(Controller& a, Controller& b, std::string& err) {
    // Serial number, model and subsystem NQN are the subsystem's, the same on each of its
    // controllers: the check a reconnect makes of the controller it finds.
    if (detail::HostError e = detail::identity_mismatch(a.identify_controller(), b.identify_controller()); !e.ok()) {
      err = "another subsystem answers on this path (" + e.message + ")";
      return false;
    }
    for (uint32_t nsid : b.active_namespaces()) {
      NamespaceInfo x, y;
      std::string ignored;
      if (!a.namespace_info(nsid, x, ignored) || !b.namespace_info(nsid, y, ignored)) continue;
      if (!detail::same_namespace_ids(x, y)) {
        err = fmt::format("namespace {} is another namespace on this path (its NGUID or EUI-64 differs)", nsid);
        return false;
      }
    }
    return true;
  }

  // Every path_retry_ms: a path with no controller, or whose controller is lost for good (its
  // ctrl_loss_tmo passed, or another controller answered), is connected again.
  void retry_loop() {
    std::unique_lock lk(mu);
    while (!stop) {
      cv.wait_for(lk, std::chrono::milliseconds(std::max<uint32_t>(mopts.path_retry_ms, 1)));
      if (stop) break;
      for (size_t i = 0; i < paths.size() && !stop; ++i) {
        if (paths[i].ctrl && !paths[i].ctrl->failed()) continue;
        if (paths[i].ctrl) {
          log::warn("multipath {}: path {}:{} lost for good; connecting it anew", trids[i].subnqn, trids[i].traddr,
                    trids[i].trsvcid);
          paths[i].ctrl.reset();  // the queue pairs keep theirs until they notice
          table_gen.fetch_add(1, std::memory_order_acq_rel);
        }
        lk.unlock();
        std::string err;
        const bool ok = connect_path(i, err);
        lk.lock();
        if (ok) {
          log::info("multipath {}: path {}:{} connected", trids[i].subnqn, trids[i].traddr, trids[i].trsvcid);
        } else if (err != paths[i].last_error) {  // each new reason once, not every retry
          log::info("multipath {}: path {}:{} not connected: {}", trids[i].subnqn, trids[i].traddr, trids[i].trsvcid,
                    err);
          paths[i].last_error = err;
        }
      }
    }
  }

  void shut_down() {
    {
      std::lock_guard lk(mu);
      stop = true;
    }
    cv.notify_all();
    if (retry.joinable()) retry.join();
  }
};

MultipathController::MultipathController(std::shared_ptr<Shared> s) : s_(std::move(s)) {}

MultipathController::~MultipathController() { s_->shut_down(); }

std::unique_ptr<MultipathController> MultipathController::connect(const std::vector<TransportId>& paths,
                                                                  const ControllerOptions& opts,
                                                                  const MultipathOptions& mopts, std::string& err) {
  if (paths.empty()) {
    err = "no path given";
    return nullptr;
  }
  for (const auto& t : paths) {
    if (t.subnqn != paths[0].subnqn) {
      err = fmt::format("the paths name two subsystems ({} and {}): a multipath controller is one subsystem",
                        paths[0].subnqn, t.subnqn);
      return nullptr;
    }
    if (t.trtype != "tcp") {
      err = fmt::format("path {}: multipath runs over trtype tcp", t.to_string());
      return nullptr;
    }
  }
  auto s = std::make_shared<Shared>();
  s->trids = paths;
  s->opts = opts;
  if (!s->opts.ctrl_loss_tmo_ms) s->opts.ctrl_loss_tmo_ms = kDefaultCtrlLossTmoMs;
  s->opts.fast_io_fail_tmo_ms = 0;
  s->mopts = mopts;
  s->paths.resize(paths.size());
  // Every path with the same host ID, so the subsystem sees one host on all of them (its
  // reservations and host access follow that).
  bool zero = true;
  for (uint8_t b : s->opts.hostid) zero = zero && b == 0;
  if (zero) {
    std::random_device rd;
    for (auto& b : s->opts.hostid) b = uint8_t(rd());
    s->opts.hostid[6] = uint8_t((s->opts.hostid[6] & 0x0F) | 0x40);  // a version 4 UUID
    s->opts.hostid[8] = uint8_t((s->opts.hostid[8] & 0x3F) | 0x80);
  }
  std::string errors;
  size_t connected = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    std::string e;
    if (s->connect_path(i, e)) {
      ++connected;
      continue;
    }
    s->paths[i].last_error = e;
    errors += fmt::format("{}{}:{}: {}", errors.empty() ? "" : "; ", paths[i].traddr, paths[i].trsvcid, e);
  }
  if (!connected) {
    err = "no path connected: " + errors;
    return nullptr;
  }
  if (!errors.empty())
    log::warn("multipath {}: {} of {} paths connected ({}); the others are retried every {} ms", paths[0].subnqn,
              connected, paths.size(), errors, mopts.path_retry_ms);
  s->retry = std::thread([raw = s.get()] { raw->retry_loop(); });
  return std::unique_ptr<MultipathController>(new MultipathController(std::move(s)));
}

std::unique_ptr<MultipathController> MultipathController::connect_discovered(const TransportId& discovery,
                                                                             const std::string& subnqn,
                                                                             const ControllerOptions& opts,
                                                                             const MultipathOptions& mopts,
                                                                             std::string& err) {
  TransportId d = discovery;
  d.subnqn = "nqn.2014-08.org.nvmexpress.discovery";
  ControllerOptions dopts = opts;
  dopts.ctrl_loss_tmo_ms = 0;
  dopts.kato_ms = 0;
  auto dc = Controller::connect(d, dopts, err);
  if (!dc) {
    err = "discovery: " + err;
    return nullptr;
  }
  std::vector<uint8_t> log;
  if (!dc->discovery_log(log, err)) {
    err = "discovery log: " + err;
    return nullptr;
  }
  dc.reset();
  std::vector<TransportId> paths;
  const auto* h = reinterpret_cast<const nvme::DiscoveryLogHeader*>(log.data());
  const size_t n = std::min<uint64_t>(h->numrec, (log.size() - sizeof(*h)) / sizeof(nvme::DiscoveryLogEntry));
  for (size_t i = 0; i < n; ++i) {
    const auto* e = reinterpret_cast<const nvme::DiscoveryLogEntry*>(log.data() + sizeof(*h)) + i;
    if (e->trtype != nvme::kTrtypeTcp || detail::fixed_field(e->subnqn, sizeof e->subnqn) != subnqn) continue;
    TransportId t = discovery;
    t.subnqn = subnqn;
    t.adrfam = e->adrfam == nvme::kAdrfamIpv6 ? "IPv6" : "IPv4";
    t.traddr = detail::fixed_field(e->traddr, sizeof e->traddr);
    const std::string svc = detail::fixed_field(e->trsvcid, sizeof e->trsvcid);
    char* end = nullptr;
    const unsigned long port = std::strtoul(svc.c_str(), &end, 10);
    if (svc.empty() || *end || port == 0 || port > 65535) continue;
    t.trsvcid = uint16_t(port);
    paths.push_back(t);
  }
  if (paths.empty()) {
    err = fmt::format("the discovery log at {}:{} offers no TCP path to {}", discovery.traddr, discovery.trsvcid,
                      subnqn);
    return nullptr;
  }
  return connect(paths, opts, mopts, err);
}

size_t MultipathController::path_count() const { return s_->trids.size(); }

PathStatus MultipathController::path(size_t i, uint32_t nsid) const {
  PathStatus st;
  st.trid = s_->trids.at(i);
  std::shared_ptr<Controller> c = controller(i);
  if (c) {
    st.connected = c->live();
    st.resets = c->resets();
    st.ana = c->ana_state(nsid);
  }
  return st;
}

std::shared_ptr<Controller> MultipathController::controller(size_t i) const {
  std::lock_guard lk(s_->mu);
  return s_->paths.at(i).ctrl;
}

std::shared_ptr<Controller> MultipathController::any_controller() const {
  std::lock_guard lk(s_->mu);
  std::shared_ptr<Controller> pick;
  for (const auto& p : s_->paths) {
    if (!p.ctrl || !p.ctrl->live()) continue;
    if (!pick) pick = p.ctrl;
  }
  return pick;
}

const MultipathOptions& MultipathController::options() const { return s_->mopts; }

// ------------------------------------------------------------------------ the queue pair

namespace {

// One application command, from its submission to its callback, across every path it is
// sent on. Free -> OnPath -> Free on a healthy path; Waiting while no path will take it.
struct MpRequest {
  enum class State : uint8_t { Free, Waiting, OnPath, kCount };
  static const char* name(State s) {
    constexpr const char* kNames[] = {"Free", "Waiting", "OnPath"};
    return size_t(s) < size_t(State::kCount) ? kNames[size_t(s)] : "?";
  }
  static constexpr TransitionTable<State, size_t(State::kCount)> kTransitions{
      {State::Free, State::OnPath},     // sent at once
      {State::Free, State::Waiting},    // no path takes it now, or the chosen one is full
      {State::Waiting, State::OnPath},  // a path took it
      {State::OnPath, State::Waiting},  // its path failed it: it moves
      {State::OnPath, State::Free},     // completed
      {State::Waiting, State::Free},    // no path came back in time, or the queue pair closed
  };
  void set_state(State to) {
    if constexpr (kCheckTransitions) {
      if (!kTransitions.allows(state, to)) illegal_transition("multipath command", name(state), name(to), "MpRequest");
    }
    state = to;
  }

  enum class Op : uint8_t { Command, Read, Write, Flush, WriteZeroes, Deallocate };
  State state = State::Free;
  Op op = Op::Command;
  bool to_controller = false;
  bool fua = false;
  uint32_t nsid = 0;
  uint32_t nlb = 0;  // blocks, or ranges for Deallocate
  uint32_t len = 0;  // Command's data length
  uint64_t slba = 0;
  void* buf = nullptr;
  nvme::Sqe sqe{};
  CompletionFn cb = nullptr;
  void* ctx = nullptr;
  int path = -1;
  uint32_t moves = 0;  // times a path failed it and it moved (MultipathOptions::max_failovers)
  uint64_t waiting_since_ns = 0;
  MpRequest* next = nullptr;  // in the waiting list
  MultipathQueuePair::Impl* owner = nullptr;
};

}  // namespace

struct MultipathQueuePair::Impl {
  std::shared_ptr<MultipathController::Shared> sh;
  uint32_t depth = 0;

  struct PathQueue {
    std::shared_ptr<Controller> ctrl;
    std::unique_ptr<QueuePair> qp;
    uint64_t incarnation = 0;
    uint64_t commands = 0;
    uint32_t outstanding = 0;
    uint64_t next_try_ns = 0;  // when a queue is tried again on a controller that refused one
    // A queue on the path's (new) controller whose connect is under way: it comes up as this
    // thread's reactor turns, and takes I/O once it has.
    std::unique_ptr<QueuePair> pending;
    std::shared_ptr<Controller> pending_ctrl;
    uint64_t pending_incarnation = 0;
    // Per NSID (AnaTable's indexing): after an ANA status, the path is not used for that
    // namespace until its controller has read log 0Ch again (ana_generation() passes this).
    std::vector<uint64_t> ana_hold;
  };
  std::vector<PathQueue> paths;
  std::vector<detail::PathCandidate> cand;  // scratch, one per path
  uint64_t seen_table_gen = ~0ull;

  std::vector<MpRequest> pool;
  std::vector<MpRequest*> free;
  MpRequest* wait_head = nullptr;
  MpRequest* wait_tail = nullptr;
  uint32_t waiting = 0;
  uint32_t outstanding = 0;
  uint64_t failovers = 0;
  uint64_t failovers_exhausted = 0;  // commands completed with a path's error after max_failovers moves
  int delivered = 0;
  uint32_t cursor = 0;
  bool closing = false;

  static uint32_t ana_index(uint32_t nsid) { return std::min(nsid, detail::AnaTable::kCapacity); }

  // Takes the path table's changes: a new controller on a path gets a queue, a path whose
  // controller went keeps its old queue until that queue has failed. The queues of the first
  // call (force: the queue pair is being made) are connected before it returns; later ones are
  // started and connect while this thread's reactor turns for the other paths (a path that
  // comes back must not stall their I/O for its connect), and take I/O once up. Queues refused
  // by a resetting controller, or whose connect failed, are tried again every path_retry_ms.
  void sync_paths(bool force) {
    const uint64_t g = sh->table_gen.load(std::memory_order_acquire);
    uint64_t now = 0;
    bool due = false;
    for (size_t i = 0; i < paths.size(); ++i) {
      PathQueue& p = paths[i];
      if (p.qp && p.qp->failed() && p.outstanding == 0) {
        p.qp.reset();  // a lost controller's queue: its commands have all come back
        p.ctrl.reset();
      }
      if (p.pending) take_pending(i, now);
      if (!p.qp && !p.pending) {
        if (!now) now = reactor::monotonic_ns();
        due = due || now >= p.next_try_ns;
      }
    }
    if (!force && g == seen_table_gen && !due) return;
    seen_table_gen = g;
    std::vector<std::pair<std::shared_ptr<Controller>, uint64_t>> table;
    {
      std::lock_guard lk(sh->mu);
      for (const auto& p : sh->paths) table.emplace_back(p.ctrl, p.incarnation);
    }
    if (!now) now = reactor::monotonic_ns();
    for (size_t i = 0; i < paths.size(); ++i) {
      PathQueue& p = paths[i];
      auto& [ctrl, inc] = table[i];
      if (p.qp && p.incarnation == inc) continue;
      if (p.qp && p.outstanding) continue;  // the old controller's queue drains first
      if (p.pending && p.pending_incarnation == inc) continue;  // on its way
      if (!ctrl) {
        // No controller yet: the table's generation moves when the retry thread makes one, and
        // until then this path is not worth the table's lock on every poll.
        p.next_try_ns = now + uint64_t(std::max<uint32_t>(sh->mopts.path_retry_ms, 1)) * kNsPerMs;
        continue;
      }
      if (now < p.next_try_ns) continue;
      std::string err;
      auto qp = force ? ctrl->create_io_qpair(depth, err) : ctrl->start_io_qpair(depth, err);
      if (!qp) {
        p.next_try_ns = now + uint64_t(std::max<uint32_t>(sh->mopts.path_retry_ms, 1)) * kNsPerMs;
        log::debug("multipath {}: no queue on path {}:{} yet: {}", sh->trids[i].subnqn, sh->trids[i].traddr,
                   sh->trids[i].trsvcid, err);
        continue;
      }
      // The old controller's queue (idle) goes now; the new one replaces it once up.
      p.qp.reset();
      p.ctrl.reset();
      p.pending = std::move(qp);
      p.pending_ctrl = ctrl;
      p.pending_incarnation = inc;
      take_pending(i, now);
    }
  }

  // A started queue: takes I/O once connected; dropped (and tried again after path_retry_ms)
  // if its connect failed.
  void take_pending(size_t i, uint64_t& now) {
    PathQueue& p = paths[i];
    if (p.pending->connected()) {
      // Holds count in the old controller's log generations: a new one starts its own.
      std::fill(p.ana_hold.begin(), p.ana_hold.end(), 0);
      p.qp = std::move(p.pending);
      p.ctrl = std::move(p.pending_ctrl);
      p.incarnation = p.pending_incarnation;
      p.next_try_ns = 0;
      return;
    }
    if (!p.pending->failed()) return;
    if (!now) now = reactor::monotonic_ns();
    p.next_try_ns = now + uint64_t(std::max<uint32_t>(sh->mopts.path_retry_ms, 1)) * kNsPerMs;
    log::debug("multipath {}: the queue on path {}:{} did not connect; tried again in {} ms", sh->trids[i].subnqn,
               sh->trids[i].traddr, sh->trids[i].trsvcid, sh->mopts.path_retry_ms);
    p.pending.reset();
    p.pending_ctrl.reset();
  }

  bool held(const PathQueue& p, uint32_t nsid) const {
    const uint64_t hold = p.ana_hold[ana_index(nsid)];
    return hold && p.ctrl->ana_generation() < hold;
  }

  int send_on(PathQueue& p, MpRequest* r) {
    QueuePair& q = *p.qp;
    switch (r->op) {
      case MpRequest::Op::Read: return q.read(r->nsid, r->slba, r->nlb, r->buf, &on_path_done, r);
      case MpRequest::Op::Write: return q.write(r->nsid, r->slba, r->nlb, r->buf, &on_path_done, r, {r->fua});
      case MpRequest::Op::Flush: return q.flush(r->nsid, &on_path_done, r);
      case MpRequest::Op::WriteZeroes: return q.write_zeroes(r->nsid, r->slba, r->nlb, &on_path_done, r);
      case MpRequest::Op::Deallocate:
        return q.deallocate(r->nsid, static_cast<const nvme::DsmRange*>(r->buf), r->nlb, &on_path_done, r);
      case MpRequest::Op::Command: return q.submit(r->sqe, r->buf, r->len, r->to_controller, &on_path_done, r);
    }
    return -EINVAL;
  }

  enum class Sent : uint8_t { Yes, NoPath, Busy, Refused };
  // Sends r on the best usable path; a path that turns out to be down (fast-failing) is
  // skipped and the next best tried.
  Sent issue(MpRequest* r, int& refused_errno) {
    const size_t n = paths.size();
    for (size_t i = 0; i < n; ++i) {
      const PathQueue& p = paths[i];
      detail::PathCandidate& c = cand[i];
      // A path whose controller is resetting takes no new I/O even while its I/O queue has not
      // seen the loss yet (as Linux's nvme_path_is_disabled): it would only sit there.
      c.usable = p.qp && p.qp->connected() && p.ctrl->live() && !held(p, r->nsid);
      c.ana = c.usable ? p.ctrl->ana_state(r->nsid) : nvme::AnaState::Inaccessible;
      c.outstanding = p.outstanding;
    }
    for (size_t tries = 0; tries < n; ++tries) {
      const int i = detail::choose_path(cand.data(), n, sh->mopts.policy, cursor);
      if (i < 0) return Sent::NoPath;
      PathQueue& p = paths[size_t(i)];
      r->path = i;
      const int rc = send_on(p, r);
      if (rc == 0) {
        ++p.commands;
        ++p.outstanding;
        return Sent::Yes;
      }
      if (rc == -EBUSY) return Sent::Busy;
      if (rc != -ENOTCONN) {
        refused_errno = rc;
        return Sent::Refused;
      }
      cand[size_t(i)].usable = false;  // lost since connected() said otherwise: the next one
    }
    return Sent::NoPath;
  }

  void push_waiting(MpRequest* r, uint64_t now) {
    r->set_state(MpRequest::State::Waiting);
    r->waiting_since_ns = now;
    r->next = nullptr;
    if (wait_tail) wait_tail->next = r;
    else wait_head = r;
    wait_tail = r;
    ++waiting;
  }
  MpRequest* pop_waiting() {
    MpRequest* r = wait_head;
    wait_head = r->next;
    if (!wait_head) wait_tail = nullptr;
    --waiting;
    return r;
  }

  void complete(MpRequest* r, const Completion& c) {
    CompletionFn cb = r->cb;
    void* ctx = r->ctx;
    r->set_state(MpRequest::State::Free);
    free.push_back(r);
    --outstanding;
    ++delivered;
    cb(ctx, c);
  }

  static void on_path_done(void* ctx, const Completion& c) {
    auto* r = static_cast<MpRequest*>(ctx);
    r->owner->path_done(r, c);
  }

  void path_done(MpRequest* r, const Completion& c) {
    PathQueue& p = paths[size_t(r->path)];
    --p.outstanding;
    if (closing || !detail::is_failover_status(c.status)) {
      complete(r, c);
      return;
    }
    const int32_t limit = sh->mopts.max_failovers;
    if (limit >= 0 && r->moves >= uint32_t(limit)) {
      // Moved as often as it may: the path's status is the answer. Logged at the first such
      // command and then at each power of two, so a target that keeps answering this way does
      // not flood the log.
      const uint64_t n = ++failovers_exhausted;
      if ((n & (n - 1)) == 0)
        log::warn("multipath {}: a command failed on path {}:{} with {} after {} move(s) between paths; "
                  "completed with that status ({} command(s) so far)",
                  sh->trids[size_t(r->path)].subnqn, sh->trids[size_t(r->path)].traddr,
                  sh->trids[size_t(r->path)].trsvcid, nvme::status_name(c.status), r->moves, n);
      complete(r, c);
      return;
    }
    ++r->moves;
    // The path failed it: it goes to the end of the waiting list and out again on the next
    // turn, on whichever path is best then.
    const nvme::AnaState said = detail::ana_state_of_status(c.status);
    if (said != nvme::AnaState::Optimized && p.ctrl && p.ctrl->ana_generation() > 0) {
      // An ANA status before the ANA change notice: leave this path alone for the namespace
      // until its controller has read log 0Ch again, and ask it to. Only a controller that
      // reads the log (one that reports ANA; its generation is 1 from connect on) ever lifts
      // such a hold: from any other the status just moves the command, as a lost path does.
      p.ana_hold[ana_index(r->nsid)] = p.ctrl->ana_generation() + 1;
      p.ctrl->request_ana_refresh();
    }
    ++failovers;
    log::debug("multipath {}: command moves off path {}:{}: {}", sh->trids[size_t(r->path)].subnqn,
               sh->trids[size_t(r->path)].traddr, sh->trids[size_t(r->path)].trsvcid, nvme::status_name(c.status));
    push_waiting(r, reactor::monotonic_ns());
  }

  // Whether any path may take commands again: a queue that is up or reconnecting, or a
  // controller that is (the queue follows).
  bool any_path_may_return() const {
    for (const auto& p : paths)
      if ((p.qp && !p.qp->failed()) || (p.ctrl && !p.ctrl->failed())) return true;
    std::lock_guard lk(sh->mu);
    for (const auto& p : sh->paths)
      if (p.ctrl && !p.ctrl->failed()) return true;
    return false;
  }

  // Sends what waits, in order, until a command finds no path or a full queue; then fails
  // what has waited past no_path_timeout_ms, or everything when no path can come back.
  void drain() {
    while (wait_head) {
      int refused = 0;
      const Sent s = issue(wait_head, refused);
      if (s == Sent::Yes) {
        MpRequest* r = pop_waiting();
        r->set_state(MpRequest::State::OnPath);
        continue;
      }
      if (s == Sent::Refused) {
        MpRequest* r = pop_waiting();
        Completion c;
        c.status = nvme::sc::InvalidField;
        complete(r, c);
        continue;
      }
      break;
    }
    if (!wait_head) return;
    const int32_t tmo = sh->mopts.no_path_timeout_ms;
    const uint64_t now = reactor::monotonic_ns();
    const bool gone = !any_path_may_return();
    while (wait_head && (gone || (tmo >= 0 && now - wait_head->waiting_since_ns >= uint64_t(tmo) * kNsPerMs))) {
      MpRequest* r = pop_waiting();
      Completion c;
      c.status = nvme::sc::TransportError;
      complete(r, c);
    }
  }

  // A new command: sent now if nothing waits before it, else queued behind what waits.
  int start(MpRequest& tmpl) {
    if (free.empty()) return -EBUSY;
    MpRequest* r = free.back();
    free.pop_back();
    const MpRequest::State was = r->state;
    *r = tmpl;
    r->state = was;
    r->owner = this;
    ++outstanding;
    if (!wait_head) {
      int refused = 0;
      const Sent s = issue(r, refused);
      if (s == Sent::Yes) {
        r->set_state(MpRequest::State::OnPath);
        return 0;
      }
      if (s == Sent::Refused) {
        free.push_back(r);
        --outstanding;
        return refused;
      }
    }
    push_waiting(r, reactor::monotonic_ns());
    return 0;
  }

  int poll(uint32_t timeout_us) {
    delivered = 0;
    sync_paths(false);
    drain();
    // Every path's queue is on this thread's reactor: one turn serves them all.
    QueuePair* any = nullptr;
    for (auto& p : paths)
      if (p.qp) {
        any = p.qp.get();
        break;
      }
    if (any) {
      any->process_completions(wait_head ? std::min<uint32_t>(timeout_us, 1000) : timeout_us);
    } else if (reactor::Reactor* r = reactor::Reactor::current()) {
      // No path has a queue: the thread's reactor still turns, for whatever else it carries
      // (a ublk device's block requests come in on it), and paths are looked at again soon.
      r->run_once(std::min<uint32_t>(timeout_us, 1000));
    } else if (timeout_us) {
      std::this_thread::sleep_for(std::chrono::microseconds(std::min<uint32_t>(timeout_us, 1000)));
    }
    drain();
    return delivered;
  }

  void close() {
    closing = true;
    for (auto& p : paths) {
      p.qp.reset();  // outstanding commands complete with a path error
      p.pending.reset();
    }
    while (wait_head) {
      MpRequest* r = pop_waiting();
      Completion c;
      c.status = nvme::sc::TransportError;
      complete(r, c);
    }
  }
};

std::unique_ptr<MultipathQueuePair> MultipathController::create_io_qpair(uint32_t depth, std::string& err) {
  if (depth < 1 || depth > 65535) {
    err = fmt::format("queue depth {} out of range", depth);
    return nullptr;
  }
  auto impl = std::make_unique<MultipathQueuePair::Impl>();
  impl->sh = s_;
  impl->depth = depth;
  impl->paths.resize(s_->trids.size());
  impl->cand.resize(s_->trids.size());
  for (auto& p : impl->paths) p.ana_hold.assign(detail::AnaTable::kCapacity + 1, 0);
  impl->pool.resize(depth);
  impl->free.reserve(depth);
  for (auto& r : impl->pool) impl->free.push_back(&r);
  impl->sync_paths(true);
  bool any = false;
  for (const auto& p : impl->paths) any = any || p.qp;
  if (!any) {
    err = "no path could make a queue (none is connected)";
    return nullptr;
  }
  return std::unique_ptr<MultipathQueuePair>(new MultipathQueuePair(std::move(impl)));
}

MultipathQueuePair::MultipathQueuePair(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MultipathQueuePair::~MultipathQueuePair() { impl_->close(); }

namespace {
MpRequest request(MpRequest::Op op, uint32_t nsid, CompletionFn cb, void* ctx) {
  MpRequest r;
  r.op = op;
  r.nsid = nsid;
  r.cb = cb;
  r.ctx = ctx;
  return r;
}
}  // namespace

int MultipathQueuePair::read(uint32_t nsid, uint64_t slba, uint32_t nlb, void* buf, CompletionFn cb, void* ctx) {
  MpRequest r = request(MpRequest::Op::Read, nsid, cb, ctx);
  r.slba = slba;
  r.nlb = nlb;
  r.buf = buf;
  return impl_->start(r);
}

int MultipathQueuePair::write(uint32_t nsid, uint64_t slba, uint32_t nlb, const void* buf, CompletionFn cb, void* ctx,
                              WriteFlags flags) {
  MpRequest r = request(MpRequest::Op::Write, nsid, cb, ctx);
  r.to_controller = true;
  r.fua = flags.fua;
  r.slba = slba;
  r.nlb = nlb;
  r.buf = const_cast<void*>(buf);
  return impl_->start(r);
}

int MultipathQueuePair::flush(uint32_t nsid, CompletionFn cb, void* ctx) {
  MpRequest r = request(MpRequest::Op::Flush, nsid, cb, ctx);
  return impl_->start(r);
}

int MultipathQueuePair::write_zeroes(uint32_t nsid, uint64_t slba, uint32_t nlb, CompletionFn cb, void* ctx) {
  MpRequest r = request(MpRequest::Op::WriteZeroes, nsid, cb, ctx);
  r.slba = slba;
  r.nlb = nlb;
  return impl_->start(r);
}

int MultipathQueuePair::deallocate(uint32_t nsid, const nvme::DsmRange* ranges, uint32_t n, CompletionFn cb,
                                   void* ctx) {
  MpRequest r = request(MpRequest::Op::Deallocate, nsid, cb, ctx);
  r.to_controller = true;
  r.nlb = n;  // ranges
  r.buf = const_cast<nvme::DsmRange*>(ranges);
  return impl_->start(r);
}

int MultipathQueuePair::submit(const nvme::Sqe& sqe, void* data, uint32_t len, bool to_controller, CompletionFn cb,
                               void* ctx) {
  MpRequest r = request(MpRequest::Op::Command, sqe.nsid, cb, ctx);
  r.sqe = sqe;
  r.buf = data;
  r.len = len;
  r.to_controller = to_controller;
  return impl_->start(r);
}

int MultipathQueuePair::process_completions(uint32_t timeout_us) { return impl_->poll(timeout_us); }
uint32_t MultipathQueuePair::depth() const { return impl_->depth; }
uint32_t MultipathQueuePair::outstanding() const { return impl_->outstanding; }
uint32_t MultipathQueuePair::waiting() const { return impl_->waiting; }
uint32_t MultipathQueuePair::block_size(uint32_t nsid) const {
  for (const auto& p : impl_->paths)
    if (p.qp)
      if (uint32_t bs = p.qp->block_size(nsid)) return bs;
  return 0;
}
uint64_t MultipathQueuePair::path_commands(size_t i) const { return impl_->paths.at(i).commands; }
uint64_t MultipathQueuePair::failovers() const { return impl_->failovers; }
uint64_t MultipathQueuePair::failovers_exhausted() const { return impl_->failovers_exhausted; }

}  // namespace nvtcp::host

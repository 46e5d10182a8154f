// SPDX-License-Identifier: Apache-2.0
#include "target_tcp/target.hpp"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>

#include "reactor/reactor.hpp"
#include "target_tcp/tcp_queue.hpp"
#include "util/log.hpp"

namespace nvtcp::target {

namespace {
constexpr uint64_t kRevalidateIntervalNs = 1'000'000'000;
// Descriptors the target needs beside its connections: listeners, io_uring rings and
// eventfds per reactor, namespace files, stdio.
constexpr uint64_t kSpareDescriptors = 64;

double thread_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// The open files limit bounds the connections the target can hold: raise the soft limit
// to the hard one, and say so when max_connections is beyond what remains.
void raise_descriptor_limit(const TargetConfig& cfg) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit want = rl;
    want.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &want) == 0) {
      log::info("open files limit raised from {} to {} (the hard limit)", uint64_t(rl.rlim_cur), uint64_t(want.rlim_cur));
      rl = want;
    }
  }
  const uint64_t cur = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : uint64_t(rl.rlim_cur);
  const uint64_t usable = cur > kSpareDescriptors ? cur - kSpareDescriptors : 0;
  if (cfg.max_connections == 0 || cfg.max_connections > usable)
    log::warn("max_connections {} cannot be met: the open files limit is {} (raise it with ulimit -n or "
              "LimitNOFILE=); past about {} connections, new ones fail at accept until some close",
              cfg.max_connections == 0 ? std::string("(no limit)") : std::to_string(cfg.max_connections), cur,
              usable);
}
}  // namespace

Target::Target(TargetConfig cfg, DeviceFactory factory)
    : cfg_(std::move(cfg)), factory_(std::move(factory)), live_(*this), sockets_(*this) {}

Target::~Target() { stop(); }

std::string Target::start() {
  if (std::string err = finalize_config(cfg_); !err.empty()) return err;
  state_ = std::make_unique<TargetState>();
  quiesced_.store(0);
  state_->start_ns = reactor::monotonic_ns();
  if (std::string err = build_state(cfg_, *state_, factory_); !err.empty()) return err;
  psk_resolver_ = std::make_unique<TargetPskResolver>(*state_);
  // The auth workers start here, on the caller's thread, so they run on the process's CPUs: made
  // later by a reactor pinned with --cpus, they would share (and slow) that reactor's core.
  state_->workers();

  raise_descriptor_limit(cfg_);
  // Bind every listener first so that errors surface before any thread starts.
  if (std::string err = sockets_.bind_configured(); !err.empty()) return err;

  for (unsigned i = 0; i < cfg_.cores; ++i) {
    auto rt = std::make_unique<ReactorThread>();
    ReactorThread* raw = rt.get();
    raw->connections.set_index(i);
    bool accept_here = i == 0;
    int cpu = i < cfg_.cpus.size() ? cfg_.cpus[i] : -1;
    raw->pinned_cpu = cpu;
    rt->thread = std::thread([this, raw, accept_here, cpu] { run_reactor(raw, accept_here, cpu); });
    std::unique_lock lk(raw->mu);
    raw->cv.wait(lk, [raw] { return raw->ready; });
    reactors_.push_back(std::move(rt));
  }
  // The states listeners start in (save_config's nvmf_subsystem_listener_set_ana_state), set
  // before any host can connect and see another. finalize_config checked each; one that still
  // fails is logged, and its listener stays optimized.
  const std::vector<Listener> bound = state_->listeners();  // in configuration order, with the ports they got
  for (const auto& sc : cfg_.subsystems)
    for (const auto& a : sc.ana_states) {
      const int i = listener_index(cfg_, a.listener);
      std::string err = i < 0 || size_t(i) >= bound.size()
                            ? "not one of the target's listeners"
                            : live_.set_ana_state(sc.nqn, bound[size_t(i)].address, bound[size_t(i)].port,
                                                  a.anagrpid, a.state);
      if (!err.empty()) log::error("subsystem {}: ANA state for listener {}: {}", sc.nqn, a.listener, err);
    }
  // Accepting starts only now that every reactor exists to take connections.
  reactors_[0]->reactor->post([this] {
    revalidate_timer_.target = this;
    revalidate_timer_.fn = on_revalidate_timer;
    reactor::Reactor::current()->arm_timer(&revalidate_timer_, kRevalidateIntervalNs);
    sockets_.start_accepting_all();
  });
  started_ = true;
  for (const Listener& l : state_->listeners()) log::info("listening on {}:{}", l.address, l.port);
  if (discovery_port()) log::info("discovery service on {}:{}", cfg_.listeners[0].address, discovery_port());
  return {};
}

// The thread of reactor raw, pinned to cpu (-1: not pinned); reactor 0 (accept_here) also
// takes the listening sockets down when the target stops.
void Target::run_reactor(ReactorThread* raw, bool accept_here, int cpu) {
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) log::warn("cannot pin a reactor to CPU {}", cpu);
  }
  reactor::ReactorOptions ro = reactor::ReactorOptions::defaults();
  ro.poll = cfg_.poll == "busy"     ? PollMode::Busy
            : cfg_.poll == "hybrid" ? PollMode::Hybrid
                                    : PollMode::Interrupt;
  ro.sqpoll = cfg_.sqpoll;
  ro.sq_thread_idle_ms = cfg_.sqpoll_idle_ms;
  ro.sq_thread_cpu = cfg_.sqpoll_cpu;
  ro.send_zc_threshold = cfg_.send_zc_threshold;
  ro.recv_multishot = cfg_.recv_multishot;
  ro.spin_recv = cfg_.spin_recv;
  reactor::Reactor r(4096, ro);
  raw->reactor = &r;
  {
    std::lock_guard lk(raw->mu);
    raw->ready = true;
  }
  raw->cv.notify_all();
  // The CPU figure is sampled every millisecond, not every turn: getrusage is a system
  // call, and a polling reactor turns hundreds of thousands of times a second.
  uint64_t next_cpu_sample_ns = 0;
  const uint64_t started_ns = r.now_ns();
  while (!stopping_.load(std::memory_order_relaxed)) {
    r.run_once(100000);
    if (r.now_ns() >= next_cpu_sample_ns) {
      raw->cpu.store(thread_cpu_seconds(), std::memory_order_relaxed);
      raw->busy_ns.store(r.busy_ns(), std::memory_order_relaxed);
      raw->run_ns.store(r.now_ns() - started_ns, std::memory_order_relaxed);
      next_cpu_sample_ns = r.now_ns() + 1'000'000;
    }
  }
  // Shutting down: close what is left and let the closes finish (bounded).
  raw->connections.close_all();
  uint64_t deadline = reactor::monotonic_ns() + 2'000'000'000ull;
  while ((raw->connections.size() > 0 || raw->connections.draining() > 0) && reactor::monotonic_ns() < deadline)
    r.run_once(10000);
  // Work on the auth workers comes back through this reactor: it must not go first. The
  // work is bounded (an exponentiation), so this wait is too.
  while (raw->connections.offloads_out()) r.run_once(1000);
  if (accept_here) {
    sockets_.shut_down_all();
    for (int turn = 0; turn < 10; ++turn) r.run_once(1000);
  }
  // No reactor is destroyed before all have got this far: until reactor 0 has shut its
  // listeners and drained their completions it may still hand an accepted connection
  // to any reactor (the hand-off closes it, seeing stopping_), and a post must never
  // reach a destroyed reactor, nor its eventfd a closed descriptor. Posts made before
  // the last reactor arrived are run by the turns after.
  quiesced_.fetch_add(1, std::memory_order_acq_rel);
  while (quiesced_.load(std::memory_order_acquire) < cfg_.cores) r.run_once(1000);
  r.run_once(0);
  raw->cpu.store(thread_cpu_seconds(), std::memory_order_relaxed);
  raw->reactor = nullptr;
}

void Target::on_revalidate_timer(reactor::Timer* t) {
  Target* self = static_cast<RevalidateTimer*>(t)->target;
  if (self->stopping_.load()) return;
  self->state_->for_each_subsystem([](Subsystem& s) { s.revalidate_namespaces(); });
  reactor::Reactor::current()->arm_timer(t, kRevalidateIntervalNs);
}

void Target::stop() {
  if (!started_) return;
  started_ = false;
  stopping_.store(true);
  for (auto& rt : reactors_) {
    if (rt->thread.joinable()) rt->thread.join();
  }
  sockets_.clear();
}

std::vector<ConnectionInfo> Target::connection_info() {
  std::vector<ConnectionInfo> out;
  if (!started_) return out;
  for (auto& rt : reactors_) {
    auto done = std::make_shared<std::promise<std::vector<ConnectionInfo>>>();
    auto f = done->get_future();
    ReactorThread* raw = rt.get();
    raw->reactor->post([raw, done] {
      std::vector<ConnectionInfo> v;
      raw->connections.collect(v);
      done->set_value(std::move(v));
    });
    if (f.wait_for(std::chrono::seconds(5)) != std::future_status::ready) continue;
    auto v = f.get();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// Asks each reactor for its share (get runs there) and adds the shares up; a reactor that does
// not answer within 5 s is left out rather than waited for.
template <typename Counts, typename Get>
Counts Target::sum_over_reactors(Get get) {
  Counts sum{};
  if (!started_) return sum;
  for (auto& rt : reactors_) {
    auto done = std::make_shared<std::promise<Counts>>();
    auto f = done->get_future();
    ReactorThread* raw = rt.get();
    raw->reactor->post([raw, done, get] { done->set_value(get(raw->connections)); });
    if (f.wait_for(std::chrono::seconds(5)) != std::future_status::ready) continue;
    const Counts c = f.get();
    for (size_t s = 0; s < sum.size(); ++s) sum[s] += c[s];
  }
  return sum;
}

void Target::quiesce() {
  if (!started_) return;
  for (auto& rt : reactors_) {
    // Shared: a reactor that runs the task after a wait that gave up still finds it alive.
    auto done = std::make_shared<std::promise<void>>();
    auto f = done->get_future();
    rt->reactor->post([done] { done->set_value(); });
    while (f.wait_for(std::chrono::seconds(5)) != std::future_status::ready)
      log::warn("control: a reactor has not finished its turn in 5 s; still waiting");
  }
}

RequestStateCounts Target::request_states() {
  return sum_over_reactors<RequestStateCounts>([](const ConnectionSet& c) { return c.request_states(); });
}

RequestStateEntries Target::request_entries() {
  return sum_over_reactors<RequestStateEntries>([](const ConnectionSet& c) { return c.request_entries(); });
}

CommandStateCounts Target::command_states() {
  return sum_over_reactors<CommandStateCounts>([](const ConnectionSet& c) { return c.command_states(); });
}

CommandStateEntries Target::command_entries() {
  return sum_over_reactors<CommandStateEntries>([](const ConnectionSet& c) { return c.command_entries(); });
}

uint16_t Target::port(size_t listener) const {
  const std::vector<Listener> listeners = state_->listeners();
  return listener < listeners.size() ? listeners[listener].port : 0;
}

uint64_t Target::io_count() const {
  uint64_t n = 0;
  for (auto& rt : reactors_) n += rt->connections.ios();
  return n;
}

std::vector<uint64_t> Target::io_counts_per_reactor() const {
  std::vector<uint64_t> out;
  for (auto& rt : reactors_) out.push_back(rt->connections.ios());
  return out;
}

uint64_t Target::flush_count() const {
  uint64_t n = 0;
  for (auto& rt : reactors_) n += rt->connections.flushes();
  return n;
}

uint64_t Target::fua_write_count() const {
  uint64_t n = 0;
  for (auto& rt : reactors_) n += rt->connections.fua_writes();
  return n;
}

uint64_t Target::turn_waits() const {
  uint64_t n = 0;
  for (auto& rt : reactors_) n += rt->connections.turn_waits();
  return n;
}

uint64_t Target::most_bytes_in_a_turn() const {
  uint64_t most = 0;
  for (auto& rt : reactors_) most = std::max(most, rt->connections.most_bytes_in_a_turn());
  return most;
}

std::vector<double> Target::cpu_seconds_per_reactor() const {
  std::vector<double> out;
  for (auto& rt : reactors_) out.push_back(rt->cpu.load(std::memory_order_relaxed));
  return out;
}

std::vector<double> Target::busy_seconds_per_reactor() const {
  std::vector<double> out;
  for (auto& rt : reactors_) out.push_back(double(rt->busy_ns.load(std::memory_order_relaxed)) / 1e9);
  return out;
}

std::vector<Target::ReactorTimes> Target::reactor_times() const {
  std::vector<ReactorTimes> out;
  for (auto& rt : reactors_)
    out.push_back({rt->busy_ns.load(std::memory_order_relaxed), rt->run_ns.load(std::memory_order_relaxed), rt->pinned_cpu});
  return out;
}

double Target::cpu_seconds() const {
  double s = 0;
  for (auto& rt : reactors_) s += rt->cpu.load(std::memory_order_relaxed);
  return s;
}

}  // namespace nvtcp::target

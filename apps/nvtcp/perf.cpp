// SPDX-License-Identifier: Apache-2.0
#include "perf.hpp"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace nvtcp::app {

namespace {
uint64_t monotonic_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

// What the run itself has to say (the library's own lines go to its log sink).
template <typename... Args>
void report(fmt::format_string<Args...> f, Args&&... a) {
  std::fputs(("nvtcp perf: " + fmt::format(f, std::forward<Args>(a)...) + "\n").c_str(), stderr);
}

double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

struct Job;

// One outstanding I/O slot: its buffer and where it is going.
struct Slot {
  Job* job = nullptr;
  host::QueuePair* qp = nullptr;
  host::MultipathQueuePair* mqp = nullptr;  // instead of qp, with several paths
  uint8_t* buf = nullptr;
  uint64_t lba = 0;
  uint64_t start_ns = 0;
  bool is_read = true;
  bool refused = false;  // the queue pair refused it (reconnecting): not yet issued
  // Issued and not yet completed. A phase that starts while its command is still out leaves
  // it alone: the command owns the buffer until it completes (and then goes on in the new phase).
  bool in_flight = false;
};

struct Job {
  const PerfOptions* o = nullptr;
  PerfResult* r = nullptr;
  uint32_t nsid = 1;
  uint32_t bs = 512;
  uint64_t blocks = 0;
  uint32_t nlb = 8;
  uint64_t span = 0;     // number of io_size units in the namespace
  uint64_t seq = 0;
  Rng rng{0x9E3779B97F4A7C15ull};
  bool random = true;
  uint32_t read_pct = 100;
  bool stopping = false;
  uint64_t outstanding = 0;
  bool verify_phase_read = false;
  uint64_t issued = 0;
  uint64_t issue_limit = 0;  // --number-ios, and verify read-back: exactly as many I/Os as were written
  uint64_t phase_start_ns = 0;
  uint64_t pattern_seed = 0; // per run (shared by its threads), so blocks left by an earlier run never pass
  std::vector<bool> acked;   // verify: io_size units with at least one acknowledged write
  std::vector<Slot*> idle;   // slots whose submission was refused (queue reconnecting)
  // The measured span starts after the ramp: completions before it only keep the queues full.
  uint64_t measure_start_ns = 0;
  // --timeline-ms: cells of the measured span, sized before the run (nothing allocated per
  // I/O). Outstanding holds kUnsampled until the run loop looked at the cell.
  static constexpr uint64_t kUnsampled = ~0ull;
  uint64_t cell_ns = 0;
  std::vector<uint64_t> cell_completed, cell_outstanding;
  uint64_t ns_generation = 0;  // the controller's namespace generation the region was checked at

  // The host library rescans by itself when the controller reports a namespace change. A
  // namespace that shrank under the run: keep to its new end, since commands beyond it only
  // fail (LBA Out of Range). One that grew keeps the region the run started with. Checked
  // between polls, not per I/O (the generation is one atomic load; the rest runs only when
  // it moved).
  void follow_shrink(host::Controller& ctrl) {
    const uint64_t g = ctrl.namespace_generation();
    if (g == ns_generation) return;
    ns_generation = g;
    host::NamespaceInfo ni;
    std::string err;
    if (!ctrl.namespace_info(nsid, ni, err)) {
      report("namespace {} is gone ({}): its I/O will fail", nsid, err);
      return;
    }
    if (ni.block_size != bs) {
      report("namespace {} now has {}-byte blocks, not {}: its I/O will fail", nsid, ni.block_size, bs);
      return;
    }
    const uint64_t units = ni.blocks / nlb;
    if (units >= span) return;
    span = std::max<uint64_t>(units, 1);
    report("namespace {} shrank to {} blocks: I/O from now on stays below LBA {}", nsid, ni.blocks, span * nlb);
  }

  void fill_pattern(Slot* s) {
    // Each block carries its LBA and a fixed tag, so a misplaced or stale block shows.
    for (uint32_t b = 0; b < nlb; ++b) {
      uint64_t lba = s->lba + b;
      auto* p = reinterpret_cast<uint64_t*>(s->buf + size_t(b) * bs);
      for (uint32_t i = 0; i < bs / 8; ++i) p[i] = (lba * 0x100000001B3ull ^ (0xA5A5A5A5ull + i)) + pattern_seed;
    }
  }
  bool check_pattern(const Slot* s) {
    for (uint32_t b = 0; b < nlb; ++b) {
      uint64_t lba = s->lba + b;
      auto* p = reinterpret_cast<const uint64_t*>(s->buf + size_t(b) * bs);
      for (uint32_t i = 0; i < bs / 8; ++i)
        if (p[i] != (lba * 0x100000001B3ull ^ (0xA5A5A5A5ull + i)) + pattern_seed) return false;
    }
    return true;
  }

  // --rate-iops: how many I/Os this thread may have issued by now (one at the start).
  uint64_t paced_allowance() const {
    return 1 + (monotonic_ns() - phase_start_ns) * o->rate_iops / 1'000'000'000ull;
  }

  bool issue(Slot* s) {
    if (!s->refused) {  // a refused slot tries the same I/O again, keeping the verify sequence
      if (issue_limit && issued >= issue_limit) return false;
      if (o->rate_iops && issued >= paced_allowance()) {
        idle.push_back(s);  // ahead of the rate: the run loop offers it again
        return false;
      }
      ++issued;
      uint64_t unit = random ? rng.next() % span : (seq++ % span);
      s->lba = unit * nlb;
      if (o->verify) s->is_read = verify_phase_read;
      else s->is_read = read_pct >= 100 ? true : read_pct == 0 ? false : (rng.next() % 100) < read_pct;
      if (o->verify && !s->is_read) fill_pattern(s);
    }
    s->start_ns = monotonic_ns();
    int rc = s->mqp   ? (s->is_read ? s->mqp->read(nsid, s->lba, nlb, s->buf, on_done, s)
                                    : s->mqp->write(nsid, s->lba, nlb, s->buf, on_done, s))
             : s->is_read ? s->qp->read(nsid, s->lba, nlb, s->buf, on_done, s)
                          : s->qp->write(nsid, s->lba, nlb, s->buf, on_done, s);
    s->refused = rc == -ENOTCONN;
    s->in_flight = rc == 0;
    if (rc != 0) {
      // Refused while the queue reconnects and fails I/O fast: try again later.
      if (s->refused) idle.push_back(s);
      return false;
    }
    ++outstanding;
    return true;
  }

  static void on_done(void* ctx, const host::Completion& c) {
    auto* s = static_cast<Slot*>(ctx);
    Job* j = s->job;
    uint64_t now = monotonic_ns();
    s->in_flight = false;
    --j->outstanding;
    if (j->cell_ns && now >= j->measure_start_ns) {
      const uint64_t cell = (now - j->measure_start_ns) / j->cell_ns;
      if (cell < j->cell_completed.size()) ++j->cell_completed[cell];
    }
    j->r->lat.record(now - s->start_ns);
    ++j->r->ios;
    if (s->is_read) ++j->r->reads; else ++j->r->writes;
    if (!c.status.ok()) {
      if (j->r->errors++ < 5) report("I/O error at LBA {}: {}", s->lba, nvme::status_name(c.status));
    } else if (j->o->verify && !s->is_read) {
      // A write that completes after the write half ended may have raced the read of its block:
      // the read-back checks what was acknowledged as that half ended.
      if (!j->verify_phase_read) j->acked[s->lba / j->nlb] = true;
    } else if (j->o->verify && s->is_read) {
      // Only acknowledged writes promise anything: a block whose every write failed is
      // not checked (and counted).
      if (!j->acked[s->lba / j->nlb]) ++j->r->verify_skipped;
      else if (!j->check_pattern(s) && j->r->verify_failures++ < 5)
        report("verify: data at LBA {} does not match what was written", s->lba);
    }
    if (!j->stopping) j->issue(s);
  }
};
}  // namespace

namespace {
// One thread's share of the run: its own queue pairs, slots and buffers, nothing shared.
// on_ramp_end, when given, is called on this thread as its ramp ends.
bool run_worker(const PerfOptions& o, host::Controller& ctrl, host::MultipathController* mp,
                const host::NamespaceInfo& ni, unsigned index, PerfResult& out, std::string& err,
                const std::function<void()>& on_ramp_end) {
  Job job;
  job.o = &o;
  job.r = &out;
  job.nsid = o.trid.nsid;
  job.bs = ni.block_size;
  job.blocks = ni.blocks;
  job.nlb = o.io_size / ni.block_size;
  job.span = ni.blocks / job.nlb;
  job.rng.s ^= 0xD1B54A32D192ED03ull * (index + 1);
  const std::string& w = o.workload;
  job.random = w.rfind("rand", 0) == 0;
  if (w == "read" || w == "randread") job.read_pct = 100;
  else if (w == "write" || w == "randwrite") job.read_pct = 0;
  else job.read_pct = o.read_percent;
  if (!job.random) job.seq = uint64_t(index) * (job.span / std::max<unsigned>(o.cores, 1));

  std::vector<std::unique_ptr<host::QueuePair>> qps;
  std::vector<std::unique_ptr<host::MultipathQueuePair>> mqps;  // with several paths, instead
  for (uint32_t i = 0; i < o.qpairs; ++i) {
    if (mp) {
      auto q = mp->create_io_qpair(o.queue_depth, err);
      if (!q) return false;
      mqps.push_back(std::move(q));
      continue;
    }
    auto qp = ctrl.create_io_qpair(o.queue_depth, err);
    if (!qp) return false;
    qps.push_back(std::move(qp));
  }
  size_t nslots = size_t(o.qpairs) * o.queue_depth;
  std::vector<Slot> slots(nslots);
  size_t buf_bytes = nslots * size_t(o.io_size);
  // From the controller: through the offload engine, buffers lie in the region it shares.
  void* mem = ctrl.alloc_io_buffer(buf_bytes);
  if (!mem) {
    err = fmt::format("no room for {} bytes of I/O buffers", buf_bytes);
    return false;
  }
  auto release = [&ctrl](uint8_t* p) { ctrl.free_io_buffer(p); };
  std::unique_ptr<uint8_t, decltype(release)> bufs(static_cast<uint8_t*>(mem), release);
  std::memset(bufs.get(), 0, buf_bytes);
  for (size_t i = 0; i < nslots; ++i) {
    slots[i].job = &job;
    if (mp) slots[i].mqp = mqps[i / o.queue_depth].get();
    else slots[i].qp = qps[i / o.queue_depth].get();
    slots[i].buf = bufs.get() + i * o.io_size;
  }

  auto run_phase = [&](double secs, double ramp_secs) {
    job.stopping = false;
    uint64_t t0 = monotonic_ns();
    job.phase_start_ns = t0;
    job.measure_start_ns = t0 + uint64_t(ramp_secs * 1e9);
    bool ramped = ramp_secs <= 0;
    if (o.timeline_ms) {
      job.cell_ns = uint64_t(o.timeline_ms) * 1'000'000ull;
      const size_t cells = size_t(secs * 1e9) / job.cell_ns;
      job.cell_completed.assign(cells, 0);
      job.cell_outstanding.assign(cells, Job::kUnsampled);
    }
    // Over TCP one reactor serves every queue pair of this thread: polling any one drives
    // all. Through the engine each queue pair has its own completion queue to read.
    const bool each_queue = ctrl.trid().trtype == "engine";
    auto poll_all = [&](uint32_t timeout_us) {
      if (mp) {  // each sends what waits for a path; one reactor turn (the first's) serves all paths
        for (size_t i = 0; i < mqps.size(); ++i) mqps[i]->process_completions(i ? 0 : timeout_us);
        return;
      }
      qps[0]->process_completions(timeout_us);  // the reactor decides whether to sleep (poll mode)
      if (each_queue)
        for (size_t i = 1; i < qps.size(); ++i) qps[i]->process_completions(0);
    };
    job.idle.clear();
    for (auto& s : slots) {
      if (s.in_flight) continue;  // still out from the last phase: it goes on when it completes
      s.refused = false;          // a write refused at the end of the last phase never ran
      job.issue(&s);
    }
    uint64_t end = job.measure_start_ns + uint64_t(secs * 1e9);
    const uint64_t reauth_ns = uint64_t(o.reauth_seconds * 1e9);
    uint64_t next_reauth = reauth_ns ? t0 + reauth_ns : UINT64_MAX;
    while (true) {
      poll_all(1000);
      const uint64_t now = monotonic_ns();
      if (!ramped && now >= job.measure_start_ns) {
        // The ramp is over: what it did is not the sample's.
        ramped = true;
        const PerfResult kept = out;
        out = PerfResult{};
        out.errors = kept.errors;  // an error is never hidden, ramp or not
        out.reauths = kept.reauths;
        out.reauth_failures = kept.reauth_failures;
        out.reauth_error = kept.reauth_error;
        if (on_ramp_end) on_ramp_end();
      }
      if (job.cell_ns && ramped) {
        const uint64_t c = (now - job.measure_start_ns) / job.cell_ns;
        if (c < job.cell_outstanding.size()) {
          uint64_t& o_max = job.cell_outstanding[c];
          if (o_max == Job::kUnsampled || job.outstanding > o_max) o_max = job.outstanding;
        }
      }
      if (now >= end) break;
      if (now >= next_reauth) {
        // --reauth-interval: a new DH-HMAC-CHAP transaction on this thread's queue pairs (and, by
        // the first thread, on the admin queue), while their I/O goes on.
        next_reauth = now + reauth_ns;
        auto count = [&out](int rc, const std::string& why) {
          if (rc == 0) {
            ++out.reauths;
          } else {
            ++out.reauth_failures;
            out.reauth_error = why;
          }
        };
        std::string why;
        if (index == 0) count(ctrl.reauthenticate(why), why);
        for (auto& q : qps) count(q->reauthenticate(why), why);
      }
      // --number-ios: done once every I/O asked for has completed.
      if (o.number_ios && job.issued >= job.issue_limit && job.outstanding == 0 && job.idle.empty()) break;
      job.follow_shrink(ctrl);
      if (!job.idle.empty()) {
        std::vector<Slot*> retry;
        retry.swap(job.idle);
        for (Slot* s : retry) job.issue(s);
      }
      bool all_failed = !mp;  // a multipath queue pair does not fail: its commands wait for a path
      for (auto& q : qps) all_failed &= q->failed();
      if (all_failed) break;
    }
    job.stopping = true;
    // In-flight commands may wait for a reconnect: give them as long as recovery may take.
    uint64_t drain_ms = 5000;
    if (o.ctrl.ctrl_loss_tmo_ms) drain_ms += o.ctrl.ctrl_loss_tmo_ms + 2ull * o.ctrl.io_timeout_ms;
    uint64_t drain_end = monotonic_ns() + drain_ms * 1'000'000ull;
    while (job.outstanding > 0 && monotonic_ns() < drain_end) poll_all(1000);
    const uint64_t done_ns = monotonic_ns();  // the measured span: from the ramp's end (none if it never ended)
    if (done_ns > job.measure_start_ns) out.seconds += double(done_ns - job.measure_start_ns) / 1e9;
    if (job.cell_ns) {
      // A cell the loop never looked at (the thread did not run) had what the one before had.
      uint64_t last = 0;
      for (uint64_t& v : job.cell_outstanding) v = v == Job::kUnsampled ? last : (last = v);
      out.timeline_cell_s = double(job.cell_ns) / 1e9;
      out.timeline_completed = job.cell_completed;
      out.timeline_outstanding = job.cell_outstanding;
    }
  };

  if (o.verify) {
    // Write phase then read-back phase over the same sequence of offsets.
    job.verify_phase_read = false;
    // One seed for every thread of this run: random workloads of several threads overlap, and a
    // block another thread wrote must still read back as this thread's pattern.
    static const uint64_t run_seed = std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
    job.pattern_seed = run_seed;
    job.acked.assign(job.span, false);
    job.issue_limit = o.number_ios;
    Rng saved = job.rng;
    uint64_t saved_seq = job.seq;
    run_phase(o.seconds / 2, 0);
    if (job.outstanding > 0)
      report("verify: {} writes still outstanding as the write half ended: the read-back starts beside them "
             "(a block whose only write is among them is not checked)",
             job.outstanding);
    job.rng = saved;
    job.seq = saved_seq;
    job.issue_limit = job.issued;
    job.issued = 0;
    job.verify_phase_read = true;
    run_phase(o.seconds / 2, 0);
  } else {
    job.issue_limit = o.number_ios;
    run_phase(o.seconds, o.ramp_seconds);
  }
  bool any_failed = false;
  for (auto& q : qps) any_failed |= q->failed();
  if (mp) {
    out.path_commands.assign(mp->path_count(), 0);
    for (auto& q : mqps) {
      for (size_t p = 0; p < mp->path_count(); ++p) out.path_commands[p] += q->path_commands(p);
      out.failovers += q->failovers();
    }
    mqps.clear();  // as qps below: while the slots exist
  }
  // Closing a queue pair ends what is still outstanding through the callbacks, which use
  // the slots: close them while the slots exist.
  qps.clear();
  if (any_failed) err = "a queue pair failed during the run (see the log above)";
  return !any_failed;
}

void pin_to(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);
}
}  // namespace

bool run_perf(const PerfOptions& o, PerfResult& out, std::string& err) {
  // The host library makes each thread's reactor itself, with these options.
  host::set_data_path_options(o.data_path);
  std::unique_ptr<host::MultipathController> mp;
  std::shared_ptr<host::Controller> ctrl;
  if (o.paths.size() > 1) {
    if (o.reauth_seconds > 0) {
      err = "--reauth-interval is not taken with several paths";
      return false;
    }
    mp = host::MultipathController::connect(o.paths, o.ctrl, o.multipath, err);
    if (!mp) return false;
    ctrl = mp->any_controller();
    if (!ctrl) {
      err = "no path is connected";
      return false;
    }
  } else {
    ctrl = host::Controller::connect(o.trid, o.ctrl, err);
    if (!ctrl) return false;
  }
  host::NamespaceInfo ni;
  if (!ctrl->namespace_info(o.trid.nsid, ni, err)) return false;
  if (o.io_size == 0 || o.io_size % ni.block_size) {
    err = fmt::format("I/O size {} is not a multiple of the namespace block size {}", o.io_size, ni.block_size);
    return false;
  }
  if (o.io_size > ctrl->max_transfer_bytes()) {
    err = fmt::format("I/O size {} is over the controller's largest transfer ({})", o.io_size,
                      ctrl->max_transfer_bytes());
    return false;
  }
  if (ni.blocks / (o.io_size / ni.block_size) == 0) {
    err = "namespace smaller than one I/O";
    return false;
  }
  const std::string& w = o.workload;
  if (w != "read" && w != "write" && w != "randread" && w != "randwrite" && w != "randrw" && w != "rw") {
    err = fmt::format("unknown workload '{}' (read, write, randread, randwrite, randrw, rw)", w);
    return false;
  }
  unsigned cores = std::max<unsigned>(o.cores, 1);
  std::vector<PerfResult> results(cores);
  std::vector<std::string> errors(cores);
  std::vector<char> ok(cores, 0);
  if (o.verify && o.ramp_seconds > 0) {
    err = "--ramp does not go with --verify (the read-back must see every write)";
    return false;
  }
  // The process's CPU from the end of the ramp (the first thread's; all start together).
  double cpu0 = process_cpu_seconds();
  const std::function<void()> ramp_end_cpu = [&cpu0] { cpu0 = process_cpu_seconds(); };
  auto work = [&](unsigned i) {
    pin_to(i < o.cpus.size() ? o.cpus[i] : -1);
    ok[i] = run_worker(o, *ctrl, mp.get(), ni, i, results[i], errors[i],
                       i == 0 ? ramp_end_cpu : std::function<void()>());
  };
  if (cores == 1) {
    work(0);
  } else {
    std::vector<std::thread> threads;
    for (unsigned i = 0; i < cores; ++i) threads.emplace_back(work, i);
    for (auto& t : threads) t.join();
  }
  out.cpu_seconds = process_cpu_seconds() - cpu0;
  for (unsigned i = 0; i < cores; ++i) {
    if (!ok[i]) {
      err = errors[i];
      return false;
    }
    const PerfResult& r = results[i];
    out.ios += r.ios;
    out.reads += r.reads;
    out.writes += r.writes;
    out.errors += r.errors;
    out.verify_failures += r.verify_failures;
    out.verify_skipped += r.verify_skipped;
    out.reauths += r.reauths;
    out.reauth_failures += r.reauth_failures;
    if (out.reauth_error.empty()) out.reauth_error = r.reauth_error;
    out.seconds = std::max(out.seconds, r.seconds);
    out.path_commands.resize(std::max(out.path_commands.size(), r.path_commands.size()), 0);
    for (size_t p = 0; p < r.path_commands.size(); ++p) out.path_commands[p] += r.path_commands[p];
    out.failovers += r.failovers;
    out.lat.merge(r.lat);
    if (!r.timeline_completed.empty()) {
      out.timeline_cell_s = r.timeline_cell_s;
      const size_t n = std::max(out.timeline_completed.size(), r.timeline_completed.size());
      out.timeline_completed.resize(n, 0);
      out.timeline_outstanding.resize(n, 0);
      for (size_t c = 0; c < r.timeline_completed.size(); ++c) {
        out.timeline_completed[c] += r.timeline_completed[c];
        out.timeline_outstanding[c] += r.timeline_outstanding[c];
      }
    }
  }
  return true;
}

std::string format_perf_text(const PerfOptions& o, const PerfResult& r) {
  auto us = [](double ns) { return ns / 1000.0; };
  std::string s;
  s += fmt::format("nvtcp perf: {} {} B, QD {} x {} queue pair(s) x {} thread(s), {:.1f} s against {}:{} ns {}\n",
                   o.workload, o.io_size, o.queue_depth, o.qpairs, std::max<unsigned>(o.cores, 1), r.seconds,
                   o.trid.traddr, o.trid.trsvcid, o.trid.nsid);
  s += fmt::format("  IOPS {:>12.0f}   MiB/s {:>10.1f}   Gb/s {:>7.2f}   ({} reads, {} writes, {} errors)\n", r.iops(),
                   r.mibps(o.io_size), r.gbps(o.io_size), r.reads, r.writes, r.errors);
  s += fmt::format("  latency us: avg {:.1f}  min {:.1f}  max {:.1f}  p50 {:.1f}  p99 {:.1f}  p99.9 {:.1f}\n",
                   us(r.lat.mean_ns()), us(double(r.lat.min_ns())), us(double(r.lat.max_ns())),
                   us(r.lat.percentile_ns(0.5)), us(r.lat.percentile_ns(0.99)), us(r.lat.percentile_ns(0.999)));
  s += fmt::format("  CPU: {:.2f} s, {:.3f} s per million I/Os\n", r.cpu_seconds, r.cpu_s_per_mio());
  if (o.verify)
    s += fmt::format("  verify: {} mismatches, {} reads of blocks with no acknowledged write not checked\n",
                     r.verify_failures, r.verify_skipped);
  for (size_t p = 0; p < r.path_commands.size() && p < o.paths.size(); ++p)
    s += fmt::format("  path {}:{}: {} commands\n", o.paths[p].traddr, o.paths[p].trsvcid, r.path_commands[p]);
  if (!r.path_commands.empty()) s += fmt::format("  failovers: {}\n", r.failovers);
  if (o.reauth_seconds > 0)
    s += fmt::format("  re-authentication: {} transactions, {} failed{}{}\n", r.reauths, r.reauth_failures,
                     r.reauth_failures ? ": " : "", r.reauth_failures ? r.reauth_error : "");
  return s;
}

std::string format_perf_json(const PerfOptions& o, const PerfResult& r) {
  nlohmann::json j;
  j["workload"] = o.workload;
  j["io_size"] = o.io_size;
  j["queue_depth"] = o.queue_depth;
  j["qpairs"] = o.qpairs;
  j["threads"] = std::max<unsigned>(o.cores, 1);
  j["seconds"] = r.seconds;
  j["ios"] = r.ios;
  j["reads"] = r.reads;
  j["writes"] = r.writes;
  j["errors"] = r.errors;
  j["iops"] = r.iops();
  j["mibps"] = r.mibps(o.io_size);
  j["gbps"] = r.gbps(o.io_size);
  j["lat_avg_us"] = r.lat.mean_ns() / 1000.0;
  j["lat_min_us"] = double(r.lat.min_ns()) / 1000.0;
  j["lat_max_us"] = double(r.lat.max_ns()) / 1000.0;
  j["lat_p50_us"] = r.lat.percentile_ns(0.5) / 1000.0;
  j["lat_p99_us"] = r.lat.percentile_ns(0.99) / 1000.0;
  j["lat_p999_us"] = r.lat.percentile_ns(0.999) / 1000.0;
  j["cpu_seconds"] = r.cpu_seconds;
  j["cpu_s_per_mio"] = r.cpu_s_per_mio();
  if (o.verify) {
    j["verify_failures"] = r.verify_failures;
    j["verify_skipped"] = r.verify_skipped;
  }
  if (!r.path_commands.empty()) {
    nlohmann::json paths = nlohmann::json::array();
    for (size_t p = 0; p < r.path_commands.size() && p < o.paths.size(); ++p)
      paths.push_back({{"traddr", o.paths[p].traddr}, {"trsvcid", o.paths[p].trsvcid}, {"commands", r.path_commands[p]}});
    j["paths"] = paths;
    j["failovers"] = r.failovers;
    j["path_policy"] = host::path_policy_name(o.multipath.policy);
  }
  if (o.reauth_seconds > 0) {
    j["reauths"] = r.reauths;
    j["reauth_failures"] = r.reauth_failures;
    if (r.reauth_failures) j["reauth_error"] = r.reauth_error;
  }
  j["ramp_seconds"] = o.ramp_seconds;
  if (r.timeline_cell_s > 0) {
    j["timeline"] = {{"cell_ms", r.timeline_cell_s * 1000},
                     {"completed", r.timeline_completed},
                     {"outstanding", r.timeline_outstanding}};
  }
  return j.dump();
}

}  // namespace nvtcp::app

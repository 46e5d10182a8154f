// SPDX-License-Identifier: Apache-2.0
// `nvtcp bench`: the reference study's matrix, reproduced against any NVMe/TCP target and
// any initiator that can be driven from the command line. Each point runs the initiator
// as a child process pinned to the host CPUs; its CPU comes from wait4()'s rusage, the
// embedded target's from its reactor threads.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "sample_quality.hpp"
#include "engine/engine.hpp"
#include "nvtcp/host.hpp"
#include "nvtcp/log.hpp"
#include "nvtcp/size.hpp"
#include "target_tcp/target.hpp"

extern char** environ;

namespace nvtcp::app {

namespace {
using json = nlohmann::json;

struct BenchArgs {
  std::string target_trid;
  bool quick = false;
  unsigned points = 0;          // run only the first N points (0 = all)
  std::vector<std::string> only;  // run only these points: WORKLOAD[:BS[:JOBS]] each
  double runtime = 0;           // seconds per run (0 = profile default)
  unsigned queue_depth = 32;    // per job
  std::string target_cpus = "0";
  std::string host_cpus = "1";
  // perf and fio connect NVMe/TCP themselves (the study's software stack); engine is fio
  // through the offload engine (the study's card).
  std::vector<std::string> initiators{"perf", "fio", "engine"};
  std::string engine_cpus;      // the offload engine's cores (default: the host CPUs)
  std::string fio_engine;       // path of libnvtcp_fio.so (default: beside this binary)
  std::string kernel_dev;
  std::string spdk_plugin;
  std::string out_dir = "bench-out";
  std::string tcp_congestion;
  uint64_t socket_buffer = 0;           // fixed SO_RCVBUF/SO_SNDBUF on every side (0: each side's defaults)
  std::optional<uint32_t> send_buffer;  // SO_SNDBUF alone on every side (0: autotuned; unset: each side's default)
  bool hdgst = false, ddgst = false;
  unsigned repeat = 0;          // runs per point and initiator (0: 3 in --quick, 5 in full)
  std::vector<std::string> compare;  // two bench.json files: print and chart their ratio
  std::string hosts_file;       // remote initiator hosts, one fio server per line (see FioHost)
  std::vector<std::string> fio_clients;  // the same on the command line: SERVER,...
  double ramp = -1;             // seconds of load before each sample (-1: 0.3 with --quick, else 1)
  unsigned max_reruns = 2;      // a stalled sample is run again at most this often
  double busy_percent = 10;     // others' CPU (% of the sample's CPUs) from which a sample is marked
  double steal_percent = 5;     // the same for time the hypervisor stole
};

// Timeline resolution: perf counts completions per 10 ms; fio logs its IOPS per 50 ms window.
constexpr uint32_t kPerfTimelineMs = 10;
constexpr uint32_t kFioLogMs = 50;
// How often the embedded target's and engine's CPU and I/O counts are read during a run.
constexpr double kRoleSampleS = 0.02;
// Cells of the timeline kept in bench.json (K IOPS per 100 ms) as each sample's evidence.
constexpr double kReportCellS = 0.1;

// A remote initiator host: a `fio --server` that nvtcp bench drives through `fio --client`,
// as fio's distributed mode does. The job runs there, so the ioengine path (--fio-engine)
// must exist on that host.
struct FioHost {
  std::string server;         // as fio --client takes it: HOST, HOST,PORT, ip6:HOST,PORT or sock:PATH
  std::string traddr;         // the target address this host dials (default: --target's)
  std::string engine_socket;  // an `nvtcp engine` running on that host (for the engine initiator)
};

// A hosts file: one host per line, "SERVER [traddr=ADDR] [engine=SOCKET]"; '#' starts a comment.
bool parse_hosts(const std::string& text, std::vector<FioHost>& out, std::string& err) {
  std::istringstream in(text);
  unsigned lineno = 0;
  for (std::string line; std::getline(in, line);) {
    ++lineno;
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    FioHost h;
    for (std::string w; words >> w;) {
      if (h.server.empty()) {
        h.server = w;
      } else if (w.rfind("traddr=", 0) == 0) {
        h.traddr = w.substr(7);
      } else if (w.rfind("engine=", 0) == 0) {
        h.engine_socket = w.substr(7);
      } else {
        err = fmt::format("line {}: '{}' is not traddr=ADDR or engine=SOCKET", lineno, w);
        return false;
      }
    }
    if (!h.server.empty()) out.push_back(std::move(h));
  }
  if (out.empty()) err = "no hosts";
  return !out.empty();
}

// How fio's client output names a server: the host or socket path without the type prefix,
// and the port if one was given (-1: any).
std::pair<std::string, int> fio_server_name(std::string server) {
  for (const char* prefix : {"ip:", "ip6:", "sock:"})
    if (server.rfind(prefix, 0) == 0) {
      const bool sock = std::string(prefix) == "sock:";
      server = server.substr(std::strlen(prefix));
      if (sock) return {server, -1};
      break;
    }
  const size_t comma = server.rfind(',');
  if (comma == std::string::npos) return {server, -1};
  return {server.substr(0, comma), std::atoi(server.c_str() + comma + 1)};
}

struct Point {
  std::string workload;  // randread | randwrite | randrw
  uint32_t bs;
  unsigned jobs;
  std::string figure;    // which study figure it belongs to
  std::string also_in;   // another figure that shows the same point (measured once, shown in both)
};

std::string self_dir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, size_t(n));
  return p.substr(0, p.rfind('/'));
}

// A file that ships with nvtcp: beside the binary in a build tree, else where the install put
// it, relative to the binary's directory (bin/../share/nvtcp, bin/../lib/<arch>/nvtcp).
std::string companion(const std::string& name, const char* installed_rel_dir) {
  std::string beside = self_dir() + "/" + name;
  struct stat st{};
  if (stat(beside.c_str(), &st) == 0) return beside;
  std::string installed = self_dir() + "/" + installed_rel_dir + "/" + name;
  return stat(installed.c_str(), &st) == 0 ? installed : beside;
}

// "0", "1-15", "0,2-3" -> the CPUs listed.
std::vector<int> parse_cpu_list(const std::string& list) {
  std::vector<int> cpus;
  size_t i = 0;
  while (i < list.size()) {
    size_t comma = list.find(',', i);
    std::string part = list.substr(i, comma == std::string::npos ? std::string::npos : comma - i);
    size_t dash = part.find('-');
    int lo = std::stoi(part.substr(0, dash));
    int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    if (comma == std::string::npos) break;
    i = comma + 1;
  }
  return cpus;
}

unsigned count_cpus(const std::string& list) { return std::max<unsigned>(unsigned(parse_cpu_list(list).size()), 1); }

struct ChildResult {
  int status = -1;
  std::string out, err;
  double cpu_seconds = 0;
};

double self_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

double wall_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

// The evidence of one sample's quality, for bench.json: what else ran on its CPUs and where
// I/O stood still. A run stalled when its timeline has a span with I/O outstanding and nothing
// completed, or when a retransmission timeout (200 ms or more of one connection standing
// still) fell into it: with 32 connections the others hide the one that stood still.
json quality_json(const Interference& in, const StallReport& st, const Timeline& tl, bool has_timeline,
                  const TcpCounters* tcp, double seconds) {
  json q;
  std::string reason;
  if (st.stalled()) reason = fmt::format("stalled {:.2f} s", st.stalled_s);
  if (tcp) {
    q["tcp"] = {{"retrans_segs", tcp->retrans_segs},
                {"loss_probes", tcp->loss_probes},
                {"timeouts", tcp->timeouts},
                {"rcvq_drops", tcp->rcvq_drops},
                {"memory_pressures", tcp->memory_pressures},
                {"zero_windows", tcp->zero_windows}};
    // Not a stall (bytes keep moving) but another level: marked, never rerun.
    q["window_closing"] = seconds > 0 && double(tcp->zero_windows) / seconds >= kZeroWindowsPerSecondMarked;
    if (tcp->timeouts)
      reason += fmt::format("{}{} retransmission timeout(s)", reason.empty() ? "" : ", ", tcp->timeouts);
  }
  q["stalled"] = !reason.empty();
  q["stall_reason"] = reason;
  auto pct = [](double v) { return std::round(v * 1000) / 10; };
  q["others_cpu_pct"] = pct(in.others_share());
  q["steal_pct"] = pct(in.steal_share());
  q["irq_cpu_pct"] = pct(in.capacity_s > 0 ? in.irq_s / in.capacity_s : 0);
  q["own_cpu_s"] = std::round(in.own_s * 1000) / 1000;
  q["wall_s"] = std::round(seconds * 1000) / 1000;  // the child from start to exit: ramp, run and both ends
  if (!has_timeline) {
    q["timeline"] = nullptr;
    return q;
  }
  json stalls = json::array();
  for (const Stall& x : st.stalls)
    stalls.push_back({{"start_s", std::round(x.start_s * 1000) / 1000}, {"length_s", std::round(x.length_s * 1000) / 1000}});
  q["stalls"] = stalls;
  q["stalled_s"] = std::round(st.stalled_s * 1000) / 1000;
  q["stall_floor_s"] = std::round(st.min_stall_s * 1000) / 1000;
  q["timeline_kiops_per_100ms"] = kiops_per_cell(tl, kReportCellS);
  return q;
}

// Runs argv with stdout and stderr captured; CPU time from the child's rusage.
ChildResult run_child(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env = {}) {
  ChildResult r;
  std::string outf = fmt::format("/tmp/nvtcp-bench-{}-out", getpid());
  std::string errf = fmt::format("/tmp/nvtcp-bench-{}-err", getpid());
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, outf.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, errf.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> av;
  for (auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) envs.emplace_back(*e);
  for (auto& e : extra_env) envs.push_back(e);
  std::vector<char*> ev;
  for (auto& e : envs) ev.push_back(const_cast<char*>(e.c_str()));
  ev.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, av[0], &fa, nullptr, av.data(), ev.data()) != 0) {
    r.err = fmt::format("cannot run {}", argv[0]);
    posix_spawn_file_actions_destroy(&fa);
    return r;
  }
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.cpu_seconds = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  std::ifstream o(outf), e(errf);
  r.out.assign(std::istreambuf_iterator<char>(o), {});
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  unlink(outf.c_str());
  unlink(errf.c_str());
  return r;
}

// The last line of output that parses as a JSON object (fio prints warnings first).
std::optional<json> last_json(const std::string& out) {
  size_t start = out.find('{');
  if (start == std::string::npos) return std::nullopt;
  try {
    return json::parse(out.substr(start));
  } catch (...) {
  }
  size_t pos = out.rfind("\n{");
  if (pos != std::string::npos) {
    try {
      return json::parse(out.substr(pos + 1));
    } catch (...) {
    }
  }
  return std::nullopt;
}

std::string fio_rw(const std::string& w) { return w; }

struct Runner {
  BenchArgs a;
  host::TransportId trid;
  std::unique_ptr<target::Target> target;
  unsigned host_cores = 1;
  double seconds = 10;
  double ramp = 1;  // seconds of load before each sample's measured time
  // The offload engine, in this process, on its own threads (CPU time counted per thread).
  std::unique_ptr<engine::Engine> eng;
  std::thread eng_thread;
  std::atomic<bool> eng_stop{false};
  std::string eng_socket;
  std::vector<FioHost> hosts;  // remote initiator hosts (fio --client); empty: run here

  // By default the engine shares the embedded target's CPUs, as a card's cores are not the
  // host's: the application's CPUs run the application only.
  std::string engine_cpus() const {
    if (!a.engine_cpus.empty()) return a.engine_cpus;
    return target ? a.target_cpus : a.host_cpus;
  }

  bool start_engine(std::string& err) {
    engine::EngineOptions o;
    eng_socket = fmt::format("/tmp/nvtcp-bench-{}.sock", getpid());
    o.socket_path = eng_socket;
    o.controllers = {trid};
    o.cpus = parse_cpu_list(engine_cpus());
    o.host.hdgst = a.hdgst;
    o.host.ddgst = a.ddgst;
    o.host.tcp_congestion = a.tcp_congestion;
    o.host.socket_buffer_bytes = uint32_t(a.socket_buffer);
    if (a.send_buffer) o.host.send_buffer_bytes = a.send_buffer;
    eng = std::make_unique<engine::Engine>(o);
    if (!eng->start(err)) {
      eng.reset();
      return false;
    }
    eng_thread = std::thread([this] { eng->run(eng_stop); });
    return true;
  }
  void stop_engine() {
    if (!eng) return;
    eng_stop = true;
    eng_thread.join();
    eng->shutdown();
    eng.reset();
  }

  // fio splits file names at ':', so every ':' inside a value is escaped.
  static std::string fio_escape(const std::string& v) {
    std::string o;
    for (char ch : v) {
      if (ch == ':') o += '\\';
      o += ch;
    }
    return o;
  }
  std::string fio_filename(const std::string& traddr) const {
    return fmt::format("trtype=tcp adrfam={} traddr={} trsvcid={} subnqn={} ns={}", trid.adrfam, fio_escape(traddr),
                       trid.trsvcid, fio_escape(trid.subnqn), trid.nsid);
  }
  std::string engine_filename(const std::string& socket) const {
    return fmt::format("trtype=engine traddr={} subnqn={} ns={}", socket, fio_escape(trid.subnqn), trid.nsid);
  }

  // The fio options of one point, without the ioengine and the file. Times go in milliseconds:
  // fio reads a time without a unit as whole seconds, so ramp_time=0.5 was no ramp at all.
  std::vector<std::string> fio_job_args(const Point& p) const { return fio_job_args(p, seconds, ramp); }
  std::vector<std::string> fio_job_args(const Point& p, double run_s, double ramp_s) const {
    const std::string runtime = fmt::format("--runtime={}ms", std::llround(run_s * 1000));
    const std::string ramp_time = fmt::format("--ramp_time={}ms", std::llround(ramp_s * 1000));
    return {"fio", "--name=bench", "--thread=1", "--group_reporting=1", "--output-format=json", "--time_based=1",
            runtime, ramp_time, "--norandommap=1", "--randrepeat=0",
            "--rw=" + fio_rw(p.workload), "--rwmixread=70", fmt::format("--bs={}", p.bs),
            fmt::format("--numjobs={}", p.jobs), fmt::format("--iodepth={}", a.queue_depth),
            fmt::format("--iodepth_batch_submit={}", std::max(1u, a.queue_depth / 4)), "--iodepth_batch_complete_min=1"};
  }
  // The ioengine options that reach the target through initiator init ("fio" or "engine").
  std::vector<std::string> fio_engine_args(const std::string& init, const std::string& traddr,
                                           const std::string& engine_socket) const {
    if (init == "engine")  // the engine's cores run NVMe/TCP, fio reads their completion queues
      return {"--ioengine=external:" + a.fio_engine, "--filename=" + engine_filename(engine_socket)};
    std::vector<std::string> v{"--ioengine=external:" + a.fio_engine, "--filename=" + fio_filename(traddr)};
    if (a.socket_buffer) v.push_back(fmt::format("--socket_buffer={}", a.socket_buffer));
    if (a.send_buffer) v.push_back(fmt::format("--send_buffer={}", *a.send_buffer));
    if (a.hdgst) v.push_back("--hdgst=1");
    if (a.ddgst) v.push_back("--ddgst=1");
    return v;
  }

  // The fio job of one point as a job file in the output folder (OUT/jobs/), so the same job
  // can be run again elsewhere with `fio FILE`; a remote host's job is the file fio --client
  // sends it. Returns the file's path.
  std::string write_job_file(const std::string& init, const Point& p, const std::vector<std::string>& fio,
                             const std::vector<std::string>& env, const std::string& suffix = "") const {
    const std::string dir = a.out_dir + "/jobs";
    ::mkdir(dir.c_str(), 0755);
    const std::string path =
        fmt::format("{}/{}-{}-{}k-{}jobs-{}{}.fio", dir, p.figure, p.workload, p.bs / 1024, p.jobs, init, suffix);
    std::ofstream f(path);
    f << fmt::format("; nvtcp bench: {} at {} bytes, {} jobs, initiator {}\n", p.workload, p.bs, p.jobs, init);
    for (const auto& e : env) f << "; environment: " << e << "\n";
    f << "; filename= is the target this run used (for the embedded one, an ephemeral port): point it at yours\n";
    f << "[global]\n";
    for (size_t i = 1; i < fio.size(); ++i) {  // fio[0] is the program
      const std::string& arg = fio[i];
      if (arg.rfind("--", 0) != 0 || arg.rfind("--name=", 0) == 0 || arg.rfind("--output-format", 0) == 0) continue;
      f << arg.substr(2) << "\n";
    }
    f << "\n[bench]\n";
    return path;
  }

  // IOPS and latency of one fio job (or group, or client) in fio's JSON: reads and writes
  // together, the average latency weighted by IOPS, the worse side's p99.
  static void job_figures(const json& job, double& iops, double& lat_avg, double& lat_p99) {
    const double r_iops = job["read"]["iops"], w_iops = job["write"]["iops"];
    iops = r_iops + w_iops;
    auto side = [&](const char* s, bool mean) -> double {
      const json& x = job[s];
      if (x["io_bytes"].get<double>() == 0) return 0;
      if (mean) return x["clat_ns"]["mean"].get<double>() / 1000.0;
      auto& pct = x["clat_ns"]["percentile"];
      return pct.contains("99.000000") ? pct["99.000000"].get<double>() / 1000.0 : 0;
    };
    lat_avg = (side("read", true) * r_iops + side("write", true) * w_iops) / std::max(iops, 1.0);
    lat_p99 = std::max(side("read", false), side("write", false));
  }

  json point_header(const std::string& init, const Point& p) const {
    json figures = json::array({p.figure});
    if (!p.also_in.empty()) figures.push_back(p.also_in);
    return {{"initiator", init},          {"workload", p.workload}, {"bs", p.bs},           {"jobs", p.jobs},
            {"queue_depth", a.queue_depth}, {"figure", p.figure},     {"figures", figures}};
  }

  // The CPUs a sample runs on: the initiators', the embedded target's and the engine's.
  std::vector<int> sample_cpus() const {
    std::vector<int> cpus = parse_cpu_list(a.host_cpus);
    auto add = [&](const std::string& list) {
      for (int c : parse_cpu_list(list))
        if (std::find(cpus.begin(), cpus.end(), c) == cpus.end()) cpus.push_back(c);
    };
    if (target) add(a.target_cpus);
    if (eng) add(engine_cpus());
    std::sort(cpus.begin(), cpus.end());
    return cpus;
  }

  // One initiator at one point: {iops, gbps, lat_avg_us, lat_p99_us, init_cpu_s_per_mio, ...,
  // quality: {others_cpu_pct, steal_pct, stalls, timeline...}}
  json run_point(const std::string& init, const Point& p) {
    if (!hosts.empty()) return run_remote_point(init, p);
    json res = point_header(init, p);
    const std::vector<int> cpus = sample_cpus();
    CpuTimes stat0, stat1;
    const bool have_stat = read_proc_stat(cpus, stat0);
    TcpCounters tcp0, tcp1;
    const bool have_tcp = read_tcp_counters(tcp0);
    const double self0 = self_cpu_seconds(), wall0 = wall_seconds();
    std::string log_dir;
    // The embedded target's and engine's counters while the child runs, so that their CPU
    // per I/O is taken over the seconds the initiator measured (busiest_window).
    std::vector<RoleSample> roles;
    roles.reserve(size_t((seconds + ramp) / kRoleSampleS) + 1024);
    std::atomic<bool> child_done{false};
    std::thread sampler;
    if (target || eng) {
      sampler = std::thread([&, t0 = wall_seconds()] {
        while (true) {
          const bool last = child_done.load();
          RoleSample r{wall_seconds() - t0, 0, 0, 0, 0};
          if (target) r.target_cpu = target->cpu_seconds(), r.target_ios = target->io_count();
          if (eng) {
            const auto st = eng->stats();
            r.engine_cpu = st.cpu_seconds;
            r.engine_ios = st.forwarded;
          }
          roles.push_back(r);
          if (last) break;
          std::this_thread::sleep_for(std::chrono::duration<double>(kRoleSampleS));
        }
      });
    }
    ChildResult c;
    std::vector<std::string> cmd{"taskset", "-c", a.host_cpus};
    std::vector<std::string> env;
    if (init == "perf") {
      unsigned threads = std::min(p.jobs, host_cores);
      unsigned qpairs = (p.jobs + threads - 1) / threads;  // 32 jobs on 2 cores: 16 queue pairs each
      std::string t = trid.to_string();
      cmd.insert(cmd.end(), {self_dir() + "/nvtcp", "perf", "-r", t, "-q", std::to_string(a.queue_depth), "-o",
                             std::to_string(p.bs), "-w", p.workload, "-M", "70", "-t", fmt::format("{}", seconds),
                             "--ramp", fmt::format("{}", ramp), "--timeline-ms", std::to_string(kPerfTimelineMs),
                             "--cores", std::to_string(threads), "-P", std::to_string(qpairs), "--json"});
      if (a.hdgst) cmd.push_back("--hdgst");
      if (a.ddgst) cmd.push_back("--ddgst");
      if (!a.tcp_congestion.empty()) cmd.insert(cmd.end(), {"--tcp-congestion", a.tcp_congestion});
      if (a.socket_buffer) cmd.insert(cmd.end(), {"--socket-buffer", std::to_string(a.socket_buffer)});
      if (a.send_buffer) cmd.insert(cmd.end(), {"--send-buffer", std::to_string(*a.send_buffer)});
    } else {
      std::vector<std::string> fio = fio_job_args(p);
      if (init == "fio" || init == "engine") {
        auto e = fio_engine_args(init, trid.traddr, eng_socket);
        fio.insert(fio.end(), e.begin(), e.end());
      } else if (init == "kernel") {
        fio.insert(fio.end(), {"--ioengine=io_uring", "--direct=1", "--filename=" + a.kernel_dev});
      } else if (init == "spdk") {
        fio.insert(fio.end(), {"--ioengine=spdk", "--filename=" + fio_filename(trid.traddr)});
        env.push_back("LD_PRELOAD=" + a.spdk_plugin);
      }
      cmd.insert(cmd.end(), fio.begin(), fio.end());
      write_job_file(init, p, fio, env);
      // The bench's own instruments, not part of the job: each job's IOPS per window.
      char dir_template[] = "/tmp/nvtcp-bench-fiolog.XXXXXX";
      if (mkdtemp(dir_template)) {
        log_dir = dir_template;
        cmd.insert(cmd.end(), {"--write_iops_log=" + log_dir + "/bench", fmt::format("--log_avg_msec={}", kFioLogMs)});
      }
    }
    c = run_child(cmd, env);
    child_done = true;
    if (sampler.joinable()) sampler.join();
    const double wall = wall_seconds() - wall0, own = self_cpu_seconds() - self0 + c.cpu_seconds;
    Interference interf;
    if (have_stat && read_proc_stat(cpus, stat1)) interf = interference(stat0, stat1, wall, own, sysconf(_SC_CLK_TCK));
    const bool tcp_read = have_tcp && read_tcp_counters(tcp1);
    const TcpCounters tcp = tcp1 - tcp0;
    Timeline tl;
    bool has_timeline = false;
    if (!log_dir.empty()) {
      // fio numbers its jobs' logs bench_iops.1.log ... bench_iops.N.log.
      tl.cell_s = 0.01;
      has_timeline = true;
      // The last window of a job ends as the run does and is never logged whole.
      const double span = seconds - kFioLogMs / 1000.0;
      tl.begin_s = span;
      for (unsigned k = 1; k <= p.jobs; ++k) {
        const std::string path = fmt::format("{}/bench_iops.{}.log", log_dir, k);
        std::ifstream f(path);
        std::string text(std::istreambuf_iterator<char>(f), {});
        double first = span;
        if (!f || !add_fio_iops_log(text, kFioLogMs, span, tl, &first)) has_timeline = false;
        tl.begin_s = std::min(tl.begin_s, first);
        unlink(path.c_str());
      }
      if (tl.begin_s >= span) tl.begin_s = 0;  // nothing completed at all: all of it stalled
      rmdir(log_dir.c_str());
    }
    double tcpu = 0, ecpu = 0, served = 0;
    uint64_t tios = 0, eios = 0;
    json role_window;
    if (!roles.empty()) {
      size_t first = 0, last = roles.size() - 1;  // the whole run if it was shorter than measured
      busiest_window(roles, seconds, first, last);
      tcpu = roles[last].target_cpu - roles[first].target_cpu;
      tios = roles[last].target_ios - roles[first].target_ios;
      ecpu = roles[last].engine_cpu - roles[first].engine_cpu;
      eios = roles[last].engine_ios - roles[first].engine_ios;
      // What the target (else the engine) served per second in that window, beside the
      // initiator's own figure. fio sums per-job rates over each job's own window: when the
      // jobs' windows were spread over their connects it ran up to a fifth above this.
      const double span = roles[last].t - roles[first].t;
      if (span > 0) served = double(tios ? tios : eios) / span;
      role_window = {{"from_s", roles[first].t}, {"to_s", roles[last].t}, {"target_cpu_s", tcpu},
                     {"target_ios", tios},       {"engine_cpu_s", ecpu},  {"engine_ios", eios}};
      // What was served sample by sample over the window (K IOPS), and the longest span in it
      // with nothing served: the I/O's own evidence beside fio's logs when those show a stall.
      json served_kiops = json::array();
      double idle = 0, longest_idle = 0;
      for (size_t i = first; i < last; ++i) {
        const uint64_t n = tios ? roles[i + 1].target_ios - roles[i].target_ios
                                : roles[i + 1].engine_ios - roles[i].engine_ios;
        const double dt = roles[i + 1].t - roles[i].t;
        served_kiops.push_back(dt > 0 ? std::round(double(n) / dt / 100) / 10 : 0);
        idle = n ? 0 : idle + dt;
        longest_idle = std::max(longest_idle, idle);
      }
      role_window["served_kiops"] = served_kiops;
      role_window["longest_idle_s"] = std::round(longest_idle * 1000) / 1000;
    }
    auto j = last_json(c.out);
    if (c.status != 0 || !j) {
      res["error"] = fmt::format("exit {}: {}", c.status, c.err.substr(0, 400));
      return res;
    }
    double iops = 0, lat_avg = 0, lat_p99 = 0, ios = 0, init_cpu = 0;
    if (init == "perf") {
      iops = (*j)["iops"];
      lat_avg = (*j)["lat_avg_us"];
      lat_p99 = (*j)["lat_p99_us"];
      ios = (*j)["ios"];
      init_cpu = (*j)["cpu_seconds"];  // from the end of the ramp
      if (j->contains("timeline")) {
        const json& t = (*j)["timeline"];
        tl.cell_s = t["cell_ms"].get<double>() / 1000.0;
        tl.completed = t["completed"].get<std::vector<double>>();
        tl.outstanding = t["outstanding"].get<std::vector<double>>();
        has_timeline = true;
      }
    } else {
      const json& job = (*j)["jobs"][0];
      job_figures(job, iops, lat_avg, lat_p99);
      ios = iops * seconds;
      // fio's job threads from the end of the ramp (getrusage per thread): with group_reporting
      // usr_cpu and sys_cpu are the jobs' average share of their summed runtime.
      init_cpu = (job["usr_cpu"].get<double>() + job["sys_cpu"].get<double>()) / 100.0 *
                 job["job_runtime"].get<double>() / 1000.0;
    }
    const StallReport stalls = has_timeline ? find_stalls(tl, lat_avg / 1e6) : StallReport{};
    res["iops"] = iops;
    res["gbps"] = iops * p.bs * 8 / 1e9;
    res["lat_avg_us"] = lat_avg;
    res["lat_p99_us"] = lat_p99;
    res["init_cpu_s"] = init_cpu;
    res["init_cpu_s_per_mio"] = ios > 0 ? init_cpu / (ios / 1e6) : 0;
    res["init_process_cpu_s"] = c.cpu_seconds;  // the whole process, connects and ramp included
    res["quality"] = quality_json(interf, stalls, tl, has_timeline, tcp_read ? &tcp : nullptr, wall);
    if (!role_window.is_null()) res["quality"]["role_window"] = role_window;
    if (served > 0) res["served_iops"] = served;
    if (target) res["target_cpu_s_per_mio"] = tios ? tcpu / (double(tios) / 1e6) : 0;
    else res["target_cpu_s_per_mio"] = nullptr;
    if (init == "engine") res["engine_cpu_s_per_mio"] = eios ? ecpu / (double(eios) / 1e6) : 0;
    else res["engine_cpu_s_per_mio"] = nullptr;
    return res;
  }

  // fio's own CPU per I/O for this point's shape (jobs, depth, batches) on fio's null ioengine,
  // which queues, commits and reaps as ours does and moves nothing: the floor under the
  // application's CPU per I/O that no initiator can take away. Measured on the host CPUs for
  // the 4 KiB points (the block the application-CPU goals are set at), once per job count and
  // workload: fio's own work per write grows with the block (it scrambles every 512-byte
  // sector of each write buffer, scramble_buffers), so no floor stands for another size.
  // Short: most of each run is fio's own start-up. Null where there is none.
  json fio_floor(const Point& p) {
    if (p.bs != 4096) return json();
    const std::string key = fmt::format("{}/{}", p.jobs, p.workload);
    if (auto it = floors.find(key); it != floors.end()) return it->second;
    std::vector<std::string> cmd{"taskset", "-c", a.host_cpus};
    const auto fio = fio_job_args(p, kFloorSeconds, kFloorRampSeconds);
    cmd.insert(cmd.end(), fio.begin(), fio.end());
    cmd.insert(cmd.end(), {"--ioengine=null", "--size=1g"});
    json floor;
    const ChildResult c = run_child(cmd);
    if (auto j = last_json(c.out); c.status == 0 && j) {
      const json& job = (*j)["jobs"][0];
      double iops = 0, lat_avg = 0, lat_p99 = 0;
      job_figures(job, iops, lat_avg, lat_p99);
      const double cpu = (job["usr_cpu"].get<double>() + job["sys_cpu"].get<double>()) / 100.0 *
                         job["job_runtime"].get<double>() / 1000.0;
      if (iops > 0) floor = cpu / (iops * kFloorSeconds / 1e6);
    }
    return floors[key] = floor;
  }
  static constexpr double kFloorSeconds = 0.15, kFloorRampSeconds = 0.05;
  std::map<std::string, json> floors;  // by job count and workload

  // One point on every remote host at once: one `fio --client=HOST JOB ...` that starts the
  // jobs together. Per host: its figures and the CPU its fio reports (user + system of the
  // job threads); the total is their sum (fio's "All clients").
  json run_remote_point(const std::string& init, const Point& p) {
    json res = point_header(init, p);
    std::vector<std::string> cmd{"fio", "--output-format=json"};
    for (size_t i = 0; i < hosts.size(); ++i) {
      const FioHost& h = hosts[i];
      std::vector<std::string> fio = fio_job_args(p);
      auto e = fio_engine_args(init, h.traddr.empty() ? trid.traddr : h.traddr, h.engine_socket);
      fio.insert(fio.end(), e.begin(), e.end());
      cmd.push_back("--client=" + h.server);
      cmd.push_back(write_job_file(init, p, fio, {}, fmt::format("-host{}", i + 1)));
    }
    ChildResult c = run_child(cmd);
    auto j = last_json(c.out);
    if (c.status != 0 || !j || !j->contains("client_stats")) {
      res["error"] = fmt::format("fio --client exit {}: {}", c.status, (c.err.empty() ? c.out : c.err).substr(0, 400));
      return res;
    }
    json per_host = json::array();
    double total_iops = 0, lat_weighted = 0, worst_p99 = 0, cpu = 0;
    for (const FioHost& h : hosts) {
      const auto [name, port] = fio_server_name(h.server);
      const json* found = nullptr;
      for (const json& cs : (*j)["client_stats"])
        if (cs.value("jobname", "") != "All clients" && cs.value("hostname", "") == name &&
            (port < 0 || cs.value("port", -1) == port))
          found = &cs;
      if (!found) {
        res["error"] = fmt::format("fio --client: no figures from {}", h.server);
        return res;
      }
      double iops = 0, lat_avg = 0, lat_p99 = 0;
      job_figures(*found, iops, lat_avg, lat_p99);
      // fio's usr_cpu/sys_cpu are per job thread, averaged over the group's summed runtime.
      const double host_cpu = ((*found)["usr_cpu"].get<double>() + (*found)["sys_cpu"].get<double>()) / 100.0 *
                              (*found)["job_runtime"].get<double>() / 1000.0;
      const double ios = iops * seconds;
      per_host.push_back({{"server", h.server}, {"iops", iops}, {"gbps", iops * p.bs * 8 / 1e9},
                          {"lat_avg_us", lat_avg}, {"lat_p99_us", lat_p99}, {"init_cpu_s", host_cpu},
                          {"init_cpu_s_per_mio", ios > 0 ? host_cpu / (ios / 1e6) : 0}});
      total_iops += iops;
      lat_weighted += lat_avg * iops;
      worst_p99 = std::max(worst_p99, lat_p99);
      cpu += host_cpu;
    }
    const double ios = total_iops * seconds;
    res["iops"] = total_iops;
    res["gbps"] = total_iops * p.bs * 8 / 1e9;
    res["lat_avg_us"] = lat_weighted / std::max(total_iops, 1.0);
    res["lat_p99_us"] = worst_p99;  // the worst host's
    res["init_cpu_s"] = cpu;
    res["init_cpu_s_per_mio"] = ios > 0 ? cpu / (ios / 1e6) : 0;
    res["target_cpu_s_per_mio"] = nullptr;  // the target is elsewhere
    res["engine_cpu_s_per_mio"] = nullptr;  // and so are the hosts' engines
    res["hosts"] = per_host;
    return res;
  }
};

std::vector<Point> matrix(bool quick) {
  std::vector<Point> pts;
  std::vector<uint32_t> sizes{4096, 8192, 16384, 32768, 65536, 131072};
  for (const char* w : {"randread", "randwrite", "randrw"})
    for (uint32_t bs : sizes) pts.push_back({w, bs, 32, std::string("bs-") + w, ""});
  // 4 KiB random read at 32 jobs is the block-size sweep's first point: measured once there
  // and shown in the jobs sweep too.
  pts.front().also_in = "jobs-randread";
  for (unsigned jobs : {1u, 2u, 4u, 8u, 16u}) pts.push_back({"randread", 4096, jobs, "jobs-randread", ""});
  // The quick profile measures the same matrix, only shorter (see seconds below).
  (void)quick;
  return pts;
}

// --only WORKLOAD[:BS[:JOBS]] (BS in bytes or with a k suffix): the matrix's points that match,
// appended to pick in the matrix's order, each once.
bool select_points(const std::vector<Point>& pts, const std::string& sel, std::vector<Point>& pick, std::string& err) {
  std::vector<std::string> f;
  std::istringstream in(sel);
  for (std::string part; std::getline(in, part, ':');) f.push_back(part);
  if (f.empty() || f.size() > 3) {
    err = "expected WORKLOAD[:BS[:JOBS]], e.g. randwrite:4k:32";
    return false;
  }
  // BS as every size nvtcp takes ("4k", "128KiB", "4096"); JOBS a plain count.
  uint64_t bs = 0, jobs = 0;
  if (f.size() > 1 && (!parse_size(f[1], bs) || bs == 0)) {
    err = fmt::format("'{}' is not a block size", f[1]);
    return false;
  }
  if (f.size() > 2 && (f[2].empty() || f[2].size() > 6 || f[2].find_first_not_of("0123456789") != std::string::npos ||
                       (jobs = std::stoull(f[2])) == 0)) {
    err = fmt::format("'{}' is not a number of jobs", f[2]);
    return false;
  }
  for (const Point& p : pts) {
    if (p.workload != f[0] || (bs && p.bs != bs) || (jobs && p.jobs != jobs)) continue;
    const bool have = std::any_of(pick.begin(), pick.end(), [&](const Point& q) {
      return q.workload == p.workload && q.bs == p.bs && q.jobs == p.jobs;
    });
    if (!have) pick.push_back(p);
  }
  return true;
}

// The median of each figure over a point's runs, with the runs themselves and the range of
// IOPS; a run that failed makes the point failed.
json summarize(const std::vector<json>& runs) {
  json out = runs.front();
  for (const auto& r : runs)
    if (r.contains("error")) {
      out["error"] = r["error"];
      return out;
    }
  auto median = [&](const char* key) -> json {
    std::vector<double> v;
    for (const auto& r : runs)
      if (r.contains(key) && r[key].is_number()) v.push_back(r[key].get<double>());
    if (v.empty()) return nullptr;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  for (const char* k : {"iops", "gbps", "lat_avg_us", "lat_p99_us", "init_cpu_s", "init_cpu_s_per_mio",
                        "target_cpu_s_per_mio", "engine_cpu_s_per_mio", "served_iops"})
    if (out.contains(k)) out[k] = median(k);
  double lo = 1e300, hi = 0;
  json each = json::array();
  for (const auto& r : runs) {
    const double v = r["iops"].get<double>();
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    each.push_back(v);
  }
  out["iops_min"] = lo;
  out["iops_max"] = hi;
  out["runs"] = runs.size();
  out["iops_runs"] = each;
  // Each kept sample's evidence, the samples discarded for a stall, and counts a reader sees.
  json samples = json::array(), discarded = json::array();
  unsigned busy = 0, stalled = 0;
  double others_max = 0;
  for (const auto& r : runs) {
    if (r.contains("quality")) {
      const json& q = r["quality"];
      samples.push_back({{"iops", r["iops"]}, {"quality", q}});
      busy += q.value("busy", false) ? 1 : 0;
      stalled += q.value("stalled", false) ? 1 : 0;
      others_max = std::max(others_max, q.value("others_cpu_pct", 0.0));
    }
    if (r.contains("discarded"))
      for (const auto& d : r["discarded"]) discarded.push_back(d);
  }
  out.erase("quality");
  out.erase("discarded");
  if (!samples.empty()) {
    out["samples"] = samples;
    out["busy_runs"] = busy;
    out["stalled_runs"] = stalled;
    out["others_cpu_pct_max"] = others_max;
  }
  out["discarded"] = discarded;
  // Remote hosts: each host's own median and range, host by host in the hosts file's order.
  if (out.contains("hosts")) {
    json hosts = json::array();
    for (size_t k = 0; k < out["hosts"].size(); ++k) {
      std::vector<json> per;
      for (const auto& r : runs) per.push_back(r["hosts"][k]);
      hosts.push_back(summarize(per));
    }
    out["hosts"] = hosts;
  }
  return out;
}

// What the figures were measured on, as fio's own output records it.
json environment(const BenchArgs& a) {
  json env;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0) {
      env["cpu_model"] = line.substr(line.find(':') + 2);
      break;
    }
  env["cpus_online"] = sysconf(_SC_NPROCESSORS_ONLN);
  utsname u{};
  if (uname(&u) == 0) env["kernel"] = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
  std::ifstream cc("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string def;
  std::getline(cc, def);
  env["tcp_congestion_default"] = def;
  env["tcp_congestion_used"] = a.tcp_congestion.empty() ? def : a.tcp_congestion;
  env["nvtcp_version"] = NVTCP_VERSION;
  std::ifstream cmdline("/proc/self/cmdline");
  std::string arg, command;
  while (std::getline(cmdline, arg, '\0')) command += (command.empty() ? "" : " ") + arg;
  env["command"] = command;
  const ChildResult fio = run_child({"fio", "--version"});
  if (fio.status == 0) env["fio_version"] = fio.out.substr(0, fio.out.find('\n'));
  return env;
}

int run_compare(const BenchArgs& a) {
  if (a.compare.size() != 2) {
    fmt::print(stderr, "nvtcp bench: --compare takes two bench.json files (A then B)\n");
    return 2;
  }
  ::mkdir(a.out_dir.c_str(), 0755);
  struct stat pst{};
  std::string python = stat("/usr/bin/python3", &pst) == 0 ? "/usr/bin/python3" : "python3";
  ChildResult c = run_child({python, companion("nvtcp_bench_report.py", NVTCP_BIN_TO_DATA), "--compare",
                             a.compare[0], a.compare[1], a.out_dir});
  fmt::print("{}", c.out);
  if (c.status != 0) fmt::print(stderr, "nvtcp bench: compare: {}\n", c.err);
  return c.status == 0 ? 0 : 1;
}

int run_bench(BenchArgs& a) {
  if (!a.compare.empty()) return run_compare(a);
  if (log_level() < LogLevel::Warn) set_log_level(LogLevel::Warn);  // the table is the output
  Runner run;
  run.a = a;
  try {
    parse_cpu_list(a.host_cpus);
    parse_cpu_list(a.target_cpus);
  } catch (const std::exception&) {
    fmt::print(stderr, "nvtcp bench: CPU lists look like 1, 1-15 or 0,2-3\n");
    return 2;
  }
  run.host_cores = count_cpus(a.host_cpus);
  // The quick profile is what a first-time user waits for (make demo): 207 runs of 1 s after
  // 0.3 s of ramp, each with about 0.4 s of start and stop around it.
  run.seconds = a.runtime > 0 ? a.runtime : (a.quick ? 1 : 10);
  run.ramp = a.ramp >= 0 ? a.ramp : (a.quick ? 0.3 : 1);
  std::string err;
  auto pts = matrix(a.quick);
  if (a.points && a.points < pts.size()) {
    // Keep both figures represented: take points alternately from the two ends.
    std::vector<Point> pick;
    for (unsigned k = 0; k < a.points; ++k) pick.push_back(k % 2 == 0 ? pts[k / 2] : pts[pts.size() - 1 - k / 2]);
    pts = pick;
  }
  if (!a.only.empty()) {
    std::vector<Point> pick;
    for (const auto& sel : a.only) {
      size_t before = pick.size();
      if (!select_points(pts, sel, pick, err)) {
        fmt::print(stderr, "nvtcp bench: --only {}: {}\n", sel, err);
        return 2;
      }
      if (pick.size() == before) {
        fmt::print(stderr, "nvtcp bench: --only {}: no point of the matrix is that\n", sel);
        return 2;
      }
    }
    pts = pick;
  }
  if (!a.hosts_file.empty() || !a.fio_clients.empty()) {
    std::string text;
    if (!a.hosts_file.empty()) {
      std::ifstream f(a.hosts_file);
      if (!f) {
        fmt::print(stderr, "nvtcp bench: cannot read --hosts {}\n", a.hosts_file);
        return 2;
      }
      text.assign(std::istreambuf_iterator<char>(f), {});
    }
    // --fio-client A,B,C: a number after a host is that host's port (fio's HOST,PORT).
    for (const auto& list : a.fio_clients) {
      std::istringstream items(list);
      for (std::string item; std::getline(items, item, ',');) {
        const bool port = !item.empty() && item.find_first_not_of("0123456789") == std::string::npos;
        text += (port ? "," : "\n") + item;
      }
    }
    if (!parse_hosts(text, run.hosts, err)) {
      fmt::print(stderr, "nvtcp bench: --hosts: {}\n", err);
      return 2;
    }
    if (a.target_trid.empty() || !a.kernel_dev.empty() || !a.spdk_plugin.empty()) {
      fmt::print(stderr, "nvtcp bench: remote hosts need --target (an address they reach) and run the nvtcp "
                         "ioengine only (no --kernel-dev, --spdk-plugin)\n");
      return 2;
    }
  }
  if (a.target_trid.empty()) {
    target::TargetConfig cfg;
    cfg.listeners.push_back({"127.0.0.1", 0});
    cfg.discovery_port = 0;
    cfg.cores = count_cpus(a.target_cpus);
    if (!a.tcp_congestion.empty()) cfg.tcp_congestion = a.tcp_congestion;
    cfg.socket_buffer_bytes = a.socket_buffer;
    if (a.send_buffer) cfg.send_buffer_bytes = *a.send_buffer;
    cfg.cpus = parse_cpu_list(a.target_cpus);
    target::SubsystemConfig sc;
    sc.nqn = "nqn.2026-11.io.nvtcp:bench";
    sc.namespaces.push_back({1, "null", 1ull << 40, "", 512});
    cfg.subsystems.push_back(sc);
    run.target = std::make_unique<target::Target>(cfg);
    if (std::string e = run.target->start(); !e.empty()) {
      fmt::print(stderr, "nvtcp bench: embedded target: {}\n", e);
      return 1;
    }
    run.trid.traddr = "127.0.0.1";
    run.trid.trsvcid = run.target->port(0);
    run.trid.subnqn = sc.nqn;
    run.trid.nsid = 1;
  } else if (!host::TransportId::parse(a.target_trid, run.trid, err)) {
    fmt::print(stderr, "nvtcp bench: --target: {}\n", err);
    return 2;
  }

  // Which initiators can run here.
  std::vector<std::string> inits;
  if (run.a.fio_engine.empty()) run.a.fio_engine = companion("libnvtcp_fio.so", NVTCP_BIN_TO_FIO);
  for (const auto& i : a.initiators) {
    if (!run.hosts.empty()) {
      // fio --server runs the nvtcp ioengine there, inline or through that host's engine.
      const bool engines = std::all_of(run.hosts.begin(), run.hosts.end(),
                                       [](const FioHost& h) { return !h.engine_socket.empty(); });
      if (i == "fio" || (i == "engine" && engines)) inits.push_back(i);
      else if (i == "engine")
        fmt::print(stderr, "nvtcp bench: skipping engine (give every host engine=SOCKET of its nvtcp engine)\n");
      else fmt::print(stderr, "nvtcp bench: skipping {} (it runs only on this host; remote hosts run fio)\n", i);
      continue;
    }
    if (i == "fio") {
      struct stat st{};
      if (stat(run.a.fio_engine.c_str(), &st) != 0 || run_child({"fio", "--version"}).status != 0) {
        fmt::print(stderr, "nvtcp bench: skipping fio (need fio and {})\n", run.a.fio_engine);
        continue;
      }
    }
    inits.push_back(i);
  }
  if (run.hosts.empty() && std::find(inits.begin(), inits.end(), "engine") != inits.end()) {
    struct stat st{};
    if (stat(run.a.fio_engine.c_str(), &st) != 0 || run_child({"fio", "--version"}).status != 0) {
      fmt::print(stderr, "nvtcp bench: skipping engine (need fio and {})\n", run.a.fio_engine);
      inits.erase(std::find(inits.begin(), inits.end(), "engine"));
    } else if (!run.start_engine(err)) {
      fmt::print(stderr, "nvtcp bench: skipping engine: {}\n", err);
      inits.erase(std::find(inits.begin(), inits.end(), "engine"));
    }
  }
  if (!a.kernel_dev.empty()) inits.push_back("kernel");
  if (!a.spdk_plugin.empty()) inits.push_back("spdk");
  if (inits.empty()) {
    fmt::print(stderr, "nvtcp bench: no initiator can run\n");
    return 2;
  }

  ::mkdir(a.out_dir.c_str(), 0755);
  json doc;
  doc["target"] = a.target_trid.empty() ? "embedded null namespace (1 TiB) on 127.0.0.1" : run.trid.to_string();
  doc["seconds_per_run"] = run.seconds;
  doc["ramp_seconds"] = run.ramp;  // before each run's measured seconds, counted in no figure
  doc["max_reruns"] = a.max_reruns;
  doc["busy_threshold_pct"] = {{"others_cpu", a.busy_percent}, {"steal", a.steal_percent}};
  doc["queue_depth_per_job"] = a.queue_depth;
  doc["target_cpus"] = a.target_cpus;
  doc["host_cpus"] = a.host_cpus;
  doc["engine_cpus"] = run.engine_cpus();
  doc["digests"] = {{"header", a.hdgst}, {"data", a.ddgst}};
  doc["tcp_congestion"] = a.tcp_congestion.empty() ? "default" : a.tcp_congestion;
  doc["socket_buffer_bytes"] = a.socket_buffer;  // 0: each side's defaults (receive 4 MiB, send 512 KiB)
  // null: each side's default (socket_buffer_bytes if set, else 512 KiB); 0: autotuned
  doc["send_buffer_bytes"] = a.send_buffer ? nlohmann::json(*a.send_buffer) : nlohmann::json();
  doc["environment"] = environment(a);
  if (!run.hosts.empty()) {
    doc["hosts"] = json::array();
    for (const auto& h : run.hosts) doc["hosts"].push_back(h.server);
    doc["host_cpus"] = nullptr;  // the hosts' own
  }
  doc["points"] = json::array();
  const unsigned repeat = a.repeat ? a.repeat : (a.quick ? 3u : 5u);
  doc["repeat"] = repeat;
  size_t total = pts.size() * inits.size() * repeat, done = 0;
  fmt::print("nvtcp bench: {} points x {} initiator(s) ({}) x {} runs, {:.0f} s each, QD {} per job, target {}\n",
             pts.size(), inits.size(), fmt::join(inits, ", "), repeat, run.seconds, a.queue_depth,
             doc["target"].get<std::string>());
  fmt::print("{:>7} {:>10} {:>6} {:>5} {:>12} {:>9} {:>8} {:>16} {:>12} {:>12} {:>12}\n", "#", "workload", "bs",
             "jobs", "initiator", "M IOPS", "Gb/s", "lat avg/p99 us", "init s/M", "engine s/M", "target s/M");
  for (const auto& p : pts) {
    // Round by round, every initiator once per round: the machine's drift hits them alike.
    std::map<std::string, std::vector<json>> runs;
    for (unsigned r = 0; r < repeat; ++r) {
      for (const auto& init : inits) {
        // A sample that stalled (I/O outstanding, nothing completed) measured the machine, not
        // the stack: it is kept aside with its evidence and run again, a bounded number of times.
        json one, discarded = json::array();
        for (unsigned attempt = 0;; ++attempt) {
          one = run.run_point(init, p);
          if (one.contains("quality")) {
            json& q = one["quality"];
            q["busy"] = q["others_cpu_pct"].get<double>() >= a.busy_percent ||
                        q["steal_pct"].get<double>() >= a.steal_percent;
          }
          const bool stalled = one.contains("quality") && one["quality"].value("stalled", false);
          if (one.contains("error") || !stalled || attempt >= a.max_reruns) break;
          const json& q = one["quality"];
          fmt::print("{:>7} {:>10} {:>6} {:>5} {:>12}  stalled: {} ({:.3f} M IOPS, others took {:.0f}% of the CPUs): "
                     "run again\n",
                     "", p.workload, p.bs, p.jobs, init, q["stall_reason"].get<std::string>(),
                     one["iops"].get<double>() / 1e6, q["others_cpu_pct"].get<double>());
          discarded.push_back({{"iops", one["iops"]}, {"reason", q["stall_reason"]}, {"quality", q}});
        }
        one["discarded"] = discarded;
        ++done;
        if (one.contains("error")) {
          fmt::print("{:>3}/{:<3} {:>10} {:>6} {:>5} {:>12}  error: {}\n", done, total, p.workload, p.bs, p.jobs, init,
                     one["error"].get<std::string>());
        } else {
          auto opt = [&](const char* k) {
            return one[k].is_null() ? std::string("-") : fmt::format("{:.3f}", one[k].get<double>());
          };
          std::string flags;
          if (one.contains("quality")) {
            const json& q = one["quality"];
            if (q.value("busy", false))
              flags += fmt::format("  busy: others {:.0f}%, steal {:.0f}%", q["others_cpu_pct"].get<double>(),
                                   q["steal_pct"].get<double>());
            if (q.value("stalled", false))
              flags += fmt::format("  STALLED: {} (kept: {} reruns used)", q["stall_reason"].get<std::string>(),
                                   discarded.size());
            if (q.value("window_closing", false))
              flags +=
                  fmt::format("  WINDOW: a receive window closed {} times", q["tcp"]["zero_windows"].get<uint64_t>());
          }
          fmt::print("{:>3}/{:<3} {:>10} {:>6} {:>5} {:>12} {:>9.3f} {:>8.2f} {:>7.1f}/{:<8.1f} {:>12.3f} {:>12} {:>12}{}\n",
                     done, total, p.workload, p.bs, p.jobs, init, one["iops"].get<double>() / 1e6,
                     one["gbps"].get<double>(), one["lat_avg_us"].get<double>(), one["lat_p99_us"].get<double>(),
                     one["init_cpu_s_per_mio"].get<double>(), opt("engine_cpu_s_per_mio"),
                     opt("target_cpu_s_per_mio"), flags);
          if (one.contains("hosts"))
            for (const auto& h : one["hosts"])
              fmt::print("{:>7} {:>32} {:>9.3f} {:>8.2f} {:>7.1f}/{:<8.1f} {:>12.3f}\n", "", h["server"].get<std::string>(),
                         h["iops"].get<double>() / 1e6, h["gbps"].get<double>(), h["lat_avg_us"].get<double>(),
                         h["lat_p99_us"].get<double>(), h["init_cpu_s_per_mio"].get<double>());
        }
        std::fflush(stdout);
        runs[init].push_back(std::move(one));
      }
    }
    // Both halves' application CPU is set against fio's own floor for the same shape (local
    // runs: remote hosts' fio is theirs to measure).
    const bool both = run.hosts.empty() && std::count(inits.begin(), inits.end(), "fio") &&
                      std::count(inits.begin(), inits.end(), "engine");
    const json floor = both ? run.fio_floor(p) : json();
    for (const auto& init : inits) {
      json s = summarize(runs[init]);
      if (both && (init == "fio" || init == "engine")) s["fio_floor_cpu_s_per_mio"] = floor;
      doc["points"].push_back(std::move(s));
    }
  }
  run.stop_engine();
  if (run.target) run.target->stop();
  std::string json_path = a.out_dir + "/bench.json";
  std::ofstream(json_path) << doc.dump(2) << "\n";
  fmt::print("\nraw figures: {}\n", json_path);
  // Tables and charts in the study's shape (python3-matplotlib).
  std::string script = companion("nvtcp_bench_report.py", NVTCP_BIN_TO_DATA);
  // Debian's interpreter, where python3-matplotlib lives (a PATH python may lack it).
  struct stat pst{};
  std::string python = stat("/usr/bin/python3", &pst) == 0 ? "/usr/bin/python3" : "python3";
  ChildResult c = run_child({python, script, json_path, a.out_dir});
  fmt::print("{}", c.out);
  if (c.status != 0) {
    fmt::print(stderr, "nvtcp bench: report: {}\n", c.err);
    return 1;
  }
  bool any_error = false;
  for (const auto& r : doc["points"]) any_error |= r.contains("error");
  return any_error ? 1 : 0;
}
}  // namespace

void add_bench_command(CLI::App& app, int& rc) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* c = app.add_subcommand("bench", "Reproduce the reference study's matrix, tables and charts");
  c->add_option("--target", a->target_trid, "benchmark this target (transport ID) instead of an embedded NULL one");
  c->add_flag("--quick", a->quick, "1-second runs after a 0.3-s ramp (the whole matrix: 207 runs, about 6 minutes on 2 cores)");
  c->add_option("--points", a->points, "run only this many points of the matrix");
  c->add_option("--only", a->only,
                "run only the matrix's points that are WORKLOAD[:BS[:JOBS]] (repeatable), e.g. randwrite:4k:32");
  c->add_option("--runtime", a->runtime, "seconds per run (overrides the profile)");
  c->add_option("-q,--queue-depth", a->queue_depth, "queue depth per job");
  c->add_option("--target-cpus", a->target_cpus, "CPUs of the embedded target's reactors (e.g. 0)");
  c->add_option("--host-cpus", a->host_cpus, "CPUs the initiators run on (e.g. 1 or 1-15)");
  c->add_option("--initiators", a->initiators,
                "perf, fio (both connect NVMe/TCP themselves) and/or engine (fio through the offload engine)")
      ->delimiter(',');
  c->add_option("--engine-cpus", a->engine_cpus,
                "CPUs of the offload engine's cores (default: the embedded target's, else the host CPUs)");
  c->add_option("--fio-engine", a->fio_engine, "path of libnvtcp_fio.so (default: beside nvtcp)");
  c->add_option("--kernel-dev", a->kernel_dev, "also run fio (io_uring) on this kernel NVMe/TCP block device");
  c->add_option("--spdk-plugin", a->spdk_plugin, "also run fio with SPDK's plugin (path of spdk_nvme)");
  c->add_option("-O,--out", a->out_dir, "directory for bench.json and the PNG charts");
  c->add_option("--tcp-congestion", a->tcp_congestion, "congestion control per socket, target and initiators");
  c->add_option("--socket-buffer", a->socket_buffer,
                "fixed SO_RCVBUF and SO_SNDBUF in bytes on every socket (default 0: receive 4 MiB, send 512 KiB)")
      ->check(CLI::Range(uint64_t(0), uint64_t(1) << 30));
  c->add_option_function<uint32_t>(
       "--send-buffer", [a](uint32_t v) { a->send_buffer = v; },
       "SO_SNDBUF alone in bytes on every socket (0: autotuned; default: --socket-buffer if given, else 512 KiB)")
      ->check(CLI::Range(uint32_t(0), uint32_t(1) << 30));
  c->add_flag("--hdgst", a->hdgst, "header digests");
  c->add_flag("--ddgst", a->ddgst, "data digests");
  c->add_option("--repeat", a->repeat,
                "runs per point and initiator, interleaved round by round (default 3 with --quick, else 5)");
  c->add_option("--hosts", a->hosts_file,
                "run the initiators on remote hosts through fio's client/server mode: a file with one "
                "`fio --server` per line, \"SERVER [traddr=ADDR] [engine=SOCKET]\" (needs --target)");
  c->add_option("--fio-client", a->fio_clients,
                "remote hosts as fio --client takes them, comma-separated (HOST, HOST,PORT, sock:PATH)");
  c->add_option("--ramp", a->ramp,
                "seconds of load before each run's measured time, in no figure (default 0.3 with --quick, else 1)")
      ->check(CLI::Range(0.0, 600.0));
  c->add_option("--max-reruns", a->max_reruns,
                "run a stalled sample (I/O outstanding, nothing completed for 100 ms or more) again at most this often")
      ->check(CLI::Range(0, 20));
  c->add_option("--busy-percent", a->busy_percent,
                "mark a sample when other processes took this much of its CPUs (%)")
      ->check(CLI::Range(0.0, 100.0));
  c->add_option("--steal-percent", a->steal_percent, "mark a sample when the hypervisor stole this much of its CPUs (%)")
      ->check(CLI::Range(0.0, 100.0));
  c->add_option("--compare", a->compare, "A/bench.json B/bench.json: print and chart B's figures as ratios to A's")
      ->expected(2);
  c->callback([a, &rc] { rc = run_bench(*a); });
}

}  // namespace nvtcp::app

// SPDX-License-Identifier: Apache-2.0
// Whether one benchmark sample can be trusted: the CPU that processes other than the bench's
// took on the bench's CPUs while it ran, the time the hypervisor stole from them, and stalls:
// spans in which I/O was outstanding and nothing completed (on a loaded machine: receive-queue
// drops followed by retransmission timeouts, a throttled vCPU). A figure measured over a stall
// or beside another busy process is not the stack's, and the bench says so instead of printing
// it like any other. Pure functions over text and counters, so that tests feed them streams
// they stall on purpose.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nvtcp::app {

// Times summed over a set of CPUs, in clock ticks (USER_HZ), from /proc/stat's "cpuN" lines.
struct CpuTimes {
  uint64_t user = 0;     // user + nice (guest time is inside user already)
  uint64_t system = 0;
  uint64_t irq = 0;      // hardirq + softirq: with IRQ time accounting charged to no process
  uint64_t idle = 0;     // idle + iowait
  uint64_t steal = 0;    // the vCPU was runnable and the hypervisor ran something else
  unsigned cpus = 0;     // how many of the CPUs asked for were found
};

// The "cpuN" lines of /proc/stat's text for the CPUs listed (every CPU when the list is
// empty). False when a listed CPU has no line or a line does not parse.
bool parse_proc_stat(std::string_view text, const std::vector<int>& cpus, CpuTimes& out);

// Reads /proc/stat now (false if it cannot be read or parsed).
bool read_proc_stat(const std::vector<int>& cpus, CpuTimes& out);

// What ran on the sample's CPUs besides the sample itself.
struct Interference {
  double capacity_s = 0;  // wall seconds x CPUs
  double busy_s = 0;      // user + system time on those CPUs, every process
  double own_s = 0;       // the sample's own processes (the bench, its target and engine, the initiator)
  double others_s = 0;    // busy - own, not below zero
  double irq_s = 0;       // interrupt and softirq time (the network stack; not split by process)
  double steal_s = 0;
  double others_share() const { return capacity_s > 0 ? others_s / capacity_s : 0; }
  double steal_share() const { return capacity_s > 0 ? steal_s / capacity_s : 0; }
};

// Between two readings over wall_s seconds, with own_cpu_s of CPU used by the sample's own
// processes (rusage: user + system, which is what /proc/stat's user and system hold).
Interference interference(const CpuTimes& before, const CpuTimes& after, double wall_s, double own_cpu_s,
                          long ticks_per_second);

// Completions over time in equal cells. outstanding[i] is the most I/O outstanding seen in cell
// i; left empty when the source cannot tell (fio's logs), each cell of a running job is then
// taken to have I/O outstanding (a time-based fio job keeps its queue full).
struct Timeline {
  double cell_s = 0.01;
  double begin_s = 0;  // cells before this are not judged (a source whose first window starts late)
  std::vector<double> completed;
  std::vector<double> outstanding;
};

struct Stall {
  double start_s = 0;  // from the start of the measured span
  double length_s = 0;
};

struct StallReport {
  std::vector<Stall> stalls;
  double stalled_s = 0;        // their total
  double min_stall_s = 0;      // the shortest span that counted as a stall in this sample
  bool stalled() const { return !stalls.empty(); }
};

// Spans of at least min_stall_s (and of at least 20 average latencies, so that a slow device
// whose I/Os take longer than a cell is not called stalled) in which nothing completed while
// I/O was outstanding.
StallReport find_stalls(const Timeline& t, double lat_avg_s, double min_stall_s = 0.1);

// One fio job's iops log written with --log_avg_msec=window_ms ("msec, iops, dir, bs, offset"
// per line): each line covers the window_ms before its time, and fio writes no line for a
// window in which nothing completed; its first line, some tens of ms late after the ramp,
// averages over everything since the start (taken so when it comes within four windows).
// Added into t (cells of t.cell_s over span_s seconds). A log whose first line comes later
// leaves the span before its first window as no evidence: first_window_s gets where that
// window starts (span_s if there is no line), and the caller sets t.begin_s to the earliest
// over the jobs.
// False when a line does not parse.
bool add_fio_iops_log(std::string_view text, double window_ms, double span_s, Timeline& t,
                      double* first_window_s = nullptr);

// The kernel's TCP counters that tell a sample's connections stood still (machine-wide: on a
// machine that runs other traffic, theirs count too).
struct TcpCounters {
  uint64_t retrans_segs = 0;      // Tcp RetransSegs
  uint64_t loss_probes = 0;       // TcpExt TCPLossProbes: tail loss probes (often spurious on loopback)
  uint64_t timeouts = 0;          // TcpExt TCPTimeouts: retransmission timeouts, 200 ms or more each
  uint64_t rcvq_drops = 0;        // TcpExt TCPRcvQDrop: segments dropped, no room in a receive queue
  uint64_t memory_pressures = 0;  // TcpExt TCPMemoryPressures: entered tcp_mem pressure
  // TcpExt TCPToZeroWindowAdv: a receiver advertised a zero window (its buffer full). Thousands
  // a second mean a reader with more bytes in flight than its receive buffer: the sender
  // refills the window in small pieces and the run sits at a lower level than its siblings.
  uint64_t zero_windows = 0;
  TcpCounters operator-(const TcpCounters& o) const {
    auto d = [](uint64_t a, uint64_t b) { return a >= b ? a - b : 0; };
    return {d(retrans_segs, o.retrans_segs), d(loss_probes, o.loss_probes),           d(timeouts, o.timeouts),
            d(rcvq_drops, o.rcvq_drops),     d(memory_pressures, o.memory_pressures), d(zero_windows, o.zero_windows)};
  }
};

// Zero windows a second from which a sample is marked: runs at the lower level advertised
// 4,000-8,500 a second, runs at the higher one 0-1,200 (bench/RESULTS.md, "128 KiB transfers:
// the receive window").
inline constexpr double kZeroWindowsPerSecondMarked = 2000;

// From the texts of /proc/net/netstat and /proc/net/snmp (pairs of "Prefix: names" and
// "Prefix: values" lines). False when a counter is missing or a line pair does not match.
bool parse_tcp_counters(std::string_view netstat, std::string_view snmp, TcpCounters& out);
bool read_tcp_counters(TcpCounters& out);

// The timeline in coarser cells (sums), for reports: K IOPS per cell of cell_s seconds.
std::vector<double> kiops_per_cell(const Timeline& t, double cell_s);

// The embedded target's and engine's counters, read every few milliseconds while a run goes.
struct RoleSample {
  double t = 0;           // seconds since the run started
  double target_cpu = 0;  // the target's reactors' CPU seconds
  uint64_t target_ios = 0;
  double engine_cpu = 0;  // the engine's cores' CPU seconds
  uint64_t engine_ios = 0;
};

// The window of the run that the initiator measured: the samples [first, last] at least
// `seconds` apart (as close to that as the samples allow) between which the most I/O
// completed (target I/Os, else the engine's). fio and perf measure after their ramp, and
// before it the initiator connects (or attaches) and the target and engine spend CPU on few
// or no I/Os: a cost per I/O taken over the whole run counts that CPU too. Returns false
// (and leaves first, last alone) when the samples span less than `seconds`.
bool busiest_window(const std::vector<RoleSample>& s, double seconds, size_t& first, size_t& last);

}  // namespace nvtcp::app

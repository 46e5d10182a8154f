// SPDX-License-Identifier: Apache-2.0
// The workload generator behind `nvtcp perf` (and later `nvtcp bench`): queue pairs on the
// calling thread, each kept full, with random or sequential offsets and a latency histogram.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "histogram.hpp"
#include "nvtcp/host.hpp"
#include "nvtcp/multipath.hpp"

namespace nvtcp::app {

struct PerfOptions {
  host::TransportId trid;
  // More than one: the same subsystem through each (trid is the first), driven as one
  // multipath controller with ANA-aware path choice and failover.
  std::vector<host::TransportId> paths;
  host::MultipathOptions multipath;
  host::ControllerOptions ctrl;
  uint32_t queue_depth = 32;
  uint32_t io_size = 4096;
  std::string workload = "randread";  // read | write | randread | randwrite | randrw | rw
  uint32_t read_percent = 50;         // for randrw / rw
  double seconds = 5;
  uint64_t number_ios = 0;            // per thread: stop after this many I/Os (0: run for seconds)
  uint32_t rate_iops = 0;             // per thread: issue at most this many I/Os per second (0: no limit)
  uint32_t qpairs = 1;                // per thread
  unsigned cores = 1;                 // threads, each with its own queue pairs
  std::vector<int> cpus;              // pin thread i to cpus[i] when given
  bool verify = false;                // write tagged blocks, then read back and check
  double ramp_seconds = 0;            // run this long first and count none of it (connects are never counted)
  uint32_t timeline_ms = 0;           // record completions and outstanding I/O per cell of this length (0: no)
  double reauth_seconds = 0;          // run DH-HMAC-CHAP again on every queue this often (0: never)
  host::DataPathOptions data_path;    // SQ thread CPU, zero-copy sends, multishot and spinning receive
};

struct PerfResult {
  uint64_t ios = 0, reads = 0, writes = 0, errors = 0, verify_failures = 0, verify_skipped = 0;
  uint64_t reauths = 0, reauth_failures = 0;  // --reauth-interval: transactions run, and failed
  std::string reauth_error;                   // why the last one failed
  double seconds = 0;
  double cpu_seconds = 0;
  LatencyHistogram lat;
  // --timeline-ms: per cell of the measured time, I/Os completed and the most outstanding
  // (summed over the threads); only whole cells.
  double timeline_cell_s = 0;
  std::vector<uint64_t> timeline_completed, timeline_outstanding;
  // Multipath: commands sent on each path (summed over the threads), and moved after a path error.
  std::vector<uint64_t> path_commands;
  uint64_t failovers = 0;
  double iops() const { return seconds > 0 ? double(ios) / seconds : 0; }
  double mibps(uint32_t io_size) const { return iops() * io_size / (1024.0 * 1024.0); }
  double gbps(uint32_t io_size) const { return iops() * io_size * 8 / 1e9; }
  double cpu_s_per_mio() const { return ios ? cpu_seconds / (double(ios) / 1e6) : 0; }
};

// Runs the workload; returns false with err on a setup failure. I/O errors are counted.
bool run_perf(const PerfOptions& o, PerfResult& out, std::string& err);

std::string format_perf_text(const PerfOptions& o, const PerfResult& r);
std::string format_perf_json(const PerfOptions& o, const PerfResult& r);

}  // namespace nvtcp::app

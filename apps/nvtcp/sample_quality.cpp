// SPDX-License-Identifier: Apache-2.0
#include "sample_quality.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>

namespace nvtcp::app {

namespace {
// The next whitespace- or comma-separated field of s, advancing s; empty at the end.
std::string_view next_field(std::string_view& s) {
  const auto sep = [](char c) { return c == ' ' || c == '\t' || c == ','; };
  size_t i = 0;
  while (i < s.size() && sep(s[i])) ++i;
  size_t j = i;
  while (j < s.size() && !sep(s[j])) ++j;
  std::string_view f = s.substr(i, j - i);
  s.remove_prefix(j);
  return f;
}

template <typename T>
bool to_number(std::string_view f, T& v) {
  if (f.empty()) return false;
  auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
  return ec == std::errc() && p == f.data() + f.size();
}
}  // namespace

bool parse_proc_stat(std::string_view text, const std::vector<int>& cpus, CpuTimes& out) {
  out = {};
  std::vector<bool> seen(cpus.size(), false);
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    // "cpu" alone is the sum of all CPUs; "cpuN" one CPU.
    if (line.size() < 4 || line.substr(0, 3) != "cpu" || line[3] < '0' || line[3] > '9') continue;
    std::string_view rest = line.substr(3);
    int cpu = -1;
    if (!to_number(next_field(rest), cpu)) return false;
    size_t which = cpus.size();
    if (!cpus.empty()) {
      auto it = std::find(cpus.begin(), cpus.end(), cpu);
      if (it == cpus.end()) continue;
      which = size_t(it - cpus.begin());
    }
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    uint64_t f[8] = {};
    for (uint64_t& v : f)
      if (!to_number(next_field(rest), v)) return false;
    out.user += f[0] + f[1];
    out.system += f[2];
    out.idle += f[3] + f[4];
    out.irq += f[5] + f[6];
    out.steal += f[7];
    ++out.cpus;
    if (which < seen.size()) seen[which] = true;
  }
  if (cpus.empty()) return out.cpus > 0;
  return std::all_of(seen.begin(), seen.end(), [](bool b) { return b; });
}

bool read_proc_stat(const std::vector<int>& cpus, CpuTimes& out) {
  std::ifstream f("/proc/stat");
  if (!f) return false;
  std::string text(std::istreambuf_iterator<char>(f), {});
  return parse_proc_stat(text, cpus, out);
}

Interference interference(const CpuTimes& before, const CpuTimes& after, double wall_s, double own_cpu_s,
                          long ticks_per_second) {
  Interference r;
  const double hz = double(ticks_per_second > 0 ? ticks_per_second : 100);
  auto delta = [&](uint64_t a, uint64_t b) { return b >= a ? double(b - a) / hz : 0.0; };
  r.capacity_s = wall_s * after.cpus;
  r.busy_s = delta(before.user, after.user) + delta(before.system, after.system);
  r.irq_s = delta(before.irq, after.irq);
  r.steal_s = delta(before.steal, after.steal);
  r.own_s = own_cpu_s;
  r.others_s = std::max(0.0, r.busy_s - own_cpu_s);
  return r;
}

StallReport find_stalls(const Timeline& t, double lat_avg_s, double min_stall_s) {
  StallReport r;
  r.min_stall_s = std::max(min_stall_s, 20 * lat_avg_s);
  if (t.cell_s <= 0) return r;
  const size_t n = t.completed.size();
  // A cell is empty when nothing completed in it while something was outstanding.
  auto empty = [&](size_t i) {
    return t.completed[i] <= 0 && (t.outstanding.empty() || (i < t.outstanding.size() && t.outstanding[i] > 0));
  };
  for (size_t i = size_t(std::ceil(t.begin_s / t.cell_s - 1e-9)); i < n;) {
    if (!empty(i)) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < n && empty(j)) ++j;
    const double len = double(j - i) * t.cell_s;
    // Cells are whole multiples: allow for the rounding of len against the threshold.
    if (len + t.cell_s * 1e-6 >= r.min_stall_s) {
      r.stalls.push_back({double(i) * t.cell_s, len});
      r.stalled_s += len;
    }
    i = j;
  }
  return r;
}

bool add_fio_iops_log(std::string_view text, double window_ms, double span_s, Timeline& t, double* first_window_s) {
  if (first_window_s) *first_window_s = span_s;
  if (t.cell_s <= 0 || window_ms <= 0) return false;
  const size_t cells = size_t(std::floor(span_s / t.cell_s + 1e-9));
  if (t.completed.size() < cells) t.completed.resize(cells, 0);
  const double w = window_ms / 1000.0;
  bool first = true;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    uint64_t msec = 0;
    double iops = 0;
    if (!to_number(next_field(line), msec)) return false;
    std::string_view v = next_field(line);
    // fio writes integers; accept a fraction too.
    try {
      iops = std::stod(std::string(v));
    } catch (...) {
      return false;
    }
    // A line covers the window before it; the first line of a log, written within a few
    // windows of the start, covers everything from the start (fio averages it over that).
    const double end = double(msec) / 1000.0;
    const double start = first && end <= 4 * w ? 0.0 : std::max(0.0, end - w);
    first = false;
    if (first_window_s) *first_window_s = std::min(*first_window_s, start);
    if (start >= span_s) continue;
    // Spread the window's completions over the cells it covers, in proportion.
    const double total = iops * (end - start);
    for (size_t c = size_t(start / t.cell_s); c < cells && double(c) * t.cell_s < end; ++c) {
      const double lo = std::max(start, double(c) * t.cell_s), hi = std::min(end, double(c + 1) * t.cell_s);
      if (hi > lo) t.completed[c] += total * (hi - lo) / (end - start);
    }
  }
  return true;
}

namespace {
// "Prefix: a b c" followed by "Prefix: 1 2 3": each name with its value, as "Prefix.a".
bool parse_counter_pairs(std::string_view text, std::map<std::string, uint64_t>& out) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty()) lines.push_back(line);
  }
  for (size_t i = 0; i + 1 < lines.size(); i += 2) {
    std::string_view names = lines[i], values = lines[i + 1];
    const size_t colon = names.find(':');
    if (colon == std::string_view::npos || values.substr(0, colon + 1) != names.substr(0, colon + 1)) return false;
    const std::string prefix(names.substr(0, colon));
    names.remove_prefix(colon + 1);
    values.remove_prefix(colon + 1);
    for (;;) {
      std::string_view n = next_field(names), v = next_field(values);
      if (n.empty() != v.empty()) return false;
      if (n.empty()) break;
      int64_t value = 0;  // RtoMax and MaxConn may be negative
      if (!to_number(v, value)) return false;
      out[prefix + "." + std::string(n)] = uint64_t(value);
    }
  }
  return true;
}
}  // namespace

bool parse_tcp_counters(std::string_view netstat, std::string_view snmp, TcpCounters& out) {
  std::map<std::string, uint64_t> c;
  if (!parse_counter_pairs(netstat, c) || !parse_counter_pairs(snmp, c)) return false;
  auto get = [&](const char* key, uint64_t& v) {
    auto it = c.find(key);
    if (it == c.end()) return false;
    v = it->second;
    return true;
  };
  out = {};
  bool ok = get("Tcp.RetransSegs", out.retrans_segs) && get("TcpExt.TCPTimeouts", out.timeouts);
  // Older kernels lack some of these: zero rather than no reading at all.
  get("TcpExt.TCPLossProbes", out.loss_probes);
  get("TcpExt.TCPRcvQDrop", out.rcvq_drops);
  get("TcpExt.TCPMemoryPressures", out.memory_pressures);
  get("TcpExt.TCPToZeroWindowAdv", out.zero_windows);
  return ok;
}

bool read_tcp_counters(TcpCounters& out) {
  std::ifstream n("/proc/net/netstat"), s("/proc/net/snmp");
  if (!n || !s) return false;
  std::string nt(std::istreambuf_iterator<char>(n), {}), st(std::istreambuf_iterator<char>(s), {});
  return parse_tcp_counters(nt, st, out);
}

std::vector<double> kiops_per_cell(const Timeline& t, double cell_s) {
  std::vector<double> out;
  if (t.cell_s <= 0 || cell_s <= 0) return out;
  const size_t per = std::max<size_t>(1, size_t(std::lround(cell_s / t.cell_s)));
  for (size_t i = 0; i + per <= t.completed.size(); i += per) {
    double sum = 0;
    for (size_t k = i; k < i + per; ++k) sum += t.completed[k];
    out.push_back(std::round(sum / (double(per) * t.cell_s) / 1000.0 * 10) / 10);
  }
  return out;
}

bool busiest_window(const std::vector<RoleSample>& s, double seconds, size_t& first, size_t& last) {
  const bool by_target = !s.empty() && s.back().target_ios > s.front().target_ios;
  auto ios = [&](size_t k) { return by_target ? s[k].target_ios : s[k].engine_ios; };
  bool found = false;
  uint64_t best = 0;
  size_t j = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    // The first sample at least `seconds` after i: the shortest window that covers the run.
    if (j < i) j = i;
    while (j < s.size() && s[j].t - s[i].t < seconds) ++j;
    if (j == s.size()) break;
    const uint64_t n = ios(j) - ios(i);
    if (!found || n > best) {
      found = true;
      best = n;
      first = i;
      last = j;
    }
  }
  return found;
}

}  // namespace nvtcp::app

// SPDX-License-Identifier: Apache-2.0
// The bench's judgement of a sample: /proc/stat read for a set of CPUs, the CPU other
// processes took, and stalls found in timelines that the tests stall on purpose.
#include "sample_quality.hpp"

#include <gtest/gtest.h>

#include <string>
#include <tuple>

namespace nvtcp::app::sample_quality_test {
namespace {

const char* kStat =
    "cpu  1000 10 300 5000 20 5 15 40 0 0\n"
    "cpu0 600 10 100 2000 10 2 8 30 0 0\n"
    "cpu1 400 0 200 3000 10 3 7 10 0 0\n"
    "intr 12345 0 0\n"
    "ctxt 999\n";

// (cpus, user, system, idle, irq, steal): compared in one check that prints them all.
auto fields_of(const CpuTimes& t) { return std::tuple(t.cpus, t.user, t.system, t.idle, t.irq, t.steal); }

TEST(ProcStat, SumsTheListedCpusOnly) {
  CpuTimes t;
  ASSERT_TRUE(parse_proc_stat(kStat, {1}, t));
  EXPECT_EQ(fields_of(t), std::tuple(1u, 400u, 200u, 3010u, 10u, 10u));
  ASSERT_TRUE(parse_proc_stat(kStat, {0, 1}, t));
  EXPECT_EQ(t.cpus, 2u);
  EXPECT_EQ(t.user, 1010u);  // nice counts as user
  EXPECT_EQ(t.steal, 40u);
  ASSERT_TRUE(parse_proc_stat(kStat, {}, t));  // every CPU, not the "cpu" total line twice
  EXPECT_EQ(t.cpus, 2u);
  EXPECT_EQ(t.system, 300u);
}

TEST(ProcStat, AMissingCpuOrAGarbledLineIsRefused) {
  CpuTimes t;
  EXPECT_FALSE(parse_proc_stat(kStat, {2}, t));
  EXPECT_FALSE(parse_proc_stat("cpu0 1 2 x 4 5 6 7 8\n", {0}, t));
  EXPECT_FALSE(parse_proc_stat("cpu0 1 2 3\n", {0}, t));
  EXPECT_FALSE(parse_proc_stat("", {}, t));
}

TEST(Interference, OthersAreTheBusyTimeTheSampleDidNotUse) {
  CpuTimes a, b;
  a.cpus = b.cpus = 2;
  a.user = 1000, a.system = 500, a.steal = 10, a.irq = 7;
  b.user = 1250, b.system = 650, b.steal = 30, b.irq = 47;  // 4 s busy, 0.2 s stolen, in 100 Hz ticks
  const Interference i = interference(a, b, 2.0, 3.0, 100);
  EXPECT_DOUBLE_EQ(i.capacity_s, 4.0);
  EXPECT_DOUBLE_EQ(i.busy_s, 4.0);
  EXPECT_DOUBLE_EQ(i.others_s, 1.0);
  EXPECT_DOUBLE_EQ(i.others_share(), 0.25);
  EXPECT_DOUBLE_EQ(i.steal_share(), 0.05);
  EXPECT_DOUBLE_EQ(i.irq_s, 0.4);
  // The sample's own rusage may exceed the ticks counted: others never go below zero.
  EXPECT_DOUBLE_EQ(interference(a, b, 2.0, 5.0, 100).others_s, 0.0);
}

Timeline steady(size_t cells, double per_cell) {
  Timeline t;
  t.cell_s = 0.01;
  t.completed.assign(cells, per_cell);
  t.outstanding.assign(cells, 32);
  return t;
}

TEST(Stalls, ASteadyStreamHasNone) {
  EXPECT_FALSE(find_stalls(steady(200, 4000), 80e-6).stalled());
}

TEST(Stalls, ASpanWithIoOutstandingAndNothingCompletedIsOne) {
  Timeline t = steady(200, 4000);
  for (size_t i = 50; i < 80; ++i) t.completed[i] = 0;  // 300 ms with the queue full and nothing back
  const StallReport r = find_stalls(t, 80e-6);
  ASSERT_EQ(r.stalls.size(), 1u);
  EXPECT_NEAR(r.stalls[0].start_s, 0.5, 1e-9);
  EXPECT_NEAR(r.stalls[0].length_s, 0.3, 1e-9);
  EXPECT_NEAR(r.stalled_s, 0.3, 1e-9);
}

TEST(Stalls, ShorterGapsIdleQueuesAndSlowDevicesAreNot) {
  Timeline t = steady(200, 4000);
  for (size_t i = 20; i < 29; ++i) t.completed[i] = 0;  // 90 ms: under the 100 ms floor
  for (size_t i = 100; i < 150; ++i) t.completed[i] = 0, t.outstanding[i] = 0;  // nothing asked
  EXPECT_FALSE(find_stalls(t, 80e-6).stalled());
  // A device whose I/Os take 10 ms completes nothing for 150 ms at times without stalling:
  // the floor is 20 average latencies.
  Timeline slow = steady(200, 1);
  for (size_t i = 60; i < 75; ++i) slow.completed[i] = 0;
  EXPECT_FALSE(find_stalls(slow, 0.010).stalled());
  EXPECT_TRUE(find_stalls(slow, 0.001).stalled());
}

TEST(Stalls, TwoStallsAreReportedApart) {
  Timeline t = steady(300, 100);
  for (size_t i = 10; i < 30; ++i) t.completed[i] = 0;
  for (size_t i = 250; i < 300; ++i) t.completed[i] = 0;  // running into the end of the sample
  const StallReport r = find_stalls(t, 50e-6);
  ASSERT_EQ(r.stalls.size(), 2u);
  EXPECT_NEAR(r.stalls[1].start_s, 2.5, 1e-9);
  EXPECT_NEAR(r.stalled_s, 0.7, 1e-9);
}

// One line of a fio iops log: the window ending at ms, at iops, reads (dir 0) or writes (1).
std::string fio_line(int ms, int iops, int dir = 0) {
  return std::to_string(ms) + ", " + std::to_string(iops) + ", " + std::to_string(dir) + ", 4096, 0\n";
}

// A 20 K IOPS job logging every 50 ms from first_ms to 1 s; its timeline over 0.95 s.
Timeline steady_fio_job(int first_ms, double* first_window_s) {
  std::string job;
  for (int ms = first_ms; ms <= 1000; ms += 50) job += fio_line(ms, 20000);
  Timeline t;
  t.cell_s = 0.01;
  EXPECT_TRUE(add_fio_iops_log(job, 50, 0.95, t, first_window_s));
  return t;
}

// fio writes no line for a window in which nothing completed: the gap is the stall.
TEST(FioLog, WindowsWithoutALineAreEmptyAndJobsAddUp) {
  std::string job1, job2;
  for (int ms = 50; ms <= 2000; ms += 50) {
    if (ms > 600 && ms <= 900) continue;  // both jobs stalled from 550 to 900 ms
    job1 += fio_line(ms + 3, 20000);
    job2 += fio_line(ms + 7, 10000);
    if (ms > 1500) job2 += fio_line(ms + 7, 5000, 1);  // a mix: reads and writes
  }
  Timeline t;
  t.cell_s = 0.01;
  ASSERT_TRUE(add_fio_iops_log(job1, 50, 1.95, t));
  ASSERT_TRUE(add_fio_iops_log(job2, 50, 1.95, t));
  ASSERT_EQ(t.completed.size(), 195u);
  const StallReport r = find_stalls(t, 100e-6);
  ASSERT_EQ(r.stalls.size(), 1u);
  EXPECT_NEAR(r.stalls[0].start_s, 0.61, 0.011);
  EXPECT_NEAR(r.stalls[0].length_s, 0.29, 0.011);
  const auto k = kiops_per_cell(t, 0.1);
  ASSERT_EQ(k.size(), 19u);
  EXPECT_NEAR(k[2], 30.0, 0.5);   // 20 K + 10 K IOPS
  EXPECT_NEAR(k[7], 0.0, 0.5);
  EXPECT_NEAR(k[17], 35.0, 0.5);  // and the writes
}

TEST(FioLog, OnlyOneJobStalledIsNoStallOfTheSample) {
  std::string job1, job2;
  for (int ms = 50; ms <= 2000; ms += 50) {
    job1 += fio_line(ms, 20000);
    if (ms < 500 || ms > 1000) job2 += fio_line(ms, 20000);
  }
  Timeline t;
  t.cell_s = 0.01;
  ASSERT_TRUE(add_fio_iops_log(job1, 50, 1.95, t));
  ASSERT_TRUE(add_fio_iops_log(job2, 50, 1.95, t));
  EXPECT_FALSE(find_stalls(t, 100e-6).stalled());
}

// After the ramp fio's first line comes some tens of ms late and averages over all of it.
TEST(FioLog, TheFirstLineCoversTheStart) {
  double first = 1;
  const Timeline t = steady_fio_job(140, &first);
  EXPECT_EQ(first, 0.0);
  EXPECT_FALSE(find_stalls(t, 100e-6).stalled());
  EXPECT_NEAR(kiops_per_cell(t, 0.1)[0], 20.0, 0.5);  // 20 K IOPS from the start, not a slow first cell
}

// A first line long after the start: the span before its window is no evidence.
TEST(FioLog, TheSpanBeforeALateFirstWindowIsNoEvidence) {
  double first = 0;
  Timeline t = steady_fio_job(290, &first);
  EXPECT_NEAR(first, 0.24, 1e-9);
  EXPECT_TRUE(find_stalls(t, 100e-6).stalled());
  t.begin_s = first;
  EXPECT_FALSE(find_stalls(t, 100e-6).stalled());
  double none = 0;
  ASSERT_TRUE(add_fio_iops_log("", 50, 0.95, t, &none));
  EXPECT_EQ(none, 0.95);  // a log without a line has no first window
}

TEST(FioLog, AGarbledLineIsRefused) {
  Timeline t;
  t.cell_s = 0.01;
  EXPECT_FALSE(add_fio_iops_log("50, 20000, 0, 4096, 0\nfifty, 1, 0, 0, 0\n", 50, 1, t));
}

TEST(TcpCounters, ReadFromNetstatAndSnmpPairs) {
  const char* netstat =
      "TcpExt: SyncookiesSent TCPLossProbes TCPTimeouts TCPRcvQDrop TCPMemoryPressures TCPToZeroWindowAdv\n"
      "TcpExt: 0 12397 2 7 1 15135\n"
      "IpExt: InNoRoutes InTruncatedPkts\n"
      "IpExt: 0 0\n";
  const char* snmp =
      "Ip: Forwarding DefaultTTL\n"
      "Ip: 1 64\n"
      "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn RetransSegs\n"
      "Tcp: 1 200 120000 -1 59594\n";
  TcpCounters a;
  ASSERT_TRUE(parse_tcp_counters(netstat, snmp, a));
  // (retrans_segs, loss_probes, timeouts, rcvq_drops, memory_pressures, zero_windows)
  EXPECT_EQ(std::tuple(a.retrans_segs, a.loss_probes, a.timeouts, a.rcvq_drops, a.memory_pressures, a.zero_windows),
            std::tuple(59594u, 12397u, 2u, 7u, 1u, 15135u));
  TcpCounters b = a;
  b.timeouts = 5;
  b.zero_windows = 15200;
  b.retrans_segs = 59600;
  const TcpCounters d = b - a;
  EXPECT_EQ(d.timeouts, 3u);
  EXPECT_EQ(d.retrans_segs, 6u);
  EXPECT_EQ(d.zero_windows, 65u);
  EXPECT_EQ((a - b).timeouts, 0u);  // a counter that went back (a namespace's reset) is no negative count
}

TEST(TcpCounters, MismatchedOrMissingIsRefused) {
  TcpCounters c;
  EXPECT_FALSE(parse_tcp_counters("TcpExt: TCPTimeouts\nIpExt: 1\n", "Tcp: RetransSegs\nTcp: 1\n", c));
  EXPECT_FALSE(parse_tcp_counters("TcpExt: TCPTimeouts A\nTcpExt: 1\n", "Tcp: RetransSegs\nTcp: 1\n", c));
  EXPECT_FALSE(parse_tcp_counters("TcpExt: TCPLossProbes\nTcpExt: 1\n", "Tcp: RetransSegs\nTcp: 1\n", c));
  TcpCounters real;
  EXPECT_TRUE(read_tcp_counters(real));  // this machine's /proc/net has them
}

// A run as the bench samples it every 0.1 s: 0.5 s of start-up with the target's CPU spinning
// and no I/O, then 1 s at 100 I/Os per sample, then a quiet end.
std::vector<RoleSample> startup_then_load() {
  std::vector<RoleSample> v;
  uint64_t ios = 0;
  for (int k = 0; k <= 20; ++k) {
    if (k > 5 && k <= 15) ios += 100;
    v.push_back({k * 0.1, k * 0.1, ios, 0, 0});
  }
  return v;
}

TEST(BusiestWindow, SkipsTheStartUpAndTakesTheLoadedSeconds) {
  const auto s = startup_then_load();
  size_t first = 99, last = 99;
  ASSERT_TRUE(busiest_window(s, 1.0, first, last));
  EXPECT_EQ(first, 5u);  // the window starts where the I/O does
  EXPECT_EQ(last, 15u);
  EXPECT_EQ(s[last].target_ios - s[first].target_ios, 1000u);
  // Over that window the CPU per I/O is 1 ms; over the whole run it would be 2 ms.
  EXPECT_DOUBLE_EQ((s[last].target_cpu - s[first].target_cpu) / double(s[last].target_ios - s[first].target_ios),
                   0.001);
}

TEST(BusiestWindow, CountsTheEnginesIosWhenThereIsNoTarget) {
  auto s = startup_then_load();
  for (auto& x : s) {
    x.engine_ios = x.target_ios;
    x.target_ios = 0;
  }
  size_t first = 0, last = 0;
  ASSERT_TRUE(busiest_window(s, 0.5, first, last));
  EXPECT_EQ(s[last].engine_ios - s[first].engine_ios, 500u);
}

TEST(BusiestWindow, ARunShorterThanTheWindowHasNone) {
  const auto s = startup_then_load();
  size_t first = 7, last = 7;
  EXPECT_FALSE(busiest_window(s, 2.5, first, last));
  EXPECT_FALSE(busiest_window({}, 1.0, first, last));
  EXPECT_EQ(first, 7u);
  EXPECT_EQ(last, 7u);
}

}  // namespace
}  // namespace nvtcp::app::sample_quality_test

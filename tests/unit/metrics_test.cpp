// SPDX-License-Identifier: Apache-2.0
// The metrics endpoint apart from its socket: Prometheus' text format as the writer puts it
// (exact text for a fixed input, label escaping, cumulative histogram buckets), the target's
// families rendered from a snapshot made up here, the per-reactor namespace counters, and the
// HTTP conversation of one client fed bytes (split, pipelined, refused); the offload engine's
// families from a made-up EngineStats.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <tuple>
#include <vector>

#include "control/metrics_server.hpp"
#include "control/target_metrics.hpp"
#include "engine/engine_metrics.hpp"
#include "target/io_metrics.hpp"
#include "util/prometheus.hpp"

namespace nvtcp::metrics_test {
namespace {

using prometheus::Type;

TEST(PrometheusText, FamiliesAndSamplesAsTheFormatWritesThem) {
  prometheus::TextWriter w;
  w.family("nvtcp_things_total", Type::Counter, "Things done.");
  w.sample({{"a", "x"}, {"b", "y"}}, uint64_t(18446744073709551615ull));
  w.sample({}, uint64_t(0));
  w.family("nvtcp_level", Type::Gauge, "A level.");
  w.sample({{"r", "0"}}, 0.25);
  w.sample({{"r", "1"}}, 3.0);
  EXPECT_EQ(w.text(),
            "# HELP nvtcp_things_total Things done.\n"
            "# TYPE nvtcp_things_total counter\n"
            "nvtcp_things_total{a=\"x\",b=\"y\"} 18446744073709551615\n"
            "nvtcp_things_total 0\n"
            "# HELP nvtcp_level A level.\n"
            "# TYPE nvtcp_level gauge\n"
            "nvtcp_level{r=\"0\"} 0.25\n"
            "nvtcp_level{r=\"1\"} 3\n");
}

TEST(PrometheusText, LabelValuesAndHelpAreEscaped) {
  EXPECT_EQ(prometheus::escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(prometheus::escape_help("x\\y\"z\nw"), "x\\\\y\"z\\nw");
  prometheus::TextWriter w;
  w.family("m", Type::Gauge, "line one\nline \\two");
  w.sample({{"nqn", "nqn.2026-11.io.nvtcp:\"odd\"\\name\n"}}, uint64_t(1));
  EXPECT_EQ(w.text(),
            "# HELP m line one\\nline \\\\two\n"
            "# TYPE m gauge\n"
            "m{nqn=\"nqn.2026-11.io.nvtcp:\\\"odd\\\"\\\\name\\n\"} 1\n");
}

TEST(PrometheusText, ValuesAndBounds) {
  EXPECT_EQ(prometheus::format_value(1.0 / 0.0), "+Inf");
  EXPECT_EQ(prometheus::format_value(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(prometheus::format_value(0.0 / 0.0), "NaN");
  EXPECT_EQ(prometheus::format_value(1e-3), "0.001");
  EXPECT_EQ(prometheus::format_value(42.0), "42");
  EXPECT_EQ(prometheus::format_bound(0.00001), "0.00001");
  EXPECT_EQ(prometheus::format_bound(2.5), "2.5");
  EXPECT_EQ(prometheus::format_bound(10), "10");
}

TEST(PrometheusText, HistogramBucketsAreCumulativeAndEndWithInf) {
  prometheus::TextWriter w;
  w.family("lat_seconds", Type::Histogram, "Latency.");
  const std::vector<double> bounds = {0.001, 0.01, 0.1};
  const std::vector<uint64_t> counts = {2, 0, 5, 1};  // the last: above 0.1
  w.histogram({{"op", "read"}}, bounds, counts, 0.75);
  EXPECT_EQ(w.text(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{op=\"read\",le=\"0.001\"} 2\n"
            "lat_seconds_bucket{op=\"read\",le=\"0.01\"} 2\n"
            "lat_seconds_bucket{op=\"read\",le=\"0.1\"} 7\n"
            "lat_seconds_bucket{op=\"read\",le=\"+Inf\"} 8\n"
            "lat_seconds_sum{op=\"read\"} 0.75\n"
            "lat_seconds_count{op=\"read\"} 8\n");
}

TEST(IoMetrics, LatencyBucketsFollowLe) {
  EXPECT_EQ(target::latency_bucket(0), 0u);
  EXPECT_EQ(target::latency_bucket(10'000), 0u);  // le="0.00001" includes its bound
  EXPECT_EQ(target::latency_bucket(10'001), 1u);
  EXPECT_EQ(target::latency_bucket(1'000'000'000), 15u);
  EXPECT_EQ(target::latency_bucket(10'000'000'000), target::kLatencyBoundsNs.size() - 1);
  EXPECT_EQ(target::latency_bucket(10'000'000'001), target::kLatencyBoundsNs.size());  // +Inf
}

TEST(IoMetrics, SlotsAddUp) {
  target::IoMetrics m;
  m.init(3);
  m.read_done(0, 4096, 5'000);
  m.read_done(2, 512, 30'000);
  m.write_done(1, 8192, 2'000'000);
  m.read_failed(1);
  m.write_failed(2);
  m.other_failed(0);
  m.other_failed(0);
  const target::IoTotals t = m.totals();
  // (reads, read_bytes, writes, write_bytes, and the errors of each kind)
  EXPECT_EQ(std::tuple(t.reads, t.read_bytes, t.writes, t.write_bytes, t.read_errors, t.write_errors, t.other_errors),
            std::tuple(2u, 4608u, 1u, 8192u, 1u, 1u, 2u));
  EXPECT_EQ(t.read_latency[0], 1u);  // 5 us
  EXPECT_EQ(t.read_latency[2], 1u);  // 30 us: (25, 50]
  EXPECT_EQ(t.write_latency[7], 1u); // 2 ms: (1, 2.5]
  EXPECT_EQ(t.read_latency_ns, 35'000u);
  EXPECT_EQ(t.write_latency_ns, 2'000'000u);
}

target::TargetMetrics sample_snapshot() {
  target::TargetMetrics m;
  m.subsystems.push_back({"nqn.2026-11.io.nvtcp:a", 2, 1});
  target::TargetMetrics::NamespaceEntry e;
  e.subsystem = "nqn.2026-11.io.nvtcp:a";
  e.nsid = 7;
  e.name = "Malloc0";
  e.size_bytes = 1 << 20;
  e.outstanding = 3;
  e.io.reads = 4;
  e.io.read_bytes = 16384;
  e.io.read_latency[0] = 3;
  e.io.read_latency[target::kLatencyBuckets - 1] = 1;  // over 10 s
  e.io.read_latency_ns = 12'000'000'000;
  e.io.write_errors = 1;
  m.namespaces.push_back(e);
  target::TargetMetrics::ListenerEntry l;
  l.subsystem = "nqn.2026-11.io.nvtcp:a";
  l.listener = "[::1]:4420";
  l.admin_queues = 1;
  l.io_queues = 4;
  l.io_counted = true;
  l.io.reads = 3;
  l.io.read_bytes = 12288;
  l.io.write_errors = 1;
  l.io.other_errors = 2;  // an ANA status on a Flush, say
  l.io.read_latency[1] = 3;
  l.io.read_latency_ns = 60'000;
  l.outstanding = 5;
  m.listeners.push_back(l);
  // The discovery subsystem's queues through a listener: counted as queues, with no I/O.
  target::TargetMetrics::ListenerEntry d;
  d.subsystem = "nqn.2014-08.org.nvmexpress.discovery";
  d.listener = "127.0.0.1:8009";
  d.admin_queues = 2;
  m.listeners.push_back(d);
  m.reactors.push_back({1.5, 2.0, 10});
  m.connections = 5;
  m.connections_accepted = 9;
  m.request_states = {{"Free", 30, 40}, {"Executing", 2, 12}};
  m.command_states = {{"Idle", 31, 0}, {"InDevice", 1, 11}};
  return m;
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

// Each family is introduced once, HELP before TYPE, and every sample line belongs to the
// family introduced last (histograms: with their suffixes). Returns how many families.
size_t expect_well_formed(const std::string& text) {
  std::string family;
  std::vector<std::string> seen;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) {
      ADD_FAILURE() << "the text ends without a line feed";
      break;
    }
    const std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.rfind("# HELP ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_EQ(std::count(seen.begin(), seen.end(), family), 0) << family << " twice";
      seen.push_back(family);
      EXPECT_EQ(family.rfind("nvtcp_", 0), 0u) << family;
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      EXPECT_EQ(line.substr(7, family.size() + 1), family + " ");
      continue;
    }
    const std::string name = line.substr(0, line.find_first_of("{ "));
    EXPECT_TRUE(name == family || name == family + "_bucket" || name == family + "_sum" || name == family + "_count")
        << line << " under " << family;
  }
  return seen.size();
}

TEST(TargetMetricsText, EveryFamilyOnceWithItsSamples) {
  const std::string text = control::render_target_metrics(sample_snapshot());
  const std::string ns = "subsystem=\"nqn.2026-11.io.nvtcp:a\",nsid=\"7\",bdev=\"Malloc0\"";
  const std::string at = "subsystem=\"nqn.2026-11.io.nvtcp:a\",listener=\"[::1]:4420\"";
  for (const char* line : {
           "# TYPE nvtcp_subsystem_controllers gauge",
           "nvtcp_subsystem_controllers{subsystem=\"nqn.2026-11.io.nvtcp:a\"} 2",
           "nvtcp_subsystem_namespaces{subsystem=\"nqn.2026-11.io.nvtcp:a\"} 1",
           "nvtcp_subsystem_queues{subsystem=\"nqn.2026-11.io.nvtcp:a\",listener=\"[::1]:4420\",queue=\"admin\"} 1",
           "nvtcp_subsystem_queues{subsystem=\"nqn.2026-11.io.nvtcp:a\",listener=\"[::1]:4420\",queue=\"io\"} 4",
           "# TYPE nvtcp_namespace_read_latency_seconds histogram",
           "nvtcp_reactor_busy_seconds_total{reactor=\"0\"} 1.5",
           "nvtcp_reactor_cpu_seconds_total{reactor=\"0\"} 2",
           "nvtcp_reactor_io_commands_total{reactor=\"0\"} 10",
           "nvtcp_connections 5",
           "nvtcp_connections_accepted_total 9",
           "nvtcp_requests{state=\"Executing\"} 2",
           "nvtcp_request_state_entries_total{state=\"Free\"} 40",
           "nvtcp_commands{state=\"InDevice\"} 1",
           "nvtcp_command_state_entries_total{state=\"InDevice\"} 11",
       })
    EXPECT_TRUE(has_line(text, line)) << line << "\n" << text;
  for (const std::string& line : {
           "nvtcp_namespace_reads_total{" + ns + "} 4",
           "nvtcp_namespace_read_bytes_total{" + ns + "} 16384",
           "nvtcp_namespace_writes_total{" + ns + "} 0",
           "nvtcp_namespace_errors_total{" + ns + ",op=\"write\"} 1",
           "nvtcp_namespace_errors_total{" + ns + ",op=\"read\"} 0",
           "nvtcp_namespace_read_latency_seconds_bucket{" + ns + ",le=\"0.00001\"} 3",
           "nvtcp_namespace_read_latency_seconds_bucket{" + ns + ",le=\"10\"} 3",
           "nvtcp_namespace_read_latency_seconds_bucket{" + ns + ",le=\"+Inf\"} 4",
           "nvtcp_namespace_read_latency_seconds_sum{" + ns + "} 12",
           "nvtcp_namespace_read_latency_seconds_count{" + ns + "} 4",
           "nvtcp_namespace_outstanding_commands{" + ns + "} 3",
           "nvtcp_namespace_size_bytes{" + ns + "} 1048576",
           "nvtcp_listener_reads_total{" + at + "} 3",
           "nvtcp_listener_read_bytes_total{" + at + "} 12288",
           "nvtcp_listener_writes_total{" + at + "} 0",
           "nvtcp_listener_errors_total{" + at + ",op=\"write\"} 1",
           "nvtcp_listener_errors_total{" + at + ",op=\"other\"} 2",
           "nvtcp_listener_read_latency_seconds_bucket{" + at + ",le=\"0.00001\"} 0",
           "nvtcp_listener_read_latency_seconds_bucket{" + at + ",le=\"0.000025\"} 3",
           "nvtcp_listener_read_latency_seconds_sum{" + at + "} 6e-05",
           "nvtcp_listener_read_latency_seconds_count{" + at + "} 3",
           "nvtcp_listener_write_latency_seconds_count{" + at + "} 0",
           "nvtcp_listener_outstanding_commands{" + at + "} 5",
           std::string("nvtcp_subsystem_queues{subsystem=\"nqn.2014-08.org.nvmexpress.discovery\",listener=\"127.0.0.1:8009\",queue=\"admin\"} 2"),
       })
    EXPECT_TRUE(has_line(text, line)) << line << "\n" << text;
  // The discovery subsystem does no I/O: it has queues, and no I/O series.
  EXPECT_EQ(text.find("nvtcp_listener_reads_total{subsystem=\"nqn.2014-08"), std::string::npos) << text;
  EXPECT_EQ(expect_well_formed(text), 32u);
}

TEST(EngineMetricsText, EveryFamilyOnceWithItsSamples) {
  engine::EngineStats s;
  s.applications = 2;
  s.attached = 5;
  s.refused = 3;
  s.refused_for_limits = 1;
  s.mapped_bytes = 8 << 20;
  s.control_cpu_seconds = 0.25;
  const engine::EngineCoreStats pinned{
      .cpu = 3, .queues = 4, .in_flight = 17, .forwarded = 1000, .completed = 983, .sleeps = 7, .busy_seconds = 1.5};
  const engine::EngineCoreStats floating{.forwarded = 1};
  s.cores = {pinned, floating};
  engine::EngineRemoteStats r;
  r.subnqn = "nqn.2026-11.io.nvtcp:a";
  r.applications = 2;
  r.namespaces = 4;
  r.namespace_notices = 6;
  r.forwarded = 1001;
  r.in_flight = 17;
  r.paths = {{"127.0.0.1:4420", true, 0}, {"127.0.0.2:4420", false, 3}};
  r.reads.count(4096, true, 30'000);      // le="0.00005"
  r.reads.count(4096, true, 20'000'000);  // le="0.025"
  r.reads.count(4096, false, 1);          // an error: no latency
  r.writes.count(8192, true, 5'000);      // le="0.00001"
  s.remotes = {r};
  const std::string text = engine::render_engine_metrics(s);
  const std::string sub = "subsystem=\"nqn.2026-11.io.nvtcp:a\"";
  for (const std::string& line : {
           std::string("# TYPE nvtcp_engine_applications gauge"),
           std::string("nvtcp_engine_applications 2"),
           std::string("nvtcp_engine_attaches_total 5"),
           std::string("nvtcp_engine_attaches_refused_total{reason=\"limit\"} 1"),
           std::string("nvtcp_engine_attaches_refused_total{reason=\"other\"} 2"),
           std::string("nvtcp_engine_mapped_bytes 8388608"),
           std::string("nvtcp_engine_control_cpu_seconds_total 0.25"),
           std::string("# TYPE nvtcp_engine_core_busy_seconds_total counter"),
           std::string("nvtcp_engine_core_busy_seconds_total{core=\"0\",cpu=\"3\"} 1.5"),
           std::string("nvtcp_engine_core_queues{core=\"0\",cpu=\"3\"} 4"),
           std::string("nvtcp_engine_core_in_flight_commands{core=\"0\",cpu=\"3\"} 17"),
           std::string("nvtcp_engine_core_commands_forwarded_total{core=\"0\",cpu=\"3\"} 1000"),
           std::string("nvtcp_engine_core_completions_total{core=\"0\",cpu=\"3\"} 983"),
           std::string("nvtcp_engine_core_sleeps_total{core=\"0\",cpu=\"3\"} 7"),
           std::string("nvtcp_engine_core_commands_forwarded_total{core=\"1\",cpu=\"any\"} 1"),
           "nvtcp_engine_remote_applications{" + sub + "} 2",
           "nvtcp_engine_remote_namespaces{" + sub + "} 4",
           "nvtcp_engine_remote_namespace_notices_total{" + sub + "} 6",
           "nvtcp_engine_remote_commands_forwarded_total{" + sub + "} 1001",
           "nvtcp_engine_remote_in_flight_commands{" + sub + "} 17",
           "nvtcp_engine_path_connected{" + sub + ",path=\"127.0.0.1:4420\"} 1",
           "nvtcp_engine_path_connected{" + sub + ",path=\"127.0.0.2:4420\"} 0",
           "nvtcp_engine_path_resets_total{" + sub + ",path=\"127.0.0.2:4420\"} 3",
           "nvtcp_engine_remote_reads_total{" + sub + "} 2",
           "nvtcp_engine_remote_read_bytes_total{" + sub + "} 8192",
           "nvtcp_engine_remote_writes_total{" + sub + "} 1",
           "nvtcp_engine_remote_write_bytes_total{" + sub + "} 8192",
           "nvtcp_engine_remote_errors_total{" + sub + ",op=\"read\"} 1",
           "nvtcp_engine_remote_errors_total{" + sub + ",op=\"write\"} 0",
           std::string("# TYPE nvtcp_engine_remote_read_latency_seconds histogram"),
           "nvtcp_engine_remote_read_latency_seconds_bucket{" + sub + ",le=\"0.000025\"} 0",
           "nvtcp_engine_remote_read_latency_seconds_bucket{" + sub + ",le=\"0.00005\"} 1",
           "nvtcp_engine_remote_read_latency_seconds_bucket{" + sub + ",le=\"0.025\"} 2",
           "nvtcp_engine_remote_read_latency_seconds_bucket{" + sub + ",le=\"+Inf\"} 2",
           "nvtcp_engine_remote_read_latency_seconds_count{" + sub + "} 2",
           "nvtcp_engine_remote_read_latency_seconds_sum{" + sub + "} 0.02003",
           "nvtcp_engine_remote_write_latency_seconds_bucket{" + sub + ",le=\"0.00001\"} 1",
           "nvtcp_engine_remote_write_latency_seconds_count{" + sub + "} 1",
       })
    EXPECT_TRUE(has_line(text, line)) << line << "\n" << text;
  EXPECT_EQ(expect_well_formed(text), 36u);
  // Refusals read while attaches go on never count below zero.
  s.refused_for_limits = 4;
  EXPECT_TRUE(has_line(engine::render_engine_metrics(s), "nvtcp_engine_attaches_refused_total{reason=\"other\"} 0"));
}

// ---------------------------------------------------------------- the HTTP conversation

struct Conversation {
  control::RenderMetrics render = [] { return std::string("x_total 1\n"); };
  std::atomic<uint64_t> scrapes{0};
  control::MetricsHttpSession session{render, 256, &scrapes};
  std::string out;
  bool open = true;
  void feed(const std::string& bytes) { open = session.on_bytes(bytes.data(), bytes.size(), out); }
};

TEST(MetricsHttp, GetMetricsAnswersTheExpositionAndKeepsTheConnection) {
  Conversation c;
  c.feed("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
  EXPECT_TRUE(c.open);
  EXPECT_EQ(c.out,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: 10\r\n\r\n"
            "x_total 1\n");
  EXPECT_EQ(c.scrapes.load(), 1u);
}

// As the endpoint runs it: requests sent at once are rendered one per call, the next only when
// the server asks again (after the client took the last answer), and none is lost.
TEST(MetricsHttp, OneAtATimeRendersOneAnswerPerCallAndKeepsTheRest) {
  control::RenderMetrics render = [] { return std::string("x_total 1\n"); };
  std::atomic<uint64_t> scrapes{0};
  control::MetricsHttpSession session{render, 256, &scrapes, true};
  std::string many;
  for (int i = 0; i < 5; ++i) many += "GET /metrics HTTP/1.1\r\n\r\n";
  many += "GET /met";  // and half of a sixth
  std::string out;
  ASSERT_TRUE(session.on_bytes(many.data(), many.size(), out));
  EXPECT_EQ(scrapes.load(), 1u);
  for (uint64_t n = 2; n <= 5; ++n) {
    EXPECT_TRUE(session.pending());
    out.clear();  // taken by the client
    ASSERT_TRUE(session.on_bytes(nullptr, 0, out));
    EXPECT_EQ(scrapes.load(), n);
    EXPECT_EQ(out.rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  }
  EXPECT_FALSE(session.pending());  // half a request is not one
  out.clear();
  const std::string rest = "rics HTTP/1.1\r\n\r\n";
  ASSERT_TRUE(session.on_bytes(rest.data(), rest.size(), out));
  EXPECT_EQ(scrapes.load(), 6u);
  EXPECT_FALSE(session.pending());
}

TEST(MetricsHttp, ARequestSplitAnywhereAndPipelinedRequestsAreAnsweredInOrder) {
  Conversation c;
  const std::string one = "GET /metrics?name[]=x HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string two = one + "HEAD /metrics HTTP/1.1\r\n\r\n";
  for (char ch : two) {
    c.feed(std::string(1, ch));
    ASSERT_TRUE(c.open);
  }
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                           "Content-Length: 10\r\n\r\n";
  EXPECT_EQ(c.out, head + "x_total 1\n" + head);  // HEAD: the same head, no body
  EXPECT_EQ(c.scrapes.load(), 2u);
}

TEST(MetricsHttp, ConnectionCloseAndHttp10CloseAfterTheAnswer) {
  Conversation a;
  a.feed("GET /metrics HTTP/1.1\r\nconnection: Close\r\n\r\n");
  EXPECT_FALSE(a.open);
  EXPECT_NE(a.out.find("Connection: close\r\n"), std::string::npos);
  EXPECT_NE(a.out.find("x_total 1\n"), std::string::npos);
  Conversation b;
  b.feed("GET /metrics HTTP/1.0\r\n\r\n");
  EXPECT_FALSE(b.open);
  EXPECT_EQ(b.out.rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
}

TEST(MetricsHttp, OtherPathsMethodsGarbageAndOversizedHeadsAreRefusedAndClosed) {
  struct Case {
    std::string in;
    std::string status;
  };
  for (const Case& k : {Case{"GET / HTTP/1.1\r\n\r\n", "404 Not Found"},
                        Case{"GET /metricsx HTTP/1.1\r\n\r\n", "404 Not Found"},
                        Case{"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "405 Method Not Allowed"},
                        Case{"DELETE /metrics HTTP/1.1\r\n\r\n", "405 Method Not Allowed"},
                        Case{"\x16\x03\x01garbage\r\n\r\n", "400 Bad Request"},
                        Case{"GET /metrics SPDY/3\r\n\r\n", "400 Bad Request"},
                        Case{"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", "400 Bad Request"},
                        Case{"GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", "400 Bad Request"},
                        Case{"GET /metrics HTTP/1.1\r\nX: " + std::string(300, 'a'), "431 Request Header Fields Too Large"},
                        Case{std::string(300, 'G'), "431 Request Header Fields Too Large"}}) {
    SCOPED_TRACE(k.in.substr(0, 40));
    Conversation c;
    c.feed(k.in);
    EXPECT_FALSE(c.open);
    EXPECT_EQ(c.out.rfind("HTTP/1.1 " + k.status + "\r\n", 0), 0u) << c.out;
    EXPECT_NE(c.out.find("Connection: close\r\n"), std::string::npos);
    EXPECT_EQ(c.scrapes.load(), 0u);
  }
  Conversation c;
  c.feed("PUT /metrics HTTP/1.1\r\n\r\n");
  EXPECT_NE(c.out.find("Allow: GET, HEAD\r\n"), std::string::npos);
}

}  // namespace
}  // namespace nvtcp::metrics_test

// SPDX-License-Identifier: Apache-2.0
// The metrics endpoint of a running target, over its socket: the counters move by exactly the
// I/O a host did (reads, writes, bytes, errors, latency counts, queues, reactor totals), and
// hostile clients (garbage, an oversized head, one that never reads, ones that say nothing)
// neither stop the target nor keep other scrapes out.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <functional>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "../support/loopback.hpp"
#include "control/metrics_server.hpp"
#include "control/target_metrics.hpp"
#include "nvtcp/host.hpp"
#include "test_devices.hpp"
#include "test_target.hpp"
#include "util/prometheus.hpp"

namespace nvtcp::test::metrics_test {
namespace {

int connect_to(uint16_t port, bool v6 = false) {
  int fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{10, 0};  // no read in these tests may hang the suite
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int rc;
  if (v6) {
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(port);
    sa.sin6_addr = in6addr_loopback;
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  } else {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  }
  if (rc != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& s) { return test::send_all(fd, s.data(), s.size()); }

// Everything the server sends until it closes (or 10 s of silence).
std::string read_to_close(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  return out;
}

// One scrape on a connection of its own: the status line and the body.
struct Scrape {
  std::string status, head, body;
};
Scrape scrape(uint16_t port, bool v6 = false) {
  Scrape s;
  int fd = connect_to(port, v6);
  EXPECT_GE(fd, 0) << strerror(errno);
  if (fd < 0) return s;
  EXPECT_TRUE(send_all(fd, "GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"));
  const std::string all = read_to_close(fd);
  ::close(fd);
  const size_t end = all.find("\r\n\r\n");
  EXPECT_NE(end, std::string::npos) << all;
  if (end == std::string::npos) return s;
  s.head = all.substr(0, end);
  s.status = all.substr(0, all.find("\r\n"));
  s.body = all.substr(end + 4);
  return s;
}

// "name{labels}" -> value, one entry per sample line.
std::map<std::string, double> samples(const std::string& body) {
  std::map<std::string, double> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

double value(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  EXPECT_NE(it, m.end()) << "no sample " << key;
  return it == m.end() ? -1 : it->second;
}

nvme::Status run(host::QueuePair& qp, const std::function<int(host::CompletionFn, void*)>& submit) {
  return one_command(qp, submit);
}

class Metrics : public ::testing::Test {
 protected:
  void start(control::MetricsServerOptions o = {}, unsigned cores = 2, const std::string& at = "127.0.0.1:0") {
    target::TargetConfig cfg = default_config();
    cfg.cores = cores;
    start_target(cfg, {}, o, at);
  }
  void start_target(const target::TargetConfig& cfg, target::DeviceFactory factory,
                    control::MetricsServerOptions o = {}, const std::string& at = "127.0.0.1:0") {
    server_.reset();
    target_ = std::make_unique<RunningTarget>(cfg, std::move(factory));
    target::Target* t = &target_->target();
    server_ = std::make_unique<control::MetricsServer>([t] { return control::render_target_metrics(t->metrics()); }, o);
    start_error_ = server_->start(at);
  }
  std::unique_ptr<RunningTarget> target_;
  std::unique_ptr<control::MetricsServer> server_;
  std::string start_error_;
  GatedFactory gated_;  // namespaces named "gated" hold their Deallocates until released
  static constexpr uint32_t kGatedNsid = 4;
};

const std::string kNs2 = std::string("subsystem=\"") + kTestNqn + "\",nsid=\"2\",bdev=\"ram0\"";
const std::string kNs3 = std::string("subsystem=\"") + kTestNqn + "\",nsid=\"3\",bdev=\"ram1\"";
const std::string kNs1 = std::string("subsystem=\"") + kTestNqn + "\",nsid=\"1\",bdev=\"null0\"";

TEST_F(Metrics, CountersMoveByExactlyTheIoDone) {
  start();
  ASSERT_EQ(start_error_, "");
  const Scrape before = scrape(server_->port());
  ASSERT_EQ(before.status, "HTTP/1.1 200 OK");
  EXPECT_NE(before.head.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << before.head;
  auto b = samples(before.body);
  EXPECT_EQ(value(b, "nvtcp_namespace_reads_total{" + kNs2 + "}"), 0);
  EXPECT_EQ(value(b, "nvtcp_subsystem_controllers{subsystem=\"" + std::string(kTestNqn) + "\"}"), 0);
  EXPECT_EQ(value(b, "nvtcp_subsystem_namespaces{subsystem=\"" + std::string(kTestNqn) + "\"}"), 3);

  std::string err;
  host::ControllerOptions o;
  o.io_queues = 2;
  auto ctrl = host::Controller::connect(target_->trid(), o, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp1 = ctrl->create_io_qpair(32, err);
  ASSERT_TRUE(qp1) << err;
  auto qp2 = ctrl->create_io_qpair(32, err);
  ASSERT_TRUE(qp2) << err;

  std::vector<uint8_t> buf(1 << 20, 0x5A);
  // Namespace 2 (512-byte blocks): 5 writes of 4 KiB, 7 reads of one block and 3 of 8 KiB on
  // the first queue; one read past its end, which fails.
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(run(*qp1, [&](host::CompletionFn cb, void* ctx) { return qp1->write(2, 8 * i, 8, buf.data(), cb, ctx); }).ok());
  for (int i = 0; i < 7; ++i)
    ASSERT_TRUE(run(*qp1, [&](host::CompletionFn cb, void* ctx) { return qp1->read(2, i, 1, buf.data(), cb, ctx); }).ok());
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(run(*qp1, [&](host::CompletionFn cb, void* ctx) { return qp1->read(2, 16 * i, 16, buf.data(), cb, ctx); }).ok());
  nvme::Sqe past{};
  past.opc = uint8_t(nvme::IoOpcode::Read);
  past.nsid = 2;
  const uint64_t blocks = (64ull << 20) / 512;
  past.cdw10 = uint32_t(blocks);  // the first block past the end
  past.cdw12 = 0;                 // one block
  const nvme::Status st =
      run(*qp1, [&](host::CompletionFn cb, void* ctx) { return qp1->submit(past, buf.data(), 512, false, cb, ctx); });
  EXPECT_FALSE(st.ok());
  // Namespace 3 (4 KiB blocks): 2 writes of one block on the second queue.
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(run(*qp2, [&](host::CompletionFn cb, void* ctx) { return qp2->write(3, i, 1, buf.data(), cb, ctx); }).ok());

  // A command counts once the target's socket has taken its response, which may be just after
  // the host saw it: wait for the last one to show (the listener's counters, bumped after the
  // namespace's), then scrape once more, so that no command is caught between two of its
  // counters, and everything must be exact.
  const std::string at = std::string("subsystem=\"") + kTestNqn + "\",listener=\"127.0.0.1:" +
                         std::to_string(target_->port()) + "\"";
  std::map<std::string, double> a;
  ASSERT_TRUE(wait_for(
      [&] {
        a = samples(scrape(server_->port()).body);
        return a["nvtcp_listener_reads_total{" + at + "}"] == 10 && a["nvtcp_listener_writes_total{" + at + "}"] == 7 &&
               a["nvtcp_listener_errors_total{" + at + ",op=\"read\"}"] == 1;
      },
      10000));
  a = samples(scrape(server_->port()).body);
  EXPECT_EQ(value(a, "nvtcp_namespace_reads_total{" + kNs2 + "}"), 10);
  EXPECT_EQ(value(a, "nvtcp_namespace_read_bytes_total{" + kNs2 + "}"), 7 * 512 + 3 * 8192);
  EXPECT_EQ(value(a, "nvtcp_namespace_writes_total{" + kNs2 + "}"), 5);
  EXPECT_EQ(value(a, "nvtcp_namespace_write_bytes_total{" + kNs2 + "}"), 5 * 4096);
  EXPECT_EQ(value(a, "nvtcp_namespace_errors_total{" + kNs2 + ",op=\"read\"}"), 1);
  EXPECT_EQ(value(a, "nvtcp_namespace_errors_total{" + kNs2 + ",op=\"write\"}"), 0);
  EXPECT_EQ(value(a, "nvtcp_namespace_errors_total{" + kNs2 + ",op=\"other\"}"), 0);
  EXPECT_EQ(value(a, "nvtcp_namespace_read_latency_seconds_count{" + kNs2 + "}"), 10);
  EXPECT_EQ(value(a, "nvtcp_namespace_read_latency_seconds_bucket{" + kNs2 + ",le=\"+Inf\"}"), 10);
  EXPECT_EQ(value(a, "nvtcp_namespace_write_latency_seconds_count{" + kNs2 + "}"), 5);
  EXPECT_GE(value(a, "nvtcp_namespace_read_latency_seconds_sum{" + kNs2 + "}"), 0);
  // Buckets never fall as le grows.
  double last = 0;
  for (uint64_t bound : target::kLatencyBoundsNs) {
    const std::string le = prometheus::format_bound(double(bound) / 1e9);
    const double v = value(a, "nvtcp_namespace_read_latency_seconds_bucket{" + kNs2 + ",le=\"" + le + "\"}");
    EXPECT_GE(v, last) << le;
    last = v;
  }
  EXPECT_EQ(value(a, "nvtcp_namespace_writes_total{" + kNs3 + "}"), 2);
  EXPECT_EQ(value(a, "nvtcp_namespace_write_bytes_total{" + kNs3 + "}"), 2 * 4096);
  EXPECT_EQ(value(a, "nvtcp_namespace_reads_total{" + kNs3 + "}"), 0);
  EXPECT_EQ(value(a, "nvtcp_namespace_reads_total{" + kNs1 + "}"), 0);
  EXPECT_EQ(value(a, "nvtcp_namespace_writes_total{" + kNs1 + "}"), 0);
  EXPECT_EQ(value(a, "nvtcp_namespace_outstanding_commands{" + kNs2 + "}"), 0);
  const std::string sub = std::string("subsystem=\"") + kTestNqn + "\"";
  const std::string listener = "listener=\"127.0.0.1:" + std::to_string(target_->port()) + "\"";
  EXPECT_EQ(value(a, "nvtcp_subsystem_controllers{" + sub + "}"), 1);
  EXPECT_EQ(value(a, "nvtcp_subsystem_queues{" + sub + "," + listener + ",queue=\"admin\"}"), 1);
  EXPECT_EQ(value(a, "nvtcp_subsystem_queues{" + sub + "," + listener + ",queue=\"io\"}"), 2);
  // The subsystem through that listener: every namespace's I/O of this host, which came in there.
  EXPECT_EQ(value(a, "nvtcp_listener_reads_total{" + sub + "," + listener + "}"), 10);
  EXPECT_EQ(value(a, "nvtcp_listener_read_bytes_total{" + sub + "," + listener + "}"), 7 * 512 + 3 * 8192);
  EXPECT_EQ(value(a, "nvtcp_listener_writes_total{" + sub + "," + listener + "}"), 5 + 2);
  EXPECT_EQ(value(a, "nvtcp_listener_write_bytes_total{" + sub + "," + listener + "}"), 7 * 4096);
  EXPECT_EQ(value(a, "nvtcp_listener_errors_total{" + sub + "," + listener + ",op=\"read\"}"), 1);
  EXPECT_EQ(value(a, "nvtcp_listener_read_latency_seconds_count{" + sub + "," + listener + "}"), 10);
  EXPECT_EQ(value(a, "nvtcp_listener_write_latency_seconds_count{" + sub + "," + listener + "}"), 7);
  EXPECT_EQ(value(a, "nvtcp_listener_outstanding_commands{" + sub + "," + listener + "}"), 0);
  // Every command of the I/O queues, the failed read and each queue's Connect included, on
  // one reactor or the other.
  EXPECT_EQ(value(a, "nvtcp_reactor_io_commands_total{reactor=\"0\"}") +
                value(a, "nvtcp_reactor_io_commands_total{reactor=\"1\"}"),
            5 + 7 + 3 + 1 + 2 + 2);
  EXPECT_GT(value(a, "nvtcp_reactor_busy_seconds_total{reactor=\"0\"}") +
                value(a, "nvtcp_reactor_busy_seconds_total{reactor=\"1\"}"),
            0);
  EXPECT_EQ(value(a, "nvtcp_connections"), 3);
  // Both state tables: every successful read and write went through the device, and none is
  // there now.
  EXPECT_GE(value(a, "nvtcp_command_state_entries_total{state=\"InDevice\"}"), 10 + 7);
  EXPECT_EQ(value(a, "nvtcp_commands{state=\"InDevice\"}"), 0);
  EXPECT_GE(value(a, "nvtcp_request_state_entries_total{state=\"Executing\"}"), 10 + 7);
  EXPECT_EQ(server_->scrapes() >= 2, true);

  // The host leaves: its queues and controller go from the figures, the counters stay.
  qp1.reset();
  qp2.reset();
  ctrl.reset();
  ASSERT_TRUE(wait_for([&] {
    a = samples(scrape(server_->port()).body);
    return a["nvtcp_subsystem_controllers{" + sub + "}"] == 0 && a["nvtcp_connections"] == 0;
  }, 10000));
  // The subsystem is still reachable there: its queues read 0, its counters stay.
  EXPECT_EQ(value(a, "nvtcp_subsystem_queues{" + sub + "," + listener + ",queue=\"io\"}"), 0);
  EXPECT_EQ(value(a, "nvtcp_namespace_reads_total{" + kNs2 + "}"), 10);
  EXPECT_EQ(value(a, "nvtcp_listener_reads_total{" + sub + "," + listener + "}"), 10);
}

// Two listeners: each host's I/O counts under the listener it came in on, an ANA status counts
// as an error of that listener only, the queue depth of each is what its host has outstanding,
// and a listener taken from the subsystem takes its series with it.
TEST_F(Metrics, EachListenerCountsTheIoOfTheHostsThatCameInOnIt) {
  target::TargetConfig cfg = default_config();
  cfg.cores = 2;
  cfg.listeners.push_back({"127.0.0.1", 0});
  cfg.subsystems[0].ana_reporting = true;
  target::NamespaceConfig gated_ns{kGatedNsid, "null", 64ull << 20, "", 512};
  gated_ns.name = "gated";
  cfg.subsystems[0].namespaces.push_back(gated_ns);
  start_target(cfg, gated_.factory());
  ASSERT_EQ(start_error_, "");
  target::Target* t = &target_->target();
  const uint16_t port_a = target_->port(0), port_b = target_->port(1);
  const std::string sub = std::string("subsystem=\"") + kTestNqn + "\"";
  const std::string at_a = sub + ",listener=\"127.0.0.1:" + std::to_string(port_a) + "\"";
  const std::string at_b = sub + ",listener=\"127.0.0.1:" + std::to_string(port_b) + "\"";
  auto b = samples(scrape(server_->port()).body);
  EXPECT_EQ(value(b, "nvtcp_listener_reads_total{" + at_a + "}"), 0);
  EXPECT_EQ(value(b, "nvtcp_listener_reads_total{" + at_b + "}"), 0);

  std::string err;
  host::TransportId ta = target_->trid(), tb = target_->trid();
  tb.trsvcid = port_b;
  auto ca = host::Controller::connect(ta, {}, err);
  ASSERT_TRUE(ca) << err;
  auto cb = host::Controller::connect(tb, {}, err);
  ASSERT_TRUE(cb) << err;
  auto qa = ca->create_io_qpair(32, err);
  ASSERT_TRUE(qa) << err;
  auto qb = cb->create_io_qpair(32, err);
  ASSERT_TRUE(qb) << err;
  std::vector<uint8_t> buf(8192, 0x3C);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(run(*qa, [&](host::CompletionFn c, void* x) { return qa->read(2, i, 1, buf.data(), c, x); }).ok());
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(run(*qb, [&](host::CompletionFn c, void* x) { return qb->write(2, i, 2, buf.data(), c, x); }).ok());
  // B's path turns inaccessible: its next read is refused with an ANA status, A's is served.
  ASSERT_EQ(t->live_config().set_ana_state(kTestNqn, "127.0.0.1", port_b, 0, nvme::AnaState::Inaccessible), "");
  EXPECT_FALSE(run(*qb, [&](host::CompletionFn c, void* x) { return qb->read(2, 0, 1, buf.data(), c, x); }).ok());
  ASSERT_TRUE(run(*qa, [&](host::CompletionFn c, void* x) { return qa->read(2, 0, 1, buf.data(), c, x); }).ok());

  std::map<std::string, double> a;
  ASSERT_TRUE(wait_for(
      [&] {
        a = samples(scrape(server_->port()).body);
        return a["nvtcp_listener_reads_total{" + at_a + "}"] == 5 &&
               a["nvtcp_listener_errors_total{" + at_b + ",op=\"read\"}"] == 1 &&
               a["nvtcp_listener_writes_total{" + at_b + "}"] == 3;
      },
      10000));
  a = samples(scrape(server_->port()).body);  // no command caught between two of its counters
  EXPECT_EQ(value(a, "nvtcp_listener_read_bytes_total{" + at_a + "}"), 5 * 512);
  EXPECT_EQ(value(a, "nvtcp_listener_writes_total{" + at_a + "}"), 0);
  EXPECT_EQ(value(a, "nvtcp_listener_errors_total{" + at_a + ",op=\"read\"}"), 0);
  EXPECT_EQ(value(a, "nvtcp_listener_reads_total{" + at_b + "}"), 0);
  EXPECT_EQ(value(a, "nvtcp_listener_write_bytes_total{" + at_b + "}"), 3 * 1024);
  EXPECT_EQ(value(a, "nvtcp_listener_write_latency_seconds_count{" + at_b + "}"), 3);
  EXPECT_EQ(value(a, "nvtcp_subsystem_queues{" + at_a + ",queue=\"io\"}"), 1);
  EXPECT_EQ(value(a, "nvtcp_subsystem_queues{" + at_b + ",queue=\"io\"}"), 1);
  // The namespace saw both hosts' I/O.
  EXPECT_EQ(value(a, "nvtcp_namespace_reads_total{" + kNs2 + "}"), 5);
  EXPECT_EQ(value(a, "nvtcp_namespace_writes_total{" + kNs2 + "}"), 3);

  // Queue depth: 8 Deallocates that the gated namespace holds are outstanding on A alone,
  // and leave the count once released.
  constexpr int kHeld = 8;
  int done = 0;
  nvme::DsmRange range{};
  range.nlb = 1;
  for (int i = 0; i < kHeld; ++i)
    ASSERT_EQ(qa->deallocate(kGatedNsid, &range, 1,
                             [](void* d, const host::Completion&) { ++*static_cast<int*>(d); }, &done),
              0);
  ASSERT_TRUE(wait_for(
      [&] {
        (void)qa->process_completions(0);
        return gated_.dev.load() && gated_.dev.load()->held() == size_t(kHeld);
      },
      10000));
  a = samples(scrape(server_->port()).body);
  EXPECT_EQ(value(a, "nvtcp_listener_outstanding_commands{" + at_a + "}"), kHeld);
  EXPECT_EQ(value(a, "nvtcp_listener_outstanding_commands{" + at_b + "}"), 0);
  for (int i = 0; i < kHeld; ++i) gated_.dev.load()->release_one();
  ASSERT_TRUE(wait_for([&] { (void)qa->process_completions(1000); return done == kHeld; }, 10000));
  ASSERT_TRUE(wait_for(
      [&] {
        a = samples(scrape(server_->port()).body);
        return a["nvtcp_listener_outstanding_commands{" + at_a + "}"] == 0;
      },
      10000));

  // B's listener taken from the subsystem: its controller ends and its series go.
  ASSERT_EQ(t->live_config().remove_listener(kTestNqn, "127.0.0.1", port_b), "");
  a = samples(scrape(server_->port()).body);
  EXPECT_EQ(a.count("nvtcp_listener_reads_total{" + at_b + "}"), 0u);
  EXPECT_EQ(value(a, "nvtcp_listener_reads_total{" + at_a + "}"), 5);
}

TEST_F(Metrics, HostileClientsStopNeitherTheTargetNorOtherScrapes) {
  control::MetricsServerOptions o;
  o.max_clients = 8;
  o.max_request_bytes = 4096;
  o.idle_timeout_ms = 2000;  // a stall, not a slow turn of a sanitized build: scrapes here were cut at 300 ms under TSan
  start(o, 1);
  ASSERT_EQ(start_error_, "");
  const uint16_t port = server_->port();

  // Garbage: 400, and closed.
  int garbage = connect_to(port);
  ASSERT_GE(garbage, 0);
  ASSERT_TRUE(send_all(garbage, std::string("\x16\x03\x01\x02 not http at all\r\n\r\n")));
  EXPECT_EQ(read_to_close(garbage).rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u);
  ::close(garbage);
  // A head that never ends: 431 once past the limit, and closed.
  int oversized = connect_to(port);
  ASSERT_GE(oversized, 0);
  send_all(oversized, "GET /metrics HTTP/1.1\r\nX-Filler: " + std::string(64 * 1024, 'a'));
  EXPECT_EQ(read_to_close(oversized).rfind("HTTP/1.1 431 ", 0), 0u);
  ::close(oversized);
  // Ones that say nothing, or half a request, and one that sends request after request and
  // never reads an answer.
  int silent = connect_to(port);
  int half = connect_to(port);
  ASSERT_GE(silent, 0);
  ASSERT_GE(half, 0);
  ASSERT_TRUE(send_all(half, "GET /metr"));
  int reader_never = connect_to(port);
  ASSERT_GE(reader_never, 0);
  int small = 4096;
  setsockopt(reader_never, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  std::string many;
  for (int i = 0; i < 2000; ++i) many += "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  timeval tv{1, 0};
  setsockopt(reader_never, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  send_all(reader_never, many);  // may stop part-way: the server reads no more than it answers

  // Meanwhile scrapes are answered, and the target serves I/O.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(scrape(port).status, "HTTP/1.1 200 OK");
  std::string err;
  auto ctrl = host::Controller::connect(target_->trid(), {}, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  std::vector<uint8_t> buf(4096);
  EXPECT_TRUE(run(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->read(2, 0, 8, buf.data(), cb, ctx); }).ok());
  // The one that never reads was not answered 2000 times: an answer is rendered only once the
  // last one was taken, so it costs what its socket's buffers hold (a few answers), not one per
  // request it sent.
  EXPECT_LT(server_->scrapes(), 100u);
  // The stalled clients are closed once they have made no progress for the idle timeout.
  for (int fd : {silent, half, reader_never}) {
    char c;
    EXPECT_TRUE(wait_for(
        [&] {
          ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT);
          if (n == 0) return true;
          if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return true;  // reset
          // Answers the never-reader had left: drain them and look again.
          if (n > 0) {
            char sink[65536];
            while (::recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
            }
          }
          return false;
        },
        10000))
        << "a stalled client was never closed";
    ::close(fd);
  }
  EXPECT_EQ(scrape(port).status, "HTTP/1.1 200 OK");
}

TEST_F(Metrics, ClientsOverTheLimitAreClosedAndScrapesGoOnAfter) {
  control::MetricsServerOptions o;
  o.max_clients = 2;
  o.idle_timeout_ms = 60000;
  start(o, 1);
  ASSERT_EQ(start_error_, "");
  int a = connect_to(server_->port()), b = connect_to(server_->port());
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  // Both are taken in before the third arrives: each has had an answer.
  for (int fd : {a, b}) {
    ASSERT_TRUE(send_all(fd, "HEAD /metrics HTTP/1.1\r\n\r\n"));
    char buf[4096];
    EXPECT_GT(::recv(fd, buf, sizeof(buf), 0), 0);
  }
  int c = connect_to(server_->port());
  ASSERT_GE(c, 0);
  send_all(c, "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(read_to_close(c), "");  // closed without an answer
  ::close(c);
  EXPECT_EQ(server_->clients_refused(), 1u);
  ::close(a);
  ::close(b);
  // Their slots free once the server has seen them go: until then a scrape is refused too.
  EXPECT_TRUE(wait_for(
      [&] {
        int fd = connect_to(server_->port());
        if (fd < 0) return false;
        const bool ok = send_all(fd, "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n") &&
                        read_to_close(fd).rfind("HTTP/1.1 200 OK\r\n", 0) == 0;
        ::close(fd);
        return ok;
      },
      5000));
}

// A clock the test steps: the server's deadlines move only when the test says so.
struct SteppedClock {
  std::shared_ptr<std::atomic<uint64_t>> ms = std::make_shared<std::atomic<uint64_t>>(1000);
  std::function<uint64_t()> fn() const {
    return [m = ms] { return m->load(); };
  }
  void advance(uint64_t by) { ms->fetch_add(by); }
};

// Whether the server has closed fd (EOF or reset); false while it is open with nothing to read.
bool closed_by_server(int fd) {
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// Every slot held by a client that sends a request head a byte at a time and never ends it
// (any byte counted as progress, so no idle timeout ever closed them): scrapes were refused,
// all of them, for as long as the clients kept it up. A new client now takes the slot of the
// one whose request has been unfinished longest. The clock stands still: nothing here is
// closed for time.
TEST_F(Metrics, ScrapesGetThroughWhenEverySlotIsHeldByClientsThatTrickleBytes) {
  SteppedClock clock;
  control::MetricsServerOptions o;
  o.max_clients = 16;
  o.clock = clock.fn();
  start(o, 1);
  ASSERT_EQ(start_error_, "");
  const uint16_t port = server_->port();
  std::vector<int> slow;
  for (int i = 0; i < 16; ++i) {
    const int fd = connect_to(port);
    ASSERT_GE(fd, 0);
    slow.push_back(fd);
  }
  for (int fd : slow) ASSERT_TRUE(send_all(fd, "G"));
  for (int fd : slow) ASSERT_TRUE(send_all(fd, "ET /metrics HTTP/1.1\r\nX-Slow: a"));
  // The kernel hands connections over in the order they came: the 16 hold every slot before
  // the first scrape is taken in, which closes the oldest of them.
  EXPECT_EQ(scrape(port).status, "HTTP/1.1 200 OK");
  EXPECT_EQ(server_->clients_evicted(), 1u);
  EXPECT_EQ(server_->clients_refused(), 0u);
  EXPECT_EQ(read_to_close(slow[0]), "");  // closed, with no answer
  for (size_t i = 1; i < slow.size(); ++i) EXPECT_FALSE(closed_by_server(slow[i])) << "client " << i;
  // The others go on trickling; every scrape is answered all the same.
  for (int i = 0; i < 12; ++i) {
    for (size_t k = 1; k < slow.size(); ++k) send_all(slow[k], "a");
    EXPECT_EQ(scrape(port).status, "HTTP/1.1 200 OK") << "scrape " << i;
  }
  EXPECT_EQ(server_->clients_refused(), 0u);
  for (int fd : slow) ::close(fd);
}

// A request head must be whole within request_timeout_ms of its start, however the bytes come:
// a byte now and then restarts the idle timeout, not this one. On a kept-alive connection each
// request's time starts with its first byte.
TEST_F(Metrics, ARequestHeadNotWholeInTimeIsAnswered408WhateverBytesTrickleIn) {
  SteppedClock clock;
  control::MetricsServerOptions o;
  o.idle_timeout_ms = 10000;
  o.request_timeout_ms = 5000;
  o.clock = clock.fn();
  start(o, 1);
  ASSERT_EQ(start_error_, "");
  const uint16_t port = server_->port();
  const int slow = connect_to(port);
  ASSERT_GE(slow, 0);
  const int kept = connect_to(port);
  ASSERT_GE(kept, 0);
  ASSERT_TRUE(send_all(slow, "GET /metrics HTTP/1.1\r\n"));
  // The kept-alive one finishes its first request at once.
  ASSERT_TRUE(send_all(kept, "HEAD /metrics HTTP/1.1\r\n\r\n"));
  std::string head;
  char buf[4096];
  while (head.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::recv(kept, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0);
    head.append(buf, size_t(n));
  }
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  // A scrape answered is a turn of the server's loop after the bytes above were sent: it has
  // read them (and, after a step of the clock, looked at every client's deadline).
  ASSERT_EQ(scrape(port).status, "HTTP/1.1 200 OK");

  clock.advance(3000);
  ASSERT_TRUE(send_all(slow, "X-A: 1\r\n"));
  ASSERT_TRUE(send_all(kept, "GET /met"));  // its second request starts now
  ASSERT_EQ(scrape(port).status, "HTTP/1.1 200 OK");
  clock.advance(3000);  // 6 s since slow came, 3 s since its last byte; 3 s into kept's second request
  EXPECT_EQ(read_to_close(slow).rfind("HTTP/1.1 408 Request Timeout\r\n", 0), 0u);
  EXPECT_EQ(server_->requests_timed_out(), 1u);
  ASSERT_EQ(scrape(port).status, "HTTP/1.1 200 OK");
  EXPECT_FALSE(closed_by_server(kept));
  ASSERT_TRUE(send_all(kept, "rics HTTP/1.1\r\nConnection: close\r\n\r\n"));
  EXPECT_EQ(read_to_close(kept).rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  EXPECT_EQ(server_->requests_timed_out(), 1u);
  ::close(slow);
  ::close(kept);
}

TEST_F(Metrics, ListensOnIpv6Loopback) {
  start({}, 1, "[::1]:0");
  if (start_error_.find("Cannot assign") != std::string::npos || start_error_.find("not supported") != std::string::npos)
    GTEST_SKIP() << "no IPv6 loopback here: " << start_error_;
  ASSERT_EQ(start_error_, "");
  EXPECT_EQ(server_->address(), "[::1]:" + std::to_string(server_->port()));
  const Scrape s = scrape(server_->port(), true);
  EXPECT_EQ(s.status, "HTTP/1.1 200 OK");
  EXPECT_NE(s.body.find("# TYPE nvtcp_namespace_reads_total counter\n"), std::string::npos);
}

TEST_F(Metrics, AnAddressThatIsNotAddrPortIsRefused) {
  start({}, 1, "localhost");
  EXPECT_NE(start_error_, "");
  start({}, 1, "127.0.0.1:99999");
  EXPECT_NE(start_error_, "");
}

}  // namespace
}  // namespace nvtcp::test::metrics_test

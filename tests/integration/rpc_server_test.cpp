// SPDX-License-Identifier: Apache-2.0
// The JSON-RPC server on its UNIX socket in front of a running target: requests framed as
// SPDK's rpc.py frames them, clients that misbehave (half a request, garbage, leaving
// mid-request, never reading), the socket's permissions and its life, and host access changed
// live (a host removed is refused at its next Connect, one added is let in).
#include <gtest/gtest.h>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "auth/keys.hpp"
#include "control/rpc_server.hpp"
#include "nvtcp/host.hpp"
#include "nvtcp/log.hpp"
#include "nvtcp/identify.hpp"
#include "control/target_methods.hpp"
#include "test_devices.hpp"
#include "test_target.hpp"

namespace nvtcp::test::rpc_server_test {
namespace {

using control::Json;

std::string temp_socket_path(const char* name) {
  return fmt::format("/tmp/nvtcp-rpc-test-{}-{}/{}", ::getpid(), name, "target.sock");
}

int connect_to(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.data(), path.size());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, const std::string& s) {
  ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), ssize_t(s.size()));
}

// Reads answers until n whole JSON texts have come (or 5 s, or the server closed).
std::vector<Json> read_answers(int fd, size_t n, bool* closed = nullptr) {
  control::JsonTextSplitter split(1 << 24);
  std::vector<Json> out;
  std::string text, why;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (out.size() < n && std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    ssize_t k = ::recv(fd, buf, sizeof(buf), 0);
    if (k <= 0) {
      if (closed) *closed = true;
      break;
    }
    split.feed(buf, size_t(k));
    while (split.next(text, why) == control::JsonTextSplitter::Next::Text) out.push_back(Json::parse(text));
  }
  return out;
}

// Whether the server has closed fd (reads end-of-file within 5 s).
bool closed_by_server(int fd) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    ssize_t k = ::recv(fd, buf, sizeof(buf), 0);
    if (k == 0) return true;
    if (k < 0) return errno != EAGAIN;
  }
  return false;
}

// As rpc.py 24.01 sends a request: pretty-printed, integer id, no newline after it.
std::string rpc_py_request(const std::string& method, int id, const Json& params = Json()) {
  Json req{{"jsonrpc", "2.0"}, {"method", method}, {"id", id}};
  if (!params.is_null()) req["params"] = params;
  return req.dump(2);
}

struct RpcFixture {
  RunningTarget t;
  control::Dispatcher methods;
  control::RpcServer server;
  std::string path;
  explicit RpcFixture(const char* name, control::RpcServerOptions o = {},
                      target::TargetConfig cfg = default_config(), target::DeviceFactory factory = {})
      : t(std::move(cfg), std::move(factory)), server(methods, o) {
    control::add_target_methods(methods, t.target(), "0.1.0");
    path = temp_socket_path(name);
    std::string err = server.start(path);
    if (!err.empty()) throw std::runtime_error(err);
  }
  ~RpcFixture() {
    server.stop();
    ::rmdir(path.substr(0, path.rfind('/')).c_str());
  }
  // The answer, or null when the server closed the connection first (one over max_clients,
  // while the server has not yet seen others go: a caller that waits for room retries).
  Json call(const std::string& method, const Json& params = Json()) {
    int fd = connect_to(path);
    if (fd < 0) return Json();
    const std::string request = rpc_py_request(method, 1, params);
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != ssize_t(request.size())) {
      ::close(fd);
      return Json();
    }
    auto a = read_answers(fd, 1);
    ::close(fd);
    return a.empty() ? Json() : a[0];
  }
  // nvmf_subsystem_add_listener of the target's own port; the answer's result.
  Json listen(const std::string& nqn) {
    const Json where{{"trtype", "TCP"}, {"traddr", "127.0.0.1"}, {"trsvcid", std::to_string(t.port())}};
    return call("nvmf_subsystem_add_listener", {{"nqn", nqn}, {"listen_address", where}})["result"];
  }
  // A host without keep-alive on nqn (null, and why in err, if it cannot connect).
  std::unique_ptr<host::Controller> connect_host(const std::string& nqn, std::string& err) {
    host::ControllerOptions o;
    o.kato_ms = 0;
    return host::Controller::connect(t.trid(nqn), o, err);
  }
};

TEST(RpcServer, AnswersRequestsBackToBackAndSplitAnywhereInOrder) {
  RpcFixture f("order");
  int fd = connect_to(f.path);
  ASSERT_GE(fd, 0);
  // Three requests in one write, then one more a byte at a time.
  send_all(fd, rpc_py_request("rpc_get_methods", 1) + rpc_py_request("spdk_get_version", 2) +
                   rpc_py_request("nvmf_get_subsystems", 3));
  const std::string last = rpc_py_request("nvmf_get_stats", 4);
  for (char c : last) send_all(fd, std::string(1, c));
  auto a = read_answers(fd, 4);
  ::close(fd);
  ASSERT_EQ(a.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a[size_t(i)]["id"], i + 1);
  const auto names = a[0]["result"].get<std::vector<std::string>>();
  for (const char* m : {"nvmf_get_subsystems", "nvmf_subsystem_add_host", "nvmf_subsystem_get_qpairs"})
    EXPECT_NE(std::find(names.begin(), names.end(), m), names.end()) << m;
  EXPECT_EQ(a[1]["result"]["version"], "nvtcp 0.1.0");
  ASSERT_EQ(a[2]["result"].size(), 2u);  // discovery, then the test subsystem
  EXPECT_EQ(a[2]["result"][0]["subtype"], "Discovery");
  EXPECT_EQ(a[2]["result"][1]["nqn"], kTestNqn);
  EXPECT_EQ(a[2]["result"][1]["namespaces"].size(), 3u);
  EXPECT_EQ(a[2]["result"][1]["listen_addresses"][0]["trsvcid"], std::to_string(f.t.port()));
  EXPECT_TRUE(a[3]["result"].contains("poll_groups"));
  EXPECT_EQ(f.server.requests(), 4u);
}

TEST(RpcServer, TheSocketIsTheOwnersOnlyAndGoesWithTheServer) {
  std::string path;
  {
    RpcFixture f("mode");
    path = f.path;
    struct stat st {};
    ASSERT_EQ(::lstat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    // A second server on the same path is refused while this one serves.
    control::Dispatcher d;
    control::RpcServer second(d);
    std::string err = second.start(path);
    EXPECT_NE(err.find("another process serves"), std::string::npos) << err;
  }
  struct stat st {};
  EXPECT_NE(::lstat(path.c_str(), &st), 0) << "the socket file outlived its server";
}

// Whoever may rename entries in the socket's directory can swap the socket for theirs: a directory
// of another user, or one others may write without the sticky bit, is refused; /tmp's kind
// (1777) is fine.
TEST(RpcServer, ASocketDirectoryAnotherUserCouldChangeIsRefused) {
  const std::string path = temp_socket_path("dirmode");
  const std::string dir = path.substr(0, path.rfind('/'));
  ::mkdir(dir.c_str(), 0700);
  control::Dispatcher d;
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  {
    control::RpcServer server(d);
    const std::string err = server.start(path);
    EXPECT_NE(err.find("writable by others and not sticky"), std::string::npos) << err;
  }
  ASSERT_EQ(::chmod(dir.c_str(), 01777), 0);
  {
    control::RpcServer server(d);
    EXPECT_EQ(server.start(path), "");
    struct stat st {};
    ASSERT_EQ(::lstat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  if (::geteuid() == 0 && ::chown(dir.c_str(), 54321, 54321) == 0) {
    control::RpcServer server(d);
    const std::string err = server.start(path);
    EXPECT_NE(err.find("belongs to uid 54321"), std::string::npos) << err;
    ASSERT_EQ(::chown(dir.c_str(), 0, 0), 0);
  }
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());
}

TEST(RpcServer, ASocketLeftByAProcessThatIsGoneIsReplaced) {
  const std::string path = temp_socket_path("stale");
  ::mkdir(path.substr(0, path.rfind('/')).c_str(), 0700);
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.data(), path.size());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ::close(fd);  // bound, never listened: what a killed process leaves
  control::Dispatcher d;
  control::RpcServer server(d);
  EXPECT_EQ(server.start(path), "");
  server.stop();
  // A file that is not a socket is never removed.
  FILE* file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fclose(file);
  control::RpcServer other(d);
  EXPECT_NE(other.start(path).find("not a socket"), std::string::npos);
  ::unlink(path.c_str());
  ::rmdir(path.substr(0, path.rfind('/')).c_str());
}

TEST(RpcServer, GarbageGetsAParseErrorAndTheConnectionClosesOthersGoOn) {
  RpcFixture f("garbage");
  int bad = connect_to(f.path);
  int good = connect_to(f.path);
  ASSERT_GE(bad, 0);
  ASSERT_GE(good, 0);
  send_all(bad, "this is not json");
  auto a = read_answers(bad, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0]["error"]["code"], control::kParseError);
  EXPECT_TRUE(a[0]["id"].is_null());
  EXPECT_TRUE(closed_by_server(bad));
  ::close(bad);
  // Valid JSON text that is not JSON inside (a bad token): Parse Error, and the stream goes on.
  send_all(good, "{\"jsonrpc\":\"2.0\",\"method\":nope}" + rpc_py_request("spdk_get_version", 9));
  a = read_answers(good, 2);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0]["error"]["code"], control::kParseError);
  EXPECT_EQ(a[1]["id"], 9);
  ::close(good);
}

TEST(RpcServer, ARequestOverTheLimitClosesThatClientOnly) {
  control::RpcServerOptions o;
  o.max_request_bytes = 4096;
  RpcFixture f("limit", o);
  int fd = connect_to(f.path);
  ASSERT_GE(fd, 0);
  std::string endless = "{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{\"a\":\"" + std::string(8192, 'a');
  send_all(fd, endless);
  auto a = read_answers(fd, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0]["error"]["code"], control::kParseError);
  EXPECT_TRUE(closed_by_server(fd));
  ::close(fd);
  EXPECT_EQ(f.call("spdk_get_version")["result"]["version"], "nvtcp 0.1.0");
}

TEST(RpcServer, AClientStuckMidRequestOrGoneMidRequestHoldsUpNoOther) {
  RpcFixture f("slow");
  int slow = connect_to(f.path);
  ASSERT_GE(slow, 0);
  send_all(slow, "{\"jsonrpc\":\"2.0\",\"method\":\"spdk_get_ver");  // and nothing more for now
  int gone = connect_to(f.path);
  send_all(gone, "{\"jsonrpc\":\"2.0\",\"me");
  ::close(gone);
  EXPECT_EQ(f.call("nvmf_get_subsystems")["result"].size(), 2u);
  send_all(slow, "sion\",\"id\":5}");
  auto a = read_answers(slow, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0]["id"], 5);
  ::close(slow);
}

TEST(RpcServer, ClientsOverTheLimitAreClosedAndTheRestServed) {
  control::RpcServerOptions o;
  o.max_clients = 2;
  RpcFixture f("clients", o);
  int a = connect_to(f.path), b = connect_to(f.path);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  send_all(a, rpc_py_request("spdk_get_version", 1));
  send_all(b, rpc_py_request("spdk_get_version", 2));
  ASSERT_EQ(read_answers(a, 1).size(), 1u);
  ASSERT_EQ(read_answers(b, 1).size(), 1u);
  int c = connect_to(f.path);  // the listen backlog takes it; the server closes it
  ASSERT_GE(c, 0);
  EXPECT_TRUE(closed_by_server(c));
  ::close(c);
  EXPECT_EQ(f.server.clients_refused(), 1u);
  ::close(a);
  ::close(b);
  EXPECT_TRUE(wait_for([&] { return f.call("spdk_get_version").contains("result"); }, 5000));
}

// Every slot held by clients that connected and sent nothing, or half a request, and hang: an
// orchestrator's call still gets in (it takes the slot of the client unfinished longest), and
// once the request deadline has passed on the server's clock the hung clients are told so and
// closed. A client that finished its request and keeps its connection for the next is never
// timed. The clock is the test's: nothing here waits for the deadline.
TEST(RpcServer, HungClientsInEverySlotKeepNoCallOut) {
  std::atomic<uint64_t> now_ms{1'000'000};
  control::RpcServerOptions o;
  o.max_clients = 16;
  o.clock = [&] { return now_ms.load(); };
  RpcFixture f("hung", o);
  int kept = connect_to(f.path);  // an orchestrator's connection, kept between requests
  ASSERT_GE(kept, 0);
  send_all(kept, rpc_py_request("spdk_get_version", 1));
  ASSERT_EQ(read_answers(kept, 1).size(), 1u);
  std::vector<int> hung;
  for (int i = 0; i < 15; ++i) {
    const int fd = connect_to(f.path);
    ASSERT_GE(fd, 0);
    if (i % 2) send_all(fd, "{\"jsonrpc\":\"2.0\",\"method\":\"nvmf_get_sub");
    hung.push_back(fd);
  }
  // Every slot is taken now (once the server has taken them all in: the call below retries).
  Json r;
  ASSERT_TRUE(wait_for([&] { return !(r = f.call("nvmf_subsystem_listener_set_ana_state_probe")).is_null(); }, 5000))
      << "a call could not get in past 16 hung clients";
  EXPECT_TRUE(r.contains("error")) << r.dump();  // an unknown method, answered: the call got in
  EXPECT_GE(f.server.clients_evicted(), 1u);
  // The deadline passes: the hung clients are answered and closed; the kept one is not.
  now_ms += 31'000;
  size_t closed = 0;
  for (int fd : hung) closed += closed_by_server(fd) ? 1 : 0;
  EXPECT_GE(closed, hung.size() - 1) << "hung clients outlived the request deadline";
  send_all(kept, rpc_py_request("spdk_get_version", 2));
  EXPECT_EQ(read_answers(kept, 1).size(), 1u) << "a kept connection between requests was closed";
  for (int fd : hung) ::close(fd);
  ::close(kept);
}

TEST(RpcServer, HostsAllowedAndRemovedLiveDecideTheNextConnect) {
  RpcFixture f("hosts");
  const std::string host = "nqn.2014-08.org.nvmexpress:uuid:2b9e1c7a-0d3f-4c55-9a61-7f00a1b2c3d4";
  host::ControllerOptions o;
  o.hostnqn = host;
  o.kato_ms = 0;
  o.io_queues = 1;
  std::string err;
  // Only listed hosts, and this one is not listed yet.
  EXPECT_EQ(f.call("nvmf_subsystem_allow_any_host", {{"nqn", kTestNqn}, {"allow_any_host", false}})["result"], true);
  EXPECT_EQ(host::Controller::connect(f.t.trid(), o, err), nullptr);
  Json r = f.call("nvmf_subsystem_add_host", {{"nqn", kTestNqn}, {"host", host}});
  EXPECT_EQ(r["result"], true) << r.dump();
  auto ctrl = host::Controller::connect(f.t.trid(), o, err);
  ASSERT_NE(ctrl, nullptr) << err;
  Json subs = f.call("nvmf_get_subsystems", {{"nqn", kTestNqn}})["result"];
  ASSERT_EQ(subs.size(), 1u);
  EXPECT_EQ(subs[0]["allow_any_host"], false);
  EXPECT_EQ(subs[0]["hosts"], Json::array({Json{{"nqn", host}}}));
  Json ctrls = f.call("nvmf_subsystem_get_controllers", {{"nqn", kTestNqn}})["result"];
  ASSERT_EQ(ctrls.size(), 1u);
  EXPECT_EQ(ctrls[0]["hostnqn"], host);
  Json qpairs = f.call("nvmf_subsystem_get_qpairs", {{"nqn", kTestNqn}})["result"];
  ASSERT_GE(qpairs.size(), 1u);  // the admin queue (I/O queue pairs come when a thread asks)
  EXPECT_EQ(qpairs[0]["qid"], 0);
  for (const auto& q : qpairs) {
    EXPECT_EQ(q["cntlid"], ctrls[0]["cntlid"]);
    EXPECT_EQ(q["state"], "active");
    EXPECT_EQ(q["listen_address"]["trsvcid"], std::to_string(f.t.port()));
  }
  // Removed: its controller is torn down (its connections close) and its next Connect is refused.
  EXPECT_EQ(f.call("nvmf_subsystem_remove_host", {{"nqn", kTestNqn}, {"host", host}})["result"], true);
  EXPECT_TRUE(wait_for([&] { return f.call("nvmf_subsystem_get_controllers", {{"nqn", kTestNqn}})["result"].empty(); },
                       10000));
  EXPECT_EQ(host::Controller::connect(f.t.trid(), o, err), nullptr);
  ctrl.reset();
  EXPECT_EQ(f.call("nvmf_subsystem_remove_host", {{"nqn", kTestNqn}, {"host", host}})["error"]["code"],
            control::kInternalError);
  // Open to any host again.
  EXPECT_EQ(f.call("nvmf_subsystem_allow_any_host", {{"nqn", kTestNqn}, {"allow_any_host", true}})["result"], true);
  EXPECT_NE(host::Controller::connect(f.t.trid(), o, err), nullptr) << err;
}

TEST(RpcServer, NamesThatDoNotExistAndBadKeysAreErrorsThatChangeNothing) {
  RpcFixture f("names");
  EXPECT_EQ(f.call("nvmf_get_subsystems", {{"nqn", "nqn.2026-12.io.nvtcp:none"}})["error"]["code"],
            control::kNoSuchDevice);
  EXPECT_EQ(f.call("nvmf_subsystem_get_qpairs", {{"nqn", "nqn.2026-12.io.nvtcp:none"}})["error"]["code"],
            control::kInvalidParams);
  EXPECT_EQ(f.call("nvmf_subsystem_add_host", {{"nqn", kTestNqn}, {"host", "h"}, {"dhchap_key", "DHHC-1:01:bm90:"}})
                ["error"]["code"],
            control::kInvalidParams);
  Json err = f.call("nvmf_subsystem_add_host", {{"nqn", kTestNqn}, {"host", "h"}, {"psk", "NVMeTLSkey-1:01:secretbits:"}});
  EXPECT_EQ(err["error"]["code"], control::kInvalidParams);
  EXPECT_EQ(err.dump().find("secretbits"), std::string::npos) << "a key in an error: " << err.dump();
  EXPECT_TRUE(f.call("nvmf_get_subsystems", {{"nqn", kTestNqn}})["result"][0]["hosts"].empty());
  EXPECT_EQ(f.call("nvmf_create_transport", {{"trtype", "RDMA"}})["error"]["code"], control::kInvalidParams);
  EXPECT_EQ(f.call("nvmf_create_transport", {{"trtype", "TCP"}, {"zcopy", false}, {"no_srq", false}})["result"], true);
}

TEST(RpcServer, BdevsAndNamespacesAsRpcPySendsThem) {
  RpcFixture f("namespaces");
  // bdev_null_create Null0 64 4096 (rpc.py converts MiB to blocks), bdev_malloc_create 16 512.
  EXPECT_EQ(f.call("bdev_null_create", {{"name", "Null0"}, {"num_blocks", 16384}, {"block_size", 4096}})["result"],
            "Null0");
  EXPECT_EQ(f.call("bdev_malloc_create", {{"num_blocks", 32768}, {"block_size", 512}})["result"], "Malloc0");
  EXPECT_EQ(f.call("bdev_null_create", {{"name", "Null0"}, {"num_blocks", 1}, {"block_size", 512}})["error"]["code"],
            control::kExists);
  EXPECT_EQ(f.call("bdev_null_create", {{"name", "Odd"}, {"num_blocks", 8}, {"block_size", 1000}})["error"]["code"], -22);
  EXPECT_EQ(f.call("bdev_aio_create", {{"name", "Aio0"}, {"filename", "/nonexistent/x.img"}})["error"]["code"], -2);
  Json bdevs = f.call("bdev_get_bdevs", {{"name", "Null0"}})["result"];
  ASSERT_EQ(bdevs.size(), 1u);
  EXPECT_EQ(bdevs[0]["num_blocks"], 16384);
  EXPECT_EQ(bdevs[0]["claimed"], false);
  // nvmf_subsystem_add_ns NQN Null0 -n 9: the namespace is nested, the NSID comes back.
  EXPECT_EQ(f.call("nvmf_subsystem_add_ns", {{"nqn", kTestNqn}, {"namespace", {{"bdev_name", "Null0"}, {"nsid", 9}}}})
                ["result"],
            9);
  EXPECT_EQ(f.call("nvmf_subsystem_add_ns", {{"nqn", kTestNqn}, {"namespace", {{"bdev_name", "Malloc0"}}}})["result"], 4);
  EXPECT_EQ(f.call("nvmf_subsystem_add_ns", {{"nqn", kTestNqn}, {"bdev_name", "Malloc0"}})["error"]["code"],
            control::kInvalidParams);
  EXPECT_EQ(f.call("nvmf_subsystem_add_ns", {{"nqn", kTestNqn}, {"namespace", {{"bdev_name", "nope"}}}})["error"]["code"],
            control::kInvalidParams);
  Json nss = f.call("nvmf_get_subsystems", {{"nqn", kTestNqn}})["result"][0]["namespaces"];
  ASSERT_EQ(nss.size(), 5u);
  EXPECT_EQ(nss[3]["nsid"], 4);
  EXPECT_EQ(nss[3]["bdev_name"], "Malloc0");
  EXPECT_EQ(nss[4]["nsid"], 9);
  EXPECT_EQ(f.call("bdev_get_bdevs", {{"name", "Null0"}})["result"][0]["claimed"], true);
  // bdev_null_resize Null0 128: MiB, not converted by rpc.py.
  EXPECT_EQ(f.call("bdev_null_resize", {{"name", "Null0"}, {"new_size", 128}})["result"], true);
  EXPECT_EQ(f.call("bdev_get_bdevs", {{"name", "Null0"}})["result"][0]["num_blocks"], (128 << 20) / 4096);
  EXPECT_EQ(f.t.target().state().find_subsystem(kTestNqn)->find_namespace(9)->blocks.load(), (128u << 20) / 4096);
  EXPECT_EQ(f.call("bdev_null_resize", {{"name", "Malloc0"}, {"new_size", 128}})["error"]["code"], control::kNoSuchDevice);
  EXPECT_EQ(f.call("nvmf_subsystem_remove_ns", {{"nqn", kTestNqn}, {"nsid", 9}})["result"], true);
  EXPECT_EQ(f.call("nvmf_subsystem_remove_ns", {{"nqn", kTestNqn}, {"nsid", 9}})["error"]["code"], control::kInvalidParams);
  EXPECT_EQ(f.call("bdev_null_delete", {{"name", "Null0"}})["result"], true);
  EXPECT_EQ(f.call("bdev_null_delete", {{"name", "Null0"}})["error"]["code"], control::kNoSuchDevice);
  EXPECT_EQ(f.call("bdev_malloc_delete", {{"name", "Malloc0"}})["result"], true) << "its namespace is removed first";
  EXPECT_EQ(f.call("nvmf_get_subsystems", {{"nqn", kTestNqn}})["result"][0]["namespaces"].size(), 3u);
}

// rpc.py nvmf_subsystem_listener_set_ana_state NQN -t tcp -a ADDR -s PORT -n STATE [-g GROUP]:
// the listener's states show in nvmf_subsystem_get_listeners and save_config keeps ANA
// reporting and each namespace's group.
TEST(RpcServer, ListenerAnaStatesAsRpcPySetsThem) {
  target::TargetConfig cfg = default_config();
  cfg.subsystems[0].ana_reporting = true;
  cfg.subsystems[0].namespaces[2].anagrpid = 2;  // namespaces 2 and 3 share group 2
  RpcFixture f("ana", {}, cfg);
  const std::string port = std::to_string(f.t.port());
  auto set = [&](const std::string& state, std::optional<int> grp, const std::string& addr = "127.0.0.1") {
    Json p{{"nqn", kTestNqn},
           {"listen_address", {{"trtype", "tcp"}, {"traddr", addr}, {"trsvcid", port}, {"adrfam", "ipv4"}}},
           {"ana_state", state}};
    if (grp) p["anagrpid"] = *grp;
    return f.call("nvmf_subsystem_listener_set_ana_state", p);
  };
  EXPECT_EQ(set("inaccessible", 2)["result"], true);
  Json states = f.call("nvmf_subsystem_get_listeners", {{"nqn", kTestNqn}})["result"][0]["ana_states"];
  ASSERT_EQ(states.size(), 2u);  // groups 1 and 2 have namespaces
  EXPECT_EQ(states[0], (Json{{"ana_group", 1}, {"ana_state", "optimized"}}));
  EXPECT_EQ(states[1], (Json{{"ana_group", 2}, {"ana_state", "inaccessible"}}));
  EXPECT_EQ(set("non_optimized", std::nullopt)["result"], true);  // every group
  states = f.call("nvmf_subsystem_get_listeners", {{"nqn", kTestNqn}})["result"][0]["ana_states"];
  EXPECT_EQ(states[0]["ana_state"], "non_optimized");
  EXPECT_EQ(states[1]["ana_state"], "non_optimized");

  EXPECT_EQ(set("sideways", 1)["error"]["code"], control::kInvalidParams);
  EXPECT_EQ(set("optimized", 1, "127.0.0.9")["error"]["code"], control::kInvalidParams);
  EXPECT_EQ(set("optimized", 33)["error"]["code"], control::kInvalidParams);  // over ANAGRPMAX
  Json bad{{"nqn", kTestNqn}, {"listen_address", {{"trtype", "rdma"}, {"traddr", "127.0.0.1"}, {"trsvcid", port}}},
           {"ana_state", "optimized"}};
  EXPECT_EQ(f.call("nvmf_subsystem_listener_set_ana_state", bad)["error"]["code"], control::kInvalidParams);
  bad["listen_address"] = {{"traddr", "127.0.0.1"}, {"trsvcid", "70000"}};
  EXPECT_EQ(f.call("nvmf_subsystem_listener_set_ana_state", bad)["error"]["code"], control::kInvalidParams);

  Json saved = f.call("save_config")["result"];
  bool reporting = false, grouped = false;
  for (const auto& sub : saved["subsystems"])
    for (const auto& m : sub["config"]) {
      if (m["method"] == "nvmf_create_subsystem" && m["params"]["nqn"] == kTestNqn)
        reporting = m["params"]["ana_reporting"] == true;
      if (m["method"] == "nvmf_subsystem_add_ns" && m["params"]["namespace"]["nsid"] == 3)
        grouped = m["params"]["namespace"]["anagrpid"] == 2;
    }
  EXPECT_TRUE(reporting);
  EXPECT_TRUE(grouped);
  // The states set here are saved after the listener, one call per group, and a target made
  // from the saved configuration starts with them.
  std::vector<Json> ana_calls;
  for (const auto& sub : saved["subsystems"])
    for (const auto& m : sub["config"])
      if (m["method"] == "nvmf_subsystem_listener_set_ana_state") ana_calls.push_back(m["params"]);
  ASSERT_EQ(ana_calls.size(), 2u) << saved.dump();
  EXPECT_EQ(ana_calls[0]["nqn"], kTestNqn);
  EXPECT_EQ(ana_calls[0]["listen_address"]["trsvcid"], port);
  EXPECT_EQ(ana_calls[0]["ana_state"], "non_optimized");
  EXPECT_EQ(ana_calls[0]["anagrpid"], 1);
  EXPECT_EQ(ana_calls[1]["anagrpid"], 2);
  target::TargetConfig again;
  ASSERT_EQ(target::load_spdk_config(saved, again), "");
  ASSERT_EQ(again.subsystems.size(), 1u);
  ASSERT_EQ(again.subsystems[0].ana_states.size(), 2u);
  EXPECT_EQ(again.subsystems[0].ana_states[1].listener, "127.0.0.1:" + port);
  EXPECT_EQ(again.subsystems[0].ana_states[1].state, nvme::AnaState::NonOptimized);
  // The port is the first target's: give the second target a port of its own.
  for (auto& l : again.listeners) l.port = 0;
  again.subsystems[0].listeners.clear();
  again.subsystems[0].ana_states[0].listener = again.subsystems[0].ana_states[1].listener = "127.0.0.1:0";
  const target::TargetConfig loaded = again;
  ASSERT_EQ(target::finalize_config(again), "");
  RpcFixture restarted("ana-again", {}, again);
  states = restarted.call("nvmf_subsystem_get_listeners", {{"nqn", kTestNqn}})["result"][0]["ana_states"];
  ASSERT_EQ(states.size(), 2u) << states.dump();
  EXPECT_EQ(states[0]["ana_state"], "non_optimized");
  EXPECT_EQ(states[1]["ana_state"], "non_optimized");
  // A state for a listener the target does not have, or without ANA reporting, does not load.
  target::TargetConfig wrong = loaded;
  wrong.subsystems[0].ana_states[0].listener = "127.0.0.1:9";
  EXPECT_NE(target::finalize_config(wrong).find("not one of the target's listeners"), std::string::npos);
  wrong = loaded;
  wrong.subsystems[0].ana_reporting = false;
  EXPECT_NE(target::finalize_config(wrong).find("without ana_reporting"), std::string::npos);
  wrong = loaded;
  wrong.subsystems[0].ana_states[0].anagrpid = 99;
  EXPECT_NE(target::finalize_config(wrong).find("above its max_namespaces"), std::string::npos);
}

// The sequence an SPDK set-up script runs (rpc.py's shapes), then undone: a subsystem made,
// given a namespace and a listener of its own with an ANA state, listed, saved (and the saved
// configuration loads back into a target that serves it), then taken apart.
// The discovery service's own port is the discovery subsystem's listener for rpc.py: listed by
// nvmf_get_subsystems, written by save_config, and taken away with nvmf_subsystem_remove_listener
// (after which neither shows it).
TEST(RpcServer, TheDiscoveryPortIsListedSavedAndRemovedAsTheDiscoverySubsystemsListener) {
  target::TargetConfig cfg = default_config();
  cfg.discovery_port = unused_port();
  RpcFixture f("discovery-port", {}, cfg);
  const std::string port = std::to_string(f.t.target().discovery_port());
  ASSERT_NE(port, "0");
  auto discovery_listens_on_it = [&] {
    const Json all = f.call("nvmf_get_subsystems");  // held: the loop walks into it
    for (const auto& s : all["result"])
      if (s["nqn"] == nvme::kDiscoveryNqn)
        for (const auto& a : s["listen_addresses"])
          if (a["trsvcid"] == port) return true;
    return false;
  };
  auto saved = [&] {
    const std::string text = f.call("save_config")["result"].dump();
    return text.find("\"trsvcid\":\"" + port + "\"") != std::string::npos;
  };
  EXPECT_TRUE(discovery_listens_on_it());
  EXPECT_TRUE(saved());
  const Json where{{"trtype", "TCP"}, {"adrfam", "IPv4"}, {"traddr", "127.0.0.1"}, {"trsvcid", port}};
  EXPECT_EQ(f.call("nvmf_subsystem_remove_listener", {{"nqn", nvme::kDiscoveryNqn}, {"listen_address", where}})["result"],
            true);
  EXPECT_FALSE(discovery_listens_on_it());
  EXPECT_FALSE(saved()) << "save_config still writes the discovery port taken away";
  EXPECT_EQ(f.call("nvmf_subsystem_remove_listener", {{"nqn", nvme::kDiscoveryNqn}, {"listen_address", where}})["error"]["code"],
            control::kInvalidParams)
      << "removing twice";
}

// A subsystem deleted with its listener still added: the port closes with it (as SPDK's does
// once no subsystem listens on it), so neither the discovery log nor a connect finds a port that
// save_config no longer names. A listener another subsystem still uses stays.
TEST(RpcServer, DeletingASubsystemClosesTheListenersOnlyItUsed) {
  RpcFixture f("delete-listener");
  auto address = [](const std::string& port) {
    return Json{{"trtype", "TCP"}, {"adrfam", "IPv4"}, {"traddr", "127.0.0.1"}, {"trsvcid", port}};
  };
  const std::string a = "nqn.2016-06.io.spdk:cnode-a", b = "nqn.2016-06.io.spdk:cnode-b";
  for (const std::string& nqn : {a, b})
    ASSERT_EQ(f.call("nvmf_create_subsystem", {{"nqn", nqn}, {"allow_any_host", true}})["result"], true);
  ASSERT_EQ(f.call("nvmf_subsystem_add_listener", {{"nqn", a}, {"listen_address", address("0")}})["result"], true);
  const std::string own = f.call("nvmf_subsystem_get_listeners", {{"nqn", a}})["result"][0]["address"]["trsvcid"];
  ASSERT_EQ(f.call("nvmf_subsystem_add_listener", {{"nqn", a}, {"listen_address", address("0")}})["result"], true);
  Json two = f.call("nvmf_subsystem_get_listeners", {{"nqn", a}})["result"];
  ASSERT_EQ(two.size(), 2u);
  const std::string shared = two[0]["address"]["trsvcid"] == own ? two[1]["address"]["trsvcid"] : two[0]["address"]["trsvcid"];
  ASSERT_EQ(f.call("nvmf_subsystem_add_listener", {{"nqn", b}, {"listen_address", address(shared)}})["result"], true);
  ASSERT_TRUE(tcp_connects(uint16_t(std::stoul(own))));

  ASSERT_EQ(f.call("nvmf_delete_subsystem", {{"nqn", a}})["result"], true);
  EXPECT_FALSE(tcp_connects(uint16_t(std::stoul(own)))) << "the port only the deleted subsystem used is still open";
  EXPECT_TRUE(tcp_connects(uint16_t(std::stoul(shared)))) << "the port another subsystem uses was closed";
  const std::string saved = f.call("save_config")["result"].dump();
  EXPECT_EQ(saved.find("\"trsvcid\": \"" + own + "\""), std::string::npos);
  Json listed = f.call("nvmf_subsystem_get_listeners", {{"nqn", b}})["result"];
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["address"]["trsvcid"], shared);
}

// NQNs and names are checked as the spec bounds them and as text that goes into logs and
// listings: control characters, invalid UTF-8 and lengths past the limit are refused.
TEST(RpcServer, NqnsAndNamesWithControlCharactersOrPastTheirLengthAreRefused) {
  RpcFixture f("names");
  for (const std::string& nqn : {std::string("nqn.2026-12.io.nvtcp:a\n\x1b[2J"), std::string("nqn.2026-12.io.nvtcp:\xc2\x9b"),
                                 std::string("nqn.2026-12.io.nvtcp:") + std::string(210, 'x')})
    EXPECT_EQ(f.call("nvmf_create_subsystem", {{"nqn", nqn}})["error"]["code"], control::kInvalidParams) << nqn.size();
  EXPECT_EQ(f.call("nvmf_create_subsystem", {{"nqn", "nqn.2026-12.io.nvtcp:caf\xc3\xa9"}})["result"], true)
      << "UTF-8 text is an NQN";
  EXPECT_EQ(f.call("nvmf_subsystem_add_host", {{"nqn", kTestNqn}, {"host", "nqn.2026-12.io.nvtcp:h\x1b]0;x\x07"}})
                ["error"]["code"],
            control::kInvalidParams);
  EXPECT_TRUE(f.call("bdev_malloc_create", {{"name", std::string(70000, 'm')}, {"num_blocks", 16}, {"block_size", 512}})
                  .contains("error"));
  EXPECT_TRUE(f.call("bdev_malloc_create", {{"name", "M\r1"}, {"num_blocks", 16}, {"block_size", 512}}).contains("error"));
  EXPECT_EQ(f.call("bdev_malloc_create", {{"name", std::string(255, 'm')}, {"num_blocks", 16}, {"block_size", 512}})["result"],
            std::string(255, 'm'));
}

TEST(RpcServer, SubsystemsAndListenersMadeAndTakenAwayAsRpcPySendsThem) {
  RpcFixture f("subsystems");
  const std::string nqn = "nqn.2016-06.io.spdk:cnode1";
  auto address = [](const std::string& port) {
    return Json{{"trtype", "TCP"}, {"adrfam", "IPv4"}, {"traddr", "127.0.0.1"}, {"trsvcid", port}};
  };
  EXPECT_EQ(f.call("nvmf_create_subsystem", {{"nqn", nqn}, {"serial_number", "SPDK00000000000001"},
                                             {"model_number", "SPDK bdev Controller"}, {"allow_any_host", true},
                                             {"max_namespaces", 0}, {"ana_reporting", true}, {"min_cntlid", 1},
                                             {"max_cntlid", 65519}, {"max_discard_size_kib", 0},
                                             {"max_write_zeroes_size_kib", 0}})["result"],
            true);
  EXPECT_EQ(f.call("nvmf_create_subsystem", {{"nqn", nqn}})["error"]["code"], control::kInvalidParams) << "twice";
  EXPECT_EQ(f.call("nvmf_create_subsystem", {{"nqn", "x"}})["error"]["code"], control::kInvalidParams);
  for (const Json& range : {Json{{"min_cntlid", 9}, {"max_cntlid", 7}}, Json{{"min_cntlid", 0}},
                            Json{{"max_cntlid", 65520}}, Json{{"min_cntlid", 65520}, {"max_cntlid", 65520}}}) {
    Json p = range;
    p["nqn"] = "nqn.2026-12.io.nvtcp:s";
    EXPECT_EQ(f.call("nvmf_create_subsystem", p)["error"]["code"], control::kInvalidParams) << range;
  }
  EXPECT_EQ(f.call("nvmf_create_subsystem", {{"nqn", "nqn.2026-12.io.nvtcp:s"}, {"serial_number", 5}})["error"]["code"],
            control::kInvalidParams);
  EXPECT_EQ(f.call("bdev_malloc_create", {{"name", "Malloc1"}, {"num_blocks", 16384}, {"block_size", 512}})["result"],
            "Malloc1");
  EXPECT_EQ(f.call("nvmf_subsystem_add_ns", {{"nqn", nqn}, {"namespace", {{"bdev_name", "Malloc1"}}}})["result"], 1);

  // A listener of its own, on a port the target picks (rpc.py would name one).
  EXPECT_EQ(f.call("nvmf_subsystem_add_listener", {{"nqn", nqn}, {"listen_address", address("0")},
                                                   {"secure_channel", false}, {"ana_state", "non_optimized"}})["result"],
            true);
  Json listeners = f.call("nvmf_subsystem_get_listeners", {{"nqn", nqn}})["result"];
  ASSERT_EQ(listeners.size(), 1u);
  const std::string port = listeners[0]["address"]["trsvcid"];
  EXPECT_NE(port, std::to_string(f.t.port())) << "a listener of its own, not the target's first";
  EXPECT_EQ(listeners[0]["ana_states"][0]["ana_state"], "non_optimized");
  EXPECT_EQ(f.call("nvmf_subsystem_add_listener", {{"nqn", nqn}, {"listen_address", address("70000")}})["error"]["code"],
            control::kInvalidParams);
  EXPECT_EQ(f.call("nvmf_subsystem_add_listener", {{"nqn", "nqn.2026-12.io.nvtcp:none"}, {"listen_address", address(port)}})
                ["error"]["code"],
            control::kInvalidParams);
  std::string err;
  host::TransportId trid = f.t.trid(nqn);
  trid.trsvcid = uint16_t(std::stoul(port));
  host::ControllerOptions o;
  o.kato_ms = 0;
  EXPECT_TRUE(host::Controller::connect(trid, o, err)) << err;
  EXPECT_FALSE(host::Controller::connect(f.t.trid(nqn), o, err)) << "reachable through a listener not added to it";

  Json subs = f.call("nvmf_get_subsystems", {{"nqn", nqn}})["result"];
  ASSERT_EQ(subs.size(), 1u);
  EXPECT_EQ(subs[0]["serial_number"], "SPDK00000000000001");
  EXPECT_EQ(subs[0]["listen_addresses"].size(), 1u);
  EXPECT_EQ(subs[0]["namespaces"].size(), 1u);

  // What save_config writes makes the same target again.
  Json saved = f.call("save_config")["result"];
  target::TargetConfig again;
  ASSERT_EQ(target::load_spdk_config(saved, again), "");
  ASSERT_EQ(target::finalize_config(again), "");
  const auto made = std::find_if(again.subsystems.begin(), again.subsystems.end(), [&](auto& s) { return s.nqn == nqn; });
  ASSERT_NE(made, again.subsystems.end());
  EXPECT_EQ(made->listeners, std::vector<std::string>{"127.0.0.1:" + port});
  EXPECT_EQ(made->namespaces.size(), 1u);
  EXPECT_TRUE(made->ana_reporting);

  EXPECT_EQ(f.call("nvmf_subsystem_remove_listener", {{"nqn", nqn}, {"listen_address", address(port)}})["result"], true);
  EXPECT_EQ(f.call("nvmf_subsystem_remove_listener", {{"nqn", nqn}, {"listen_address", address(port)}})["error"]["code"],
            control::kInvalidParams);
  EXPECT_EQ(f.call("nvmf_delete_subsystem", {{"nqn", nqn}})["result"], true);
  EXPECT_EQ(f.call("nvmf_delete_subsystem", {{"nqn", nqn}})["error"]["code"], control::kInvalidParams);
  EXPECT_EQ(f.call("nvmf_get_subsystems", {{"nqn", nqn}})["error"]["code"], control::kNoSuchDevice);
  Json bdevs = f.call("bdev_get_bdevs", {{"name", "Malloc1"}})["result"];
  ASSERT_EQ(bdevs.size(), 1u) << "the bdev outlives the subsystem, free again";
  EXPECT_EQ(f.call("bdev_malloc_delete", {{"name", "Malloc1"}})["result"], true);
  EXPECT_EQ(f.call("nvmf_get_subsystems")["result"].size(), 2u) << "the discovery subsystem and the first one";
}

// Two gateways serving one subsystem NQN each hand out their own controller IDs (ceph-nvmeof
// gives each a range), so that a host with a path to each never sees one CNTLID twice: the
// range is used round robin, a full range refuses the Connect, and save_config keeps it.
TEST(RpcServer, ASubsystemHandsOutControllerIdsFromItsOwnRange) {
  RpcFixture f("cntlid");
  const std::string nqn = "nqn.2016-06.io.spdk:gw";
  ASSERT_EQ(f.call("nvmf_create_subsystem", {{"nqn", nqn}, {"allow_any_host", true}, {"min_cntlid", 2049},
                                             {"max_cntlid", 2050}})["result"],
            true);
  ASSERT_EQ(f.call("bdev_null_create", {{"name", "Null7"}, {"num_blocks", 1024}, {"block_size", 512}})["result"], "Null7");
  // What nvtcp cannot do is refused, never taken without effect: reservations would not persist.
  EXPECT_EQ(f.call("nvmf_subsystem_add_ns", {{"nqn", nqn}, {"namespace", {{"bdev_name", "Null7"}, {"ptpl_file", "/p.json"}}}})
                ["error"]["code"],
            control::kInvalidParams);
  ASSERT_EQ(f.call("nvmf_subsystem_add_ns", {{"nqn", nqn}, {"namespace", {{"bdev_name", "Null7"}, {"no_auto_visible", false}}}})
                ["result"],
            1);
  ASSERT_EQ(f.call("nvmf_subsystem_add_listener",
                   {{"nqn", nqn},
                    {"listen_address",
                     {{"trtype", "TCP"}, {"traddr", "127.0.0.1"}, {"trsvcid", std::to_string(f.t.port())}}}})["result"],
            true);
  Json sub = f.call("nvmf_get_subsystems", {{"nqn", nqn}})["result"][0];
  EXPECT_EQ(sub["min_cntlid"], 2049);
  EXPECT_EQ(sub["max_cntlid"], 2050);

  host::ControllerOptions o;
  o.kato_ms = 0;
  std::string err;
  auto a = host::Controller::connect(f.t.trid(nqn), o, err);
  ASSERT_TRUE(a) << err;
  auto b = host::Controller::connect(f.t.trid(nqn), o, err);
  ASSERT_TRUE(b) << err;
  EXPECT_EQ(a->cntlid(), 2049);
  EXPECT_EQ(b->cntlid(), 2050);
  EXPECT_FALSE(host::Controller::connect(f.t.trid(nqn), o, err)) << "a third controller in a range of two";
  a.reset();  // its ID free again, and the next Connect is given it
  std::unique_ptr<host::Controller> c;
  for (int i = 0; i < 200 && !c; ++i) {  // the target lets the ID go once it sees the connection close
    c = host::Controller::connect(f.t.trid(nqn), o, err);
    if (!c) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(c) << err;
  EXPECT_EQ(c->cntlid(), 2049);

  target::TargetConfig again;
  ASSERT_EQ(target::load_spdk_config(f.call("save_config")["result"], again), "");
  ASSERT_EQ(target::finalize_config(again), "");
  const auto saved = std::find_if(again.subsystems.begin(), again.subsystems.end(), [&](auto& s) { return s.nqn == nqn; });
  ASSERT_NE(saved, again.subsystems.end());
  EXPECT_EQ(saved->min_cntlid, 2049);
  EXPECT_EQ(saved->max_cntlid, 2050);
}

// nvmf_subsystem_set_ns_ana_group moves a namespace to another ANA group live: a connected host
// finds it under the new group in the ANA log (with a new CHGCNT) and in Identify Namespace, and
// the group's state through the listener applies to its I/O at once. SPDK's checks: a group from
// 1 to max_namespaces, a namespace that exists.
TEST(RpcServer, ANamespaceMovesToAnotherAnaGroupLive) {
  RpcFixture f("ana-group");
  const std::string nqn = "nqn.2016-06.io.spdk:ana";
  ASSERT_EQ(f.call("nvmf_create_subsystem", {{"nqn", nqn}, {"allow_any_host", true}, {"ana_reporting", true},
                                             {"max_namespaces", 4}})["result"],
            true);
  ASSERT_EQ(f.call("bdev_null_create", {{"name", "Null8"}, {"num_blocks", 1024}, {"block_size", 512}})["result"], "Null8");
  ASSERT_EQ(f.call("nvmf_subsystem_add_ns", {{"nqn", nqn}, {"namespace", {{"bdev_name", "Null8"}, {"anagrpid", 1}}}})
                ["result"],
            1);
  ASSERT_EQ(f.listen(nqn), true);
  // Group 2 is inaccessible through this listener; group 1 (the namespace's) optimized.
  ASSERT_EQ(f.call("nvmf_subsystem_listener_set_ana_state",
                   {{"nqn", nqn},
                    {"listen_address", {{"trtype", "TCP"}, {"traddr", "127.0.0.1"}, {"trsvcid", std::to_string(f.t.port())}}},
                    {"ana_state", "inaccessible"},
                    {"anagrpid", 2}})["result"],
            true);
  std::string err;
  auto c = f.connect_host(nqn, err);
  ASSERT_TRUE(c) << err;
  auto qp = c->create_io_qpair(4, err);
  ASSERT_TRUE(qp) << err;
  std::vector<uint8_t> buf(512);
  auto read = [&] {
    return one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->read(1, 0, 1, buf.data(), cb, ctx); });
  };
  // The ANA log: the group that lists NSID 1, and CHGCNT.
  auto group_of_ns1 = [&](uint64_t& chgcnt) -> uint32_t {
    std::vector<uint8_t> log(4096, 0);
    if (!c->get_log_page(0x0C, 0, log.data(), uint32_t(log.size())).status.ok()) return 0;
    nvme::AnaLogHeader h;
    std::memcpy(&h, log.data(), sizeof(h));
    chgcnt = h.chgcnt;
    size_t off = sizeof(h);
    for (uint16_t g = 0; g < h.ngrps; ++g) {
      nvme::AnaGroupDescriptor d;
      std::memcpy(&d, log.data() + off, sizeof(d));
      off += sizeof(d);
      for (uint32_t i = 0; i < d.nnsids; ++i, off += 4)
        if (log[off] == 1) return d.anagrpid;
    }
    return 0;
  };
  uint64_t before = 0, after = 0;
  EXPECT_EQ(group_of_ns1(before), 1u);
  EXPECT_TRUE(read().ok());

  EXPECT_EQ(f.call("nvmf_subsystem_set_ns_ana_group", {{"nqn", nqn}, {"nsid", 1}, {"anagrpid", 0}})["error"]["code"],
            control::kInvalidParams);
  EXPECT_EQ(f.call("nvmf_subsystem_set_ns_ana_group", {{"nqn", nqn}, {"nsid", 1}, {"anagrpid", 5}})["error"]["code"],
            control::kInvalidParams) << "above max_namespaces";
  EXPECT_EQ(f.call("nvmf_subsystem_set_ns_ana_group", {{"nqn", nqn}, {"nsid", 3}, {"anagrpid", 2}})["error"]["code"],
            control::kInvalidParams) << "no namespace 3";
  ASSERT_EQ(f.call("nvmf_subsystem_set_ns_ana_group", {{"nqn", nqn}, {"nsid", 1}, {"anagrpid", 2}})["result"], true);
  EXPECT_EQ(group_of_ns1(after), 2u);
  EXPECT_GT(after, before) << "CHGCNT";
  EXPECT_EQ(read(), nvme::sc::AnaInaccessible) << "its new group's state applies to its I/O";
  std::vector<uint8_t> id(4096, 0);
  ASSERT_TRUE(c->identify(0x00, 1, id.data()).status.ok());
  EXPECT_EQ(reinterpret_cast<const nvme::IdentifyNamespace*>(id.data())->anagrpid, 2u);
  EXPECT_EQ(f.call("nvmf_get_subsystems", {{"nqn", nqn}})["result"][0]["namespaces"][0]["anagrpid"], 2);
}

// bdev_get_iostat in SPDK's shape, from what hosts' commands did: reads, writes, deallocations
// and copies with their bytes, latency sums and their shortest and longest; kept by the bdev
// when its namespace is removed; a bdev no namespace ever had shows zeros, an unknown one is No
// such device, per_channel is refused.
TEST(RpcServer, BdevIostatCountsWhatHostsDid) {
  RpcFixture f("iostat");
  const std::string nqn = "nqn.2016-06.io.spdk:iostat";
  ASSERT_EQ(f.call("nvmf_create_subsystem", {{"nqn", nqn}, {"allow_any_host", true}})["result"], true);
  ASSERT_EQ(f.call("bdev_malloc_create", {{"name", "Malloc3"}, {"num_blocks", 2048}, {"block_size", 512}})["result"],
            "Malloc3");
  ASSERT_EQ(f.call("bdev_null_create", {{"name", "Idle0"}, {"num_blocks", 1024}, {"block_size", 512}})["result"], "Idle0");
  ASSERT_EQ(f.call("nvmf_subsystem_add_ns", {{"nqn", nqn}, {"namespace", {{"bdev_name", "Malloc3"}}}})["result"], 1);
  ASSERT_EQ(f.listen(nqn), true);
  std::string err;
  auto c = f.connect_host(nqn, err);
  ASSERT_TRUE(c) << err;
  auto qp = c->create_io_qpair(4, err);
  ASSERT_TRUE(qp) << err;
  std::vector<uint8_t> buf(4096, 0x5A);
  auto run = [&](const std::function<int(host::CompletionFn, void*)>& submit) { EXPECT_TRUE(one_command(*qp, submit).ok()); };
  for (int i = 0; i < 3; ++i)
    run([&](host::CompletionFn cb, void* ctx) { return qp->write(1, uint64_t(i) * 8, 8, buf.data(), cb, ctx); });
  for (int i = 0; i < 2; ++i)
    run([&](host::CompletionFn cb, void* ctx) { return qp->read(1, 0, 2, buf.data(), cb, ctx); });
  nvme::DsmRange trim{0, 16, 100};  // 16 blocks from LBA 100
  run([&](host::CompletionFn cb, void* ctx) { return qp->deallocate(1, &trim, 1, cb, ctx); });
  nvme::CopySourceRange src{};
  src.slba = 0;
  src.nlb = 3;  // 4 blocks, to LBA 500
  nvme::Sqe copy{};
  copy.opc = uint8_t(nvme::IoOpcode::Copy);
  copy.nsid = 1;
  copy.cdw10 = 500;
  std::memcpy(buf.data(), &src, sizeof(src));
  run([&](host::CompletionFn cb, void* ctx) { return qp->submit(copy, buf.data(), sizeof(src), true, cb, ctx); });

  // Counted as each response leaves: a moment after the host saw it.
  Json st;
  ASSERT_TRUE(wait_for([&] {
    st = f.call("bdev_get_iostat", {{"name", "Malloc3"}})["result"];
    return st["bdevs"][0]["num_copy_ops"] == 1;
  }, 5000)) << st.dump();
  EXPECT_EQ(st["tick_rate"], 1000000000ull);
  EXPECT_GT(st["ticks"].get<uint64_t>(), 0u);
  const Json& b = st["bdevs"][0];
  EXPECT_EQ(b["name"], "Malloc3");
  EXPECT_EQ(b["num_write_ops"], 3);
  EXPECT_EQ(b["bytes_written"], 3 * 4096);
  EXPECT_EQ(b["num_read_ops"], 2);
  EXPECT_EQ(b["bytes_read"], 2 * 1024);
  EXPECT_EQ(b["num_unmap_ops"], 1);
  EXPECT_EQ(b["bytes_unmapped"], 16 * 512);
  EXPECT_EQ(b["bytes_copied"], 4 * 512);
  for (const char* kind : {"read", "write", "unmap", "copy"}) {
    const uint64_t sum = b[fmt::format("{}_latency_ticks", kind)], lo = b[fmt::format("min_{}_latency_ticks", kind)],
                   hi = b[fmt::format("max_{}_latency_ticks", kind)];
    EXPECT_LE(lo, hi) << kind;
    EXPECT_LE(hi, sum) << kind;
  }
  EXPECT_EQ(b["io_error"], Json::object());

  // The bdev keeps its counts when its namespace goes, and counts on in the next one.
  ASSERT_EQ(f.call("nvmf_subsystem_remove_ns", {{"nqn", nqn}, {"nsid", 1}})["result"], true);
  Json kept = f.call("bdev_get_iostat", {{"name", "Malloc3"}})["result"]["bdevs"][0];
  EXPECT_EQ(kept["num_write_ops"], 3) << kept.dump();
  EXPECT_EQ(kept["num_read_ops"], 2);
  EXPECT_EQ(kept["num_copy_ops"], 1);
  EXPECT_EQ(kept["max_write_latency_ticks"], b["max_write_latency_ticks"]);
  auto host_lists_1 = [&] {
    const auto active = c->active_namespaces();
    return std::find(active.begin(), active.end(), 1u) != active.end();
  };
  ASSERT_TRUE(wait_for([&] { return !host_lists_1(); }, 5000)) << "the host did not see the namespace go";
  ASSERT_EQ(f.call("nvmf_subsystem_add_ns", {{"nqn", nqn}, {"namespace", {{"bdev_name", "Malloc3"}}}})["result"], 1);
  ASSERT_TRUE(wait_for(host_lists_1, 5000)) << "the host did not see the namespace come back";
  run([&](host::CompletionFn cb, void* ctx) { return qp->write(1, 0, 8, buf.data(), cb, ctx); });
  ASSERT_TRUE(wait_for([&] {
    kept = f.call("bdev_get_iostat", {{"name", "Malloc3"}})["result"]["bdevs"][0];
    return kept["num_write_ops"] == 4;
  }, 5000)) << kept.dump();
  EXPECT_EQ(kept["bytes_written"], 4 * 4096);
  EXPECT_EQ(kept["num_read_ops"], 2);
  EXPECT_LE(kept["min_write_latency_ticks"].get<uint64_t>(), b["min_write_latency_ticks"].get<uint64_t>());

  Json idle = f.call("bdev_get_iostat", {{"name", "Idle0"}})["result"]["bdevs"][0];
  EXPECT_EQ(idle["num_read_ops"], 0);
  EXPECT_EQ(idle["max_read_latency_ticks"], 0);
  EXPECT_EQ(f.call("bdev_get_iostat")["result"]["bdevs"].size(), f.call("bdev_get_bdevs")["result"].size())
      << "every bdev";
  EXPECT_EQ(f.call("bdev_get_iostat", {{"name", "nope"}})["error"]["code"], control::kNoSuchDevice);
  EXPECT_EQ(f.call("bdev_get_iostat", {{"per_channel", true}})["error"]["code"], -22);
}

// thread_get_stats in SPDK's shape: one thread per reactor, named as nvmf_get_stats names its poll
// group; busy and idle add up to the time since the reactor started, and busy grows with work.
TEST(RpcServer, ThreadStatsShowEachReactorsBusyAndIdleTime) {
  target::TargetConfig cfg = default_config();
  cfg.cores = 2;
  RpcFixture f("threads", {}, cfg);
  auto sample = [&f] {
    Json st = f.call("thread_get_stats")["result"];
    EXPECT_EQ(st["tick_rate"], 1000000000ull);
    return st["threads"];
  };
  Json before = sample();
  ASSERT_EQ(before.size(), 2u);
  EXPECT_EQ(before[0]["name"], "nvmf_tgt_poll_group_0");
  EXPECT_EQ(before[1]["id"], 2);
  host::ControllerOptions o;
  o.kato_ms = 0;
  std::string err;
  auto c = host::Controller::connect(f.t.trid(), o, err);
  ASSERT_TRUE(c) << err;
  auto qp = c->create_io_qpair(4, err);
  ASSERT_TRUE(qp) << err;
  std::vector<uint8_t> buf(4096);
  for (int i = 0; i < 200; ++i)
    ASSERT_TRUE(one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->read(1, 0, 8, buf.data(), cb, ctx); }).ok());
  // Sampled by each reactor once a millisecond of its own turns: a later sample shows the work,
  // and each reactor's busy + idle (the time since it started) has grown. Waited for, not read
  // once: on a loaded machine a reactor with nothing to do may not have run since `before`.
  Json after;
  const auto total = [](const Json& t) { return t["busy"].get<uint64_t>() + t["idle"].get<uint64_t>(); };
  ASSERT_TRUE(wait_for([&] {
    after = sample();
    uint64_t b0 = 0, b1 = 0;
    bool every_clock_moved = true;
    for (size_t i = 0; i < 2; ++i) {
      b0 += before[i]["busy"].get<uint64_t>();
      b1 += after[i]["busy"].get<uint64_t>();
      every_clock_moved = every_clock_moved && total(after[i]) > total(before[i]);
    }
    return b1 > b0 && every_clock_moved;
  }, 5000)) << "no reactor got busier, or one's busy + idle did not grow: " << before.dump() << " then " << after.dump();
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(after[i]["active_pollers_count"], 1);
}

// bdev_set_qos_limit: SPDK's parameters and checks, shown by bdev_get_bdevs, kept by save_config,
// and enforced on the data path: with 1000 I/Os a second (one a millisecond) 64 reads at queue
// depth 16 wait for their turn (the command layer counts them into AwaitingQos) and all succeed;
// with the limit taken off none waits. No timing is asserted (QosLimiter's own test steps a clock).
TEST(RpcServer, BdevQosLimitsHoldCommandsBackAndAreSaved) {
  RpcFixture f("qos");
  const std::string nqn = "nqn.2016-06.io.spdk:qos";
  ASSERT_EQ(f.call("nvmf_create_subsystem", {{"nqn", nqn}, {"allow_any_host", true}})["result"], true);
  ASSERT_EQ(f.call("bdev_malloc_create", {{"name", "Malloc4"}, {"num_blocks", 2048}, {"block_size", 512}})["result"],
            "Malloc4");
  EXPECT_EQ(f.call("bdev_set_qos_limit", {{"name", "Malloc4"}})["error"]["code"], -22) << "no limit given";
  EXPECT_EQ(f.call("bdev_set_qos_limit", {{"name", "Malloc4"}, {"rw_ios_per_sec", 1500}})["error"]["code"], -22)
      << "not a multiple of 1000";
  EXPECT_EQ(f.call("bdev_set_qos_limit", {{"name", "nope"}, {"rw_ios_per_sec", 1000}})["error"]["code"],
            control::kNoSuchDevice);
  ASSERT_EQ(f.call("bdev_set_qos_limit", {{"name", "Malloc4"}, {"rw_ios_per_sec", 1000}})["result"], true);
  ASSERT_EQ(f.call("bdev_set_qos_limit", {{"name", "Malloc4"}, {"w_mbytes_per_sec", 50}})["result"], true);
  Json limits = f.call("bdev_get_bdevs", {{"name", "Malloc4"}})["result"][0]["assigned_rate_limits"];
  EXPECT_EQ(limits, (Json{{"rw_ios_per_sec", 1000}, {"rw_mbytes_per_sec", 0}, {"r_mbytes_per_sec", 0},
                          {"w_mbytes_per_sec", 50}}))
      << "a limit not given is left as it was";
  // Set before the namespace: it takes them with the bdev.
  ASSERT_EQ(f.call("nvmf_subsystem_add_ns", {{"nqn", nqn}, {"namespace", {{"bdev_name", "Malloc4"}}}})["result"], 1);
  ASSERT_EQ(f.listen(nqn), true);

  std::string err;
  auto c = f.connect_host(nqn, err);
  ASSERT_TRUE(c) << err;
  auto qp = c->create_io_qpair(16, err);
  ASSERT_TRUE(qp) << err;
  // 64 reads, 16 outstanding at a time.
  auto burst = [&] {
    std::vector<uint8_t> buf(16 * 512);
    struct Ctx {
      int done = 0, failed = 0;
    } ctx;
    auto cb = [](void* p, const host::Completion& cpl) {
      auto* x = static_cast<Ctx*>(p);
      ++x->done;
      if (!cpl.status.ok()) ++x->failed;
    };
    int issued = 0;
    while (ctx.done < 64) {
      while (issued < 64 && issued - ctx.done < 16 && qp->read(1, uint64_t(issued % 16), 1, buf.data() + (issued % 16) * 512, cb, &ctx) == 0)
        ++issued;
      qp->process_completions(1000);
    }
    return ctx.failed;
  };
  const auto waits = [&] { return f.t.target().command_entries()[size_t(target::Command::State::AwaitingQos)]; };
  const uint64_t before = waits();
  EXPECT_EQ(burst(), 0);
  const uint64_t held = waits() - before;
  EXPECT_GT(held, 0u) << "no read waited for the limit of one a millisecond";

  target::TargetConfig again;
  ASSERT_EQ(target::load_spdk_config(f.call("save_config")["result"], again), "");
  ASSERT_EQ(target::finalize_config(again), "");
  bool found = false;
  for (const auto& s : again.subsystems)
    for (const auto& n : s.namespaces)
      if (n.name == "Malloc4") {
        found = true;
        EXPECT_EQ(n.qos, (target::QosLimits{.rw_ios_per_sec = 1000, .w_mbytes_per_sec = 50}));
      }
  EXPECT_TRUE(found) << "save_config and its replay lost the namespace";

  ASSERT_EQ(f.call("bdev_set_qos_limit", {{"name", "Malloc4"}, {"rw_ios_per_sec", 0}, {"w_mbytes_per_sec", 0}})["result"],
            true);
  const uint64_t before_off = waits();
  EXPECT_EQ(burst(), 0);
  EXPECT_EQ(waits(), before_off) << "a read waited with the limits taken off";
}

// A Ceph configuration file that is a FIFO (or a key file that is a directory) is refused with
// its reason at once: librados would read it on the RPC server's thread and hold every other
// call until someone wrote to it.
TEST(RpcServer, ACephConfigurationThatIsNoRegularFileIsRefusedAtOnce) {
  RpcFixture f("fifo");
  const std::string dir = f.path.substr(0, f.path.rfind('/'));
  const std::string fifo = dir + "/ceph.conf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  ASSERT_EQ(f.call("bdev_rbd_register_cluster", {{"name", "fifo"}, {"config_file", fifo}})["result"], "fifo");
  ASSERT_EQ(f.call("bdev_rbd_register_cluster", {{"name", "dir"}, {"key_file", dir}})["result"], "dir");
  for (const char* cluster : {"fifo", "dir"}) {
    auto answer = std::async(std::launch::async, [&] {
      return f.call("bdev_rbd_create", {{"name", "Ceph0"}, {"pool_name", "rbd"}, {"rbd_name", "disk1"},
                                        {"block_size", 4096}, {"cluster_name", cluster}});
    });
    if (answer.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      ADD_FAILURE() << cluster << ": bdev_rbd_create still reads after 10 s";
      const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // let librados read its end
      if (w >= 0) ::close(w);
    }
    const Json a = answer.get();
    ASSERT_TRUE(a.contains("error")) << a.dump();
    EXPECT_NE(a["error"]["message"].get<std::string>().find("not a regular file"), std::string::npos) << a.dump();
  }
  ::unlink(fifo.c_str());
}

// Ceph clusters registered by name, as ceph-nvmeof registers one on each gateway before its
// images: an RBD bdev of the cluster connects with the cluster's settings (the device factory
// stands in for librbd here and sees them; ceph.rbd_failover does it against a real cluster),
// the cluster cannot go while a bdev uses it, its key never shows, and save_config registers
// it before the bdevs that need it.
TEST(RpcServer, CephClustersRegisteredByNameGiveTheirBdevsTheirSettings) {
  std::vector<backend::RbdSpec> opened;
  auto factory = [&opened](const target::NamespaceConfig& nc, std::string&) -> std::unique_ptr<backend::BlockDevice> {
    if (nc.type != "rbd") return nullptr;
    opened.push_back(nc.rbd);
    std::string err;
    return backend::make_ram(4 << 20, nc.block_size, 1, err);
  };
  constexpr int kEinval = -22;  // SPDK's bdev methods answer -errno
  RpcFixture f("clusters", {}, default_config(), factory);
  const Json cluster{{"name", "cluster_a"},
                     {"user_id", "gw"},
                     {"config_param", {{"mon_host", "v2:10.0.0.9:3300"}, {"key", "AQBsecret=="}}},
                     {"key_file", "/etc/ceph/gw.keyring"}};
  EXPECT_EQ(f.call("bdev_rbd_register_cluster", cluster)["result"], "cluster_a");
  EXPECT_EQ(f.call("bdev_rbd_register_cluster", cluster)["error"]["code"], control::kExists) << "twice";
  EXPECT_EQ(f.call("bdev_rbd_register_cluster", {{"name", "c"}, {"core_mask", "0x3"}})["error"]["code"],
            kEinval)
      << "core_mask taken without effect";
  Json info = f.call("bdev_rbd_get_clusters_info", {{"name", "cluster_a"}})["result"];
  EXPECT_EQ(info["cluster_name"], "cluster_a");
  EXPECT_EQ(info["user_id"], "gw");
  EXPECT_EQ(info["config_param"], (Json{{"mon_host", "v2:10.0.0.9:3300"}})) << "a key shown";
  EXPECT_EQ(f.call("bdev_rbd_get_clusters_info")["result"].size(), 1u);
  EXPECT_EQ(f.call("bdev_rbd_get_clusters_info", {{"name", "nope"}})["error"]["code"], control::kNoSuchDevice);

  EXPECT_EQ(f.call("bdev_rbd_create", {{"name", "Ceph0"}, {"pool_name", "rbd"}, {"rbd_name", "disk1"},
                                       {"block_size", 4096}, {"cluster_name", "nope"}})["error"]["code"],
            kEinval);
  EXPECT_EQ(f.call("bdev_rbd_create", {{"name", "Ceph0"}, {"pool_name", "rbd"}, {"rbd_name", "disk1"},
                                       {"block_size", 4096}, {"cluster_name", "cluster_a"}, {"user_id", "x"}})["error"]["code"],
            kEinval)
      << "a cluster and settings of its own";
  ASSERT_EQ(f.call("bdev_rbd_create", {{"name", "Ceph0"}, {"pool_name", "rbd"}, {"rbd_name", "disk1"},
                                       {"block_size", 4096}, {"cluster_name", "cluster_a"}})["result"],
            "Ceph0");
  ASSERT_EQ(opened.size(), 1u);
  EXPECT_EQ(opened[0].cluster_name, "cluster_a");
  EXPECT_EQ(opened[0].user, "gw");
  EXPECT_EQ(opened[0].key_file, "/etc/ceph/gw.keyring");
  EXPECT_EQ(opened[0].config.size(), 2u) << "the device connects with the cluster's options";
  EXPECT_EQ(f.call("bdev_rbd_unregister_cluster", {{"name", "cluster_a"}})["error"]["code"],
            kEinval)
      << "unregistered while Ceph0 uses it";

  Json saved = f.call("save_config")["result"];
  const std::string text = saved.dump();
  EXPECT_EQ(text.find("AQBsecret"), std::string::npos) << "save_config wrote a key";
  const size_t reg = text.find("bdev_rbd_register_cluster"), create = text.find("bdev_rbd_create");
  ASSERT_NE(reg, std::string::npos);
  ASSERT_NE(create, std::string::npos);
  EXPECT_LT(reg, create) << "the cluster must come before its images";
  target::TargetConfig again;
  ASSERT_EQ(target::load_spdk_config(saved, again), "");
  ASSERT_EQ(target::finalize_config(again), "");
  ASSERT_EQ(again.rbd_clusters.size(), 1u);
  EXPECT_EQ(again.rbd_clusters[0].user, "gw");
  ASSERT_EQ(again.bdevs.size(), 1u);
  EXPECT_EQ(again.bdevs[0].rbd.cluster_name, "cluster_a");

  EXPECT_EQ(f.call("bdev_rbd_delete", {{"name", "Ceph0"}})["result"], true);
  EXPECT_EQ(f.call("bdev_rbd_unregister_cluster", {{"name", "cluster_a"}})["result"], true);
  EXPECT_EQ(f.call("bdev_rbd_get_clusters_info")["result"], Json::array());
}

// SPDK's log methods as ceph-nvmeof calls them: nvtcp's one log level, set and read by both the
// print-level and the level methods in SPDK's names; no component flags, so any flag is unknown.
TEST(RpcServer, LogLevelsAsSpdkNamesThem) {
  RpcFixture f("log");
  const LogLevel before = log_level();
  EXPECT_EQ(f.call("log_set_print_level", {{"level", "DEBUG"}})["result"], true);
  EXPECT_EQ(log_level(), LogLevel::Debug);
  EXPECT_EQ(f.call("log_get_level")["result"], "DEBUG");
  EXPECT_EQ(f.call("log_set_level", {{"level", "warning"}})["result"], true);
  EXPECT_EQ(f.call("log_get_print_level")["result"], "WARNING");
  EXPECT_EQ(f.call("log_set_level", {{"level", "NOTICE"}})["result"], true);
  EXPECT_EQ(log_level(), LogLevel::Info);
  EXPECT_EQ(f.call("log_set_level", {{"level", "LOUD"}})["error"]["code"], control::kInvalidParams);
  EXPECT_EQ(log_level(), LogLevel::Info) << "a bad level changed it";
  EXPECT_EQ(f.call("log_get_flags")["result"], Json::object());
  EXPECT_EQ(f.call("log_set_flag", {{"flag", "nvmf_tcp"}})["error"]["code"], control::kInvalidParams);
  EXPECT_EQ(f.call("spdk_kill_instance", {{"sig_name", "SIGHUP"}})["error"]["code"], control::kInvalidParams);
  set_log_level(before);
}

TEST(RpcServer, AnaStateOfASubsystemWithoutAnaReportingIsRefused) {
  RpcFixture f("noana");
  Json p{{"nqn", kTestNqn},
         {"listen_address", {{"trtype", "TCP"}, {"traddr", "127.0.0.1"}, {"trsvcid", std::to_string(f.t.port())}}},
         {"ana_state", "inaccessible"}};
  EXPECT_EQ(f.call("nvmf_subsystem_listener_set_ana_state", p)["error"]["code"], control::kInvalidParams);
  EXPECT_EQ(f.call("nvmf_subsystem_get_listeners", {{"nqn", kTestNqn}})["result"][0]["ana_states"][0]["ana_state"],
            "optimized");
}

}  // namespace
}  // namespace nvtcp::test::rpc_server_test

namespace nvtcp::test::rpc_server_test {
namespace {

// What a host reads of a namespace's identity: NGUID and EUI-64 from Identify Namespace (CNS
// 00h), and the NGUID, EUI-64 and UUID descriptors (CNS 03h), each as hex.
struct SeenIds {
  std::string nguid, eui64, desc_nguid, desc_eui64, desc_uuid;
};
std::string hex_bytes(const uint8_t* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{:02x}", p[i]);
  return s;
}
SeenIds seen_ids(const host::TransportId& trid, uint32_t nsid) {
  SeenIds ids;
  std::string err;
  host::ControllerOptions o;
  o.kato_ms = 0;
  auto ctrl = host::Controller::connect(trid, o, err);  // a new one: no rescan in between to wait for
  EXPECT_TRUE(ctrl) << err;
  if (!ctrl) return ids;
  host::NamespaceInfo ni;
  EXPECT_TRUE(ctrl->namespace_info(nsid, ni, err)) << err;
  ids.nguid = hex_bytes(ni.nguid, 16);
  ids.eui64 = hex_bytes(ni.eui64, 8);
  alignas(8) uint8_t desc[nvme::kIdentifyLen];
  const host::Completion c = ctrl->identify(uint8_t(nvme::Cns::NamespaceDescriptors), nsid, desc);
  EXPECT_TRUE(c.status.ok()) << nvme::status_name(c.status);
  for (size_t off = 0; off + sizeof(nvme::NsIdDescriptorHeader) <= sizeof(desc);) {
    nvme::NsIdDescriptorHeader h;
    std::memcpy(&h, desc + off, sizeof(h));
    if (h.nidl == 0 || off + sizeof(h) + h.nidl > sizeof(desc)) break;
    const std::string v = hex_bytes(desc + off + sizeof(h), h.nidl);
    if (h.nidt == nvme::kNidtNguid) ids.desc_nguid = v;
    if (h.nidt == nvme::kNidtEui64) ids.desc_eui64 = v;
    if (h.nidt == nvme::kNidtUuid) ids.desc_uuid = v;
    off += sizeof(h) + h.nidl;
  }
  return ids;
}
std::string no_dashes(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), '-'), s.end());
  return s;
}

// A namespace shows the identity of its device, never of its slot: bdev A's namespace removed
// and bdev B added in its place (the freed NSID, nvmf_subsystem_add_ns's default) showed A's
// NGUID, EUI-64 and UUID, and a host that compares them to decide whether a namespace is still
// the one it knew (Linux does; so does the nvtcp host) took B for A and kept A's cached data.
TEST(RpcServer, ANamespaceShowsItsDevicesIdentityNotTheIdentityOfItsNsid) {
  RpcFixture f("identity");
  ASSERT_EQ(f.call("bdev_malloc_create", {{"name", "A"}, {"num_blocks", 2048}, {"block_size", 512}})["result"], "A");
  ASSERT_EQ(f.call("bdev_malloc_create", {{"name", "B"}, {"num_blocks", 2048}, {"block_size", 512}})["result"], "B");
  // Each bdev has a UUID of its own from its creation, listed as SPDK lists it.
  const Json a = f.call("bdev_get_bdevs", {{"name", "A"}})["result"][0];
  const Json b = f.call("bdev_get_bdevs", {{"name", "B"}})["result"][0];
  ASSERT_TRUE(a["uuid"].is_string()) << a.dump();
  ASSERT_TRUE(b["uuid"].is_string()) << b.dump();
  const std::string uuid_a = a["uuid"], uuid_b = b["uuid"];
  EXPECT_EQ(uuid_a.size(), 36u);
  EXPECT_NE(uuid_a, uuid_b);

  ASSERT_EQ(f.call("nvmf_subsystem_add_ns", {{"nqn", kTestNqn}, {"namespace", {{"bdev_name", "A"}}}})["result"], 4);
  const SeenIds as_a = seen_ids(f.t.trid(), 4);
  EXPECT_EQ(as_a.desc_uuid, no_dashes(uuid_a)) << "the namespace's UUID is its bdev's, as SPDK's";
  EXPECT_EQ(as_a.nguid, no_dashes(uuid_a));
  EXPECT_EQ(as_a.desc_nguid, as_a.nguid);
  EXPECT_EQ(as_a.desc_eui64, as_a.eui64);
  EXPECT_NE(as_a.eui64, "0000000000000000");

  ASSERT_EQ(f.call("nvmf_subsystem_remove_ns", {{"nqn", kTestNqn}, {"nsid", 4}})["result"], true);
  ASSERT_EQ(f.call("nvmf_subsystem_add_ns", {{"nqn", kTestNqn}, {"namespace", {{"bdev_name", "B"}}}})["result"], 4)
      << "B takes the NSID A left";
  const SeenIds as_b = seen_ids(f.t.trid(), 4);
  EXPECT_NE(as_b.nguid, as_a.nguid);
  EXPECT_NE(as_b.eui64, as_a.eui64);
  EXPECT_NE(as_b.desc_nguid, as_a.desc_nguid);
  EXPECT_NE(as_b.desc_eui64, as_a.desc_eui64);
  EXPECT_NE(as_b.desc_uuid, as_a.desc_uuid);
  EXPECT_EQ(as_b.desc_uuid, no_dashes(uuid_b));

  // A moved back to another NSID is still A, to a host.
  ASSERT_EQ(f.call("nvmf_subsystem_add_ns", {{"nqn", kTestNqn}, {"namespace", {{"bdev_name", "A"}, {"nsid", 6}}}})["result"],
            6);
  const SeenIds a_again = seen_ids(f.t.trid(), 6);
  EXPECT_EQ(a_again.nguid, as_a.nguid);
  EXPECT_EQ(a_again.eui64, as_a.eui64);
  EXPECT_EQ(a_again.desc_uuid, as_a.desc_uuid);

  // A UUID given to the bdev is its own (in any case, with or without dashes), and no second
  // bdev may take it; one given to the namespace is the namespace's.
  const std::string given = "6F1E2D3C-4B5A-4978-8695-A4B3C2D1E0F9";
  ASSERT_EQ(f.call("bdev_null_create", {{"name", "C"}, {"num_blocks", 2048}, {"uuid", given}})["result"], "C");
  EXPECT_EQ(f.call("bdev_get_bdevs", {{"name", "C"}})["result"][0]["uuid"], "6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9");
  EXPECT_EQ(f.call("bdev_null_create", {{"name", "D"}, {"num_blocks", 2048}, {"uuid", no_dashes(given)}})["error"]["code"],
            control::kExists);
  EXPECT_EQ(f.call("bdev_null_create", {{"name", "D"}, {"num_blocks", 2048}, {"uuid", "not-a-uuid"}})["error"]["code"],
            -22);  // -EINVAL
  EXPECT_EQ(f.call("bdev_get_bdevs", {{"name", "D"}})["error"]["code"], control::kNoSuchDevice);
  ASSERT_EQ(f.call("nvmf_subsystem_add_ns", {{"nqn", kTestNqn}, {"namespace", {{"bdev_name", "C"}, {"nsid", 7}}}})["result"],
            7);
  EXPECT_EQ(seen_ids(f.t.trid(), 7).desc_uuid, "6f1e2d3c4b5a49788695a4b3c2d1e0f9");
  ASSERT_EQ(f.call("bdev_null_create", {{"name", "E"}, {"num_blocks", 2048}})["result"], "E");
  ASSERT_EQ(f.call("nvmf_subsystem_add_ns",
                   {{"nqn", kTestNqn},
                    {"namespace",
                     {{"bdev_name", "E"},
                      {"nsid", 8},
                      {"uuid", "0a1b2c3d-4e5f-4a6b-8c7d-8e9fa0b1c2d3"},
                      {"nguid", "00112233445566778899AABBCCDDEEFF"},
                      {"eui64", "0102030405060708"}}}})["result"],
            8);
  const SeenIds e = seen_ids(f.t.trid(), 8);
  EXPECT_EQ(e.desc_uuid, "0a1b2c3d4e5f4a6b8c7d8e9fa0b1c2d3");
  EXPECT_EQ(e.nguid, "00112233445566778899aabbccddeeff");
  EXPECT_EQ(e.eui64, "0102030405060708");

  // save_config keeps every identity: a target made from it shows the same, and its bdevs
  // the same UUIDs.
  const Json saved = f.call("save_config")["result"];
  target::TargetConfig again;
  ASSERT_EQ(target::load_spdk_config(saved, again), "");
  for (auto& l : again.listeners) l.port = 0;  // the first target's port is taken
  for (auto& s : again.subsystems) s.listeners.clear();
  ASSERT_EQ(target::finalize_config(again), "");
  RpcFixture restarted("identity-again", {}, again);
  for (uint32_t nsid : {4u, 6u, 7u, 8u}) {
    const SeenIds before = seen_ids(f.t.trid(), nsid), after = seen_ids(restarted.t.trid(), nsid);
    EXPECT_EQ(after.nguid, before.nguid) << "nsid " << nsid;
    EXPECT_EQ(after.eui64, before.eui64) << "nsid " << nsid;
    EXPECT_EQ(after.desc_uuid, before.desc_uuid) << "nsid " << nsid;
  }
  // E's namespace was given a UUID of its own: the bdev keeps its own all the same.
  for (const char* name : {"A", "B", "C", "E"})
    EXPECT_EQ(restarted.call("bdev_get_bdevs", {{"name", name}})["result"][0]["uuid"],
              f.call("bdev_get_bdevs", {{"name", name}})["result"][0]["uuid"])
        << name;
}

// ---- SPDK's file keyring, as Ceph's NVMe-oF gateway drives it ---------------------------------

constexpr const char* kKeyHost = "nqn.2014-08.org.nvmexpress:uuid:6c1f0e2a-8b1d-4f0e-9d3c-5a7b9e2f4c10";

// A DH-HMAC-CHAP secret of 32 bytes of fill, as nvme-cli's gen-dhchap-key writes it (SHA-256).
std::string dhchap_text(uint8_t fill) {
  std::vector<uint8_t> key(32, fill);
  return std::string(auth::format_dhchap_secret(1, key).view());
}

// A directory of key files, gone with the test.
struct KeyDir {
  std::string dir = fmt::format("/tmp/nvtcp-keyring-test-{}", ::getpid());
  KeyDir() { ::mkdir(dir.c_str(), 0700); }
  ~KeyDir() {
    for (const auto& f : files) std::remove(f.c_str());
    ::rmdir(dir.c_str());
  }
  std::string write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    const std::string path = dir + "/" + name;
    {
      std::ofstream f(path);
      f << text << "\n";
    }
    ::chmod(path.c_str(), mode);
    files.push_back(path);
    return path;
  }
  std::vector<std::string> files;
};

host::ControllerOptions keyed_host(const std::string& secret, const std::string& ctrl_secret = {}) {
  host::ControllerOptions o;
  o.hostnqn = kKeyHost;
  o.kato_ms = 0;
  o.io_queues = 1;
  o.dhchap_secret = secret;
  o.dhchap_ctrl_secret = ctrl_secret;
  return o;
}

// The keyring entry of name in keyring_get_keys, or null.
Json key_entry(RpcFixture& f, const std::string& name) {
  const Json keys = f.call("keyring_get_keys")["result"];
  for (const auto& k : keys)
    if (k["name"] == name) return k;
  return Json();
}

// Keys added as files, checked as SPDK checks them (an absolute path, a file only its owner can
// read or write, a name not taken) with SPDK's codes and messages; a host added with its keys by
// keyring name authenticates with them (and not with another key); the keyring counts its users;
// a removed key stays referenced by the host that names it until that host goes, and, as SPDK's
// spdk_key_get_key answers -ENOKEY for a removed key, no longer admits it.
TEST(RpcServer, KeyringKeysAddedAsSpdkChecksThemAdmitAHostThatNamesThem) {
  RpcFixture f("keyring");
  KeyDir keys;
  const std::string key0 = keys.write("key0", dhchap_text(0x11));
  const std::string key1 = keys.write("key1", dhchap_text(0x22));
  const std::string open_key = keys.write("open", dhchap_text(0x33), 0644);
  EXPECT_EQ(f.call("keyring_file_add_key", {{"name", "key0"}, {"path", key0}})["result"], true);
  EXPECT_EQ(f.call("keyring_file_add_key", {{"name", "key1"}, {"path", key1}})["result"], true);
  const Json refused[][2] = {
    {Json{{"name", "key0"}, {"path", key1}}, Json{{"code", -17}, {"message", "File exists"}}},
    {Json{{"name", "rel"}, {"path", "keys/key0"}}, Json{{"code", -1}, {"message", "Operation not permitted"}}},
    {Json{{"name", "open"}, {"path", open_key}}, Json{{"code", -1}, {"message", "Operation not permitted"}}},
    {Json{{"name", "gone"}, {"path", keys.dir + "/none"}}, Json{{"code", -2}, {"message", "No such file or directory"}}},
    {Json{{"name", "ring:key"}, {"path", key0}}, Json{{"code", -22}, {"message", "Invalid argument"}}},
    {Json{{"name", "nopath"}}, Json{{"code", control::kInvalidParams}, {"message", "Invalid argument"}}},
  };
  for (const auto& [params, error] : refused) EXPECT_EQ(f.call("keyring_file_add_key", params)["error"], error) << params;
  Json listed = f.call("keyring_get_keys")["result"];
  ASSERT_EQ(listed.size(), 2u) << listed;
  EXPECT_EQ(listed[0], (Json{{"name", "key0"}, {"module", "keyring_file"}, {"removed", false}, {"probed", false},
                             {"refcnt", 1}, {"path", key0}}));

  // Only this host, with its keys by name; a name the keyring does not have is refused.
  EXPECT_EQ(f.call("nvmf_subsystem_allow_any_host", {{"nqn", kTestNqn}, {"allow_any_host", false}})["result"], true);
  EXPECT_EQ(f.call("nvmf_subsystem_add_host", {{"nqn", kTestNqn}, {"host", kKeyHost}, {"dhchap_key", "key9"}})
                ["error"]["code"],
            control::kInvalidParams);
  Json r = f.call("nvmf_subsystem_add_host",
                  {{"nqn", kTestNqn}, {"host", kKeyHost}, {"dhchap_key", "key0"}, {"dhchap_ctrlr_key", "key1"}});
  ASSERT_EQ(r["result"], true) << r.dump();
  EXPECT_EQ(key_entry(f, "key0")["refcnt"], 2);
  EXPECT_EQ(key_entry(f, "key1")["refcnt"], 2);
  int listed_host = 0;
  const Json subsystems = f.call("nvmf_get_subsystems", {{"nqn", kTestNqn}});
  for (const Json& h : subsystems["result"][0]["hosts"])
    if (h["nqn"] == kKeyHost) {
      ++listed_host;
      EXPECT_EQ(h["dhchap_key"], "key0") << "the keyring name, as SPDK lists it";
      EXPECT_EQ(h["dhchap_ctrlr_key"], "key1");
    }
  EXPECT_EQ(listed_host, 1) << subsystems.dump();
  std::string err;
  auto ctrl = host::Controller::connect(f.t.trid(), keyed_host(dhchap_text(0x11), dhchap_text(0x22)), err);
  ASSERT_NE(ctrl, nullptr) << err;
  EXPECT_EQ(host::Controller::connect(f.t.trid(), keyed_host(dhchap_text(0x12)), err), nullptr) << "a wrong key let in";
  EXPECT_EQ(host::Controller::connect(f.t.trid(), keyed_host(""), err), nullptr) << "no key let in";

  // Removed while the host holds it: listed as removed with the host's reference only, gone by
  // name (a second remove, a new host), and no longer usable: the host is refused from its next
  // connection on, while the controller it has goes on.
  EXPECT_EQ(f.call("keyring_file_remove_key", {{"name", "key0"}})["result"], true);
  EXPECT_EQ(key_entry(f, "key0"),
            (Json{{"name", "key0"}, {"module", "keyring_file"}, {"removed", true}, {"probed", false}, {"refcnt", 1}}));
  EXPECT_EQ(f.call("keyring_file_remove_key", {{"name", "key0"}})["error"],
            (Json{{"code", -126}, {"message", "Required key not available"}}));
  EXPECT_EQ(f.call("nvmf_subsystem_add_host", {{"nqn", kTestNqn}, {"host", "nqn.h2"}, {"dhchap_key", "key0"}})
                ["error"]["code"],
            control::kInvalidParams);
  EXPECT_EQ(host::Controller::connect(f.t.trid(), keyed_host(dhchap_text(0x11), dhchap_text(0x22)), err), nullptr)
      << "a removed key let its host in";
  std::vector<uint8_t> id(4096);
  EXPECT_TRUE(ctrl->identify(1, 0, id.data()).status.ok()) << "the controller authenticated before the removal ended";
  // The host gone, so is the removed key; key1 is the keyring's alone again.
  ctrl.reset();
  EXPECT_EQ(f.call("nvmf_subsystem_remove_host", {{"nqn", kTestNqn}, {"host", kKeyHost}})["result"], true);
  EXPECT_TRUE(key_entry(f, "key0").is_null());
  EXPECT_EQ(key_entry(f, "key1")["refcnt"], 1);
  // The name is free again, for another file.
  EXPECT_EQ(f.call("keyring_file_add_key", {{"name", "key0"}, {"path", key1}})["result"], true);
}

// save_config writes the keyring (names and paths) before nvmf, and hosts' keys by name, never
// a key; a target started from that file admits the host with its key, and saves the same.
TEST(RpcServer, SavedKeyringKeysBringARestartedTargetsHostsBackByName) {
  RpcFixture f("keyring-save");
  KeyDir keys;
  const std::string key0 = keys.write("key0", dhchap_text(0x44));
  ASSERT_EQ(f.call("keyring_file_add_key", {{"name", "key0"}, {"path", key0}})["result"], true);
  ASSERT_EQ(f.call("nvmf_subsystem_allow_any_host", {{"nqn", kTestNqn}, {"allow_any_host", false}})["result"], true);
  ASSERT_EQ(f.call("nvmf_subsystem_add_host", {{"nqn", kTestNqn}, {"host", kKeyHost}, {"dhchap_key", "key0"}})["result"],
            true);
  // A host with a TLS PSK by name.
  std::vector<uint8_t> psk_bytes(32, 0x66);
  const std::string psk_text(auth::format_tls_psk(1, psk_bytes).view());
  ASSERT_EQ(f.call("keyring_file_add_key", {{"name", "psk0"}, {"path", keys.write("psk0", psk_text)}})["result"], true);
  ASSERT_EQ(f.call("nvmf_subsystem_add_host", {{"nqn", kTestNqn}, {"host", "nqn.psk"}, {"psk", "psk0"}})["result"], true);
  // One host with its key inline: saved with the placeholder, as before.
  ASSERT_EQ(f.call("nvmf_subsystem_add_host", {{"nqn", kTestNqn}, {"host", "nqn.inline"}, {"dhchap_key", dhchap_text(0x55)}})
                ["result"],
            true);
  Json saved = f.call("save_config")["result"];
  const std::string text = saved.dump();
  const std::string secret0 = dhchap_text(0x44), secret1 = dhchap_text(0x55);
  EXPECT_EQ(text.find(secret0.substr(10, 20)), std::string::npos) << "save_config wrote a key: " << text;
  EXPECT_EQ(text.find(secret1.substr(10, 20)), std::string::npos) << "save_config wrote a key: " << text;
  EXPECT_EQ(text.find(psk_text.substr(16, 20)), std::string::npos) << "save_config wrote a key: " << text;
  ASSERT_EQ(saved["subsystems"][0]["subsystem"], "keyring");
  ASSERT_EQ(saved["subsystems"][0]["config"].size(), 2u);
  EXPECT_EQ(saved["subsystems"][0]["config"][0],
            (Json{{"method", "keyring_file_add_key"}, {"params", {{"name", "key0"}, {"path", key0}}}}));
  EXPECT_EQ(saved["subsystems"][0]["config"][1]["params"]["name"], "psk0");
  EXPECT_EQ(f.call("framework_get_config", {{"name", "keyring"}})["result"], saved["subsystems"][0]["config"]);
  std::map<std::string, Json> hosts;
  for (const auto& group : saved["subsystems"])
    for (const auto& m : group["config"])
      if (m["method"] == "nvmf_subsystem_add_host") hosts[m["params"]["host"]] = m["params"];
  EXPECT_EQ(hosts[kKeyHost]["dhchap_key"], "key0") << text;
  EXPECT_EQ(hosts["nqn.psk"]["psk"], "psk0") << text;
  EXPECT_TRUE(hosts["nqn.inline"]["dhchap_key"].is_string());
  EXPECT_NE(hosts["nqn.inline"]["dhchap_key"], "key0");
  // Replayed without the inline host (its key is not in the file: it must be given again).
  for (auto& group : saved["subsystems"]) {
    auto& config = group["config"];
    for (size_t i = config.size(); i-- > 0;)
      if (config[i]["method"] == "nvmf_subsystem_add_host" && config[i]["params"]["host"] == "nqn.inline")
        config.erase(i);
  }
  target::TargetConfig again;
  ASSERT_EQ(target::load_spdk_config(saved, again), "");
  for (auto& l : again.listeners) l.port = 0;  // the first target's port is taken
  for (auto& s : again.subsystems) s.listeners.clear();
  ASSERT_EQ(target::finalize_config(again), "");
  RpcFixture restarted("keyring-restarted", {}, again);
  std::string err;
  EXPECT_EQ(host::Controller::connect(restarted.t.trid(), keyed_host(dhchap_text(0x45)), err), nullptr)
      << "a wrong key let in";
  auto ctrl = host::Controller::connect(restarted.t.trid(), keyed_host(secret0), err);
  EXPECT_NE(ctrl, nullptr) << err;
  EXPECT_EQ(key_entry(restarted, "key0"), (Json{{"name", "key0"}, {"module", "keyring_file"}, {"removed", false},
                                                 {"probed", false}, {"refcnt", 2}, {"path", key0}}));
  const std::string resaved = restarted.call("save_config")["result"].dump();
  EXPECT_NE(resaved.find(R"("dhchap_key":"key0")"), std::string::npos) << resaved;
  EXPECT_NE(resaved.find(R"("psk":"psk0")"), std::string::npos) << resaved;
}

// The log lines of level least and above (warnings unless told) logged while it lives (every
// thread's), kept instead of written to stderr.
struct LogLines {
  std::mutex mu;
  std::vector<std::string> lines;
  const LogLevel level_before = log_level();
  explicit LogLines(LogLevel least = LogLevel::Warn) {
    if (level_before > least) set_log_level(least);
    set_log_sink([this, least](LogLevel l, std::string_view m) {
      if (l < least) return;
      std::lock_guard lk(mu);
      lines.emplace_back(m);
    });
  }
  ~LogLines() {
    set_log_sink({});
    set_log_level(level_before);
  }
  // The lines that hold every one of parts.
  std::vector<std::string> holding(std::initializer_list<std::string> parts) {
    std::lock_guard lk(mu);
    std::vector<std::string> out;
    for (const auto& l : lines)
      if (std::all_of(parts.begin(), parts.end(), [&](const std::string& p) { return l.find(p) != std::string::npos; }))
        out.push_back(l);
    return out;
  }
  bool any_holds(const std::string& part) { return !holding({part}).empty(); }
  void clear() {
    std::lock_guard lk(mu);
    lines.clear();
  }
};

// A host that has no key, on the keyring tests' subsystem, writes and reads back (namespace 2,
// RAM).
void expect_keyless_host_served(RpcFixture& f, const char* hostnqn) {
  host::ControllerOptions o;
  o.hostnqn = hostnqn;
  o.kato_ms = 0;
  o.io_queues = 1;
  std::string err;
  auto ctrl = host::Controller::connect(f.t.trid(), o, err);
  ASSERT_NE(ctrl, nullptr) << err;
  auto qp = ctrl->create_io_qpair(8, err);
  ASSERT_NE(qp, nullptr) << err;
  std::vector<uint8_t> data = pattern(4096, 7), back(4096, 0);
  EXPECT_TRUE(one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->write(2, 8, 8, data.data(), cb, ctx); })
                  .ok());
  EXPECT_TRUE(one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->read(2, 8, 8, back.data(), cb, ctx); })
                  .ok());
  EXPECT_EQ(back, data);
}

// SPDK's keyring_file reads a key's file each time the key is used: an administrator who
// rewrites the file rotates the key for the next authentication, with no RPC in between. The
// old secret is refused from then on and the new one admitted (the controller key too: a host
// that checks the controller with the old one refuses it); a controller that authenticated
// before goes on, and its next re-authentication takes the file as it is then.
TEST(RpcServer, AKeyringKeyFileRewrittenRotatesTheKeyForTheNextConnection) {
  RpcFixture f("keyring-rotate");
  KeyDir keys;
  const std::string key0 = keys.write("key0", dhchap_text(0x11));
  const std::string key1 = keys.write("key1", dhchap_text(0x22));
  ASSERT_EQ(f.call("keyring_file_add_key", {{"name", "key0"}, {"path", key0}})["result"], true);
  ASSERT_EQ(f.call("keyring_file_add_key", {{"name", "key1"}, {"path", key1}})["result"], true);
  ASSERT_EQ(f.call("nvmf_subsystem_allow_any_host", {{"nqn", kTestNqn}, {"allow_any_host", false}})["result"], true);
  ASSERT_EQ(f.call("nvmf_subsystem_add_host",
                   {{"nqn", kTestNqn}, {"host", kKeyHost}, {"dhchap_key", "key0"}, {"dhchap_ctrlr_key", "key1"}})["result"],
            true);
  std::string err;
  auto before = host::Controller::connect(f.t.trid(), keyed_host(dhchap_text(0x11), dhchap_text(0x22)), err);
  ASSERT_NE(before, nullptr) << err;

  keys.write("key0", dhchap_text(0x33));
  keys.write("key1", dhchap_text(0x44));
  EXPECT_EQ(host::Controller::connect(f.t.trid(), keyed_host(dhchap_text(0x11), dhchap_text(0x22)), err), nullptr)
      << "the old key let in after its file was rewritten";
  EXPECT_EQ(host::Controller::connect(f.t.trid(), keyed_host(dhchap_text(0x33), dhchap_text(0x22)), err), nullptr)
      << "the controller proved itself with the old controller key";
  auto after = host::Controller::connect(f.t.trid(), keyed_host(dhchap_text(0x33), dhchap_text(0x44)), err);
  EXPECT_NE(after, nullptr) << "the new key refused: " << err;
  std::vector<uint8_t> id(4096);
  EXPECT_TRUE(before->identify(1, 0, id.data()).status.ok()) << "a controller authenticated with the old key was ended";
  EXPECT_NE(before->reauthenticate(err), 0) << "re-authenticated with the old key after the file was rewritten";
  if (after) {
    EXPECT_EQ(after->reauthenticate(err), 0) << err;
  }
  // The keyring lists the same keys, by the same paths: nothing was changed by RPC.
  EXPECT_EQ(key_entry(f, "key0")["path"], key0);
  EXPECT_EQ(key_entry(f, "key0")["refcnt"], 2);
}

// A key file that no longer reads (garbage in it, opened to others, gone) refuses its host as
// a wrong key would, with one log line that names the key and its file (and not the key), and
// nothing else breaks: the target goes on serving other hosts, and admits the host again once
// the file holds its key.
TEST(RpcServer, AKeyringKeyFileThatNoLongerReadsRefusesItsHostAndTheTargetGoesOn) {
  LogLines warnings;
  RpcFixture f("keyring-broken");
  KeyDir keys;
  const std::string secret = dhchap_text(0x11);
  const std::string key0 = keys.write("key0", secret);
  ASSERT_EQ(f.call("keyring_file_add_key", {{"name", "key0"}, {"path", key0}})["result"], true);
  ASSERT_EQ(f.call("nvmf_subsystem_allow_any_host", {{"nqn", kTestNqn}, {"allow_any_host", false}})["result"], true);
  ASSERT_EQ(f.call("nvmf_subsystem_add_host", {{"nqn", kTestNqn}, {"host", kKeyHost}, {"dhchap_key", "key0"}})["result"],
            true);
  ASSERT_EQ(f.call("nvmf_subsystem_add_host", {{"nqn", kTestNqn}, {"host", "nqn.keyless"}})["result"], true);
  std::string err;
  ASSERT_NE(host::Controller::connect(f.t.trid(), keyed_host(secret), err), nullptr) << err;

  const std::pair<std::function<void()>, std::string> breakages[] = {
    {[&] { keys.write("key0", "DHHC-1:01:bm90IGEga2V5IGF0IGFsbCwgbm90IGF0IGFsbA==:"); }, "DH-HMAC-CHAP secret"},
    {[&] { ::chmod(key0.c_str(), 0644); }, "Invalid permissions for key file"},
    {[&] { std::remove(key0.c_str()); }, "No such file or directory"},
  };
  for (const auto& [make, why] : breakages) {
    SCOPED_TRACE(why);
    make();
    EXPECT_EQ(host::Controller::connect(f.t.trid(), keyed_host(secret), err), nullptr) << "let in with a broken key file";
    const auto logged = warnings.holding({"'key0'", key0, why});
    EXPECT_EQ(logged.size(), 1u) << "one line naming the key, its file and what is wrong";
    warnings.clear();
    expect_keyless_host_served(f, "nqn.keyless");
    keys.write("key0", secret);
    auto back = host::Controller::connect(f.t.trid(), keyed_host(secret), err);
    EXPECT_NE(back, nullptr) << "the key file mended, its host still refused: " << err;
  }
  EXPECT_FALSE(warnings.any_holds(secret.substr(10, 20))) << "a key in the log";
  EXPECT_EQ(key_entry(f, "key0")["path"], key0);
}

// A TLS PSK named in the keyring is read from its file at each handshake: a rewritten file
// rotates it for the next connection, with no RPC; one that no longer reads refuses the
// handshake (one log line naming the key and its file) and the target serves others on.
TEST(RpcServer, AKeyringPskFileRewrittenRotatesTheTlsKeyForTheNextHandshake) {
  LogLines warnings;
  target::TargetConfig cfg = default_config();
  target::ListenerConfig secure{"127.0.0.1", 0};
  secure.tls_required = true;
  cfg.listeners.push_back(secure);
  RpcFixture f("keyring-psk", {}, cfg);
  KeyDir keys;
  auto psk_text = [](uint8_t fill) { return std::string(auth::format_tls_psk(1, std::vector<uint8_t>(32, fill)).view()); };
  const std::string psk0 = keys.write("psk0", psk_text(0x61));
  ASSERT_EQ(f.call("keyring_file_add_key", {{"name", "psk0"}, {"path", psk0}})["result"], true);
  ASSERT_EQ(f.call("nvmf_subsystem_allow_any_host", {{"nqn", kTestNqn}, {"allow_any_host", false}})["result"], true);
  ASSERT_EQ(f.call("nvmf_subsystem_add_host", {{"nqn", kTestNqn}, {"host", kKeyHost}, {"psk", "psk0"}})["result"], true);
  ASSERT_EQ(f.call("nvmf_subsystem_add_host", {{"nqn", kTestNqn}, {"host", "nqn.keyless"}})["result"], true);
  host::TransportId tls_trid = f.t.trid();
  tls_trid.trsvcid = f.t.port(1);
  auto over_tls = [&](const std::string& key) {
    host::ControllerOptions o;
    o.hostnqn = kKeyHost;
    o.kato_ms = 0;
    o.io_queues = 1;
    o.tls = true;
    o.tls_key = key;
    o.connect_timeout_ms = 3000;
    std::string err;
    auto ctrl = host::Controller::connect(tls_trid, o, err);
    return ctrl != nullptr;
  };
  EXPECT_TRUE(over_tls(psk_text(0x61)));
  keys.write("psk0", psk_text(0x62));
  EXPECT_FALSE(over_tls(psk_text(0x61))) << "the old PSK let in after its file was rewritten";
  EXPECT_TRUE(over_tls(psk_text(0x62))) << "the new PSK refused";

  keys.write("psk0", "NVMeTLSkey-1:01:bm90IGEga2V5:");
  warnings.clear();
  EXPECT_FALSE(over_tls(psk_text(0x62))) << "let in with a broken key file";
  // nvtcp's host tries a second handshake with libnvme's older derivation: a line each.
  const auto refused = warnings.holding({"TLS: handshake failed"});
  EXPECT_FALSE(refused.empty());
  EXPECT_EQ(warnings.holding({"'psk0'", psk0, "too short"}).size(), refused.size())
      << "a line per refused handshake, naming the key and its file: " << ::testing::PrintToString(refused);
  expect_keyless_host_served(f, "nqn.keyless");
  keys.write("psk0", psk_text(0x62));
  EXPECT_TRUE(over_tls(psk_text(0x62))) << "the key file mended, its host still refused";
  EXPECT_FALSE(warnings.any_holds(psk_text(0x62).substr(16, 20))) << "a key in the log";
}

// Devices that stand in for an RBD image whose cluster is slow to answer (or a file on a network
// file system): an RBD or file bdev named Held* is made only once the test lets it (as librbd's
// connect returns once the monitors answer); one named Grows* is made at once, but each resize
// of it returns only once the test lets it; one named Closes* closes only once the test lets it.
// The waits are the test's to end; their bound only keeps a broken server from hanging the test.
struct HeldDevices {
  std::mutex mu;
  std::condition_variable changed;
  size_t arrived = 0;  // creates and resizes that reached the device
  bool open = false;

  // Waits for the test's release; false if it never came.
  bool pass() {
    std::unique_lock lk(mu);
    ++arrived;
    changed.notify_all();
    return changed.wait_for(lk, std::chrono::seconds(20), [&] { return open; });
  }
  bool wait_until_arrived(size_t n) {
    std::unique_lock lk(mu);
    return changed.wait_for(lk, std::chrono::seconds(10), [&] { return arrived >= n; });
  }
  void release() {
    std::lock_guard lk(mu);
    open = true;
    changed.notify_all();
  }
  target::DeviceFactory factory();
};

// A RAM device whose resize (or close) waits for the test, as an RBD image's waits for its cluster.
class HeldRamDevice final : public backend::BlockDevice {
 public:
  enum class Waits { Resize, Close };
  HeldRamDevice(std::unique_ptr<backend::BlockDevice> ram, HeldDevices& held, Waits waits)
      : ram_(std::move(ram)), held_(held), waits_(waits), size_(ram_->size_bytes()) {}
  ~HeldRamDevice() override {
    if (waits_ == Waits::Close) held_.pass();
  }
  uint64_t size_bytes() const override { return size_.load(); }
  bool resize(uint64_t bytes) override {
    if (waits_ == Waits::Resize && !held_.pass()) return false;
    size_.store(bytes);
    return true;
  }
  uint32_t block_size() const override { return ram_->block_size(); }
  const char* kind() const override { return "rbd"; }
  void submit(backend::BlockIo* io, reactor::Reactor& r) override { ram_->submit(io, r); }
  backend::Persistence persistence() const override { return ram_->persistence(); }

 private:
  std::unique_ptr<backend::BlockDevice> ram_;
  HeldDevices& held_;
  const Waits waits_;
  std::atomic<uint64_t> size_;
};

target::DeviceFactory HeldDevices::factory() {
  return [this](const target::NamespaceConfig& nc, std::string& err) -> std::unique_ptr<backend::BlockDevice> {
    auto named = [&](const char* prefix) { return nc.name.rfind(prefix, 0) == 0; };
    const bool held = named("Held"), grows = named("Grows"), closes = named("Closes");
    if ((!held && !grows && !closes) || (nc.type != "rbd" && nc.type != "file")) return nullptr;
    if (held && !pass()) {
      err = "the test never let the device be made";
      return nullptr;
    }
    auto ram = backend::make_ram(4 << 20, nc.block_size, 1, err);
    if (!ram || held) return ram;
    using Waits = HeldRamDevice::Waits;
    return std::make_unique<HeldRamDevice>(std::move(ram), *this, grows ? Waits::Resize : Waits::Close);
  };
}

// Whether fd has nothing to read now (no answer has come).
bool nothing_to_read(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

Json held_rbd_params(const std::string& name) {
  return Json{{"name", name},
              {"pool_name", "rbd"},
              {"rbd_name", "disk1"},
              {"block_size", 4096},
              {"config", {{"mon_host", "v2:192.0.2.1:3300"}}}};
}

// bdev_rbd_create against a cluster that does not answer holds the RPC thread no more: an ANA
// failover call and a listing from other clients are answered while it waits; the client that
// sent it gets its answers in order, the request right behind it (already read) and the one
// sent after it (still in its socket) answered after the create, as the bdev it made.
TEST(RpcServer, SlowCreateHoldsUpOnlyTheLaterRequestsOfItsOwnClient) {
  HeldDevices held;
  target::TargetConfig cfg = default_config();
  cfg.subsystems[0].ana_reporting = true;
  RpcFixture f("slow-create", {}, cfg, held.factory());
  const int a = connect_to(f.path);
  ASSERT_GE(a, 0);
  send_all(a, rpc_py_request("bdev_rbd_create", 1, held_rbd_params("HeldCeph")) +
                  rpc_py_request("bdev_get_bdevs", 2, {{"name", "HeldCeph"}}));
  ASSERT_TRUE(held.wait_until_arrived(1));
  send_all(a, rpc_py_request("spdk_get_version", 3));
  const Json ana{
      {"nqn", kTestNqn},
      {"listen_address",
       {{"trtype", "tcp"}, {"traddr", "127.0.0.1"}, {"trsvcid", std::to_string(f.t.port())}, {"adrfam", "ipv4"}}},
      {"ana_state", "inaccessible"}};
  EXPECT_EQ(f.call("nvmf_subsystem_listener_set_ana_state", ana)["result"], true)
      << "a failover call waited for another client's create";
  EXPECT_EQ(f.call("bdev_get_bdevs", {{"name", "HeldCeph"}})["error"]["code"], control::kNoSuchDevice);
  EXPECT_TRUE(nothing_to_read(a)) << "the client of the create was answered before the create was";
  held.release();
  const auto answers = read_answers(a, 3);
  ::close(a);
  ASSERT_EQ(answers.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(answers[size_t(i)]["id"], i + 1) << "answered out of order";
  EXPECT_EQ(answers[0]["result"], "HeldCeph");
  ASSERT_EQ(answers[1]["result"].size(), 1u) << "the request behind the create ran before it: " << answers[1].dump();
  EXPECT_EQ(answers[1]["result"][0]["product_name"], "Ceph Rbd Disk");
  EXPECT_EQ(answers[2]["result"]["version"], "nvtcp 0.1.0");
}

// A client that leaves while its create waits on the device: the create is still carried out
// (the request was received), its answer is dropped, and the requests it had sent behind it,
// never begun, are not run.
TEST(RpcServer, SlowCreateOfAClientThatLeftIsStillCarriedOut) {
  HeldDevices held;
  RpcFixture f("slow-gone", {}, default_config(), held.factory());
  const int a = connect_to(f.path);
  ASSERT_GE(a, 0);
  send_all(a,
           rpc_py_request("bdev_aio_create", 1, {{"name", "HeldFile"}, {"filename", "/net/share/disk.img"}}) +
               rpc_py_request("bdev_null_create", 2, {{"name", "Behind"}, {"num_blocks", 2048}, {"block_size", 512}}));
  ASSERT_TRUE(held.wait_until_arrived(1));
  ::close(a);
  ASSERT_TRUE(wait_for([&] { return f.server.clients() == 0; }, 5000)) << "the server did not see its client leave";
  held.release();
  ASSERT_TRUE(wait_for([&] { return f.server.slow_answers_dropped() == 1; }, 5000)) << "the create was not committed";
  const Json made = f.call("bdev_get_bdevs", {{"name", "HeldFile"}});
  ASSERT_EQ(made["result"].size(), 1u) << made.dump();
  EXPECT_EQ(made["result"][0]["driver_specific"]["aio"]["filename"], "/net/share/disk.img");
  EXPECT_EQ(f.call("bdev_get_bdevs", {{"name", "Behind"}})["error"]["code"], control::kNoSuchDevice);
}

// A create that waits on its device and one that does not, of the same name (then of the same
// uuid): the one committed first wins, the other is answered that the bdev exists, and the
// device it made is closed.
TEST(RpcServer, SlowAndFastCreatesOfOneNameOrUuidOneWins) {
  HeldDevices held;
  RpcFixture f("slow-race", {}, default_config(), held.factory());
  const int a = connect_to(f.path);
  ASSERT_GE(a, 0);
  const std::string uuid = "6a1b2c3d-0000-4000-8000-00000000abcd";
  send_all(a, rpc_py_request("bdev_uring_create", 1, {{"name", "HeldSame"}, {"filename", "/net/share/same.img"}}) +
                  rpc_py_request("bdev_rbd_create", 2, [&] {
                    Json p = held_rbd_params("HeldUuid");
                    p["uuid"] = uuid;
                    return p;
                  }()));
  ASSERT_TRUE(held.wait_until_arrived(1));
  EXPECT_EQ(f.call("bdev_null_create", {{"name", "HeldSame"}, {"num_blocks", 2048}, {"block_size", 512}})["result"],
            "HeldSame");
  // The second create is read only once the first is answered: the uuid is free until then.
  EXPECT_EQ(f.call("bdev_null_create",
                   {{"name", "Other"}, {"num_blocks", 2048}, {"block_size", 512}, {"uuid", uuid}})["result"],
            "Other");
  held.release();
  const auto answers = read_answers(a, 2);
  ::close(a);
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0]["error"]["code"], control::kExists) << answers[0].dump();
  EXPECT_EQ(answers[1]["error"]["code"], control::kExists) << answers[1].dump();
  const Json same = f.call("bdev_get_bdevs", {{"name", "HeldSame"}})["result"];
  ASSERT_EQ(same.size(), 1u);
  EXPECT_EQ(same[0]["product_name"], "Null disk");
  EXPECT_EQ(f.call("bdev_get_bdevs", {{"name", "HeldUuid"}})["error"]["code"], control::kNoSuchDevice);
}

// bdev_rbd_resize waits for the cluster off the RPC thread too; meanwhile its bdev cannot be
// deleted (the worker resizes its device) and other calls are answered.
TEST(RpcServer, SlowResizeHoldsItsBdevAndNoOtherCall) {
  HeldDevices held;
  RpcFixture f("slow-resize", {}, default_config(), held.factory());
  ASSERT_EQ(f.call("bdev_rbd_create", held_rbd_params("GrowsCeph"))["result"], "GrowsCeph");
  const int a = connect_to(f.path);
  ASSERT_GE(a, 0);
  send_all(a, rpc_py_request("bdev_rbd_resize", 1, {{"name", "GrowsCeph"}, {"new_size", 8}}));
  ASSERT_TRUE(held.wait_until_arrived(1));
  EXPECT_EQ(f.call("bdev_rbd_delete", {{"name", "GrowsCeph"}})["error"]["code"], control::kBusy);
  EXPECT_EQ(f.call("bdev_rbd_resize", {{"name", "GrowsCeph"}, {"new_size", 16}})["error"]["code"], control::kBusy);
  EXPECT_EQ(f.call("bdev_get_bdevs", {{"name", "GrowsCeph"}})["result"][0]["num_blocks"], (4u << 20) / 4096);
  held.release();
  const auto answers = read_answers(a, 1);
  ::close(a);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0]["result"], true) << answers[0].dump();
  EXPECT_EQ(f.call("bdev_get_bdevs", {{"name", "GrowsCeph"}})["result"][0]["num_blocks"], (8u << 20) / 4096);
  EXPECT_EQ(f.call("bdev_rbd_delete", {{"name", "GrowsCeph"}})["result"], true);
}

// bdev_rbd_delete (and the file deletes) close the device off the RPC thread: the bdev is gone
// at once, other calls are answered while its image closes, and the client that asked is
// answered once it has.
TEST(RpcServer, SlowDeleteClosesTheDeviceOffTheRpcThread) {
  HeldDevices held;
  RpcFixture f("slow-delete", {}, default_config(), held.factory());
  ASSERT_EQ(f.call("bdev_rbd_create", held_rbd_params("ClosesCeph"))["result"], "ClosesCeph");
  const int a = connect_to(f.path);
  ASSERT_GE(a, 0);
  send_all(a, rpc_py_request("bdev_rbd_delete", 1, {{"name", "ClosesCeph"}}));
  ASSERT_TRUE(held.wait_until_arrived(1));
  EXPECT_EQ(f.call("bdev_get_bdevs", {{"name", "ClosesCeph"}})["error"]["code"], control::kNoSuchDevice)
      << "the bdev stayed while its device closed";
  EXPECT_EQ(f.call("nvmf_get_subsystems")["result"].size(), 2u) << "a call waited for another client's delete";
  EXPECT_TRUE(nothing_to_read(a)) << "the delete was answered before its device closed";
  held.release();
  const auto answers = read_answers(a, 1);
  ::close(a);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0]["result"], true) << answers[0].dump();
}

// A command on a namespace that its device does not complete until the test lets it, as a Ceph
// cluster that stopped answering or a hung network file system keeps one: a Deallocate a host
// sends to the namespace over the bdev "gated" (GatedFactory's device holds each Deallocate).
struct HeldCommand {
  std::atomic<bool> done{false};
  std::unique_ptr<host::Controller> ctrl;
  std::unique_ptr<host::QueuePair> qp;

  // Sends it to namespace nsid of nqn and waits until the device has it; false if it did not come.
  bool send(RpcFixture& f, GatedFactory& gated, const std::string& nqn, uint32_t nsid, std::string& err) {
    ctrl = f.connect_host(nqn, err);
    if (!ctrl || !(qp = ctrl->create_io_qpair(16, err))) return false;
    nvme::DsmRange range{};
    range.nlb = 8;
    auto on_done = [](void* ctx, const host::Completion&) { static_cast<HeldCommand*>(ctx)->done = true; };
    if (qp->deallocate(nsid, &range, 1, on_done, this) != 0) return false;
    return wait_for([&] { qp->process_completions(); return gated.dev.load() && gated.dev.load()->held() == 1; }, 5000);
  }
};

// Whether a bdev_get_bdevs answer lists one bdev whose namespace is being removed.
bool being_removed(const Json& answer) {
  if (!answer.contains("result") || answer["result"].size() != 1) return false;
  const Json& b = answer["result"][0];
  return b.contains("driver_specific") && b["driver_specific"].contains("nvtcp") &&
         b["driver_specific"]["nvtcp"].value("being_removed", false);
}

Json ana_call(RpcFixture& f, const char* state) {
  return f.call("nvmf_subsystem_listener_set_ana_state",
                {{"nqn", kTestNqn},
                 {"listen_address",
                  {{"trtype", "tcp"}, {"traddr", "127.0.0.1"}, {"trsvcid", std::to_string(f.t.port())}, {"adrfam", "ipv4"}}},
                 {"ana_state", state}});
}

Json add_gated(RpcFixture& f, const std::string& nqn, uint32_t nsid) {
  return f.call("nvmf_subsystem_add_ns", {{"nqn", nqn}, {"namespace", {{"bdev_name", "gated"}, {"nsid", nsid}}}});
}

// A target whose bdev "gated" serves namespace 5 of the test subsystem (which reports ANA).
struct GatedNamespaceFixture {
  GatedFactory gated;
  RpcFixture f;
  explicit GatedNamespaceFixture(const char* name) : f(name, {}, ana_config(), gated.factory()) {}
  static target::TargetConfig ana_config() {
    target::TargetConfig cfg = default_config();
    cfg.subsystems[0].ana_reporting = true;
    return cfg;
  }
};

// nvmf_subsystem_remove_ns of a namespace with a command its device holds: the namespace is
// gone at once, but its client is answered only once that command is done and the bdev is
// free; meanwhile an ANA failover call and a listing from another client are answered, and the
// bdev, still claimed, can be neither deleted nor added to a namespace (busy).
TEST(RpcServer, SlowRemoveNsWaitsForItsCommandsOffTheRpcThread) {
  GatedNamespaceFixture g("slow-remove-ns");
  RpcFixture& f = g.f;
  ASSERT_EQ(f.call("bdev_null_create", {{"name", "gated"}, {"num_blocks", 2048}, {"block_size", 512}})["result"], "gated");
  ASSERT_EQ(add_gated(f, kTestNqn, 5)["result"], 5);
  const int a = connect_to(f.path);
  ASSERT_GE(a, 0);
  HeldCommand held;
  std::string err;
  ASSERT_TRUE(held.send(f, g.gated, kTestNqn, 5, err)) << err;
  // From here to the release, no fatal check: the device must let its command go at the end.
  send_all(a, rpc_py_request("nvmf_subsystem_remove_ns", 1, {{"nqn", kTestNqn}, {"nsid", 5}}));
  EXPECT_TRUE(wait_for([&] { return being_removed(f.call("bdev_get_bdevs", {{"name", "gated"}})); }, 5000))
      << "the bdev is not shown leaving its namespace";
  EXPECT_EQ(ana_call(f, "inaccessible")["result"], true) << "a failover call waited for another client's removal";
  const Json subs = f.call("nvmf_get_subsystems", {{"nqn", kTestNqn}});
  EXPECT_TRUE(subs.contains("result") && subs["result"].size() == 1 && subs["result"][0]["namespaces"].size() == 3)
      << "namespace 5 still listed, or the listing waited: " << subs.dump();
  EXPECT_EQ(f.call("bdev_null_delete", {{"name", "gated"}})["error"]["code"], control::kBusy);
  EXPECT_EQ(add_gated(f, kTestNqn, 6)["error"]["code"], control::kBusy);
  EXPECT_EQ(f.call("bdev_null_resize", {{"name", "gated"}, {"new_size", 2}})["error"]["code"], control::kBusy);
  EXPECT_TRUE(nothing_to_read(a)) << "the removal was answered before the command on its namespace was done";
  EXPECT_FALSE(held.done.load());

  g.gated.dev.load()->release_one();
  const auto answers = read_answers(a, 1);
  ::close(a);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0]["result"], true) << answers[0].dump();
  EXPECT_TRUE(wait_for([&] { held.qp->process_completions(); return held.done.load(); }, 5000));
  const Json free = f.call("bdev_get_bdevs", {{"name", "gated"}});
  ASSERT_EQ(free["result"].size(), 1u) << free.dump();
  EXPECT_EQ(free["result"][0]["claimed"], false) << "the device did not go back to its bdev";
  EXPECT_EQ(add_gated(f, kTestNqn, 6)["result"], 6) << "the bdev cannot serve a namespace again";
  EXPECT_EQ(f.call("nvmf_subsystem_remove_ns", {{"nqn", kTestNqn}, {"nsid", 6}})["result"], true);
  EXPECT_EQ(f.call("bdev_null_delete", {{"name", "gated"}})["result"], true);
}

// nvmf_delete_subsystem with a command on one of its namespaces: the subsystem is gone at once
// (another of the same NQN may be made), and the client is answered once the command is done
// and the bdev is free; other clients are answered meanwhile, and the bdev is busy for them.
TEST(RpcServer, SlowDeleteSubsystemWaitsForItsCommandsOffTheRpcThread) {
  GatedNamespaceFixture g("slow-delete-subsystem");
  RpcFixture& f = g.f;
  const std::string nqn = "nqn.2016-06.io.spdk:doomed";
  ASSERT_EQ(f.call("nvmf_create_subsystem", {{"nqn", nqn}, {"allow_any_host", true}})["result"], true);
  ASSERT_EQ(f.listen(nqn), true);
  ASSERT_EQ(f.call("bdev_null_create", {{"name", "gated"}, {"num_blocks", 2048}, {"block_size", 512}})["result"], "gated");
  ASSERT_EQ(add_gated(f, nqn, 1)["result"], 1);
  const int a = connect_to(f.path);
  ASSERT_GE(a, 0);
  HeldCommand held;
  std::string err;
  ASSERT_TRUE(held.send(f, g.gated, nqn, 1, err)) << err;
  // From here to the release, no fatal check: the device must let its command go at the end.
  send_all(a, rpc_py_request("nvmf_delete_subsystem", 1, {{"nqn", nqn}}));
  EXPECT_TRUE(wait_for([&] { return being_removed(f.call("bdev_get_bdevs", {{"name", "gated"}})); }, 5000))
      << "the bdev is not shown leaving its namespace";
  EXPECT_EQ(ana_call(f, "inaccessible")["result"], true) << "a failover call waited for another client's delete";
  EXPECT_EQ(f.call("nvmf_get_subsystems", {{"nqn", nqn}})["error"]["code"], control::kNoSuchDevice);
  EXPECT_EQ(f.call("nvmf_delete_subsystem", {{"nqn", nqn}})["error"]["code"], control::kInvalidParams);
  EXPECT_EQ(f.call("bdev_null_delete", {{"name", "gated"}})["error"]["code"], control::kBusy);
  // The same NQN again, at once: the bdev is not yet its to take.
  EXPECT_EQ(f.call("nvmf_create_subsystem", {{"nqn", nqn}, {"allow_any_host", true}})["result"], true);
  EXPECT_EQ(add_gated(f, nqn, 1)["error"]["code"], control::kBusy);
  EXPECT_TRUE(nothing_to_read(a)) << "the delete was answered before the command on its namespace was done";

  g.gated.dev.load()->release_one();
  const auto answers = read_answers(a, 1);
  ::close(a);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0]["result"], true) << answers[0].dump();
  const Json free = f.call("bdev_get_bdevs", {{"name", "gated"}});
  ASSERT_EQ(free["result"].size(), 1u) << free.dump();
  EXPECT_EQ(free["result"][0]["claimed"], false) << "the device did not go back to its bdev";
  EXPECT_EQ(add_gated(f, nqn, 1)["result"], 1) << "the bdev cannot serve the new subsystem";
  EXPECT_EQ(f.call("nvmf_delete_subsystem", {{"nqn", nqn}})["result"], true);
  EXPECT_EQ(f.call("bdev_null_delete", {{"name", "gated"}})["result"], true);
}

// Deleting the bdev of a namespace with a command on it: the namespace goes at once, the bdev
// once the command is done (its device closed off the RPC thread); another client is answered
// meanwhile, and a second delete of the bdev, or taking it for a namespace, is busy.
TEST(RpcServer, SlowDeleteOfABdevInUseWaitsForItsCommandsOffTheRpcThread) {
  GatedNamespaceFixture g("slow-delete-used");
  RpcFixture& f = g.f;
  ASSERT_EQ(f.call("bdev_null_create", {{"name", "gated"}, {"num_blocks", 2048}, {"block_size", 512}})["result"], "gated");
  ASSERT_EQ(add_gated(f, kTestNqn, 5)["result"], 5);
  const int a = connect_to(f.path);
  ASSERT_GE(a, 0);
  HeldCommand held;
  std::string err;
  ASSERT_TRUE(held.send(f, g.gated, kTestNqn, 5, err)) << err;
  // From here to the release, no fatal check: the device must let its command go at the end.
  send_all(a, rpc_py_request("bdev_null_delete", 1, {{"name", "gated"}}));
  EXPECT_TRUE(wait_for([&] { return being_removed(f.call("bdev_get_bdevs", {{"name", "gated"}})); }, 5000))
      << "the bdev is not shown leaving its namespace";
  EXPECT_EQ(ana_call(f, "inaccessible")["result"], true) << "a failover call waited for another client's delete";
  EXPECT_EQ(f.call("bdev_null_delete", {{"name", "gated"}})["error"]["code"], control::kBusy);
  EXPECT_EQ(add_gated(f, kTestNqn, 6)["error"]["code"], control::kBusy);
  EXPECT_TRUE(nothing_to_read(a)) << "the delete was answered before the command on its namespace was done";

  g.gated.dev.load()->release_one();
  const auto answers = read_answers(a, 1);
  ::close(a);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0]["result"], true) << answers[0].dump();
  EXPECT_EQ(f.call("bdev_get_bdevs", {{"name", "gated"}})["error"]["code"], control::kNoSuchDevice);
  EXPECT_EQ(f.call("bdev_null_create", {{"name", "gated"}, {"num_blocks", 2048}, {"block_size", 512}})["result"], "gated")
      << "the name is not free again";
}

// stop() with a removal waiting for the commands on its namespace says what it waits for and
// returns once the removal is settled and answered (the bdev free again), not before.
TEST(RpcServer, SlowRemoveNsInFlightIsSettledBeforeStopReturns) {
  LogLines log(LogLevel::Info);
  GatedNamespaceFixture g("slow-stop-drain");
  RpcFixture& f = g.f;
  ASSERT_EQ(f.call("bdev_null_create", {{"name", "gated"}, {"num_blocks", 2048}, {"block_size", 512}})["result"], "gated");
  ASSERT_EQ(add_gated(f, kTestNqn, 5)["result"], 5);
  const int a = connect_to(f.path);
  ASSERT_GE(a, 0);
  HeldCommand held;
  std::string err;
  ASSERT_TRUE(held.send(f, g.gated, kTestNqn, 5, err)) << err;
  // From here to the release, no fatal check: the device must let its command go at the end.
  send_all(a, rpc_py_request("nvmf_subsystem_remove_ns", 1, {{"nqn", kTestNqn}, {"nsid", 5}}));
  // A worker waits for the command (a request no worker had taken when stop() began would be
  // refused, its namespace settled all the same).
  EXPECT_TRUE(wait_for([&] { return log.any_holds("waiting for the 1 command(s) still on it"); }, 5000));
  auto stopped = std::async(std::launch::async, [&] { f.server.stop(); });
  EXPECT_TRUE(wait_for([&] { return log.any_holds("for the commands on a namespace taken away"); }, 5000));
  EXPECT_EQ(stopped.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "stop() left a removal behind";
  g.gated.dev.load()->release_one();
  ASSERT_EQ(stopped.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const auto answers = read_answers(a, 1);
  ::close(a);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0]["result"], true) << answers[0].dump();
  target::BdevTable::Info info;
  ASSERT_TRUE(f.t.target().state().bdevs.find("gated", info));
  EXPECT_TRUE(info.subnqn.empty() && !info.leaving) << "the device did not go back to its bdev";
}

// stop() with a slow create in flight says so, answers slow requests that come meanwhile that
// the server stops, and returns once the create is carried out and answered.
TEST(RpcServer, SlowRequestInFlightIsCarriedOutBeforeStopReturns) {
  HeldDevices held;
  LogLines log(LogLevel::Info);
  RpcFixture f("slow-stop", {}, default_config(), held.factory());
  const int a = connect_to(f.path);
  ASSERT_GE(a, 0);
  send_all(a, rpc_py_request("bdev_rbd_create", 1, held_rbd_params("HeldStop")));
  ASSERT_TRUE(held.wait_until_arrived(1));
  auto stopped = std::async(std::launch::async, [&] { f.server.stop(); });
  ASSERT_TRUE(wait_for([&] { return log.any_holds("waiting for 1 slow request"); }, 5000));
  EXPECT_EQ(f.call("bdev_aio_create", {{"name", "HeldLate"}, {"filename", "/net/late.img"}})["error"]["code"],
            control::kBusy);
  EXPECT_EQ(stopped.wait_for(std::chrono::seconds(0)), std::future_status::timeout) << "stop() left a create behind";
  held.release();
  ASSERT_EQ(stopped.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const auto answers = read_answers(a, 1);
  ::close(a);
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0]["result"], "HeldStop");
  target::BdevTable::Info info;
  EXPECT_TRUE(f.t.target().state().bdevs.find("HeldStop", info));
  EXPECT_FALSE(f.t.target().state().bdevs.find("HeldLate", info));
}

}  // namespace
}  // namespace nvtcp::test::rpc_server_test

// SPDX-License-Identifier: Apache-2.0
// An in-process target on an ephemeral loopback port, for integration tests.
#pragma once
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "nvtcp/host.hpp"
#include "../support/process_memory.hpp"
#include "target/bdevs.hpp"
#include "target_tcp/target.hpp"

namespace nvtcp::test {

inline constexpr const char* kTestNqn = "nqn.2026-11.io.nvtcp:test";

inline constexpr uint32_t kRamNsid = 2;  // in default_config(): RAM, 64 MiB, 512-byte blocks

// One subsystem (kTestNqn) with: nsid 1 null 1 GiB/512, nsid 2 ram 64 MiB/512,
// nsid 3 ram 64 MiB/4096, and (when file_path is set) nsid 4 file 64 MiB/512.
inline target::TargetConfig default_config(const std::string& file_path = "") {
  target::TargetConfig cfg;
  cfg.listeners.push_back({"127.0.0.1", 0});
  cfg.discovery_port = 0;  // parallel tests must not fight over 8009; listeners serve discovery too
  target::SubsystemConfig sc;
  sc.nqn = kTestNqn;
  sc.namespaces.push_back({1, "null", 1ull << 30, "", 512});
  sc.namespaces.push_back({2, "ram", 64ull << 20, "", 512});
  sc.namespaces.push_back({3, "ram", 64ull << 20, "", 4096});
  if (!file_path.empty()) sc.namespaces.push_back({4, "file", 64ull << 20, file_path, 512});
  cfg.subsystems.push_back(sc);
  return cfg;
}

// A new file of size bytes (sparse) under /tmp, its name starting with prefix, for a file
// namespace; path names it, and the caller removes it.
inline ::testing::AssertionResult make_temp_file(const std::string& prefix, off_t size, std::string& path) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  const int fd = mkstemp(tmpl.data());
  if (fd < 0) return ::testing::AssertionFailure() << "mkstemp " << tmpl << ": " << std::strerror(errno);
  path = tmpl;
  const bool sized = ftruncate(fd, size) == 0;
  ::close(fd);
  if (!sized) return ::testing::AssertionFailure() << "ftruncate " << path << ": " << std::strerror(errno);
  return ::testing::AssertionSuccess();
}

// A bdev (a device for namespaces added at run time): its name, type ("ram", "null", "file", or
// "" to name one that exists), size and block size.
inline target::NamespaceConfig bdev_config(const std::string& name, const std::string& type, uint64_t size,
                                           uint32_t block_size = 512) {
  target::NamespaceConfig nc;
  nc.name = name;
  nc.type = type;
  nc.size = size;
  nc.block_size = block_size;
  return nc;
}

// The bdev `name`, its namespace gone, is free again: it serves kTestNqn once more (the new
// namespace's nsid in nsid).
inline void expect_bdev_free_and_reusable(target::Target& tgt, const std::string& name, uint32_t& nsid) {
  target::BdevTable::Info info;
  ASSERT_TRUE(tgt.state().bdevs.find(name, info));
  EXPECT_TRUE(info.subnqn.empty());
  nsid = 0;
  auto back = bdev_config(name, "", 0);
  EXPECT_EQ(tgt.live_config().add_namespace(kTestNqn, back, nsid), "");
}

// nsid 2 of default_config() as the host's Identify Namespace gives it: 64 MiB of 512-byte blocks.
inline void expect_default_ram_namespace(host::Controller& ctrl) {
  host::NamespaceInfo ni;
  std::string err;
  ASSERT_TRUE(ctrl.namespace_info(kRamNsid, ni, err)) << err;
  EXPECT_EQ(ni.block_size, 512u);
  EXPECT_EQ(ni.blocks, (64ull << 20) / 512);
}

// len bytes that depend on seed (write data whose misplacement shows on read-back).
// A loopback port nobody listens on now (bound, then let go): for a setting that takes a fixed
// port, as --discovery-port does. Another process may take it in between; rarely.
inline uint16_t unused_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// Whether something accepts TCP connections on the loopback port now.
inline bool tcp_connects(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  ::close(fd);
  return ok;
}

inline std::vector<uint8_t> pattern(size_t len, uint64_t seed) {
  std::vector<uint8_t> b(len);
  std::mt19937_64 g(seed * 0x9E3779B97F4A7C15ull + 1);
  for (size_t i = 0; i < len; i += 8) {
    uint64_t v = g();
    std::memcpy(b.data() + i, &v, std::min<size_t>(8, len - i));
  }
  return b;
}

// Polls pred (for state another thread changes) until it holds or ms pass.
inline bool wait_for(const std::function<bool()>& pred, int ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

// Submits one I/O command through submit(cb, ctx) and drives qp until it completes (or 10 s
// pass: then the status is a transport error); returns its status. A command that never
// completes leaves its waiter allocated: the queue pair may still call back into it.
inline nvme::Status one_command(host::QueuePair& qp, const std::function<int(host::CompletionFn, void*)>& submit) {
  struct Wait {
    bool done = false;
    host::Completion c;
  };
  auto* w = new Wait;
  const int rc = submit(
      [](void* ctx, const host::Completion& c) {
        auto* waiter = static_cast<Wait*>(ctx);
        waiter->c = c;
        waiter->done = true;
      },
      w);
  EXPECT_EQ(rc, 0);
  if (rc != 0) {
    delete w;
    return nvme::sc::TransportError;
  }
  // By the clock, not by a count of polls: a poll returns as soon as anything arrives, so
  // 10,000 of them pass long before an 8 MiB read has come in on a loaded machine.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!w->done && std::chrono::steady_clock::now() < deadline) qp.process_completions(1000);
  EXPECT_TRUE(w->done) << "the command never completed";
  if (!w->done) return nvme::sc::TransportError;
  const nvme::Status st = w->c.status;
  delete w;
  return st;
}

// Commands in flight on queue pairs, each completing into an Op of its own. Ops live in a deque
// that outlives the queue pairs (declare the batch first), so a late or failing completion
// never writes freed memory.
struct CompletionBatch {
  struct Op {
    bool done = false;
    host::Completion cpl;
    int rc = 0;  // what the submit returned, for callers that keep it
  };
  std::deque<Op> ops;
  static void cb(void* ctx, const host::Completion& c) {
    auto* o = static_cast<Op*>(ctx);
    o->cpl = c;
    o->done = true;
  }
  Op& add() { return ops.emplace_back(); }
  bool all_done() const {
    for (auto& o : ops)
      if (!o.done) return false;
    return true;
  }
  // Ops not done, or done with an error.
  size_t failures() const {
    size_t n = 0;
    for (auto& o : ops) n += !o.done || !o.cpl.status.ok();
    return n;
  }
  bool all_ok() const { return failures() == 0; }
};

// A controller and one I/O queue pair of the given depth.
struct HostSession {
  std::unique_ptr<host::Controller> ctrl;
  std::unique_ptr<host::QueuePair> qp;
};
inline ::testing::AssertionResult open_session(const host::TransportId& trid, const host::ControllerOptions& o,
                                               uint32_t depth, HostSession& s) {
  std::string err;
  s.ctrl = host::Controller::connect(trid, o, err);
  if (s.ctrl) s.qp = s.ctrl->create_io_qpair(depth, err);
  if (!s.qp) return ::testing::AssertionFailure() << err;
  return ::testing::AssertionSuccess();
}

// Counts the completions of the commands (or the caller's requests) that name it, and keeps
// the last status.
struct CompletionCounter {
  int done = 0;
  nvme::Status st;
  static void cb(void* ctx, const host::Completion& c) {
    auto* o = static_cast<CompletionCounter*>(ctx);
    ++o->done;
    o->st = c.status;
  }
};

class RunningTarget {
 public:
  explicit RunningTarget(target::TargetConfig cfg = default_config(), target::DeviceFactory factory = {})
      : t_(std::make_unique<target::Target>(cfg, std::move(factory))) {
    std::string err = t_->start();
    if (!err.empty()) throw std::runtime_error("target start: " + err);
  }
  ~RunningTarget() { t_->stop(); }
  uint16_t port(size_t listener = 0) const { return t_->port(listener); }
  target::Target& target() { return *t_; }
  host::TransportId trid(const std::string& nqn = kTestNqn, uint32_t nsid = 1) const {
    host::TransportId t;
    t.traddr = "127.0.0.1";
    t.trsvcid = port();
    t.subnqn = nqn;
    t.nsid = nsid;
    return t;
  }

 private:
  std::unique_ptr<target::Target> t_;
};

}  // namespace nvtcp::test

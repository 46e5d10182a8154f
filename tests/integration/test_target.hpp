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
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "nvtcp/host.hpp"
#include "target_tcp/target.hpp"

namespace nvtcp::test {

inline constexpr const char* kTestNqn = "nqn.2026-11.io.nvtcp:test";

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

// This process's resident memory (target and test clients together).
inline uint64_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long long size = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%llu %llu", &size, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * uint64_t(sysconf(_SC_PAGESIZE));
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

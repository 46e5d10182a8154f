// An in-process target on an ephemeral loopback port, for integration tests.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "nvtcp/host.hpp"
#include "target/target.hpp"

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

class RunningTarget {
 public:
  explicit RunningTarget(target::TargetConfig cfg = default_config()) : t_(std::make_unique<target::Target>(cfg)) {
    std::string err = t_->start();
    if (!err.empty()) throw std::runtime_error("target start: " + err);
  }
  ~RunningTarget() { t_->stop(); }
  uint16_t port() const { return t_->port(0); }
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

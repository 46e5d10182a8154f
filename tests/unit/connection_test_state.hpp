// SPDX-License-Identifier: Apache-2.0
// The target state that connection unit tests build their Connections on: one subsystem (nqn)
// with a NULL namespace 1 (1 GiB of 4 KiB blocks) and a RAM namespace 2 (4 MiB of 512-byte
// blocks), on a configuration the test adjusts first (its timeouts and limits). It lives for the
// whole process: connections that close after the test keep references to it.
#pragma once
#include <gtest/gtest.h>

#include <functional>

#include "target/config.hpp"
#include "target/target_state.hpp"

namespace nvtcp::test {

inline constexpr uint32_t kConnNullNsid = 1;
inline constexpr uint32_t kConnRamNsid = 2;

inline target::TargetState* make_connection_test_state(const char* nqn,
                                                       const std::function<void(target::TargetConfig&)>& adjust) {
  target::TargetConfig cfg;
  cfg.listeners.push_back({"127.0.0.1", 4420});
  adjust(cfg);
  target::SubsystemConfig sc;
  sc.nqn = nqn;
  sc.namespaces.push_back({kConnNullNsid, "null", 1u << 30, "", 4096});
  sc.namespaces.push_back({kConnRamNsid, "ram", 4u << 20, "", 512});
  cfg.subsystems.push_back(sc);
  EXPECT_EQ(target::finalize_config(cfg), "");
  auto* s = new target::TargetState();
  EXPECT_EQ(target::build_state(cfg, *s), "");
  return s;
}

}  // namespace nvtcp::test

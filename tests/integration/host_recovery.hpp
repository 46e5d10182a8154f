// SPDX-License-Identifier: Apache-2.0
// What the host recovery tests share, on real time (reconnect_test.cpp) and on a stepped clock
// (host_stepped_clock_test.cpp): the options that turn reconnecting on, the address of a target
// or of the fault proxy in front of it, and a completion counter. In a namespace of their own:
// tests/integration links into one binary, and raw_session.hpp already has a nvtcp::test::Session
// (two classes of one name there would be one class to the linker, with one of the destructors).
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "nvtcp/host.hpp"
#include "test_target.hpp"

namespace nvtcp::test::recovery {

using Outcome = CompletionCounter;

// Reconnecting on (ctrl_loss_tmo 20 s, a try every 100 ms), with command timeouts far beyond
// anything a test does on purpose.
inline host::ControllerOptions recovering_options() {
  host::ControllerOptions o;
  o.ctrl_loss_tmo_ms = 20000;
  o.reconnect_delay_ms = 100;
  o.connect_timeout_ms = 2000;
  o.io_timeout_ms = 5000;
  return o;
}

// The test subsystem at 127.0.0.1:port (a RunningTarget's, or a FaultProxy's in front of it).
inline host::TransportId via(uint16_t port, uint32_t nsid = 2) {
  host::TransportId t;
  t.traddr = "127.0.0.1";
  t.trsvcid = port;
  t.subnqn = kTestNqn;
  t.nsid = nsid;
  return t;
}

// Processes qp's completions until pred holds (true) or timeout_ms of real time pass (false).
template <class Pred>
bool poll_until(host::QueuePair& qp, Pred pred, int timeout_ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    qp.process_completions(1000);
  }
  return true;
}

}  // namespace nvtcp::test::recovery

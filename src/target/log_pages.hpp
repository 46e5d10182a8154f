// SPDX-License-Identifier: Apache-2.0
// The log pages an admin queue's controller answers Get Log Page with (02h), one function each:
// each log is built whole and the window the host asked for is cut out of it. What a read takes
// away (a reservation notice, the changed-namespace list, an event's mask) goes only once the
// read is delivered, never while the log is being built.
#pragma once
#include <cstdint>
#include <vector>

#include "wire/nvme.hpp"

namespace nvtcp::target {

class CommandQueue;
class Controller;

class LogPages {
 public:
  explicit LogPages(const CommandQueue& q) : q_(q) {}
  LogPages(const LogPages&) = delete;
  LogPages& operator=(const LogPages&) = delete;

  // The bytes of the log for the window asked for (valid until the next Get Log Page), len of
  // them, followed by pad zero bytes (past the log's end).
  struct Window {
    const uint8_t* data = nullptr;
    uint32_t len = 0;
    uint32_t pad = 0;
  };
  // Builds the log sqe asks for and points w at the len bytes it asks for.
  wire::Status build(const wire::Sqe& sqe, uint32_t len, Window& w);
  // The log build() made last has a buffer and goes to the host: what reading it takes away
  // goes now.
  void delivered();
  // The log build() made last waits for a buffer: its read runs again and builds it anew, and
  // nothing is taken away until that read is delivered.
  void forget() { pending_ = {}; }

 private:
  Controller& ctrl() const;
  void supported_log_pages();
  void ana(const wire::Sqe& sqe);
  wire::Status command_effects(const wire::Sqe& sqe);
  void error_information();
  wire::Status smart_health(const wire::Sqe& sqe);
  void firmware_slot();
  void reservation_notification();
  // Every subsystem this host may use, on every listener, then this discovery subsystem.
  void discovery_log();
  uint32_t discovery_entries(uint8_t* buf, uint32_t cap);
  // The window of the log built: checked, and what its read takes away noted.
  wire::Status window(const wire::Sqe& sqe, uint32_t len, Window& w);

  const CommandQueue& q_;
  std::vector<uint8_t> page_;  // the whole log, before the window asked for is cut out
  enum class Consume : uint8_t { Nothing, ReservationNotice, ChangedNamespaces };
  struct Pending {
    bool valid = false;  // a log page was built and its read is valid
    Consume what = Consume::Nothing;
    bool retain_event = false;
    wire::LogPageId lid{};
  } pending_;  // set by build(), applied by delivered()
};

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
// Admin commands on an admin queue, the part of its CommandQueue that runs them: what the
// controller answers, the data each moves, and the commands it holds: Asynchronous Event
// Requests until an event comes, Aborts until the I/O queue answers. It is where the controller
// delivers those (AdminQueueSink).
#pragma once
#include <cstdint>
#include <vector>

#include "target/command.hpp"
#include "target/controller.hpp"

namespace nvtcp::target {

class CommandQueue;

class AdminCommands final : public AdminQueueSink {
 public:
  explicit AdminCommands(CommandQueue& q) : q_(q) {}
  AdminCommands(const AdminCommands&) = delete;
  AdminCommands& operator=(const AdminCommands&) = delete;

  void parse(Command& r);
  void execute(Command& r);
  // The queue closed: the held commands' answers have nowhere to go.
  void closed() { held_.clear(); }

  // AdminQueueSink: completes held Asynchronous Event Requests and Aborts.
  void deliver_async_events() override;
  void abort_done(uint16_t abort_cid, bool aborted) override;
  bool abort_held_aer(uint16_t cid) override;

 private:
  using State = Command::State;
  void drop_held(Command& r);

  CommandQueue& q_;
  std::vector<Command*> held_;  // HeldAer and HeldAbort commands
};

}  // namespace nvtcp::target

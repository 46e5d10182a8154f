// SPDX-License-Identifier: Apache-2.0
// Admin commands on an admin queue, the part of its CommandQueue that runs them, all of them
// here: Identify (its data built by IdentifyData, identify.hpp), Get Log Page (LogPages,
// log_pages.hpp), Get and Set Features (features.cpp), Keep Alive, and the commands it holds:
// Asynchronous Event Requests until an event comes, Aborts until the I/O queue answers
// (admin_commands.cpp). It is where the controller delivers those (AdminQueueSink). Each
// command reads and changes its controller's state (a friend of Controller): admin commands run
// on the admin queue's reactor only.
#pragma once
#include <cstdint>
#include <vector>

#include "target/command.hpp"
#include "target/controller.hpp"
#include "target/log_pages.hpp"

namespace nvtcp::target {

class CommandQueue;

// Asynchronous Event Requests and Aborts an admin queue holds at most (Identify's AERL and
// ACL are 0's based).
inline constexpr uint8_t kAerl = 3;  // 4 outstanding Asynchronous Event Requests
inline constexpr uint8_t kAcl = 3;

class AdminCommands final : public AdminQueueSink {
 public:
  explicit AdminCommands(CommandQueue& q) : q_(q), logs_(q) {}
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
  Controller& ctrl() const;
  // The bytes of data r may send the host (its SGL), 0 for a command with none.
  static uint32_t asked_len(const Command& r);
  // r ends with st; a failed admin command is logged (debug: any host can send them in a loop).
  void finish(Command& r, wire::Status st);
  // r answers with len bytes of data (a log page's window, a feature's data) followed by pad
  // zero bytes: in a buffer the size of the data, asked for first if r has none that large
  // (asking changes nothing: r is executed again from the start once it is there). False when
  // r waits for that buffer.
  bool send_data(Command& r, const uint8_t* data, uint32_t len, uint32_t pad);
  void identify(Command& r);
  void get_log_page(Command& r);
  void set_features(Command& r);
  // The features that end as they are set: Success, or why not.
  wire::Status set_feature(Command& r);
  void set_write_cache(Command& r);
  void set_reservation_persistence(Command& r);
  void get_features(Command& r);
  void hold_async_event_request(Command& r);
  void abort(Command& r);
  void drop_held(Command& r);

  CommandQueue& q_;
  LogPages logs_;
  std::vector<uint8_t> feature_data_;  // a Get Features' data (16h, 81h) on its way to the host
  std::vector<Command*> held_;         // HeldAer and HeldAbort commands
  uint32_t aers_held_ = 0;    // HeldAer commands
  uint32_t aborts_held_ = 0;  // Abort commands waiting for an I/O queue's answer (ACL)
};

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
// What one application's controller (app_controller.hpp) does with each admin command it
// fetches: answers it (queue management, Identify Controller, the Changed Namespace List, the
// features it keeps: Number of Queues, Interrupt Coalescing, Async Event Configuration, Keep
// Alive), forwards it to the remote controller within the application's admin budget (other
// Identify, Get Log Page, Get Features), or refuses it. app_controller.hpp says which goes where
// and why. It runs on the engine's control thread, on its controller's state: the controller's
// life cycle, its admin queue and its I/O queues' states stay with AppController.
#pragma once
#include <cstdint>
#include <vector>

#include "nvtcp/sqe.hpp"
#include "nvtcp/status.hpp"

namespace nvtcp::engine {

class AppController;

class AppAdminCommands {
 public:
  explicit AppAdminCommands(AppController& app, uint32_t io_queues_max) : app_(app), io_queues_granted_(io_queues_max) {}
  AppAdminCommands(const AppAdminCommands&) = delete;
  AppAdminCommands& operator=(const AppAdminCommands&) = delete;

  // Runs one command fetched from the admin SQ; nothing it throws escapes.
  void execute_guarded(const nvme::Sqe& sqe);
  // Features return to their defaults with a reset (CC.EN 1 -> 0, then 1).
  void reset_features(uint32_t io_queues_max);
  uint32_t coalescing() const { return coalescing_; }
  uint32_t async_event_config() const { return async_event_config_; }

 private:
  void execute(const nvme::Sqe& sqe);
  void get_log_page(const nvme::Sqe& sqe);
  void changed_namespaces_log(const nvme::Sqe& sqe, uint32_t len);
  uint8_t* admin_data(const nvme::Sqe& sqe, uint32_t len, nvme::Status& st);
  void create_cq(const nvme::Sqe& sqe);
  void create_sq(const nvme::Sqe& sqe);
  void delete_sq(const nvme::Sqe& sqe);
  void delete_cq(const nvme::Sqe& sqe);
  void identify(const nvme::Sqe& sqe);
  void features(const nvme::Sqe& sqe, bool set);
  void forward(const nvme::Sqe& sqe, uint32_t len, bool to_controller);

  AppController& app_;
  uint32_t io_queues_granted_;    // Number of Queues (feature 07h)
  bool queues_requested_ = false; // Set Features 07h may come once, before any queue
  uint32_t coalescing_ = 0;             // feature 08h (THR in bits 7:0, TIME in 15:8)
  uint32_t async_event_config_ = 0;     // feature 0Bh
  std::vector<uint8_t> bounce_;         // Identify Controller and log 04h are built here
};

}  // namespace nvtcp::engine

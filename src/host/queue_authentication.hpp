// SPDX-License-Identifier: Apache-2.0
// In-band authentication of one host queue (DH-HMAC-CHAP, NVMe Base Specification 2.0, 8.13.5),
// apart from its data path: the transaction a Connect's answer asks for (ATR), carried by
// Authentication Send/Receive on the Connect slot one after another before the queue is Ready,
// and a new transaction on a Ready queue (reauthenticate), beside its I/O.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "auth/dhchap_transaction.hpp"
#include "nvtcp/host.hpp"

namespace nvtcp::host::detail {

class QueuePairImpl;

class QueueAuthentication {
 public:
  explicit QueueAuthentication(QueuePairImpl& qp) : qp_(qp) {}
  QueueAuthentication(const QueueAuthentication&) = delete;
  QueueAuthentication& operator=(const QueueAuthentication&) = delete;

  // The Connect answered (connect_dw0) that the queue must authenticate.
  void start(uint32_t connect_dw0);
  // A new transaction on the Connect slot of a Ready queue, waited for in poll(); 0 or -errno.
  int reauthenticate(std::string& err);
  bool in_progress() const { return host_ != nullptr; }
  // The connection closed (why) during a transaction: a refusal, ours or the target's. Fails the
  // queue for good and says so (true); false if no transaction was under way.
  bool fail_on_close(const std::string& why);

 private:
  // Sends the transaction's next message or receives the next answer; at its end, the queue is
  // associated or failed.
  void step();
  static void on_step_done(void* ctx, const Completion& c);
  // The transaction is over: the queue is associated, or failed for good.
  void end_transaction();

  QueuePairImpl& qp_;
  std::unique_ptr<auth::DhchapHost> host_;
  std::vector<uint8_t> out_;
  std::vector<uint8_t> in_;
  uint16_t transactions_ = 0;
  bool receiving_ = false;  // the command on the Connect slot is the Receive
};

}  // namespace nvtcp::host::detail

// SPDX-License-Identifier: Apache-2.0
// What a QueuePair drives: one I/O queue of some transport. NVMe/TCP (QueuePairImpl: a TCP
// connection of its own) or the offload engine (EngineIoQueue: queues in memory shared with
// the engine).
#pragma once
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/block_size_table.hpp"
#include "host/host_error.hpp"
#include "nvtcp/host.hpp"

namespace nvtcp::host::detail {

class IoQueue {
 public:
  virtual ~IoQueue() = default;
  // ok(), or refused: Kind::Transport (ENOTCONN: failed, or failing fast while reconnecting),
  // Kind::Busy (EBUSY), Kind::Invalid (EINVAL, EFAULT). No message (see HostError::refused).
  virtual HostError submit(const nvme::Sqe& sqe, void* data, uint32_t len, bool to_controller, CompletionFn cb,
                           void* ctx) = 0;
  virtual int poll(uint32_t timeout_us) = 0;
  virtual uint16_t qid() const = 0;
  virtual uint32_t depth() const = 0;
  virtual uint32_t outstanding() const = 0;
  virtual bool failed() const = 0;
  virtual bool ready() const = 0;
  virtual uint32_t reconnects() const = 0;
  // DH-HMAC-CHAP again on this queue, on the owner's thread (QueuePair::reauthenticate).
  virtual int reauthenticate(std::string& err) {
    err = "re-authentication is not done over this transport";
    return -ENOTSUP;
  }

  // Set by whoever created the queue: released (and so the qid returned) when it dies.
  std::shared_ptr<void> lease;
  // Block size of each namespace, for read()/write() that count in blocks: the controller's
  // table, which its admin thread updates when a rescan changes a namespace.
  std::shared_ptr<const BlockSizeTable> block_sizes;
};

}  // namespace nvtcp::host::detail

// SPDX-License-Identifier: Apache-2.0
// Admin commands on an admin queue (admin_commands.hpp): what the controller answers
// (controller.cpp), the data each moves, and the commands it holds.
#include "target/admin_commands.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "nvtcp/identify.hpp"
#include "target/command_queue.hpp"
#include "target/queue_limits.hpp"
#include "util/log.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

namespace {
// Admin commands with data for the host. Get Features has data for some features only
// (81h): without it the SGL may be empty.
bool transfers_to_host(const Sqe& sqe) {
  auto op = static_cast<AdminOpcode>(sqe.opc);
  if (op == AdminOpcode::GetFeatures) return sqe.sgl.length != 0;
  return op == AdminOpcode::Identify || op == AdminOpcode::GetLogPage;
}
}  // namespace

void AdminCommands::parse(Command& r) {
  const Sqe& sqe = r.sqe;
  if (transfers_to_host(sqe)) {
    if (sqe.sgl.type != kSglTransportDataBlock) {
      r.status = sc::SglDescriptorTypeInvalid;
      return;
    }
    if (sqe.sgl.length > q_.ctrl_->mdts_bytes()) {
      r.status = sc::InvalidField;
      return;
    }
    // Identify fills 4 KiB; a log page or a feature's data asks for its buffer once it is
    // built and its size known (execute).
    const bool identify = static_cast<AdminOpcode>(sqe.opc) == AdminOpcode::Identify;
    r.xfer = {Command::Direction::ControllerToHost, sqe.sgl.length, identify ? kIdentifyLen : 0};
    return;
  }
  if (static_cast<AdminOpcode>(sqe.opc) == AdminOpcode::SetFeatures && sqe.sgl.length) {
    // A feature with data (16h): in the capsule, as hosts send it, or asked for with an R2T.
    if (sqe.sgl.length > kAdminInCapsule) {
      r.status = sc::DataSglLengthInvalid;
      return;
    }
    if (r.capsule_len == 0 && sqe.sgl.type != kSglTransportDataBlock) {
      r.status = sc::SglDescriptorTypeInvalid;
      return;
    }
    if (r.capsule_len != 0 && r.capsule_len != sqe.sgl.length) {
      r.status = sc::DataSglLengthInvalid;
      return;
    }
    r.xfer = {Command::Direction::HostToController, sqe.sgl.length, sqe.sgl.length};
  }
}

void AdminCommands::execute(Command& r) {
  const Sqe& sqe = r.sqe;
  const uint32_t sgl_len = r.xfer.dir == Command::Direction::ControllerToHost ? r.xfer.len : 0;
  const uint32_t host_len = r.xfer.dir == Command::Direction::HostToController ? r.xfer.len : 0;
  AdminResult res = q_.ctrl_->execute_admin(sqe, r.buf, sgl_len, host_len);
  if (res.status.ok() && res.src) {
    // A log page (or a feature's data): a buffer the size of what it holds in the window,
    // zeros after it. Asking for the buffer changes nothing: the log is built anew then.
    const uint32_t need = std::max<uint32_t>(res.data_len, 4);
    if (r.buf_cap < need) {
      q_.set_state(r, State::Idle);  // the transport holds it until the buffer is there
      q_.transport_.need_buffer(r, need);
      return;
    }
    std::memcpy(r.buf, res.src, res.data_len);
    q_.ctrl_->log_page_delivered();  // only now: what its read takes away goes
    r.tx_data = r.buf;
    r.tx_len = res.data_len;
    r.tx_pad = res.pad_len;
    q_.complete(r, res.status);
    return;
  }
  if (res.held) {
    if (static_cast<AdminOpcode>(sqe.opc) == AdminOpcode::Abort) {
      q_.set_state(r, State::HeldAbort);  // abort_done() completes it
      held_.push_back(&r);
      return;
    }
    q_.set_state(r, State::HeldAer);
    held_.push_back(&r);
    deliver_async_events();  // an event may already be waiting for it
    return;
  }
  r.dw0 = res.dw0;
  r.dw1 = res.dw1;
  if (res.status.ok() && res.durable_ticket) {
    q_.wait_until_durable(r, res.durable_ticket);  // feature 83h: the state file is written first
    return;
  }
  if (res.status.ok() && res.flush_after) {
    q_.io_.start_flush(r, true);  // a write cache turned off: what it held must be durable first
    return;
  }
  if (res.status.ok() && res.data_len) {
    r.tx_data = r.buf;
    r.tx_len = std::min(res.data_len, sgl_len);
  }
  if (!res.status.ok()) log::debug("{}: admin opcode 0x{:02x}: {}", q_.link_.peer, sqe.opc, status_name(res.status));
  q_.complete(r, res.status);
}

void AdminCommands::deliver_async_events() {
  if (!q_.connected() || q_.link_.closing) return;
  uint32_t dw0 = 0;
  for (size_t i = 0; i < held_.size();) {
    Command& r = *held_[i];
    if (r.state() != State::HeldAer) {
      ++i;
      continue;
    }
    if (!q_.ctrl_->take_async_event(dw0)) return;
    r.dw0 = dw0;
    log::info("{}: asynchronous event 0x{:08x} to controller {}", q_.link_.peer, dw0, q_.ctrl_->cntlid());
    drop_held(r);
    q_.complete(r, sc::Success);
  }
}

void AdminCommands::abort_done(uint16_t abort_cid, bool aborted) {
  if (!q_.connected() || q_.link_.closing) return;
  q_.ctrl_->abort_finished();
  for (Command* r : held_) {
    if (r->state() != State::HeldAbort || r->sqe.cid != abort_cid) continue;
    r->dw0 = aborted ? 0 : 1;
    drop_held(*r);
    q_.complete(*r, sc::Success);
    return;
  }
}

bool AdminCommands::abort_held_aer(uint16_t cid) {
  for (Command* r : held_) {
    if (r->state() != State::HeldAer || r->sqe.cid != cid) continue;
    if (!q_.ctrl_->take_held_aer()) return false;
    drop_held(*r);
    q_.complete(*r, sc::AbortRequested);
    return true;
  }
  return false;
}

// Held commands are few (an AER limit's worth, an Abort or two): a vector, kept in order.
void AdminCommands::drop_held(Command& r) {
  held_.erase(std::find(held_.begin(), held_.end(), &r));
}

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
// Admin commands on an admin queue (admin_commands.hpp): their parse and dispatch, the data
// each moves, Identify and Get Log Page (their data built by identify.cpp and log_pages.cpp),
// and the commands it holds.
#include "target/admin_commands.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "nvtcp/identify.hpp"
#include "target/command_queue.hpp"
#include "target/identify.hpp"
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

uint32_t AdminCommands::asked_len(const Command& r) {
  return r.xfer.dir == Command::Direction::ControllerToHost ? r.xfer.len : 0;
}

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
    const bool fills_4k = static_cast<AdminOpcode>(sqe.opc) == AdminOpcode::Identify;
    r.xfer = {Command::Direction::ControllerToHost, sqe.sgl.length, fills_4k ? kIdentifyLen : 0};
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

Controller& AdminCommands::ctrl() const { return *q_.ctrl_; }

void AdminCommands::execute(Command& r) {
  Controller& c = ctrl();
  c.touch();
  // Admin commands other than fabrics ones need an enabled, ready controller (the Linux
  // target answers the same, and leaves discovery controllers alone).
  if (!c.subsystem().is_discovery() && !c.ready()) {
    finish(r, sc::CommandSequenceError);
    return;
  }
  switch (static_cast<AdminOpcode>(r.sqe.opc)) {
    case AdminOpcode::Identify: identify(r); return;
    case AdminOpcode::GetLogPage: get_log_page(r); return;
    case AdminOpcode::SetFeatures: set_features(r); return;
    case AdminOpcode::GetFeatures: get_features(r); return;
    case AdminOpcode::KeepAlive: finish(r, sc::Success); return;
    case AdminOpcode::AsyncEventRequest: hold_async_event_request(r); return;
    case AdminOpcode::Abort: abort(r); return;
    default: finish(r, sc::InvalidOpcode); return;
  }
}

void AdminCommands::finish(Command& r, Status st) {
  if (!st.ok()) log::debug("{}: admin opcode 0x{:02x}: {}", q_.link_.peer, r.sqe.opc, status_name(st));
  q_.complete(r, st);
}

bool AdminCommands::send_data(Command& r, const uint8_t* data, uint32_t len, uint32_t pad) {
  const uint32_t need = std::max<uint32_t>(len, 4);
  if (r.buf_cap < need) {
    q_.set_state(r, State::Idle);  // the transport holds it until the buffer is there
    q_.transport_.need_buffer(r, need);
    return false;
  }
  std::memcpy(r.buf, data, len);
  r.tx_data = r.buf;
  r.tx_len = len;
  r.tx_pad = pad;
  q_.complete(r, sc::Success);
  return true;
}

void AdminCommands::identify(Command& r) {
  const uint32_t sgl_len = asked_len(r);
  if (sgl_len != kIdentifyLen) {
    finish(r, sc::DataSglLengthInvalid);
    return;
  }
  Status st;
  const uint32_t len = IdentifyData(ctrl()).fill(r.sqe, r.buf, st);
  if (st.ok() && len) {
    r.tx_data = r.buf;
    r.tx_len = std::min(len, sgl_len);
  }
  finish(r, st);
}

// The log is built whole and the window asked for cut out: the data goes into a buffer of its
// size and the zeros past the log's end come from a shared zero region, so a 1 MiB read of a
// 2 KiB log costs 2 KiB of memory.
void AdminCommands::get_log_page(Command& r) {
  const Sqe& sqe = r.sqe;
  const uint64_t numd = uint64_t((sqe.cdw11 & 0xFFFF) << 16 | (sqe.cdw10 >> 16)) + 1;  // 0's based: up to 2^32
  const uint64_t len = numd * 4;
  if (len != asked_len(r)) {
    finish(r, sc::DataSglLengthInvalid);
    return;
  }
  LogPages::Window w;
  if (Status st = logs_.build(sqe, uint32_t(len), w); !st.ok()) {
    finish(r, st);
    return;
  }
  // Only a read whose data is on its way takes its notice or list away; one that waits for a
  // buffer runs again and builds the log anew, so what it would take stays until then.
  if (send_data(r, w.data, w.len, w.pad)) {
    logs_.delivered();
  } else {
    logs_.forget();
  }
}

void AdminCommands::hold_async_event_request(Command& r) {
  if (aers_held_ > kAerl) {
    finish(r, sc::AerLimitExceeded);
    return;
  }
  ++aers_held_;
  q_.set_state(r, State::HeldAer);  // completed by deliver_async_events() when an event is ready
  held_.push_back(&r);
  deliver_async_events();  // an event may already be waiting for it
}

// Abort (CDW10: SQID 15:0, CID 31:16). dw0 bit 0 is 0 when the command was aborted (it then
// ends with Command Abort Requested), 1 when it was not (already running, done, or unknown).
// An I/O queue's command: its queue's reactor is asked, and answers on this one (abort_done).
void AdminCommands::abort(Command& r) {
  const uint16_t sqid = uint16_t(r.sqe.cdw10), cid = uint16_t(r.sqe.cdw10 >> 16);
  if (sqid == 0) {
    r.dw0 = abort_held_aer(cid) ? 0 : 1;
    finish(r, sc::Success);
    return;
  }
  if (aborts_held_ > kAcl) {
    finish(r, sc::AbortLimitExceeded);
    return;
  }
  if (!ctrl().post_abort(sqid, cid, r.sqe.cid)) {
    r.dw0 = 1;
    finish(r, sc::Success);
    return;
  }
  ++aborts_held_;
  q_.set_state(r, State::HeldAbort);  // abort_done() completes it
  held_.push_back(&r);
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
    --aers_held_;
    r.dw0 = dw0;
    log::info("{}: asynchronous event 0x{:08x} to controller {}", q_.link_.peer, dw0, q_.ctrl_->cntlid());
    drop_held(r);
    q_.complete(r, sc::Success);
  }
}

void AdminCommands::abort_done(uint16_t abort_cid, bool aborted) {
  if (!q_.connected() || q_.link_.closing) return;
  if (aborts_held_) --aborts_held_;
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
    --aers_held_;
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

// Running a command on a target connection: admission (commands wait, in arrival order,
// while the send queue is over its cap or buffer memory is short), fabrics commands
// (Connect, Property Get/Set, Disconnect), admin commands with their held Asynchronous Event
// Requests and Aborts, and the host's data a command needs (in the capsule, or by R2T).
#include "target/connection.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "nvtcp/identify.hpp"
#include "target/connection_internal.hpp"
#include "util/log.hpp"
#include "wire/fabrics.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

namespace {
constexpr uint32_t kMaxAdminQueueDepth = 128;
constexpr uint64_t kMemoryRetryNs = 2'000'000;       // waiting for buffer memory freed elsewhere
constexpr uint64_t kSendQueueRetryNs = 50'000'000;   // a fallback: sent responses wake us sooner

// Admin commands with data for the host. Get Features has data for some features only
// (81h): without it the SGL may be empty.
bool transfers_to_host(const Sqe& sqe) {
  auto op = static_cast<AdminOpcode>(sqe.opc);
  if (op == AdminOpcode::GetFeatures) return sqe.sgl.length != 0;
  return op == AdminOpcode::Identify || op == AdminOpcode::GetLogPage;
}
}  // namespace

void Connection::execute(Request* r) {
  r->shutdown_after_flush = false;
  // No fused operations; and fabrics commands describe data with SGLs only (PSDT 01b),
  // whatever the opcode: anything else would run as something the host did not ask for.
  if ((r->sqe.flags & kSqeFlagsPsdtMask) != kSqeFlagsPsdtSgl) {
    log::debug("{}: cid {} opcode 0x{:02x}: flags 0x{:02x} (not PSDT 01b)", peer_, r->sqe.cid, r->sqe.opc,
               r->sqe.flags);
    complete(r, sc::InvalidField);
    return;
  }
  if ((fused_first_ || (r->sqe.flags & kSqeFlagsFuseMask)) && fused_halves(r)) return;
  if (r->sqe.opc == uint8_t(AdminOpcode::Fabrics)) {
    execute_fabrics(r);
  } else if (state_ != State::Connected) {
    complete(r, sc::CommandSequenceError);
  } else if (qid_ == 0) {
    execute_admin(r);
  } else {
    execute_io(r);
  }
}

void Connection::execute_fabrics(Request* r) {
  auto fctype = static_cast<FabricsType>(r->sqe.fctype());
  if (fctype == FabricsType::Connect) {
    if (state_ == State::Connected) {
      complete(r, sc::CommandSequenceError);
      return;
    }
    execute_connect(r);
    return;
  }
  if (state_ != State::Connected) {
    complete(r, sc::CommandSequenceError);
    return;
  }
  switch (fctype) {
    case FabricsType::PropertyGet:
    case FabricsType::PropertySet: {
      if (qid_ != 0) break;
      PropertySetCmd pg;
      std::memcpy(&pg, &r->sqe, sizeof(pg));
      bool eight = (pg.attrib & 0x7) == 1;
      Status st;
      ctrl_->touch();
      if (fctype == FabricsType::PropertyGet) {
        uint64_t v = 0;
        st = ctrl_->property_get(pg.ofst, eight, v);
        r->dw0 = uint32_t(v);
        r->dw1 = uint32_t(v >> 32);
      } else {
        Controller::PropertySetResult set = ctrl_->property_set(pg.ofst, eight, pg.value);
        if (set.flush_for_shutdown) {
          r->shutdown_after_flush = true;
          start_flush(r, true);  // completes the Property Set once every cache is durable
          return;
        }
        st = set.status;
      }
      complete(r, st);
      return;
    }
    case FabricsType::Disconnect:
      close_after_send_ = true;
      complete(r, sc::Success);
      return;
    default: break;
  }
  complete(r, sc::InvalidOpcode);
}

void Connection::invalid_connect_param(Request* r, bool in_data, uint32_t offset) {
  r->dw0 = offset | (in_data ? (1u << 16) : 0);
  complete(r, sc::ConnectInvalidParameters);
}

void Connection::execute_connect(Request* r) {
  ConnectCmd cmd;
  std::memcpy(&cmd, &r->sqe, sizeof(cmd));
  if (r->data_len != kConnectDataLen) {
    log::warn("{}: Connect without its {}-byte data (got {})", peer_, kConnectDataLen, r->data_len);
    complete(r, sc::DataSglLengthInvalid);
    return;
  }
  if (cmd.recfmt != 0) {
    complete(r, sc::ConnectIncompatibleFormat);
    return;
  }
  ConnectData data;
  std::memcpy(&data, r->buf.get(), sizeof(data));
  std::string subnqn(data.subnqn, strnlen(data.subnqn, sizeof(data.subnqn)));
  std::string hostnqn(data.hostnqn, strnlen(data.hostnqn, sizeof(data.hostnqn)));
  Subsystem* sub = target_.find_subsystem(subnqn);
  if (!sub) {
    log::warn("{}: Connect to unknown subsystem '{}'", peer_, subnqn);
    invalid_connect_param(r, true, offsetof(ConnectData, subnqn));
    return;
  }
  // A subsystem not bound to this listener is not there for this host (nvmet answers the same).
  if (!sub->reachable_through(arrival_.portid)) {
    log::warn("{}: Connect to subsystem '{}', which is not on the listener this host came through", peer_, subnqn);
    invalid_connect_param(r, true, offsetof(ConnectData, subnqn));
    return;
  }
  if (!sub->is_discovery() && !sub->host_allowed(hostnqn)) {
    log::warn("{}: host '{}' is not allowed on {}", peer_, hostnqn, subnqn);
    complete(r, sc::ConnectInvalidHost);
    return;
  }
  // Admin and discovery queues carry few commands: at most kMaxAdminQueueDepth entries (the
  // Linux host asks for 32, SPDK allows 128), which also bounds how many responses one
  // discovery connection, open to any host, can have in flight.
  const uint32_t max_depth = cmd.qid == 0 ? std::min(kMaxAdminQueueDepth, target_.config.max_queue_depth)
                                          : target_.config.max_queue_depth;
  if (cmd.sqsize == 0 || uint32_t(cmd.sqsize) + 1 > max_depth) {
    log::warn("{}: Connect SQSIZE {} out of range", peer_, cmd.sqsize);
    invalid_connect_param(r, false, offsetof(ConnectCmd, sqsize));
    return;
  }
  // What this queue holds for its life: one of its host's connection slots, and its request
  // pool (SQSIZE requests), counted in the buffer budgets like data buffers.
  const auto& cfg = target_.config;
  auto host = target_.host_budget(hostnqn);
  if (host->connections.fetch_add(1, std::memory_order_relaxed) >= cfg.max_connections_per_host &&
      cfg.max_connections_per_host) {
    host->connections.fetch_sub(1, std::memory_order_relaxed);
    log::warn("{}: host '{}' already has {} queues (max_connections_per_host)", peer_, hostnqn,
              cfg.max_connections_per_host);
    complete(r, sc::ConnectControllerBusy);
    return;
  }
  const uint64_t pool = uint64_t(cmd.sqsize + 1) * sizeof(Request);
  if (!pool_.reserve_budgets(host.get(), pool, cfg.max_buffer_memory)) {
    host->connections.fetch_sub(1, std::memory_order_relaxed);
    log::warn("{}: no buffer memory for a queue of {} entries of host '{}' (max_buffer_memory {}, "
              "max_host_buffer_memory {})",
              peer_, cmd.sqsize + 1, hostnqn, cfg.max_buffer_memory, cfg.max_host_buffer_memory);
    complete(r, kCommandInterrupted);
    return;
  }
  auto undo = [&] {
    pool_.release_budgets(host.get(), pool);
    host->connections.fetch_sub(1, std::memory_order_relaxed);
  };
  std::shared_ptr<Controller> ctrl;
  if (cmd.qid == 0) {
    if (data.cntlid != kDynamicCntlid) {
      undo();
      invalid_connect_param(r, true, offsetof(ConnectData, cntlid));
      return;
    }
    uint16_t cntlid = sub->allocate_cntlid();
    if (cntlid == 0) {
      undo();
      complete(r, sc::ConnectControllerBusy);
      return;
    }
    ctrl = sub->add_controller(std::make_shared<Controller>(target_, *sub, cntlid, hostnqn, data.hostid, cmd.kato,
                                                            deadlines_.clock()));
    ctrl->set_local_address(arrival_.local_address);
  } else {
    ctrl = sub->find_controller(data.cntlid);
    if (!ctrl || ctrl->hostnqn() != hostnqn || std::memcmp(ctrl->hostid(), data.hostid, 16) != 0) {
      log::warn("{}: I/O Connect names controller {} that this host does not own", peer_, data.cntlid);
      undo();
      invalid_connect_param(r, true, offsetof(ConnectData, cntlid));
      return;
    }
    if (!ctrl->ready()) {
      undo();
      complete(r, sc::CommandSequenceError);
      return;
    }
    if (!ctrl->claim_queue(cmd.qid)) {
      log::warn("{}: I/O Connect for qid {} (controller has {} queues, or it is taken)", peer_, cmd.qid,
                ctrl->num_io_queues());
      undo();
      invalid_connect_param(r, false, offsetof(ConnectCmd, qid));
      return;
    }
    stats_ = ctrl->stats(cmd.qid);
    resv_cache_.assign(sub->namespaces().size(), {});
  }
  ctrl_ = ctrl;
  if (cmd.qid == 0) ctrl_->attach_admin_queue(&reactor_, this);
  else ctrl_->register_io_queue(cmd.qid, &reactor_, this);
  host_ = std::move(host);
  pool_.attach_host(host_.get(), pool);
  qid_ = cmd.qid;
  sqsize_ = uint16_t(cmd.sqsize + 1);
  sqhd_ = 1 % sqsize_;  // the Connect itself was consumed
  sq_flow_disabled_ = cmd.cattr & kConnectAttrDisableSqFlow;
  set_state(State::Connected);
  pool_.resize(sqsize_);
  log::info("{}: host {} connected to {} (controller {}, qid {}, depth {}{}{}{})", peer_, hostnqn, subnqn,
            ctrl->cntlid(), qid_, sqsize_, sq_flow_disabled_ ? ", SQ flow control off" : "",
            hdgst_ ? ", header digest" : "", ddgst_ ? ", data digest" : "");
  start_connected_checks();
  r->dw0 = ctrl->cntlid();
  complete(r, sc::Success);
}

void Connection::execute_admin(Request* r) {
  const Sqe& sqe = r->sqe;
  uint32_t sgl_len = 0;
  if (transfers_to_host(sqe)) {
    if (sqe.sgl.type != kSglTransportDataBlock) {
      complete(r, sc::SglDescriptorTypeInvalid);
      return;
    }
    sgl_len = sqe.sgl.length;
    if (sgl_len > ctrl_->mdts_bytes()) {
      complete(r, sc::InvalidField);
      return;
    }
    if (static_cast<AdminOpcode>(sqe.opc) == AdminOpcode::Identify) {
      switch (ensure_buffer(r, kIdentifyLen)) {
        case BufferResult::Ok: break;
        case BufferResult::Wait: park(r, true); return;
        case BufferResult::Fail: complete(r, sc::InternalError); return;
      }
    }
  }
  if (static_cast<AdminOpcode>(sqe.opc) == AdminOpcode::SetFeatures && sqe.sgl.length) {
    // A feature with data (16h): in the capsule, as hosts send it, or asked for with an R2T.
    if (sqe.sgl.length > kAdminInCapsule) {
      complete(r, sc::DataSglLengthInvalid);
      return;
    }
    if (!host_data(r, sqe.sgl.length)) return;
  }
  AdminResult res = ctrl_->execute_admin(sqe, r->buf.get(), sgl_len, r->data_len);
  if (res.status.ok() && res.src) {
    // A log page: a buffer the size of what the log holds in the window, zeros after it.
    switch (ensure_buffer(r, std::max<uint32_t>(res.data_len, 4))) {
      case BufferResult::Ok: break;
      case BufferResult::Wait: park(r, true); return;  // runs again (the log is built anew)
      case BufferResult::Fail: complete(r, sc::InternalError); return;
    }
    std::memcpy(r->buf.get(), res.src, res.data_len);
    ctrl_->log_page_delivered();  // only now: a read that waited above is built again
    r->tx_data = r->buf.get();
    r->tx_len = res.data_len;
    r->tx_pad = res.pad_len;
    complete(r, res.status);
    return;
  }
  if (res.held) {
    if (static_cast<AdminOpcode>(sqe.opc) == AdminOpcode::Abort) {
      set_request_state(r, Request::State::HeldAbort);  // abort_done() completes it
      return;
    }
    set_request_state(r, Request::State::HeldAer);
    deliver_async_events();  // an event may already be waiting for it
    return;
  }
  r->dw0 = res.dw0;
  r->dw1 = res.dw1;
  if (res.status.ok() && res.durable_ticket) {
    wait_until_durable(r, res.durable_ticket);  // feature 83h: the state file is written first
    return;
  }
  if (res.status.ok() && res.flush_after) {
    start_flush(r, true);  // a write cache turned off: what it held must be durable first
    return;
  }
  if (res.status.ok() && res.data_len) {
    r->tx_data = r->buf.get();
    r->tx_len = std::min(res.data_len, sgl_len);
  }
  if (!res.status.ok())
    log::debug("{}: admin opcode 0x{:02x}: {}", peer_, sqe.opc, status_name(res.status));
  complete(r, res.status);
}

void Connection::deliver_async_events() {
  if (state_ != State::Connected || !ctrl_) return;
  uint32_t dw0 = 0;
  for (auto& slot : pool_.slots()) {
    Request* r = slot.get();
    if (r->state() != Request::State::HeldAer) continue;
    if (!ctrl_->take_async_event(dw0)) return;
    r->dw0 = dw0;
    log::info("{}: asynchronous event 0x{:08x} to controller {}", peer_, dw0, ctrl_->cntlid());
    complete(r, sc::Success);
  }
}

void Connection::abort_done(uint16_t abort_cid, bool aborted) {
  if (state_ != State::Connected || !ctrl_) return;
  ctrl_->abort_finished();
  for (auto& slot : pool_.slots()) {
    Request* r = slot.get();
    if (r->state() != Request::State::HeldAbort || r->sqe.cid != abort_cid) continue;
    r->dw0 = aborted ? 0 : 1;
    complete(r, sc::Success);
    return;
  }
}

bool Connection::abort_held_aer(uint16_t cid) {
  for (auto& slot : pool_.slots()) {
    Request* r = slot.get();
    if (r->state() != Request::State::HeldAer || r->sqe.cid != cid) continue;
    if (!ctrl_->take_held_aer()) return false;
    complete(r, sc::AbortRequested);
    return true;
  }
  return false;
}

bool Connection::abort_command(uint16_t cid) {
  if (state_ != State::Connected) return false;
  for (auto& slot : pool_.slots()) {
    Request* r = slot.get();
    // A free slot keeps the CID of the command it last carried, and a command being sent is
    // done: the host may already have its answer and reuse the CID for a live command in
    // another slot, which is the one to abort.
    const Request::State st = r->state();
    if (r->sqe.cid != cid || st == Request::State::Free || st == Request::State::Sending) continue;
    if (r->state() == Request::State::Waiting) {
      // Out of the wait list, wherever it is in it.
      Request** link = &wait_head_;
      Request* prev = nullptr;
      while (*link && *link != r) {
        prev = *link;
        link = &(*link)->next_waiting;
      }
      if (!*link) return false;
      *link = r->next_waiting;
      if (wait_tail_ == r) wait_tail_ = prev;
      r->next_waiting = nullptr;
      --waiting_;
      log::info("{}: cid {} aborted while it waited", peer_, cid);
      complete(r, sc::AbortRequested);
      return true;
    }
    if (r->state() == Request::State::AwaitingH2C && !r->aborted) {
      // The data already asked for may still come: take it, ask for no more, then end.
      r->aborted = true;
      r->data_len = r->r2t_next;
      log::info("{}: cid {} aborted while it waited for data ({} of {} bytes asked for)", peer_, cid, r->rx_next,
                r->r2t_next);
      if (r->rx_next == r->data_len) {
        set_request_state(r, Request::State::Executing);
        complete(r, sc::AbortRequested);
      }
      return true;
    }
    // Commands that go to the device one step at a time (a range, a namespace) stop at the
    // next step: what the finished steps did stays done, as an aborted command may leave it.
    const auto opc = static_cast<IoOpcode>(r->sqe.opc);
    if (r->state() == Request::State::Executing && !r->aborted && !r->fused_partner &&
        (opc == IoOpcode::DatasetManagement || opc == IoOpcode::Copy || opc == IoOpcode::Flush)) {
      r->aborted = true;
      log::info("{}: cid {} (opcode 0x{:02x}) aborted between its steps", peer_, cid, r->sqe.opc);
      return true;
    }
    return false;  // one operation on the device, or being sent
  }
  return false;
}

Connection::BufferResult Connection::ensure_buffer(Request* r, uint32_t len) {
  const uint32_t had = r->buf_cap;
  const BufferResult res = pool_.ensure_buffer(r, len, state_ == State::Connected && qid_ != 0);
  if (res == BufferResult::Fail) log::warn("{}: cannot allocate a {}-byte data buffer", peer_, align_4k(len));
  if (res == BufferResult::Ok && r->buf_cap != had && memory_logged_ && !wait_head_) {
    log::info("{}: buffer memory available again", peer_);
    memory_logged_ = false;
  }
  return res;
}

bool Connection::host_data(Request* r, uint32_t len) {
  if (r->data_len == 0) {
    // No in-capsule data: ask for it with R2Ts.
    if (r->sqe.sgl.type != kSglTransportDataBlock) {
      complete(r, sc::SglDescriptorTypeInvalid);
      return false;
    }
    switch (ensure_buffer(r, buffer_bytes_for(r->sqe, len, ctrl_->mdts_bytes()))) {
      case BufferResult::Ok: break;
      case BufferResult::Wait: park(r, true); return false;  // the R2Ts go out once memory is free
      case BufferResult::Fail: complete(r, sc::InternalError); return false;
    }
    r->data_len = len;
    set_request_state(r, Request::State::AwaitingH2C);
    send_r2ts(r);
    return false;
  }
  if (r->data_len != len) {
    complete(r, sc::DataSglLengthInvalid);
    return false;
  }
  return true;
}

// Where a read (or a Verify) lands: the request's buffer, unless the device hands out its
// own memory. False when the request was parked until memory is free, or failed.
bool Connection::read_buffer(Request* r, Namespace* ns, uint32_t len) {
  if (ns->device->zero_copy_reads()) return true;
  switch (ensure_buffer(r, len)) {
    case BufferResult::Ok: break;
    case BufferResult::Wait: park(r, true); return false;
    case BufferResult::Fail: complete(r, sc::InternalError); return false;
  }
  r->io.buffer = r->buf.get();
  return true;
}

// ---------------------------------------------------------------- back-pressure

bool Connection::send_queue_full() const {
  const uint64_t cap = target_.config.max_send_queue_bytes;
  return cap && stream_->queued_bytes() + tx_pending_ > cap;
}

void Connection::admit(Request* r) {
  if (wait_head_ || send_queue_full()) {
    park(r, false);
    return;
  }
  execute(r);
}

void Connection::park(Request* r, bool for_memory) {
  set_request_state(r, Request::State::Waiting);
  r->next_waiting = nullptr;
  if (!wait_head_) {
    wait_head_ = wait_tail_ = r;
  } else if (resuming_) {
    r->next_waiting = wait_head_;  // it was the head a moment ago: keep arrival order
    wait_head_ = r;
  } else {
    wait_tail_->next_waiting = r;
    wait_tail_ = r;
  }
  ++waiting_;
  ++waits_;
  if (for_memory) {
    memory_short_ = true;
    target_.usage.memory_waits.fetch_add(1, std::memory_order_relaxed);
    if (!memory_logged_) {
      log::warn("{}: buffer memory exhausted (limits: {} per connection, {} in all); commands wait", peer_,
                target_.config.max_connection_buffer_memory, target_.config.max_buffer_memory);
      memory_logged_ = true;
    }
    reactor_.arm_timer(&retry_timer_, kMemoryRetryNs);
  } else if (!retry_timer_.linked) {
    reactor_.arm_timer(&retry_timer_, kSendQueueRetryNs);
  }
}

void Connection::resume_waiting() {
  if (resuming_ || state_ == State::Closing) return;
  resuming_ = true;
  memory_short_ = false;
  while (wait_head_ && state_ != State::Closing && !send_queue_full()) {
    Request* r = wait_head_;
    wait_head_ = r->next_waiting;
    if (!wait_head_) wait_tail_ = nullptr;
    r->next_waiting = nullptr;
    --waiting_;
    set_request_state(r, Request::State::Executing);
    execute(r);
    if (memory_short_) break;  // it is parked at the head again
  }
  resuming_ = false;
  if (!wait_head_) {
    reactor_.cancel_timer(&retry_timer_);
    if (memory_logged_) {
      log::info("{}: buffer memory available again", peer_);
      memory_logged_ = false;
    }
  } else if (!retry_timer_.linked) {
    reactor_.arm_timer(&retry_timer_, memory_short_ ? kMemoryRetryNs : kSendQueueRetryNs);
  }
}

void Connection::on_retry_timer(reactor::Timer* t) { static_cast<TimerSlot*>(t)->owner->resume_waiting(); }

}  // namespace nvtcp::target

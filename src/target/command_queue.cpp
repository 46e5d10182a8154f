// SPDX-License-Identifier: Apache-2.0
// The command layer's contract (parse, execute, device completions) dispatched by command set,
// the queue's responses, the device leg, the hand-off to a worker, and the hold a reservation
// change waits in: its state file on its way to disk.
#include "target/command_queue.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "target/queue_limits.hpp"
#include "tls/tls_stream.hpp"
#include "util/log.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

namespace {
constexpr uint64_t kDevicePieceBytes = ReactorCommands::kPieceBytes;

// The next piece of r's device operation (Command::pieces) to its device.
void submit_piece(Command& r, reactor::Reactor& loop) {
  Command::DevicePieces& p = r.pieces;
  r.io.offset = p.offset + p.done;
  r.io.length = std::min(kDevicePieceBytes, p.length - p.done);
  r.io.buffer = p.buffer + p.done;
  r.io.read_data = nullptr;
  p.ns->device->submit(&r.io, loop);
}

// The whole operation in io again, as the command's device completion reads it.
void whole_again(Command& r) {
  const Command::DevicePieces p = std::exchange(r.pieces, {});
  r.io.offset = p.offset;
  r.io.length = p.length;
  r.io.buffer = p.buffer;
  r.io.read_data = r.io.op == backend::BlockIo::Op::Read ? p.buffer : nullptr;
}
// How often reservation commands waiting for their state to be durable look again: an fsync
// takes far longer.
constexpr uint64_t kDurableRetryNs = 100'000;
}  // namespace

CommandQueue::CommandQueue(TargetState& target, CommandTransport& transport, const QueueLink& link,
                           QueueMemory& memory, ReactorCommands& shared, Gate::Release drained, void* drained_ctx)
    : target_(target),
      transport_(transport),
      link_(link),
      memory_(memory),
      shared_(shared),
      gate_(drained, drained_ctx) {
  durable_timer_.owner = this;
  durable_timer_.fn = on_durable_timer;
}

CommandQueue::~CommandQueue() { reactor().cancel_timer(&durable_timer_); }

std::string QueueLink::features() const {
  return fmt::format("{}{}{}{}", tls ? ", TLS " + tls->session().cipher : "",
                     tls && tls->session().kernel_tx ? " (kTLS TX)" : "", hdgst ? ", header digest" : "",
                     ddgst ? ", data digest" : "");
}

const char* command_state_name(Command::State s) {
  switch (s) {
    case Command::State::Idle: return "Idle";
    case Command::State::Running: return "Running";
    case Command::State::AwaitingFusedPartner: return "AwaitingFusedPartner";
    case Command::State::AwaitingFence: return "AwaitingFence";
    case Command::State::AwaitingQos: return "AwaitingQos";
    case Command::State::AwaitingTurn: return "AwaitingTurn";
    case Command::State::InDevice: return "InDevice";
    case Command::State::OnWorker: return "OnWorker";
    case Command::State::BetweenSteps: return "BetweenSteps";
    case Command::State::AwaitingDurable: return "AwaitingDurable";
    case Command::State::HeldAer: return "HeldAer";
    case Command::State::HeldAbort: return "HeldAbort";
    case Command::State::kCount: break;
  }
  return "?";
}

void CommandQueue::set_state(Command& r, State to) {
  if (kCheckTransitions && !kCommandTransitions.allows(r.state_, to))
    illegal_transition("command", command_state_name(r.state_), command_state_name(to), "CommandQueue::set_state",
                       long(r.sqe.cid));
  // Idle is not counted here: it is the rest of the transport's commands (command_states()).
  if (r.state_ != State::Idle) --counts_[size_t(r.state_)];
  if (to != State::Idle) ++counts_[size_t(to)];
  ++entries_[size_t(to)];
  r.state_ = to;
}

CommandStateCounts CommandQueue::command_states(uint32_t commands) const {
  CommandStateCounts c = counts_;
  uint32_t busy = 0;
  for (uint32_t n : c) busy += n;
  c[size_t(State::Idle)] = commands > busy ? commands - busy : 0;
  return c;
}

void CommandQueue::fetched() {
  if (sqsize_) sqhd_ = uint16_t((sqhd_ + 1) % sqsize_);
}

uint32_t CommandQueue::max_in_capsule() const {
  return (connected() && qid_ != 0) ? target_.config.in_capsule_data : kAdminInCapsule;
}

uint32_t CommandQueue::in_capsule_buffer(const Sqe& sqe, uint32_t len) const {
  return qid_ && ctrl_ ? buffer_bytes_for(sqe, len, ctrl_->mdts_bytes()) : len;
}

void CommandQueue::complete(Command& r, Status st) {
  if (r.state_ != State::Idle) set_state(r, State::Idle);
  r.status = st;
  respond(r);
}

// A command that never executed is Idle: it ends as any other does.
void CommandQueue::fail(Command& r, Status st) { complete(r, st); }

void CommandQueue::respond(Command& r) {
  // The head moves as each command completes, as nvmet's does: the entry is consumed by then.
  fetched();
  // Failed commands go to the controller's error log; Command Interrupted only asks the
  // host to retry later, and is no error.
  if (!r.status.ok() && ctrl_ && r.status != kCommandInterrupted) ctrl_->record_error(qid_, r.sqe, r.status);
  if (ResponseObserver* o = target_.response_observer.load(std::memory_order_acquire))
    o->on_response(qid_, r.sqe, r.status, r.io);
  Cqe& cqe = r.cqe;
  cqe = {};
  cqe.dw0 = r.dw0;
  cqe.dw1 = r.dw1;
  cqe.sqhd = sq_flow_disabled_ ? 0 : sqhd_;
  cqe.sqid = qid_;
  cqe.cid = r.sqe.cid;
  cqe.status = r.status.to_cqe(r.status != kCommandInterrupted);
  transport_.complete(r);
}

void CommandQueue::hold_namespace(Command& r, Namespace* ns) {
  if (r.ns == ns) return;
  if (r.ns) r.ns->holds.drop(shared_.index());
  r.ns = ns;
  if (ns) ns->holds.hold(shared_.index());
}

void CommandQueue::release(Command& r) {
  count_response(r);
  hold_namespace(r, nullptr);
}

// The metrics (IoMetrics) of the namespace and of the subsystem through the listener the host
// came in on: this reactor's slot in each, the turn's clock. Counted once the response has left
// rather than when it was built: a command whose device answered in the turn its capsule came in
// would otherwise show no latency at all, though its response still waited for the turn's batch
// of sends. A command refused before it reached a namespace (an ANA status, an unknown NSID)
// counts as an error of the listener only.
void CommandQueue::count_response(const Command& r) {
  if (qid_ == 0 || r.sqe.opc == uint8_t(AdminOpcode::Fabrics)) return;
  IoMetrics* ns = r.ns ? &r.ns->metrics : nullptr;
  IoMetrics* port = ctrl_ && ctrl_->port() ? &ctrl_->port()->io : nullptr;
  if (!ns && !port) return;
  const uint32_t slot = shared_.index();
  const auto opc = IoOpcode(r.sqe.opc);
  const bool read = opc == IoOpcode::Read;
  if (!r.status.ok()) {
    for (IoMetrics* m : {ns, port}) {
      if (!m) continue;
      if (read) m->read_failed(slot);
      else if (opc == IoOpcode::Write) m->write_failed(slot);
      else m->other_failed(slot);
    }
    return;
  }
  // A Dataset Management that deallocated, a Copy: their steps hold the bytes they moved.
  const auto* dsm = opc == IoOpcode::DatasetManagement ? std::get_if<Command::DsmSteps>(&r.steps) : nullptr;
  const auto* copy = opc == IoOpcode::Copy ? std::get_if<Command::CopySteps>(&r.steps) : nullptr;
  if (!read && opc != IoOpcode::Write && !dsm && !copy) return;
  const uint64_t now = clock().turn_ns(reactor());
  const uint64_t latency = now > r.arrived_ns ? now - r.arrived_ns : 0;
  if (dsm || copy) {  // Deallocate and Copy: no histogram (bdev_get_iostat's counts and range)
    for (IoMetrics* m : {ns, port}) {
      if (!m) continue;
      if (dsm) m->unmap_done(slot, dsm->bytes, latency);
      else m->copy_done(slot, copy->bytes, latency);
    }
    return;
  }
  const size_t bucket = latency_bucket(latency);
  for (IoMetrics* m : {ns, port}) {
    if (!m) continue;
    if (read) m->read_done(slot, r.io.length, latency, bucket);
    else m->write_done(slot, r.io.length, latency, bucket);
  }
}

// ---------------------------------------------------------------- the contract

void CommandQueue::parse(Command& r) {
  // Fabrics commands describe data with SGLs only (PSDT 01b), whatever the opcode: anything
  // else would run as something the host did not ask for.
  if ((r.sqe.flags & kSqeFlagsPsdtMask) != kSqeFlagsPsdtSgl) {
    log::debug("{}: cid {} opcode 0x{:02x}: flags 0x{:02x} (not PSDT 01b)", link_.peer, r.sqe.cid, r.sqe.opc,
               r.sqe.flags);
    r.status = sc::InvalidField;
    return;
  }
  const bool fuse_bits = r.sqe.flags & kSqeFlagsFuseMask;
  // The gate comes before anything else a command may be: only a plain Fabrics command
  // (Connect, Authentication) runs on a queue that has not proven what its configuration asks
  // of it. A fused half is no exception: a Compare is an oracle on the blocks and its Write
  // writes them.
  if (r.sqe.opc != uint8_t(AdminOpcode::Fabrics) || fuse_bits) {
    Status gate = !connected() ? sc::CommandSequenceError : !authenticated() ? sc::AuthenticationRequired : sc::Success;
    if (!gate.ok()) {
      if (io_.holds_fused_first()) io_.refuse_fused_first(sc::MissingFusedCommand);
      r.status = gate;
      return;
    }
  }
  // The command after a fused first half decides its fate, whatever it is.
  if ((io_.holds_fused_first() || fuse_bits) && io_.fused_halves(r)) return;
  if (r.sqe.opc == uint8_t(AdminOpcode::Fabrics))
    fabrics_.parse(r);
  else if (qid_ == 0) admin_.parse(r);
  else io_.parse(r);
}

void CommandQueue::execute(Command& r) {
  set_state(r, State::Running);
  if (Command::FusedHalf* f = r.fused()) {
    if (!f->partner) {
      set_state(r, State::AwaitingFusedPartner);  // a first half: its Write comes next
      return;
    }
    io_.start_fused(*f->partner, r);  // a second half: the pair runs
    return;
  }
  if (r.sqe.opc == uint8_t(AdminOpcode::Fabrics)) fabrics_.execute(r);
  else if (qid_ == 0) admin_.execute(r);
  else io_.execute(r);
}

// ---------------------------------------------------------------- the device leg

void CommandQueue::start_device(Command& r, Namespace& ns) {
  set_state(r, State::InDevice);
  r.ns_index = ns.index;
  r.queue = this;
  r.io.user = &r;
  r.io.done = on_device_done;
  // Only a closed queue refuses, and nothing runs commands once it is closed: the request
  // goes with the transport's pool.
  if (!gate_.enter()) return;
  if (ns.device->copies_on_reactor() && shared_.contended(reactor().now_ns()) && r.io.length > kDevicePieceBytes &&
      (r.io.op == backend::BlockIo::Op::Read || r.io.op == backend::BlockIo::Op::Write)) {
    r.pieces = {r.io.offset, r.io.length, 0, r.io.buffer, &ns};
    r.io.done = on_piece_done;
    submit_piece(r, reactor());  // the first piece's cost was taken with the command's
    return;
  }
  ns.device->submit(&r.io, reactor());
}

void CommandQueue::on_device_done(backend::BlockIo* io, Status st) {
  Command* r = static_cast<Command*>(io->user);
  r->queue->device_done(*r, st);
}

// A device that copies on the reactor (RAM) copies a 1 MiB Read or Write in pieces, each within
// the reactor's budget of work per turn; the pieces over it wait in the reactor's line, the
// command InDevice throughout (its fence count and gate held, as for one device operation).
// A queue that closes meanwhile stops at the next piece.
void CommandQueue::on_piece_done(backend::BlockIo* io, Status st) {
  Command& r = *static_cast<Command*>(io->user);
  CommandQueue& q = *r.queue;
  r.pieces.done += io->length;
  if (!st.ok() || r.pieces.done == r.pieces.length || q.gate_.closed() || q.link_.closing) {
    whole_again(r);
    r.io.done = on_device_done;
    q.device_done(r, st);
    return;
  }
  if (q.shared_.take_turn(q.reactor().turn(), q.reactor().now_ns(), kDevicePieceBytes)) {
    submit_piece(r, q.reactor());
    return;
  }
  r.next_step.owner = &r;
  r.next_step.fn = [](reactor::Completion* c, int, uint32_t) {
    Command& req = *static_cast<reactor::OwnedCompletion<Command>*>(c)->owner;
    CommandQueue& self = *req.queue;
    if (!self.gate_.closed() && !self.link_.closing) {
      submit_piece(req, self.reactor());
      return;
    }
    whole_again(req);
    req.io.done = on_device_done;
    self.device_done(req, sc::AbortRequested);
  };
  q.shared_.wait_for_turn(q.reactor(), &r.next_step, kDevicePieceBytes);
}

void CommandQueue::device_done(Command& r, Status st) {
  // A closing queue runs nothing more: the request stays where it is, and goes with the
  // transport's pool.
  device_released(r, gate_.closed() || link_.closing);
  if (!leave_gate()) return;
  r.device_status = st;
  set_state(r, State::Running);
  io_.device_done(r);
}

bool CommandQueue::leave_gate() {
  if (gate_.closed()) {
    gate_.leave();  // the last completion of a closed queue frees it: touch nothing after
    return false;
  }
  gate_.leave();
  return !link_.closing;
}

// A device that completes inline (RAM) would otherwise run a command's every range in one
// turn: 128 ranges of 1 MiB are 256 MiB of memcpy, and every other command on this reactor
// would wait for it. With turn_bytes, r waits in its reactor's line for a turn with that much
// room instead of for the next turn (AwaitingTurn), and runs with its cost taken.
void CommandQueue::next_turn(Command& r, uint64_t turn_bytes) {
  set_state(r, turn_bytes ? State::AwaitingTurn : State::BetweenSteps);
  if (!gate_.enter()) return;  // closed: nothing runs commands any more
  r.queue = this;
  r.next_step.owner = &r;
  r.next_step.fn = [](reactor::Completion* c, int, uint32_t) {
    Command* req = static_cast<reactor::OwnedCompletion<Command>*>(c)->owner;
    CommandQueue* self = req->queue;
    if (!self->leave_gate()) return;
    req->turn_granted = req->state() == State::AwaitingTurn;
    self->set_state(*req, State::Running);
    self->io_.next_step(*req);
  };
  if (turn_bytes) {
    shared_.wait_for_turn(reactor(), &r.next_step, turn_bytes);
    return;
  }
  io_uring_sqe* sqe = reactor().get_sqe();
  io_uring_prep_nop(sqe);
  reactor().prep(sqe, &r.next_step);
}

// Every device operation of a command (a Read, a Write, a Copy piece, a Dataset Management
// range...) draws on its reactor's budget of work per turn, before its rate limit and its
// fence: over it, the command waits for a later turn holding neither (AwaitingTurn), and the
// I/O part's next_step runs it again then. A fused pair does not wait here: it owns its
// namespace's fence once past its rate limit.
bool CommandQueue::take_turn(Command& r, uint64_t bytes, bool always) {
  if (std::exchange(r.turn_granted, false) || r.is_fused()) return true;
  if (shared_.take_turn(reactor().turn(), reactor().now_ns(), bytes, always)) return true;
  r.waited = true;
  next_turn(r, std::max<uint64_t>(bytes, 1));
  return false;
}

void CommandQueue::run_off_reactor(Command& r, void (*work)(void* arg), void* arg) {
  set_state(r, State::OnWorker);  // as a device I/O: it cannot be aborted, and it comes back
  if (!gate_.enter()) return;     // closed: nothing runs commands any more
  shared_.offload_started();
  TargetState* target = &target_;
  reactor::Reactor* loop = &reactor();
  ReactorCommands* set = &shared_;  // outlives the queue: the reactor's
  // Keyed by the source address: a peer's backlog of such work waits behind its own jobs only.
  target_.workers().submit(link_.arrival.remote_address, [this, &r, work, arg, target, loop, set] {
    if (OffloadHook* h = target->offload_hook.load(std::memory_order_acquire)) h->before_work();
    work(arg);
    // The gate keeps this queue (and r) until worker_done has run.
    loop->post([this, &r] {
      shared_.offload_returned();
      worker_done(r);  // may free this queue: touch nothing after
    });
    set->offload_post_done();  // the queue may be gone by now; the set and reactor are not
  });
}

void CommandQueue::worker_done(Command& r) {
  if (!leave_gate()) return;
  set_state(r, State::Running);
  fabrics_.auth_send_done(r);  // the one work that runs there: an Authentication Send's
}

void CommandQueue::device_released(Command& r, bool queue_ending) {
  if (r.fence_counted) {
    r.fence_ns->fence.end_write(shared_.index());
    r.fence_counted = false;
  }
  if (queue_ending && r.fence_owner) {
    r.fence_ns->fence.release();  // the queue is gone: its fused operation ends here
    r.fence_owner = false;
  }
}

// ---------------------------------------------------------------- the controller's end

void CommandQueue::end_controller(const char* why) {
  if (!ctrl_) return;
  if (qid_ == 0) {
    ctrl_->detach_admin_queue();
    if (!ctrl_->dead.exchange(true))
      log::event(log::Level::Info, "disconnect",
                 {{"host_nqn", ctrl_->hostnqn()},
                  {"address", link_.peer},
                  {"subsystem", ctrl_->subsystem().nqn()},
                  {"cntlid", std::to_string(ctrl_->cntlid())},
                  {"reason", why}},
                 "{}: controller {} of {} torn down: {}", link_.peer, ctrl_->cntlid(), ctrl_->subsystem().nqn(),
                 why);
    ctrl_->subsystem().remove_controller(ctrl_->cntlid());
  } else if (fabrics_.qid_claimed()) {  // a queue that never proved its key never had its qid
    ctrl_->io_queues.remove(qid_, &io_);
    ctrl_->io_queues.release(qid_);
  }
  ctrl_.reset();
}

void CommandQueue::closed() {
  end_controller("admin queue closed");
  io_.closed();
  reactor().cancel_timer(&durable_timer_);
  durable_waiters_.clear();  // their changes are made; their answers have nowhere to go
  admin_.closed();
  gate_.close();  // may free this queue and its transport: touch nothing after
}

// ---------------------------------------------------------------- the durable hold

// The namespace's writer thread writes the reservation state (commands that arrive meanwhile
// share the next write); this reactor looks again every kDurableRetryNs and never waits for
// the disk itself. r completes then, with Success or, if the state could not be written,
// Internal Error.
void CommandQueue::wait_until_durable(Command& r, uint64_t ticket) {
  r.steps = Command::DurableWait{ticket};
  set_state(r, State::AwaitingDurable);
  durable_waiters_.push_back(&r);
  if (!durable_timer_.linked) reactor().arm_timer(&durable_timer_, kDurableRetryNs);
}

void CommandQueue::on_durable_timer(reactor::Timer* t) {
  auto* self = static_cast<DurableTimer*>(t)->owner;
  auto& waiting = self->durable_waiters_;
  size_t kept = 0;
  for (Command* r : waiting) {
    bool durable = false;
    // The subsystem's table: the waiter may be an admin command (Set Features 83h), which holds
    // no namespace, and a host unnamed for a masked namespace meanwhile still gets its answer.
    Namespace* ns = self->ctrl_->subsystem().find_namespace(r->sqe.nsid);
    if (ns && !ns->reservations.written(std::get<Command::DurableWait>(r->steps).ticket, durable)) {
      waiting[kept++] = r;
      continue;
    }
    // The change is made; a state that could not be written fails the command (the host
    // asked for it to survive power loss and it would not).
    self->set_state(*r, State::Running);
    self->complete(*r, durable ? sc::Success : sc::InternalError);
  }
  waiting.resize(kept);
  if (kept) self->reactor().arm_timer(&self->durable_timer_, kDurableRetryNs);
}

}  // namespace nvtcp::target

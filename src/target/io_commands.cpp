// SPDX-License-Identifier: Apache-2.0
// NVM I/O commands (io_commands.hpp): parse, execute and device completion of each, commands
// in steps, fused Compare and Write, the fence and Abort.
#include "target/io_commands.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "target/command_queue.hpp"
#include "target/queue_limits.hpp"
#include "util/log.hpp"
#include "wire/reservations.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

namespace {
using Direction = Command::Direction;

// What r's device operation costs its reactor's turn: its bytes on a device that copies them
// on the reactor (RAM), nothing beside a command's least on the others (NULL moves nothing; aio,
// files and RBD work elsewhere: the sends and receives their data takes are bounded by the
// streams). A large Read or Write there goes a piece at a time while the reactor is contended:
// the first piece's cost now, the others' as they go (CommandQueue::start_device).
uint64_t device_cost(const Command& r, const Namespace& ns, bool contended) {
  if (!ns.device->copies_on_reactor()) return 0;
  const bool pieces = r.io.op != backend::BlockIo::Op::WriteZeroes && contended;
  return pieces ? std::min(r.io.length, ReactorCommands::kPieceBytes) : r.io.length;
}


// The command groups a reservation restricts (NVMe base specification, reservations).
bool reads_blocks(IoOpcode op) {
  return op == IoOpcode::Read || op == IoOpcode::Compare || op == IoOpcode::Verify || op == IoOpcode::Copy;
}
bool writes_blocks(IoOpcode op) {
  return op == IoOpcode::Write || op == IoOpcode::WriteZeroes || op == IoOpcode::DatasetManagement ||
         op == IoOpcode::Copy || op == IoOpcode::Flush;
}

// r takes len bytes from the host: in its capsule (exactly len), or asked for by R2T (then
// the SGL must say so). The buffer holds them and whatever the command adds to them.
bool host_data(Command& r, uint32_t len, uint32_t mdts) {
  if (r.capsule_len == 0 && r.sqe.sgl.type != kSglTransportDataBlock) {
    r.status = sc::SglDescriptorTypeInvalid;
    return false;
  }
  if (r.capsule_len != 0 && r.capsule_len != len) {
    r.status = sc::DataSglLengthInvalid;
    return false;
  }
  r.xfer = {Direction::HostToController, len, buffer_bytes_for(r.sqe, len, mdts)};
  return true;
}
// The reservation groups a command is in; a fused pair reads and writes.
void groups(const Command& r, bool& read, bool& write) {
  const auto opc = static_cast<IoOpcode>(r.sqe.opc);
  read = reads_blocks(opc) || r.is_fused();
  write = writes_blocks(opc) || r.is_fused();
}

// What a host may do on ns through its controller's port: its ANA group reachable (else the path
// status, no DNR, so that a multipath host tries another path), and, while a reservation is held
// (one relaxed load otherwise), the reservation letting it run the groups asked for.
Status path_and_reservation(const Controller& c, const Namespace& ns, bool read, bool write,
                            Reservations::AccessCache& cache) {
  if (Status st = c.ana_status(ns); !st.ok()) return st;
  if (ns.reservations.held() && !ns.reservations.allowed(c.hostid(), read, write, cache))
    return sc::ReservationConflict;
  return sc::Success;
}

// What r's next device operation costs against its namespace's rate limits. Reads (and what the
// device reads to Verify, Compare or Copy) and writes count their bytes; Write Zeroes and
// Deallocate count as I/Os only (they move no data, but every one reaches the device: on RBD, the
// cluster); a fused pair pays for both halves at once. A Flush is not counted.
QosLimiter::Cost qos_cost(const Command& r) {
  if (r.is_fused()) return {2, r.capsule_len, r.capsule_len};
  switch (r.io.op) {
    case backend::BlockIo::Op::Read: return {1, r.io.length, 0};
    case backend::BlockIo::Op::Write: return {1, 0, r.io.length};
    case backend::BlockIo::Op::WriteZeroes:
    case backend::BlockIo::Op::Deallocate: return {1, 0, 0};
    default: return {};
  }
}
}  // namespace

IoCommands::IoCommands(CommandQueue& q) : q_(q), waits_(*this, q.reactor(), q.clock(), q.link_.closing) {}

IoCommands::~IoCommands() = default;

Controller& IoCommands::ctrl() const { return *q_.ctrl_; }

void IoCommands::attach(QueueStats* stats, uint32_t max_namespaces) {
  stats_ = stats;
  resv_cache_.assign(max_namespaces + 1, {});  // by NSID
}

// The blocks a command names (SLBA, NLB): inside the namespace, else LBA Out of Range; and,
// for a command that moves data, at most MDTS, else Invalid Field. len: their bytes. The
// namespace size (which a resize changes) is read once.
Status IoCommands::block_range(const Sqe& sqe, const Namespace& ns, bool bounded_by_mdts, uint64_t& len) const {
  const uint64_t blocks = ns.blocks.load(std::memory_order_relaxed);
  const uint64_t slba = sqe.slba(), nlb = sqe.nlb();
  if (slba >= blocks || nlb > blocks - slba) return sc::LbaOutOfRange;
  len = nlb << ns.lbads;
  if (bounded_by_mdts && len > ctrl().mdts_bytes()) return sc::InvalidField;
  return sc::Success;
}

bool IoCommands::io_allowed(Command& r) {
  // The admin queue's loss ends this queue now, not at the next periodic check; a reset or
  // shut-down controller runs no I/O (the host must re-enable it first).
  if (ctrl().dead.load(std::memory_order_relaxed)) {
    q_.transport_.close("its controller was torn down");
    return false;
  }
  if (!ctrl().ready()) {
    r.status = sc::CommandSequenceError;
    return false;
  }
  return true;
}

Status IoCommands::admission(const Command& r, Namespace*& ns) {
  ns = nullptr;
  const auto opc = static_cast<IoOpcode>(r.sqe.opc);
  if (opc == IoOpcode::Flush && r.sqe.nsid == kNsidAll) {
    // Flush is in the write group a reservation restricts, on every namespace it reaches:
    // a host that may not write one of them gets Reservation Conflict, as it would for a
    // Flush to that namespace alone, and nothing is flushed.
    const Subsystem& sub = ctrl().subsystem();
    for (uint32_t nsid = 1; nsid <= sub.max_namespaces(); ++nsid) {
      const Namespace* each = ctrl().find_namespace(nsid);
      if (!each) continue;
      // One it cannot reach or may not write: nothing is flushed.
      if (Status st = path_and_reservation(ctrl(), *each, false, true, resv_cache_[each->index]); !st.ok()) return st;
    }
    return sc::Success;  // no one namespace: the flush goes to all
  }
  Namespace* found = ctrl().find_namespace(r.sqe.nsid);
  if (!found) return sc::InvalidNamespace;
  bool read = false, write = false;
  groups(r, read, write);
  if (Status st = path_and_reservation(ctrl(), *found, read, write, resv_cache_[found->index]); !st.ok()) return st;
  ns = found;
  return sc::Success;
}

Status IoCommands::readmission(Command& r) {
  if (!io_allowed(r)) {
    const Status st = std::exchange(r.status, Status{});
    return st.ok() ? sc::CommandSequenceError : st;  // ok: the queue is closing
  }
  // Its host preempted with Abort meanwhile: it ends so, whatever else changed.
  if (r.ns && r.ns->reservations.aborts().aborted_since(ctrl().hostid(), r.resv_abort_epoch)) return sc::AbortedPreempt;
  Namespace* ns = nullptr;
  Status st = admission(r, ns);
  // The namespace it holds since parse, not another one added at its NSID since: that one's
  // range was never checked, and its removal would not wait for this command.
  if (st.ok() && ns != r.ns) st = sc::InvalidNamespace;
  return st;
}

bool IoCommands::readmitted(Command& r) {
  if (!q_.link_.closing) {
    const Status st = readmission(r);
    if (st.ok()) return true;
    if (!q_.link_.closing) {
      end_command(r, st, true);
      return false;
    }
  }
  // The queue closes: r runs no more and is answered no more. It is in no wait line, where
  // drop_all() would find it, so what it holds goes now.
  IoWaits::let_go(r);
  return false;
}

// r (Running, in no wait list) ends with st, and lets go of the fence it waits for or owns; a
// fused half ends its pair: the half that failed gets st, the other Failed Fused Command.
void IoCommands::end_command(Command& r, Status st, bool resumed) {
  if (resumed)
    log::debug("{}: cid {} (opcode 0x{:02x}) ends as it resumes: {}", q_.link_.peer, r.sqe.cid, r.sqe.opc,
               status_name(st));
  if (r.fence_waiting) r.fence_ns->fence.stop_waiting(r.fence_waiting);
  if (Command::FusedHalf* f = r.fused(); f && f->partner) {
    const bool is_compare = r.sqe.opc == uint8_t(IoOpcode::Compare);
    Command& cmp = is_compare ? r : *f->partner;
    end_fused(cmp, is_compare ? st : sc::FailedFusedCommand, is_compare ? sc::FailedFusedCommand : st);
    return;
  }
  q_.complete(r, st);
}

// ---------------------------------------------------------------- parse

void IoCommands::parse(Command& r) {
  if (!io_allowed(r)) {
    if (r.status.ok()) r.status = sc::CommandSequenceError;  // the queue closes: it is not answered
    return;
  }
  const Sqe& sqe = r.sqe;
  const auto opc = static_cast<IoOpcode>(sqe.opc);
  Namespace* ns = nullptr;
  if (Status st = admission(r, ns); !st.ok()) r.status = st;
  q_.hold_namespace(r, ns);
  if (!ns) return;  // failed, or a Flush of every namespace (nothing to declare)
  r.resv_abort_epoch = ns->reservations.aborts().epoch();
  const uint32_t mdts = ctrl().mdts_bytes();
  uint64_t len = 0;
  switch (opc) {
    case IoOpcode::Verify:
      // The range is read as a Read would read it, and nothing is sent: a device that could
      // not read a block fails the Verify (VSL in CNS 06h bounds it as MDTS bounds a read).
      if (Status st = block_range(sqe, *ns, true, len); !st.ok()) {
        r.status = st;
        return;
      }
      r.xfer = {Direction::None, 0, ns->device->zero_copy_reads() ? 0 : uint32_t(len)};
      return;
    case IoOpcode::Read:
      if (Status st = block_range(sqe, *ns, true, len); !st.ok()) r.status = st;
      else if (sqe.sgl.length != len) r.status = sc::DataSglLengthInvalid;
      else if (sqe.sgl.type != kSglTransportDataBlock) r.status = sc::SglDescriptorTypeInvalid;
      else r.xfer = {Direction::ControllerToHost, uint32_t(len), ns->device->zero_copy_reads() ? 0 : uint32_t(len)};
      return;
    case IoOpcode::Write:
    case IoOpcode::Compare:
      // Compare: the host's blocks against the device's, read in after them in the buffer.
      if (Status st = block_range(sqe, *ns, true, len); !st.ok()) r.status = st;
      else if (sqe.sgl.length != len) r.status = sc::DataSglLengthInvalid;
      else if (host_data(r, uint32_t(len), mdts) && opc == IoOpcode::Write && r.capsule_len == 0 &&
               ns->device->ignores_write_data())
        r.xfer.buffer = 0;  // the data R2T asks for is received into nothing (in-capsule data is in already)
      return;
    case IoOpcode::WriteZeroes:
      if (Status st = block_range(sqe, *ns, false, len); !st.ok()) r.status = st;
      return;
    case IoOpcode::Copy: {
      const uint32_t nr = (sqe.cdw12 & 0xFF) + 1, format = (sqe.cdw12 >> 8) & 0xF;
      const uint32_t ranges = nr * uint32_t(sizeof(CopySourceRange));
      if (format != 0) r.status = sc::InvalidField;  // source range format 0h only (OCFS)
      else if (nr > kCopyMaxRanges) r.status = sc::CommandSizeLimitExceeded;
      else if (sqe.sgl.length != ranges) r.status = sc::DataSglLengthInvalid;
      else host_data(r, ranges, mdts);
      return;
    }
    case IoOpcode::DatasetManagement: {
      const uint32_t ranges = ((sqe.cdw10 & 0xFF) + 1) * uint32_t(sizeof(DsmRange));
      if (sqe.sgl.length != ranges) r.status = sc::DataSglLengthInvalid;
      else host_data(r, ranges, mdts);
      return;
    }
    case IoOpcode::Flush: return;
    case IoOpcode::ReservationReport: {
      const uint64_t report = (uint64_t(sqe.cdw10) + 1) * 4;  // NUMD, 0's based
      if (sqe.sgl.type != kSglTransportDataBlock) r.status = sc::SglDescriptorTypeInvalid;
      else if (report > mdts) r.status = sc::InvalidField;
      else if (sqe.sgl.length != report) r.status = sc::DataSglLengthInvalid;
      else r.xfer = {Direction::ControllerToHost, uint32_t(report), uint32_t(report)};
      return;
    }
    case IoOpcode::ReservationRegister:
    case IoOpcode::ReservationAcquire:
    case IoOpcode::ReservationRelease: {
      const uint32_t data = opc == IoOpcode::ReservationRelease ? sizeof(ReservationReleaseData) : 16;
      if (sqe.sgl.length != data) r.status = sc::DataSglLengthInvalid;
      else host_data(r, data, mdts);
      return;
    }
    default: r.status = sc::InvalidOpcode; return;
  }
}

// ---------------------------------------------------------------- execute

void IoCommands::execute(Command& r) {
  // Checked again when the command waited (for memory, its turn or the host's data): the
  // controller, the namespace, its ANA state or a reservation may have changed meanwhile.
  // Otherwise parse checked it this very turn.
  if (r.waited && !readmitted(r)) return;
  Namespace* ns = r.ns;
  const Sqe& sqe = r.sqe;
  const auto opc = static_cast<IoOpcode>(sqe.opc);
  if (!ns) {
    start_flush(r, true);  // NSID FFFFFFFFh
    return;
  }
  backend::BlockIo& io = r.io;
  io.buffer = r.buf;
  io.read_data = nullptr;
  io.offset = sqe.slba() << ns->lbads;
  io.length = uint64_t(sqe.nlb()) << ns->lbads;
  io.fua = (opc == IoOpcode::Write || opc == IoOpcode::WriteZeroes) && sqe.fua();
  switch (opc) {
    case IoOpcode::Read:
    case IoOpcode::Verify: io.op = backend::BlockIo::Op::Read; break;
    case IoOpcode::Write: io.op = backend::BlockIo::Op::Write; break;
    case IoOpcode::WriteZeroes: io.op = backend::BlockIo::Op::WriteZeroes; break;
    case IoOpcode::Compare:
      io.op = backend::BlockIo::Op::Read;
      io.buffer = r.buf + align_4k(r.xfer.len);
      break;
    case IoOpcode::Copy: execute_copy(r, *ns); return;
    case IoOpcode::DatasetManagement: execute_dsm(r, *ns); return;
    case IoOpcode::Flush: start_flush(r, false); return;
    default: execute_reservation(r, *ns); return;  // parse let only these through
  }
  if (!q_.take_turn(r, device_cost(r, *ns, q_.shared_.contended(q_.reactor().now_ns())))) return;
  submit(r, *ns);
}

void IoCommands::execute_copy(Command& r, Namespace& ns) {
  const uint32_t nr = (r.sqe.cdw12 & 0xFF) + 1;
  const auto* ranges = reinterpret_cast<const CopySourceRange*>(r.buf);
  const uint64_t blocks = ns.blocks.load(std::memory_order_relaxed);
  const uint64_t max_range = copy_max_range_blocks(ctrl().mdts_bytes(), ns.lbads);
  uint64_t total = 0;
  for (uint32_t i = 0; i < nr; ++i) {
    const uint64_t nlb = uint64_t(ranges[i].nlb) + 1;
    if (nlb > max_range) {
      q_.complete(r, sc::CommandSizeLimitExceeded);
      return;
    }
    if (ranges[i].slba >= blocks || nlb > blocks - ranges[i].slba) {
      q_.complete(r, sc::LbaOutOfRange);
      return;
    }
    total += nlb;
  }
  const uint64_t sdlba = r.sqe.slba();
  if (sdlba >= blocks || total > blocks - sdlba) {
    q_.complete(r, sc::LbaOutOfRange);
    return;
  }
  r.steps = Command::CopySteps{0, sdlba, 0, false};
  copy_step(r);
}

void IoCommands::execute_dsm(Command& r, Namespace& ns) {
  if (!(r.sqe.cdw11 & (1u << 2))) {  // only the Deallocate attribute asks us to act
    q_.complete(r, sc::Success);
    return;
  }
  const uint32_t nr = (r.sqe.cdw10 & 0xFF) + 1;
  const auto* ranges = reinterpret_cast<const DsmRange*>(r.buf);
  const uint64_t blocks = ns.blocks.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < nr; ++i) {
    if (ranges[i].slba >= blocks || ranges[i].nlb > blocks - ranges[i].slba) {
      q_.complete(r, sc::LbaOutOfRange);
      return;
    }
  }
  r.steps = Command::DsmSteps{};
  dsm_step(r);
}

// Reservation commands: the namespace's Reservations decides, under its lock; the notices a
// command causes go to the other hosts' controllers.
void IoCommands::execute_reservation(Command& r, Namespace& ns) {
  const Sqe& sqe = r.sqe;
  const auto opc = static_cast<IoOpcode>(sqe.opc);
  if (opc == IoOpcode::ReservationReport) {
    const Status st = ns.reservations.report(sqe.cdw11 & 1, r.buf, r.xfer.len);
    if (st.ok()) {
      r.tx_data = r.buf;
      r.tx_len = r.xfer.len;
    }
    q_.complete(r, st);
    return;
  }
  Reservations::HostId host;
  std::memcpy(host.data(), ctrl().hostid(), host.size());
  std::vector<Reservations::Notice> notices;
  Reservations::Outcome o;
  switch (opc) {
    case IoOpcode::ReservationRegister: {
      ReservationRegisterData d;
      std::memcpy(&d, r.buf, sizeof(d));
      o = ns.reservations.apply_register(host, sqe.cdw10, d, notices);
      break;
    }
    case IoOpcode::ReservationAcquire: {
      ReservationAcquireData d;
      std::memcpy(&d, r.buf, sizeof(d));
      o = ns.reservations.apply_acquire(host, sqe.cdw10, d, notices);
      break;
    }
    default: {
      ReservationReleaseData d;
      std::memcpy(&d, r.buf, sizeof(d));
      o = ns.reservations.apply_release(host, sqe.cdw10, d, notices);
      break;
    }
  }
  // debug, not info: any host can send these in a loop, and each log line is a write(2).
  if (o.status.ok())
    log::debug("{}: host {} reservation opcode 0x{:02x} cdw10 0x{:08x} on namespace {}: type now {}",
               q_.link_.peer, ctrl().hostnqn(), sqe.opc, sqe.cdw10, ns.nsid, uint8_t(ns.reservations.type()));
  ctrl().subsystem().notify_reservation(ns.nsid, notices);
  // Preempt and Abort: the preempted hosts' commands that still wait end as they resume
  // (readmission); those already on the device are waited for, as nvmet waits for them, so
  // that once the command completes no write of a preempted host lands after the new holder's.
  const uint32_t action = sqe.cdw10 & 0x7;
  if (o.status.ok() && opc == IoOpcode::ReservationAcquire && action == uint32_t(AcquireAction::PreemptAndAbort)) {
    r.steps = Command::FenceDrain{o.durable_ticket};
    r.fence_ns = &ns;
    drain_fence(r);
    return;
  }
  finish_reservation(r, o.status, o.durable_ticket);
}

void IoCommands::finish_reservation(Command& r, Status st, uint64_t durable_ticket) {
  if (!durable_ticket) {
    q_.complete(r, st);
    return;
  }
  // Persistence on (CPTPL): the command completes once its state is durable.
  q_.wait_until_durable(r, durable_ticket);
}

// The fence owned (new writes of every host held back for that while), the writes in flight on
// the namespace, on every reactor, drained, the fence let go: a Preempt and Abort may complete.
void IoCommands::drain_fence(Command& r) {
  Namespace& ns = *r.fence_ns;
  if (!r.fence_owner) {
    if (!ns.fence.try_own()) {  // a fused operation owns it, or writes wait for one that did
      wait_for_fence(r);
      return;
    }
    r.fence_owner = true;
  }
  if (!ns.fence.drained()) {
    wait_for_fence(r);
    return;
  }
  ns.fence.release();
  r.fence_owner = false;
  const uint64_t ticket = std::get<Command::FenceDrain>(r.steps).durable_ticket;
  r.steps = std::monostate{};
  finish_reservation(r, sc::Success, ticket);
}

// ---------------------------------------------------------------- device completions

void IoCommands::device_done(Command& r) {
  Status st = r.device_status;
  // A device that failed a command is an error event for the host (Transient Internal
  // Error: the failure is the command's, the controller goes on). A compare-and-write that
  // did not match is the command's answer, not a failure.
  const bool mismatch = r.io.op == backend::BlockIo::Op::CompareAndWrite && st == sc::CompareFailure;
  if (!st.ok() && !mismatch && q_.ctrl_) ctrl().raise_device_error();
  if (r.fused()) {
    fused_done(r);
    return;
  }
  if (std::holds_alternative<Command::FlushSteps>(r.steps)) {
    if (st.ok()) flush_step(r);
    else q_.complete(r, st);
    return;
  }
  if (std::holds_alternative<Command::DsmSteps>(r.steps)) {
    if (st.ok()) q_.next_turn(r);
    else q_.complete(r, st);
    return;
  }
  if (std::holds_alternative<Command::CopySteps>(r.steps)) {
    copy_done(r);
    return;
  }
  const auto opc = static_cast<IoOpcode>(r.sqe.opc);
  if (opc == IoOpcode::Verify) {  // read to check it, never sent
    q_.complete(r, st);
    return;
  }
  if (opc == IoOpcode::Compare) {
    const uint8_t* device = r.io.read_data ? r.io.read_data : r.io.buffer;
    if (st.ok() && std::memcmp(r.buf, device, r.io.length) != 0) st = sc::CompareFailure;
    q_.complete(r, st);
    return;
  }
  if (st.ok() && stats_) {
    if (r.io.op == backend::BlockIo::Op::Read) stats_[r.ns_index].add_read(r.io.length);
    else if (r.io.op == backend::BlockIo::Op::Write) stats_[r.ns_index].add_write(r.io.length);
  }
  if (st.ok() && r.io.fua) q_.shared_.count_fua_write();
  if (st.ok() && r.io.op == backend::BlockIo::Op::Read) {
    r.tx_data = r.io.read_data;
    r.tx_len = uint32_t(r.io.length);
  }
  q_.complete(r, st);
}

// ---------------------------------------------------------------- commands in steps

// The step or command that waited (between steps, or for its turn) runs again from where it
// stopped; each step looks at Abort and checks again whether its host may still run it.
void IoCommands::next_step(Command& r) {
  if (std::holds_alternative<Command::CopySteps>(r.steps)) {
    copy_step(r);
  } else if (std::holds_alternative<Command::DsmSteps>(r.steps)) {
    dsm_step(r);
  } else if (r.aborted) {  // it waited for its turn, and holds nothing
    r.turn_granted = false;
    q_.complete(r, sc::AbortRequested);
  } else {
    execute(r);  // readmits: it waited
  }
}

// Copy: each source range is read into the buffer after the range list, then written at the
// destination, which moves on by that range's length; one range per reactor turn at most. Both
// go a piece of at most kCopyPieceBytes at a time, each piece within its reactor's budget of
// work per turn (take_turn), the pieces over it on later turns: the whole range is read before any of it is written, as when it went in one
// piece, so a destination overlapping its source reads the same either way.
void IoCommands::copy_step(Command& r) {
  auto& copy = std::get<Command::CopySteps>(r.steps);
  // Aborted: before a range is written, or between ranges; a range being written is written whole.
  if (r.aborted && !(copy.writing && copy.done > 0)) {
    q_.complete(r, sc::AbortRequested);
    return;
  }
  const uint32_t nr = (r.sqe.cdw12 & 0xFF) + 1;
  if (copy.next < nr && !readmitted(r)) return;  // each piece as if it were a command of its own
  if (copy.next == nr) {
    q_.complete(r, sc::Success);
    return;
  }
  Namespace* ns = r.ns;  // held since parse, even if masked from the host meanwhile
  const auto& range = reinterpret_cast<const CopySourceRange*>(r.buf)[copy.next];
  const uint64_t range_bytes = (uint64_t(range.nlb) + 1) << ns->lbads;
  const uint64_t piece = std::min(range_bytes - copy.done, std::max(kCopyPieceBytes, uint64_t(1) << ns->lbads));
  if (!q_.take_turn(r, piece, true)) return;  // over this turn's budget: a later turn
  uint8_t* data = r.buf + kCopyRangesBytes + copy.done;
  r.io.op = copy.writing ? backend::BlockIo::Op::Write : backend::BlockIo::Op::Read;
  r.io.offset = (copy.writing ? copy.dst << ns->lbads : range.slba << ns->lbads) + copy.done;
  r.io.length = piece;
  r.io.buffer = data;
  r.io.read_data = nullptr;
  r.io.fua = copy.writing && r.sqe.fua();  // CDW12 bit 30, as for a write
  submit(r, *ns);
}

void IoCommands::copy_done(Command& r) {
  auto& copy = std::get<Command::CopySteps>(r.steps);
  Status st = r.device_status;
  if (!st.ok()) {
    q_.complete(r, st);
    return;
  }
  Namespace* ns = r.ns;  // held since parse, even if masked from the host meanwhile
  const auto& range = reinterpret_cast<const CopySourceRange*>(r.buf)[copy.next];
  const uint64_t range_bytes = (uint64_t(range.nlb) + 1) << ns->lbads;
  // A device that lent its own memory for the read: into the buffer, since the write may
  // overlap the range it came from.
  if (!copy.writing && r.io.read_data && r.io.read_data != r.io.buffer)
    std::memcpy(r.io.buffer, r.io.read_data, r.io.length);
  copy.done += r.io.length;
  if (copy.writing) copy.bytes += r.io.length;
  if (copy.done == range_bytes) {
    copy.done = 0;
    if (copy.writing) {  // a range done: the next one a turn later at the earliest
      copy.dst += range_bytes >> ns->lbads;
      ++copy.next;
      copy.writing = false;
      q_.next_turn(r);
      return;
    }
    copy.writing = true;
  }
  copy_step(r);  // the next piece now, if the turn's budget has room
}

void IoCommands::dsm_step(Command& r) {
  if (r.aborted) {
    q_.complete(r, sc::AbortRequested);
    return;
  }
  auto& dsm = std::get<Command::DsmSteps>(r.steps);
  Namespace* ns = r.ns;  // held since parse, even if masked from the host meanwhile
  const auto* ranges = reinterpret_cast<const DsmRange*>(r.buf);
  const uint32_t nr = (r.sqe.cdw10 & 0xFF) + 1;
  while (dsm.next < nr && ranges[dsm.next].nlb == 0) ++dsm.next;
  if (dsm.next == nr) {
    q_.complete(r, sc::Success);
    return;
  }
  if (!readmitted(r)) return;  // each range as if it were a command of its own
  if (!q_.take_turn(r, ns->device->copies_on_reactor() ? uint64_t(ranges[dsm.next].nlb) << ns->lbads : 0)) return;
  const DsmRange& d = ranges[dsm.next++];
  r.io.op = backend::BlockIo::Op::Deallocate;
  r.io.offset = d.slba << ns->lbads;
  r.io.length = uint64_t(d.nlb) << ns->lbads;
  dsm.bytes += r.io.length;
  submit(r, *ns);
}

// Flush makes durable every write that completed before it arrived: on one namespace, or
// (NSID FFFFFFFFh, and when feature 06h turns a cache off) on each namespace the controller
// reaches, one after another. Namespaces without a volatile write cache have nothing to do.
void IoCommands::start_flush(Command& r, bool all, bool shutdown_after) {
  r.steps = Command::FlushSteps{0, all, shutdown_after};
  flush_step(r);
}

// Before each namespace's flush: what readmitted() checks, for that namespace. (A Flush of
// every namespace checked them all at parse; it does not look at all again at each step.) The
// flushes a controller runs for itself (shutdown, a cache turned off: admin queue) are no host
// I/O, which a reservation or a path state could refuse.
bool IoCommands::flush_admitted(Command& r, bool all, Namespace& ns) {
  if (q_.qid_ == 0) return true;
  if (!all) return readmitted(r);
  if (q_.link_.closing) return false;
  if (!io_allowed(r)) {
    if (!r.status.ok()) end_command(r, std::exchange(r.status, Status{}), true);
    return false;
  }
  const Status st = path_and_reservation(ctrl(), ns, false, true, resv_cache_[ns.index]);
  if (st.ok()) return true;
  end_command(r, st, true);
  return false;
}

void IoCommands::flush_step(Command& r) {
  if (r.aborted) {
    q_.complete(r, sc::AbortRequested);
    return;
  }
  auto& flush = std::get<Command::FlushSteps>(r.steps);
  const Subsystem& sub = ctrl().subsystem();
  while (flush.next < sub.max_namespaces()) {
    const uint32_t nsid = ++flush.next;
    // One namespace: the one parse found (and holds). Every one: each held while its flush
    // runs, so that none is removed under it.
    Namespace* ns = flush.all ? ctrl().find_namespace(nsid) : (nsid == r.sqe.nsid ? r.ns : nullptr);
    if (!ns || !ns->device->volatile_write_cache()) continue;
    if (!flush_admitted(r, flush.all, *ns)) return;
    if (flush.all) q_.hold_namespace(r, ns);
    r.io.op = backend::BlockIo::Op::Flush;
    r.io.offset = r.io.length = 0;
    r.io.fua = false;
    r.io.buffer = nullptr;
    r.io.read_data = nullptr;
    submit(r, *ns);
    return;
  }
  if (q_.qid_ != 0) q_.shared_.count_flush();
  if (flush.shutdown_after) ctrl().shutdown_complete();
  q_.complete(r, sc::Success);
}

// ---------------------------------------------------------------- fused Compare and Write

// The only fused operation NVM defines: a Compare marked first, then, as the very next
// command, a Write marked second, on the same blocks, each with its data in the capsule.
// Decided at parse, in arrival order. True when r was taken here: paired (execute starts the
// pair), held as a first half, or failed (r.status).
bool IoCommands::fused_halves(Command& r) {
  const uint8_t fuse = r.sqe.flags & kSqeFlagsFuseMask;
  if (Command* first = fused_first_) {
    fused_first_ = nullptr;
    const Sqe &c = first->sqe, &w = r.sqe;
    const uint32_t len = first->capsule_len;
    const bool pair = fuse == kSqeFlagsFuseSecond && w.opc == uint8_t(IoOpcode::Write) && w.nsid == c.nsid &&
                      w.slba() == c.slba() && w.nlb() == c.nlb() && r.capsule_len == len && len != 0;
    if (pair) {
      first->steps = Command::FusedHalf{&r};
      r.steps = Command::FusedHalf{first};
      return true;
    }
    log::warn("{}: fused Compare cid {} not followed by its Write (next: cid {} opcode 0x{:02x} fuse {})",
              q_.link_.peer, c.cid, w.cid, w.opc, fuse);
    fused_first_ = first;
    refuse_fused_first(fuse == kSqeFlagsFuseSecond ? sc::InvalidField : sc::MissingFusedCommand);
    if (fuse == kSqeFlagsFuseSecond) {
      r.status = sc::FailedFusedCommand;
      return true;
    }
    if (fuse == 0) return false;  // r runs as itself
    // r itself is a new first half.
  }
  if (fuse == kSqeFlagsFuseFirst && q_.qid_ != 0 && q_.connected() && r.sqe.opc == uint8_t(IoOpcode::Compare)) {
    if (r.capsule_len == 0) {  // the pair runs from its in-capsule data only
      r.status = sc::InvalidField;
      return true;
    }
    r.steps = Command::FusedHalf{};
    fused_first_ = &r;  // execute() holds it until its second half comes
    return true;
  }
  r.status = fuse == kSqeFlagsFuseSecond ? sc::MissingFusedCommand : sc::InvalidField;
  return true;
}

void IoCommands::refuse_fused_first(Status st) {
  Command* first = std::exchange(fused_first_, nullptr);
  first->steps = std::monostate{};
  q_.set_state(*first, State::Running);
  q_.complete(*first, st);
}

void IoCommands::start_fused(Command& cmp, Command& wr) {
  if (ctrl().dead.load(std::memory_order_relaxed) || !ctrl().ready()) {
    end_fused(cmp, sc::CommandSequenceError, sc::FailedFusedCommand);
    return;
  }
  Namespace* ns = ctrl().find_namespace(cmp.sqe.nsid);
  if (!ns) {
    end_fused(cmp, sc::InvalidNamespace, sc::FailedFusedCommand);
    return;
  }
  // Both halves hold the namespace as any I/O does: removed live, it outlives their device I/O.
  q_.hold_namespace(cmp, ns);
  q_.hold_namespace(wr, ns);
  cmp.resv_abort_epoch = wr.resv_abort_epoch = ns->reservations.aborts().epoch();
  // Its ANA group not reachable through this port: as for a plain Write, a path status.
  if (Status st = ctrl().ana_status(*ns); !st.ok()) {
    end_fused(cmp, st, sc::FailedFusedCommand);
    return;
  }
  uint64_t len = 0;
  if (Status st = block_range(cmp.sqe, *ns, true, len); !st.ok()) {
    end_fused(cmp, st, sc::FailedFusedCommand);
    return;
  }
  if (len != cmp.capsule_len || cmp.sqe.sgl.length != cmp.capsule_len) {
    end_fused(cmp, sc::DataSglLengthInvalid, sc::FailedFusedCommand);
    return;
  }
  if (ns->reservations.held() && !ns->reservations.allowed(ctrl().hostid(), true, true, resv_cache_[ns->index])) {
    end_fused(cmp, sc::ReservationConflict, sc::FailedFusedCommand);
    return;
  }
  cmp.fence_ns = ns;
  q_.set_state(wr, State::AwaitingFusedPartner);  // until its Compare has read and matched
  q_.set_state(cmp, State::Running);
  run_fused(cmp);
}

// First the pair's rate limit (both halves at once, before anything is owned: a pair that waits
// for its slice holds no other host's writes back), then the fence: owned, and the writes in
// flight drained; then the blocks to compare are read. A device that compares and writes
// atomically itself (RBD, against every gateway of the image) is given the pair as one
// CompareAndWrite instead. The fence is owned either way, so that this target's own writes keep
// their order around the pair.
void IoCommands::run_fused(Command& cmp) {
  Namespace* ns = cmp.fence_ns;
  if (!cmp.qos_admitted && ns->qos.enabled()) {
    if (waits_.rate_line_busy() || !ns->qos.admit(qos_cost(cmp), q_.clock().turn_ns(q_.reactor()))) {
      wait_for_qos(cmp, *ns);
      return;
    }
  }
  cmp.qos_admitted = true;
  if (!cmp.fence_owner) {
    if (!ns->fence.try_own()) {  // another fused operation on this namespace runs
      wait_for_fence(cmp);
      return;
    }
    cmp.fence_owner = true;
  }
  if (!ns->fence.drained()) {
    wait_for_fence(cmp);
    return;
  }
  backend::BlockIo& io = cmp.io;
  io.offset = cmp.sqe.slba() << ns->lbads;
  io.length = cmp.capsule_len;
  io.fua = false;
  io.read_data = nullptr;
  if (ns->device->atomic_compare_and_write()) {
    Command& wr = *cmp.fused()->partner;
    io.op = backend::BlockIo::Op::CompareAndWrite;
    io.compare = cmp.buf;
    io.buffer = wr.buf;
    io.fua = wr.sqe.fua();
    q_.start_device(cmp, *ns);
    return;
  }
  io.op = backend::BlockIo::Op::Read;
  io.buffer = cmp.buf + align_4k(cmp.capsule_len);
  q_.start_device(cmp, *ns);
}

void IoCommands::fused_done(Command& r) {
  Command& cmp = r.sqe.opc == uint8_t(IoOpcode::Compare) ? r : *r.fused()->partner;
  Command& wr = *cmp.fused()->partner;
  Status st = r.device_status;
  if (&r == &wr) {  // the write is done: the pair is
    if (st.ok() && stats_) stats_[wr.ns_index].add_write(wr.io.length);
    end_fused(cmp, st.ok() ? sc::Success : sc::FailedFusedCommand, st);
    return;
  }
  if (cmp.io.op == backend::BlockIo::Op::CompareAndWrite) {  // the device did both halves
    if (st.ok() && stats_) stats_[wr.ns_index].add_write(cmp.io.length);
    end_fused(cmp, st, st.ok() ? sc::Success : sc::FailedFusedCommand);
    return;
  }
  const uint8_t* device = cmp.io.read_data ? cmp.io.read_data : cmp.io.buffer;
  if (st.ok() && std::memcmp(cmp.buf, device, cmp.capsule_len) != 0) st = sc::CompareFailure;
  if (!st.ok()) {
    end_fused(cmp, st, sc::FailedFusedCommand);
    return;
  }
  // The Write was aborted while its Compare read: the pair ends before anything is written.
  if (wr.aborted) {
    end_fused(cmp, sc::FailedFusedCommand, sc::AbortRequested);
    return;
  }
  // The Compare's read was a wait too: the Write is admitted again before it writes.
  if (!readmitted(cmp)) return;
  Namespace* ns = cmp.fence_ns;
  backend::BlockIo& io = wr.io;
  io.op = backend::BlockIo::Op::Write;
  io.offset = wr.sqe.slba() << ns->lbads;
  io.length = wr.capsule_len;
  io.buffer = wr.buf;
  io.read_data = nullptr;
  io.fua = wr.sqe.fua();
  wr.fence_owner = true;  // writes under the fence its Compare owns
  wr.fence_ns = ns;
  q_.set_state(cmp, State::AwaitingFusedPartner);  // until its Write is done
  q_.set_state(wr, State::Running);
  q_.start_device(wr, *ns);  // its rate limit was paid with its Compare's
}

void IoCommands::end_fused(Command& cmp, Status cmp_st, Status wr_st) {
  Command& wr = *cmp.fused()->partner;
  if (cmp.fence_owner) cmp.fence_ns->fence.release();
  cmp.fence_owner = wr.fence_owner = false;
  cmp.steps = wr.steps = std::monostate{};
  cmp.tx_len = wr.tx_len = 0;
  for (Command* half : {&cmp, &wr})
    if (half->state() != State::Running) q_.set_state(*half, State::Running);
  q_.complete(cmp, cmp_st);
  q_.complete(wr, wr_st);
}

// ---------------------------------------------------------------- the waits (io_waits.hpp has their table)

void IoCommands::submit(Command& r, Namespace& ns) {
  // Device work draws on the namespace's rate limits; over them, or behind others of this queue
  // that wait already (first come, first served), it waits for the next slice.
  if (ns.qos.enabled()) {
    const QosLimiter::Cost cost = qos_cost(r);
    if (cost.ios && (waits_.rate_line_busy() || !ns.qos.admit(cost, q_.clock().turn_ns(q_.reactor())))) {
      wait_for_qos(r, ns);
      return;
    }
  }
  submit_past_qos(r, ns);
}

void IoCommands::wait_for_qos(Command& r, Namespace& ns) {
  q_.set_state(r, State::AwaitingQos);
  waits_.wait_for_slice(r, ns);
}

bool IoCommands::resume_from_qos(Command& r, Namespace& ns, uint64_t now_ns) {
  // Checked before it pays: a command its host may no longer run (fenced, unmasked, its path
  // made inaccessible) ends now, without using the slice, and the line behind it moves on.
  const Status st = readmission(r);
  if (q_.link_.closing) return false;  // the line goes with the queue
  if (st.ok() && !ns.qos.admit(qos_cost(r), now_ns)) return false;
  q_.set_state(r, State::Running);
  if (!st.ok()) {
    end_command(r, st, true);
    return true;
  }
  if (r.fused()) {
    r.qos_admitted = true;
    run_fused(r);
  } else {
    submit_past_qos(r, ns);
  }
  return true;
}

void IoCommands::submit_past_qos(Command& r, Namespace& ns) {
  // Writes count themselves against the namespace's fence, or wait while a fused Compare
  // and Write holds it.
  const auto op = r.io.op;
  if (!r.fence_owner && (op == backend::BlockIo::Op::Write || op == backend::BlockIo::Op::WriteZeroes ||
                         op == backend::BlockIo::Op::Deallocate)) {
    r.fence_ns = &ns;
    if (!ns.fence.begin_write(q_.shared_.index(), r.fence_waiting)) {
      wait_for_fence(r);
      return;
    }
    r.fence_counted = true;
  }
  q_.start_device(r, ns);
}

void IoCommands::wait_for_fence(Command& r) {
  q_.set_state(r, State::AwaitingFence);
  waits_.wait_for_fence(r);
}

void IoCommands::resume_from_fence(Command& r) {
  q_.set_state(r, State::Running);
  if (std::holds_alternative<Command::FenceDrain>(r.steps)) {
    drain_fence(r);  // its change is made: it completes, whatever changed since
    return;
  }
  if (!readmitted(r)) return;  // ended, its fence let go
  // A fused Compare waits to own the fence or for it to drain; anything else is a write whose
  // device operation is ready to go.
  if (r.fused() && r.sqe.opc == uint8_t(IoOpcode::Compare)) run_fused(r);
  else submit_past_qos(r, *r.fence_ns);
}

void IoCommands::closed() { waits_.drop_all(); }

// ---------------------------------------------------------------- Abort of an I/O command

bool IoCommands::abort_command(uint16_t cid) {
  if (!q_.connected() || q_.link_.closing) return false;
  const CommandTransport::AbortLookup found = q_.transport_.abort_before_execution(cid);
  if (found.ended) return true;
  if (!found.running) return false;
  Command& r = *found.running;
  const State st = r.state();
  if (st == State::AwaitingQos || st == State::AwaitingFence) {
    if (r.fused() && r.sqe.opc != uint8_t(IoOpcode::Compare)) return false;  // a Write is never in a list
    if (std::holds_alternative<Command::FenceDrain>(r.steps)) return false;  // its change is made
    if (!waits_.leave(r)) return false;
    q_.set_state(r, State::Running);
    log::info("{}: cid {} (opcode 0x{:02x}) aborted while it waited for {}", q_.link_.peer, cid, r.sqe.opc,
              st == State::AwaitingQos ? "its namespace's rate limit" : "its namespace's write fence");
    end_command(r, sc::AbortRequested);  // a fused Compare ends its pair and lets go of the fence
    return true;
  }
  if (st == State::AwaitingFusedPartner) return abort_fused_half(r);
  if (st == State::AwaitingTurn && !r.aborted) {  // it holds nothing yet: it ends when woken
    r.aborted = true;
    log::info("{}: cid {} (opcode 0x{:02x}) aborted while it waited for its reactor's turn", q_.link_.peer, cid,
              r.sqe.opc);
    return true;
  }
  // Commands that go to the device one step at a time (a range, a namespace) stop at the
  // next step: what the finished steps did stays done, as an aborted command may leave it.
  const auto opc = static_cast<IoOpcode>(r.sqe.opc);
  if ((st == State::InDevice || st == State::BetweenSteps) && !r.aborted && !r.fused() &&
      (opc == IoOpcode::DatasetManagement || opc == IoOpcode::Copy || opc == IoOpcode::Flush)) {
    r.aborted = true;
    log::info("{}: cid {} (opcode 0x{:02x}) aborted between its steps", q_.link_.peer, cid, r.sqe.opc);
    return true;
  }
  return false;  // one operation on the device, or being sent
}

// A fused half that waits for its partner: a first half whose Write has not come ends alone; a
// Write whose Compare waits for its slice or the fence ends with it now; a Write whose Compare
// is reading ends the pair once the read is back, before anything is written. A Compare whose
// Write is on the device is not taken back.
bool IoCommands::abort_fused_half(Command& r) {
  if (fused_first_ == &r) {
    log::info("{}: cid {} (fused Compare) aborted before its Write came", q_.link_.peer, r.sqe.cid);
    refuse_fused_first(sc::AbortRequested);
    return true;
  }
  Command::FusedHalf* f = r.fused();
  if (!f || !f->partner || r.sqe.opc == uint8_t(IoOpcode::Compare) || r.aborted) return false;
  Command& cmp = *f->partner;
  if (cmp.state() == State::InDevice) {
    r.aborted = true;  // fused_done ends the pair
    log::info("{}: cid {} (fused Write) aborted while its Compare reads", q_.link_.peer, r.sqe.cid);
    return true;
  }
  if (!waits_.leave(cmp)) return false;
  log::info("{}: cid {} (fused Write) aborted while its Compare waited", q_.link_.peer, r.sqe.cid);
  q_.set_state(cmp, State::Running);
  end_command(r, sc::AbortRequested);  // the pair ends: the Compare Failed Fused Command, the fence let go
  return true;
}

}  // namespace nvtcp::target

// NVM I/O commands on a target connection: Read, Write, Write Zeroes, Compare, Verify, Copy,
// Dataset Management, Flush, reservations, fused Compare and Write with its namespace fence,
// and the device completions that carry each of them on.
#include "target/connection.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "target/connection_internal.hpp"
#include "util/log.hpp"
#include "wire/reservations.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

namespace {
// How often writes waiting for a fused Compare and Write look at its namespace's fence again.
constexpr uint64_t kFenceRetryNs = 20'000;
// How often reservation commands waiting for their state to be durable look again: an fsync
// takes far longer.
constexpr uint64_t kDurableRetryNs = 100'000;

// The command groups a reservation restricts (NVMe base specification, reservations).
bool reads_blocks(IoOpcode op) {
  return op == IoOpcode::Read || op == IoOpcode::Compare || op == IoOpcode::Verify || op == IoOpcode::Copy;
}
bool writes_blocks(IoOpcode op) {
  return op == IoOpcode::Write || op == IoOpcode::WriteZeroes || op == IoOpcode::DatasetManagement ||
         op == IoOpcode::Copy || op == IoOpcode::Flush;
}
}  // namespace

void Connection::execute_io(Request* r) {
  const Sqe& sqe = r->sqe;
  // The admin queue's loss ends this queue now, not at the next periodic check; a reset or
  // shut-down controller runs no I/O (the host must re-enable it first).
  if (ctrl_->dead.load(std::memory_order_relaxed)) {
    close("its controller was torn down");
    return;
  }
  if (!ctrl_->ready()) {
    complete(r, sc::CommandSequenceError);
    return;
  }
  Namespace* ns = ctrl_->subsystem().find_namespace(sqe.nsid);
  auto opc = static_cast<IoOpcode>(sqe.opc);
  if (opc == IoOpcode::Flush && sqe.nsid == kNsidAll) {
    // Flush is in the write group a reservation restricts, on every namespace it reaches:
    // a host that may not write one of them gets Reservation Conflict, as it would for a
    // Flush to that namespace alone, and nothing is flushed.
    for (const auto& each : ctrl_->subsystem().namespaces())
      if (each->reservations.held() &&
          !each->reservations.allowed(ctrl_->hostid(), false, true, resv_cache_[each->index])) {
        complete(r, sc::ReservationConflict);
        return;
      }
    start_flush(r, true);
    return;
  }
  if (!ns) {
    complete(r, sc::InvalidNamespace);
    return;
  }
  // A reservation held on the namespace: one relaxed load while there is none.
  if (ns->reservations.held() &&
      !ns->reservations.allowed(ctrl_->hostid(), reads_blocks(opc), writes_blocks(opc), resv_cache_[ns->index])) {
    complete(r, sc::ReservationConflict);
    return;
  }
  backend::BlockIo& io = r->io;
  io.buffer = r->buf.get();
  io.read_data = nullptr;
  io.fua = (opc == IoOpcode::Write || opc == IoOpcode::WriteZeroes) && sqe.fua();
  switch (opc) {
    case IoOpcode::Verify: {
      // The range is read as a Read would read it, and nothing is sent: a device that could
      // not read a block fails the Verify (VSL in CNS 06h bounds it as MDTS bounds a read).
      uint64_t len = 0;
      if (Status st = block_range(sqe, *ns, true, len); !st.ok()) {
        complete(r, st);
        return;
      }
      io.op = backend::BlockIo::Op::Read;
      io.offset = sqe.slba() << ns->lbads;
      io.length = len;
      if (!read_buffer(r, ns, uint32_t(len))) return;
      break;
    }
    case IoOpcode::Read:
    case IoOpcode::Write:
    case IoOpcode::WriteZeroes: {
      uint64_t len = 0;
      if (Status st = block_range(sqe, *ns, opc != IoOpcode::WriteZeroes, len); !st.ok()) {
        complete(r, st);
        return;
      }
      io.offset = sqe.slba() << ns->lbads;
      io.length = len;
      if (opc == IoOpcode::WriteZeroes) {
        io.op = backend::BlockIo::Op::WriteZeroes;
        break;
      }
      if (sqe.sgl.length != len) {
        complete(r, sc::DataSglLengthInvalid);
        return;
      }
      if (opc == IoOpcode::Read) {
        if (sqe.sgl.type != kSglTransportDataBlock) {
          complete(r, sc::SglDescriptorTypeInvalid);
          return;
        }
        io.op = backend::BlockIo::Op::Read;
        if (!read_buffer(r, ns, uint32_t(len))) return;
        r->tx_pending = uint32_t(len);
        tx_pending_ += len;
        break;
      }
      io.op = backend::BlockIo::Op::Write;
      if (!host_data(r, uint32_t(len))) return;
      io.buffer = r->buf.get();
      break;
    }
    case IoOpcode::Compare: {
      // The host's blocks against the device's: Compare Failure on any difference.
      uint64_t len = 0;
      if (Status st = block_range(sqe, *ns, true, len); !st.ok()) {
        complete(r, st);
        return;
      }
      if (sqe.sgl.length != len) {
        complete(r, sc::DataSglLengthInvalid);
        return;
      }
      if (!host_data(r, uint32_t(len))) return;
      io.op = backend::BlockIo::Op::Read;
      io.offset = sqe.slba() << ns->lbads;
      io.length = len;
      io.buffer = r->buf.get() + align_4k(uint32_t(len));
      break;
    }
    case IoOpcode::Copy: {
      const uint32_t nr = (sqe.cdw12 & 0xFF) + 1, format = (sqe.cdw12 >> 8) & 0xF;
      if (format != 0) {  // source range format 0h only (OCFS)
        complete(r, sc::InvalidField);
        return;
      }
      if (nr > kCopyMaxRanges) {
        complete(r, sc::CommandSizeLimitExceeded);
        return;
      }
      const uint32_t len = nr * uint32_t(sizeof(CopySourceRange));
      if (sqe.sgl.length != len) {
        complete(r, sc::DataSglLengthInvalid);
        return;
      }
      if (!host_data(r, len)) return;
      const auto* ranges = reinterpret_cast<const CopySourceRange*>(r->buf.get());
      const uint64_t blocks = ns->blocks.load(std::memory_order_relaxed);
      const uint64_t max_range = copy_max_range_blocks(ctrl_->mdts_bytes(), ns->lbads);
      uint64_t total = 0;
      for (uint32_t i = 0; i < nr; ++i) {
        const uint64_t nlb = uint64_t(ranges[i].nlb) + 1;
        if (nlb > max_range) {
          complete(r, sc::CommandSizeLimitExceeded);
          return;
        }
        if (ranges[i].slba >= blocks || nlb > blocks - ranges[i].slba) {
          complete(r, sc::LbaOutOfRange);
          return;
        }
        total += nlb;
      }
      const uint64_t sdlba = sqe.slba();
      if (sdlba >= blocks || total > blocks - sdlba) {
        complete(r, sc::LbaOutOfRange);
        return;
      }
      r->copy_next = 0;
      r->copy_dst = sdlba;
      r->copy_writing = false;
      copy_step(r);
      return;
    }
    case IoOpcode::Flush: start_flush(r, false); return;
    case IoOpcode::ReservationRegister:
    case IoOpcode::ReservationAcquire:
    case IoOpcode::ReservationRelease:
    case IoOpcode::ReservationReport: execute_reservation(r, ns); return;
    case IoOpcode::DatasetManagement: {
      uint32_t nr = (sqe.cdw10 & 0xFF) + 1;
      uint32_t len = nr * uint32_t(sizeof(DsmRange));
      if (sqe.sgl.length != len) {
        complete(r, sc::DataSglLengthInvalid);
        return;
      }
      if (!host_data(r, len)) return;
      if (!(sqe.cdw11 & (1u << 2))) {  // only the Deallocate attribute asks us to act
        complete(r, sc::Success);
        return;
      }
      const auto* ranges = reinterpret_cast<const DsmRange*>(r->buf.get());
      const uint64_t blocks = ns->blocks.load(std::memory_order_relaxed);
      for (uint32_t i = 0; i < nr; ++i) {
        if (ranges[i].slba >= blocks || ranges[i].nlb > blocks - ranges[i].slba) {
          complete(r, sc::LbaOutOfRange);
          return;
        }
      }
      r->dsm_next = 0;
      dsm_step(r);
      return;
    }
    default:
      complete(r, sc::InvalidOpcode);
      return;
  }
  submit_io(r, ns);
}

// Reservation commands: the namespace's Reservations decides, under its lock; the notices a
// command causes go to the other hosts' controllers.
void Connection::execute_reservation(Request* r, Namespace* ns) {
  const Sqe& sqe = r->sqe;
  const auto opc = static_cast<IoOpcode>(sqe.opc);
  Reservations::HostId host;
  std::memcpy(host.data(), ctrl_->hostid(), host.size());
  if (opc == IoOpcode::ReservationReport) {
    const uint64_t len = (uint64_t(sqe.cdw10) + 1) * 4;  // NUMD, 0's based
    if (sqe.sgl.type != kSglTransportDataBlock) {
      complete(r, sc::SglDescriptorTypeInvalid);
      return;
    }
    if (len > ctrl_->mdts_bytes() || sqe.sgl.length != len) {
      complete(r, len > ctrl_->mdts_bytes() ? sc::InvalidField : sc::DataSglLengthInvalid);
      return;
    }
    switch (ensure_buffer(r, uint32_t(len))) {
      case BufferResult::Ok: break;
      case BufferResult::Wait: park(r, true); return;
      case BufferResult::Fail: complete(r, sc::InternalError); return;
    }
    const Status st = ns->reservations.report(sqe.cdw11 & 1, r->buf.get(), uint32_t(len));
    if (st.ok()) {
      r->tx_data = r->buf.get();
      r->tx_len = uint32_t(len);
    }
    complete(r, st);
    return;
  }
  const uint32_t len = opc == IoOpcode::ReservationRelease ? sizeof(ReservationReleaseData) : 16;
  if (sqe.sgl.length != len) {
    complete(r, sc::DataSglLengthInvalid);
    return;
  }
  if (!host_data(r, len)) return;
  std::vector<Reservations::Notice> notices;
  Reservations::Outcome o;
  switch (opc) {
    case IoOpcode::ReservationRegister: {
      ReservationRegisterData d;
      std::memcpy(&d, r->buf.get(), sizeof(d));
      o = ns->reservations.apply_register(host, sqe.cdw10, d, notices);
      break;
    }
    case IoOpcode::ReservationAcquire: {
      ReservationAcquireData d;
      std::memcpy(&d, r->buf.get(), sizeof(d));
      o = ns->reservations.apply_acquire(host, sqe.cdw10, d, notices);
      break;
    }
    default: {
      ReservationReleaseData d;
      std::memcpy(&d, r->buf.get(), sizeof(d));
      o = ns->reservations.apply_release(host, sqe.cdw10, d, notices);
      break;
    }
  }
  // debug, not info: any host can send these in a loop, and each log line is a write(2).
  if (o.status.ok())
    log::debug("{}: host {} reservation opcode 0x{:02x} cdw10 0x{:08x} on namespace {}: type now {}", peer_,
               ctrl_->hostnqn(), sqe.opc, sqe.cdw10, ns->nsid, uint8_t(ns->reservations.type()));
  ctrl_->subsystem().notify_reservation(ns->nsid, notices);
  if (!o.durable_ticket) {
    complete(r, o.status);
    return;
  }
  // Persistence on (CPTPL): the command completes once its state is durable.
  wait_until_durable(r, o.durable_ticket);
}

// The namespace's writer thread writes the reservation state (commands that arrive meanwhile
// share the next write); this reactor looks again every kDurableRetryNs and never waits for
// the disk itself. r completes then, with Success or, if the state could not be written,
// Internal Error.
void Connection::wait_until_durable(Request* r, uint64_t ticket) {
  r->durable_ticket = ticket;
  durable_waiters_.push_back(r);
  if (!durable_timer_.linked) reactor_.arm_timer(&durable_timer_, kDurableRetryNs);
}

void Connection::on_durable_timer(reactor::Timer* t) {
  auto* self = static_cast<TimerSlot*>(t)->owner;
  auto& waiting = self->durable_waiters_;
  size_t kept = 0;
  for (Request* r : waiting) {
    bool durable = false;
    Namespace* ns = self->ctrl_->subsystem().find_namespace(r->sqe.nsid);
    if (ns && !ns->reservations.written(r->durable_ticket, durable)) {
      waiting[kept++] = r;
      continue;
    }
    r->durable_ticket = 0;
    // The change is made; a state that could not be written fails the command (the host
    // asked for it to survive power loss and it would not).
    self->complete(r, durable ? sc::Success : sc::InternalError);
  }
  waiting.resize(kept);
  if (kept) self->reactor_.arm_timer(&self->durable_timer_, kDurableRetryNs);
}

// The blocks a command names (SLBA, NLB): inside the namespace, else LBA Out of Range; and,
// for a command that moves data, at most MDTS, else Invalid Field. len: their bytes. The
// namespace size (which a resize changes) is read once.
Status Connection::block_range(const Sqe& sqe, const Namespace& ns, bool bounded_by_mdts, uint64_t& len) const {
  const uint64_t blocks = ns.blocks.load(std::memory_order_relaxed);
  const uint64_t slba = sqe.slba(), nlb = sqe.nlb();
  if (slba >= blocks || nlb > blocks - slba) return sc::LbaOutOfRange;
  len = nlb << ns.lbads;
  if (bounded_by_mdts && len > ctrl_->mdts_bytes()) return sc::InvalidField;
  return sc::Success;
}

// Copy: each source range is read into the buffer after the range list, then written at
// the destination, which moves on by that range's length.
void Connection::copy_step(Request* r) {
  if (r->aborted) {
    complete(r, sc::AbortRequested);
    return;
  }
  const uint32_t nr = (r->sqe.cdw12 & 0xFF) + 1;
  if (r->copy_next == nr) {
    complete(r, sc::Success);
    return;
  }
  Namespace* ns = ctrl_->subsystem().find_namespace(r->sqe.nsid);
  const auto& range = reinterpret_cast<const CopySourceRange*>(r->buf.get())[r->copy_next];
  r->copy_writing = false;
  r->io.op = backend::BlockIo::Op::Read;
  r->io.offset = range.slba << ns->lbads;
  r->io.length = (uint64_t(range.nlb) + 1) << ns->lbads;
  r->io.buffer = r->buf.get() + kCopyRangesBytes;
  r->io.read_data = nullptr;
  r->io.fua = false;
  submit_io(r, ns);
}

void Connection::copy_io_done(Request* r, Status st) {
  if (r->aborted && st.ok() && !r->copy_writing) st = sc::AbortRequested;  // the range is read, not written
  if (!st.ok()) {
    complete(r, st);
    return;
  }
  if (r->copy_writing) {
    r->copy_dst += r->io.length >> ctrl_->subsystem().find_namespace(r->sqe.nsid)->lbads;
    ++r->copy_next;
    next_step_later(r);
    return;
  }
  // A device that lent its own memory for the read: copy out of it first, since the write
  // may overlap the range it came from.
  uint8_t* data = r->buf.get() + kCopyRangesBytes;
  if (r->io.read_data != data) std::memcpy(data, r->io.read_data, r->io.length);
  Namespace* ns = ctrl_->subsystem().find_namespace(r->sqe.nsid);
  r->copy_writing = true;
  r->io.op = backend::BlockIo::Op::Write;
  r->io.offset = r->copy_dst << ns->lbads;
  r->io.buffer = data;
  r->io.read_data = nullptr;
  r->io.fua = r->sqe.fua();  // CDW12 bit 30, as for a write
  submit_io(r, ns);
}

// Fused Compare and Write (the only fused operation NVM defines): a Compare marked first,
// then, as the very next command, a Write marked second, on the same blocks, each with its
// data in the capsule. True when r was taken here.
bool Connection::fused_halves(Request* r) {
  const uint8_t fuse = r->sqe.flags & kSqeFlagsFuseMask;
  if (Request* first = fused_first_; first && first != r) {
    fused_first_ = nullptr;
    const Sqe &c = first->sqe, &w = r->sqe;
    const uint64_t len = first->data_len;
    const bool pair = fuse == kSqeFlagsFuseSecond && w.opc == uint8_t(IoOpcode::Write) && w.nsid == c.nsid &&
                      w.slba() == c.slba() && w.nlb() == c.nlb() && r->data_len == len && len != 0;
    if (pair) {
      start_fused(first, r);
      return true;
    }
    log::warn("{}: fused Compare cid {} not followed by its Write (next: cid {} opcode 0x{:02x} fuse {})", peer_,
              c.cid, w.cid, w.opc, fuse);
    complete(first, fuse == kSqeFlagsFuseSecond ? sc::InvalidField : sc::MissingFusedCommand);
    if (fuse == kSqeFlagsFuseSecond) {
      complete(r, sc::FailedFusedCommand);
      return true;
    }
    return fuse != 0 && fused_halves(r);  // r itself may be a new first half
  }
  if (fuse == kSqeFlagsFuseFirst && qid_ != 0 && state_ == State::Connected &&
      r->sqe.opc == uint8_t(IoOpcode::Compare)) {
    if (r->data_len == 0) {  // the pair runs from its in-capsule data only
      complete(r, sc::InvalidField);
      return true;
    }
    fused_first_ = r;  // stays Executing (as execute() found it) until its second half comes
    return true;
  }
  complete(r, fuse == kSqeFlagsFuseSecond ? sc::MissingFusedCommand : sc::InvalidField);
  return true;
}

void Connection::start_fused(Request* cmp, Request* wr) {
  cmp->fused_partner = wr;
  wr->fused_partner = cmp;
  if (ctrl_->dead.load(std::memory_order_relaxed) || !ctrl_->ready()) {
    end_fused(cmp, sc::CommandSequenceError, sc::FailedFusedCommand);
    return;
  }
  Namespace* ns = ctrl_->subsystem().find_namespace(cmp->sqe.nsid);
  if (!ns) {
    end_fused(cmp, sc::InvalidNamespace, sc::FailedFusedCommand);
    return;
  }
  uint64_t len = 0;
  if (Status st = block_range(cmp->sqe, *ns, true, len); !st.ok()) {
    end_fused(cmp, st, sc::FailedFusedCommand);
    return;
  }
  if (len != cmp->data_len || cmp->sqe.sgl.length != cmp->data_len) {
    end_fused(cmp, sc::DataSglLengthInvalid, sc::FailedFusedCommand);
    return;
  }
  if (ns->reservations.held() && !ns->reservations.allowed(ctrl_->hostid(), true, true, resv_cache_[ns->index])) {
    end_fused(cmp, sc::ReservationConflict, sc::FailedFusedCommand);
    return;
  }
  cmp->fence_ns = ns;
  run_fused(cmp);
}

// Owns the fence, waits for the writes in flight to drain, then reads the blocks to compare.
void Connection::run_fused(Request* cmp) {
  Namespace* ns = cmp->fence_ns;
  if (!cmp->fence_owner) {
    if (!ns->fence.try_own()) {  // another fused operation on this namespace runs
      wait_for_fence(cmp);
      return;
    }
    cmp->fence_owner = true;
  }
  if (!ns->fence.drained()) {
    wait_for_fence(cmp);
    return;
  }
  backend::BlockIo& io = cmp->io;
  io.op = backend::BlockIo::Op::Read;
  io.offset = cmp->sqe.slba() << ns->lbads;
  io.length = cmp->data_len;
  io.fua = false;
  io.read_data = nullptr;
  io.buffer = cmp->buf.get() + align_4k(cmp->data_len);
  submit_io(cmp, ns);
}

void Connection::fused_io_done(Request* r, Status st) {
  Request* cmp = r->sqe.opc == uint8_t(IoOpcode::Compare) ? r : r->fused_partner;
  Request* wr = cmp->fused_partner;
  if (r == wr) {  // the write is done: the pair is
    if (st.ok() && stats_) stats_[wr->ns_index].add_write(wr->io.length);
    end_fused(cmp, st.ok() ? sc::Success : sc::FailedFusedCommand, st);
    return;
  }
  const uint8_t* device = cmp->io.read_data ? cmp->io.read_data : cmp->io.buffer;
  if (st.ok() && std::memcmp(cmp->buf.get(), device, cmp->data_len) != 0) st = sc::CompareFailure;
  if (!st.ok()) {
    end_fused(cmp, st, sc::FailedFusedCommand);
    return;
  }
  Namespace* ns = cmp->fence_ns;
  backend::BlockIo& io = wr->io;
  io.op = backend::BlockIo::Op::Write;
  io.offset = wr->sqe.slba() << ns->lbads;
  io.length = wr->data_len;
  io.buffer = wr->buf.get();
  io.read_data = nullptr;
  io.fua = wr->sqe.fua();
  wr->fence_owner = true;  // writes under the fence its Compare owns
  wr->fence_ns = ns;
  submit_io(wr, ns);
}

void Connection::end_fused(Request* cmp, Status cmp_st, Status wr_st) {
  Request* wr = cmp->fused_partner;
  if (cmp->fence_owner) cmp->fence_ns->fence.release();
  cmp->fence_owner = wr->fence_owner = false;
  cmp->fused_partner = wr->fused_partner = nullptr;
  cmp->tx_len = wr->tx_len = 0;
  complete(cmp, cmp_st);
  complete(wr, wr_st);
}

void Connection::wait_for_fence(Request* r) {
  fence_waiters_.push_back(r);
  if (!fence_timer_.linked) reactor_.arm_timer(&fence_timer_, kFenceRetryNs);
}

void Connection::on_fence_timer(reactor::Timer* t) {
  auto* self = static_cast<TimerSlot*>(t)->owner;
  std::vector<Request*> waiting;
  waiting.swap(self->fence_waiters_);
  for (Request* r : waiting) {
    // A fused Compare waits to own the fence or for it to drain; anything else is a write
    // whose device operation is ready to go.
    if (r->fused_partner && r->sqe.opc == uint8_t(IoOpcode::Compare)) self->run_fused(r);
    else self->submit_io(r, r->fence_ns);
  }
}

void Connection::submit_io(Request* r, Namespace* ns) {
  // Writes count themselves against the namespace's fence, or wait while a fused Compare
  // and Write holds it.
  const auto op = r->io.op;
  if (!r->fence_owner && (op == backend::BlockIo::Op::Write || op == backend::BlockIo::Op::WriteZeroes ||
                          op == backend::BlockIo::Op::Deallocate)) {
    r->fence_ns = ns;
    if (!ns->fence.begin_write(set_.index(), r->fence_waiting)) {
      wait_for_fence(r);
      return;
    }
    r->fence_counted = true;
  }
  r->ns_index = ns->index;
  r->io.user = r;
  r->io.done = [](backend::BlockIo* io, Status st) {
    Request* req = static_cast<Request*>(io->user);
    req->conn->io_done(req, st);
  };
  // Only a closed connection refuses, and nothing runs commands once it is closed: the
  // request goes with the connection's pool.
  if (!backend_gate_.enter()) return;
  ns->device->submit(&r->io, reactor_);
}

// Copy and Dataset Management move on one range per reactor turn: the next range starts from
// a no-op's completion, among the turn's other completions, not inline. A device that
// completes inline (RAM) would otherwise run a command's every range in one turn: 128 ranges
// of 1 MiB are 256 MiB of memcpy, and every other command on this reactor would wait for it.
// One range is at most MDTS (Copy) or one Deallocate of a range (which yields in slices
// itself), so no command holds the reactor longer than one such step.
void Connection::next_step_later(Request* r) {
  if (!backend_gate_.enter()) return;  // closed: nothing runs commands any more
  r->next_step.owner = r;
  r->next_step.fn = [](reactor::Completion* c, int, uint32_t) {
    Request* req = static_cast<reactor::OwnedCompletion<Request>*>(c)->owner;
    req->conn->run_next_step(req);
  };
  io_uring_sqe* sqe = reactor_.get_sqe();
  io_uring_prep_nop(sqe);
  reactor_.prep(sqe, &r->next_step);
}

void Connection::run_next_step(Request* r) {
  if (backend_gate_.closed()) {
    backend_gate_.leave();  // may free this connection: touch nothing after
    return;
  }
  backend_gate_.leave();
  if (r->sqe.opc == uint8_t(IoOpcode::Copy)) copy_step(r);
  else dsm_step(r);
}

void Connection::dsm_step(Request* r) {
  if (r->aborted) {
    complete(r, sc::AbortRequested);
    return;
  }
  Namespace* ns = ctrl_->subsystem().find_namespace(r->sqe.nsid);
  const auto* ranges = reinterpret_cast<const DsmRange*>(r->buf.get());
  uint32_t nr = (r->sqe.cdw10 & 0xFF) + 1;
  while (r->dsm_next < nr && ranges[r->dsm_next].nlb == 0) ++r->dsm_next;
  if (r->dsm_next == nr) {
    complete(r, sc::Success);
    return;
  }
  const DsmRange& d = ranges[r->dsm_next++];
  r->io.op = backend::BlockIo::Op::Deallocate;
  r->io.offset = d.slba << ns->lbads;
  r->io.length = uint64_t(d.nlb) << ns->lbads;
  submit_io(r, ns);
}

// Flush makes durable every write that completed before it arrived: on one namespace, or
// (NSID FFFFFFFFh, and when feature 06h turns a cache off) on each namespace the controller
// reaches, one after another. Namespaces without a volatile write cache have nothing to do.
void Connection::start_flush(Request* r, bool all) {
  r->flush_all = all;
  r->flush_next = 0;
  flush_step(r);
}

void Connection::flush_step(Request* r) {
  if (r->aborted) {
    complete(r, sc::AbortRequested);
    return;
  }
  const auto& namespaces = ctrl_->subsystem().namespaces();
  while (r->flush_next < namespaces.size()) {
    Namespace* ns = namespaces[r->flush_next++].get();
    if (!r->flush_all && ns->nsid != r->sqe.nsid) continue;
    if (!ns->device->volatile_write_cache()) continue;
    r->io.op = backend::BlockIo::Op::Flush;
    r->io.offset = r->io.length = 0;
    r->io.fua = false;
    r->io.buffer = nullptr;
    r->io.read_data = nullptr;
    submit_io(r, ns);
    return;
  }
  if (qid_ != 0) set_.count_flush();
  if (r->shutdown_after_flush) {
    r->shutdown_after_flush = false;
    ctrl_->shutdown_complete();
  }
  complete(r, sc::Success);
}

void Connection::io_done(Request* r, Status st) {
  if (r->fence_counted) {
    r->fence_ns->fence.end_write(set_.index());
    r->fence_counted = false;
  }
  if (backend_gate_.closed() && r->fence_owner) {
    r->fence_ns->fence.release();  // the connection is gone: its fused operation ends here
    r->fence_owner = false;
  }
  tx_pending_ -= r->tx_pending;
  r->tx_pending = 0;
  if (backend_gate_.closed()) {
    backend_gate_.leave();  // the last completion of a closed connection frees it: touch nothing after
    return;
  }
  backend_gate_.leave();
  if (r->io.op == backend::BlockIo::Op::Deallocate && st.ok()) {
    next_step_later(r);
    return;
  }
  if (r->io.op == backend::BlockIo::Op::Flush && st.ok()) {
    flush_step(r);
    return;
  }
  // A device that failed a command is an error event for the host (Transient Internal
  // Error: the failure is the command's, the controller goes on).
  if (!st.ok() && ctrl_) ctrl_->raise_device_error();
  if (r->sqe.opc == uint8_t(IoOpcode::Verify)) {  // read to check it, never sent
    complete(r, st);
    return;
  }
  if (r->fused_partner) {
    fused_io_done(r, st);
    return;
  }
  if (r->sqe.opc == uint8_t(IoOpcode::Copy)) {
    copy_io_done(r, st);
    return;
  }
  if (r->sqe.opc == uint8_t(IoOpcode::Compare)) {
    const uint8_t* device = r->io.read_data ? r->io.read_data : r->io.buffer;
    if (st.ok() && std::memcmp(r->buf.get(), device, r->io.length) != 0) st = sc::CompareFailure;
    complete(r, st);
    return;
  }
  if (st.ok() && stats_) {
    if (r->io.op == backend::BlockIo::Op::Read) stats_[r->ns_index].add_read(r->io.length);
    else if (r->io.op == backend::BlockIo::Op::Write) stats_[r->ns_index].add_write(r->io.length);
  }
  if (st.ok() && r->io.fua) set_.count_fua_write();
  if (st.ok() && r->io.op == backend::BlockIo::Op::Read) {
    r->tx_data = r->io.read_data;
    r->tx_len = uint32_t(r->io.length);
  }
  complete(r, st);
}

}  // namespace nvtcp::target

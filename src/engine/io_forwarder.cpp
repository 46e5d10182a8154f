// SPDX-License-Identifier: Apache-2.0
#include "engine/io_forwarder.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "reactor/reactor.hpp"
#include "shm/attach.hpp"
#include "shm/region.hpp"

namespace nvtcp::engine {

struct IoForwarder::Queue {
  void* owner;
  uint16_t qid;
  shm::EngineQueuePair q;
  uint8_t* data;
  uint64_t data_bytes;
  int vector_fd;
  uint32_t irq_pending = 0;     // completions posted since the last interrupt
  uint32_t irq_threshold = 1;   // coalescing: interrupt after this many
  uint64_t irq_time_ns = 0;     // ... or this long after the first (0: at once)
  uint64_t irq_first_ns = 0;
  nvme::Sqe held{};        // fetched, not yet sent (the host queue pair was full)
  bool holding = false;
  bool fault_reported = false;
  bool cq_notice = false;  // asked to be told when the application frees CQ slots
  // Being removed: no SQE is fetched any more; gone once nothing is in flight or waiting.
  bool removing = false;
  Removal removal = Removal::Abandon;
  uint32_t in_flight = 0;  // commands sent to the remote controller, not yet answered
  uint32_t records = 0;    // command records it holds (in flight, or answers waiting)
  // Answers this queue's CQ had no room for, in order. Per queue: an application that
  // stops reading its CQ holds up its own answers only.
  Command* waiting_head = nullptr;
  Command* waiting_tail = nullptr;
};

struct IoForwarder::Command {
  IoForwarder* self = nullptr;
  Queue* queue = nullptr;
  uint16_t app_cid = 0;
  uint8_t opc = 0;
  uint32_t bytes = 0;      // data length
  uint64_t sent_ns = 0;    // the turn it was taken from the SQ
  nvme::Cqe cqe{};         // the answer, once it came
  Command* next = nullptr; // free list, or the list of answers waiting for CQ room
};

IoForwarder::IoForwarder(HostQueue qp, Events* events)
    : qp_(qp), events_(events), pool_(qp.depth()), clock_(reactor::monotonic_ns) {
  for (auto& c : pool_) {
    c.self = this;
    c.next = free_;
    free_ = &c;
  }
}

IoForwarder::~IoForwarder() {
  closing_ = true;
  while (in_flight_ > 0) qp_.process_completions(1000);
}

IoForwarder::Queue* IoForwarder::add_queue(void* owner, uint16_t qid, const shm::QueueMemory& m, uint8_t* data,
                                           uint64_t data_bytes, int vector_fd, shm::EngineQueuePair::CqPosition cq) {
  queues_.push_back(
      std::unique_ptr<Queue>(new Queue{owner, qid, shm::EngineQueuePair(m, qid), data, data_bytes, vector_fd}));
  queues_.back()->q.resume_cq(cq);
  queues_.back()->q.stop_notices();  // polled from now on
  return queues_.back().get();
}

void IoForwarder::set_coalescing(Queue* q, uint32_t v) {
  q->irq_threshold = (v & 0xFF) + 1;
  q->irq_time_ns = uint64_t((v >> 8) & 0xFF) * 100'000;
}

void IoForwarder::remove_queue(Queue* q, Removal how) {
  if (q->removing && q->removal == Removal::Abandon) return;  // already going, the harsher way
  q->removing = true;
  q->removal = how;
  if (how == Removal::Abandon) {
    // Answers still waiting for CQ room will never be read.
    while (Command* c = q->waiting_head) {
      q->waiting_head = c->next;
      ++stats_.dropped;
      release(c);
    }
    q->waiting_tail = nullptr;
    q->holding = false;
  }
}

bool IoForwarder::faulted(const Queue* q) const { return q->q.fault() != shm::EngineQueuePair::Fault::None; }

// The I/O opcodes the engine carries to the shared remote controller: those whose data
// (if any) it can size and check against the application's region, and whose effect stays
// within what every application may do to a namespace they share (read it, write it).
// Everything else is answered Invalid Command Opcode, as a PCIe controller answers an
// opcode it does not support on an I/O queue:
//   - fabrics commands (7Fh): a Disconnect, Property Set or Authentication on the NVMe/TCP
//     queue pair every application shares would close or change it for all of them;
//   - Reservation Register/Acquire/Release: every application reaches the remote controller
//     as the engine's one host, so a registration or reservation of one would be everyone's
//     (and a Preempt or Clear would take the others'); Reservation Report only reads;
//   - Copy, Write Uncorrectable, Zoned, vendor-specific and unknown opcodes: their data
//     cannot be checked against the region here.
bool IoForwarder::carried(uint8_t opc) {
  switch (static_cast<nvme::IoOpcode>(opc)) {
    case nvme::IoOpcode::Flush:
    case nvme::IoOpcode::Write:
    case nvme::IoOpcode::Read:
    case nvme::IoOpcode::Compare:
    case nvme::IoOpcode::WriteZeroes:
    case nvme::IoOpcode::DatasetManagement:
    case nvme::IoOpcode::Verify:
    case nvme::IoOpcode::ReservationReport: return true;
    default: return false;
  }
}

uint64_t IoForwarder::data_length(const nvme::Sqe& sqe) const {
  switch (static_cast<nvme::IoOpcode>(sqe.opc)) {
    case nvme::IoOpcode::Read:
    case nvme::IoOpcode::Write:
    case nvme::IoOpcode::Compare: return uint64_t(sqe.nlb()) * qp_.block_size(sqe.nsid);
    case nvme::IoOpcode::DatasetManagement: return ((sqe.cdw10 & 0xFF) + 1) * uint64_t(sizeof(nvme::DsmRange));
    case nvme::IoOpcode::ReservationReport: return (uint64_t(sqe.cdw10) + 1) * 4;  // NUMD, 0's based
    default: return 0;
  }
}

unsigned IoForwarder::poll(unsigned budget_per_queue, uint64_t turn_ns) {
  turn_ns_ = turn_ns;
  in_poll_ = true;
  unsigned handled = 0;
  for (auto& qp : queues_) flush_waiting(*qp);
  const size_t nq = queues_.size();
  // The queue served first moves round each turn: no queue always gets the pool first.
  if (nq) next_first_ = (next_first_ + 1) % nq;
  for (size_t k = 0; k < nq; ++k) {
    Queue& q = *queues_[(next_first_ + k) % nq];
    if (q.removing) {
      if (q.removal == Removal::Delete) drain_deleted_sq(q);
      continue;
    }
    // A queue takes command records only for answers its CQ has room for now: an
    // application that stops reading its CQ stops getting records, and the ones it holds are
    // in flight (they come back) rather than parked behind its full CQ, so it cannot keep the
    // shared pool from the others. Which queue goes first rotates.
    const uint32_t room = q.q.cq_space();
    for (unsigned n = 0; n < budget_per_queue && q.records < room; ++n) {
      if (!q.holding && !q.q.fetch(q.held)) break;
      q.holding = true;
      if (!forward(q, q.held)) break;  // the host queue pair is full: keep it for next turn
      q.holding = false;
      ++handled;
    }
    if (q.q.fault() != shm::EngineQueuePair::Fault::None && !q.fault_reported) {
      q.fault_reported = true;
      if (events_) events_->on_queue_fault(q.owner, q.qid, q.q.fault());
    }
  }
  qp_.process_completions(0);
  for (auto& qp : queues_) flush_waiting(*qp);
  for (auto& qp : queues_)
    if (qp->irq_pending) interrupt(*qp);
  reap_removed();
  in_poll_ = false;
  return handled;
}

// At most one interrupt per queue per turn, when coalescing lets it go.
void IoForwarder::interrupt(Queue& q) {
  // Coalescing counts what was posted while the application waits; one that polls needs no
  // interrupt (and finds what is already there when it arms).
  if (q.vector_fd < 0 || !q.q.interrupt_requested()) {
    q.irq_pending = 0;
    q.irq_first_ns = 0;
    return;
  }
  bool fire = q.irq_pending >= q.irq_threshold || q.irq_time_ns == 0;
  if (!fire) {
    const uint64_t now = clock_();
    if (!q.irq_first_ns) q.irq_first_ns = now;
    else fire = now - q.irq_first_ns >= q.irq_time_ns;
  }
  if (!fire) return;
  if (q.q.take_interrupt_request()) {  // only an application that sleeps on it is signalled
    shm::signal_fd(q.vector_fd);
    ++stats_.interrupts;
  }
  q.irq_pending = 0;
  q.irq_first_ns = 0;
}

void IoForwarder::resume_polling() {
  for (auto& qp : queues_)
    if (qp->q.fault() == shm::EngineQueuePair::Fault::None) qp->q.stop_notices();
}

bool IoForwarder::prepare_to_sleep() {
  bool work = false;
  for (auto& qp : queues_) {
    Queue& q = *qp;
    if (q.removing || q.q.fault() != shm::EngineQueuePair::Fault::None) continue;
    q.q.want_sq_notice();
    if (q.holding || q.waiting_head || q.irq_pending) work = true;  // coalesced interrupts wait awake
    else if (q.q.fetch(q.held)) q.holding = work = true;  // published just before the notice
  }
  return work;
}

// A deleted SQ's remaining entries end with Command Aborted due to SQ Deletion (as the CQ
// has room for them; the application still reads its CQ until it deletes it).
void IoForwarder::drain_deleted_sq(Queue& q) {
  nvme::Sqe s;
  while (free_ && q.records < q.q.cq_space() && (q.holding || q.q.fetch(s))) {
    if (q.holding) {
      s = q.held;
      q.holding = false;
    }
    Command* cmd = take(q);
    nvme::Cqe c{};
    c.status = nvme::sc::SqDeletion.to_cqe(false);
    ++stats_.refused;
    answer(q, s.cid, c, cmd);
  }
}

void IoForwarder::reap_removed() {
  for (size_t i = 0; i < queues_.size();) {
    Queue& q = *queues_[i];
    if (!q.removing || q.in_flight > 0 || q.waiting_head) {
      ++i;
      continue;
    }
    if (q.removal == Removal::Delete) {
      nvme::Sqe s;
      if (q.holding || q.q.fetch(s)) {  // more arrived: still to be aborted
        if (!q.holding) q.held = s, q.holding = true;
        ++i;
        continue;
      }
    }
    void* owner = q.owner;
    const uint16_t qid = q.qid;
    const shm::EngineQueuePair::CqPosition cq = q.q.cq_position();
    queues_.erase(queues_.begin() + ptrdiff_t(i));
    if (events_) events_->on_queue_removed(owner, qid, cq);
  }
}

// Every command, refused here or sent, holds a record until its answer is posted: a refusal
// may have to wait for CQ room like any answer.
IoForwarder::Command* IoForwarder::take(Queue& q) {
  Command* cmd = free_;
  free_ = cmd->next;
  cmd->queue = &q;
  ++q.records;
  return cmd;
}

bool IoForwarder::forward(Queue& q, const nvme::Sqe& sqe) {
  if (!free_) return false;
  Command* cmd = take(q);
  cmd->app_cid = sqe.cid;
  auto refuse = [&](nvme::Status st) {
    nvme::Cqe c{};
    c.status = st.to_cqe(true);
    ++stats_.refused;
    answer(q, sqe.cid, c, cmd);
    return true;
  };
  // Fused commands are not carried: their halves would sit apart, between other
  // applications' commands, on the shared queue pair.
  if (sqe.flags & nvme::kSqeFlagsFuseMask) return refuse(nvme::sc::InvalidField);
  if (!carried(sqe.opc)) {
    ++stats_.refused_opcodes;
    return refuse(nvme::sc::InvalidOpcode);
  }
  const uint64_t want64 = data_length(sqe);
  if (want64 > 0xFFFFFFFFull) return refuse(nvme::sc::DataSglLengthInvalid);  // beyond any MDTS
  const uint32_t want = uint32_t(want64);
  shm::DataSpan span = shm::resolve_data(sqe, q.data, q.data_bytes, want);
  if (want && qp_.block_size(sqe.nsid) == 0 && sqe.opc != uint8_t(nvme::IoOpcode::DatasetManagement))
    span.status = nvme::sc::InvalidNamespace;
  if (!span.status.ok()) return refuse(span.status);
  const bool to_controller = sqe.opc & 1;  // NVMe opcodes: bit 0 = host to controller
  const int rc = qp_.submit(sqe, span.data, span.length, to_controller, on_host_completion, cmd);
  if (rc == -EBUSY) {
    release(cmd);
    return false;
  }
  if (rc != 0) return refuse(rc == -EINVAL ? nvme::sc::InvalidField : nvme::sc::TransportError);
  cmd->opc = sqe.opc;
  cmd->bytes = want;
  cmd->sent_ns = turn_ns_;
  ++in_flight_;
  ++q.in_flight;
  ++stats_.forwarded;
  return true;
}

void IoForwarder::on_host_completion(void* ctx, const host::Completion& c) {
  auto* cmd = static_cast<Command*>(ctx);
  IoForwarder* self = cmd->self;
  Queue& q = *cmd->queue;
  --self->in_flight_;
  --q.in_flight;
  if (self->closing_) return;
  // Answers outside poll() come while the core sleeps in the host queue pair's wait: no turn
  // clock then, so this one reads the clock (the idle path: it has just made a syscall).
  const uint64_t now = self->in_poll_ ? self->turn_ns_ : self->clock_();
  // A clock that went back (a test's) counts as no time rather than 584 years.
  const uint64_t ns = now > cmd->sent_ns ? now - cmd->sent_ns : 0;
  if (cmd->opc == uint8_t(nvme::IoOpcode::Read)) self->stats_.reads.count(cmd->bytes, c.status.ok(), ns);
  else if (cmd->opc == uint8_t(nvme::IoOpcode::Write)) self->stats_.writes.count(cmd->bytes, c.status.ok(), ns);
  if (q.removing && q.removal == Removal::Abandon) {
    ++self->stats_.dropped;
    self->release(cmd);
    return;
  }
  cmd->cqe = nvme::Cqe{};
  cmd->cqe.dw0 = c.dw0;
  cmd->cqe.dw1 = c.dw1;
  cmd->cqe.status = c.status.to_cqe(true);
  self->answer(q, cmd->app_cid, cmd->cqe, cmd);
}

void IoForwarder::release(Command* cmd) {
  --cmd->queue->records;
  cmd->next = free_;
  free_ = cmd;
}

// Posts the answer to cid on q's CQ and frees cmd, or, with no room there (or earlier
// answers still waiting: they keep their order), queues cmd until the application frees
// CQ slots.
void IoForwarder::answer(Queue& q, uint16_t cid, const nvme::Cqe& cqe, Command* cmd) {
  if (!q.waiting_head && q.q.cq_space() > 0) {
    nvme::Cqe c = cqe;
    c.cid = cid;
    q.q.post(c);
    ++q.irq_pending;
    ++stats_.completed;
    release(cmd);
    return;
  }
  if (q.q.fault() != shm::EngineQueuePair::Fault::None) {  // its CQ cannot be trusted: never posted
    ++stats_.dropped;
    release(cmd);
    return;
  }
  cmd->app_cid = cid;
  cmd->cqe = cqe;
  cmd->next = nullptr;
  if (q.waiting_tail) q.waiting_tail->next = cmd;
  else q.waiting_head = cmd;
  q.waiting_tail = cmd;
}

void IoForwarder::flush_waiting(Queue& q) {
  while (q.waiting_head) {
    Command* cmd = q.waiting_head;
    if (q.q.cq_space() == 0) {
      if (q.q.fault() != shm::EngineQueuePair::Fault::None) {
        q.waiting_head = cmd->next;
        if (!q.waiting_head) q.waiting_tail = nullptr;
        ++stats_.dropped;
        release(cmd);
        continue;
      }
      q.q.want_cq_notice();
      q.cq_notice = true;
      return;
    }
    q.waiting_head = cmd->next;
    if (!q.waiting_head) q.waiting_tail = nullptr;
    nvme::Cqe c = cmd->cqe;
    c.cid = cmd->app_cid;
    q.q.post(c);
    ++q.irq_pending;
    ++stats_.completed;
    release(cmd);
  }
  if (q.cq_notice) {  // the backlog is gone: no more notices wanted
    q.cq_notice = false;
    q.q.stop_notices();
  }
}

}  // namespace nvtcp::engine

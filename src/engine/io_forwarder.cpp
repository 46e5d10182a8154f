#include "engine/io_forwarder.hpp"

#include <unistd.h>

#include <cerrno>

#include "engine/region.hpp"

namespace nvtcp::engine {

IoForwarder::IoForwarder(host::QueuePair& qp, uint8_t* data, uint64_t data_bytes)
    : qp_(qp), data_(data), data_bytes_(data_bytes), pool_(qp.depth()) {
  for (auto& c : pool_) {
    c.self = this;
    c.next = free_;
    free_ = &c;
  }
}

IoForwarder::~IoForwarder() {
  closing_ = true;
  while (in_flight_ > 0 && !qp_.failed()) qp_.process_completions(1000);
}

void IoForwarder::add_queue(uint16_t qid, const QueueMemory& m, int vector_fd) {
  queues_.push_back(std::unique_ptr<Queue>(new Queue{qid, EngineQueuePair(m, qid), vector_fd}));
}

bool IoForwarder::faulted(uint16_t qid) const {
  for (const auto& q : queues_)
    if (q->qid == qid) return q->q.fault() != EngineQueuePair::Fault::None;
  return false;
}

uint32_t IoForwarder::data_length(const wire::Sqe& sqe) const {
  switch (static_cast<wire::IoOpcode>(sqe.opc)) {
    case wire::IoOpcode::Read:
    case wire::IoOpcode::Write: return sqe.nlb() * qp_.block_size(sqe.nsid);
    case wire::IoOpcode::DatasetManagement: return ((sqe.cdw10 & 0xFF) + 1) * uint32_t(sizeof(wire::DsmRange));
    default: return 0;
  }
}

unsigned IoForwarder::poll(unsigned budget_per_queue) {
  unsigned handled = 0;
  for (auto& qp : queues_) flush_waiting(*qp);
  for (auto& qp : queues_) {
    Queue& q = *qp;
    for (unsigned n = 0; n < budget_per_queue; ++n) {
      if (!q.holding && !q.q.fetch(q.held)) break;
      q.holding = true;
      if (!forward(q, q.held)) break;  // the host queue pair is full: keep it for next turn
      q.holding = false;
      ++handled;
    }
  }
  qp_.process_completions(0);
  for (auto& qp : queues_) flush_waiting(*qp);
  for (auto& qp : queues_) {
    if (qp->posted && qp->vector_fd >= 0) {
      const uint64_t one = 1;
      (void)::write(qp->vector_fd, &one, sizeof(one));  // one interrupt per queue per turn
    }
    qp->posted = false;
  }
  return handled;
}

// Every command, refused here or sent, holds a record until its answer is posted: a refusal
// may have to wait for CQ room like any answer.
bool IoForwarder::forward(Queue& q, const wire::Sqe& sqe) {
  if (!free_) return false;
  Command* cmd = free_;
  free_ = cmd->next;
  cmd->queue = &q;
  cmd->app_cid = sqe.cid;
  auto refuse = [&](wire::Status st) {
    wire::Cqe c{};
    c.status = st.to_cqe(true);
    ++stats_.refused;
    answer(q, sqe.cid, c, cmd);
    return true;
  };
  const uint32_t want = data_length(sqe);
  DataSpan span = resolve_data(sqe, data_, data_bytes_, want);
  if (want && qp_.block_size(sqe.nsid) == 0 && sqe.opc != uint8_t(wire::IoOpcode::DatasetManagement))
    span.status = wire::sc::InvalidNamespace;
  if (!span.status.ok()) return refuse(span.status);
  const bool to_controller = sqe.opc & 1;  // NVMe opcodes: bit 0 = host to controller
  const int rc = qp_.submit(sqe, span.data, span.length, to_controller, on_host_completion, cmd);
  if (rc == -EBUSY) {
    cmd->next = free_;
    free_ = cmd;
    return false;
  }
  if (rc != 0) return refuse(rc == -EINVAL ? wire::sc::InvalidField : wire::sc::TransportError);
  ++in_flight_;
  ++stats_.forwarded;
  return true;
}

void IoForwarder::on_host_completion(void* ctx, const host::Completion& c) {
  auto* cmd = static_cast<Command*>(ctx);
  IoForwarder* self = cmd->self;
  --self->in_flight_;
  if (self->closing_) return;
  cmd->cqe = wire::Cqe{};
  cmd->cqe.dw0 = c.dw0;
  cmd->cqe.dw1 = c.dw1;
  cmd->cqe.status = c.status.to_cqe(true);
  self->answer(*cmd->queue, cmd->app_cid, cmd->cqe, cmd);
}

// Posts the answer to cid on q's CQ and frees cmd, or, with no room there (or earlier
// answers still waiting: they keep their order), queues cmd until the application frees
// CQ slots.
void IoForwarder::answer(Queue& q, uint16_t cid, const wire::Cqe& cqe, Command* cmd) {
  if (!q.waiting_head && q.q.cq_space() > 0) {
    wire::Cqe c = cqe;
    c.cid = cid;
    q.q.post(c);
    q.posted = true;
    ++stats_.completed;
    cmd->next = free_;
    free_ = cmd;
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
      q.q.want_cq_notice();
      return;
    }
    q.waiting_head = cmd->next;
    if (!q.waiting_head) q.waiting_tail = nullptr;
    wire::Cqe c = cmd->cqe;
    c.cid = cmd->app_cid;
    q.q.post(c);
    q.posted = true;
    ++stats_.completed;
    cmd->next = free_;
    free_ = cmd;
  }
}

}  // namespace nvtcp::engine

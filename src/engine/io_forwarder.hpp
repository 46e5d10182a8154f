// SPDX-License-Identifier: Apache-2.0
// The engine's data path on one engine core for one remote controller: SQEs fetched from
// applications' shared memory are checked (data pointers against that application's data
// region), sent on a host library queue pair (NVMe/TCP) with the queue pair's own command
// IDs, and answered into the application's CQ with the application's command ID when the
// remote controller answers. Any number of application queues, of any number of
// applications, share one host queue pair; each gets at most a budget of SQEs per turn, so
// a busy queue cannot starve a quiet one. Nothing is allocated per I/O: the per-command
// records come from a pool sized by the host queue pair's depth.
//
// Everything here runs on the engine core's thread; queues are added and removed between
// turns by that thread.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/host_queue.hpp"
#include "engine/io_totals.hpp"
#include "shm/shm_queue.hpp"

namespace nvtcp::engine {

class IoForwarder {
 public:
  struct Queue;
  // What the forwarder tells its owner, from inside poll().
  struct Events {
    virtual ~Events() = default;
    // A queue asked to go by remove_queue() has no command left: it is gone. cq: where its
    // CQ stands (a new SQ on the same CQ goes on from there).
    virtual void on_queue_removed(void* owner, uint16_t qid, shm::EngineQueuePair::CqPosition cq) = 0;
    // A queue stopped for an impossible doorbell value (the CSTS.CFS analog).
    virtual void on_queue_fault(void* owner, uint16_t qid, shm::EngineQueuePair::Fault f) = 0;
  };

  explicit IoForwarder(HostQueue qp, Events* events = nullptr);
  // Waits for every command it sent: the host queue pair answers or fails each (a failed
  // connection fails them as its close completes), and each answer calls back into this
  // object, so none may come after it is gone. (Their answers are dropped.)
  ~IoForwarder();
  IoForwarder(const IoForwarder&) = delete;
  IoForwarder& operator=(const IoForwarder&) = delete;

  // An application I/O queue pair (SQ and CQ with the same id). data/data_bytes: that
  // application's data region as mapped here. vector_fd: the pipe (write end) that interrupts the
  // application when completions were posted in a turn (-1: it polls). owner: the
  // application's tag, handed back in Events.
  Queue* add_queue(void* owner, uint16_t qid, const shm::QueueMemory& m, uint8_t* data, uint64_t data_bytes,
                   int vector_fd = -1, shm::EngineQueuePair::CqPosition cq = {});

  enum class Removal {
    // Delete I/O SQ: SQEs still in the SQ complete with Command Aborted due to SQ
    // Deletion; commands already sent are answered as they finish.
    Delete,
    // The application is gone (or reset its controller): nothing more is written to its
    // queues; commands already sent are waited for and their answers dropped.
    Abandon,
  };
  // Starts taking a queue away; Events::on_queue_removed says when it is gone.
  void remove_queue(Queue* q, Removal how);
  // Interrupt coalescing (feature 08h: aggregation threshold in bits 7:0, 0's based;
  // aggregation time in bits 15:8, 100 us units): the queue's interrupt waits until that
  // many completions were posted or that long has passed since the first one (time 0: no
  // wait).
  void set_coalescing(Queue* q, uint32_t feature_value);
  // The clock coalescing reads (monotonic nanoseconds); tests set one they control.
  using Clock = uint64_t (*)();
  void set_clock(Clock c) { clock_ = c; }

  // One turn: completions the CQs had no room for, then up to budget SQEs per queue, then
  // the host queue pair's completions; interrupts after. Returns commands handled. turn_ns:
  // the caller's clock of this turn (monotonic), which latencies are measured with; without
  // it the forwarder reads its clock once.
  unsigned poll(unsigned budget_per_queue, uint64_t turn_ns);
  unsigned poll(unsigned budget_per_queue = 32) { return poll(budget_per_queue, clock_()); }
  // Before the core sleeps: asks every queue to notify on new SQEs. True when one already
  // has work (then don't sleep).
  bool prepare_to_sleep();
  // After it woke: the queues are polled again, and applications need not notify.
  void resume_polling();

  struct Stats {
    uint64_t forwarded = 0;   // sent to the remote controller
    uint64_t refused = 0;     // answered here (bad data pointer, faulted queue)
    uint64_t completed = 0;   // CQEs posted
    uint64_t dropped = 0;     // answers of abandoned queues
    uint64_t interrupts = 0;  // interrupt signals
    uint64_t refused_opcodes = 0;  // of refused: opcodes not carried (fabrics, reservations, ...)
    IoTotals reads, writes;        // of forwarded, once answered: Read and Write commands
  };
  // Whether an I/O opcode is carried to the remote controller at all (see io_forwarder.cpp).
  static bool carried(uint8_t opc);
  const Stats& stats() const { return stats_; }
  // True when that queue has been stopped for an impossible doorbell (the CSTS.CFS analog).
  bool faulted(const Queue* q) const;
  uint32_t in_flight() const { return in_flight_; }
  size_t queues() const { return queues_.size(); }

 private:
  struct Command;
  static void on_host_completion(void* ctx, const host::Completion& c);
  bool forward(Queue& q, const nvme::Sqe& sqe);  // false: the host queue pair is full
  Command* take(Queue& q);
  void answer(Queue& q, uint16_t cid, const nvme::Cqe& cqe, Command* cmd);
  uint64_t data_length(const nvme::Sqe& sqe) const;
  void flush_waiting(Queue& q);
  void release(Command* cmd);
  void drain_deleted_sq(Queue& q);
  void reap_removed();
  void interrupt(Queue& q);

  HostQueue qp_;
  Events* events_;
  std::vector<std::unique_ptr<Queue>> queues_;
  std::vector<Command> pool_;
  Command* free_ = nullptr;
  uint32_t in_flight_ = 0;
  size_t next_first_ = 0;  // the queue served first this turn (rotates)
  Stats stats_;
  bool closing_ = false;
  Clock clock_;
  uint64_t turn_ns_ = 0;  // this turn's clock (poll)
  bool in_poll_ = false;
};

}  // namespace nvtcp::engine

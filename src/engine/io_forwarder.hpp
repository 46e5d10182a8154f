// The engine's data path for one application's I/O queues: SQEs fetched from shared memory
// are checked (data pointers against the application's data region), sent on a host library
// queue pair (NVMe/TCP) with the queue pair's own command IDs, and answered into the
// application's CQ with the application's command ID when the remote controller answers.
// Any number of application queues share one host queue pair; each gets at most a budget of
// SQEs per turn, so a busy queue cannot starve a quiet one. Nothing is allocated per I/O:
// the per-command records come from a pool sized by the host queue pair's depth.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/shm_queue.hpp"
#include "nvtcp/host.hpp"

namespace nvtcp::engine {

class IoForwarder {
 public:
  // data/data_bytes: the application's data region as mapped here.
  IoForwarder(host::QueuePair& qp, uint8_t* data, uint64_t data_bytes);
  // Waits for the commands it sent: the host queue pair answers or fails each, and each
  // answer calls back into this object. (Their answers are dropped: the queues are going.)
  ~IoForwarder();
  IoForwarder(const IoForwarder&) = delete;
  IoForwarder& operator=(const IoForwarder&) = delete;

  // An application I/O queue pair (SQ and CQ with the same id). vector_fd: the eventfd that
  // interrupts the application when completions were posted in a turn (-1: it polls).
  void add_queue(uint16_t qid, const QueueMemory& m, int vector_fd = -1);

  // One turn: completions the CQs had no room for, then up to budget SQEs per queue, then
  // the host queue pair's completions; interrupts after. Returns commands handled.
  unsigned poll(unsigned budget_per_queue = 32);

  struct Stats {
    uint64_t forwarded = 0;   // sent to the remote controller
    uint64_t refused = 0;     // answered here (bad data pointer, faulted queue)
    uint64_t completed = 0;   // CQEs posted
  };
  const Stats& stats() const { return stats_; }
  // True when that queue has been stopped for an impossible doorbell (the CSTS.CFS analog).
  bool faulted(uint16_t qid) const;
  uint32_t in_flight() const { return in_flight_; }

 private:
  struct Command;
  struct Queue {
    uint16_t qid;
    EngineQueuePair q;
    int vector_fd;
    bool posted = false;     // completions posted this turn (interrupt due)
    wire::Sqe held{};        // fetched, not yet sent (the host queue pair was full)
    bool holding = false;
    // Answers this queue's CQ had no room for, in order. Per queue: an application that
    // stops reading its CQ holds up its own answers only.
    Command* waiting_head = nullptr;
    Command* waiting_tail = nullptr;
  };
  struct Command {
    IoForwarder* self = nullptr;
    Queue* queue = nullptr;
    uint16_t app_cid = 0;
    wire::Cqe cqe{};         // the answer, once it came
    Command* next = nullptr; // free list, or the list of answers waiting for CQ room
  };

  static void on_host_completion(void* ctx, const host::Completion& c);
  bool forward(Queue& q, const wire::Sqe& sqe);  // false: the host queue pair is full
  void answer(Queue& q, uint16_t cid, const wire::Cqe& cqe, Command* cmd);
  uint32_t data_length(const wire::Sqe& sqe) const;
  void flush_waiting(Queue& q);

  host::QueuePair& qp_;
  uint8_t* data_;
  uint64_t data_bytes_;
  std::vector<std::unique_ptr<Queue>> queues_;
  std::vector<Command> pool_;
  Command* free_ = nullptr;
  uint32_t in_flight_ = 0;
  Stats stats_;
  bool closing_ = false;
};

}  // namespace nvtcp::engine

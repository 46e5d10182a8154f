// SPDX-License-Identifier: Apache-2.0
// NVM I/O commands, the part of an I/O queue's CommandQueue that runs them: Read, Write, Write
// Zeroes, Compare, Verify, Copy, Dataset Management, Flush, reservations and fused Compare and
// Write, each as its parse (what it moves, checked before any data), its execute (the device
// operation it starts) and its device completion; the fence writes wait behind while a fused
// pair owns their namespace, and Abort of an I/O command. The queue's core (command_queue.hpp)
// keeps the states, the device leg and the responses; this part calls it directly.
#pragma once
#include <cstdint>
#include <vector>

#include "reactor/reactor.hpp"
#include "target/command.hpp"
#include "target/controller.hpp"
#include "target/io_waits.hpp"
#include "target/qos.hpp"

namespace nvtcp::target {

class CommandQueue;

class IoCommands final : public CommandAborter {
 public:
  explicit IoCommands(CommandQueue& q);
  ~IoCommands() override;
  IoCommands(const IoCommands&) = delete;
  IoCommands& operator=(const IoCommands&) = delete;

  void parse(Command& r);
  void execute(Command& r);
  // What a device answered (r.device_status), by what r was doing.
  void device_done(Command& r);
  // BetweenSteps: Copy and Dataset Management move on one range per reactor turn; AwaitingTurn:
  // a command or step whose turn came runs again.
  void next_step(Command& r);
  // Flush makes durable every write that completed before it arrived (also what Property Set
  // CC.SHN and Set Features 06h turning a cache off wait for).
  void start_flush(Command& r, bool all, bool shutdown_after = false);
  // Fused Compare and Write: the first half is held until the next command arrives.
  bool holds_fused_first() const { return fused_first_ != nullptr; }
  bool fused_halves(Command& r);
  // The held first half (fused_first_) ends with st, unpaired.
  void refuse_fused_first(wire::Status st);
  void start_fused(Command& cmp, Command& wr);
  // Connect made the queue an I/O queue of a controller: its counters (one per namespace),
  // and room for this host's reservation access per namespace.
  void attach(QueueStats* stats, uint32_t max_namespaces);
  // The queue closed: a fused operation that owned its namespace's fence and never reached
  // the device lets go, and so does every write the fence held back.
  void closed();
  // CommandAborter: a command that waits ends now; a Dataset Management, Copy or Flush stops at
  // its next step.
  bool abort_command(uint16_t cid) override;
  // IoWaits: r's line woke it (still in its wait state). True: it left the line (it went on
  // with the slice's budget, or ended because it may no longer run); false: it stays.
  bool resume_from_qos(Command& r, Namespace& ns, uint64_t now_ns);
  void resume_from_fence(Command& r);


 private:
  using State = Command::State;
  using Status = wire::Status;
  Controller& ctrl() const;
  // The checks every I/O command passes before it runs: its queue's controller is alive and
  // enabled. False when r was ended (or the queue closed).
  bool io_allowed(Command& r);
  // The admission check, the same at parse and whenever a command resumes from a wait (the
  // table of waits is in io_waits.hpp): the namespace r names as this host sees it, its path's
  // ANA state and the reservation for r's groups. Success with ns (nullptr: a Flush of every
  // namespace), or the status r ends with.
  Status admission(const Command& r, Namespace*& ns);
  // On resume: io_allowed(), admission(), the namespace still the one r holds, and no Preempt
  // and Abort of its host since parse. readmission() only checks (it may close the queue);
  // readmitted() ends r (Running) with what it found. False: r was ended, or the queue closes.
  Status readmission(Command& r);
  bool readmitted(Command& r);
  bool flush_admitted(Command& r, bool all, Namespace& ns);
  // r (Running, in no wait line) ends with st and lets go of the fence it waits for or owns; a
  // fused half ends its pair. resumed: it ends as it resumes from a wait (logged at debug).
  void end_command(Command& r, Status st, bool resumed = false);

  wire::Status block_range(const wire::Sqe& sqe, const Namespace& ns, bool bounded_by_mdts, uint64_t& len) const;
  void execute_copy(Command& r, Namespace& ns);
  void execute_dsm(Command& r, Namespace& ns);
  void execute_reservation(Command& r, Namespace& ns);
  void finish_reservation(Command& r, Status st, uint64_t durable_ticket);
  void drain_fence(Command& r);
  // The steps of Copy, Dataset Management and Flush: one device operation each.
  void copy_step(Command& r);
  void copy_done(Command& r);
  void dsm_step(Command& r);
  void flush_step(Command& r);
  void run_fused(Command& cmp);
  void fused_done(Command& r);
  void end_fused(Command& cmp, wire::Status cmp_st, wire::Status wr_st);
  // A device operation of r: through its namespace's rate limits (reads and writes), then a
  // write (or a fused pair) through its fence, to the device; held where either says wait.
  void submit(Command& r, Namespace& ns);
  void submit_past_qos(Command& r, Namespace& ns);
  void wait_for_fence(Command& r);
  void wait_for_qos(Command& r, Namespace& ns);
  bool abort_fused_half(Command& r);

  CommandQueue& q_;
  QueueStats* stats_ = nullptr;  // this queue's counters, one per namespace
  // This host's reservation access per namespace (by Namespace::index), made at Connect.
  std::vector<Reservations::AccessCache> resv_cache_;
  IoWaits waits_;  // the lines its commands wait in (rate limit, fence)
  Command* fused_first_ = nullptr;  // a fused first half waiting for its second
};

}  // namespace nvtcp::target

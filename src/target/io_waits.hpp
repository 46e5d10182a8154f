// SPDX-License-Identifier: Apache-2.0
// The lines an I/O queue's commands wait in, and the timers that look at them again: the rate
// limit's line (first come, first served, looked at each 1 ms slice) and the write fence's list
// (looked at every 20 us). A line holds commands and nothing else: it never changes a command's
// state, and a command it wakes goes back to IoCommands, which checks it again before it runs.
//
// Every place an I/O command can wait, who wakes it, what it is checked against when it
// resumes, and how Abort and the queue's end finish it. Whatever it waited for, it resumes
// through IoCommands::readmitted(): the checks of parse again (controller alive and enabled, the
// namespace it holds still the one at its NSID and visible to its host, the path's ANA state,
// the reservation for its groups, and no Preempt and Abort of its host since it was parsed).
//
// | wait (state)                  | woken by                      | on resume          | Abort                          | queue ends             |
// |-------------------------------|-------------------------------|--------------------|--------------------------------|------------------------|
// | memory, turn, host data       | the transport (TcpQueue)      | execute(): readmit | the transport ends it          | the transport's pool   |
// | AwaitingQos                   | the rate line, each 1 ms      | readmit, then pay  | leaves the line, ends now      | line dropped           |
// | AwaitingFence (write)         | the fence list, every 20 us   | readmit            | leaves the list, stops waiting | stops waiting          |
// | AwaitingFence (fused Compare) | the fence list                | readmit            | pair ends, fence let go        | fence let go           |
// | AwaitingFence (Preempt+Abort) | the fence list                | nothing (made)     | not abortable (change is made) | fence let go           |
// | AwaitingFusedPartner (first)  | its second half's capsule     | start_fused checks | it ends (Abort Requested)      | dropped                |
// | AwaitingFusedPartner (Write)  | its Compare's device answer   | readmit the pair   | pair ends before the write     | with its Compare       |
// | InDevice                      | the device                    | next step: readmit | Copy, DSM, Flush: next step    | gate: device finishes  |
// | BetweenSteps                  | a no-op on the next turn      | readmit            | at the next step               | gate                   |
// | AwaitingTurn (reactor budget) | its reactor's line, next turn | readmit            | ends when woken (holds nothing)| gate                   |
// | AwaitingDurable (reservation) | durable_timer_ (CommandQueue) | nothing to run     | not abortable (change is made) | dropped                |
//
// A command on the device is not taken back: a single Read or Write there ends as the device
// answers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "reactor/clock.hpp"
#include "reactor/reactor.hpp"
#include "target/command.hpp"

namespace nvtcp::target {

class IoCommands;
struct Namespace;

class IoWaits {
 public:
  // closing: the queue's flag (QueueLink::closing): once set, nothing is woken any more.
  IoWaits(IoCommands& io, reactor::Reactor& reactor, const reactor::Clock& clock, const bool& closing);
  ~IoWaits();
  IoWaits(const IoWaits&) = delete;
  IoWaits& operator=(const IoWaits&) = delete;

  // Others of this queue wait for their slice: a new command goes behind them.
  bool rate_line_busy() const { return rate_first_ < rate_.size(); }
  void wait_for_slice(Command& r, Namespace& ns);
  void wait_for_fence(Command& r);
  // r (AwaitingQos or AwaitingFence) leaves its line: true if it was there.
  bool leave(Command& r);
  // The queue ends: the timers stop and every waiting command lets go of what it holds.
  void drop_all();
  // r runs no more (its queue closes): the fence it owns (a fused Compare, a Preempt and Abort)
  // or waits for (a write) is let go.
  static void let_go(Command& r);

 private:
  static void on_rate_timer(reactor::Timer* t);
  static void on_fence_timer(reactor::Timer* t);

  IoCommands& io_;
  reactor::Reactor& reactor_;
  const reactor::Clock& clock_;
  const bool& closing_;
  struct Timer : reactor::Timer {
    IoWaits* owner = nullptr;
  } rate_timer_, fence_timer_;
  struct InLine {
    Command* r;  // nullptr: aborted while it waited (a gap the line skips)
    Namespace* ns;
  };
  std::vector<InLine> rate_;  // in arrival order: the first goes first
  size_t rate_first_ = 0;     // rate_ before this have gone
  std::vector<Command*> fence_;
};

}  // namespace nvtcp::target

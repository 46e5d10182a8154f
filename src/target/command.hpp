// SPDX-License-Identifier: Apache-2.0
// One command as the command layer runs it, what nvmet's nvmet_req is: what the host asked
// for, the data it moves, its namespace, its device operation, the scratch state of a command
// that runs in steps or waits, and the state it is in. A transport embeds it in a request of
// its own (TcpRequest, tcp_request.hpp), which carries the PDUs; the command layer sees only
// this part.
//
// A command's state is the command layer's alone: Idle while the transport holds it (before
// execute() and after complete()), Running inside a handler, or one of the waits below.
// CommandQueue::set_state changes it, checks the move and counts it.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <variant>

#include "backend/block_device.hpp"
#include "reactor/reactor.hpp"
#include "util/state_machine.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::target {

class CommandQueue;
struct Namespace;

struct Command {
  enum class State : uint8_t {
    Idle,                  // the transport holds it: not executed yet, or completed
    Running,               // in a command handler (never held here: a handler moves it on before it returns)
    AwaitingFusedPartner,  // a fused Compare waiting for the Write that must follow it
    AwaitingFence,         // a write held while a fused Compare and Write owns its namespace, or such a
                           // pair (or a Preempt and Abort) waiting to own the fence or for the writes
                           // in flight to drain
    InDevice,              // a device operation of it is running
    OnWorker,              // its CPU-heavy part (a DH-HMAC-CHAP exponentiation) runs on a worker thread
    BetweenSteps,          // Copy, Dataset Management: the next range starts on a later reactor turn
    AwaitingDurable,       // a reservation change waiting for its state file to be on disk
    HeldAer,               // an Asynchronous Event Request waiting for an event
    HeldAbort,             // an Abort waiting for the I/O queue's answer
    AwaitingQos,           // its device operation waits for its namespace's rate limit (bdev_set_qos_limit)
    AwaitingTurn,          // its device operation waits for a turn of its reactor with room in the
                           // budget of work per turn (ReactorCommands::take_turn)
    kCount
  };
  static constexpr size_t kStateCount = size_t(State::kCount);

  // Changed only by CommandQueue::set_state, which checks the move and counts it. (TcpRequest
  // has a state() of its own, the transport's: on a TcpRequest, state() is that one.)
  State state() const { return state_; }

  // The data a command moves, as its parse declared it (CommandQueue::parse).
  enum class Direction : uint8_t { None, HostToController, ControllerToHost };
  struct Transfer {
    Direction dir = Direction::None;
    uint32_t len = 0;     // bytes the host sends (HostToController) or at most receives
    uint32_t buffer = 0;  // bytes of buffer the command needs before it runs (0: none; a
                          // HostToController transfer then receives its data into nothing)
  };

  // Per-command scratch state, one alternative per command that runs in steps or waits.
  struct FlushSteps {          // Flush; Property Set CC.SHN; Set Features 06h turning a cache off
    uint32_t next = 0;         // the NSID flushed last (0: none yet)
    bool all = false;          // every namespace, not just sqe.nsid
    bool shutdown_after = false;  // Property Set CC.SHN: report the shutdown complete at the end
  };
  struct DsmSteps {
    uint32_t next = 0;   // next range to deallocate
    uint64_t bytes = 0;  // deallocated so far (IoMetrics::unmap_done)
  };
  struct CopySteps {
    uint32_t next = 0;     // the source range being copied
    uint64_t dst = 0;      // where it goes (LBA)
    uint64_t done = 0;     // bytes of range `next` copied so far
    bool writing = false;  // the device is writing the piece (else reading it)
    uint64_t bytes = 0;    // written at the destination so far (IoMetrics::copy_done)
  };
  struct FusedHalf {
    Command* partner = nullptr;  // the other half of a fused Compare and Write
  };
  struct DurableWait {
    uint64_t ticket = 0;  // the reservation state write it waits for (Reservations::written)
  };
  struct FenceDrain {            // a Preempt and Abort waiting for the writes in flight to end
    uint64_t durable_ticket = 0;  // then its state's write, if persistence is on
  };
  using Steps = std::variant<std::monostate, FlushSteps, DsmSteps, CopySteps, FusedHalf, DurableWait, FenceDrain>;

  // A new command from the submission queue (its sqe is copied in next): everything but the
  // buffer starts over.
  void start(uint64_t arrived) {
    status = wire::Status{};
    dw0 = dw1 = 0;
    xfer = {};
    capsule_len = 0;
    ns = nullptr;
    waited = false;
    aborted = false;
    tx_data = nullptr;
    tx_len = tx_pad = 0;
    fence_counted = fence_owner = false;
    qos_admitted = false;
    turn_granted = false;
    pieces = {};
    resv_abort_epoch = 0;
    close_queue_after = false;
    steps = std::monostate{};
    arrived_ns = arrived;
  }

  // Sqe is packed (alignment 1), yet its fields are bound to references (fmt's arguments):
  // aligned here, each dword field sits on its natural boundary.
  alignas(8) wire::Sqe sqe{};
  wire::Status status;
  uint32_t dw0 = 0, dw1 = 0;      // the completion's command-specific dwords
  Transfer xfer;
  uint32_t capsule_len = 0;       // host data that came in the capsule
  // The command's data buffer, the transport's memory: at least xfer.buffer bytes (4 KiB
  // aligned, for O_DIRECT) once the command runs, and the host's data in it.
  uint8_t* buf = nullptr;
  uint32_t buf_cap = 0;
  // I/O commands: the namespace parse found (nullptr: none, or every one for a Flush; held in
  // its NamespaceHolds until the transport releases the command, see
  // CommandQueue::hold_namespace), and whether time passed between parse and execute (the
  // command waited for memory, its turn or its data), so that execute checks the controller
  // and reservations again.
  Namespace* ns = nullptr;
  bool waited = false;
  bool aborted = false;           // Abort: ends with Command Abort Requested at its next step
  uint64_t arrived_ns = 0;        // the reactor turn its capsule came in (its latency's start)
  const uint8_t* tx_data = nullptr;  // controller->host data to send
  uint32_t tx_len = 0;
  uint32_t tx_pad = 0;               // zero bytes sent after tx_data (a log page's end)
  wire::Cqe cqe{};                   // its completion, built as it completes
  bool close_queue_after = false;    // Disconnect, a failed authentication: the queue closes
                                     // once this response has left

  backend::BlockIo io;
  wire::Status device_status;     // what the device answered
  uint32_t ns_index = 0;          // the namespace's Namespace::index (its counters)
  // Writes count in their namespace's WriteFence while on the device; a fused Compare and
  // Write owns the fence instead. fence_ns: the namespace a command waits on or counts in.
  Namespace* fence_ns = nullptr;
  bool fence_counted = false;
  bool fence_owner = false;
  bool fence_waiting = false;       // a write the fence held back, registered as waiting
  bool qos_admitted = false;        // a fused pair: both halves passed the rate limit at once
  bool turn_granted = false;        // AwaitingTurn: its reactor's line woke it, its cost taken
  // InDevice on a device that copies on the reactor: a Read or Write larger than a piece goes
  // to the device a piece at a time (CommandQueue::start_device), io holding the piece; here
  // the whole operation, and how much of it is done.
  struct DevicePieces {
    uint64_t offset = 0, length = 0, done = 0;  // length 0: in one go
    uint8_t* buffer = nullptr;
    Namespace* ns = nullptr;
  } pieces;
  uint64_t resv_abort_epoch = 0;    // its namespace's Preempt and Abort epoch when it was parsed
  Steps steps;
  // BetweenSteps: the no-op whose completion starts the next range; AwaitingTurn: what its
  // reactor's line runs when it has room.
  reactor::OwnedCompletion<Command> next_step;
  CommandQueue* queue = nullptr;  // whose device, step and worker completions these are

  FusedHalf* fused() { return std::get_if<FusedHalf>(&steps); }
  bool is_fused() const { return std::holds_alternative<FusedHalf>(steps); }

 private:
  friend class CommandQueue;
  State state_ = State::Idle;
};

const char* command_state_name(Command::State s);

// How many commands are in each Command::State, and how many times they entered each: where
// they went, and how often they waited (for the fence, the device...) over a run.
using CommandStateCounts = std::array<uint32_t, Command::kStateCount>;
using CommandStateEntries = std::array<uint64_t, Command::kStateCount>;

// The moves a command makes.
inline constexpr TransitionTable<Command::State, Command::kStateCount> kCommandTransitions{
    {Command::State::Idle, Command::State::Running},                   // executed
    {Command::State::Running, Command::State::Idle},                   // completed, or it needs a larger buffer
    {Command::State::Running, Command::State::AwaitingFusedPartner},
    {Command::State::Running, Command::State::AwaitingFence},
    {Command::State::Running, Command::State::InDevice},
    {Command::State::Running, Command::State::OnWorker},
    {Command::State::Running, Command::State::BetweenSteps},
    {Command::State::Running, Command::State::AwaitingDurable},
    {Command::State::Running, Command::State::HeldAer},
    {Command::State::Running, Command::State::HeldAbort},
    {Command::State::Running, Command::State::AwaitingQos},
    {Command::State::Running, Command::State::AwaitingTurn},
    {Command::State::AwaitingQos, Command::State::Running},           // the next slice's budget
    {Command::State::AwaitingTurn, Command::State::Running},          // a later turn had room
    {Command::State::AwaitingFusedPartner, Command::State::Running},  // its Write came, or another command
    {Command::State::AwaitingFence, Command::State::Running},
    {Command::State::InDevice, Command::State::Running},              // the device answered
    {Command::State::OnWorker, Command::State::Running},              // the worker's part is back
    {Command::State::BetweenSteps, Command::State::Running},
    {Command::State::AwaitingDurable, Command::State::Running},
    {Command::State::HeldAer, Command::State::Idle},                  // its event came, or it was aborted
    {Command::State::HeldAbort, Command::State::Idle},                // the I/O queue answered
};

}  // namespace nvtcp::target

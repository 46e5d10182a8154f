// SPDX-License-Identifier: Apache-2.0
// The host's time-based decisions, apart from sockets and threads: each takes the time as an
// argument, so a unit test steps a reactor::FakeClock through them instead of sleeping. QueuePairImpl
// and the controller's admin thread ask these and act on the answers.
#pragma once
#include <cstdint>

namespace nvtcp::host::detail {

inline constexpr uint64_t kNsPerMs = 1'000'000;

// One outage of a connection, from its loss to the next association: when to give up
// (ctrl_loss_tmo), when to stop holding I/O (fast_io_fail_tmo), when to try again
// (reconnect_delay). Both the I/O queues and the controller's recovery follow it.
class Outage {
 public:
  struct Limits {
    uint32_t ctrl_loss_tmo_ms = 0;
    int32_t fast_io_fail_tmo_ms = -1;  // -1: off (held I/O waits for ctrl_loss_tmo)
    uint32_t reconnect_delay_ms = 2000;
  };
  explicit Outage(Limits l) : l_(l) {}

  // The connection, or a reconnect attempt, was lost at now. The outage dates from its first
  // loss; the next attempt comes a reconnect delay after the latest one.
  void lost(uint64_t now) {
    if (!lost_ns_) lost_ns_ = now ? now : 1;  // 0 means "no outage"
    next_attempt_ns_ = now + uint64_t(l_.reconnect_delay_ms) * kNsPerMs;
  }
  // A new association is up, or the queue is given up: the next loss starts a new outage.
  void ended() {
    lost_ns_ = 0;
    fast_failing_ = false;
  }
  bool ongoing() const { return lost_ns_ != 0; }
  uint64_t elapsed_ms(uint64_t now) const { return ongoing() ? (now - lost_ns_) / kNsPerMs : 0; }
  // ctrl_loss_tmo has passed: the controller is lost for good.
  bool ctrl_loss_passed(uint64_t now) const {
    return ongoing() && now - lost_ns_ >= uint64_t(l_.ctrl_loss_tmo_ms) * kNsPerMs;
  }
  // True once per outage, when fast_io_fail_tmo has passed: held I/O fails now, new I/O is
  // refused until the next association (fast_failing()).
  bool fast_io_fail_due(uint64_t now) {
    if (!ongoing() || l_.fast_io_fail_tmo_ms < 0 || fast_failing_) return false;
    if (now - lost_ns_ < uint64_t(l_.fast_io_fail_tmo_ms) * kNsPerMs) return false;
    fast_failing_ = true;
    return true;
  }
  bool fast_failing() const { return fast_failing_; }
  // Whether a reconnect attempt may start now; yes also puts the next one a delay later.
  bool attempt_due(uint64_t now) {
    if (now < next_attempt_ns_) return false;
    next_attempt_ns_ = now + uint64_t(l_.reconnect_delay_ms) * kNsPerMs;
    return true;
  }

 private:
  Limits l_;
  uint64_t lost_ns_ = 0;
  uint64_t next_attempt_ns_ = 0;
  bool fast_failing_ = false;
};

// What a command on the wire for a long time needs next. After io_timeout the controller is
// asked to abort it (when there is an admin queue to ask); if it still has not completed
// io_timeout after that, the connection can no longer be trusted and is reset.
enum class TimeoutStep : uint8_t { None, Abort, Reset };
struct CommandTimes {
  uint64_t sent_ns = 0;
  bool abort_sent = false;
  uint64_t abort_ns = 0;
};
TimeoutStep command_timeout_step(const CommandTimes& c, uint64_t now, uint64_t limit_ns, bool can_abort);

// How often Keep Alive goes out: as configured, else at half the timeout so one late packet is
// no loss; never 0 (a timer of 0 would spin).
uint64_t keep_alive_interval_ms(uint32_t kato_ms, uint32_t configured_ms);

// How long a normal shutdown (CC.SHN) may take before the host stops waiting for CSTS.SHST:
// RTD3E (microseconds, Identify Controller) when the controller reports it, else CAP.TO; at
// least kMinShutdownWaitMs (a controller that reports 0 still needs a round trip or two), at
// most kMaxShutdownWaitMs (the destructor must not block an application for long: Linux caps
// its shutdown wait the same way).
inline constexpr uint32_t kMinShutdownWaitMs = 500;
inline constexpr uint32_t kMaxShutdownWaitMs = 10'000;
uint32_t shutdown_timeout_ms(uint32_t rtd3e_us, uint64_t cap);

}  // namespace nvtcp::host::detail

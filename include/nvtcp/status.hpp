// SPDX-License-Identifier: Apache-2.0
// NVMe completion status: status code type (SCT) + status code (SC), with names.
#pragma once
#include <cstdint>
#include <string>

namespace nvtcp::nvme {

enum class Sct : uint8_t { Generic = 0, CommandSpecific = 1, Media = 2, Path = 3, Vendor = 7 };

// A status as (SCT << 8) | SC, the form the CQE status field holds shifted left by one.
struct Status {
  uint16_t value = 0;

  constexpr Status() = default;
  constexpr Status(Sct sct, uint8_t sc) : value(static_cast<uint16_t>((uint16_t(sct) << 8) | sc)) {}
  static constexpr Status from_cqe(uint16_t cqe_status) {
    Status s;
    s.value = static_cast<uint16_t>((cqe_status >> 1) & 0x7FF);
    return s;
  }
  constexpr Sct sct() const { return static_cast<Sct>((value >> 8) & 0x7); }
  constexpr uint8_t sc() const { return value & 0xFF; }
  constexpr bool ok() const { return value == 0; }
  // The CQE status field; DNR set for errors a retry cannot fix.
  constexpr uint16_t to_cqe(bool dnr = true) const {
    uint16_t v = static_cast<uint16_t>(value << 1);
    // Do Not Retry, except for errors a retry can cure: a transient transport error, and the
    // ANA path statuses (SCT 3h, SC 01h-03h), which another path or a later try may serve
    // (Linux fails a multipath command over only without DNR). The host-side pathing codes
    // keep DNR: they are given once the host library has given up on the path.
    const bool ana = sct() == Sct::Path && sc() >= 0x01 && sc() <= 0x03;
    if (value != 0 && dnr && value != 0x22 && !ana) v |= 0x8000;
    return v;
  }
  constexpr bool operator==(const Status&) const = default;
};

namespace sc {
inline constexpr Status Success{Sct::Generic, 0x00};
inline constexpr Status InvalidOpcode{Sct::Generic, 0x01};
inline constexpr Status InvalidField{Sct::Generic, 0x02};
inline constexpr Status CidConflict{Sct::Generic, 0x03};
inline constexpr Status DataTransferError{Sct::Generic, 0x04};
inline constexpr Status InternalError{Sct::Generic, 0x06};
inline constexpr Status AbortRequested{Sct::Generic, 0x07};
inline constexpr Status SqDeletion{Sct::Generic, 0x08};
inline constexpr Status FailedFusedCommand{Sct::Generic, 0x09};
inline constexpr Status MissingFusedCommand{Sct::Generic, 0x0A};
inline constexpr Status InvalidNamespace{Sct::Generic, 0x0B};
inline constexpr Status CommandSequenceError{Sct::Generic, 0x0C};
inline constexpr Status InvalidSglSegment{Sct::Generic, 0x0D};
inline constexpr Status DataSglLengthInvalid{Sct::Generic, 0x0F};
inline constexpr Status SglDescriptorTypeInvalid{Sct::Generic, 0x11};
inline constexpr Status SglOffsetInvalid{Sct::Generic, 0x16};
inline constexpr Status HostIdInconsistentFormat{Sct::Generic, 0x18};
inline constexpr Status KeepAliveExpired{Sct::Generic, 0x19};
inline constexpr Status AbortedPreempt{Sct::Generic, 0x1B};  // Command Aborted due to Preempt and Abort
inline constexpr Status TransientTransportError{Sct::Generic, 0x22};
inline constexpr Status LbaOutOfRange{Sct::Generic, 0x80};
inline constexpr Status NamespaceNotReady{Sct::Generic, 0x82};
inline constexpr Status CompletionQueueInvalid{Sct::CommandSpecific, 0x00};
inline constexpr Status InvalidQueueIdentifier{Sct::CommandSpecific, 0x01};
inline constexpr Status InvalidQueueSize{Sct::CommandSpecific, 0x02};
inline constexpr Status AbortLimitExceeded{Sct::CommandSpecific, 0x03};
inline constexpr Status AerLimitExceeded{Sct::CommandSpecific, 0x05};
inline constexpr Status InvalidInterruptVector{Sct::CommandSpecific, 0x08};
inline constexpr Status InvalidLogPage{Sct::CommandSpecific, 0x09};
inline constexpr Status InvalidQueueDeletion{Sct::CommandSpecific, 0x0C};
inline constexpr Status FeatureNotSaveable{Sct::CommandSpecific, 0x0D};
inline constexpr Status ConnectIncompatibleFormat{Sct::CommandSpecific, 0x80};
inline constexpr Status ConnectControllerBusy{Sct::CommandSpecific, 0x81};
inline constexpr Status ConnectInvalidParameters{Sct::CommandSpecific, 0x82};
inline constexpr Status ConnectInvalidHost{Sct::CommandSpecific, 0x84};
// A queue that must authenticate (Connect said so, ATR) answers everything but Authentication
// Send/Receive with this until it has.
inline constexpr Status AuthenticationRequired{Sct::CommandSpecific, 0x91};
inline constexpr Status WriteFault{Sct::Media, 0x80};
inline constexpr Status UnrecoveredReadError{Sct::Media, 0x81};
inline constexpr Status CompareFailure{Sct::Media, 0x85};
inline constexpr Status CommandSizeLimitExceeded{Sct::CommandSpecific, 0x83};
inline constexpr Status ReservationConflict{Sct::Generic, 0x83};
// Path related: the namespace's ANA group is not reachable through this controller's port
// (persistent loss, inaccessible, in transition). DNR stays clear: another path may serve it.
// Internal Path Error: the controller cannot reach what serves the namespace through this path
// (a gateway that lost its storage cluster); another path may.
inline constexpr Status InternalPathError{Sct::Path, 0x00};
inline constexpr Status AnaPersistentLoss{Sct::Path, 0x01};
inline constexpr Status AnaInaccessible{Sct::Path, 0x02};
inline constexpr Status AnaTransition{Sct::Path, 0x03};
// Host-side only: the transport failed before the target answered (path-related, SCT 3,
// Host Pathing Error), and the host gave up on a command that timed out (Command Aborted
// By Host).
inline constexpr Status TransportError{Sct::Path, 0x70};
inline constexpr Status HostAbortedCommand{Sct::Path, 0x71};
}  // namespace sc

// "Invalid Field in Command (SCT 0h / SC 02h)"
std::string status_name(Status s);

}  // namespace nvtcp::nvme

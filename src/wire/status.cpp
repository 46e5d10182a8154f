// SPDX-License-Identifier: Apache-2.0
#include "nvtcp/status.hpp"

#include <fmt/format.h>

namespace nvtcp::nvme {

namespace {
const char* known_name(Status s) {
  switch (s.value) {
    case sc::Success.value: return "Success";
    case sc::InvalidOpcode.value: return "Invalid Command Opcode";
    case sc::InvalidField.value: return "Invalid Field in Command";
    case sc::CidConflict.value: return "Command ID Conflict";
    case sc::DataTransferError.value: return "Data Transfer Error";
    case sc::InternalError.value: return "Internal Error";
    case sc::AbortRequested.value: return "Command Abort Requested";
    case sc::SqDeletion.value: return "Command Aborted due to SQ Deletion";
    case sc::FailedFusedCommand.value: return "Command Aborted due to Failed Fused Command";
    case sc::MissingFusedCommand.value: return "Command Aborted due to Missing Fused Command";
    case sc::InvalidNamespace.value: return "Invalid Namespace or Format";
    case sc::CommandSequenceError.value: return "Command Sequence Error";
    case sc::InvalidSglSegment.value: return "Invalid SGL Segment Descriptor";
    case sc::DataSglLengthInvalid.value: return "Data SGL Length Invalid";
    case sc::SglDescriptorTypeInvalid.value: return "SGL Descriptor Type Invalid";
    case sc::SglOffsetInvalid.value: return "SGL Offset Invalid";
    case sc::HostIdInconsistentFormat.value: return "Host Identifier Inconsistent Format";
    case sc::KeepAliveExpired.value: return "Keep Alive Timer Expired";
    case sc::AbortedPreempt.value: return "Command Aborted due to Preempt and Abort";
    case sc::TransientTransportError.value: return "Transient Transport Error";
    case sc::LbaOutOfRange.value: return "LBA Out of Range";
    case sc::NamespaceNotReady.value: return "Namespace Not Ready";
    case sc::CompletionQueueInvalid.value: return "Completion Queue Invalid";
    case sc::InvalidQueueIdentifier.value: return "Invalid Queue Identifier";
    case sc::InvalidQueueSize.value: return "Invalid Queue Size";
    case sc::AbortLimitExceeded.value: return "Abort Command Limit Exceeded";
    case sc::AerLimitExceeded.value: return "Asynchronous Event Request Limit Exceeded";
    case sc::InvalidInterruptVector.value: return "Invalid Interrupt Vector";
    case sc::InvalidLogPage.value: return "Invalid Log Page";
    case sc::InvalidQueueDeletion.value: return "Invalid Queue Deletion";
    case sc::FeatureNotSaveable.value: return "Feature Identifier Not Saveable";
    case sc::ConnectIncompatibleFormat.value: return "Connect Incompatible Format";
    case sc::ConnectControllerBusy.value: return "Connect Controller Busy";
    case sc::ConnectInvalidParameters.value: return "Connect Invalid Parameters";
    case sc::ConnectInvalidHost.value: return "Connect Invalid Host";
    case sc::AuthenticationRequired.value: return "Authentication Required";
    case sc::WriteFault.value: return "Write Fault";
    case sc::UnrecoveredReadError.value: return "Unrecovered Read Error";
    case sc::CompareFailure.value: return "Compare Failure";
    case sc::CommandSizeLimitExceeded.value: return "Command Size Limit Exceeded";
    case sc::ReservationConflict.value: return "Reservation Conflict";
    case sc::InternalPathError.value: return "Internal Path Error";
    case sc::AnaPersistentLoss.value: return "Asymmetric Access Persistent Loss";
    case sc::AnaInaccessible.value: return "Asymmetric Access Inaccessible";
    case sc::AnaTransition.value: return "Asymmetric Access Transition";
    case sc::TransportError.value: return "Transport Error (host)";
    case sc::HostAbortedCommand.value: return "Command Aborted By Host";
    default: return nullptr;
  }
}
}  // namespace

std::string status_name(Status s) {
  const char* n = known_name(s);
  return fmt::format("{} (SCT {:x}h / SC {:02x}h)", n ? n : "Unknown Status", unsigned(s.sct()), s.sc());
}

}  // namespace nvtcp::nvme

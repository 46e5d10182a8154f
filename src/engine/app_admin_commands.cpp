// SPDX-License-Identifier: Apache-2.0
#include "engine/app_admin_commands.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "engine/app_controller.hpp"
#include "nvtcp/identify.hpp"
#include "shm/region.hpp"
#include "util/log.hpp"
#include "wire/fabrics.hpp"
#include "wire/features.hpp"

namespace nvtcp::engine {

using nvme::AdminOpcode;
using nvme::Sqe;
using nvme::Status;
namespace sc = nvme::sc;

namespace {
constexpr uint32_t kMaxAdminTransfer = 1u << 20;
constexpr uint32_t kIdentifyBytes = 4096;
constexpr uint32_t kOacsDoorbellBufferConfig = 1u << 8;
constexpr uint8_t kFeatureInterruptCoalescing = 0x08;

using shm::detail::store_release;
}  // namespace

void AppAdminCommands::reset_features(uint32_t io_queues_max) {
  io_queues_granted_ = io_queues_max;
  queues_requested_ = false;
  coalescing_ = 0;
  async_event_config_ = 0;
}

// Whatever a command's execution throws (an allocation, say) fails that command alone; an
// exception never reaches the engine's loop, which serves every other application.
void AppAdminCommands::execute_guarded(const Sqe& sqe) {
  try {
    execute(sqe);
  } catch (const std::exception& e) {
    log::warn("engine: {}: admin opcode {:02x}h failed: {}", app_.name(), sqe.opc, e.what());
    try {
      app_.complete(sqe.cid, sc::InternalError);
    } catch (const std::exception&) {
      app_.fatal("no memory to answer an admin command");
    }
  }
}

void AppAdminCommands::execute(const Sqe& sqe) {
  if (sqe.flags & nvme::kSqeFlagsFuseMask) return app_.complete(sqe.cid, sc::InvalidField);
  switch (static_cast<AdminOpcode>(sqe.opc)) {
    case AdminOpcode::Identify: return identify(sqe);
    case AdminOpcode::GetLogPage: return get_log_page(sqe);
    case AdminOpcode::GetFeatures: return features(sqe, false);
    case AdminOpcode::SetFeatures: return features(sqe, true);
    case AdminOpcode::AsyncEventRequest:
      // Held until there is an event to report; a reset drops them.
      if (app_.held_aers_.size() >= AppController::kAerLimit) return app_.complete(sqe.cid, sc::AerLimitExceeded);
      app_.held_aers_.push_back(sqe.cid);
      return app_.deliver_events();
    case AdminOpcode::KeepAlive: return app_.complete(sqe.cid, sc::Success);
    case AdminOpcode::Abort: return app_.complete(sqe.cid, sc::Success, 1);  // dw0 bit 0: not aborted
    case AdminOpcode::DoorbellBufferConfig: return app_.complete(sqe.cid, sc::Success);
    case AdminOpcode::CreateIoCq: return create_cq(sqe);
    case AdminOpcode::CreateIoSq: return create_sq(sqe);
    case AdminOpcode::DeleteIoSq: return delete_sq(sqe);
    case AdminOpcode::DeleteIoCq: return delete_cq(sqe);
    default:
      // Fabrics (7Fh), Namespace Management/Attachment, Format NVM, Sanitize, Firmware,
      // Directive Send, Security Send, ...: not this controller's to send to the shared one.
      log::debug("engine: {}: admin opcode {:02x}h is not supported", app_.name(), sqe.opc);
      return app_.complete(sqe.cid, sc::InvalidOpcode);
  }
}

void AppAdminCommands::identify(const Sqe& sqe) {
  Status st;
  uint8_t* out = admin_data(sqe, kIdentifyBytes, st);
  if (!st.ok()) return app_.complete(sqe.cid, st);
  if ((sqe.cdw10 & 0xFF) != 0x01) return forward(sqe, kIdentifyBytes, false);
  // The remote controller's structure, as a controller with memory queues shows it: this
  // controller's ID, SGL data blocks, Doorbell Buffer Config among the optional admin
  // commands (the only one here), no keep-alive, and no fabrics attributes.
  bounce_.assign(app_.backend_.remote_identify(), app_.backend_.remote_identify() + kIdentifyBytes);
  auto* id = reinterpret_cast<nvme::IdentifyController*>(bounce_.data());
  id->cntlid = app_.cntlid_;
  id->cntrltype = 1;  // I/O controller
  id->oacs = kOacsDoorbellBufferConfig;
  id->aerl = AppController::kAerLimit - 1;
  id->oaes = wire::kAecNamespaceAttribute;  // the only event passed on (see the header)
  id->acl = 3;
  id->kas = 0;
  id->maxcmd = 0;
  id->sgls = 1;       // SGLs supported, no alignment requirement
  std::memset(bounce_.data() + 1792, 0, 256);  // NVMe over Fabrics attributes: none here
  std::memcpy(out, bounce_.data(), kIdentifyBytes);
  app_.complete(sqe.cid, sc::Success);
}

void AppAdminCommands::get_log_page(const Sqe& sqe) {
  const uint8_t lid = uint8_t(sqe.cdw10);
  const uint32_t lsp = (sqe.cdw10 >> 8) & 0x7F;
  const uint64_t numd = (uint64_t(sqe.cdw10 >> 16) | (uint64_t(sqe.cdw11 & 0xFFFF) << 16)) + 1;
  if (numd * 4 > kMaxAdminTransfer) return app_.complete(sqe.cid, sc::InvalidField);
  // Logs whose reading changes them for every other reader of the shared controller.
  constexpr uint8_t kLogTelemetryHostInitiated = 0x07, kLogPersistentEvent = 0x0D,
                    kLogReservationNotification = 0x80;
  if (lid == kLogReservationNotification) {
    log::debug("engine: {}: Get Log Page {:02x}h refused: reading it takes entries from every application", app_.name(),
               lid);
    return app_.complete(sqe.cid, sc::InvalidLogPage);
  }
  if ((lid == kLogTelemetryHostInitiated || lid == kLogPersistentEvent) && lsp != 0) {
    log::debug("engine: {}: Get Log Page {:02x}h with LSP {:x}h refused: it would change the log for every "
               "application", app_.name(), lid, lsp);
    return app_.complete(sqe.cid, sc::InvalidField);
  }
  if (lid == uint8_t(nvme::LogPageId::ChangedNamespaces)) return changed_namespaces_log(sqe, uint32_t(numd * 4));
  // Retain Asynchronous Event (RAE, CDW10 bit 15) always: one application reading a log
  // must not clear an event for the others.
  Sqe log = sqe;
  log.cdw10 |= 1u << 15;
  forward(log, uint32_t(numd * 4), false);
}

// This application's own list: reading it (RAE cleared) empties it and lets the next change
// be reported, for this application alone.
void AppAdminCommands::changed_namespaces_log(const Sqe& sqe, uint32_t len) {
  const uint64_t offset = uint64_t(sqe.cdw12) | uint64_t(sqe.cdw13) << 32;
  if (offset >= wire::ChangedNamespaceList::kLogBytes || (offset & 3)) return app_.complete(sqe.cid, sc::InvalidField);
  Status st;
  uint8_t* out = admin_data(sqe, len, st);
  if (!st.ok()) return app_.complete(sqe.cid, st);
  app_.changed_ns_.build(bounce_);
  // Past the end of the log the application gets zeros.
  const uint32_t copy = uint32_t(std::min<uint64_t>(len, bounce_.size() - offset));
  std::memcpy(out, bounce_.data() + offset, copy);
  std::memset(out + copy, 0, len - copy);
  if (!(sqe.cdw10 & nvme::kLogRetainAsyncEvent)) {
    app_.changed_ns_.clear();
    app_.ns_notice_masked_ = false;
  }
  app_.complete(sqe.cid, sc::Success);
}

void AppAdminCommands::features(const Sqe& sqe, bool set) {
  const uint8_t fid = uint8_t(sqe.cdw10);
  const uint32_t sel = (sqe.cdw10 >> 8) & 7;
  auto answer = [&](uint32_t current, uint32_t caps) {
    if (set) return app_.complete(sqe.cid, sc::Success, current);
    if (sel == wire::kSelSupportedCapabilities) return app_.complete(sqe.cid, sc::Success, caps);
    return app_.complete(sqe.cid, sc::Success, current);
  };
  switch (fid) {
    case wire::kFeatureNumberOfQueues: {
      if (set) {
        const uint32_t nsqr = sqe.cdw11 & 0xFFFF, ncqr = sqe.cdw11 >> 16;
        if (nsqr == 0xFFFF || ncqr == 0xFFFF) return app_.complete(sqe.cid, sc::InvalidField);
        if (queues_requested_ || std::any_of(app_.io_.begin(), app_.io_.end(), [](const AppController::IoQueue& q) {
              return q.state != AppController::QueueState::None;
            }))
          return app_.complete(sqe.cid, sc::CommandSequenceError);
        queues_requested_ = true;
        io_queues_granted_ = std::min(std::max(nsqr, ncqr) + 1, app_.io_queues_max_);
      }
      const uint32_t n = io_queues_granted_ - 1;
      return answer(n | (n << 16), 0);
    }
    case kFeatureInterruptCoalescing:
      if (set) {
        coalescing_ = sqe.cdw11 & 0xFFFF;
        app_.backend_.set_coalescing(app_, coalescing_);
      }
      return answer(coalescing_, wire::kFeatureCapChangeable);
    case wire::kFeatureAsyncEventConfig:
      if (set) {
        async_event_config_ = sqe.cdw11;
        // Enabled with changes already listed: they are reported now, as a controller does.
        if ((async_event_config_ & wire::kAecNamespaceAttribute) && !app_.changed_ns_.empty() &&
            !app_.ns_notice_masked_)
          app_.ns_notice_pending_ = true;
        app_.complete(sqe.cid, sc::Success, async_event_config_);
        return app_.deliver_events();
      }
      return answer(async_event_config_, wire::kFeatureCapChangeable);
    case wire::kFeatureKeepAliveTimer:
      // The engine keeps the remote controller alive; this controller needs no keep-alive.
      if (set) return app_.complete(sqe.cid, sc::InvalidField);
      return answer(0, 0);
    default: {
      // Others are the remote controller's, which every application of the engine shares: one
      // may read them, none may change them for the others.
      if (set) {
        log::debug("engine: {}: Set Features {:02x}h refused: the remote controller is shared", app_.name(), fid);
        return app_.complete(sqe.cid, sc::InvalidField);
      }
      uint32_t len = 0;
      if ((sqe.flags & nvme::kSqeFlagsPsdtMask) == nvme::kSqeFlagsPsdtSgl) len = std::min(sqe.sgl.length, 4096u);
      return forward(sqe, len, false);
    }
  }
}

void AppAdminCommands::create_cq(const Sqe& sqe) {
  const uint16_t qid = uint16_t(sqe.cdw10);
  const uint32_t entries = (sqe.cdw10 >> 16) + 1;
  const bool contiguous = sqe.cdw11 & 1, ien = (sqe.cdw11 >> 1) & 1;
  const uint32_t iv = sqe.cdw11 >> 16;
  if (qid == 0 || qid > io_queues_granted_ || app_.io_[qid].state != AppController::QueueState::None)
    return app_.complete(sqe.cid, sc::InvalidQueueIdentifier);
  if (entries < 2 || entries > app_.at_.layout().queue_entries) return app_.complete(sqe.cid, sc::InvalidQueueSize);
  if (!contiguous) return app_.complete(sqe.cid, sc::InvalidField);
  if (ien && iv >= app_.at_.vector_fds().size()) return app_.complete(sqe.cid, sc::InvalidInterruptVector);
  AppController::IoQueue& q = app_.io_[qid];
  q.cq_entries = entries;
  q.vector = ien ? int(iv) : -1;
  q.cq = {};
  shm::QueueMemory m = app_.at_.queue_pair(qid);
  std::memset(m.cq, 0, size_t(entries) * sizeof(nvme::Cqe));
  store_release(m.words->cq_head, 0);  // a new CQ starts at slot 0 with phase 1
  store_release(m.words->cq_event_idx, 0);
  app_.set_queue_state(qid, AppController::QueueState::CqOnly);
  app_.complete(sqe.cid, sc::Success);
}

void AppAdminCommands::create_sq(const Sqe& sqe) {
  const uint16_t qid = uint16_t(sqe.cdw10);
  const uint32_t entries = (sqe.cdw10 >> 16) + 1;
  const bool contiguous = sqe.cdw11 & 1;
  const uint16_t cqid = uint16_t(sqe.cdw11 >> 16);
  if (qid == 0 || qid > io_queues_granted_) return app_.complete(sqe.cid, sc::InvalidQueueIdentifier);
  if (app_.io_[qid].state != AppController::QueueState::None &&
      app_.io_[qid].state != AppController::QueueState::CqOnly)
    return app_.complete(sqe.cid, sc::InvalidQueueIdentifier);
  if (cqid == 0 || cqid > io_queues_granted_ || app_.io_[cqid].state == AppController::QueueState::None)
    return app_.complete(sqe.cid, sc::CompletionQueueInvalid);
  if (cqid != qid) {
    // Each SQ has a CQ of its own here (a queue pair is the unit an engine core carries).
    log::debug("engine: {}: SQ {} on CQ {}: shared completion queues are not supported", app_.name(), qid, cqid);
    return app_.complete(sqe.cid, sc::CompletionQueueInvalid);
  }
  if (entries < 2 || entries > app_.at_.layout().queue_entries) return app_.complete(sqe.cid, sc::InvalidQueueSize);
  if (!contiguous) return app_.complete(sqe.cid, sc::InvalidField);
  AppController::IoQueue& q = app_.io_[qid];
  shm::QueueMemory m = app_.at_.queue_pair(qid);
  // The SQ doorbell of a new SQ is 0 (the CQ's words are the CQ's, set when it was made).
  store_release(m.words->sq_tail, 0);
  store_release(m.words->sq_event_idx, 0);
  m.sq_size = entries;
  m.cq_size = q.cq_entries;
  const int vector_fd = q.vector >= 0 ? app_.at_.vector_fds()[size_t(q.vector)] : -1;
  if (!app_.backend_.start_io_queue(app_, qid, m, vector_fd, q.cq)) return app_.complete(sqe.cid, sc::InternalError);
  q.sq_entries = entries;
  app_.set_queue_state(qid, AppController::QueueState::Running);
  app_.complete(sqe.cid, sc::Success);
}

void AppAdminCommands::delete_sq(const Sqe& sqe) {
  const uint16_t qid = uint16_t(sqe.cdw10);
  if (qid == 0 || qid >= app_.io_.size() || app_.io_[qid].state != AppController::QueueState::Running)
    return app_.complete(sqe.cid, sc::InvalidQueueIdentifier);
  AppController::IoQueue& q = app_.io_[qid];
  q.deleting = true;
  q.delete_cid = sqe.cid;
  app_.set_queue_state(qid, AppController::QueueState::Stopping);
  app_.backend_.stop_io_queue(app_, qid, false);  // answered in io_queue_stopped()
}

void AppAdminCommands::delete_cq(const Sqe& sqe) {
  const uint16_t qid = uint16_t(sqe.cdw10);
  if (qid == 0 || qid >= app_.io_.size() || app_.io_[qid].state == AppController::QueueState::None)
    return app_.complete(sqe.cid, sc::InvalidQueueIdentifier);
  if (app_.io_[qid].state != AppController::QueueState::CqOnly) return app_.complete(sqe.cid, sc::InvalidQueueDeletion);
  app_.set_queue_state(qid, AppController::QueueState::None);
  app_.complete(sqe.cid, sc::Success);
}

// Admin commands may complete in any order: a forwarded one answers when the remote
// controller does, and the admin queue goes on meanwhile.
// The command's buffer comes from the engine's budget and this application's share of it;
// when either is held by commands in flight, the command waits (the controller's waiting_) and the admin SQ
// is not fetched until resume_admin().
void AppAdminCommands::forward(const Sqe& sqe, uint32_t len, bool to_controller) {
  Status st;
  uint8_t* app = len ? admin_data(sqe, len, st) : nullptr;
  if (!st.ok()) return app_.complete(sqe.cid, st);
  const uint64_t charge = AdminBufferPool::charge(len);
  if (charge > app_.limits_.max_buffer_bytes) {
    log::debug("engine: {}: admin opcode {:02x}h moves {} bytes, beyond its {} bytes of admin buffers", app_.name(),
               sqe.opc, len, app_.limits_.max_buffer_bytes);
    return app_.complete(sqe.cid, sc::InvalidField);
  }
  AdminBuffer data;
  AdminBufferPool::Take taken = AdminBufferPool::Take::Wait;
  if (app_.admin_buffer_bytes_ + charge <= app_.limits_.max_buffer_bytes)
    taken = app_.backend_.admin_buffers().take(len, data);
  switch (taken) {
    case AdminBufferPool::Take::Taken: break;
    case AdminBufferPool::Take::Wait:
      // Some buffer is in flight (this application's, or the engine's whole budget is):
      // this command goes once one comes back.
      app_.waiting_ = sqe;
      return;
    case AdminBufferPool::Take::TooLarge:
      log::debug("engine: {}: admin opcode {:02x}h moves {} bytes, beyond the engine's admin buffers", app_.name(),
                 sqe.opc, len);
      return app_.complete(sqe.cid, sc::InvalidField);
    case AdminBufferPool::Take::NoMemory:
      log::warn("engine: {}: no memory for the {} bytes of admin opcode {:02x}h", app_.name(), len, sqe.opc);
      return app_.complete(sqe.cid, sc::InternalError);
  }
  if (to_controller && len) std::memcpy(data.data(), app, len);
  Sqe remote = sqe;
  remote.flags = 0;
  std::memset(&remote.sgl, 0, sizeof(remote.sgl));
  const uint64_t tag = (uint64_t(app_.epoch_) << 40) | app_.next_tag_++;
  app_.forwarded_[tag] = AppController::Forwarded{sqe.cid, to_controller ? nullptr : app, len, charge};
  app_.admin_buffer_bytes_ += charge;
  app_.admin_in_flight_peak_ = std::max(app_.admin_in_flight_peak_, uint32_t(app_.forwarded_.size()));
  app_.backend_.forward_admin(app_, remote, std::move(data), to_controller, tag);
}

uint8_t* AppAdminCommands::admin_data(const Sqe& sqe, uint32_t len, Status& st) {
  shm::DataSpan d = shm::resolve_data(sqe, app_.at_.data(), app_.at_.layout().data_bytes, len);
  st = d.status;
  return d.data;
}

}  // namespace nvtcp::engine

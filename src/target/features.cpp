// SPDX-License-Identifier: Apache-2.0
// Set Features and Get Features (admin_commands.hpp): the features a controller keeps, as the
// host set them or as they follow from the target's configuration.
#include <algorithm>

#include "target/admin_commands.hpp"
#include "target/command_queue.hpp"
#include "util/log.hpp"
#include "wire/features.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

namespace {
// Get Features SEL for a feature that cannot be saved: "saved" reads as the default, as the
// specification has it; SEL 100b-111b are reserved.
bool select_value(uint32_t sel, uint32_t current, uint32_t def, uint32_t caps, uint32_t& out) {
  switch (sel) {
    case kSelCurrent: out = current; return true;
    case kSelDefault:
    case kSelSaved: out = def; return true;
    case kSelSupportedCapabilities: out = caps; return true;
    default: return false;
  }
}

// Feature 04h selects one threshold: composite temperature only (no sensors), over or under.
bool temperature_select(uint32_t cdw11, unsigned& thsel) {
  const uint32_t tmpsel = (cdw11 >> 16) & 0xF;
  thsel = (cdw11 >> 20) & 0x3;
  return tmpsel == 0 && thsel <= 1;
}
}  // namespace

void AdminCommands::set_features(Command& r) {
  const Sqe& sqe = r.sqe;
  const uint8_t fid = sqe.cdw10 & 0xFF;
  if (ctrl().subsys_.is_discovery() && fid != 0x0F && fid != 0x0B) {
    finish(r, sc::InvalidField);
    return;
  }
  if (sqe.cdw10 & (1u << 31)) {
    finish(r, sc::FeatureNotSaveable);
    return;
  }
  if (fid == kFeatureVolatileWriteCache) set_write_cache(r);
  else if (fid == kFeatureReservationPersistence) set_reservation_persistence(r);
  else finish(r, set_feature(r));
}

Status AdminCommands::set_feature(Command& r) {
  Controller& c = ctrl();
  const Sqe& sqe = r.sqe;
  switch (sqe.cdw10 & 0xFF) {
    case kFeaturePowerManagement:
      if ((sqe.cdw11 & 0x1F) != 0) break;  // NPSS 0: power state 0 is the only one
      c.power_management_ = sqe.cdw11 & 0xFF;
      return sc::Success;
    case kFeatureTemperatureThreshold: {
      unsigned thsel = 0;
      if (!temperature_select(sqe.cdw11, thsel)) break;
      c.temperature_threshold_[thsel] = uint16_t(sqe.cdw11 & 0xFFFF);
      return sc::Success;
    }
    case kFeatureErrorRecovery:
      if (sqe.cdw11 & (1u << 16)) break;  // DULBE: deallocated blocks read as zeros, no error
      c.error_recovery_ = sqe.cdw11 & 0xFFFF;
      return sc::Success;
    case kFeatureNumberOfQueues: {
      const uint32_t nsqr = sqe.cdw11 & 0xFFFF, ncqr = sqe.cdw11 >> 16;
      if (nsqr == 0xFFFF || ncqr == 0xFFFF) break;
      const uint32_t n = c.io_queues.grant(std::min(nsqr, ncqr) + 1);
      r.dw0 = (n - 1) | ((n - 1) << 16);
      return sc::Success;
    }
    case kFeatureInterruptCoalescing: c.interrupt_coalescing_ = sqe.cdw11 & 0xFFFF; return sc::Success;
    case kFeatureWriteAtomicity: c.write_atomicity_ = sqe.cdw11 & 1; return sc::Success;
    case kFeatureKeepAliveTimer: c.kato_ms_ = c.effective_kato_ms(sqe.cdw11); return sc::Success;
    case kFeatureAsyncEventConfig:
      if (sqe.cdw11 & ~c.async_events_supported()) break;
      c.async_event_config_ = sqe.cdw11;
      return sc::Success;
    case kFeatureReservationNotificationMask: {
      if (sqe.cdw11 & ~kResvNoticeMaskAll) break;
      if (sqe.nsid == kNsidAll) {  // every namespace
        for (uint32_t n = 1; n <= c.subsys_.max_namespaces(); ++n)
          if (auto* m = c.resv_mask(n)) m->store(sqe.cdw11, std::memory_order_relaxed);
        return sc::Success;
      }
      auto* m = c.resv_mask(sqe.nsid);
      if (!m) return sc::InvalidNamespace;
      m->store(sqe.cdw11, std::memory_order_relaxed);
      return sc::Success;
    }
    case kFeatureHostBehaviorSupport: {
      const uint32_t data_len = r.xfer.dir == Command::Direction::HostToController ? r.xfer.len : 0;
      const uint8_t* data = r.buf;
      if (data_len != kHostBehaviorLen) return sc::DataSglLengthInvalid;
      // ACRE 0 or 1; every other field asks for something the target cannot do.
      if (data[0] > 1 || std::any_of(data + 1, data + kHostBehaviorLen, [](uint8_t b) { return b != 0; })) break;
      c.host_behavior_acre_ = data[0];
      return sc::Success;
    }
    case kFeatureHostIdentifier:
      // Over fabrics the host identifier is the one Connect carried (nvmet answers the same).
      return sc::CommandSequenceError;
    default: break;
  }
  return sc::InvalidField;
}

// Feature 06h. The cache belongs to the namespaces, which every controller of the subsystem
// shares, as one drive's cache is shared by its controllers.
void AdminCommands::set_write_cache(Command& r) {
  Controller& c = ctrl();
  Subsystem& sub = c.subsys_;
  if (sub.is_discovery() || !sub.volatile_write_cache()) {
    finish(r, sc::InvalidField);
    return;
  }
  const bool on = r.sqe.cdw11 & 1;  // WCE
  const bool was_on = sub.write_cache_enabled();
  sub.set_write_cache_enabled(on);
  if (was_on != on)
    log::info("controller {} of {}: volatile write cache turned {} by host {}", c.cntlid_, sub.nqn(),
              on ? "on" : "off", c.hostnqn_);
  // Off: writes from now on are written through, and what the cache already holds is
  // flushed before this command completes.
  if (!on) q_.io_.start_flush(r, true);
  else finish(r, sc::Success);
}

// Feature 83h: the namespace's reservation state file is written first (without the reactor
// waiting for it).
void AdminCommands::set_reservation_persistence(Command& r) {
  const Sqe& sqe = r.sqe;
  Controller& c = ctrl();
  Namespace* ns = c.find_namespace(sqe.nsid);
  if (!ns) {
    finish(r, sc::InvalidNamespace);
    return;
  }
  if (sqe.cdw11 & ~1u) {
    finish(r, sc::InvalidField);
    return;
  }
  std::string err;
  const Reservations::Outcome o = ns->reservations.apply_ptpl(sqe.cdw11 & 1, err);
  if (!o.status.ok()) {
    log::info("controller {}: feature 83h on namespace {}: {}", c.cntlid_, sqe.nsid, err);
    finish(r, sc::InvalidField);
    return;
  }
  if (o.durable_ticket) q_.wait_until_durable(r, o.durable_ticket);
  else finish(r, sc::Success);
}

void AdminCommands::get_features(Command& r) {
  Controller& c = ctrl();
  const Sqe& sqe = r.sqe;
  const uint32_t sgl_len = asked_len(r);  // feature 81h carries its host identifier there
  const uint8_t fid = sqe.cdw10 & 0xFF;
  const uint32_t sel = (sqe.cdw10 >> 8) & 0x7;
  const bool discovery = c.subsys_.is_discovery();
  constexpr uint32_t kChangeable = kFeatureCapChangeable;
  uint32_t current = 0, def = 0, caps = kChangeable;
  switch (discovery && fid != kFeatureKeepAliveTimer && fid != kFeatureAsyncEventConfig ? 0 : fid) {
    case kFeaturePowerManagement: current = c.power_management_; break;
    case kFeatureTemperatureThreshold: {
      unsigned thsel = 0;
      if (!temperature_select(sqe.cdw11, thsel)) {
        finish(r, sc::InvalidField);
        return;
      }
      const uint32_t which = sqe.cdw11 & (0xFu << 16 | 0x3u << 20);
      current = c.temperature_threshold_[thsel] | which;
      def = (thsel == 0 ? kTemperatureOverDefault : 0) | which;
      break;
    }
    case kFeatureErrorRecovery: current = c.error_recovery_; break;
    case kFeatureVolatileWriteCache:
      if (discovery || !c.subsys_.volatile_write_cache()) {
        finish(r, sc::InvalidField);
        return;
      }
      current = c.subsys_.write_cache_enabled() ? 1 : 0;
      def = 1;  // on at start
      break;
    case kFeatureNumberOfQueues: {
      uint32_t n = c.num_io_queues();
      if (n == 0) n = c.target_.config.max_io_queues;  // what a Set Features would grant
      current = def = (n - 1) | ((n - 1) << 16);
      break;
    }
    case kFeatureInterruptCoalescing: current = c.interrupt_coalescing_; break;
    case kFeatureWriteAtomicity: current = c.write_atomicity_; break;
    case kFeatureAsyncEventConfig: current = c.async_event_config_; break;
    case kFeatureKeepAliveTimer:
      current = c.kato_ms_;
      def = c.connect_kato_ms_;
      break;
    case kFeatureReservationNotificationMask: {
      auto* m = c.resv_mask(sqe.nsid);
      if (!m) {
        finish(r, sc::InvalidNamespace);
        return;
      }
      current = m->load(std::memory_order_relaxed);
      caps |= kFeatureCapNamespaceSpecific;
      break;
    }
    case kFeatureReservationPersistence: {
      const Namespace* ns = c.find_namespace(sqe.nsid);
      if (!ns) {
        finish(r, sc::InvalidNamespace);
        return;
      }
      current = ns->reservations.ptpl() ? 1 : 0;
      caps = kFeatureCapNamespaceSpecific | (ns->reservations.ptpl_capable() ? kChangeable : 0);
      break;
    }
    case kFeatureHostBehaviorSupport: {
      if (discovery || sel > kSelSupportedCapabilities) {
        finish(r, sc::InvalidField);
        return;
      }
      if (sel == kSelSupportedCapabilities) {
        r.dw0 = kChangeable;
        finish(r, sc::Success);
        return;
      }
      feature_data_.assign(kHostBehaviorLen, 0);
      feature_data_[0] = sel == kSelCurrent ? c.host_behavior_acre_ : 0;
      const uint32_t len = std::min<uint32_t>(sgl_len, kHostBehaviorLen);
      send_data(r, feature_data_.data(), len, sgl_len - len);
      return;
    }
    case kFeatureHostIdentifier: {
      // 128-bit identifiers only (EXHID), as fabrics require; the data is Connect's host ID.
      if (!(sqe.cdw11 & 1) || sel > kSelSupportedCapabilities) {
        finish(r, sc::InvalidField);
        return;
      }
      if (sel == kSelSupportedCapabilities) {  // dw0 0: fixed by Connect
        finish(r, sc::Success);
        return;
      }
      feature_data_.assign(c.hostid_, c.hostid_ + sizeof(c.hostid_));
      const uint32_t len = std::min<uint32_t>(sgl_len, sizeof(c.hostid_));
      send_data(r, feature_data_.data(), len, sgl_len - len);
      return;
    }
    default: finish(r, sc::InvalidField); return;
  }
  finish(r, select_value(sel, current, def, caps, r.dw0) ? sc::Success : sc::InvalidField);
}

}  // namespace nvtcp::target

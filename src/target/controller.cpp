// SPDX-License-Identifier: Apache-2.0
#include "target/controller.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"
#include "reactor/reactor.hpp"
#include "util/log.hpp"
#include "wire/fabrics.hpp"
#include "wire/features.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

namespace {
constexpr uint32_t kVersion = 0x00020000;  // NVMe 2.0
constexpr uint8_t kAerl = 3;               // 4 outstanding Asynchronous Event Requests
constexpr uint8_t kAcl = 3;
constexpr uint8_t kCapTimeout500ms = 15;   // CAP.TO: 7.5 s to become ready

void put_padded(char* dst, size_t n, const std::string& s) {
  std::memset(dst, ' ', n);
  std::memcpy(dst, s.data(), std::min(n, s.size()));
}

void put_string(char* dst, size_t n, const std::string& s) {
  std::memset(dst, 0, n);
  std::memcpy(dst, s.data(), std::min(n - 1, s.size()));
}

uint8_t log2_u32(uint32_t v) {
  uint8_t r = 0;
  while ((1u << (r + 1)) <= v) ++r;
  return r;
}
}  // namespace

Controller::Controller(TargetState& target, Subsystem& subsys, uint16_t cntlid, std::string hostnqn,
                       const uint8_t hostid[16], uint32_t kato_ms, const reactor::Clock& clock)
    : target_(target),
      subsys_(subsys),
      subsys_keep_(subsys.weak_from_this().lock()),
      cntlid_(cntlid),
      hostnqn_(std::move(hostnqn)),
      kato_ms_(effective_kato_ms(kato_ms)),
      connect_kato_ms_(kato_ms_),
      clock_(clock) {
  std::memcpy(hostid_, hostid, 16);
  uint32_t n = target.config.max_io_queues + 1;
  queue_claimed_.reset(new std::atomic<bool>[n]);
  stats_.reset(new std::atomic<QueueStats*>[n]);
  for (uint32_t i = 0; i < n; ++i) {
    queue_claimed_[i] = false;
    stats_[i].store(nullptr, std::memory_order_relaxed);
  }
  // By NSID, for every namespace the subsystem may come to hold (they come and go live).
  ns_slots_ = subsys.max_namespaces() + 1;
  resv_masks_.reset(new std::atomic<uint32_t>[ns_slots_]);
  for (uint32_t i = 0; i < ns_slots_; ++i) resv_masks_[i].store(0, std::memory_order_relaxed);
  touch();
}

std::atomic<uint32_t>* Controller::resv_mask(uint32_t nsid) const {
  return subsys_.find_namespace(nsid) ? &resv_masks_[nsid] : nullptr;
}

Controller::~Controller() {
  for (uint32_t i = 0; i <= target_.config.max_io_queues; ++i) delete[] stats_[i].load(std::memory_order_acquire);
}

QueueStats* Controller::stats(uint16_t qid) {
  QueueStats* row = stats_[qid].load(std::memory_order_acquire);
  if (!row) {  // only this queue's Connect gets here; a reconnect finds the row it left
    row = new QueueStats[ns_slots_];
    stats_[qid].store(row, std::memory_order_release);
  }
  return row;
}

QueueStats::Totals Controller::totals(const Namespace* ns) const {
  QueueStats::Totals t;
  for (uint32_t q = 1; q <= target_.config.max_io_queues; ++q) {
    const QueueStats* row = stats_[q].load(std::memory_order_acquire);
    if (!row) continue;
    if (ns) row[ns->index].add_to(t);
    else
      for (uint32_t i = 0; i < ns_slots_; ++i) row[i].add_to(t);
  }
  return t;
}

uint32_t Controller::ioccsz_bytes() const { return 64 + target_.config.in_capsule_data; }

bool Controller::claim_queue(uint16_t qid) {
  if (qid == 0 || qid > num_io_queues()) return false;
  bool expected = false;
  return queue_claimed_[qid].compare_exchange_strong(expected, true);
}

void Controller::release_queue(uint16_t qid) {
  if (qid > 0 && qid <= target_.config.max_io_queues) queue_claimed_[qid] = false;
}

void Controller::register_io_queue(uint16_t qid, reactor::Reactor* r, CommandAborter* q) {
  std::lock_guard lk(io_queues_mu_);
  if (io_queues_.size() <= qid) io_queues_.resize(qid + 1);
  io_queues_[qid] = {r, q};
}

void Controller::unregister_io_queue(uint16_t qid, CommandAborter* q) {
  std::lock_guard lk(io_queues_mu_);
  if (qid < io_queues_.size() && io_queues_[qid].queue == q) io_queues_[qid] = {};
}

// Abort (CDW10: SQID 15:0, CID 31:16). dw0 bit 0 is 0 when the command was aborted (it then
// ends with Command Abort Requested), 1 when it was not (already running, done, or unknown).
AdminResult Controller::start_abort(const Sqe& sqe) {
  AdminResult r;
  const uint16_t sqid = uint16_t(sqe.cdw10), cid = uint16_t(sqe.cdw10 >> 16);
  if (sqid == 0) {
    r.dw0 = event_sink_ && event_sink_->abort_held_aer(cid) ? 0 : 1;
    return r;
  }
  if (aborts_held_ > kAcl) {
    r.status = sc::AbortLimitExceeded;
    return r;
  }
  std::lock_guard lk(io_queues_mu_);
  if (sqid >= io_queues_.size() || !io_queues_[sqid].queue) {
    r.dw0 = 1;
    return r;
  }
  ++aborts_held_;
  r.held = true;
  const uint16_t abort_cid = sqe.cid;
  io_queues_[sqid].reactor->post([weak = weak_from_this(), sqid, cid, abort_cid, queue = io_queues_[sqid].queue] {
    auto self = weak.lock();
    if (!self) return;
    bool aborted = false;
    {
      // Still registered means still alive: unregistering happens on this same reactor.
      std::lock_guard queues_lock(self->io_queues_mu_);
      if (sqid < self->io_queues_.size() && self->io_queues_[sqid].queue == queue) aborted = queue->abort_command(cid);
    }
    std::lock_guard admin_lock(self->admin_mu_);
    if (!self->admin_reactor_) return;
    self->admin_reactor_->post([weak, abort_cid, aborted] {
      if (auto c = weak.lock(); c && c->event_sink_) c->event_sink_->abort_done(abort_cid, aborted);
    });
  });
  return r;
}

Status Controller::property_get(uint32_t offset, bool eight, uint64_t& value) {
  switch (offset) {
    case prop::CAP:
      if (!eight) return sc::InvalidField;
      value = prop::make_cap(uint16_t(target_.config.max_queue_depth - 1), kCapTimeout500ms);
      return sc::Success;
    case prop::VS: value = kVersion; break;
    case prop::CC: value = cc_; break;
    case prop::CSTS: value = csts_.load(); break;
    case prop::NSSR: value = 0; break;
    default: return sc::InvalidField;
  }
  return eight ? sc::InvalidField : sc::Success;
}

// CC as the NVMe base specification's controller reset and shutdown rules and the Linux
// target have it: an enable with a CC we cannot honour sets CSTS.CFS instead of RDY; CC.EN
// 1 -> 0 resets (not ready: I/O queues answer Command Sequence Error, new ones may not
// connect); a shutdown notice first makes the namespaces' caches durable (SHST 01b while the
// connection flushes, see PropertySetResult::flush_for_shutdown), then reports SHST 10b with
// RDY clear, and the host must reset before enabling again.
Controller::PropertySetResult Controller::property_set(uint32_t offset, bool eight, uint64_t value) {
  PropertySetResult res;
  if (eight || offset != prop::CC) {  // CC is the only writable property we have
    res.status = sc::InvalidField;
    return res;
  }
  const uint32_t old = cc_;
  const uint32_t cc = uint32_t(value);
  cc_ = cc;
  uint32_t csts = csts_.load();
  const bool en = cc & prop::kCcEnable, was_en = old & prop::kCcEnable;
  if (en && !was_en) {
    csts = cc_supported(cc) ? prop::kCstsReady : prop::kCstsFatal;
    if (!(csts & prop::kCstsReady))
      log::warn("controller {} of {}: CC {:#x} cannot be honoured (MPS, AMS, CSS or queue entry sizes); CSTS.CFS set",
                cntlid_, subsys_.nqn(), cc);
  } else if (!en && was_en) {
    csts = 0;
    cc_ = cc & ~prop::kCcShnMask;
  }
  if ((cc & prop::kCcShnMask) && !(old & prop::kCcShnMask) && en) {
    csts = (csts & ~(prop::kCstsReady | prop::kCstsShstMask)) | prop::kCstsShstProcessing;
    res.flush_for_shutdown = true;
  } else if (!(cc & prop::kCcShnMask) && (old & prop::kCcShnMask)) {
    csts &= ~prop::kCstsShstMask;
  }
  csts_.store(csts);
  return res;
}

void Controller::shutdown_complete() {
  csts_.store((csts_.load() & ~prop::kCstsShstMask) | prop::kCstsShstComplete);
}

bool Controller::cc_supported(uint32_t cc) const {
  const uint32_t css = (cc >> 4) & 0x7, mps = (cc >> 7) & 0xF, ams = (cc >> 11) & 0x7;
  const uint32_t iosqes = (cc >> 16) & 0xF, iocqes = (cc >> 20) & 0xF;
  if (css != 0 || mps != 0 || ams != 0) return false;  // CAP: NVM command set, 4 KiB pages, round robin
  // A discovery controller has no I/O queues: some hosts leave the entry sizes 0.
  return subsys_.is_discovery() || (iosqes == 6 && iocqes == 4);
}

uint32_t Controller::effective_kato_ms(uint32_t asked_ms) const {
  return asked_ms == 0 && subsys_.is_discovery() ? target_.config.discovery_kato_ms : asked_ms;
}

AdminResult Controller::execute_admin(const Sqe& sqe, uint8_t* buf, uint32_t sgl_len, uint32_t host_len) {
  AdminResult r;
  touch();
  auto opc = static_cast<AdminOpcode>(sqe.opc);
  bool discovery = subsys_.is_discovery();
  // Admin commands other than fabrics ones need an enabled, ready controller (the Linux
  // target answers the same, and leaves discovery controllers alone).
  if (!discovery && !ready()) {
    r.status = sc::CommandSequenceError;
    return r;
  }
  switch (opc) {
    case AdminOpcode::Identify: {
      if (sgl_len != kIdentifyLen) {
        r.status = sc::DataSglLengthInvalid;
        return r;
      }
      r.data_len = identify(sqe, buf, r.status);
      return r;
    }
    case AdminOpcode::GetLogPage: {
      const uint64_t numd = uint64_t((sqe.cdw11 & 0xFFFF) << 16 | (sqe.cdw10 >> 16)) + 1;  // 0's based: up to 2^32
      const uint64_t len = numd * 4;
      if (len != sgl_len) {
        r.status = sc::DataSglLengthInvalid;
        return r;
      }
      get_log_page(sqe, uint32_t(len), r);
      return r;
    }
    case AdminOpcode::SetFeatures:
      if (discovery && (sqe.cdw10 & 0xFF) != 0x0F && (sqe.cdw10 & 0xFF) != 0x0B) {
        r.status = sc::InvalidField;
        return r;
      }
      return set_features(sqe, buf, host_len);
    case AdminOpcode::GetFeatures: return get_features(sqe, sgl_len);
    case AdminOpcode::KeepAlive: return r;
    case AdminOpcode::AsyncEventRequest:
      if (aers_held_ > kAerl) {
        r.status = sc::AerLimitExceeded;
        return r;
      }
      ++aers_held_;
      r.held = true;  // completed by take_async_event() when an event is ready
      return r;
    case AdminOpcode::Abort: return start_abort(sqe);
    default: break;
  }
  r.status = sc::InvalidOpcode;
  return r;
}

uint32_t Controller::identify(const Sqe& sqe, uint8_t* buf, Status& st) {
  std::memset(buf, 0, kIdentifyLen);
  auto cns = static_cast<Cns>(sqe.cdw10 & 0xFF);
  const auto& cfg = target_.config;
  bool discovery = subsys_.is_discovery();
  switch (cns) {
    case Cns::Controller: {
      auto* id = reinterpret_cast<IdentifyController*>(buf);
      put_padded(id->sn, sizeof(id->sn), subsys_.serial());
      put_padded(id->mn, sizeof(id->mn), subsys_.model());
      put_padded(id->fr, sizeof(id->fr), "0.1.0");
      id->rab = 6;
      // May have several controllers (one per host connection); ANA reported if configured.
      id->cmic = kCmicMultiController | (subsys_.ana_reporting() ? kCmicAna : 0);
      id->mdts = uint8_t(log2_u32(cfg.mdts_bytes / 4096));
      id->cntlid = cntlid_;
      id->ver = kVersion;
      id->oaes = async_events_supported() & ~kAecSmartWarnings;  // the notices it sends
      id->cntrltype = discovery ? kCntrlTypeDiscovery : kCntrlTypeIo;
      id->acl = kAcl;
      id->aerl = kAerl;
      id->frmw = (1u << 1) | 1u;  // one slot, slot 1 read-only
      // SMART per namespace, Commands Supported and Effects log, extended data for Get Log
      // Page (NUMDU, offsets).
      // Not bit 5: it would also promise LIDs 12h and 13h.
      id->lpa = discovery ? (1u << 2) : (1u << 0) | (1u << 1) | (1u << 2);  // + SMART per namespace
      id->elpe = kErrorLogEntries - 1;  // 0's based
      id->npss = 0;
      id->kas = 1;                 // keep-alive granularity 100 ms
      id->sqes = 0x66;
      id->cqes = 0x44;
      id->maxcmd = uint16_t(std::min<uint32_t>(cfg.max_queue_depth, 0xFFFF));
      id->nn = discovery ? 0 : subsys_.max_namespaces();
      id->mnan = id->nn;
      if (subsys_.ana_reporting()) {
        // Every state can be reported; a namespace keeps its group while attached; group IDs
        // run to max_namespaces, as SPDK numbers them (one per namespace by default).
        id->anatt = kAnaTransitionSeconds;
        id->anacap = kAnacapStates | kAnacapGroupIdFixed;
        id->anagrpmax = id->nanagrpid = subsys_.max_namespaces();
      }
      id->oncs = discovery ? 0
                           : (kOncsCompare | kOncsDsm | kOncsWriteZeroes | kOncsSaveSelect | kOncsReservations |
                              kOncsVerify | kOncsCopy);
      id->ocfs = discovery ? 0 : kOcfsFormat0;
      // A volatile write cache is reported where a namespace has one (a file on storage):
      // the host then sends Flush and FUA, and they are honoured. RAM and null namespaces
      // have none: a completed write is as durable as their medium (see backend::Persistence).
      id->vwc = !discovery && subsys_.volatile_write_cache() ? (kVwcPresent | kVwcFlushAllNamespaces) : 0;
      id->sgls = kSglsSupported;
      put_string(id->subnqn, sizeof(id->subnqn), subsys_.nqn());
      id->ioccsz = discovery ? 0 : ioccsz_bytes() / 16;
      id->iorcsz = discovery ? 0 : 1;
      id->icdoff = 0;
      id->fcatt = 0;   // dynamic controller model
      id->msdbd = 1;
      id->psd[0].mp = 2500;  // 25 W, in centiwatts: a nominal figure for power state 0
      return kIdentifyLen;
    }
    case Cns::Namespace: {
      uint32_t nsid = sqe.nsid;
      if (discovery || nsid == 0 || nsid == 0xFFFFFFFF) {
        st = sc::InvalidNamespace;
        return 0;
      }
      const Namespace* ns = subsys_.find_namespace(nsid);
      if (!ns) return kIdentifyLen;  // an inactive NSID returns a zero-filled structure
      auto* id = reinterpret_cast<IdentifyNamespace*>(buf);
      id->nsze = id->ncap = id->nuse = ns->blocks;
      id->nlbaf = 0;
      id->flbas = 0;
      id->dlfeat = 0x1;            // deallocated blocks read as zeros
      id->nmic = 1;                // may be shared by several controllers
      if (subsys_.ana_reporting()) id->anagrpid = ns->anagrpid;
      std::memcpy(id->nguid, ns->nguid, 16);
      std::memcpy(id->eui64, ns->eui64, 8);
      id->lbaf[0].lbads = ns->lbads;
      id->rescap = kRescapAllTypes | kRescapIekey13 | (ns->reservations.ptpl_capable() ? kRescapPtpl : 0);
      id->msrc = uint8_t(kCopyMaxRanges - 1);  // 0's based
      id->mssrl = uint16_t(copy_max_range_blocks(mdts_bytes(), ns->lbads));
      id->mcl = kCopyMaxRanges * id->mssrl;
      return kIdentifyLen;
    }
    case Cns::ActiveNamespaceList:
      if (discovery) break;
      return active_namespace_list(sqe.nsid, buf, st);
    case Cns::NamespaceDescriptors: {
      const Namespace* ns = discovery ? nullptr : subsys_.find_namespace(sqe.nsid);
      if (!ns) {
        st = sc::InvalidNamespace;
        return 0;
      }
      uint8_t* p = buf;
      auto add = [&p](uint8_t type, const void* data, uint8_t len) {
        NsIdDescriptorHeader h{type, len, 0};
        std::memcpy(p, &h, sizeof(h));
        std::memcpy(p + sizeof(h), data, len);
        p += sizeof(h) + len;
      };
      add(kNidtEui64, ns->eui64, 8);
      add(kNidtNguid, ns->nguid, 16);
      add(kNidtUuid, ns->uuid, 16);
      uint8_t csi = 0;  // NVM command set
      add(kNidtCsi, &csi, 1);
      return kIdentifyLen;
    }
    case Cns::IoCommandSetController:
      // NVM command set controller data for CSI 0: a Verify reads its range, so it is
      // bounded as a read is (VSL = MDTS); zero elsewhere means "no extra limits".
      if (!discovery && (sqe.cdw11 >> 24) == kCsiNvm) {
        reinterpret_cast<NvmIdentifyController*>(buf)->vsl = uint8_t(log2_u32(cfg.mdts_bytes / 4096));
        return kIdentifyLen;
      }
      break;
    case Cns::IoCommandSetNamespace: {
      // NVM command set namespace data: all-zero, no protection information or extended
      // LBA formats (nvmet answers the same).
      if (discovery || (sqe.cdw11 >> 24) != kCsiNvm) break;
      if (sqe.nsid == 0 || sqe.nsid == kNsidAll) {
        st = sc::InvalidNamespace;
        return 0;
      }
      return kIdentifyLen;
    }
    case Cns::IoCommandSetActiveNamespaceList:
      if (discovery || (sqe.cdw11 >> 24) != kCsiNvm) break;
      return active_namespace_list(sqe.nsid, buf, st);
    case Cns::IndependentNamespace: {
      if (discovery || sqe.nsid == 0 || sqe.nsid == kNsidAll) {
        st = sc::InvalidNamespace;
        return 0;
      }
      const Namespace* ns = subsys_.find_namespace(sqe.nsid);
      if (!ns) return kIdentifyLen;  // inactive: zero-filled, as CNS 00h
      auto* id = reinterpret_cast<IndependentIdentifyNamespace*>(buf);
      id->nmic = 1;  // as CNS 00h
      id->nstat = kNstatReady;
      return kIdentifyLen;
    }
    case Cns::IoCommandSetCombinations: {
      if (discovery) break;
      reinterpret_cast<IoCommandSetVectors*>(buf)->vector[0] = 1u << kCsiNvm;  // NVM only
      return kIdentifyLen;
    }
  }
  st = sc::InvalidField;
  return 0;
}

void Controller::record_error(uint16_t sqid, const Sqe& sqe, Status st) {
  ErrorLogEntry e{};
  e.sqid = sqid;
  e.cid = sqe.cid;
  e.status = st.to_cqe();  // as the completion carried it (phase tag bit 0 left clear)
  e.pel = 0xFFFF;          // no parameter singled out
  e.nsid = sqe.nsid;
  const auto opc = static_cast<IoOpcode>(sqe.opc);
  if (sqid != 0 && (opc == IoOpcode::Read || opc == IoOpcode::Write || opc == IoOpcode::WriteZeroes))
    e.lba = (uint64_t(sqe.cdw11) << 32) | sqe.cdw10;
  e.trtype = kTrtypeTcp;
  std::lock_guard lk(errors_mu_);
  e.error_count = ++error_count_;
  errors_[(error_count_ - 1) % kErrorLogEntries] = e;
}

uint64_t Controller::error_count() const {
  std::lock_guard lk(errors_mu_);
  return error_count_;
}

// CNS 02h and 07h (NVM): the active NSIDs above `after`, ascending, in a zeroed buffer.
uint32_t Controller::active_namespace_list(uint32_t after, uint8_t* buf, Status& st) const {
  if (after >= 0xFFFFFFFE) {
    st = sc::InvalidField;
    return 0;
  }
  auto* list = reinterpret_cast<uint32_t*>(buf);
  size_t n = 0;
  for (const auto& ns : subsys_.namespaces()) {
    if (ns->nsid > after && n < kIdentifyLen / 4) list[n++] = ns->nsid;
  }
  return kIdentifyLen;
}

// Builds the whole log in scratch_ and points r at the window asked for: the connection
// copies the log's bytes into a buffer of their size and sends the zeros past its end from
// a shared zero region, so a 1 MiB read of a 2 KiB log costs 2 KiB of memory.
void Controller::get_log_page(const Sqe& sqe, uint32_t len, AdminResult& r) {
  Status& st = r.status;
  auto lid = static_cast<LogPageId>(sqe.cdw10 & 0xFF);
  uint64_t offset = (uint64_t(sqe.cdw13) << 32) | sqe.cdw12;
  bool discovery = subsys_.is_discovery();
  // What a successful read of this log takes away; applied only once the read is known to
  // succeed and its data has a buffer to go in (log_page_delivered), never while the log is
  // being built.
  LogConsume& consume = pending_consume_.what;
  pending_consume_ = {};
  scratch_.clear();
  switch (lid) {
    case LogPageId::SupportedLogPages: {
      if (discovery) break;
      scratch_.assign(sizeof(SupportedLogPagesLog), 0);
      auto* l = reinterpret_cast<SupportedLogPagesLog*>(scratch_.data());
      for (LogPageId id : {LogPageId::SupportedLogPages, LogPageId::Error, LogPageId::SmartHealth,
                           LogPageId::FirmwareSlot, LogPageId::ChangedNamespaces, LogPageId::CommandEffects,
                           LogPageId::ReservationNotification})
        l->lid[uint8_t(id)] = kLogSupported;
      if (subsys_.ana_reporting()) l->lid[uint8_t(LogPageId::Ana)] = kLogSupported;
      break;
    }
    case LogPageId::Ana: {
      // Each group that has a namespace, ascending, with its state through this controller's
      // port and (unless RGO) its NSIDs; CHGCNT counts that port's changes.
      if (discovery || !subsys_.ana_reporting() || !port_) break;
      const bool groups_only = sqe.cdw10 & kLogAnaReturnGroupsOnly;
      const std::vector<Namespace*> nss = subsys_.namespaces();
      const std::vector<uint32_t> groups = subsys_.ana_groups();
      const uint64_t chgcnt = port_->change_count.load(std::memory_order_relaxed);
      scratch_.assign(sizeof(AnaLogHeader) + groups.size() * sizeof(AnaGroupDescriptor) +
                          (groups_only ? 0 : nss.size() * sizeof(uint32_t)),
                      0);
      AnaLogHeader h{};
      h.chgcnt = chgcnt;
      h.ngrps = uint16_t(groups.size());
      std::memcpy(scratch_.data(), &h, sizeof(h));
      size_t off = sizeof(h);
      for (uint32_t g : groups) {
        AnaGroupDescriptor d{};
        d.anagrpid = g;
        d.chgcnt = chgcnt;
        d.state = uint8_t(port_->state(g));
        const size_t desc_off = off;
        off += sizeof(d);
        if (!groups_only)
          for (const Namespace* ns : nss)
            if (ns->anagrpid == g) {
              std::memcpy(scratch_.data() + off, &ns->nsid, sizeof(uint32_t));
              off += sizeof(uint32_t);
              ++d.nnsids;
            }
        std::memcpy(scratch_.data() + desc_off, &d, sizeof(d));
      }
      break;
    }
    case LogPageId::CommandEffects: {
      if (discovery) break;
      if ((sqe.cdw14 >> 24) != kCsiNvm) {
        st = sc::InvalidField;
        return;
      }
      scratch_.assign(sizeof(CommandEffectsLog), 0);
      auto* e = reinterpret_cast<CommandEffectsLog*>(scratch_.data());
      for (AdminOpcode op : {AdminOpcode::GetLogPage, AdminOpcode::Identify, AdminOpcode::Abort,
                             AdminOpcode::SetFeatures, AdminOpcode::GetFeatures, AdminOpcode::AsyncEventRequest,
                             AdminOpcode::KeepAlive})
        e->admin[uint8_t(op)] = kEffectsCsupp;
      e->io[uint8_t(IoOpcode::Flush)] = kEffectsCsupp;
      e->io[uint8_t(IoOpcode::Read)] = kEffectsCsupp;
      e->io[uint8_t(IoOpcode::Verify)] = kEffectsCsupp;
      e->io[uint8_t(IoOpcode::Compare)] = kEffectsCsupp;
      for (IoOpcode op : {IoOpcode::ReservationRegister, IoOpcode::ReservationReport, IoOpcode::ReservationAcquire,
                          IoOpcode::ReservationRelease})
        e->io[uint8_t(op)] = kEffectsCsupp;
      // Deallocated blocks read as zeros (DLFEAT), so Dataset Management changes content too.
      for (IoOpcode op : {IoOpcode::Write, IoOpcode::WriteZeroes, IoOpcode::DatasetManagement, IoOpcode::Copy})
        e->io[uint8_t(op)] = kEffectsCsupp | kEffectsLbcc;
      break;
    }
    case LogPageId::Error: {
      // Newest first; slots never used are zero (error count 0: an invalid entry).
      scratch_.assign(kErrorLogEntries * sizeof(ErrorLogEntry), 0);
      std::lock_guard lk(errors_mu_);
      const uint64_t n = std::min<uint64_t>(error_count_, kErrorLogEntries);
      for (uint64_t i = 0; i < n; ++i)
        std::memcpy(scratch_.data() + i * sizeof(ErrorLogEntry), &errors_[(error_count_ - 1 - i) % kErrorLogEntries],
                    sizeof(ErrorLogEntry));
      break;
    }
    case LogPageId::SmartHealth: {
      // Controller-wide for NSID 0 and FFFFFFFFh, else one namespace's (LPA bit 0).
      const Namespace* ns = nullptr;
      if (discovery) break;
      if (sqe.nsid != 0 && sqe.nsid != kNsidAll) {
        ns = subsys_.find_namespace(sqe.nsid);
        if (!ns) {
          st = sc::InvalidNamespace;
          return;
        }
      }
      scratch_.assign(sizeof(SmartLog), 0);
      auto* s = reinterpret_cast<SmartLog*>(scratch_.data());
      const QueueStats::Totals t = totals(ns);
      const uint64_t reads = t.reads, writes = t.writes, rbytes = t.read_bytes, wbytes = t.write_bytes;
      s->temperature = 0;  // a software device has no temperature sensor
      s->avail_spare = 100;
      s->spare_thresh = 10;
      // Data units are thousands of 512-byte units, rounded up.
      put_u128(s->data_units_read, (rbytes / 512 + 999) / 1000);
      put_u128(s->data_units_written, (wbytes / 512 + 999) / 1000);
      put_u128(s->host_reads, reads);
      put_u128(s->host_writes, writes);
      put_u128(s->power_cycles, 1);
      put_u128(s->num_err_log_entries, error_count());
      put_u128(s->power_on_hours, (reactor::monotonic_ns() - target_.start_ns) / 3600000000000ull);
      break;
    }
    case LogPageId::FirmwareSlot: {
      if (discovery) break;
      scratch_.assign(sizeof(FirmwareSlotLog), 0);
      auto* f = reinterpret_cast<FirmwareSlotLog*>(scratch_.data());
      f->afi = 1;
      put_padded(f->frs[0], 8, "0.1.0");
      break;
    }
    case LogPageId::ChangedNamespaces: {
      if (discovery) break;
      changed_ns_.build(scratch_);
      consume = LogConsume::ChangedNamespaces;  // once read, the list starts again (as nvmet)
      break;
    }
    case LogPageId::ReservationNotification: {
      // One notice per read, the oldest; an empty log when none is queued.
      if (discovery) break;
      scratch_.assign(sizeof(ReservationNotificationLog), 0);
      if (!resv_notices_.empty()) {
        ReservationNotificationLog n = resv_notices_.front();
        n.available = uint8_t(std::min<size_t>(resv_notices_.size() - 1, 0xFF));
        std::memcpy(scratch_.data(), &n, sizeof(n));
        consume = LogConsume::ReservationNotice;
      }
      break;
    }
    case LogPageId::Discovery: {
      if (!discovery) break;
      uint32_t n = build_discovery_log(nullptr, 0);
      scratch_.assign(n, 0);
      build_discovery_log(scratch_.data(), n);
      break;
    }
  }
  if (scratch_.empty()) {
    st = sc::InvalidLogPage;
    return;
  }
  // A read that fails takes nothing away: the notice, the changed-namespace list and the
  // masked event stay until a read that succeeds. A notice is read once whatever RAE says
  // (the next read gives the next one); RAE keeps the list and the event's mask.
  if (offset >= scratch_.size() || (offset & 3)) {
    st = sc::InvalidField;
    return;
  }
  pending_consume_.retain_event = sqe.cdw10 & kLogRetainAsyncEvent;
  pending_consume_.lid = lid;
  pending_consume_.valid = true;
  // Past the end of the log the host gets zeros.
  const uint32_t copy = uint32_t(std::min<uint64_t>(len, scratch_.size() - offset));
  r.src = scratch_.data() + offset;
  r.data_len = copy;
  r.pad_len = len - copy;
}

// The log page get_log_page() built last has a buffer and goes to the host: what reading it
// takes away goes now. (A read that waited for buffer memory runs again and builds the log
// anew; a read that found none fails: either way nothing was lost on the way.)
void Controller::log_page_delivered() {
  if (!pending_consume_.valid) return;
  const PendingConsume c = pending_consume_;
  pending_consume_ = {};
  if (c.what == LogConsume::ReservationNotice && !resv_notices_.empty()) resv_notices_.erase(resv_notices_.begin());
  if (c.what == LogConsume::ChangedNamespaces && !c.retain_event) {
    changed_ns_.clear();
  }
  if (!c.retain_event) unmask_event_for_log(c.lid);
}

uint32_t Controller::build_discovery_log(uint8_t* buf, uint32_t cap) {
  // Entries: every subsystem this host may use, on every listener, then this discovery
  // subsystem itself on every listener (subtype 3, "current discovery subsystem").
  std::vector<std::pair<const Subsystem*, const Listener*>> entries;
  const auto subsystems = target_.subsystems();
  const auto listeners = target_.listeners();
  for (const auto& s : subsystems) {
    if (!s->hosts().allowed(hostnqn_)) continue;
    // Only the ports this host may use: TLS ports for a host with a PSK, plain ones for one
    // without (a TLS listener admits PSK holders only).
    for (const auto& l : listeners)
      if (s->listeners().reachable_through(l.portid) && s->hosts().channel_allowed(hostnqn_, l.tls_required))
        entries.emplace_back(s.get(), &l);
  }
  for (const auto& l : listeners) entries.emplace_back(target_.discovery.get(), &l);
  uint32_t total = uint32_t(sizeof(DiscoveryLogHeader) + entries.size() * sizeof(DiscoveryLogEntry));
  if (!buf || cap < total) return total;
  auto* h = reinterpret_cast<DiscoveryLogHeader*>(buf);
  h->genctr = target_.genctr.load();
  h->numrec = entries.size();
  h->recfmt = 0;
  auto* e = reinterpret_cast<DiscoveryLogEntry*>(buf + sizeof(DiscoveryLogHeader));
  for (const auto& [s, l] : entries) {
    // A wildcard listener cannot be dialled as such: the host is told the address it reached
    // this discovery controller on, as the Linux target does.
    const bool substitute = l->wildcard && !local_address_.empty();
    const std::string& traddr = substitute ? local_address_ : l->address;
    const bool ipv6 = substitute ? local_address_.find(':') != std::string::npos : l->ipv6;
    e->trtype = kTrtypeTcp;
    e->adrfam = ipv6 ? kAdrfamIpv6 : kAdrfamIpv4;
    e->subtype = s->is_discovery() ? kSubtypeCurrentDiscovery : kSubtypeNvme;
    // Secure channel "required" on a TLS listener; else "not specified", as Linux nvmet says
    // (libnvme turns TLS on for an entry that says "required" or "not required").
    e->treq = kTreqDisableSqFlow | (l->tls_required ? kTreqRequired : 0);
    e->portid = l->portid;
    e->cntlid = kDynamicCntlid;
    e->asqsz = 32;
    put_padded(e->trsvcid, sizeof(e->trsvcid), std::to_string(l->port));
    put_string(e->subnqn, sizeof(e->subnqn), s->nqn());
    put_padded(e->traddr, sizeof(e->traddr), traddr);
    e->eflags = 0;  // no duplicate-returned-information or explicit-persistent-connection flags, as nvmet
    e->tsas[0] = l->tls_required ? kTcpSectypeTls13 : kTcpSectypeNone;
    ++e;
  }
  return total;
}

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

AdminResult Controller::set_features(const Sqe& sqe, const uint8_t* data, uint32_t data_len) {
  AdminResult r;
  const uint8_t fid = sqe.cdw10 & 0xFF;
  if (sqe.cdw10 & (1u << 31)) {
    r.status = sc::FeatureNotSaveable;
    return r;
  }
  switch (fid) {
    case kFeaturePowerManagement:
      if ((sqe.cdw11 & 0x1F) != 0) break;  // NPSS 0: power state 0 is the only one
      power_management_ = sqe.cdw11 & 0xFF;
      return r;
    case kFeatureTemperatureThreshold: {
      unsigned thsel = 0;
      if (!temperature_select(sqe.cdw11, thsel)) break;
      temperature_threshold_[thsel] = uint16_t(sqe.cdw11 & 0xFFFF);
      return r;
    }
    case kFeatureErrorRecovery:
      if (sqe.cdw11 & (1u << 16)) break;  // DULBE: deallocated blocks read as zeros, no error
      error_recovery_ = sqe.cdw11 & 0xFFFF;
      return r;
    case kFeatureNumberOfQueues: {
      uint32_t nsqr = sqe.cdw11 & 0xFFFF, ncqr = sqe.cdw11 >> 16;
      if (nsqr == 0xFFFF || ncqr == 0xFFFF) break;
      uint32_t n = std::min({nsqr + 1, ncqr + 1, target_.config.max_io_queues});
      if (!queues_set_) {
        num_io_queues_.store(n);
        queues_set_ = true;
      }
      n = num_io_queues();
      r.dw0 = (n - 1) | ((n - 1) << 16);
      return r;
    }
    case kFeatureInterruptCoalescing:
      interrupt_coalescing_ = sqe.cdw11 & 0xFFFF;
      return r;
    case kFeatureWriteAtomicity:
      write_atomicity_ = sqe.cdw11 & 1;
      return r;
    case kFeatureKeepAliveTimer:
      kato_ms_ = effective_kato_ms(sqe.cdw11);
      return r;
    case kFeatureVolatileWriteCache: {
      // The cache belongs to the namespaces, which every controller of the subsystem shares,
      // as one drive's cache is shared by its controllers.
      if (subsys_.is_discovery() || !subsys_.volatile_write_cache()) break;
      const bool on = sqe.cdw11 & 1;  // WCE
      const bool was_on = subsys_.write_cache_enabled();
      subsys_.set_write_cache_enabled(on);
      if (was_on != on) log::info("controller {} of {}: volatile write cache turned {} by host {}", cntlid_,
                                  subsys_.nqn(), on ? "on" : "off", hostnqn_);
      // Off: writes from now on are written through, and what the cache already holds is
      // flushed before this command completes.
      r.flush_after = !on;
      return r;
    }
    case kFeatureAsyncEventConfig:
      if (sqe.cdw11 & ~async_events_supported()) break;
      async_event_config_ = sqe.cdw11;
      return r;
    case kFeatureReservationNotificationMask: {
      if (sqe.cdw11 & ~kResvNoticeMaskAll) break;
      if (sqe.nsid == kNsidAll) {  // every namespace
        for (uint32_t n = 1; n <= subsys_.max_namespaces(); ++n)
          if (auto* m = resv_mask(n)) m->store(sqe.cdw11, std::memory_order_relaxed);
        return r;
      }
      auto* m = resv_mask(sqe.nsid);
      if (!m) {
        r.status = sc::InvalidNamespace;
        return r;
      }
      m->store(sqe.cdw11, std::memory_order_relaxed);
      return r;
    }
    case kFeatureReservationPersistence: {
      Namespace* ns = subsys_.find_namespace(sqe.nsid);
      if (!ns) {
        r.status = sc::InvalidNamespace;
        return r;
      }
      if (sqe.cdw11 & ~1u) break;
      std::string err;
      const Reservations::Outcome o = ns->reservations.apply_ptpl(sqe.cdw11 & 1, err);
      if (!o.status.ok()) {
        log::info("controller {}: feature 83h on namespace {}: {}", cntlid_, sqe.nsid, err);
        break;
      }
      r.durable_ticket = o.durable_ticket;  // the connection completes it once written
      return r;
    }
    case kFeatureHostBehaviorSupport: {
      if (data_len != kHostBehaviorLen) {
        r.status = sc::DataSglLengthInvalid;
        return r;
      }
      // ACRE 0 or 1; every other field asks for something the target cannot do.
      if (data[0] > 1 || std::any_of(data + 1, data + kHostBehaviorLen, [](uint8_t b) { return b != 0; })) break;
      host_behavior_acre_ = data[0];
      return r;
    }
    case kFeatureHostIdentifier:
      // Over fabrics the host identifier is the one Connect carried (nvmet answers the same).
      r.status = sc::CommandSequenceError;
      return r;
    default: break;
  }
  r.status = sc::InvalidField;
  return r;
}

AdminResult Controller::get_features(const Sqe& sqe, uint32_t sgl_len) {
  AdminResult r;
  const uint8_t fid = sqe.cdw10 & 0xFF;
  const uint32_t sel = (sqe.cdw10 >> 8) & 0x7;
  const bool discovery = subsys_.is_discovery();
  constexpr uint32_t kChangeable = kFeatureCapChangeable;
  uint32_t current = 0, def = 0, caps = kChangeable;
  switch (discovery && fid != kFeatureKeepAliveTimer && fid != kFeatureAsyncEventConfig ? 0 : fid) {
    case kFeaturePowerManagement: current = power_management_; break;
    case kFeatureTemperatureThreshold: {
      unsigned thsel = 0;
      if (!temperature_select(sqe.cdw11, thsel)) {
        r.status = sc::InvalidField;
        return r;
      }
      const uint32_t which = sqe.cdw11 & (0xFu << 16 | 0x3u << 20);
      current = temperature_threshold_[thsel] | which;
      def = (thsel == 0 ? kTemperatureOverDefault : 0) | which;
      break;
    }
    case kFeatureErrorRecovery: current = error_recovery_; break;
    case kFeatureVolatileWriteCache:
      if (discovery || !subsys_.volatile_write_cache()) {
        r.status = sc::InvalidField;
        return r;
      }
      current = subsys_.write_cache_enabled() ? 1 : 0;
      def = 1;  // on at start
      break;
    case kFeatureNumberOfQueues: {
      uint32_t n = num_io_queues();
      if (n == 0) n = target_.config.max_io_queues;  // what a Set Features would grant
      current = def = (n - 1) | ((n - 1) << 16);
      break;
    }
    case kFeatureInterruptCoalescing: current = interrupt_coalescing_; break;
    case kFeatureWriteAtomicity: current = write_atomicity_; break;
    case kFeatureAsyncEventConfig: current = async_event_config_; break;
    case kFeatureKeepAliveTimer:
      current = kato_ms_;
      def = connect_kato_ms_;
      break;
    case kFeatureReservationNotificationMask: {
      auto* m = resv_mask(sqe.nsid);
      if (!m) {
        r.status = sc::InvalidNamespace;
        return r;
      }
      current = m->load(std::memory_order_relaxed);
      caps |= kFeatureCapNamespaceSpecific;
      break;
    }
    case kFeatureReservationPersistence: {
      const Namespace* ns = subsys_.find_namespace(sqe.nsid);
      if (!ns) {
        r.status = sc::InvalidNamespace;
        return r;
      }
      current = ns->reservations.ptpl() ? 1 : 0;
      caps = kFeatureCapNamespaceSpecific | (ns->reservations.ptpl_capable() ? kChangeable : 0);
      break;
    }
    case kFeatureHostBehaviorSupport: {
      if (discovery || sel > kSelSupportedCapabilities) {
        r.status = sc::InvalidField;
        return r;
      }
      if (sel == kSelSupportedCapabilities) {
        r.dw0 = kChangeable;
        return r;
      }
      scratch_.assign(kHostBehaviorLen, 0);
      scratch_[0] = sel == kSelCurrent ? host_behavior_acre_ : 0;
      r.src = scratch_.data();
      r.data_len = std::min<uint32_t>(sgl_len, kHostBehaviorLen);
      r.pad_len = sgl_len - r.data_len;
      return r;
    }
    case kFeatureHostIdentifier: {
      // 128-bit identifiers only (EXHID), as fabrics require; the data is Connect's host ID.
      if (!(sqe.cdw11 & 1) || sel > kSelSupportedCapabilities) {
        r.status = sc::InvalidField;
        return r;
      }
      if (sel == kSelSupportedCapabilities) return r;  // dw0 0: fixed by Connect
      scratch_.assign(hostid_, hostid_ + sizeof(hostid_));
      r.src = scratch_.data();
      r.data_len = std::min<uint32_t>(sgl_len, sizeof(hostid_));
      r.pad_len = sgl_len - r.data_len;
      return r;
    }
    default:
      r.status = sc::InvalidField;
      return r;
  }
  if (!select_value(sel, current, def, caps, r.dw0)) r.status = sc::InvalidField;
  return r;
}

// Asynchronous events.

void Controller::attach_admin_queue(reactor::Reactor* r, AdminQueueSink* sink) {
  event_sink_ = sink;
  std::lock_guard lk(admin_mu_);
  admin_reactor_ = r;
}

void Controller::detach_admin_queue() {
  event_sink_ = nullptr;
  std::lock_guard lk(admin_mu_);
  admin_reactor_ = nullptr;
}

void Controller::raise(AsyncEventType type, uint8_t info, LogPageId lid, uint32_t nsid) {
  // The event runs on the admin queue's reactor: the event state has one owner. A
  // controller whose admin queue is gone reports nothing (and keeps no reactor alive).
  std::lock_guard lk(admin_mu_);
  if (!admin_reactor_) return;
  admin_reactor_->post([weak = weak_from_this(), type, info, lid, nsid] {
    if (auto self = weak.lock()) self->queue_event(type, info, lid, nsid);
  });
}

void Controller::raise_device_error() {
  if (device_error_posted_.exchange(true, std::memory_order_acq_rel)) return;
  std::lock_guard lk(admin_mu_);
  if (!admin_reactor_) {
    device_error_posted_.store(false, std::memory_order_release);
    return;
  }
  admin_reactor_->post([weak = weak_from_this()] {
    auto self = weak.lock();
    if (!self) return;
    self->device_error_posted_.store(false, std::memory_order_release);
    self->queue_event(AsyncEventType::Error, kAsyncErrorTransientInternal, LogPageId::Error, 0);
  });
}

// The asynchronous events a host may enable (feature 0Bh): SMART critical warnings and the
// notices Identify OAES announces; anything else is refused, as nvmet does.
uint32_t Controller::async_events_supported() const {
  if (subsys_.is_discovery()) return kAecDiscoveryLogChange;
  return kAecSmartWarnings | kAecNamespaceAttribute | (subsys_.ana_reporting() ? kAecAnaChange : 0);
}

bool Controller::event_enabled(AsyncEventType type, LogPageId lid) const {
  switch (type) {
    case AsyncEventType::Error: return true;  // error events cannot be turned off
    case AsyncEventType::SmartHealth: return async_event_config_ & kAecSmartWarnings;
    case AsyncEventType::Notice:
      return async_event_config_ & (lid == LogPageId::Ana         ? kAecAnaChange
                                    : lid == LogPageId::Discovery ? kAecDiscoveryLogChange
                                                                  : kAecNamespaceAttribute);
    case AsyncEventType::IoCommandSpecific: return true;  // reservation notices: feature 83h decides
  }
  return false;
}

Controller::EventSlot* Controller::slot_in(std::array<EventSlot, kEventLogs.size()>& slots, LogPageId lid) {
  for (size_t i = 0; i < kEventLogs.size(); ++i)
    if (kEventLogs[i] == lid) return &slots[i];
  return nullptr;
}

void Controller::queue_event(AsyncEventType type, uint8_t info, LogPageId lid, uint32_t nsid) {
  if (dead.load(std::memory_order_relaxed)) return;
  if (lid == LogPageId::ChangedNamespaces) {
    // The list records every change, reported or not, until the host reads it.
    changed_ns_.add(nsid);
  }
  if (!event_enabled(type, lid)) return;
  EventSlot* slot = slot_in(events_, lid);
  if (!slot) {
    log::error("controller {} of {}: an event cleared by log 0x{:02x} has no slot; dropped", cntlid_, subsys_.nqn(),
               uint8_t(lid));
    return;
  }
  EventSlot& e = *slot;
  if (e.masked || e.pending) return;  // one report per kind until its log is read
  e.pending = true;
  e.type = type;
  e.info = info;
  log::debug("controller {} of {}: asynchronous event type {} info 0x{:02x} (log 0x{:02x})", cntlid_, subsys_.nqn(),
             uint8_t(type), info, uint8_t(lid));
  if (event_sink_) event_sink_->deliver_async_events();
}

bool Controller::take_async_event(uint32_t& dw0) {
  if (aers_held_ == 0) return false;
  for (size_t i = 0; i < events_.size(); ++i) {
    EventSlot& e = events_[i];
    if (!e.pending) continue;
    e.pending = false;
    e.masked = true;
    --aers_held_;
    dw0 = async_event_dw0(e.type, e.info, kEventLogs[i]);
    return true;
  }
  return false;
}

void Controller::unmask_event_for_log(LogPageId lid) {
  if (EventSlot* e = slot_in(events_, lid)) e->masked = false;
}

bool Controller::set_port(uint16_t portid) {
  portid_ = portid;
  if (subsys_.is_discovery()) return subsys_.listeners().reachable_through(portid);
  port_ = subsys_.listeners().port(portid);
  return port_ != nullptr;
}

void Controller::add_reservation_notice(ReservationNotice type, uint32_t nsid) {
  std::atomic<uint32_t>* mask = resv_mask(nsid);
  if (!mask || (mask->load(std::memory_order_relaxed) & (1u << uint8_t(type)))) return;  // masked (82h)
  std::lock_guard lk(admin_mu_);
  if (!admin_reactor_) return;
  admin_reactor_->post([weak = weak_from_this(), type, nsid] {
    auto self = weak.lock();
    if (!self || self->dead.load(std::memory_order_relaxed)) return;
    ReservationNotificationLog n{};
    n.count = ++self->resv_notice_count_;
    if (n.count == 0) n.count = ++self->resv_notice_count_;  // 0 means "no notice"
    n.type = uint8_t(type);
    n.nsid = nsid;
    if (self->resv_notices_.size() == kMaxReservationNotices) self->resv_notices_.erase(self->resv_notices_.begin());
    self->resv_notices_.push_back(n);
    self->queue_event(AsyncEventType::IoCommandSpecific, kAsyncIoReservationLog, LogPageId::ReservationNotification, 0);
  });
}

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
// Identify (identify.hpp): each CNS the target answers, for one controller.
#include "target/identify.hpp"

#include "nvtcp/identify.hpp"
#include "target/admin_commands.hpp"
#include "target/controller.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

namespace {
uint8_t log2_u32(uint32_t v) {
  uint8_t r = 0;
  while ((1u << (r + 1)) <= v) ++r;
  return r;
}
}  // namespace

uint32_t IdentifyData::fill(const Sqe& sqe, uint8_t* buf, Status& st) const {
  std::memset(buf, 0, kIdentifyLen);
  auto cns = static_cast<Cns>(sqe.cdw10 & 0xFF);
  const bool discovery = c_.subsys_.is_discovery();
  switch (cns) {
    case Cns::Controller: return controller(buf);
    case Cns::Namespace: return namespace_data(sqe, buf, st);
    case Cns::ActiveNamespaceList:
      if (discovery) break;
      return active_namespace_list(sqe.nsid, buf, st);
    case Cns::NamespaceDescriptors: return namespace_descriptors(sqe, buf, st);
    case Cns::IoCommandSetController:
      // NVM command set controller data for CSI 0: a Verify reads its range, so it is
      // bounded as a read is (VSL = MDTS); zero elsewhere means "no extra limits".
      if (!discovery && (sqe.cdw11 >> 24) == kCsiNvm) {
        reinterpret_cast<NvmIdentifyController*>(buf)->vsl = uint8_t(log2_u32(c_.mdts_bytes() / 4096));
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
    case Cns::IndependentNamespace: return independent_namespace(sqe, buf, st);
    case Cns::IoCommandSetCombinations: {
      if (discovery) break;
      reinterpret_cast<IoCommandSetVectors*>(buf)->vector[0] = 1u << kCsiNvm;  // NVM only
      return kIdentifyLen;
    }
  }
  st = sc::InvalidField;
  return 0;
}

uint32_t IdentifyData::controller(uint8_t* buf) const {
  const auto& cfg = c_.target_.config;
  const bool discovery = c_.subsys_.is_discovery();
  auto* id = reinterpret_cast<IdentifyController*>(buf);
  put_padded(id->sn, sizeof(id->sn), c_.subsys_.serial());
  put_padded(id->mn, sizeof(id->mn), c_.subsys_.model());
  put_padded(id->fr, sizeof(id->fr), kFirmwareRevision);
  id->rab = 6;
  // May have several controllers (one per host connection); ANA reported if configured.
  id->cmic = kCmicMultiController | (c_.subsys_.ana_reporting() ? kCmicAna : 0);
  id->mdts = uint8_t(log2_u32(cfg.mdts_bytes / 4096));
  id->cntlid = c_.cntlid_;
  id->ver = Controller::kVersion;
  id->oaes = c_.async_events_supported() & ~kAecSmartWarnings;  // the notices it sends
  id->cntrltype = discovery ? kCntrlTypeDiscovery : kCntrlTypeIo;
  id->acl = kAcl;
  id->aerl = kAerl;
  id->frmw = (1u << 1) | 1u;  // one slot, slot 1 read-only
  // SMART per namespace, Commands Supported and Effects log, extended data for Get Log
  // Page (NUMDU, offsets).
  // Not bit 5: it would also promise LIDs 12h and 13h.
  id->lpa = discovery ? (1u << 2) : (1u << 0) | (1u << 1) | (1u << 2);  // + SMART per namespace
  id->elpe = Controller::kErrorLogEntries - 1;  // 0's based
  id->npss = 0;
  id->kas = 1;                 // keep-alive granularity 100 ms
  id->sqes = 0x66;
  id->cqes = 0x44;
  id->maxcmd = uint16_t(std::min<uint32_t>(cfg.max_queue_depth, 0xFFFF));
  id->nn = discovery ? 0 : c_.subsys_.max_namespaces();
  id->mnan = id->nn;
  if (c_.subsys_.ana_reporting()) {
    // Every state can be reported; a namespace keeps its group while attached; group IDs
    // run to max_namespaces, as SPDK numbers them (one per namespace by default).
    id->anatt = kAnaTransitionSeconds;
    id->anacap = kAnacapStates | kAnacapGroupIdFixed;
    id->anagrpmax = id->nanagrpid = c_.subsys_.max_namespaces();
  }
  id->oncs = discovery ? 0
                       : (kOncsCompare | kOncsDsm | kOncsWriteZeroes | kOncsSaveSelect | kOncsReservations |
                          kOncsVerify | kOncsCopy);
  id->ocfs = discovery ? 0 : kOcfsFormat0;
  // A volatile write cache is reported where a namespace has one (a file on storage):
  // the host then sends Flush and FUA, and they are honoured. RAM and null namespaces
  // have none: a completed write is as durable as their medium (see backend::Persistence).
  id->vwc = !discovery && c_.subsys_.volatile_write_cache() ? (kVwcPresent | kVwcFlushAllNamespaces) : 0;
  id->sgls = kSglsSupported;
  put_string(id->subnqn, sizeof(id->subnqn), c_.subsys_.nqn());
  id->ioccsz = discovery ? 0 : (64 + cfg.in_capsule_data) / 16;  // the SQE and in-capsule data of I/O queues
  id->iorcsz = discovery ? 0 : 1;
  id->icdoff = 0;
  id->fcatt = 0;   // dynamic controller model
  id->msdbd = 1;
  id->psd[0].mp = 2500;  // 25 W, in centiwatts: a nominal figure for power state 0
  return kIdentifyLen;
}

uint32_t IdentifyData::namespace_data(const Sqe& sqe, uint8_t* buf, Status& st) const {
  const bool discovery = c_.subsys_.is_discovery();
  uint32_t nsid = sqe.nsid;
  if (discovery || nsid == 0 || nsid == 0xFFFFFFFF) {
    st = sc::InvalidNamespace;
    return 0;
  }
  const Namespace* ns = c_.find_namespace(nsid);
  if (!ns) return kIdentifyLen;  // an inactive NSID returns a zero-filled structure
  auto* id = reinterpret_cast<IdentifyNamespace*>(buf);
  id->nsze = id->ncap = id->nuse = ns->blocks;
  id->nlbaf = 0;
  id->flbas = 0;
  id->dlfeat = 0x1;            // deallocated blocks read as zeros
  id->nmic = 1;                // may be shared by several controllers
  if (c_.subsys_.ana_reporting()) id->anagrpid = ns->anagrpid;
  std::memcpy(id->nguid, ns->nguid, 16);
  std::memcpy(id->eui64, ns->eui64, 8);
  id->lbaf[0].lbads = ns->lbads;
  id->rescap = kRescapAllTypes | kRescapIekey13 | (ns->reservations.ptpl_capable() ? kRescapPtpl : 0);
  id->msrc = uint8_t(kCopyMaxRanges - 1);  // 0's based
  id->mssrl = uint16_t(copy_max_range_blocks(c_.mdts_bytes(), ns->lbads));
  id->mcl = kCopyMaxRanges * id->mssrl;
  return kIdentifyLen;
}

uint32_t IdentifyData::namespace_descriptors(const Sqe& sqe, uint8_t* buf, Status& st) const {
  const bool discovery = c_.subsys_.is_discovery();
  const Namespace* ns = discovery ? nullptr : c_.find_namespace(sqe.nsid);
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

// In a zeroed buffer: the list ends at the first 0.
uint32_t IdentifyData::active_namespace_list(uint32_t after, uint8_t* buf, Status& st) const {
  if (after >= 0xFFFFFFFE) {
    st = sc::InvalidField;
    return 0;
  }
  auto* list = reinterpret_cast<uint32_t*>(buf);
  size_t n = 0;
  for (const auto& ns : c_.subsys_.namespaces()) {
    if (!c_.find_namespace(ns->nsid)) continue;  // masked from this host: not active for it
    if (ns->nsid > after && n < kIdentifyLen / 4) list[n++] = ns->nsid;
  }
  return kIdentifyLen;
}

uint32_t IdentifyData::independent_namespace(const Sqe& sqe, uint8_t* buf, Status& st) const {
  const bool discovery = c_.subsys_.is_discovery();
  if (discovery || sqe.nsid == 0 || sqe.nsid == kNsidAll) {
    st = sc::InvalidNamespace;
    return 0;
  }
  const Namespace* ns = c_.find_namespace(sqe.nsid);
  if (!ns) return kIdentifyLen;  // inactive: zero-filled, as CNS 00h
  auto* id = reinterpret_cast<IndependentIdentifyNamespace*>(buf);
  id->nmic = 1;  // as CNS 00h
  id->nstat = kNstatReady;
  return kIdentifyLen;
}

}  // namespace nvtcp::target

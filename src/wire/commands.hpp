// SPDX-License-Identifier: Apache-2.0
// Builders for the commands nvtcp sends, in one place for the host library, the engine and the
// tests: each returns an SQE with its opcode and command dwords set and everything else zero.
// The queue pair that sends it fills in the command identifier, PSDT and the SGL for its data.
#pragma once
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <string_view>

#include "wire/fabrics.hpp"
#include "wire/features.hpp"
#include "wire/nvme.hpp"

namespace nvtcp::wire::cmd {

namespace detail {
template <typename Command>
Sqe as_sqe(const Command& c) {
  static_assert(sizeof(Command) == sizeof(Sqe));
  Sqe s;
  std::memcpy(&s, &c, sizeof(s));
  return s;
}
}  // namespace detail

// Property Get: 4 bytes, or 8 (CAP) when eight_bytes.
inline Sqe property_get(uint32_t offset, bool eight_bytes) {
  PropertyGetCmd c{};
  c.opc = uint8_t(AdminOpcode::Fabrics);
  c.fctype = uint8_t(FabricsType::PropertyGet);
  c.attrib = eight_bytes ? 1 : 0;
  c.ofst = offset;
  return detail::as_sqe(c);
}

inline Sqe property_set(uint32_t offset, uint64_t value, bool eight_bytes = false) {
  PropertySetCmd c{};
  c.opc = uint8_t(AdminOpcode::Fabrics);
  c.fctype = uint8_t(FabricsType::PropertySet);
  c.attrib = eight_bytes ? 1 : 0;
  c.ofst = offset;
  c.value = value;
  return detail::as_sqe(c);
}

// Connect for queue qid with sqsize entries (given 0's based, as on the wire). Its 1024 bytes of
// data go in the capsule: the SGL is set here, since Connect is the one command whose data
// every transport carries in-capsule.
inline Sqe connect(uint16_t qid, uint16_t sqsize_zero_based, uint32_t kato_ms, uint8_t cattr = 0) {
  ConnectCmd c{};
  c.opc = uint8_t(AdminOpcode::Fabrics);
  c.flags = kSqeFlagsPsdtSgl;
  c.fctype = uint8_t(FabricsType::Connect);
  c.sgl.length = kConnectDataLen;
  c.sgl.type = kSglDataBlockOffset;
  c.qid = qid;
  c.sqsize = sqsize_zero_based;
  c.cattr = cattr;
  c.kato = kato_ms;
  return detail::as_sqe(c);
}

inline ConnectData connect_data(const uint8_t (&hostid)[16], uint16_t cntlid, std::string_view subnqn,
                                std::string_view hostnqn) {
  ConnectData d{};
  std::memcpy(d.hostid, hostid, sizeof(d.hostid));
  d.cntlid = cntlid;
  std::memcpy(d.subnqn, subnqn.data(), std::min(subnqn.size(), sizeof(d.subnqn) - 1));
  std::memcpy(d.hostnqn, hostnqn.data(), std::min(hostnqn.size(), sizeof(d.hostnqn) - 1));
  return d;
}

inline Sqe disconnect() {
  DisconnectCmd c{};
  c.opc = uint8_t(AdminOpcode::Fabrics);
  c.fctype = uint8_t(FabricsType::Disconnect);
  return detail::as_sqe(c);
}

// Identify: CNS in CDW10 bits 7:0 (CNTID would go in 31:16); CDW11 carries the CSI for the
// command set specific CNS values.
inline Sqe identify(uint8_t cns, uint32_t nsid = 0, uint32_t cdw11 = 0) {
  Sqe s{};
  s.opc = uint8_t(AdminOpcode::Identify);
  s.nsid = nsid;
  s.cdw10 = cns;
  s.cdw11 = cdw11;
  return s;
}

// Get Log Page for len bytes (a multiple of 4) from offset. retain: RAE 1, the read leaves the
// log's asynchronous event type masked (nvme-cli's default is 0: the read clears it).
inline Sqe get_log_page(uint8_t lid, uint32_t nsid, uint32_t len, uint64_t offset = 0, bool retain = false) {
  Sqe s{};
  s.opc = uint8_t(AdminOpcode::GetLogPage);
  s.nsid = nsid;
  const uint32_t numd = len / 4 - 1;
  s.cdw10 = lid | (retain ? kLogRetainAsyncEvent : 0) | ((numd & 0xFFFF) << 16);
  s.cdw11 = numd >> 16;
  s.cdw12 = uint32_t(offset);
  s.cdw13 = uint32_t(offset >> 32);
  return s;
}

// Set Features: FID in CDW10 bits 7:0, SV (save) in bit 31.
inline Sqe set_features(uint8_t fid, uint32_t cdw11, bool save = false, uint32_t nsid = 0) {
  Sqe s{};
  s.opc = uint8_t(AdminOpcode::SetFeatures);
  s.nsid = nsid;
  s.cdw10 = fid | (save ? 1u << 31 : 0);
  s.cdw11 = cdw11;
  return s;
}

// Get Features: FID in CDW10 bits 7:0, SEL in bits 10:8.
inline Sqe get_features(uint8_t fid, uint32_t sel = kSelCurrent, uint32_t nsid = 0, uint32_t cdw11 = 0) {
  Sqe s{};
  s.opc = uint8_t(AdminOpcode::GetFeatures);
  s.nsid = nsid;
  s.cdw10 = fid | (sel << 8);
  s.cdw11 = cdw11;
  return s;
}

// Number of Queues: how many I/O submission and completion queues, counted from 1 here
// (0's based on the wire).
inline Sqe set_number_of_queues(uint16_t submission_queues, uint16_t completion_queues) {
  return set_features(kFeatureNumberOfQueues,
                      uint32_t(submission_queues - 1) | (uint32_t(completion_queues - 1) << 16));
}

inline Sqe keep_alive() {
  Sqe s{};
  s.opc = uint8_t(AdminOpcode::KeepAlive);
  return s;
}

inline Sqe async_event_request() {
  Sqe s{};
  s.opc = uint8_t(AdminOpcode::AsyncEventRequest);
  return s;
}

// Abort the command cid of submission queue sqid.
inline Sqe abort(uint16_t sqid, uint16_t cid) {
  Sqe s{};
  s.opc = uint8_t(AdminOpcode::Abort);
  s.cdw10 = sqid | (uint32_t(cid) << 16);
  return s;
}

// Read, Write, Compare, Verify, Write Zeroes: SLBA in CDW10-11, 0's based NLB in CDW12 bits
// 15:0, plus the CDW12 flags given (FUA, ...).
inline Sqe block_range(IoOpcode opc, uint32_t nsid, uint64_t slba, uint32_t nlb, uint32_t cdw12_flags = 0) {
  Sqe s{};
  s.opc = uint8_t(opc);
  s.nsid = nsid;
  s.cdw10 = uint32_t(slba);
  s.cdw11 = uint32_t(slba >> 32);
  s.cdw12 = ((nlb - 1) & 0xFFFF) | cdw12_flags;
  return s;
}

inline Sqe flush(uint32_t nsid) {
  Sqe s{};
  s.opc = uint8_t(IoOpcode::Flush);
  s.nsid = nsid;
  return s;
}

// Dataset Management of ranges ranges (their 16-byte entries are the command's data).
inline Sqe deallocate(uint32_t nsid, uint32_t ranges) {
  Sqe s{};
  s.opc = uint8_t(IoOpcode::DatasetManagement);
  s.nsid = nsid;
  s.cdw10 = ranges - 1;
  s.cdw11 = kDsmDeallocate;
  return s;
}

}  // namespace nvtcp::wire::cmd

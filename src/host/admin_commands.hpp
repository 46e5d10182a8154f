// The admin and fabrics commands the controller builds (bring-up, shutdown, events, scans).
#pragma once
#include <cstdint>
#include <cstring>

#include "wire/fabrics.hpp"
#include "wire/features.hpp"
#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"

namespace nvtcp::host::detail {

inline wire::Sqe property_get_cmd(uint32_t ofst, bool eight) {
  wire::PropertyGetCmd c{};
  c.opc = uint8_t(wire::AdminOpcode::Fabrics);
  c.fctype = uint8_t(wire::FabricsType::PropertyGet);
  c.attrib = eight ? 1 : 0;
  c.ofst = ofst;
  wire::Sqe s;
  std::memcpy(&s, &c, sizeof(s));
  return s;
}

inline wire::Sqe property_set_cmd(uint32_t ofst, uint32_t value) {
  wire::PropertySetCmd c{};
  c.opc = uint8_t(wire::AdminOpcode::Fabrics);
  c.fctype = uint8_t(wire::FabricsType::PropertySet);
  c.ofst = ofst;
  c.value = value;
  wire::Sqe s;
  std::memcpy(&s, &c, sizeof(s));
  return s;
}

inline wire::Sqe identify_cmd(uint8_t cns, uint32_t nsid, uint32_t cdw11) {
  wire::Sqe sqe{};
  sqe.opc = uint8_t(wire::AdminOpcode::Identify);
  sqe.nsid = nsid;
  sqe.cdw10 = cns;
  sqe.cdw11 = cdw11;
  return sqe;
}

inline wire::Sqe set_features_cmd(uint8_t fid, uint32_t cdw11) {
  wire::Sqe sqe{};
  sqe.opc = uint8_t(wire::AdminOpcode::SetFeatures);
  sqe.cdw10 = fid;
  sqe.cdw11 = cdw11;
  return sqe;
}

// retain: RAE 1, the read leaves the event type masked (nvme-cli's default is to clear).
inline wire::Sqe get_log_cmd(uint8_t lid, uint32_t nsid, uint32_t len, uint64_t offset, bool retain) {
  wire::Sqe sqe{};
  sqe.opc = uint8_t(wire::AdminOpcode::GetLogPage);
  sqe.nsid = nsid;
  const uint32_t numd = len / 4 - 1;
  sqe.cdw10 = lid | (retain ? wire::kLogRetainAsyncEvent : 0) | ((numd & 0xFFFF) << 16);
  sqe.cdw11 = numd >> 16;
  sqe.cdw12 = uint32_t(offset);
  sqe.cdw13 = uint32_t(offset >> 32);
  return sqe;
}

}  // namespace nvtcp::host::detail

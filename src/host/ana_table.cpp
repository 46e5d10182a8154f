// SPDX-License-Identifier: Apache-2.0
#include "host/ana_table.hpp"

#include <cstring>

#include <fmt/format.h>

namespace nvtcp::host::detail {

bool parse_ana_log(const uint8_t* log, size_t len, std::vector<uint8_t>& states, uint32_t& groups, std::string& why) {
  states.assign(AnaTable::kCapacity + 1, 0);
  groups = 0;
  nvme::AnaLogHeader h;
  if (len < sizeof h) {
    why = fmt::format("log 0Ch: {} bytes, shorter than its header", len);
    return false;
  }
  std::memcpy(&h, log, sizeof h);
  size_t off = sizeof h;
  for (uint32_t g = 0; g < h.ngrps; ++g) {
    nvme::AnaGroupDescriptor d;
    if (len - off < sizeof d) {
      why = fmt::format("log 0Ch: group descriptor {} of {} runs past the {} bytes read", g + 1, h.ngrps, len);
      return false;
    }
    std::memcpy(&d, log + off, sizeof d);
    off += sizeof d;
    const uint8_t state = d.state & 0x0F;
    switch (nvme::AnaState(state)) {
      case nvme::AnaState::Optimized:
      case nvme::AnaState::NonOptimized:
      case nvme::AnaState::Inaccessible:
      case nvme::AnaState::PersistentLoss:
      case nvme::AnaState::Change: break;
      default:
        why = fmt::format("log 0Ch: group {} in reserved state {:#x}", d.anagrpid, state);
        return false;
    }
    if ((len - off) / 4 < d.nnsids) {
      why = fmt::format("log 0Ch: group {} lists {} namespaces past the {} bytes read", d.anagrpid, d.nnsids, len);
      return false;
    }
    for (uint32_t i = 0; i < d.nnsids; ++i, off += 4) {
      uint32_t nsid;
      std::memcpy(&nsid, log + off, 4);
      if (nsid >= 1 && nsid <= AnaTable::kCapacity) states[nsid] = state;
    }
    ++groups;
  }
  return true;
}

}  // namespace nvtcp::host::detail

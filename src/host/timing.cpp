// SPDX-License-Identifier: Apache-2.0
#include "host/timing.hpp"

#include <algorithm>

#include "nvtcp/properties.hpp"

namespace nvtcp::host::detail {

TimeoutStep command_timeout_step(const CommandTimes& c, uint64_t now, uint64_t limit_ns, bool can_abort) {
  if (now - c.sent_ns < limit_ns) return TimeoutStep::None;
  if (!c.abort_sent && can_abort) return TimeoutStep::Abort;
  if (c.abort_sent && now - c.abort_ns < limit_ns) return TimeoutStep::None;  // the Abort's own time
  return TimeoutStep::Reset;
}

uint64_t keep_alive_interval_ms(uint32_t kato_ms, uint32_t configured_ms) {
  uint64_t ms = configured_ms ? configured_ms : kato_ms / 2;
  return std::max<uint64_t>(ms, 1);
}

uint32_t shutdown_timeout_ms(uint32_t rtd3e_us, uint64_t cap) {
  uint64_t ms = rtd3e_us ? (uint64_t(rtd3e_us) + 999) / 1000 : nvme::prop::cap_timeout_ms(cap);
  return uint32_t(std::clamp<uint64_t>(ms, kMinShutdownWaitMs, kMaxShutdownWaitMs));
}

}  // namespace nvtcp::host::detail

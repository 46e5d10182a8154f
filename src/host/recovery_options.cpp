// SPDX-License-Identifier: Apache-2.0
// Recovery options from seconds (nvme-cli's units) to ControllerOptions: the one conversion
// that the CLI, the engine's configuration and the fio engine share.
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "nvtcp/host.hpp"

namespace nvtcp::host {

namespace {
constexpr double kMaxSeconds = 1e6;  // about 11.6 days, well inside uint32_t milliseconds

// The value in milliseconds, or false when it is not a number of seconds in [min, kMaxSeconds].
bool to_ms(const char* name, double secs, double min, uint32_t& ms, std::string& err) {
  if (!std::isfinite(secs) || secs < min || secs > kMaxSeconds) {
    err = fmt::format("{} must be {:.0f} to {:.0f} seconds, not {}", name, min, kMaxSeconds, secs);
    return false;
  }
  ms = uint32_t(std::llround(secs * 1000.0));
  return true;
}
}  // namespace

bool apply_recovery_seconds(const RecoverySeconds& s, ControllerOptions& o, std::string& err) {
  ControllerOptions out = o;
  uint32_t ms = 0;
  if (s.ctrl_loss_tmo) {
    if (!to_ms("ctrl_loss_tmo", *s.ctrl_loss_tmo, 0, ms, err)) return false;
    out.ctrl_loss_tmo_ms = ms;
  }
  if (s.reconnect_delay) {
    if (!to_ms("reconnect_delay", *s.reconnect_delay, 0, ms, err)) return false;
    if (*s.reconnect_delay == 0) {
      err = "reconnect_delay must be more than 0 seconds";
      return false;
    }
    out.reconnect_delay_ms = ms < 1 ? 1 : ms;
  }
  if (s.fast_io_fail_tmo) {
    if (*s.fast_io_fail_tmo == -1) {
      out.fast_io_fail_tmo_ms = -1;
    } else {
      if (!to_ms("fast_io_fail_tmo", *s.fast_io_fail_tmo, 0, ms, err)) {
        err += " (or -1)";
        return false;
      }
      out.fast_io_fail_tmo_ms = int32_t(ms);
    }
  }
  if (s.keep_alive_tmo) {
    if (!to_ms("keep_alive_tmo", *s.keep_alive_tmo, 0, ms, err)) return false;
    out.kato_ms = ms;
  }
  if (s.io_timeout) {
    if (!to_ms("io_timeout", *s.io_timeout, 0, ms, err)) return false;
    out.io_timeout_ms = ms;
  }
  // Copy back only when every value was accepted, so a refusal changes nothing.
  o = std::move(out);
  return true;
}

}  // namespace nvtcp::host

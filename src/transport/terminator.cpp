// SPDX-License-Identifier: Apache-2.0
#include "transport/terminator.hpp"

namespace nvtcp::transport {

std::span<const uint8_t> Terminator::start(const PduReceiver& rx, wire::PduType type, wire::Fes fes, uint32_t fei,
                                           uint64_t now_ns) {
  // One TermReq per connection: a later error found while lingering is a consequence of the first.
  if (state_ != State::Idle) return {};
  uint32_t len = rx.build_term_req(pdu_, type, fes, fei);
  close_at_ns_ = now_ns + linger_ns_;
  state_ = State::Lingering;
  return {pdu_, len};
}

}  // namespace nvtcp::transport

// SPDX-License-Identifier: Apache-2.0
// The PDUs one NVMe/TCP target queue sends for its requests, what nvmet-tcp's send path is:
// R2Ts within the windows the host and the target allow, C2HData (with its data, a log page's
// padding and the data digest) and CapsuleResp, each with the header digest and the padding
// ICReq negotiated. The request is already in the state its PDUs put it in: TcpQueue changes
// it before it sends.
#pragma once
#include <cstdint>

#include "target_tcp/tcp_request.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::target {

class TcpQueue;

class TcpQueueSend {
 public:
  explicit TcpQueueSend(TcpQueue& queue) : q_(queue) {}
  TcpQueueSend(const TcpQueueSend&) = delete;
  TcpQueueSend& operator=(const TcpQueueSend&) = delete;

  // As many R2Ts as the windows allow for the data r still lacks (none once it is aborted).
  void r2ts(TcpRequest& r);
  // r's C2HData and data, or its CapsuleResp, or both; the stream lets go of the last with
  // r.sent.
  void response(TcpRequest& r);
  // The most the send queue ever held.
  uint64_t peak() const { return peak_; }

 private:
  void fill_header(wire::CommonHeader& ch, wire::PduType type, uint8_t hlen, uint32_t data_len, uint8_t flags);

  TcpQueue& q_;
  uint64_t peak_ = 0;
};

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
// The PDUs a target queue sends for its requests: see tcp_queue_send.hpp.
#include "target_tcp/tcp_queue_send.hpp"

#include <algorithm>
#include <cstring>

#include "target_tcp/tcp_queue.hpp"
#include "util/zeros.hpp"
#include "wire/digest.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

void TcpQueueSend::fill_header(CommonHeader& ch, PduType type, uint8_t hlen, uint32_t data_len, uint8_t flags) {
  fill_common_header(ch, type, hlen, data_len, flags, q_.hdgst_, q_.ddgst_, q_.hpda_);
}

void TcpQueueSend::r2ts(TcpRequest& r) {
  if (r.aborted) return;  // an aborted command asks for no more data
  const uint32_t chunk = q_.target_.config.max_h2c_data;
  const uint32_t max_out = std::min({q_.host_maxr2t_, q_.target_.config.max_r2t_per_command, TcpRequest::kMaxR2T});
  while (r.r2t_next < r.xfer.len) {
    uint32_t sent = (r.r2t_next + chunk - 1) / chunk;
    uint32_t done = r.rx_next / chunk;
    if (sent - done >= max_out) break;
    uint32_t len = std::min(chunk, r.xfer.len - r.r2t_next);
    uint8_t* slot = r.r2t_pdu[sent % TcpRequest::kMaxR2T];
    auto* p = reinterpret_cast<R2TPdu*>(slot);
    std::memset(p, 0, sizeof(R2TPdu));
    fill_header(p->ch, PduType::R2T, sizeof(R2TPdu), 0, 0);
    p->cccid = r.sqe.cid;
    p->ttag = r.index;
    p->r2to = r.r2t_next;
    p->r2tl = len;
    if (q_.hdgst_) seal_header_digest(slot, sizeof(R2TPdu));
    q_.stream_->send(slot, p->ch.plen);
    r.r2t_sent_ns[sent % TcpRequest::kMaxR2T] = q_.deadlines_.clock().now_ns();
    r.r2t_next += len;
  }
}

void TcpQueueSend::response(TcpRequest& r) {
  const Cqe& cqe = r.cqe;
  const bool data = r.tx_len > 0 && r.status.ok();
  const bool success_flag = data && q_.commands_.sq_flow_disabled();
  if (data) {
    const uint32_t total = r.tx_len + r.tx_pad;
    auto* c2h = reinterpret_cast<C2HDataPdu*>(r.c2h_pdu);
    std::memset(r.c2h_pdu, 0, sizeof(C2HDataPdu) + kDigestLen);
    fill_header(c2h->ch, PduType::C2HData, sizeof(C2HDataPdu), total,
                kFlagDataLast | (success_flag ? kFlagDataSuccess : 0));
    c2h->cccid = r.sqe.cid;
    c2h->datao = 0;
    c2h->datal = total;
    uint32_t pdo = c2h->ch.pdo;
    if (q_.hdgst_) seal_header_digest(r.c2h_pdu, sizeof(C2HDataPdu));
    std::memset(r.c2h_pdu + sizeof(C2HDataPdu) + (q_.hdgst_ ? 4 : 0), 0,
                pdo - sizeof(C2HDataPdu) - (q_.hdgst_ ? 4 : 0));
    q_.stream_->send(r.c2h_pdu, pdo);
    // The data, then (a log page's end) zeros from the shared region, then the digest of
    // both; the last segment carries the SendDone.
    reactor::SendDone* done = success_flag ? &r.sent : nullptr;
    Crc32c crc;
    if (q_.ddgst_) crc.update(r.tx_data, r.tx_len);
    q_.stream_->send(r.tx_data, r.tx_len, r.tx_pad || q_.ddgst_ ? nullptr : done);
    for (uint32_t left = r.tx_pad; left > 0;) {
      const uint32_t n = uint32_t(std::min<size_t>(left, kZeroBytesLen));
      if (q_.ddgst_) crc.update(zero_bytes(), n);
      left -= n;
      q_.stream_->send(zero_bytes(), n, left || q_.ddgst_ ? nullptr : done);
    }
    if (q_.ddgst_) {
      const uint32_t v = crc.value();
      std::memcpy(r.c2h_ddgst, &v, 4);
      q_.stream_->send(r.c2h_ddgst, 4, done);
    }
    if (success_flag) {
      peak_ = std::max<uint64_t>(peak_, q_.stream_->queued_bytes());
      return;
    }
  }
  auto* resp = reinterpret_cast<CapsuleRespPdu*>(r.resp_pdu);
  std::memset(r.resp_pdu, 0, sizeof(r.resp_pdu));
  fill_header(resp->ch, PduType::CapsuleResp, sizeof(CapsuleRespPdu), 0, 0);
  std::memcpy(resp->cqe, &cqe, sizeof(cqe));
  if (q_.hdgst_) seal_header_digest(r.resp_pdu, sizeof(CapsuleRespPdu));
  q_.stream_->send(r.resp_pdu, resp->ch.plen, &r.sent);
  peak_ = std::max<uint64_t>(peak_, q_.stream_->queued_bytes());
}


}  // namespace nvtcp::target

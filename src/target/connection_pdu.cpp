// The PDU layer of a target connection: PDUs in (ICReq, CapsuleCmd and its in-capsule data,
// H2CData, H2CTermReq), PDUs out (ICResp, R2T, C2HData, CapsuleResp, C2HTermReq), and the
// request's return to the pool once its response has left.
#include "target/connection.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "target/connection_internal.hpp"
#include "util/log.hpp"
#include "util/zeros.hpp"
#include "wire/digest.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

bool Connection::on_pdu_header(const uint8_t* hdr, uint32_t data_len, uint8_t*& dst) {
  // The connection began closing while the receiver still held bytes of the same segment
  // (an H2CTermReq with PDUs behind it): take nothing more from this host, as on_receive()
  // would not have. Refusing the PDU stops the receiver; on_pdu_error() sends nothing now.
  if (state_ == State::Closing) return false;
  const auto& ch = *reinterpret_cast<const CommonHeader*>(hdr);
  auto type = static_cast<PduType>(ch.type);
  if (type == PduType::H2CTermReq) {
    dst = nullptr;  // the offending header the host quotes back; we only log the status
    return true;
  }
  if (type == PduType::ICReq) {
    if (state_ != State::AwaitICReq) {
      fatal(Fes::PduSequenceError, 0, "ICReq after the connection was initialized");
      return false;
    }
    // Handled here, while the header is still held, so a TermReq can quote it.
    return handle_icreq(*reinterpret_cast<const ICReqPdu*>(hdr));
  }
  if (state_ == State::AwaitICReq) {
    fatal(Fes::PduSequenceError, 0, fmt::format("{} before ICReq", pdu_type_name(type)));
    return false;
  }
  if (type == PduType::CapsuleCmd)
    return capsule_header(*reinterpret_cast<const CapsuleCmdHeader*>(hdr), data_len, dst);
  if (type == PduType::H2CData) return h2c_data_header(*reinterpret_cast<const H2CDataPdu*>(hdr), data_len, dst);
  fatal(Fes::InvalidHeaderField, 0, fmt::format("unexpected {}", pdu_type_name(type)));
  return false;
}

void Connection::on_pdu_complete(const uint8_t* hdr, bool data_ok) {
  const auto& ch = *reinterpret_cast<const CommonHeader*>(hdr);
  switch (static_cast<PduType>(ch.type)) {
    case PduType::ICReq: return;  // answered in on_pdu_header
    case PduType::H2CTermReq: {
      const auto& t = *reinterpret_cast<const TermReqPdu*>(hdr);
      log::warn("{}: host terminated the connection: {} (FES {}, FEI {})", peer_, fes_name(Fes(t.fes), PduType::H2CTermReq),
                unsigned(t.fes), uint32_t(t.fei));
      close("H2CTermReq received");
      return;
    }
    case PduType::CapsuleCmd: {
      Request* r = h2c_req_;
      h2c_req_ = nullptr;
      if (!data_ok) {
        log::warn("{}: data digest error in capsule cid {}", peer_, r->sqe.cid);
        complete(r, sc::TransientTransportError);
        return;
      }
      if (!r->status.ok()) {
        complete(r, r->status);
        return;
      }
      if (r->data_len) r->rx_next = r->data_len;
      set_request_state(r, Request::State::Executing);
      admit(r);
      return;
    }
    case PduType::H2CData:
      h2c_data_complete(*reinterpret_cast<const H2CDataPdu*>(hdr), data_ok);
      return;
    default: return;
  }
}

void Connection::fatal(Fes fes, uint32_t fei, const std::string& why) { receiver_.fail(fes, fei, why); }

void Connection::on_pdu_error(Fes fes, uint32_t fei, const std::string& why) {
  if (state_ == State::Closing) return;  // already on its way out: no TermReq to send
  log::warn("{}: fatal transport error: {} (FES {} {}, FEI {}); sending C2HTermReq", peer_, why, unsigned(fes),
            fes_name(fes, PduType::C2HTermReq), fei);
  set_state(State::Closing);
  // The same TermReq-and-linger piece as the host's. The target closes as soon as its C2HTermReq
  // has left (term_sent_), as nvmet and SPDK do; the linger only bounds a send that never leaves.
  const auto pdu = terminator_.start(receiver_, PduType::C2HTermReq, fes, fei, deadlines_.clock().now_ns());
  if (pdu.empty()) return;
  stream_->send(pdu.data(), uint32_t(pdu.size()), &term_sent_);
  deadlines_.arm(Deadline::TermReqLinger, terminator_.linger_ns());
}

bool Connection::handle_icreq(const ICReqPdu& req) {
  if (req.pfv != kPfv) {
    fatal(Fes::UnsupportedParameter, offsetof(ICReqPdu, pfv), fmt::format("ICReq PFV {} unsupported", req.pfv));
    return false;
  }
  if (req.hpda > 31) {
    fatal(Fes::InvalidHeaderField, offsetof(ICReqPdu, hpda), fmt::format("ICReq HPDA {} out of range", req.hpda));
    return false;
  }
  hpda_ = req.hpda;
  host_maxr2t_ = std::min<uint32_t>(req.maxr2t, Request::kMaxR2T - 1) + 1;
  hdgst_ = (req.digest & kIcDigestHeader) && target_.config.allow_hdgst;
  ddgst_ = (req.digest & kIcDigestData) && target_.config.allow_ddgst;
  const ICRespPdu resp = make_icresp(0, hdgst_, ddgst_, target_.config.max_h2c_data);
  static_assert(sizeof(icresp_) == sizeof(resp));
  std::memcpy(icresp_, &resp, sizeof(resp));
  stream_->send(icresp_, sizeof(icresp_));
  receiver_.set_digests(hdgst_, ddgst_);
  set_state(State::AwaitConnect);
  // Connect is due by the deadline the ICReq had: icreq_timeout_ms from accept covers both.
  deadlines_.arm_at(Deadline::Connect, deadlines_.deadline(Deadline::ICReq));
  deadlines_.cancel(Deadline::ICReq);
  log::debug("{}: ICReq hpda {} maxr2t {} hdgst {} ddgst {}", peer_, req.hpda, req.maxr2t, hdgst_, ddgst_);
  return true;
}

uint32_t Connection::max_incapsule() const {
  return (state_ == State::Connected && qid_ != 0) ? target_.config.in_capsule_data : kAdminInCapsule;
}

bool Connection::capsule_header(const CapsuleCmdHeader& pdu, uint32_t data_len, uint8_t*& dst) {
  Request* r = pool_.alloc();
  if (!r && sqsize_ && pool_.size() < size_t(sqsize_) + stream_->held_send_dones()) {
    // Zero-copy sends keep requests whose response has left (so the host may reuse the
    // slot) until the kernel lets go of their pages: the pool grows past the queue depth
    // by at most that many, once, at warm-up.
    pool_.resize(uint32_t(pool_.size()) + 1);
    r = pool_.alloc();
  }
  if (!r) {
    fatal(Fes::PduSequenceError, 0,
          fmt::format("more commands outstanding than the queue depth ({})", pool_.size()));
    return false;
  }
  std::memcpy(&r->sqe, pdu.sqe, sizeof(Sqe));
  r->status = sc::Success;
  r->dw0 = r->dw1 = 0;
  r->data_len = 0;
  r->rx_next = 0;
  r->r2t_next = 0;
  r->tx_data = nullptr;
  r->tx_len = 0;
  r->tx_pad = 0;
  r->aborted = false;
  r->fence_counted = r->fence_owner = false;
  r->fused_partner = nullptr;
  if (sqsize_) sqhd_ = uint16_t((sqhd_ + 1) % sqsize_);
  h2c_req_ = r;
  if (data_len == 0) return true;
  // In-capsule data: check the SGL now, and drop the bytes of a bad one as they arrive.
  const SglDescriptor& sgl = r->sqe.sgl;
  if (data_len > max_incapsule()) r->status = sc::DataSglLengthInvalid;
  else if (sgl.type != kSglDataBlockOffset) r->status = sc::SglDescriptorTypeInvalid;
  else if (sgl.addr != 0) r->status = sc::SglOffsetInvalid;
  else if (sgl.length != data_len) r->status = sc::DataSglLengthInvalid;
  else if (BufferResult br = ensure_buffer(r, qid_ && ctrl_ ? buffer_bytes_for(r->sqe, data_len, ctrl_->mdts_bytes())
                                                   : data_len);
           br != BufferResult::Ok) {
    // The data is on its way and has nowhere to wait: drop it, and ask for a retry.
    r->status = br == BufferResult::Wait ? kCommandInterrupted : sc::InternalError;
    target_.usage.memory_waits.fetch_add(1, std::memory_order_relaxed);
    if (!memory_logged_) {
      log::warn("{}: no buffer memory for {} bytes of in-capsule data (limits: {} per connection, {} in all); "
                "cid {} ends with Command Interrupted, to be retried",
                peer_, data_len, target_.config.max_connection_buffer_memory, target_.config.max_buffer_memory,
                r->sqe.cid);
      memory_logged_ = true;
    }
    dst = nullptr;
    return true;
  }
  if (!r->status.ok()) {
    log::warn("{}: cid {}: bad in-capsule data ({} bytes, SGL type 0x{:02x} length {}): {}", peer_, r->sqe.cid,
              data_len, sgl.type, sgl.length, status_name(r->status));
    dst = nullptr;
    return true;
  }
  r->data_len = data_len;
  dst = r->buf.get();
  return true;
}

bool Connection::h2c_data_header(const H2CDataPdu& pdu, uint32_t data_len, uint8_t*& dst) {
  if (pdu.ttag >= pool_.size() || pool_.at(pdu.ttag)->state() != Request::State::AwaitingH2C) {
    fatal(Fes::InvalidHeaderField, offsetof(H2CDataPdu, ttag),
          fmt::format("H2CData for unknown transfer tag {}", pdu.ttag));
    return false;
  }
  Request* r = pool_.at(pdu.ttag);
  if (r->sqe.cid != pdu.cccid) {
    fatal(Fes::InvalidHeaderField, offsetof(H2CDataPdu, cccid),
          fmt::format("H2CData cccid {} does not match tag {} (cid {})", pdu.cccid, pdu.ttag, r->sqe.cid));
    return false;
  }
  if (pdu.datal != data_len) {
    fatal(Fes::InvalidHeaderField, offsetof(H2CDataPdu, datal),
          fmt::format("H2CData DATAL {} but the PDU carries {} bytes", pdu.datal, data_len));
    return false;
  }
  if (pdu.datal > target_.config.max_h2c_data) {
    fatal(Fes::DataLimitExceeded, 0, fmt::format("H2CData of {} bytes over MAXH2CDATA", pdu.datal));
    return false;
  }
  if (pdu.datao != r->rx_next || uint64_t(pdu.datao) + pdu.datal > r->r2t_next || pdu.datal == 0) {
    fatal(Fes::DataOutOfRange, 0,
          fmt::format("H2CData [{}, +{}) outside the requested window [{}, {})", pdu.datao, pdu.datal, r->rx_next,
                      r->r2t_next));
    return false;
  }
  h2c_req_ = r;
  dst = r->buf.get() + pdu.datao;
  return true;
}

void Connection::h2c_data_complete(const H2CDataPdu& pdu, bool data_ok) {
  Request* r = h2c_req_;
  h2c_req_ = nullptr;
  r->rx_next += pdu.datal;
  if (!data_ok) {
    log::warn("{}: data digest error in H2CData for cid {}", peer_, r->sqe.cid);
    r->status = sc::TransientTransportError;
  }
  if (r->rx_next < r->data_len) {
    send_r2ts(r);
    return;
  }
  set_request_state(r, Request::State::Executing);
  if (r->aborted) complete(r, sc::AbortRequested);
  else if (!r->status.ok()) complete(r, r->status);
  else if (qid_ == 0) execute_admin(r);
  else execute_io(r);
}

void Connection::fill_header(CommonHeader& ch, PduType type, uint8_t hlen, uint32_t data_len, uint8_t flags) {
  fill_common_header(ch, type, hlen, data_len, flags, hdgst_, ddgst_, hpda_);
}

void Connection::send_r2ts(Request* r) {
  const uint32_t chunk = target_.config.max_h2c_data;
  const uint32_t max_out = std::min({host_maxr2t_, target_.config.max_r2t_per_command, Request::kMaxR2T});
  while (r->r2t_next < r->data_len) {
    uint32_t sent = (r->r2t_next + chunk - 1) / chunk;
    uint32_t done = r->rx_next / chunk;
    if (sent - done >= max_out) break;
    uint32_t len = std::min(chunk, r->data_len - r->r2t_next);
    uint8_t* slot = r->r2t_pdu[sent % Request::kMaxR2T];
    auto* p = reinterpret_cast<R2TPdu*>(slot);
    std::memset(p, 0, sizeof(R2TPdu));
    fill_header(p->ch, PduType::R2T, sizeof(R2TPdu), 0, 0);
    p->cccid = r->sqe.cid;
    p->ttag = r->index;
    p->r2to = r->r2t_next;
    p->r2tl = len;
    if (hdgst_) seal_header_digest(slot, sizeof(R2TPdu));
    stream_->send(slot, p->ch.plen);
    r->r2t_sent_ns[sent % Request::kMaxR2T] = deadlines_.clock().now_ns();
    r->r2t_next += len;
  }
}

void Connection::complete(Request* r, Status st) {
  r->status = st;
  if (qid_ != 0) set_.count_io();
  send_response(r);
}

void Connection::send_response(Request* r) {
  set_request_state(r, Request::State::Sending);
  // Failed commands go to the controller's error log; Command Interrupted only asks the
  // host to retry later, and is no error.
  if (!r->status.ok() && ctrl_ && r->status != kCommandInterrupted) ctrl_->record_error(qid_, r->sqe, r->status);
  if (ResponseObserver* o = target_.response_observer.load(std::memory_order_acquire))
    o->on_response(qid_, r->sqe, r->status, r->io);
  const bool data = r->tx_len > 0 && r->status.ok();
  const bool success_flag = data && sq_flow_disabled_;
  if (data) {
    const uint32_t total = r->tx_len + r->tx_pad;
    auto* c2h = reinterpret_cast<C2HDataPdu*>(r->c2h_pdu);
    std::memset(r->c2h_pdu, 0, sizeof(C2HDataPdu) + kDigestLen);
    fill_header(c2h->ch, PduType::C2HData, sizeof(C2HDataPdu), total,
                kFlagDataLast | (success_flag ? kFlagDataSuccess : 0));
    c2h->cccid = r->sqe.cid;
    c2h->datao = 0;
    c2h->datal = total;
    uint32_t pdo = c2h->ch.pdo;
    if (hdgst_) seal_header_digest(r->c2h_pdu, sizeof(C2HDataPdu));
    std::memset(r->c2h_pdu + sizeof(C2HDataPdu) + (hdgst_ ? 4 : 0), 0,
                pdo - sizeof(C2HDataPdu) - (hdgst_ ? 4 : 0));
    stream_->send(r->c2h_pdu, pdo);
    // The data, then (a log page's end) zeros from the shared region, then the digest of
    // both; the last segment carries the SendDone.
    reactor::SendDone* done = success_flag ? &r->sent : nullptr;
    Crc32c crc;
    if (ddgst_) crc.update(r->tx_data, r->tx_len);
    stream_->send(r->tx_data, r->tx_len, r->tx_pad || ddgst_ ? nullptr : done);
    for (uint32_t left = r->tx_pad; left > 0;) {
      const uint32_t n = uint32_t(std::min<size_t>(left, kZeroBytesLen));
      if (ddgst_) crc.update(zero_bytes(), n);
      left -= n;
      stream_->send(zero_bytes(), n, left || ddgst_ ? nullptr : done);
    }
    if (ddgst_) {
      const uint32_t v = crc.value();
      std::memcpy(r->c2h_ddgst, &v, 4);
      stream_->send(r->c2h_ddgst, 4, done);
    }
    if (success_flag) {
      send_peak_ = std::max<uint64_t>(send_peak_, stream_->queued_bytes());
      return;
    }
  }
  auto* resp = reinterpret_cast<CapsuleRespPdu*>(r->resp_pdu);
  std::memset(r->resp_pdu, 0, sizeof(r->resp_pdu));
  fill_header(resp->ch, PduType::CapsuleResp, sizeof(CapsuleRespPdu), 0, 0);
  Cqe cqe{};
  cqe.dw0 = r->dw0;
  cqe.dw1 = r->dw1;
  cqe.sqhd = sq_flow_disabled_ ? 0 : sqhd_;
  cqe.sqid = qid_;
  cqe.cid = r->sqe.cid;
  cqe.status = r->status.to_cqe(r->status != kCommandInterrupted);
  std::memcpy(resp->cqe, &cqe, sizeof(cqe));
  if (hdgst_) seal_header_digest(r->resp_pdu, sizeof(CapsuleRespPdu));
  stream_->send(r->resp_pdu, resp->ch.plen, &r->sent);
  send_peak_ = std::max<uint64_t>(send_peak_, stream_->queued_bytes());
}

void Connection::release(Request* r) {
  // Admin and discovery commands are few and far between: their buffers (log pages up to
  // MDTS) go back at once instead of waiting, idle, for the next one.
  pool_.release(r, qid_ == 0);
  if (wait_head_) reactor_.defer(&resume_d_);
  if (close_after_send_) {
    close_after_send_ = false;
    close("host sent Disconnect");
  }
}

}  // namespace nvtcp::target

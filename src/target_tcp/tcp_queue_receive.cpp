// SPDX-License-Identifier: Apache-2.0
// The PDUs a target queue receives: see tcp_queue_receive.hpp.
#include "target_tcp/tcp_queue_receive.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "target_tcp/tcp_queue.hpp"
#include "util/log.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

bool TcpQueueReceive::on_pdu_header(const uint8_t* hdr, uint32_t data_len, uint8_t*& dst) {
  // The connection began closing while the receiver still held bytes of the same segment
  // (an H2CTermReq with PDUs behind it): take nothing more from this host, as TcpQueue::on_receive()
  // would not have. Refusing the PDU stops the receiver; on_pdu_error() sends nothing now.
  if (q_.state_ == TcpQueue::State::Closing) return false;
  const auto& ch = *reinterpret_cast<const CommonHeader*>(hdr);
  auto type = static_cast<PduType>(ch.type);
  if (type == PduType::H2CTermReq) {
    dst = nullptr;  // the offending header the host quotes back; we only log the status
    return true;
  }
  if (type == PduType::ICReq) {
    if (q_.state_ != TcpQueue::State::AwaitICReq) {
      fatal(Fes::PduSequenceError, 0, "ICReq after the connection was initialized");
      return false;
    }
    // Handled here, while the header is still held, so a TermReq can quote it.
    return handle_icreq(*reinterpret_cast<const ICReqPdu*>(hdr));
  }
  if (q_.state_ == TcpQueue::State::AwaitICReq) {
    fatal(Fes::PduSequenceError, 0, fmt::format("{} before ICReq", pdu_type_name(type)));
    return false;
  }
  if (type == PduType::CapsuleCmd)
    return capsule_header(*reinterpret_cast<const CapsuleCmdHeader*>(hdr), data_len, dst);
  if (type == PduType::H2CData) return h2c_data_header(*reinterpret_cast<const H2CDataPdu*>(hdr), data_len, dst);
  fatal(Fes::InvalidHeaderField, 0, fmt::format("unexpected {}", pdu_type_name(type)));
  return false;
}

void TcpQueueReceive::on_pdu_complete(const uint8_t* hdr, bool data_ok) {
  const auto& ch = *reinterpret_cast<const CommonHeader*>(hdr);
  switch (static_cast<PduType>(ch.type)) {
    case PduType::ICReq: return;  // answered in on_pdu_header
    case PduType::H2CTermReq: {
      const auto& t = *reinterpret_cast<const TermReqPdu*>(hdr);
      log::event(log::Level::Warn, "termreq",
                 {{"address", q_.link_.peer}, {"direction", "received"}, {"fes", std::to_string(unsigned(t.fes))},
                  {"fei", std::to_string(uint32_t(t.fei))}},
                 "{}: host terminated the connection: {} (FES {}, FEI {})", q_.link_.peer,
                 fes_name(Fes(t.fes), PduType::H2CTermReq), unsigned(t.fes), uint32_t(t.fei));
      q_.close("H2CTermReq received");
      return;
    }
    case PduType::CapsuleCmd: {
      TcpRequest& r = *h2c_req_;
      h2c_req_ = nullptr;
      if (!data_ok) {
        log::warn("{}: data digest error in capsule cid {}", q_.link_.peer, r.sqe.cid);
        q_.fail(r, sc::TransientTransportError);
        return;
      }
      if (!r.status.ok()) {
        q_.fail(r, r.status);
        return;
      }
      q_.process(r);
      return;
    }
    case PduType::H2CData:
      h2c_data_complete(*reinterpret_cast<const H2CDataPdu*>(hdr), data_ok);
      return;
    default: return;
  }
}

void TcpQueueReceive::fatal(Fes fes, uint32_t fei, const std::string& why) { q_.receiver_.fail(fes, fei, why); }

void TcpQueueReceive::on_pdu_error(Fes fes, uint32_t fei, const std::string& why) {
  if (q_.state_ == TcpQueue::State::Closing) return;  // already on its way out: no TermReq to send
  log::event(log::Level::Warn, "termreq",
             {{"address", q_.link_.peer}, {"direction", "sent"}, {"fes", std::to_string(unsigned(fes))},
              {"fei", std::to_string(fei)}, {"reason", why}},
             "{}: fatal transport error: {} (FES {} {}, FEI {}); sending C2HTermReq", q_.link_.peer, why, unsigned(fes),
             fes_name(fes, PduType::C2HTermReq), fei);
  q_.set_state(TcpQueue::State::Closing);
  // The same TermReq-and-linger piece as the host's. The target closes as soon as its C2HTermReq
  // has left (the queue's term_sent_), as nvmet and SPDK do; the linger only bounds a send that never leaves.
  const auto pdu =
      q_.terminator_.start(q_.receiver_, PduType::C2HTermReq, fes, fei, q_.deadlines_.clock().now_ns());
  if (pdu.empty()) return;
  q_.stream_->send(pdu.data(), uint32_t(pdu.size()), &q_.term_sent_);
  q_.deadlines_.arm(TcpQueue::Deadline::TermReqLinger, q_.terminator_.linger_ns());
}

bool TcpQueueReceive::handle_icreq(const ICReqPdu& req) {
  if (req.pfv != kPfv) {
    fatal(Fes::UnsupportedParameter, offsetof(ICReqPdu, pfv), fmt::format("ICReq PFV {} unsupported", req.pfv));
    return false;
  }
  if (req.hpda > 31) {
    fatal(Fes::InvalidHeaderField, offsetof(ICReqPdu, hpda), fmt::format("ICReq HPDA {} out of range", req.hpda));
    return false;
  }
  q_.hpda_ = req.hpda;
  q_.host_maxr2t_ = std::min<uint32_t>(req.maxr2t, TcpRequest::kMaxR2T - 1) + 1;
  q_.hdgst_ = (req.digest & kIcDigestHeader) && q_.target_.config.allow_hdgst;
  q_.ddgst_ = (req.digest & kIcDigestData) && q_.target_.config.allow_ddgst;
  const ICRespPdu resp = make_icresp(0, q_.hdgst_, q_.ddgst_, q_.target_.config.max_h2c_data);
  static_assert(sizeof(icresp_) == sizeof(resp));
  std::memcpy(icresp_, &resp, sizeof(resp));
  q_.stream_->send(icresp_, sizeof(icresp_));
  q_.receiver_.set_digests(q_.hdgst_, q_.ddgst_);
  q_.describe_link();
  q_.set_state(TcpQueue::State::Ready);
  // Connect is due by the deadline the ICReq had: icreq_timeout_ms from accept covers both.
  q_.deadlines_.arm_at(TcpQueue::Deadline::Connect, q_.deadlines_.deadline(TcpQueue::Deadline::ICReq));
  q_.deadlines_.cancel(TcpQueue::Deadline::ICReq);
  log::debug("{}: ICReq hpda {} maxr2t {} hdgst {} ddgst {}", q_.link_.peer, req.hpda, req.maxr2t, q_.hdgst_,
             q_.ddgst_);
  return true;
}

bool TcpQueueReceive::capsule_header(const CapsuleCmdHeader& pdu, uint32_t data_len, uint8_t*& dst) {
  TcpRequest* found = q_.pool_.alloc();
  const uint16_t sqsize = q_.commands_.sqsize();
  // A request stays Sending until the stream lets go of its response, but the host may have
  // it already and reuse the slot: the kernel copies a batch of responses into the socket and
  // delivers the first ones (loopback: at once) before the send completes, which on a loaded
  // machine (socket memory short, the batch waiting for it) is long enough for the host's next
  // commands to arrive first; zero-copy sends hold theirs until the kernel lets go of the pages.
  // So the pool grows past the queue depth while fewer than sqsize commands are outstanding
  // besides those Sending, and never past twice the depth plus what the stream may hold after
  // delivery (zero-copy: 128 KiB reads at QD32 over loopback needed more than twice the depth,
  // and a conforming host was cut off). A host that stops reading fills the Sending set with
  // responses it never takes; the bound keeps that finite.
  const size_t sending = q_.pool_.count(TcpRequest::State::Sending);
  const size_t sending_allowed = size_t(sqsize) + q_.stream_->max_sends_held_after_delivery();
  if (!found && sqsize && q_.pool_.size() < size_t(sqsize) + std::min(sending, sending_allowed)) {
    q_.pool_.resize(uint32_t(q_.pool_.size()) + 1);
    found = q_.pool_.alloc();
  }
  if (!found) {
    fatal(Fes::PduSequenceError, 0,
          fmt::format("more commands outstanding than the queue depth ({})", q_.pool_.size()));
    return false;
  }
  TcpRequest& r = *found;
  r.start(q_.clock().turn_ns(q_.reactor_));
  std::memcpy(&r.sqe, pdu.sqe, sizeof(Sqe));
  q_.outstanding_bytes_ += r.sqe.sgl.length;
  q_.note_load();
  r.rx_next = 0;
  r.r2t_next = 0;
  h2c_req_ = &r;
  if (data_len == 0) return true;
  // In-capsule data: check the SGL now, and drop the bytes of a bad one as they arrive.
  const SglDescriptor& sgl = r.sqe.sgl;
  if (data_len > q_.commands_.max_in_capsule()) r.status = sc::DataSglLengthInvalid;
  else if (sgl.type != kSglDataBlockOffset) r.status = sc::SglDescriptorTypeInvalid;
  else if (sgl.addr != 0) r.status = sc::SglOffsetInvalid;
  else if (sgl.length != data_len) r.status = sc::DataSglLengthInvalid;
  else if (TcpQueue::BufferResult br = q_.ensure_buffer(r, q_.commands_.in_capsule_buffer(r.sqe, data_len));
           br != TcpQueue::BufferResult::Ok) {
    // The data is on its way and has nowhere to wait: drop it, and ask for a retry.
    r.status = br == TcpQueue::BufferResult::Wait ? kCommandInterrupted : sc::InternalError;
    q_.target_.usage.memory_waits.fetch_add(1, std::memory_order_relaxed);
    if (!q_.memory_logged_) {
      log::warn("{}: no buffer memory for {} bytes of in-capsule data (limits: {} per connection, {} in all); "
                "cid {} ends with Command Interrupted, to be retried",
                q_.link_.peer, data_len, q_.target_.config.max_connection_buffer_memory,
                q_.target_.config.max_buffer_memory, r.sqe.cid);
      q_.memory_logged_ = true;
    }
    dst = nullptr;
    return true;
  }
  if (!r.status.ok()) {
    log::warn("{}: cid {}: bad in-capsule data ({} bytes, SGL type 0x{:02x} length {}): {}", q_.link_.peer, r.sqe.cid,
              data_len, sgl.type, sgl.length, status_name(r.status));
    dst = nullptr;
    return true;
  }
  r.capsule_len = data_len;
  r.rx_next = data_len;
  dst = r.buf;
  return true;
}

bool TcpQueueReceive::h2c_data_header(const H2CDataPdu& pdu, uint32_t data_len, uint8_t*& dst) {
  if (pdu.ttag >= q_.pool_.size() || q_.pool_.at(pdu.ttag)->state() != TcpRequest::State::AwaitingH2C) {
    fatal(Fes::InvalidHeaderField, offsetof(H2CDataPdu, ttag),
          fmt::format("H2CData for unknown transfer tag {}", pdu.ttag));
    return false;
  }
  TcpRequest* r = q_.pool_.at(pdu.ttag);
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
  if (pdu.datal > q_.target_.config.max_h2c_data) {
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
  dst = r->xfer.buffer ? r->buf + pdu.datao : nullptr;  // none: a device that ignores the data
  return true;
}

void TcpQueueReceive::h2c_data_complete(const H2CDataPdu& pdu, bool data_ok) {
  TcpRequest& r = *h2c_req_;
  h2c_req_ = nullptr;
  r.rx_next += pdu.datal;
  if (!data_ok) {
    log::warn("{}: data digest error in H2CData for cid {}", q_.link_.peer, r.sqe.cid);
    r.status = sc::TransientTransportError;
  }
  // An aborted transfer ends with the data already asked for; otherwise with all of it.
  const uint32_t wanted = r.aborted ? r.r2t_next : r.xfer.len;
  if (r.rx_next < wanted) {
    q_.send_.r2ts(r);
    return;
  }
  q_.process(r);
}

}  // namespace nvtcp::target

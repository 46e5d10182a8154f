// SPDX-License-Identifier: Apache-2.0
#include "transport/pdu_receiver.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace nvtcp::transport {

using namespace nvtcp::wire;

namespace {
bool accepted_by(Side side, uint8_t type) {
  switch (static_cast<PduType>(type)) {
    case PduType::ICReq:
    case PduType::H2CTermReq:
    case PduType::CapsuleCmd:
    case PduType::H2CData: return side == Side::Target;
    case PduType::ICResp:
    case PduType::C2HTermReq:
    case PduType::CapsuleResp:
    case PduType::C2HData:
    case PduType::R2T: return side == Side::Host;
  }
  return false;
}

bool is_ic_or_term(uint8_t type) {
  auto t = static_cast<PduType>(type);
  return t == PduType::ICReq || t == PduType::ICResp || t == PduType::H2CTermReq || t == PduType::C2HTermReq;
}
}  // namespace

void PduReceiver::fail(Fes fes, uint32_t fei, const std::string& why) {
  if (state_ == State::Failed) return;
  failed_have_ = (state_ == State::CommonHeader || state_ == State::Header) ? have_ : 0;
  state_ = State::Failed;
  handler_->on_pdu_error(fes, fei, why);
}

bool PduReceiver::feed(const uint8_t* p, size_t n) {
  while (n > 0 && state_ != State::Failed) {
    switch (state_) {
      case State::CommonHeader:
      case State::Header: {
        if (state_ == State::CommonHeader && have_ == 0) need_ = sizeof(CommonHeader);
        uint32_t take = static_cast<uint32_t>(std::min<size_t>(need_ - have_, n));
        std::memcpy(hdr_ + have_, p, take);
        have_ += take;
        p += take;
        n -= take;
        if (have_ < need_) break;
        if (state_ == State::CommonHeader) {
          if (!finish_common_header()) return false;
        } else {
          if (!finish_header()) return false;
        }
        break;
      }
      case State::Padding: {
        uint32_t take = static_cast<uint32_t>(std::min<size_t>(pad_ - have_, n));
        have_ += take;
        p += take;
        n -= take;
        if (have_ == pad_) {
          have_ = 0;
          if (data_len_ > 0) state_ = State::Data;
          else if (pdu_ddgst_) state_ = State::DataDigest;
          else finish_pdu(true);
        }
        break;
      }
      case State::Data: {
        uint32_t take = static_cast<uint32_t>(std::min<size_t>(data_len_ - have_, n));
        if (data_dst_) std::memcpy(data_dst_ + have_, p, take);
        if (pdu_ddgst_) data_crc_.update(p, take);
        have_ += take;
        p += take;
        n -= take;
        if (have_ == data_len_) {
          have_ = 0;
          if (pdu_ddgst_) {
            state_ = State::DataDigest;
          } else {
            finish_pdu(true);
          }
        }
        break;
      }
      case State::DataDigest: {
        uint32_t take = static_cast<uint32_t>(std::min<size_t>(4 - have_, n));
        std::memcpy(ddgst_buf_ + have_, p, take);
        have_ += take;
        p += take;
        n -= take;
        if (have_ == 4) {
          uint32_t got;
          std::memcpy(&got, ddgst_buf_, 4);
          finish_pdu(got == data_crc_.value());
        }
        break;
      }
      case State::Failed: break;
    }
  }
  return state_ != State::Failed;
}

uint32_t PduReceiver::build_term_req(uint8_t* out, PduType type, Fes fes, uint32_t fei) const {
  uint32_t quoted = std::min<uint32_t>(header_bytes_len(), 128);
  std::memset(out, 0, sizeof(TermReqPdu));
  auto* t = reinterpret_cast<TermReqPdu*>(out);
  t->ch.type = uint8_t(type);
  t->ch.hlen = sizeof(TermReqPdu);
  t->ch.plen = uint32_t(sizeof(TermReqPdu) + quoted);  // no digests, PDO 0: the quote follows the header
  t->fes = uint16_t(fes);
  t->fei = fei;
  std::memcpy(out + sizeof(TermReqPdu), hdr_, quoted);
  return t->ch.plen;
}

void PduReceiver::consumed_in_place(size_t n) {
  if (pdu_ddgst_) data_crc_.update(data_dst_ + have_, n);
  have_ += uint32_t(n);
  if (have_ < data_len_) return;
  have_ = 0;
  if (pdu_ddgst_) state_ = State::DataDigest;
  else finish_pdu(true);
}

bool PduReceiver::finish_common_header() {
  CommonHeader ch;
  std::memcpy(&ch, hdr_, sizeof(ch));
  if (!accepted_by(side_, ch.type)) {
    fail(Fes::InvalidHeaderField, offsetof(CommonHeader, type),
         fmt::format("unexpected PDU type 0x{:02x}", ch.type));
    return false;
  }
  auto type = static_cast<PduType>(ch.type);
  if (ch.hlen != expected_hlen(type)) {
    fail(Fes::InvalidHeaderField, offsetof(CommonHeader, hlen),
         fmt::format("{}: hlen {} (expected {})", pdu_type_name(type), ch.hlen, expected_hlen(type)));
    return false;
  }
  if (is_ic_or_term(ch.type)) {
    // IC and TermReq PDUs carry no digests whatever was negotiated.
    pdu_hdgst_ = (ch.flags & kFlagHdgst) && !(type == PduType::ICReq || type == PduType::ICResp);
    pdu_ddgst_ = false;
  } else {
    pdu_hdgst_ = (ch.flags & kFlagHdgst) != 0;
    if (pdu_hdgst_ != hdgst_) {
      fail(Fes::InvalidHeaderField, offsetof(CommonHeader, flags),
           fmt::format("{}: HDGSTF {} but header digest {}", pdu_type_name(type), pdu_hdgst_ ? "set" : "clear",
                       hdgst_ ? "negotiated" : "not negotiated"));
      return false;
    }
    pdu_ddgst_ = (ch.flags & kFlagDdgst) != 0;
  }
  uint32_t header_total = ch.hlen + (pdu_hdgst_ ? kDigestLen : 0);
  if (ch.plen < header_total) {
    fail(Fes::InvalidHeaderField, offsetof(CommonHeader, plen),
         fmt::format("{}: plen {} shorter than its header ({})", pdu_type_name(type), ch.plen, header_total));
    return false;
  }
  if (ch.plen > max_plen_) {
    // The status names the limit from the sender's side: a controller's C2HTermReq has "data
    // transfer limit exceeded"; a host's H2CTermReq uses 05h for "R2T limit exceeded", so the
    // host calls a PDU longer than it takes an invalid PLEN.
    fail(side_ == Side::Target ? Fes::DataLimitExceeded : Fes::InvalidHeaderField, offsetof(CommonHeader, plen),
         fmt::format("{}: plen {} over the limit {}", pdu_type_name(type), ch.plen, max_plen_));
    return false;
  }
  if (type == PduType::ICReq || type == PduType::ICResp) {
    if (ch.plen != 128) {
      fail(Fes::InvalidHeaderField, offsetof(CommonHeader, plen), fmt::format("IC PDU plen {}", ch.plen));
      return false;
    }
  }
  if (ch.plen == header_total) {
    data_len_ = 0;
    pad_ = 0;
    if (pdu_ddgst_) {
      fail(Fes::InvalidHeaderField, offsetof(CommonHeader, flags), "DDGSTF set on a PDU without data");
      return false;
    }
  } else {
    bool term = type == PduType::H2CTermReq || type == PduType::C2HTermReq;
    if (!term) {
      if (pdu_ddgst_ != ddgst_) {
        fail(Fes::InvalidHeaderField, offsetof(CommonHeader, flags),
             fmt::format("{}: DDGSTF {} but data digest {}", pdu_type_name(type), pdu_ddgst_ ? "set" : "clear",
                         ddgst_ ? "negotiated" : "not negotiated"));
        return false;
      }
    }
    // TermReq data (the offending header) starts right after the TermReq header.
    uint32_t pdo = term ? header_total : ch.pdo;
    uint32_t trailer = pdu_ddgst_ ? kDigestLen : 0;
    if (pdo < header_total || uint64_t(pdo) + trailer > ch.plen) {
      fail(Fes::InvalidHeaderField, offsetof(CommonHeader, pdo),
           fmt::format("{}: pdo {} invalid (header {}, plen {})", pdu_type_name(type), ch.pdo, header_total, ch.plen));
      return false;
    }
    pad_ = pdo - header_total;
    data_len_ = ch.plen - pdo - trailer;
  }
  need_ = header_total;
  state_ = State::Header;
  return true;
}

bool PduReceiver::finish_header() {
  CommonHeader ch;
  std::memcpy(&ch, hdr_, sizeof(ch));
  if (pdu_hdgst_) {
    uint32_t got;
    std::memcpy(&got, hdr_ + ch.hlen, 4);
    uint32_t want = crc32c(hdr_, ch.hlen);
    if (got != want) {
      fail(Fes::HeaderDigestError, 0,
           fmt::format("{}: header digest 0x{:08x}, computed 0x{:08x}", pdu_type_name(PduType(ch.type)), got, want));
      return false;
    }
  }
  data_dst_ = nullptr;
  if (!handler_->on_pdu_header(hdr_, data_len_, data_dst_)) {
    if (state_ != State::Failed) fail(Fes::InvalidHeaderField, 0, "PDU rejected");
    return false;
  }
  have_ = 0;
  data_crc_.reset();
  if (pad_ > 0) {
    state_ = State::Padding;
  } else if (data_len_ > 0) {
    state_ = State::Data;
  } else {
    finish_pdu(true);
  }
  return state_ != State::Failed;
}

void PduReceiver::finish_pdu(bool data_ok) {
  have_ = 0;
  state_ = State::CommonHeader;
  handler_->on_pdu_complete(hdr_, data_ok);
}

}  // namespace nvtcp::transport

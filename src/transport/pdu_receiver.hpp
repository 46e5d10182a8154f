// SPDX-License-Identifier: Apache-2.0
// The NVMe/TCP receive path as an explicit state machine, shared by target and host:
//   CommonHeader -> Header (+ header digest) -> Padding -> Data -> DataDigest -> next PDU.
// Bytes may arrive in any split; data is copied straight to where the handler says it
// belongs, so a PDU of any size needs no staging buffer. Every violation ends in one place,
// on_pdu_error, with the fatal error status a TermReq should carry.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "wire/digest.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::transport {

enum class Side { Target, Host };

// Below this much remaining data, receiving into the staging buffer (which may also
// bring the next PDUs in the same call) beats receiving in place.
inline constexpr uint32_t kMinInPlaceBytes = 16 * 1024;  // which side receives (selects the PDU types accepted)

class PduHandler {
 public:
  virtual ~PduHandler() = default;
  // The header (hdr points at hlen bytes, starting with the common header) is complete and
  // its digest verified. data_len is the PDU's data length (0 if none). The handler sets
  // data_dst to where data_len bytes go (nullptr discards them) and returns true, or calls
  // nothing and returns false after deciding the PDU is fatal (it then reports via fail()).
  virtual bool on_pdu_header(const uint8_t* hdr, uint32_t data_len, uint8_t*& data_dst) = 0;
  // Data (if any) has landed; data_ok is false when its digest did not match.
  virtual void on_pdu_complete(const uint8_t* hdr, bool data_ok) = 0;
  // A fatal transport error: the connection must send a TermReq with fes/fei and close.
  virtual void on_pdu_error(wire::Fes fes, uint32_t fei, const std::string& why) = 0;
};

class PduReceiver {
 public:
  enum class State { CommonHeader, Header, Padding, Data, DataDigest, Failed };

  PduReceiver(Side side, PduHandler* handler) : side_(side), handler_(handler) {}

  // After ICReq/ICResp: digests apply to every later PDU.
  void set_digests(bool hdgst, bool ddgst) {
    hdgst_ = hdgst;
    ddgst_ = ddgst;
  }
  // Back to the start of a stream, for a new connection (digests off until negotiated).
  void reset() {
    uint32_t max_plen = max_plen_;
    *this = PduReceiver(side_, handler_);
    max_plen_ = max_plen;
  }
  // Hard cap on plen, guarding against absurd lengths before any handler sees them.
  void set_max_plen(uint32_t v) { max_plen_ = v; }

  // Consumes bytes; returns false once the stream has failed (the rest is ignored).
  bool feed(const uint8_t* p, size_t n);
  // Receiving in place: while in the middle of a PDU's data with at least min_bytes to go,
  // where the rest belongs; the caller receives straight there and reports it with
  // consumed_in_place(), which digests the bytes and moves the machine on.
  bool in_place_window(uint32_t min_bytes, uint8_t*& p, size_t& n) const {
    if (state_ != State::Data || !data_dst_ || data_len_ - have_ < min_bytes) return false;
    p = data_dst_ + have_;
    n = data_len_ - have_;
    return true;
  }
  void consumed_in_place(size_t n);
  // The handler reports a fatal error it found (through on_pdu_error) and stops the machine.
  void fail(wire::Fes fes, uint32_t fei, const std::string& why);

  State state() const { return state_; }
  // How many header bytes are gathered for the PDU being received (a TermReq quotes them).
  uint32_t header_bytes_len() const { return state_ == State::Failed ? failed_have_ : have_; }
  // Writes a TermReq of this type (H2C or C2H) that quotes the header held (at most 128
  // bytes) into out, which must hold kMaxTermReqLen bytes; returns the PDU's length.
  static constexpr uint32_t kMaxTermReqLen = sizeof(wire::TermReqPdu) + 128;
  uint32_t build_term_req(uint8_t* out, wire::PduType type, wire::Fes fes, uint32_t fei) const;
  bool failed() const { return state_ == State::Failed; }

 private:
  bool finish_common_header();
  bool finish_header();
  void finish_pdu(bool data_ok);

  Side side_;
  PduHandler* handler_;
  bool hdgst_ = false, ddgst_ = false;
  uint32_t max_plen_ = 16u << 20;

  State state_ = State::CommonHeader;
  alignas(8) uint8_t hdr_[wire::kMaxHeaderBytes];
  uint32_t have_ = 0;        // bytes gathered in the current state
  uint32_t failed_have_ = 0; // header bytes held when the stream failed
  uint32_t need_ = 0;        // bytes the current state wants
  bool pdu_hdgst_ = false;   // this PDU carries a header digest
  bool pdu_ddgst_ = false;   // this PDU carries a data digest
  uint32_t pad_ = 0;
  uint32_t data_len_ = 0;
  uint8_t* data_dst_ = nullptr;
  uint8_t ddgst_buf_[4];
  wire::Crc32c data_crc_;
};

}  // namespace nvtcp::transport

// SPDX-License-Identifier: Apache-2.0
#include "wire/pdu.hpp"

namespace nvtcp::wire {

const char* pdu_type_name(PduType t) {
  switch (t) {
    case PduType::ICReq: return "ICReq";
    case PduType::ICResp: return "ICResp";
    case PduType::H2CTermReq: return "H2CTermReq";
    case PduType::C2HTermReq: return "C2HTermReq";
    case PduType::CapsuleCmd: return "CapsuleCmd";
    case PduType::CapsuleResp: return "CapsuleResp";
    case PduType::H2CData: return "H2CData";
    case PduType::C2HData: return "C2HData";
    case PduType::R2T: return "R2T";
  }
  return "unknown";
}

const char* fes_name(Fes f, PduType term_req) {
  switch (f) {
    case Fes::InvalidHeaderField: return "invalid PDU header field";
    case Fes::PduSequenceError: return "PDU sequence error";
    case Fes::HeaderDigestError: return "header digest error";
    case Fes::DataOutOfRange: return "data transfer out of range";
    case Fes::R2TLimitExceeded:  // == DataLimitExceeded: 05h means what its sender says
      return term_req == PduType::H2CTermReq ? "R2T limit exceeded" : "data transfer limit exceeded";
    case Fes::UnsupportedParameter: return "unsupported parameter";
  }
  return "unknown";
}

}  // namespace nvtcp::wire

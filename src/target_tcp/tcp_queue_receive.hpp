// SPDX-License-Identifier: Apache-2.0
// The PDUs one NVMe/TCP target queue receives, what nvmet-tcp's receive path is: ICReq (answered
// with ICResp while its header is still held), CapsuleCmd and its in-capsule data, H2CData
// against the windows its R2Ts opened, H2CTermReq; and the fatal errors, which end in a
// C2HTermReq. The queue's PduReceiver hands each PDU here; a PDU that moves a request on hands
// it to TcpQueue::process(), which alone drives the request's state.
#pragma once
#include <cstdint>
#include <string>

#include "target_tcp/tcp_request.hpp"
#include "transport/pdu_receiver.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::target {

class TcpQueue;

class TcpQueueReceive final : public transport::PduHandler {
 public:
  explicit TcpQueueReceive(TcpQueue& queue) : q_(queue) {}
  TcpQueueReceive(const TcpQueueReceive&) = delete;
  TcpQueueReceive& operator=(const TcpQueueReceive&) = delete;

  // PduHandler
  bool on_pdu_header(const uint8_t* hdr, uint32_t data_len, uint8_t*& data_dst) override;
  void on_pdu_complete(const uint8_t* hdr, bool data_ok) override;
  void on_pdu_error(wire::Fes fes, uint32_t fei, const std::string& why) override;

 private:
  bool handle_icreq(const wire::ICReqPdu& pdu);
  bool capsule_header(const wire::CapsuleCmdHeader& pdu, uint32_t data_len, uint8_t*& dst);
  bool h2c_data_header(const wire::H2CDataPdu& pdu, uint32_t data_len, uint8_t*& dst);
  void h2c_data_complete(const wire::H2CDataPdu& pdu, bool data_ok);
  void fatal(wire::Fes fes, uint32_t fei, const std::string& why);

  TcpQueue& q_;
  TcpRequest* h2c_req_ = nullptr;  // request the current CapsuleCmd or H2CData PDU belongs to
  alignas(8) uint8_t icresp_[sizeof(wire::ICRespPdu)];
};

}  // namespace nvtcp::target

// One host queue (admin or I/O): a TCP connection, the PDU state machine, and a request
// pool indexed by command identifier. Nothing here allocates after connect().
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nvtcp/host.hpp"
#include "reactor/tcp_stream.hpp"
#include "transport/pdu_receiver.hpp"
#include "wire/fabrics.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::host::detail {

struct HostRequest {
  enum class State : uint8_t { Free, Outstanding };
  State state = State::Free;
  uint16_t cid = 0;
  bool to_controller = false;
  bool in_capsule = false;
  CompletionFn cb = nullptr;
  void* ctx = nullptr;
  uint8_t* data = nullptr;
  uint32_t len = 0;
  uint32_t c2h_received = 0;      // controller->host bytes received, in order
  uint32_t r2t_next = 0;          // where the next R2T must start
  uint32_t h2c_pdus = 0;          // H2CData PDUs sent for this command
  bool data_error = false;        // a data digest failed: the command cannot succeed
  alignas(8) uint8_t cmd_pdu[sizeof(wire::CapsuleCmdHeader) + wire::kDigestLen + 128];
  uint8_t cmd_ddgst[4];
  uint8_t* h2c_slots = nullptr;   // into QueuePairImpl::h2c_arena_
};

struct QueueParams {
  TransportId trid;
  uint16_t qid = 0;
  uint16_t cntlid = wire::kDynamicCntlid;
  uint32_t depth = 32;            // commands outstanding at once
  uint32_t kato_ms = 0;
  uint8_t hostid[16] = {};
  std::string hostnqn;
  bool hdgst = false;
  bool ddgst = false;
  uint32_t in_capsule_max = 8192; // largest write sent in the capsule
  uint32_t max_transfer = 1u << 20;
  uint32_t timeout_ms = 5000;
  std::string tcp_congestion;
};

class QueuePairImpl final : public reactor::StreamOwner, public transport::PduHandler {
 public:
  QueuePairImpl(reactor::Reactor& r, QueueParams p);
  ~QueuePairImpl() override;

  // TCP connect, ICReq/ICResp, fabrics Connect; runs the reactor until done or timed out.
  bool connect(std::string& err);
  int submit(const wire::Sqe& sqe, void* data, uint32_t len, bool to_controller, CompletionFn cb, void* ctx);
  int poll(uint32_t timeout_us);
  // Closes the connection, failing outstanding commands, and waits for the close to finish.
  void shutdown();

  uint16_t qid() const { return p_.qid; }
  uint16_t cntlid() const { return cntlid_; }
  uint32_t depth() const { return p_.depth; }
  uint32_t outstanding() const { return outstanding_; }
  bool failed() const { return failed_; }
  bool ready() const { return state_ == State::Ready; }
  reactor::Reactor& reactor() { return reactor_; }
  const QueueParams& params() const { return p_; }
  uint32_t maxh2cdata() const { return maxh2cdata_; }

  // Set by whoever created the queue: released (and so the qid returned) when it dies.
  std::shared_ptr<void> lease;
  // Block size of each namespace, for read()/write() that count in blocks.
  std::vector<std::pair<uint32_t, uint32_t>> block_sizes;

  // StreamOwner
  void on_receive(const uint8_t* data, size_t len) override;
  void on_closed(int err) override;
  bool recv_direct(uint8_t*& p, size_t& n) override {
    return !failed_ && receiver_.in_place_window(transport::kMinInPlaceBytes, p, n);
  }
  void on_receive_direct(size_t len) override {
    if (!failed_) receiver_.consumed_in_place(len);
  }
  // PduHandler
  bool on_pdu_header(const uint8_t* hdr, uint32_t data_len, uint8_t*& data_dst) override;
  void on_pdu_complete(const uint8_t* hdr, bool data_ok) override;
  void on_pdu_error(wire::Fes fes, uint32_t fei, const std::string& why) override;

 private:
  enum class State { Idle, TcpConnecting, AwaitICResp, AwaitConnect, Ready, Failed, Closed };

  void fail(const std::string& why);
  void finish(HostRequest* r, const Completion& c);
  void send_h2c(HostRequest* r, uint16_t ttag, uint32_t offset, uint32_t length);
  bool run_until(State want, std::string& err);
  void fill_header(wire::CommonHeader& ch, wire::PduType type, uint8_t hlen, uint32_t data_len, uint8_t flags);
  HostRequest* lookup(uint16_t cid, uint32_t fei_offset);

  reactor::Reactor& reactor_;
  QueueParams p_;
  int fd_ = -1;
  std::unique_ptr<reactor::TcpStream> stream_;
  transport::PduReceiver receiver_;
  State state_ = State::Idle;
  bool failed_ = false;
  bool closed_ = false;
  std::string error_;

  uint8_t cpda_ = 0;
  uint32_t maxh2cdata_ = 0;
  uint16_t cntlid_ = 0;
  Completion connect_result_;

  std::vector<HostRequest> pool_;
  std::vector<HostRequest*> free_;
  std::vector<uint8_t> h2c_arena_;
  uint32_t h2c_slots_per_request_ = 0;
  uint32_t h2c_slot_size_ = 0;
  uint32_t outstanding_ = 0;
  int delivered_ = 0;
  HostRequest* rx_req_ = nullptr;   // request of the PDU being received

  alignas(8) uint8_t icreq_[sizeof(wire::ICReqPdu)];
  alignas(8) uint8_t term_pdu_[transport::PduReceiver::kMaxTermReqLen];
  uint8_t connect_data_[wire::kConnectDataLen];
  reactor::OwnedCompletion<QueuePairImpl> connect_c_;
  int connect_res_ = 1;
};

}  // namespace nvtcp::host::detail

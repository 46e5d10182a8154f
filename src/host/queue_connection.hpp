// SPDX-License-Identifier: Apache-2.0
// One host queue's connection, apart from what the queue sends and receives over it: bringing it
// up (the TCP connect through the ring, the TLS handshake when a PSK is given, ICReq/ICResp,
// the fabrics Connect) and taking it down (a close, or a TermReq and its linger). It holds the
// socket and the stream over it, and is the one place SocketState changes. QueuePairImpl holds
// it by value and sends through it directly: plain connections send without a virtual call.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "host/host_error.hpp"
#include "host/queue_states.hpp"
#include "nvtcp/host.hpp"
#include "reactor/byte_stream.hpp"
#include "reactor/reactor.hpp"
#include "reactor/tcp_stream.hpp"
#include "transport/terminator.hpp"
#include "wire/fabrics.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::tls {
class TlsStream;
}

namespace nvtcp::host::detail {

class QueuePairImpl;

// Outstanding R2Ts per command the host accepts (ICReq MAXR2T + 1).
inline constexpr uint32_t kHostMaxR2T = 4;

class QueueConnection {
 public:
  explicit QueueConnection(QueuePairImpl& qp);
  ~QueueConnection();
  QueueConnection(const QueueConnection&) = delete;
  QueueConnection& operator=(const QueueConnection&) = delete;

  // TCP connect, ICReq/ICResp, fabrics Connect; runs the reactor until done or timed out.
  bool connect(HostError& err);
  // The same connect without waiting for it: the queue comes up as this thread's reactor turns,
  // or fails, at the latest once timeout_ms has passed (see check_unwaited_deadline).
  bool start_unwaited(HostError& err);
  // One attempt: a new socket, connected through the ring; the tick (or run_until) bounds it.
  bool start_connect(HostError& err);
  // A start()ed first connect is bounded by the tick, as run_until() bounds a waited one.
  bool unwaited_first_connect() const;
  void check_unwaited_deadline(uint64_t now_ns);
  // The current attempt has gone on past timeout_ms.
  bool attempt_overdue(uint64_t now_ns) const { return now_ns > attempt_deadline_ns_; }

  // The ICResp's header, checked while the receiver still holds it (so a TermReq can quote it).
  bool take_icresp(const wire::ICRespPdu& ic);
  // After ICResp: the fabrics Connect, with its data in the capsule.
  void send_connect();
  // The queue is associated with its controller (after Connect, and authentication if asked).
  void associated();

  SocketState socket() const { return socket_; }
  // Every change of the socket's state goes through this: it checks the transition and logs it.
  void set_socket(SocketState to);
  void send(const void* data, size_t len, reactor::SendDone* done = nullptr) {
    if (tcp_) tcp_->send(data, len, done);
    else stream_->send(data, len, done);
  }
  bool over_tls() const { return tls_ != nullptr; }
  // The connection closed before its TLS handshake was done: the target refused our key or
  // identity (or speaks no TLS there).
  bool tls_handshake_refused() const { return tls_refused_; }
  // A close (why) that came before the TLS handshake was done: fails the queue for good, since
  // retrying with the same key cannot help, and says so (true). False if no handshake was cut.
  bool fail_unfinished_handshake(const std::string& why);

  // Starts closing an open stream; on_closed() follows. A lingering stream is left to its linger.
  void close();
  // A fatal transport error: a TermReq quoting the header the receiver holds, then the linger.
  void send_term_req(wire::Fes fes, uint32_t fei);
  // Cuts a TermReq's linger short (it passed, or the owner shuts down) and closes.
  void end_linger();
  // The stream's on_closed() came.
  void on_closed();
  // A TCP connect in flight owns its SQE and the socket: abort it (its completion still comes).
  void abort_connect();
  // A closed stream is released (at the tick, outside its own callbacks).
  void release_closed();
  bool kernel_holds_socket() const;

 private:
  // The first connect's opening: resolves the address and starts the TCP connect.
  bool start(HostError& err);
  bool run_until(QueueState want, HostError& err);
  void on_tcp_connected(int res);
  void open_stream();
  static void on_connect_response(void* ctx, const Completion& c);
  static void on_linger_end(reactor::Timer* t);
  std::string where() const;

  QueuePairImpl& qp_;
  int fd_ = -1;
  // The connection's stream: a TcpStream, or a TlsStream over one. tcp_ is the TcpStream when it is
  // the stream itself, so plain connections send without a virtual call.
  std::unique_ptr<reactor::ByteStream> stream_;
  reactor::TcpStream* tcp_ = nullptr;
  tls::TlsStream* tls_ = nullptr;
  SocketState socket_ = SocketState::None;
  // unwaited_: the first connect was start()ed, so no run_until() bounds it: the tick does, until
  // the queue is first associated.
  bool unwaited_ = false;
  bool tls_refused_ = false;
  uint64_t attempt_deadline_ns_ = 0;
  struct LingerTimer : reactor::Timer {
    QueueConnection* conn = nullptr;
  } linger_;                          // the TermReq's linger (see transport::Terminator)
  transport::Terminator terminator_;
  alignas(8) uint8_t icreq_[sizeof(wire::ICReqPdu)];
  uint8_t connect_data_[wire::kConnectDataLen];
  reactor::OwnedCompletion<QueueConnection> connect_c_;
  reactor::Endpoint endpoint_;
};

}  // namespace nvtcp::host::detail

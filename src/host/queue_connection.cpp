// SPDX-License-Identifier: Apache-2.0
#include "host/queue_connection.hpp"

#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "host/queue_pair_impl.hpp"
#include "tls/tls_stream.hpp"
#include "util/log.hpp"

namespace nvtcp::host::detail {

using namespace nvtcp::wire;

namespace {
using SS = SocketState;

constexpr TransitionTable<SS, size_t(SS::kCount)> kSocketTransitions{
    {SS::None, SS::Connecting},
    {SS::Connecting, SS::None},  // the connect failed, or completed after the attempt was given up
    {SS::Connecting, SS::Open},
    {SS::Open, SS::Closing},   // we close it
    {SS::Open, SS::Closed},    // the peer or the network closed it
    {SS::Open, SS::Lingering},       // we sent a TermReq
    {SS::Lingering, SS::Closing},    // the linger passed, or the owner shut the queue down
    {SS::Lingering, SS::Closed},     // the peer closed after reading our TermReq
    {SS::Closing, SS::Closed},
    {SS::Closed, SS::None},    // stream_ released
};
}  // namespace

const char* socket_state_name(SocketState s) {
  constexpr const char* kNames[] = {"None", "Connecting", "Open", "Lingering", "Closing", "Closed"};
  static_assert(std::size(kNames) == size_t(SS::kCount));
  return size_t(s) < size_t(SS::kCount) ? kNames[size_t(s)] : "?";
}

QueueConnection::QueueConnection(QueuePairImpl& qp) : qp_(qp) {
  connect_c_.owner = this;
  connect_c_.fn = [](reactor::Completion* c, int res, uint32_t) {
    static_cast<reactor::OwnedCompletion<QueueConnection>*>(c)->owner->on_tcp_connected(res);
  };
  linger_.conn = this;
  linger_.fn = on_linger_end;
}

QueueConnection::~QueueConnection() {
  qp_.reactor_.cancel_timer(&linger_);
  if (fd_ >= 0) ::close(fd_);
}

std::string QueueConnection::where() const {
  return fmt::format("{}:{} qid {}", qp_.p_.trid.traddr, qp_.p_.trid.trsvcid, qp_.p_.qid);
}

void QueueConnection::set_socket(SocketState to) {
  if (kCheckTransitions && !kSocketTransitions.allows(socket_, to))
    illegal_transition("socket", socket_state_name(socket_), socket_state_name(to), "QueueConnection::set_socket");
  log::debug("{}: socket {} -> {} ({})", where(), socket_state_name(socket_), socket_state_name(to),
             queue_state_name(qp_.state_));
  socket_ = to;
}

bool QueueConnection::run_until(QueueState want, HostError& err) {
  const QueueParams& p = qp_.p_;
  uint64_t deadline = qp_.now() + uint64_t(p.timeout_ms) * kNsPerMs;
  while (qp_.state_ != want && !qp_.failed()) {
    if (qp_.now() > deadline) {
      const char* phase = qp_.state_ == QueueState::TcpConnecting ? "connecting"
                          : qp_.state_ == QueueState::AwaitICResp ? "waiting for ICResp"
                          : qp_.auth_.in_progress()               ? "authenticating"
                                                                  : "waiting for the Connect response";
      err = HostError::make(HostError::Kind::Timeout,
                            fmt::format("{}: timed out after {} ms {}", where(), p.timeout_ms, phase));
      return false;
    }
    qp_.reactor_.run_once(uint32_t(p.clock->poll_period_ns(10 * kNsPerMs) / 1000));
  }
  if (qp_.failed()) {
    err = qp_.error_.context(where());
    return false;
  }
  return true;
}

bool QueueConnection::connect(HostError& err) {
  if (!start(err)) return false;
  if (!run_until(QueueState::Ready, err)) return false;
  qp_.recovery_.arm_tick();
  return true;
}

bool QueueConnection::start(HostError& err) {
  std::string why;
  if (!reactor::resolve(qp_.p_.trid.traddr, qp_.p_.trid.trsvcid, endpoint_, why)) {
    err = HostError::make(HostError::Kind::Address, why);
    qp_.set_state(QueueState::Failed);
    return false;
  }
  if (!start_connect(err)) {
    qp_.set_state(QueueState::Failed);
    return false;
  }
  return true;
}

bool QueueConnection::start_unwaited(HostError& err) {
  if (!start(err)) return false;
  unwaited_ = true;
  qp_.recovery_.arm_tick();
  return true;
}

bool QueueConnection::unwaited_first_connect() const { return unwaited_ && !qp_.recovery_.associated_before(); }

void QueueConnection::check_unwaited_deadline(uint64_t now_ns) {
  if (now_ns > attempt_deadline_ns_)
    qp_.fail_for_good(HostError::make(HostError::Kind::Timeout,
                                      fmt::format("{}: timed out after {} ms connecting", where(), qp_.p_.timeout_ms)));
}

bool QueueConnection::start_connect(HostError& err) {
  const QueueParams& p = qp_.p_;
  fd_ = ::socket(endpoint_.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    err = HostError::system(errno, fmt::format("socket: {}", strerror(errno)));
    return false;
  }
  const int rcvbuf = reactor::receive_buffer_for(p.socket_buffer_bytes, reactor::net_core_rmem_max());
  const int sndbuf = reactor::send_buffer_for(p.send_buffer_bytes, p.socket_buffer_bytes);
  std::string e = reactor::apply_socket_options(fd_, {true, sndbuf, rcvbuf, p.tcp_congestion});
  if (!e.empty()) {
    ::close(fd_);
    fd_ = -1;
    err = HostError::make(HostError::Kind::Address, e);  // an option this socket cannot take
    return false;
  }
  // TCP connect through the ring; the tick (or run_until) bounds it.
  qp_.set_state(QueueState::TcpConnecting);
  set_socket(SocketState::Connecting);
  attempt_deadline_ns_ = qp_.now() + uint64_t(p.timeout_ms) * kNsPerMs;
  io_uring_sqe* sqe = qp_.reactor_.get_sqe();
  io_uring_prep_connect(sqe, fd_, reinterpret_cast<sockaddr*>(&endpoint_.addr), endpoint_.len);
  qp_.reactor_.prep(sqe, &connect_c_);
  return true;
}

void QueueConnection::on_tcp_connected(int res) {
  const bool attempt_wanted = qp_.state_ == QueueState::TcpConnecting;
  if (!attempt_wanted || res < 0) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    set_socket(SocketState::None);
  }
  if (!attempt_wanted) return;  // given up meanwhile
  if (res < 0) {
    qp_.fail(HostError::system(-res, fmt::format("connect to {}: {}", endpoint_.to_string(), strerror(-res))));
    return;
  }
  open_stream();
  set_socket(SocketState::Open);
  qp_.receiver_.reset();
  terminator_.reset();
  stream_->start();

  const QueueParams& p = qp_.p_;
  const ICReqPdu ic = make_icreq(0, p.hdgst, p.ddgst, kHostMaxR2T - 1);
  static_assert(sizeof(icreq_) == sizeof(ic));
  std::memcpy(icreq_, &ic, sizeof(ic));
  qp_.set_state(QueueState::AwaitICResp);
  send(icreq_, sizeof(icreq_));
}

void QueueConnection::open_stream() {
  const QueueParams& p = qp_.p_;
  reactor::Reactor& r = qp_.reactor_;
  if (p.tls_psk) {
    // The ICReq waits in the TLS stream until the handshake is done.
    auto tls = tls::TlsStream::client(r, qp_, *p.tls_psk, where());
    const int fd = fd_;
    tls->attach(
        [&r, fd](reactor::StreamOwner& o) { return std::make_unique<reactor::TcpStream>(r, fd, &o, 256 * 1024); });
    tls->set_kernel_tx(p.ktls);
    tls_ = tls.get();
    tcp_ = nullptr;
    stream_ = std::move(tls);
  } else {
    auto tcp = std::make_unique<reactor::TcpStream>(r, fd_, &qp_, 256 * 1024);
    tcp_ = tcp.get();
    tls_ = nullptr;
    stream_ = std::move(tcp);
  }
  fd_ = -1;  // the stream owns it now
}

bool QueueConnection::take_icresp(const ICRespPdu& ic) {
  const QueueParams& p = qp_.p_;
  transport::PduReceiver& rx = qp_.receiver_;
  const uint8_t asked = ic_digest_bits(p.hdgst, p.ddgst);
  if (ic.pfv != kPfv) {
    rx.fail(Fes::UnsupportedParameter, offsetof(ICRespPdu, pfv), "ICResp PFV");
    return false;
  }
  if (ic.cpda > 31) {
    rx.fail(Fes::InvalidHeaderField, offsetof(ICRespPdu, cpda), "ICResp CPDA");
    return false;
  }
  if (ic.maxh2cdata < 4096 || (ic.maxh2cdata & 3)) {
    rx.fail(Fes::InvalidHeaderField, offsetof(ICRespPdu, maxh2cdata),
            fmt::format("ICResp MAXH2CDATA {} invalid", uint32_t(ic.maxh2cdata)));
    return false;
  }
  if (ic.digest != asked) {
    qp_.fail(
        HostError::make(HostError::Kind::Controller,
                        fmt::format("the target answered digests 0x{:x} to our request 0x{:x}", ic.digest, asked)));
    return false;
  }
  qp_.cpda_ = ic.cpda;
  qp_.maxh2cdata_ = ic.maxh2cdata;
  rx.set_digests(p.hdgst, p.ddgst);
  qp_.set_state(QueueState::AwaitConnect);
  return true;
}

void QueueConnection::send_connect() {
  const QueueParams& p = qp_.p_;
  ConnectCmd cmd{};
  cmd.opc = uint8_t(AdminOpcode::Fabrics);
  cmd.fctype = uint8_t(FabricsType::Connect);
  cmd.recfmt = 0;
  cmd.qid = p.qid;
  cmd.sqsize = uint16_t(p.depth);  // 0's based: depth + 1 entries, so depth fit with flow control on
  cmd.cattr = kConnectAttrDisableSqFlow;
  cmd.kato = p.qid == 0 ? p.kato_ms : 0;
  ConnectData data{};
  std::memcpy(data.hostid, p.hostid, 16);
  data.cntlid = p.cntlid;
  std::memcpy(data.subnqn, p.trid.subnqn.data(), std::min<size_t>(p.trid.subnqn.size(), 255));
  std::memcpy(data.hostnqn, p.hostnqn.data(), std::min<size_t>(p.hostnqn.size(), 255));
  std::memcpy(connect_data_, &data, sizeof(data));
  Sqe sqe;
  std::memcpy(&sqe, &cmd, sizeof(cmd));
  HostRequest* r = &qp_.pool_[p.depth];  // kept for Connect: free whatever the others hold
  qp_.start_request(r, sqe, connect_data_, sizeof(connect_data_), true, on_connect_response, this);
  qp_.send_command(r);
}

void QueueConnection::on_connect_response(void* ctx, const Completion& c) {
  auto* self = static_cast<QueueConnection*>(ctx);
  QueuePairImpl& qp = self->qp_;
  if (qp.state_ != QueueState::AwaitConnect) return;  // the connection went away first
  if (c.status.ok()) {
    qp.cntlid_ = uint16_t(c.dw0 & 0xFFFF);
    if (c.dw0 & (kConnectResultAtr | kConnectResultAscr)) {
      qp.auth_.start(c.dw0);
      return;
    }
    self->associated();
    return;
  }
  qp.fail(HostError::from_status(
      c.status, fmt::format("Connect rejected: {}{}", status_name(c.status),
                            c.status == sc::ConnectInvalidParameters
                                ? fmt::format(" (offset {} in the {})", c.dw0 & 0xFFFF,
                                              (c.dw0 >> 16) & 1 ? "connect data" : "command")
                                : "")));
}

void QueueConnection::associated() {
  qp_.set_state(QueueState::Ready);
  qp_.recovery_.associated();
}

bool QueueConnection::fail_unfinished_handshake(const std::string& why) {
  if (!tls_ || tls_->established()) return false;
  // A handshake that did not finish: the key (ours, or the target's for us) is wrong or
  // missing, or the listener does not speak TLS. Retrying with the same key cannot help.
  const QueueParams& p = qp_.p_;
  tls_refused_ = true;
  const char* hint = p.tls_psk->hash == 2
                         ? "; a Linux target (tlshd 1.0) takes a SHA-384 PSK only bound with SHA-256: see "
                           "--tls-sha256-binder"
                         : "";
  qp_.fail_for_good(HostError::make(
      HostError::Kind::Transport,
      fmt::format("TLS handshake with {}:{} failed: {}{}", p.trid.traddr, p.trid.trsvcid,
                  !tls_->failure().empty() ? tls_->failure()
                                           : why + " (the target refused the PSK identity \"" + p.tls_psk->identity +
                                                 "\", or does not speak TLS on this port)",
                  hint)));
  return true;
}

void QueueConnection::close() {
  if (socket_ != SocketState::Open) return;  // none, lingering, or its close is already under way
  set_socket(SocketState::Closing);
  stream_->close();
}

void QueueConnection::send_term_req(Fes fes, uint32_t fei) {
  if (!stream_ || socket_ != SocketState::Open) return;
  auto pdu = terminator_.start(qp_.receiver_, PduType::H2CTermReq, fes, fei, qp_.now());
  if (!pdu.empty()) {
    send(pdu.data(), pdu.size());
    set_socket(SocketState::Lingering);
    qp_.reactor_.arm_timer(&linger_, terminator_.linger_ns());
  }
}

void QueueConnection::end_linger() {
  if (socket_ != SocketState::Lingering) return;
  qp_.reactor_.cancel_timer(&linger_);
  terminator_.closing();
  set_socket(SocketState::Closing);
  stream_->close();
}

void QueueConnection::on_linger_end(reactor::Timer* t) { static_cast<LingerTimer*>(t)->conn->end_linger(); }

void QueueConnection::on_closed() {
  if (socket_ == SocketState::Lingering) {  // the peer read our TermReq and closed: the linger is over
    qp_.reactor_.cancel_timer(&linger_);
    terminator_.peer_closed();
  }
  set_socket(SocketState::Closed);
}

void QueueConnection::abort_connect() {
  if (socket_ == SocketState::Connecting && fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void QueueConnection::release_closed() {
  if (socket_ != SocketState::Closed) return;
  stream_.reset();
  tcp_ = nullptr;
  tls_ = nullptr;
  set_socket(SocketState::None);
}

bool QueueConnection::kernel_holds_socket() const {
  return socket_ == SocketState::Connecting || socket_ == SocketState::Open || socket_ == SocketState::Lingering ||
         socket_ == SocketState::Closing;
}

}  // namespace nvtcp::host::detail

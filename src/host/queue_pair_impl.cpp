// SPDX-License-Identifier: Apache-2.0
#include "host/queue_pair_impl.hpp"

#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "host/reauthenticate.hpp"
#include "util/log.hpp"
#include "wire/auth.hpp"
#include "wire/digest.hpp"

namespace nvtcp::host::detail {

using namespace nvtcp::wire;

namespace {
constexpr uint32_t kHostMaxR2T = 4;  // outstanding R2Ts per command we accept (ICReq MAXR2T + 1)
constexpr uint64_t kMs = 1'000'000ull;

using QS = QueueState;
using SS = SocketState;

constexpr TransitionTable<QS, size_t(QS::kCount)> kQueueTransitions{
    {QS::Idle, QS::TcpConnecting},
    {QS::Idle, QS::Failed},  // the socket could not be made, or shut down before connect()
    {QS::TcpConnecting, QS::AwaitICResp},
    {QS::TcpConnecting, QS::Disconnected},  // a reconnect attempt's TCP connect failed or timed out
    {QS::TcpConnecting, QS::Failed},        // no stream yet: nothing to wait for
    {QS::AwaitICResp, QS::AwaitConnect},
    {QS::AwaitConnect, QS::Ready},
    // Any state with a stream can lose it: a reconnect attempt is retried (Disconnected), the
    // rest fails. Failed directly when the stream had already closed by itself.
    {QS::AwaitICResp, QS::Disconnected},
    {QS::AwaitICResp, QS::Failing},
    {QS::AwaitICResp, QS::Failed},
    {QS::AwaitConnect, QS::Disconnected},
    {QS::AwaitConnect, QS::Failing},
    {QS::AwaitConnect, QS::Failed},
    {QS::Ready, QS::Disconnected},
    {QS::Ready, QS::Failing},
    {QS::Ready, QS::Failed},
    {QS::Disconnected, QS::TcpConnecting},  // the controller is back: the next attempt
    {QS::Disconnected, QS::Failing},        // ctrl_loss_tmo, or shut down while the old stream still closes
    {QS::Disconnected, QS::Failed},
    {QS::Failing, QS::Failed},  // the stream's close finished: the commands have ended
};

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

// Queue pairs per state, process-wide. Changed only at state changes, never per I/O; relaxed,
// since the counts are read only to look at them.
std::atomic<uint32_t> g_queue_pairs_in_state[size_t(QS::kCount)];
}  // namespace

const char* queue_state_name(QueueState s) {
  constexpr const char* kNames[] = {"Idle",  "TcpConnecting", "AwaitICResp", "AwaitConnect",
                                    "Ready", "Disconnected",  "Failing",     "Failed"};
  static_assert(std::size(kNames) == size_t(QS::kCount));
  return size_t(s) < size_t(QS::kCount) ? kNames[size_t(s)] : "?";
}

bool queue_transition_allowed(QueueState from, QueueState to) { return kQueueTransitions.allows(from, to); }

uint32_t queue_pairs_in_state(QueueState s) {
  return size_t(s) < size_t(QS::kCount) ? g_queue_pairs_in_state[size_t(s)].load(std::memory_order_relaxed) : 0;
}

const char* socket_state_name(SocketState s) {
  constexpr const char* kNames[] = {"None", "Connecting", "Open", "Lingering", "Closing", "Closed"};
  static_assert(std::size(kNames) == size_t(SS::kCount));
  return size_t(s) < size_t(SS::kCount) ? kNames[size_t(s)] : "?";
}

void QueuePairImpl::set_state(State to) {
  if (kCheckTransitions && !kQueueTransitions.allows(state_, to))
    illegal_transition("queue pair", queue_state_name(state_), queue_state_name(to), "QueuePairImpl::set_state");
  log::debug("{}:{} qid {}: {} -> {}", p_.trid.traddr, p_.trid.trsvcid, p_.qid, queue_state_name(state_),
             queue_state_name(to));
  g_queue_pairs_in_state[size_t(state_)].fetch_sub(1, std::memory_order_relaxed);
  g_queue_pairs_in_state[size_t(to)].fetch_add(1, std::memory_order_relaxed);
  state_ = to;
}

void QueuePairImpl::set_socket(SocketState to) {
  if (kCheckTransitions && !kSocketTransitions.allows(socket_, to))
    illegal_transition("socket", socket_state_name(socket_), socket_state_name(to), "QueuePairImpl::set_socket");
  log::debug("{}:{} qid {}: socket {} -> {} ({})", p_.trid.traddr, p_.trid.trsvcid, p_.qid,
             socket_state_name(socket_), socket_state_name(to), queue_state_name(state_));
  socket_ = to;
}

QueuePairImpl::QueuePairImpl(reactor::Reactor& r, QueueParams p, std::shared_ptr<ControllerLink> link)
    : reactor_(r),
      p_(std::move(p)),
      link_(std::move(link)),
      receiver_(transport::Side::Host, this),
      outage_({p_.ctrl_loss_tmo_ms, p_.fast_io_fail_tmo_ms, p_.reconnect_delay_ms}) {
  pool_.resize(p_.depth + 1);
  for (uint32_t i = 0; i <= p_.depth; ++i) pool_[i].cid = uint16_t(i);
  free_.reserve(p_.depth);
  for (uint32_t i = p_.depth; i-- > 0;) free_.push_back(&pool_[i]);
  connect_c_.owner = this;
  connect_c_.fn = [](reactor::Completion* c, int res, uint32_t) {
    static_cast<reactor::OwnedCompletion<QueuePairImpl>*>(c)->owner->on_tcp_connected(res);
  };
  tick_.qp = this;
  tick_.fn = on_tick;
  linger_.qp = this;
  linger_.fn = on_linger_end;
  g_queue_pairs_in_state[size_t(state_)].fetch_add(1, std::memory_order_relaxed);
}

QueuePairImpl::~QueuePairImpl() {
  shutdown();
  reactor_.cancel_timer(&tick_);
  reactor_.cancel_timer(&linger_);
  if (fd_ >= 0) ::close(fd_);
  g_queue_pairs_in_state[size_t(state_)].fetch_sub(1, std::memory_order_relaxed);
}

void QueuePairImpl::shutdown() {
  fail_for_good(HostError::make(HostError::Kind::Transport, "queue pair closed"), FailedBy::Owner);
  end_linger();  // the owner wants the queue gone: no waiting for the peer to take a TermReq
  // A TCP connect in flight owns its SQE and the socket: abort it and wait for it.
  if (socket_ == SocketState::Connecting && fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  uint64_t deadline = now() + 2000 * kMs;
  auto kernel_holds_socket = [this] {
    return socket_ == SocketState::Connecting || socket_ == SocketState::Open || socket_ == SocketState::Lingering ||
           socket_ == SocketState::Closing;
  };
  while (kernel_holds_socket() && now() < deadline) reactor_.run_once(1000);
}

bool QueuePairImpl::run_until(State want, HostError& err) {
  uint64_t deadline = now() + uint64_t(p_.timeout_ms) * kMs;
  while (state_ != want && !failed()) {
    if (now() > deadline) {
      const char* phase = state_ == State::TcpConnecting ? "connecting"
                          : state_ == State::AwaitICResp ? "waiting for ICResp"
                          : auth_                        ? "authenticating"
                                                         : "waiting for the Connect response";
      err = HostError::make(HostError::Kind::Timeout, fmt::format("{}:{} qid {}: timed out after {} ms {}",
                                                                  p_.trid.traddr, p_.trid.trsvcid, p_.qid,
                                                                  p_.timeout_ms, phase));
      return false;
    }
    reactor_.run_once(uint32_t(p_.clock->poll_period_ns(10 * kMs) / 1000));
  }
  if (failed()) {
    err = error_.context(fmt::format("{}:{} qid {}", p_.trid.traddr, p_.trid.trsvcid, p_.qid));
    return false;
  }
  return true;
}

bool QueuePairImpl::connect(HostError& err) {
  if (!start(err)) return false;
  if (!run_until(State::Ready, err)) return false;
  arm_tick();
  return true;
}

bool QueuePairImpl::start(HostError& err) {
  std::string why;
  if (!reactor::resolve(p_.trid.traddr, p_.trid.trsvcid, endpoint_, why)) {
    err = HostError::make(HostError::Kind::Address, why);
    set_state(State::Failed);
    return false;
  }
  if (!start_connect(err)) {
    set_state(State::Failed);
    return false;
  }
  return true;
}

bool QueuePairImpl::start_unwaited(HostError& err) {
  if (!start(err)) return false;
  unwaited_connect_ = true;
  arm_tick();
  return true;
}

bool QueuePairImpl::start_connect(HostError& err) {
  fd_ = ::socket(endpoint_.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    err = HostError::system(errno, fmt::format("socket: {}", strerror(errno)));
    return false;
  }
  const int rcvbuf = reactor::receive_buffer_for(p_.socket_buffer_bytes, reactor::net_core_rmem_max());
  const int sndbuf = reactor::send_buffer_for(p_.send_buffer_bytes, p_.socket_buffer_bytes);
  std::string e = reactor::apply_socket_options(fd_, {true, sndbuf, rcvbuf, p_.tcp_congestion});
  if (!e.empty()) {
    ::close(fd_);
    fd_ = -1;
    err = HostError::make(HostError::Kind::Address, e);  // an option this socket cannot take
    return false;
  }
  // TCP connect through the ring; the tick (or run_until) bounds it.
  set_state(State::TcpConnecting);
  set_socket(SocketState::Connecting);
  attempt_deadline_ns_ = now() + uint64_t(p_.timeout_ms) * kMs;
  io_uring_sqe* sqe = reactor_.get_sqe();
  io_uring_prep_connect(sqe, fd_, reinterpret_cast<sockaddr*>(&endpoint_.addr), endpoint_.len);
  reactor_.prep(sqe, &connect_c_);
  return true;
}

void QueuePairImpl::on_tcp_connected(int res) {
  if (state_ != State::TcpConnecting || res < 0) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    set_socket(SocketState::None);
  }
  if (state_ != State::TcpConnecting) return;  // given up meanwhile
  if (res < 0) {
    fail(HostError::system(-res, fmt::format("connect to {}: {}", endpoint_.to_string(), strerror(-res))));
    return;
  }
  if (p_.tls_psk) {
    // The ICReq waits in the TLS stream until the handshake is done.
    auto tls = tls::TlsStream::client(reactor_, *this, *p_.tls_psk,
                                      fmt::format("{}:{} qid {}", p_.trid.traddr, p_.trid.trsvcid, p_.qid));
    const int fd = fd_;
    tls->attach([this, fd](reactor::StreamOwner& o) { return std::make_unique<reactor::TcpStream>(reactor_, fd, &o, 256 * 1024); });
    tls->set_kernel_tx(p_.ktls);
    tls_ = tls.get();
    tcp_ = nullptr;
    stream_ = std::move(tls);
  } else {
    auto tcp = std::make_unique<reactor::TcpStream>(reactor_, fd_, this, 256 * 1024);
    tcp_ = tcp.get();
    tls_ = nullptr;
    stream_ = std::move(tcp);
  }
  fd_ = -1;  // the stream owns it now
  set_socket(SocketState::Open);
  receiver_.reset();
  terminator_.reset();
  stream_->start();

  const ICReqPdu ic = make_icreq(0, p_.hdgst, p_.ddgst, kHostMaxR2T - 1);
  static_assert(sizeof(icreq_) == sizeof(ic));
  std::memcpy(icreq_, &ic, sizeof(ic));
  set_state(State::AwaitICResp);
  stream_send(icreq_, sizeof(icreq_));
}

void QueuePairImpl::size_h2c_arena() {
  // H2CData header slots: enough for the largest transfer at MAXH2CDATA per PDU, plus one
  // partial PDU per R2T. Sized again only if a reconnect negotiated other values.
  uint32_t slot = data_offset(sizeof(H2CDataPdu), p_.hdgst, cpda_) + kDigestLen;
  uint32_t per = (p_.max_transfer + maxh2cdata_ - 1) / maxh2cdata_ + kHostMaxR2T + 1;
  if (slot == h2c_slot_size_ && per == h2c_slots_per_request_) return;
  h2c_slot_size_ = slot;
  h2c_slots_per_request_ = per;
  h2c_arena_.assign(size_t(slot) * per * pool_.size(), 0);
  for (size_t i = 0; i < pool_.size(); ++i) pool_[i].h2c_slots = h2c_arena_.data() + i * slot * per;
}

void QueuePairImpl::send_connect() {
  ConnectCmd cmd{};
  cmd.opc = uint8_t(AdminOpcode::Fabrics);
  cmd.fctype = uint8_t(FabricsType::Connect);
  cmd.recfmt = 0;
  cmd.qid = p_.qid;
  cmd.sqsize = uint16_t(p_.depth);  // 0's based: depth + 1 entries, so depth fit with flow control on
  cmd.cattr = kConnectAttrDisableSqFlow;
  cmd.kato = p_.qid == 0 ? p_.kato_ms : 0;
  ConnectData data{};
  std::memcpy(data.hostid, p_.hostid, 16);
  data.cntlid = p_.cntlid;
  std::memcpy(data.subnqn, p_.trid.subnqn.data(), std::min<size_t>(p_.trid.subnqn.size(), 255));
  std::memcpy(data.hostnqn, p_.hostnqn.data(), std::min<size_t>(p_.hostnqn.size(), 255));
  std::memcpy(connect_data_, &data, sizeof(data));
  Sqe sqe;
  std::memcpy(&sqe, &cmd, sizeof(cmd));
  HostRequest* r = &pool_[p_.depth];  // kept for Connect: free whatever the others hold
  start_request(
      r, sqe, connect_data_, sizeof(connect_data_), true,
      [](void* ctx, const Completion& c) {
        auto* self = static_cast<QueuePairImpl*>(ctx);
        self->connect_result_ = c;
        if (self->state_ != State::AwaitConnect) return;  // the connection went away first
        if (c.status.ok()) {
          self->cntlid_ = uint16_t(c.dw0 & 0xFFFF);
          if (c.dw0 & (kConnectResultAtr | kConnectResultAscr)) {
            self->start_authentication(c.dw0);
            return;
          }
          self->on_associated();
          return;
        }
        self->fail(HostError::from_status(
            c.status, fmt::format("Connect rejected: {}{}", status_name(c.status),
                                  c.status == sc::ConnectInvalidParameters
                                      ? fmt::format(" (offset {} in the {})", c.dw0 & 0xFFFF,
                                                    (c.dw0 >> 16) & 1 ? "connect data" : "command")
                                      : "")));
      },
      this);
  send_command(r);
}

void QueuePairImpl::start_authentication(uint32_t connect_dw0) {
  const std::string where = fmt::format("{}:{} qid {}", p_.trid.traddr, p_.trid.trsvcid, p_.qid);
  if (connect_dw0 & kConnectResultAscr) {
    fail_for_good(HostError::make(HostError::Kind::Controller,
                                  "the controller asks for a secure channel concatenation, which this host does not do"));
    return;
  }
  if (!p_.dhchap_secret) {
    fail_for_good(HostError::from_status(
        sc::AuthenticationRequired, fmt::format("controller {} requires DH-HMAC-CHAP authentication, and no host "
                                                "secret was given (--dhchap-secret)",
                                                cntlid_)));
    return;
  }
  auth::DhchapKeys keys{p_.dhchap_secret.get(), p_.dhchap_ctrl_secret.get(), p_.hostnqn, p_.trid.subnqn};
  auth_ = std::make_unique<auth::DhchapHost>(std::move(keys), auth::DhchapPolicy{}, ++auth_transactions_);
  log::debug("{}: authenticating to controller {}", where, cntlid_);
  auth_step();
}

int QueuePairImpl::reauthenticate(std::string& err) {
  if (!p_.dhchap_secret) {
    err = "no DH-HMAC-CHAP secret was given for this controller";
    return -EINVAL;
  }
  if (state_ != State::Ready) {
    err = "the queue is not connected";
    return -ENOTCONN;
  }
  // The Connect slot carries the transaction's commands, one at a time, beside the queue's I/O.
  HostRequest* slot = &pool_[p_.depth];
  struct Wait {
    bool done = false;
    Completion cpl;
  };
  // A controller that stops answering must not hold the caller for ever: past this, the
  // connection is given up (and reconnects, if it may) and the call says so.
  const uint64_t limit_ms = p_.io_timeout_ms ? p_.io_timeout_ms : 30000;
  auto exchange = [this, slot, limit_ms](bool send, std::vector<uint8_t>& buf) {
    Wait w;
    start_request(slot, detail::auth_transfer_sqe(send, uint32_t(buf.size())), buf.data(), uint32_t(buf.size()), send,
                  [](void* ctx, const Completion& c) {
                    auto* wait = static_cast<Wait*>(ctx);
                    wait->cpl = c;
                    wait->done = true;
                  },
                  &w);
    send_command(slot);
    const uint64_t deadline = p_.clock->now_ns() + limit_ms * kMs;
    while (!w.done && state_ == State::Ready) {
      if (p_.clock->now_ns() >= deadline) {
        slot->cb = nullptr;  // before the connection goes: its end completes the slot
        slot->ctx = nullptr;
        fail(HostError::make(HostError::Kind::Transport,
                             fmt::format("no answer to Authentication {} within {} ms", send ? "Send" : "Receive",
                                         limit_ms)));
        break;
      }
      poll(1000);
    }
    if (!w.done) {
      // The connection went; a reconnect takes the slot (and authenticates afresh). Nothing
      // may call back into this frame any more.
      slot->cb = nullptr;
      slot->ctx = nullptr;
      Completion lost;
      lost.status = sc::TransportError;
      return lost.status;
    }
    return w.cpl.status;
  };
  auth::DhchapKeys keys{p_.dhchap_secret.get(), p_.dhchap_ctrl_secret.get(), p_.hostnqn, p_.trid.subnqn};
  const int rc = detail::run_dhchap(keys, ++auth_transactions_, exchange, err);
  if (rc == 0)
    log::debug("{}:{} qid {}: re-authenticated (DH-HMAC-CHAP)", p_.trid.traddr, p_.trid.trsvcid, p_.qid);
  else
    log::warn("{}:{} qid {}: re-authentication failed: {}", p_.trid.traddr, p_.trid.trsvcid, p_.qid, err);
  return rc;
}

void QueuePairImpl::auth_step() {
  if (state_ != State::AwaitConnect || !auth_) return;  // the connection went away meanwhile
  HostRequest* r = &pool_[p_.depth];  // the Connect slot, free again
  auto done = [](void* ctx, const Completion& c) {
    auto* self = static_cast<QueuePairImpl*>(ctx);
    if (self->state_ != State::AwaitConnect || !self->auth_) return;
    const bool receive = self->auth_receiving_;
    if (!c.status.ok()) {
      self->fail_for_good(HostError::from_status(
          c.status, fmt::format("Authentication {}: {}", receive ? "Receive" : "Send", status_name(c.status))));
      return;
    }
    if (receive) self->auth_->on_receive(self->auth_in_);
    self->auth_step();
  };
  std::vector<uint8_t> m = auth_->next_message();
  if (!m.empty()) {
    auth_out_ = std::move(m);
    auth_receiving_ = false;
    const auto len = uint32_t(auth_out_.size());
    start_request(r, detail::auth_transfer_sqe(true, len), auth_out_.data(), len, true, done, this);
    send_command(r);
    return;
  }
  if (auth_->expects_receive()) {
    auth_in_.assign(kAuthHostReceiveLength, 0);
    auth_receiving_ = true;
    start_request(r, detail::auth_transfer_sqe(false, kAuthHostReceiveLength), auth_in_.data(),
                  kAuthHostReceiveLength, false, done, this);
    send_command(r);
    return;
  }
  const uint8_t hash = auth_->hash(), group = auth_->dh_group();
  const bool ok = auth_->authenticated();
  const std::string detail = auth_->failure_detail();
  const uint8_t reason = auth_->failure_reason();
  auth_.reset();
  if (!ok) {
    fail_for_good(HostError::from_status(
        sc::AuthenticationRequired, fmt::format("DH-HMAC-CHAP authentication with controller {} failed: {} ({})",
                                                cntlid_, detail, auth_failure_name(reason))));
    return;
  }
  log::debug("{}:{} qid {}: authenticated (DH-HMAC-CHAP, {}, DH group {}{})", p_.trid.traddr, p_.trid.trsvcid, p_.qid,
             dhchap_hash_name(hash), dh_group_name(group), p_.dhchap_ctrl_secret ? ", controller verified" : "");
  on_associated();
}

void QueuePairImpl::on_associated() {
  set_state(State::Ready);
  if (link_) generation_ = link_->generation();
  uint32_t held = 0;
  for (auto& r : pool_) held += r.state == HostRequest::State::Held;
  if (associated_before_) {
    ++reconnects_;
    log::info("{}:{} qid {}: reconnected to controller {} after {} ms; sending {} held commands again",
              p_.trid.traddr, p_.trid.trsvcid, p_.qid, cntlid_, outage_.elapsed_ms(now()), held);
  }
  associated_before_ = true;
  outage_.ended();
  // Held commands go out again (NVMe does not order commands, so the order is free), except
  // those that have already been in flight on too many lost connections.
  for (auto& r : pool_) {
    if (r.state != HostRequest::State::Held || state_ != State::Ready) continue;
    if (r.retries > p_.max_retries) {
      log::warn("{}:{} qid {}: cid {} failed after {} attempts", p_.trid.traddr, p_.trid.trsvcid, p_.qid, r.cid,
                unsigned(r.retries));
      Completion c;
      c.status = r.timed_out ? sc::HostAbortedCommand : sc::TransportError;
      finish(&r, c);
      continue;
    }
    r.timed_out = false;
    send_command(&r);
  }
}

void QueuePairImpl::fill_header(CommonHeader& ch, PduType type, uint8_t hlen, uint32_t data_len, uint8_t flags) {
  fill_common_header(ch, type, hlen, data_len, flags, p_.hdgst, p_.ddgst, cpda_);
}

bool QueuePairImpl::can_reconnect() const {
  return link_ && p_.ctrl_loss_tmo_ms > 0 && associated_before_ && !failed() &&
         link_->link_state() != ControllerLink::LinkState::Deleted;
}

HostError QueuePairImpl::submit(const Sqe& in, void* data, uint32_t len, bool to_controller, CompletionFn cb,
                                void* ctx) {
  // A fabrics command on an I/O queue is the queue's own business (its Connect, sent by
  // connect() itself): one from a caller (a Disconnect, say) would end or change the queue
  // under every command on it, and through a shared queue pair under other callers too.
  if (p_.qid != 0 && in.opc == uint8_t(AdminOpcode::Fabrics))
    return HostError::refused(HostError::Kind::Invalid, EINVAL);
  if (failed() || outage_.fast_failing()) return HostError::refused(HostError::Kind::Transport, ENOTCONN);
  bool send_now = state_ == State::Ready;
  // While reconnecting, commands wait for the new connection (as the kernel queues them).
  if (!send_now && !can_reconnect()) return HostError::refused(HostError::Kind::Transport, ENOTCONN);
  if (len > p_.max_transfer) return HostError::refused(HostError::Kind::Invalid, EINVAL);
  if (free_.empty()) return HostError::refused(HostError::Kind::Busy, EBUSY);
  HostRequest* r = free_.back();
  free_.pop_back();
  ++outstanding_;
  start_request(r, in, data, len, to_controller, cb, ctx);
  if (send_now) send_command(r);
  else r->set_state(HostRequest::State::Held);
  return {};
}

void QueuePairImpl::start_request(HostRequest* r, const Sqe& in, void* data, uint32_t len, bool to_controller,
                                  CompletionFn cb, void* ctx) {
  r->cb = cb;
  r->ctx = ctx;
  r->data = static_cast<uint8_t*>(data);
  r->len = len;
  r->to_controller = to_controller;
  r->abort_sent = false;
  r->timed_out = false;
  r->retries = 0;
  r->untimed = p_.qid == 0 && in.opc == uint8_t(AdminOpcode::AsyncEventRequest);
  // Fabrics commands (Connect) may carry up to 8 KiB in the capsule on any queue,
  // whatever IOCCSZ says about I/O commands.
  uint32_t icd_limit =
      in.opc == uint8_t(AdminOpcode::Fabrics) ? std::max<uint32_t>(p_.in_capsule_max, 8192) : p_.in_capsule_max;
  r->in_capsule = to_controller && len > 0 && len <= icd_limit;
  auto* pdu = reinterpret_cast<CapsuleCmdHeader*>(r->cmd_pdu);
  Sqe sqe = in;
  sqe.cid = r->cid;
  sqe.flags = (sqe.flags & 0x3F) | kSqeFlagsPsdtSgl;
  // As the Linux host does: a Transport SGL Data Block of length 0 when there is no data.
  sqe.sgl = {};
  sqe.sgl.length = len;
  sqe.sgl.type = r->in_capsule ? kSglDataBlockOffset : kSglTransportDataBlock;
  std::memcpy(pdu->sqe, &sqe, sizeof(sqe));
}

void QueuePairImpl::send_command(HostRequest* r) {
  r->set_state(HostRequest::State::OnWire);
  r->c2h_received = 0;
  r->r2t_next = 0;
  r->h2c_pdus = 0;
  r->data_error = false;
  r->abort_sent = false;
  r->sent_ns = p_.clock->turn_ns(reactor_);
  // The header is filled at each send: a new connection may have another CPDA.
  auto* pdu = reinterpret_cast<CapsuleCmdHeader*>(r->cmd_pdu);
  uint32_t icd = r->in_capsule ? r->len : 0;
  fill_header(pdu->ch, PduType::CapsuleCmd, sizeof(CapsuleCmdHeader), icd, 0);
  uint32_t head = icd ? pdu->ch.pdo : pdu->ch.plen;
  if (p_.hdgst) seal_header_digest(r->cmd_pdu, sizeof(CapsuleCmdHeader));
  if (icd) {
    uint32_t used = sizeof(CapsuleCmdHeader) + (p_.hdgst ? 4 : 0);
    std::memset(r->cmd_pdu + used, 0, head - used);  // padding up to the controller's CPDA
  }
  stream_send(r->cmd_pdu, head);
  if (icd) {
    stream_send(r->data, icd);
    if (p_.ddgst) {
      put_data_digest(r->cmd_ddgst, r->data, icd);
      stream_send(r->cmd_ddgst, kDigestLen);
    }
  }
}

int QueuePairImpl::poll(uint32_t timeout_us) {
  delivered_ = 0;
  reactor_.run_once(timeout_us);
  return delivered_;
}

void QueuePairImpl::finish(HostRequest* r, const Completion& c) {
  CompletionFn cb = r->cb;
  void* ctx = r->ctx;
  r->set_state(HostRequest::State::Free);
  if (r->cid < p_.depth) {  // not the Connect slot
    free_.push_back(r);
    --outstanding_;
    ++delivered_;
  }
  if (cb) cb(ctx, c);
}

void QueuePairImpl::fail(HostError why) {
  if (failed() || state_ == State::Disconnected) return;
  if (can_reconnect()) {
    disconnect(why.message, state_ == State::Ready);
    return;
  }
  fail_for_good(std::move(why));
}

void QueuePairImpl::fail_for_good(HostError why, FailedBy by) {
  if (failed()) return;
  bool was_ready = state_ == State::Ready || state_ == State::Disconnected;
  outage_.ended();
  if (was_ready && by == FailedBy::Connection)  // during connect() the error is returned instead
    log::warn("{}:{} qid {}: {}", p_.trid.traddr, p_.trid.trsvcid, p_.qid, why.message);
  if (error_.ok()) error_ = std::move(why);
  if (socket_ == SocketState::Connecting && fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  // Commands end only once nothing can land in their buffers any more: a receive in flight
  // may be writing straight into one.
  if (socket_ == SocketState::Open || socket_ == SocketState::Closing) {
    set_state(State::Failing);
    close_stream();
  } else if (socket_ == SocketState::Lingering) {
    // Our TermReq stopped the receive path (on_pdu_error runs inside a receive's completion, and
    // recv_direct() names no buffer once we are not receiving), so no receive can land in a
    // command's buffer any more: the commands end now; the socket closes after its linger.
    set_state(State::Failing);
    end_outstanding();
  } else {
    set_state(State::Failed);
    end_outstanding();
  }
}

void QueuePairImpl::close_stream() {
  if (socket_ != SocketState::Open) return;  // none, lingering, or its close is already under way
  set_socket(SocketState::Closing);
  stream_->close();
}

void QueuePairImpl::end_linger() {
  if (socket_ != SocketState::Lingering) return;
  reactor_.cancel_timer(&linger_);
  terminator_.closing();
  set_socket(SocketState::Closing);
  stream_->close();
}

void QueuePairImpl::on_linger_end(reactor::Timer* t) { static_cast<TickTimer*>(t)->qp->end_linger(); }

void QueuePairImpl::end_outstanding() {
  for (auto& r : pool_) {
    if (r.state == HostRequest::State::Free) continue;
    Completion c;
    c.status = r.timed_out ? sc::HostAbortedCommand : sc::TransportError;
    finish(&r, c);
  }
}

void QueuePairImpl::disconnect(const std::string& why, bool reset_controller) {
  const uint64_t t = now();
  if (state_ == State::Ready)
    log::warn("{}:{} qid {}: {}; reconnecting (ctrl_loss_tmo {} ms)", p_.trid.traddr, p_.trid.trsvcid, p_.qid, why,
              p_.ctrl_loss_tmo_ms);
  else
    log::info("{}:{} qid {}: reconnect attempt failed: {}", p_.trid.traddr, p_.trid.trsvcid, p_.qid, why);
  outage_.lost(t);
  set_state(State::Disconnected);
  rx_req_ = nullptr;
  close_stream();
  if (socket_ == SocketState::Connecting && fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  for (auto& r : pool_) {
    if (r.state != HostRequest::State::OnWire) continue;
    if (r.cid == p_.depth) {  // this attempt's Connect: dropped with it
      r.set_state(HostRequest::State::Free);
      continue;
    }
    r.set_state(HostRequest::State::Held);
    ++r.retries;
  }
  if (reset_controller && link_) link_->request_reset(generation_, why);
}

void QueuePairImpl::arm_tick() {
  bool recovery = link_ && p_.ctrl_loss_tmo_ms > 0;
  const bool connecting = unwaited_connect_ && !associated_before_;
  if (!recovery && !p_.io_timeout_ms && !connecting) return;
  // Often enough to honour the shortest of the timeouts to within a quarter of it.
  uint64_t period = 100;
  if (p_.io_timeout_ms) period = std::min<uint64_t>(period, p_.io_timeout_ms / 4);
  if (recovery) period = std::min<uint64_t>(period, std::max<uint32_t>(p_.reconnect_delay_ms, 1) / 4);
  // The tick is a real-time wake-up; what it decides reads the queue's clock. On a test's fake
  // clock it comes every millisecond of real time, so a step is acted on at the stepped time
  // exactly (not at the next period boundary of fake time, which a step may jump past).
  reactor_.arm_timer(&tick_, p_.clock->poll_period_ns(std::max<uint64_t>(period, 2) * kMs));
}

void QueuePairImpl::on_tick(reactor::Timer* t) { static_cast<TickTimer*>(t)->qp->tick(); }

void QueuePairImpl::tick() {
  if (failed()) return;
  uint64_t t = now();
  if (unwaited_connect_ && !associated_before_) {
    // A start()ed first connect: bounded here as run_until() bounds a waited one.
    if (t > attempt_deadline_ns_)
      fail_for_good(HostError::make(HostError::Kind::Timeout,
                                    fmt::format("{}:{} qid {}: timed out after {} ms connecting", p_.trid.traddr,
                                                p_.trid.trsvcid, p_.qid, p_.timeout_ms)));
    if (!failed()) arm_tick();
    return;
  }
  if (state_ == State::Ready) {
    // Another queue (or the admin queue) lost its connection and the controller was reset:
    // this connection belongs to the old association.
    if (link_ && p_.ctrl_loss_tmo_ms && link_->generation() != generation_)
      disconnect("the controller was reset", false);
    else if (p_.io_timeout_ms) check_timeouts(t);
  }
  if (!failed() && state_ != State::Ready && associated_before_) {
    t = now();  // after any disconnect() above, which started the outage
    if (socket_ == SocketState::Closed) {
      stream_.reset();
      tcp_ = nullptr;
      tls_ = nullptr;
      set_socket(SocketState::None);
    }
    bool lost = !link_ || link_->link_state() == ControllerLink::LinkState::Deleted;
    if (lost || outage_.ctrl_loss_passed(t)) {
      fail_for_good(HostError::make(
          HostError::Kind::Timeout,
          fmt::format("no connection for {} ms: controller lost (ctrl_loss_tmo)", outage_.elapsed_ms(t))));
      return;
    }
    if (state_ != State::Disconnected && t > attempt_deadline_ns_)
      fail(HostError::make(HostError::Kind::Timeout, "reconnect attempt timed out"));
    if (state_ == State::Disconnected && socket_ == SocketState::None) {
      if (outage_.fast_io_fail_due(t)) {
        log::warn("{}:{} qid {}: fast_io_fail_tmo ({} ms) passed: failing held and new I/O until reconnected",
                  p_.trid.traddr, p_.trid.trsvcid, p_.qid, p_.fast_io_fail_tmo_ms);
        end_outstanding();
      }
      // Reconnect once the controller itself is back (its generation moved on).
      if (link_->link_state() == ControllerLink::LinkState::Live && link_->generation() != generation_ &&
          outage_.attempt_due(t)) {
        p_.cntlid = link_->link_cntlid();
        HostError err;
        if (!start_connect(err)) {  // still Disconnected: the next attempt comes after the delay
          log::warn("{}:{} qid {}: reconnect: {}", p_.trid.traddr, p_.trid.trsvcid, p_.qid, err.message);
        }
      }
    }
  }
  if (!failed()) arm_tick();
}

void QueuePairImpl::check_timeouts(uint64_t t) {
  const uint64_t limit = uint64_t(p_.io_timeout_ms) * kMs;
  // The Connect slot has no Abort: it belongs to the connection being set up.
  for (auto& r : pool_) {
    if (r.state != HostRequest::State::OnWire || r.untimed) continue;
    const bool can_abort = link_ && r.cid != p_.depth;
    switch (command_timeout_step({r.sent_ns, r.abort_sent, r.abort_ns}, t, limit, can_abort)) {
      case TimeoutStep::None: continue;
      case TimeoutStep::Abort:
        // First ask the controller to abort it; the queue stays up.
        r.abort_sent = true;
        r.abort_ns = t;
        log::warn("{}:{} qid {}: cid {} not completed after {} ms; sending Abort", p_.trid.traddr, p_.trid.trsvcid,
                  p_.qid, r.cid, p_.io_timeout_ms);
        link_->abort_command(p_.qid, r.cid);
        continue;
      case TimeoutStep::Reset:
        // Still nothing: the connection cannot be trusted any more. Reset (or fail) it.
        r.timed_out = true;
        fail(HostError::make(HostError::Kind::Timeout, fmt::format("cid {} not completed after {} ms{}", r.cid,
                                                                   (t - r.sent_ns) / kMs,
                                                                   r.abort_sent ? " and an Abort" : "")));
        return;
    }
  }
}

void QueuePairImpl::on_receive(const uint8_t* data, size_t len) {
  if (receiving()) receiver_.feed(data, len);
}

void QueuePairImpl::on_closed(int err) {
  if (socket_ == SocketState::Lingering) {  // the peer read our TermReq and closed: the linger is over
    reactor_.cancel_timer(&linger_);
    terminator_.peer_closed();
  }
  set_socket(SocketState::Closed);
  if (state_ == State::Failing) {
    set_state(State::Failed);
    end_outstanding();
    return;
  }
  if (!receiving()) return;
  std::string why = err < 0 ? fmt::format("connection lost: {}", strerror(-err)) : "connection closed by the target";
  if (tls_ && !tls_->established()) {
    // A handshake that did not finish: the key (ours, or the target's for us) is wrong or
    // missing, or the listener does not speak TLS. Retrying with the same key cannot help.
    tls_refused_ = true;
    const char* hint = p_.tls_psk->hash == 2
                           ? "; a Linux target (tlshd 1.0) takes a SHA-384 PSK only bound with SHA-256: see "
                             "--tls-sha256-binder"
                           : "";
    fail_for_good(HostError::make(
        HostError::Kind::Transport,
        fmt::format("TLS handshake with {}:{} failed: {}{}", p_.trid.traddr, p_.trid.trsvcid,
                    !tls_->failure().empty() ? tls_->failure()
                                             : why + " (the target refused the PSK identity \"" +
                                                   p_.tls_psk->identity + "\", or does not speak TLS on this port)",
                    hint)));
    return;
  }
  if (auth_) {
    // The Linux target ends the controller as soon as it has sent AUTH_Failure1 or taken our
    // AUTH_Failure2, and the last answer can be lost with the connection: a close in the middle
    // of the transaction is a refusal, ours (said already) or the target's.
    const std::string what =
        auth_->failed() ? fmt::format("{} ({})", auth_->failure_detail(), auth_failure_name(auth_->failure_reason()))
                        : fmt::format("{} during the transaction (the target refused this host's response, or its "
                                      "secret)",
                                      why);
    auth_.reset();
    fail_for_good(HostError::from_status(
        sc::AuthenticationRequired,
        fmt::format("DH-HMAC-CHAP authentication with controller {} failed: {}", cntlid_, what)));
    return;
  }
  if (state_ == State::AwaitICResp && !tls_)
    why += " before its ICResp (a listener that requires TLS closes a host that does not start with it: see --tls-key)";
  HostError e = HostError::make(HostError::Kind::Transport, why);
  e.err_no = err < 0 ? -err : 0;
  fail(std::move(e));
}

void QueuePairImpl::on_pdu_error(Fes fes, uint32_t fei, const std::string& why) {
  log::warn("{}:{} qid {}: fatal transport error: {} (FES {}); sending H2CTermReq", p_.trid.traddr, p_.trid.trsvcid,
            p_.qid, why, unsigned(fes));
  if (stream_ && socket_ == SocketState::Open && receiving()) {
    // The commands fail (or are held for a reconnect) at once, below; only the socket waits.
    auto pdu = terminator_.start(receiver_, PduType::H2CTermReq, fes, fei, now());
    if (!pdu.empty()) {
      stream_send(pdu.data(), pdu.size());
      set_socket(SocketState::Lingering);
      reactor_.arm_timer(&linger_, terminator_.linger_ns());
    }
  }
  fail(HostError::make(HostError::Kind::Transport, why));
}

HostRequest* QueuePairImpl::lookup(uint16_t cid, uint32_t fei_offset) {
  // Only a command sent on this connection: a held one is not on the wire (yet).
  if (cid >= pool_.size() || pool_[cid].state != HostRequest::State::OnWire) {
    receiver_.fail(Fes::InvalidHeaderField, fei_offset, fmt::format("PDU for command {} that is not outstanding", cid));
    return nullptr;
  }
  return &pool_[cid];
}

bool QueuePairImpl::on_pdu_header(const uint8_t* hdr, uint32_t data_len, uint8_t*& dst) {
  const auto& ch = *reinterpret_cast<const CommonHeader*>(hdr);
  auto type = static_cast<PduType>(ch.type);
  if (type == PduType::C2HTermReq) return true;  // quoted header discarded
  if (type == PduType::ICResp) {
    if (state_ != State::AwaitICResp) {
      receiver_.fail(Fes::PduSequenceError, 0, "unexpected ICResp");
      return false;
    }
    // Checked here, while the header is still held, so a TermReq can quote it.
    const auto& ic = *reinterpret_cast<const ICRespPdu*>(hdr);
    const uint8_t asked = ic_digest_bits(p_.hdgst, p_.ddgst);
    if (ic.pfv != kPfv) {
      receiver_.fail(Fes::UnsupportedParameter, offsetof(ICRespPdu, pfv), "ICResp PFV");
      return false;
    }
    if (ic.cpda > 31) {
      receiver_.fail(Fes::InvalidHeaderField, offsetof(ICRespPdu, cpda), "ICResp CPDA");
      return false;
    }
    if (ic.maxh2cdata < 4096 || (ic.maxh2cdata & 3)) {
      receiver_.fail(Fes::InvalidHeaderField, offsetof(ICRespPdu, maxh2cdata),
                     fmt::format("ICResp MAXH2CDATA {} invalid", uint32_t(ic.maxh2cdata)));
      return false;
    }
    if (ic.digest != asked) {
      fail(HostError::make(HostError::Kind::Controller,
                           fmt::format("the target answered digests 0x{:x} to our request 0x{:x}", ic.digest, asked)));
      return false;
    }
    cpda_ = ic.cpda;
    maxh2cdata_ = ic.maxh2cdata;
    receiver_.set_digests(p_.hdgst, p_.ddgst);
    set_state(State::AwaitConnect);
    return true;
  }
  if (state_ == State::AwaitICResp) {
    receiver_.fail(Fes::PduSequenceError, 0, fmt::format("{} before ICResp", pdu_type_name(type)));
    return false;
  }
  switch (type) {
    case PduType::C2HData: {
      const auto& d = *reinterpret_cast<const C2HDataPdu*>(hdr);
      HostRequest* r = lookup(d.cccid, offsetof(C2HDataPdu, cccid));
      if (!r) return false;
      if (r->to_controller || d.datal != data_len || d.datao != r->c2h_received ||
          uint64_t(d.datao) + d.datal > r->len) {
        receiver_.fail(Fes::DataOutOfRange, 0,
                       fmt::format("C2HData [{}, +{}) for cid {} outside its buffer ({} bytes, {} received)", d.datao,
                                   d.datal, d.cccid, r->len, r->c2h_received));
        return false;
      }
      if ((ch.flags & kFlagDataSuccess) && !(ch.flags & kFlagDataLast)) {
        receiver_.fail(Fes::InvalidHeaderField, offsetof(CommonHeader, flags), "C2HData SUCCESS without LAST_PDU");
        return false;
      }
      rx_req_ = r;
      dst = r->data + d.datao;
      return true;
    }
    case PduType::R2T: {
      const auto& t = *reinterpret_cast<const R2TPdu*>(hdr);
      HostRequest* r = lookup(t.cccid, offsetof(R2TPdu, cccid));
      if (!r) return false;
      if (!r->to_controller || r->in_capsule || t.r2tl == 0 || t.r2to != r->r2t_next ||
          uint64_t(t.r2to) + t.r2tl > r->len) {
        receiver_.fail(Fes::DataOutOfRange, 0,
                       fmt::format("R2T [{}, +{}) for cid {} does not fit its {}-byte write (next {})", t.r2to, t.r2tl,
                                   t.cccid, r->len, r->r2t_next));
        return false;
      }
      rx_req_ = r;
      return true;
    }
    case PduType::CapsuleResp:
      return true;
    default:
      break;
  }
  receiver_.fail(Fes::InvalidHeaderField, 0, fmt::format("unexpected {}", pdu_type_name(type)));
  return false;
}

void QueuePairImpl::on_pdu_complete(const uint8_t* hdr, bool data_ok) {
  const auto& ch = *reinterpret_cast<const CommonHeader*>(hdr);
  switch (static_cast<PduType>(ch.type)) {
    case PduType::ICResp:
      // Checked in on_pdu_header; now the fabrics Connect, with its data in the capsule.
      size_h2c_arena();
      send_connect();
      return;
    case PduType::C2HTermReq: {
      const auto& t = *reinterpret_cast<const TermReqPdu*>(hdr);
      fail(HostError::make(HostError::Kind::Transport,
                           fmt::format("target terminated the connection: {} (FES {}, FEI {})",
                                       fes_name(Fes(t.fes), PduType::C2HTermReq), unsigned(t.fes), uint32_t(t.fei))));
      return;
    }
    case PduType::C2HData: {
      const auto& d = *reinterpret_cast<const C2HDataPdu*>(hdr);
      HostRequest* r = rx_req_;
      rx_req_ = nullptr;
      if (!data_ok) {
        // The stream stays in step (lengths were fine); only this command's data is bad.
        log::warn("{}:{} qid {}: data digest error on cid {}", p_.trid.traddr, p_.trid.trsvcid, p_.qid, r->cid);
        r->data_error = true;
      }
      r->c2h_received += d.datal;
      if (ch.flags & kFlagDataSuccess) {
        Completion c;
        if (r->c2h_received != r->len || r->data_error) c.status = sc::DataTransferError;
        finish(r, c);
      }
      return;
    }
    case PduType::R2T: {
      const auto& t = *reinterpret_cast<const R2TPdu*>(hdr);
      HostRequest* r = rx_req_;
      rx_req_ = nullptr;
      r->r2t_next = t.r2to + t.r2tl;
      send_h2c(r, t.ttag, t.r2to, t.r2tl);
      return;
    }
    case PduType::CapsuleResp: {
      const auto& rp = *reinterpret_cast<const CapsuleRespPdu*>(hdr);
      Cqe cqe;
      std::memcpy(&cqe, rp.cqe, sizeof(cqe));
      HostRequest* r = lookup(cqe.cid, sizeof(CommonHeader) + offsetof(Cqe, cid));
      if (!r) return;
      Completion c;
      c.status = Status::from_cqe(cqe.status);
      c.dw0 = cqe.dw0;
      c.dw1 = cqe.dw1;
      if (c.status.ok() && !r->to_controller && r->len && (r->c2h_received != r->len || r->data_error))
        c.status = sc::DataTransferError;
      finish(r, c);
      return;
    }
    default:
      return;
  }
}

void QueuePairImpl::send_h2c(HostRequest* r, uint16_t ttag, uint32_t offset, uint32_t length) {
  uint32_t end = offset + length;
  while (offset < end) {
    if (r->h2c_pdus >= h2c_slots_per_request_) {
      receiver_.fail(Fes::R2TLimitExceeded, 0, "too many R2Ts for one command");
      return;
    }
    uint32_t n = std::min(maxh2cdata_, end - offset);
    uint8_t* slot = r->h2c_slots + size_t(r->h2c_pdus++) * h2c_slot_size_;
    auto* h = reinterpret_cast<H2CDataPdu*>(slot);
    std::memset(slot, 0, h2c_slot_size_);
    fill_header(h->ch, PduType::H2CData, sizeof(H2CDataPdu), n, offset + n == end ? kFlagDataLast : 0);
    h->cccid = r->cid;
    h->ttag = ttag;
    h->datao = offset;
    h->datal = n;
    if (p_.hdgst) seal_header_digest(slot, sizeof(H2CDataPdu));
    stream_send(slot, h->ch.pdo);
    stream_send(r->data + offset, n);
    if (p_.ddgst) {
      uint8_t* dd = slot + h2c_slot_size_ - kDigestLen;
      put_data_digest(dd, r->data + offset, n);
      stream_send(dd, kDigestLen);
    }
    offset += n;
  }
}

}  // namespace nvtcp::host::detail

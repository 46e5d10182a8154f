// SPDX-License-Identifier: Apache-2.0
#include "host/queue_pair_impl.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "util/log.hpp"
#include "wire/digest.hpp"

namespace nvtcp::host::detail {

using namespace nvtcp::wire;

namespace {
using QS = QueueState;

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

void QueuePairImpl::set_state(State to) {
  if (kCheckTransitions && !kQueueTransitions.allows(state_, to))
    illegal_transition("queue pair", queue_state_name(state_), queue_state_name(to), "QueuePairImpl::set_state");
  log::debug("{}:{} qid {}: {} -> {}", p_.trid.traddr, p_.trid.trsvcid, p_.qid, queue_state_name(state_),
             queue_state_name(to));
  g_queue_pairs_in_state[size_t(state_)].fetch_sub(1, std::memory_order_relaxed);
  g_queue_pairs_in_state[size_t(to)].fetch_add(1, std::memory_order_relaxed);
  state_ = to;
}

QueuePairImpl::QueuePairImpl(reactor::Reactor& r, QueueParams p, std::shared_ptr<ControllerLink> link)
    : reactor_(r),
      p_(std::move(p)),
      conn_(*this),
      receiver_(transport::Side::Host, this),
      auth_(*this),
      recovery_(*this, std::move(link), {p_.ctrl_loss_tmo_ms, p_.fast_io_fail_tmo_ms, p_.reconnect_delay_ms}) {
  pool_.resize(p_.depth + 1);
  for (uint32_t i = 0; i <= p_.depth; ++i) pool_[i].cid = uint16_t(i);
  free_.reserve(p_.depth);
  for (uint32_t i = p_.depth; i-- > 0;) free_.push_back(&pool_[i]);
  g_queue_pairs_in_state[size_t(state_)].fetch_add(1, std::memory_order_relaxed);
}

QueuePairImpl::~QueuePairImpl() {
  shutdown();
  g_queue_pairs_in_state[size_t(state_)].fetch_sub(1, std::memory_order_relaxed);
}

void QueuePairImpl::shutdown() {
  fail_for_good(HostError::make(HostError::Kind::Transport, "queue pair closed"), FailedBy::Owner);
  conn_.end_linger();  // the owner wants the queue gone: no waiting for the peer to take a TermReq
  conn_.abort_connect();
  uint64_t deadline = now() + 2000 * kNsPerMs;
  while (conn_.kernel_holds_socket() && now() < deadline) reactor_.run_once(1000);
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

void QueuePairImpl::fill_header(CommonHeader& ch, PduType type, uint8_t hlen, uint32_t data_len, uint8_t flags) {
  fill_common_header(ch, type, hlen, data_len, flags, p_.hdgst, p_.ddgst, cpda_);
}

HostError QueuePairImpl::submit(const Sqe& in, void* data, uint32_t len, bool to_controller, CompletionFn cb,
                                void* ctx) {
  // A fabrics command on an I/O queue is the queue's own business (its Connect, sent by
  // connect() itself): one from a caller (a Disconnect, say) would end or change the queue
  // under every command on it, and through a shared queue pair under other callers too.
  if (p_.qid != 0 && in.opc == uint8_t(AdminOpcode::Fabrics))
    return HostError::refused(HostError::Kind::Invalid, EINVAL);
  if (failed() || recovery_.fast_failing()) return HostError::refused(HostError::Kind::Transport, ENOTCONN);
  bool send_now = state_ == State::Ready;
  // While reconnecting, commands wait for the new connection (as the kernel queues them).
  if (!send_now && !recovery_.can_reconnect()) return HostError::refused(HostError::Kind::Transport, ENOTCONN);
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
  conn_.send(r->cmd_pdu, head);
  if (icd) {
    conn_.send(r->data, icd);
    if (p_.ddgst) {
      put_data_digest(r->cmd_ddgst, r->data, icd);
      conn_.send(r->cmd_ddgst, kDigestLen);
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
  if (recovery_.can_reconnect()) {
    recovery_.disconnect(why.message, state_ == State::Ready);
    return;
  }
  fail_for_good(std::move(why));
}

void QueuePairImpl::fail_for_good(HostError why, FailedBy by) {
  if (failed()) return;
  bool was_ready = state_ == State::Ready || state_ == State::Disconnected;
  recovery_.given_up();
  if (was_ready && by == FailedBy::Connection)  // during connect() the error is returned instead
    log::warn("{}:{} qid {}: {}", p_.trid.traddr, p_.trid.trsvcid, p_.qid, why.message);
  if (error_.ok()) error_ = std::move(why);
  conn_.abort_connect();
  // Commands end only once nothing can land in their buffers any more: a receive in flight
  // may be writing straight into one.
  const SocketState socket = conn_.socket();
  if (socket == SocketState::Open || socket == SocketState::Closing) {
    set_state(State::Failing);
    conn_.close();
  } else if (socket == SocketState::Lingering) {
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

void QueuePairImpl::end_outstanding() {
  for (auto& r : pool_) {
    if (r.state == HostRequest::State::Free) continue;
    Completion c;
    c.status = r.timed_out ? sc::HostAbortedCommand : sc::TransportError;
    finish(&r, c);
  }
}

void QueuePairImpl::on_receive(const uint8_t* data, size_t len) {
  if (receiving()) receiver_.feed(data, len);
}

void QueuePairImpl::on_closed(int err) {
  conn_.on_closed();
  if (state_ == State::Failing) {
    set_state(State::Failed);
    end_outstanding();
    return;
  }
  if (!receiving()) return;
  std::string why = err < 0 ? fmt::format("connection lost: {}", strerror(-err)) : "connection closed by the target";
  if (conn_.fail_unfinished_handshake(why)) return;
  if (auth_.fail_on_close(why)) return;
  if (state_ == State::AwaitICResp && !conn_.over_tls())
    why += " before its ICResp (a listener that requires TLS closes a host that does not start with it: see --tls-key)";
  HostError e = HostError::make(HostError::Kind::Transport, why);
  e.err_no = err < 0 ? -err : 0;
  fail(std::move(e));
}

void QueuePairImpl::on_pdu_error(Fes fes, uint32_t fei, const std::string& why) {
  log::warn("{}:{} qid {}: fatal transport error: {} (FES {}); sending H2CTermReq", p_.trid.traddr, p_.trid.trsvcid,
            p_.qid, why, unsigned(fes));
  // The commands fail (or are held for a reconnect) at once, below; only the socket waits.
  if (receiving()) conn_.send_term_req(fes, fei);
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
    return conn_.take_icresp(*reinterpret_cast<const ICRespPdu*>(hdr));
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
      conn_.send_connect();
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
    conn_.send(slot, h->ch.pdo);
    conn_.send(r->data + offset, n);
    if (p_.ddgst) {
      uint8_t* dd = slot + h2c_slot_size_ - kDigestLen;
      put_data_digest(dd, r->data + offset, n);
      conn_.send(dd, kDigestLen);
    }
    offset += n;
  }
}

}  // namespace nvtcp::host::detail

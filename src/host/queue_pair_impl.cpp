#include "host/queue_pair_impl.hpp"

#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "util/log.hpp"
#include "wire/digest.hpp"

namespace nvtcp::host::detail {

using namespace nvtcp::wire;

namespace {
constexpr uint32_t kHostMaxR2T = 4;  // outstanding R2Ts per command we accept (ICReq MAXR2T + 1)
}

QueuePairImpl::QueuePairImpl(reactor::Reactor& r, QueueParams p)
    : reactor_(r), p_(std::move(p)), receiver_(transport::Side::Host, this) {
  pool_.resize(p_.depth);
  free_.reserve(p_.depth);
  for (uint32_t i = p_.depth; i-- > 0;) {
    pool_[i].cid = uint16_t(i);
    free_.push_back(&pool_[i]);
  }
  connect_c_.owner = this;
  connect_c_.fn = [](reactor::Completion* c, int res, uint32_t) {
    static_cast<reactor::OwnedCompletion<QueuePairImpl>*>(c)->owner->connect_res_ = res;
  };
}

QueuePairImpl::~QueuePairImpl() {
  shutdown();
  if (!stream_ && fd_ >= 0) ::close(fd_);
}

void QueuePairImpl::shutdown() {
  if (stream_ && !closed_) {
    failed_ = true;
    stream_->close();
    uint64_t deadline = reactor::monotonic_ns() + 2'000'000'000ull;
    while (!closed_ && reactor::monotonic_ns() < deadline) reactor_.run_once(10000);
  }
  if (state_ == State::TcpConnecting && fd_ >= 0) {
    ::shutdown(fd_, SHUT_RDWR);
    uint64_t deadline = reactor::monotonic_ns() + 1'000'000'000ull;
    while (connect_res_ == 1 && reactor::monotonic_ns() < deadline) reactor_.run_once(10000);
  }
}

bool QueuePairImpl::run_until(State want, std::string& err) {
  uint64_t deadline = reactor::monotonic_ns() + uint64_t(p_.timeout_ms) * 1000000ull;
  while (state_ != want && !failed_) {
    if (reactor::monotonic_ns() > deadline) {
      err = fmt::format("{}:{} qid {}: timed out after {} ms", p_.trid.traddr, p_.trid.trsvcid, p_.qid, p_.timeout_ms);
      return false;
    }
    reactor_.run_once(10000);
  }
  if (failed_) {
    err = fmt::format("{}:{} qid {}: {}", p_.trid.traddr, p_.trid.trsvcid, p_.qid, error_);
    return false;
  }
  return true;
}

bool QueuePairImpl::connect(std::string& err) {
  reactor::Endpoint ep;
  if (!reactor::resolve(p_.trid.traddr, p_.trid.trsvcid, ep, err)) return false;
  fd_ = ::socket(ep.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    err = fmt::format("socket: {}", strerror(errno));
    return false;
  }
  std::string e = reactor::apply_socket_options(fd_, {true, 0, 0, p_.tcp_congestion});
  if (!e.empty()) {
    err = e;
    return false;
  }
  // TCP connect through the ring, bounded by the connect timeout.
  state_ = State::TcpConnecting;
  io_uring_sqe* sqe = reactor_.get_sqe();
  io_uring_prep_connect(sqe, fd_, reinterpret_cast<sockaddr*>(&ep.addr), ep.len);
  reactor_.prep(sqe, &connect_c_);
  uint64_t deadline = reactor::monotonic_ns() + uint64_t(p_.timeout_ms) * 1000000ull;
  while (connect_res_ == 1 && reactor::monotonic_ns() < deadline) reactor_.run_once(10000);
  if (connect_res_ != 0) {
    if (connect_res_ == 1) {
      err = fmt::format("connect to {}: timed out after {} ms", ep.to_string(), p_.timeout_ms);
      shutdown();
    } else {
      err = fmt::format("connect to {}: {}", ep.to_string(), strerror(-connect_res_));
    }
    state_ = State::Failed;
    return false;
  }
  stream_ = std::make_unique<reactor::TcpStream>(reactor_, fd_, this, 256 * 1024);
  fd_ = -1;  // the stream owns it now
  stream_->start();

  // ICReq
  std::memset(icreq_, 0, sizeof(icreq_));
  auto* ic = reinterpret_cast<ICReqPdu*>(icreq_);
  ic->ch.type = uint8_t(PduType::ICReq);
  ic->ch.hlen = sizeof(ICReqPdu);
  ic->ch.plen = sizeof(ICReqPdu);
  ic->pfv = kPfv;
  ic->hpda = 0;
  ic->digest = uint8_t((p_.hdgst ? 1 : 0) | (p_.ddgst ? 2 : 0));
  ic->maxr2t = kHostMaxR2T - 1;
  state_ = State::AwaitICResp;
  stream_->send(icreq_, sizeof(icreq_));
  if (!run_until(State::AwaitConnect, err)) return false;

  // H2CData header slots: enough for the largest transfer at MAXH2CDATA per PDU, plus
  // one partial PDU per R2T.
  h2c_slot_size_ = data_offset(sizeof(H2CDataPdu), p_.hdgst, cpda_) + kDigestLen;
  h2c_slots_per_request_ = (p_.max_transfer + maxh2cdata_ - 1) / maxh2cdata_ + kHostMaxR2T + 1;
  h2c_arena_.assign(size_t(h2c_slot_size_) * h2c_slots_per_request_ * p_.depth, 0);
  for (uint32_t i = 0; i < p_.depth; ++i)
    pool_[i].h2c_slots = h2c_arena_.data() + size_t(i) * h2c_slot_size_ * h2c_slots_per_request_;

  // Fabrics Connect, data in the capsule.
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
  Sqe sqe_c;
  std::memcpy(&sqe_c, &cmd, sizeof(cmd));
  state_ = State::AwaitConnect;
  int rc = submit(
      sqe_c, connect_data_, sizeof(connect_data_), true,
      [](void* ctx, const Completion& c) {
        auto* self = static_cast<QueuePairImpl*>(ctx);
        self->connect_result_ = c;
        if (c.status.ok()) {
          self->cntlid_ = uint16_t(c.dw0 & 0xFFFF);
          self->state_ = State::Ready;
        } else {
          self->fail(fmt::format("Connect rejected: {}{}", status_name(c.status),
                                 c.status == sc::ConnectInvalidParameters
                                     ? fmt::format(" (offset {} in the {})", c.dw0 & 0xFFFF,
                                                   (c.dw0 >> 16) & 1 ? "connect data" : "command")
                                     : ""));
        }
      },
      this);
  if (rc != 0) {
    err = "cannot submit Connect";
    return false;
  }
  return run_until(State::Ready, err);
}

void QueuePairImpl::fill_header(CommonHeader& ch, PduType type, uint8_t hlen, uint32_t data_len, uint8_t flags) {
  fill_common_header(ch, type, hlen, data_len, flags, p_.hdgst, p_.ddgst, cpda_);
}

int QueuePairImpl::submit(const Sqe& in, void* data, uint32_t len, bool to_controller, CompletionFn cb, void* ctx) {
  if (failed_ || !stream_) return -ENOTCONN;
  if (len > p_.max_transfer) return -EINVAL;
  if (free_.empty()) return -EBUSY;
  HostRequest* r = free_.back();
  free_.pop_back();
  ++outstanding_;
  r->state = HostRequest::State::Outstanding;
  r->cb = cb;
  r->ctx = ctx;
  r->data = static_cast<uint8_t*>(data);
  r->len = len;
  r->to_controller = to_controller;
  r->c2h_received = 0;
  r->r2t_next = 0;
  r->h2c_pdus = 0;
  r->data_error = false;
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
  uint32_t icd = r->in_capsule ? len : 0;
  fill_header(pdu->ch, PduType::CapsuleCmd, sizeof(CapsuleCmdHeader), icd, 0);
  uint32_t head = icd ? pdu->ch.pdo : pdu->ch.plen;
  if (p_.hdgst) {
    uint32_t crc = crc32c(r->cmd_pdu, sizeof(CapsuleCmdHeader));
    std::memcpy(r->cmd_pdu + sizeof(CapsuleCmdHeader), &crc, 4);
  }
  if (icd) {
    uint32_t used = sizeof(CapsuleCmdHeader) + (p_.hdgst ? 4 : 0);
    std::memset(r->cmd_pdu + used, 0, head - used);  // padding up to the controller's CPDA
  }
  stream_->send(r->cmd_pdu, head);
  if (icd) {
    stream_->send(r->data, icd);
    if (p_.ddgst) {
      uint32_t crc = crc32c(r->data, icd);
      std::memcpy(r->cmd_ddgst, &crc, 4);
      stream_->send(r->cmd_ddgst, 4);
    }
  }
  return 0;
}

int QueuePairImpl::poll(uint32_t timeout_us) {
  delivered_ = 0;
  reactor_.run_once(timeout_us);
  return delivered_;
}

void QueuePairImpl::finish(HostRequest* r, const Completion& c) {
  CompletionFn cb = r->cb;
  void* ctx = r->ctx;
  r->state = HostRequest::State::Free;
  free_.push_back(r);
  --outstanding_;
  ++delivered_;
  if (cb) cb(ctx, c);
}

void QueuePairImpl::fail(const std::string& why) {
  if (failed_) return;
  failed_ = true;
  error_ = why;
  if (state_ == State::Ready)  // during connect() the error is returned instead
    log::warn("{}:{} qid {}: {}", p_.trid.traddr, p_.trid.trsvcid, p_.qid, why);
  state_ = State::Failed;
  if (stream_) stream_->close();
  // Every command still outstanding ends now, with a status saying the path failed.
  Completion c;
  c.status = sc::TransportError;
  for (auto& r : pool_) {
    if (r.state == HostRequest::State::Outstanding) finish(&r, c);
  }
}

void QueuePairImpl::on_receive(const uint8_t* data, size_t len) {
  if (failed_) return;
  receiver_.feed(data, len);
}

void QueuePairImpl::on_closed(int err) {
  closed_ = true;
  if (!failed_) fail(err < 0 ? fmt::format("connection lost: {}", strerror(-err)) : "connection closed by the target");
}

void QueuePairImpl::on_pdu_error(Fes fes, uint32_t fei, const std::string& why) {
  log::warn("{}:{} qid {}: fatal transport error: {} (FES {}); sending H2CTermReq", p_.trid.traddr, p_.trid.trsvcid,
            p_.qid, why, unsigned(fes));
  if (stream_ && !failed_) {
    uint32_t len = receiver_.build_term_req(term_pdu_, PduType::H2CTermReq, fes, fei);
    stream_->send(term_pdu_, len);
    stream_->reactor().run_deferred();  // push it out before the close below
  }
  fail(why);
}

HostRequest* QueuePairImpl::lookup(uint16_t cid, uint32_t fei_offset) {
  if (cid >= pool_.size() || pool_[cid].state != HostRequest::State::Outstanding) {
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
    uint8_t asked = uint8_t((p_.hdgst ? 1 : 0) | (p_.ddgst ? 2 : 0));
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
      fail(fmt::format("the target answered digests 0x{:x} to our request 0x{:x}", ic.digest, asked));
      return false;
    }
    cpda_ = ic.cpda;
    maxh2cdata_ = ic.maxh2cdata;
    receiver_.set_digests(p_.hdgst, p_.ddgst);
    state_ = State::AwaitConnect;
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
      return;  // answered in on_pdu_header
    case PduType::C2HTermReq: {
      const auto& t = *reinterpret_cast<const TermReqPdu*>(hdr);
      fail(fmt::format("target terminated the connection: {} (FES {}, FEI {})", fes_name(Fes(t.fes)), unsigned(t.fes),
                       uint32_t(t.fei)));
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
      receiver_.fail(Fes::DataLimitExceeded, 0, "too many R2Ts for one command");
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
    if (p_.hdgst) {
      uint32_t crc = crc32c(slot, sizeof(H2CDataPdu));
      std::memcpy(slot + sizeof(H2CDataPdu), &crc, 4);
    }
    stream_->send(slot, h->ch.pdo);
    stream_->send(r->data + offset, n);
    if (p_.ddgst) {
      uint8_t* dd = slot + h2c_slot_size_ - kDigestLen;
      uint32_t crc = crc32c(r->data + offset, n);
      std::memcpy(dd, &crc, 4);
      stream_->send(dd, 4);
    }
    offset += n;
  }
}

}  // namespace nvtcp::host::detail

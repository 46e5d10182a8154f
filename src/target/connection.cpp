#include "target/connection.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "target/state_check.hpp"
#include "util/log.hpp"
#include "util/zeros.hpp"
#include "wire/digest.hpp"
#include "wire/fabrics.hpp"
#include "wire/identify.hpp"
#include "wire/reservations.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

namespace {
constexpr uint32_t kAdminInCapsule = 8192;     // admin and fabrics commands: at most 8 KiB
constexpr uint32_t kMaxAdminQueueDepth = 128;
constexpr uint64_t kControllerPollNs = 100'000'000;  // I/O queues notice a dead controller
constexpr uint64_t kTermReqLingerNs = 1'000'000'000;
constexpr uint64_t kMemoryRetryNs = 2'000'000;       // waiting for buffer memory freed elsewhere
constexpr uint64_t kSendQueueRetryNs = 50'000'000;   // a fallback: sent responses wake us sooner
// Generic status 21h, Command Interrupted: the controller could not process the command now
// and the host should retry it (sent with DNR clear). Used when in-capsule data arrives and
// there is no buffer memory for it.
constexpr Status kCommandInterrupted{Sct::Generic, 0x21};

constexpr uint32_t align_4k(uint32_t n) { return (n + 4095) & ~4095u; }
// How often writes waiting for a fused Compare and Write look at its namespace's fence again.
constexpr uint64_t kFenceRetryNs = 20'000;

// The command groups a reservation restricts (NVMe base specification, reservations).
bool reads_blocks(IoOpcode op) {
  return op == IoOpcode::Read || op == IoOpcode::Compare || op == IoOpcode::Verify || op == IoOpcode::Copy;
}
bool writes_blocks(IoOpcode op) {
  return op == IoOpcode::Write || op == IoOpcode::WriteZeroes || op == IoOpcode::DatasetManagement ||
         op == IoOpcode::Copy || op == IoOpcode::Flush;
}

// The buffer a command needs for data_len bytes from the host: Compare reads the device's
// blocks in after the host's (4 KiB aligned, for O_DIRECT); Copy keeps its range list and
// one source range's data.
uint32_t buffer_bytes_for(const Sqe& sqe, uint32_t data_len, uint32_t mdts) {
  switch (static_cast<IoOpcode>(sqe.opc)) {
    case IoOpcode::Compare: return align_4k(data_len) + data_len;
    case IoOpcode::Copy: return kCopyRangesBytes + mdts;
    default: return data_len;
  }
}

// Admin commands with data for the host. Get Features has data for some features only
// (81h): without it the SGL may be empty.
bool transfers_to_host(const Sqe& sqe) {
  auto op = static_cast<AdminOpcode>(sqe.opc);
  if (op == AdminOpcode::GetFeatures) return sqe.sgl.length != 0;
  return op == AdminOpcode::Identify || op == AdminOpcode::GetLogPage;
}
}  // namespace

void ConnectionSet::add(Connection* c) { conns_.push_back(c); }
void ConnectionSet::remove(Connection* c) {
  auto it = std::find(conns_.begin(), conns_.end(), c);
  if (it != conns_.end()) {
    *it = conns_.back();
    conns_.pop_back();
  }
}
void ConnectionSet::collect(std::vector<ConnectionInfo>& out) const {
  for (const Connection* c : conns_) out.push_back(c->info());
}
void ConnectionSet::close_all() {
  auto copy = conns_;
  for (Connection* c : copy) c->close("target shutting down");
}

Connection::Connection(TargetState& target, reactor::Reactor& r, int fd, std::string peer, ConnectionSet& set,
                       std::string address, Arrival arrival)
    : target_(target),
      reactor_(r),
      peer_(std::move(peer)),
      set_(set),
      stream_(r, fd, this),
      receiver_(transport::Side::Target, this),
      pool_(target.config, target.usage, this, [](reactor::SendDone* d) {
        Request* req = static_cast<Request::Sent*>(d)->req;
        req->conn->release(req);
      }) {
  address_ = std::move(address);
  arrival_ = std::move(arrival);
  term_sent_.owner = this;
  term_sent_.fn = [](reactor::SendDone* d) {
    static_cast<TermSent*>(d)->owner->stream_.close();
  };
  timer_.owner = this;
  timer_.fn = on_keepalive_timer;
  retry_timer_.owner = this;
  retry_timer_.fn = on_retry_timer;
  fence_timer_.owner = this;
  fence_timer_.fn = on_fence_timer;
  resume_d_.owner = this;
  resume_d_.fn = [](reactor::Deferred* d) { static_cast<reactor::OwnedDeferred<Connection>*>(d)->owner->resume_waiting(); };
  target_.usage.connections.fetch_add(1);
  const auto& cfg = target_.config;
  receiver_.set_max_plen(std::max({cfg.in_capsule_data, cfg.max_h2c_data, kAdminInCapsule}) + 512);
  pool_.resize(1);  // until Connect says how deep the queue is, only Connect can arrive
  set_.add(this);
}

Connection::~Connection() {
  reactor_.cancel_timer(&timer_);
  reactor_.cancel_timer(&retry_timer_);
  reactor_.undefer(&resume_d_);
  if (host_) host_->connections.fetch_sub(1, std::memory_order_relaxed);
  if (!address_.empty()) target_.addresses.release(address_);
  target_.usage.connections.fetch_sub(1);
}

ConnectionInfo Connection::info() const {
  ConnectionInfo i;
  i.peer = peer_;
  i.qid = qid_;
  i.connected = state_ == State::Connected;
  i.send_queue_bytes = stream_.queued_bytes();
  i.send_queue_peak = send_peak_;
  i.buffer_bytes = pool_.buffer_bytes();
  i.pool_bytes = pool_.pool_bytes();
  i.waiting = waiting_;
  i.waits = waits_;
  i.request_states = pool_.counts();
  return i;
}

void Connection::start() {
  log::debug("{}: connection accepted", peer_);
  reactor_.arm_timer(&timer_, uint64_t(target_.config.icreq_timeout_ms) * 1000000ull);
  stream_.start();
}

void Connection::close(const std::string& why) {
  if (state_ != State::Closing) {
    log::info("{}: closing connection: {}", peer_, why);
    set_state(State::Closing);
  }
  stream_.close();
}

const char* Connection::state_name(State s) {
  switch (s) {
    case State::AwaitICReq: return "AwaitICReq";
    case State::AwaitConnect: return "AwaitConnect";
    case State::Connected: return "Connected";
    case State::Closing: return "Closing";
  }
  return "?";
}

void Connection::set_state(State to) {
#if NVTCP_STATE_CHECKS
  if (!connection_transition_legal(state_, to))
    illegal_transition("connection", state_name(state_), state_name(to), qid_);
#endif
  state_ = to;
}

void Connection::teardown_controller(const char* why) {
  if (!ctrl_) return;
  if (qid_ == 0) {
    ctrl_->detach_admin_queue();
    if (!ctrl_->dead.exchange(true))
      log::info("{}: controller {} of {} torn down: {}", peer_, ctrl_->cntlid(), ctrl_->subsystem().nqn(), why);
    ctrl_->subsystem().remove_controller(ctrl_->cntlid());
  } else {
    ctrl_->unregister_io_queue(qid_, this);
    ctrl_->release_queue(qid_);
  }
  ctrl_.reset();
}

void Connection::on_receive(const uint8_t* data, size_t len) {
  if (state_ == State::Closing) return;
  receiver_.feed(data, len);
}

bool Connection::recv_direct(uint8_t*& p, size_t& n) {
  return state_ != State::Closing && receiver_.in_place_window(transport::kMinInPlaceBytes, p, n);
}

void Connection::on_receive_direct(size_t len) {
  if (state_ == State::Closing) return;
  receiver_.consumed_in_place(len);
}

void Connection::on_closed(int err) {
  if (err < 0) log::debug("{}: connection error: {}", peer_, strerror(-err));
  log::debug("{}: connection closed", peer_);
  closed_ = true;
  if (state_ != State::Closing) set_state(State::Closing);
  teardown_controller("admin queue closed");
  reactor_.cancel_timer(&timer_);
  reactor_.cancel_timer(&retry_timer_);
  reactor_.cancel_timer(&fence_timer_);
  // A fused operation that owned its namespace's fence and never reached the device lets go.
  for (Request* w : fence_waiters_)
    if (w->fence_owner) w->fence_ns->fence.release();
  fence_waiters_.clear();
  reactor_.undefer(&resume_d_);
  set_.remove(this);
  if (backend_inflight_ == 0) delete this;  // else the last device completion frees us
  else set_.add_draining();
}

const Request* Connection::stalled_write(uint64_t now) const {
  // Checked on the connection's periodic timer, not per I/O: a scan of the slots.
  const uint64_t limit = uint64_t(target_.config.h2c_data_timeout_ms) * 1000000ull;
  if (limit == 0) return nullptr;
  for (const auto& r : pool_.slots())
    if (r->state() == Request::State::AwaitingH2C && r->rx_next < r->r2t_next) {
      const uint64_t asked = r->r2t_sent_ns[(r->rx_next / target_.config.max_h2c_data) % Request::kMaxR2T];
      if (now > asked && now - asked > limit) return r.get();
    }
  return nullptr;
}

// Responses queued and none of them taken by the host since send_timeout_ms ago.
bool Connection::send_stalled(uint64_t now) {
  const uint64_t limit = uint64_t(target_.config.send_timeout_ms) * 1000000ull;
  if (stream_.queued_bytes() == 0 || stream_.sent_bytes() != sent_seen_ || send_progress_ns_ == 0) {
    sent_seen_ = stream_.sent_bytes();
    send_progress_ns_ = now;
    return false;
  }
  return limit != 0 && now > send_progress_ns_ && now - send_progress_ns_ > limit;
}

void Connection::on_keepalive_timer(reactor::Timer* t) {
  auto* self = static_cast<TimerSlot*>(t)->owner;
  uint64_t now = reactor::monotonic_ns();  // the same clock Controller::touch() reads
  switch (self->state_) {
    case State::AwaitICReq:
      self->close(fmt::format("no ICReq within {} ms", self->target_.config.icreq_timeout_ms));
      return;
    case State::AwaitConnect:
      self->close("no Connect after ICReq");
      return;
    case State::Closing:
      self->stream_.close();  // the peer did not take our TermReq in time
      return;
    case State::Connected: break;
  }
  Controller* c = self->ctrl_.get();
  if (!c) return;
  if (self->qid_ == 0 && c->keep_alive_expired(now)) {
    log::warn("{}: keep-alive timeout ({} ms) on controller {}", self->peer_, c->kato_ms(), c->cntlid());
    self->teardown_controller("keep-alive timeout");
    self->close("keep-alive timeout");
    return;
  }
  if (c->dead.load(std::memory_order_relaxed)) {
    self->close("its controller was torn down");
    return;
  }
  if (self->send_stalled(now)) {
    log::warn("{}: the host has not read its responses ({} bytes queued) for {} ms; closing the connection",
              self->peer_, self->stream_.queued_bytes(), self->target_.config.send_timeout_ms);
    self->close("send timeout");
    return;
  }
  if (const Request* r = self->stalled_write(now)) {
    log::warn("{}: no H2CData for cid {} (qid {}) within {} ms of asking for it; closing the connection",
              self->peer_, r->sqe.cid, self->qid_, self->target_.config.h2c_data_timeout_ms);
    self->close("H2CData timeout");
    return;
  }
  uint64_t period = kControllerPollNs;
  if (self->qid_ == 0 && c->kato_ms()) period = std::min<uint64_t>(period, uint64_t(c->kato_ms()) * 250000ull);
  self->reactor_.arm_timer(&self->timer_, period);
}

// ---------------------------------------------------------------- PDU layer

bool Connection::on_pdu_header(const uint8_t* hdr, uint32_t data_len, uint8_t*& dst) {
  const auto& ch = *reinterpret_cast<const CommonHeader*>(hdr);
  auto type = static_cast<PduType>(ch.type);
  if (type == PduType::H2CTermReq) {
    dst = nullptr;  // the offending header the host quotes back; we only log the status
    return true;
  }
  if (type == PduType::ICReq) {
    if (state_ != State::AwaitICReq) {
      fatal(Fes::PduSequenceError, 0, "ICReq after the connection was initialized");
      return false;
    }
    // Handled here, while the header is still held, so a TermReq can quote it.
    return handle_icreq(*reinterpret_cast<const ICReqPdu*>(hdr));
  }
  if (state_ == State::AwaitICReq) {
    fatal(Fes::PduSequenceError, 0, fmt::format("{} before ICReq", pdu_type_name(type)));
    return false;
  }
  if (type == PduType::CapsuleCmd)
    return capsule_header(*reinterpret_cast<const CapsuleCmdHeader*>(hdr), data_len, dst);
  if (type == PduType::H2CData) return h2c_data_header(*reinterpret_cast<const H2CDataPdu*>(hdr), data_len, dst);
  fatal(Fes::InvalidHeaderField, 0, fmt::format("unexpected {}", pdu_type_name(type)));
  return false;
}

void Connection::on_pdu_complete(const uint8_t* hdr, bool data_ok) {
  const auto& ch = *reinterpret_cast<const CommonHeader*>(hdr);
  switch (static_cast<PduType>(ch.type)) {
    case PduType::ICReq: return;  // answered in on_pdu_header
    case PduType::H2CTermReq: {
      const auto& t = *reinterpret_cast<const TermReqPdu*>(hdr);
      log::warn("{}: host terminated the connection: {} (FES {}, FEI {})", peer_, fes_name(Fes(t.fes)), unsigned(t.fes), uint32_t(t.fei));
      close("H2CTermReq received");
      return;
    }
    case PduType::CapsuleCmd: {
      Request* r = h2c_req_;
      h2c_req_ = nullptr;
      if (!data_ok) {
        log::warn("{}: data digest error in capsule cid {}", peer_, r->sqe.cid);
        complete(r, sc::TransientTransportError);
        return;
      }
      if (!r->status.ok()) {
        complete(r, r->status);
        return;
      }
      if (r->data_len) r->rx_next = r->data_len;
      set_request_state(r, Request::State::Executing);
      admit(r);
      return;
    }
    case PduType::H2CData:
      h2c_data_complete(*reinterpret_cast<const H2CDataPdu*>(hdr), data_ok);
      return;
    default: return;
  }
}

void Connection::fatal(Fes fes, uint32_t fei, const std::string& why) { receiver_.fail(fes, fei, why); }

void Connection::on_pdu_error(Fes fes, uint32_t fei, const std::string& why) {
  log::warn("{}: fatal transport error: {} (FES {} {}, FEI {}); sending C2HTermReq", peer_, why, unsigned(fes),
            fes_name(fes), fei);
  if (state_ == State::Closing) return;
  set_state(State::Closing);
  uint32_t len = receiver_.build_term_req(term_pdu_, PduType::C2HTermReq, fes, fei);
  stream_.send(term_pdu_, len, &term_sent_);
  reactor_.arm_timer(&timer_, kTermReqLingerNs);
}

bool Connection::handle_icreq(const ICReqPdu& req) {
  if (req.pfv != kPfv) {
    fatal(Fes::UnsupportedParameter, offsetof(ICReqPdu, pfv), fmt::format("ICReq PFV {} unsupported", req.pfv));
    return false;
  }
  if (req.hpda > 31) {
    fatal(Fes::InvalidHeaderField, offsetof(ICReqPdu, hpda), fmt::format("ICReq HPDA {} out of range", req.hpda));
    return false;
  }
  hpda_ = req.hpda;
  host_maxr2t_ = std::min<uint32_t>(req.maxr2t, Request::kMaxR2T - 1) + 1;
  hdgst_ = (req.digest & 1) && target_.config.allow_hdgst;
  ddgst_ = (req.digest & 2) && target_.config.allow_ddgst;
  std::memset(icresp_, 0, sizeof(icresp_));
  auto* resp = reinterpret_cast<ICRespPdu*>(icresp_);
  resp->ch.type = uint8_t(PduType::ICResp);
  resp->ch.hlen = sizeof(ICRespPdu);
  resp->ch.plen = sizeof(ICRespPdu);
  resp->pfv = kPfv;
  resp->cpda = 0;
  resp->digest = uint8_t((hdgst_ ? 1 : 0) | (ddgst_ ? 2 : 0));
  resp->maxh2cdata = target_.config.max_h2c_data;
  stream_.send(icresp_, sizeof(icresp_));
  receiver_.set_digests(hdgst_, ddgst_);
  set_state(State::AwaitConnect);
  log::debug("{}: ICReq hpda {} maxr2t {} hdgst {} ddgst {}", peer_, req.hpda, req.maxr2t, hdgst_, ddgst_);
  return true;
}

uint32_t Connection::max_incapsule() const {
  return (state_ == State::Connected && qid_ != 0) ? target_.config.in_capsule_data : kAdminInCapsule;
}

bool Connection::capsule_header(const CapsuleCmdHeader& pdu, uint32_t data_len, uint8_t*& dst) {
  Request* r = pool_.alloc();
  if (!r && sqsize_ && pool_.size() < size_t(sqsize_) + stream_.held_send_dones()) {
    // Zero-copy sends keep requests whose response has left (so the host may reuse the
    // slot) until the kernel lets go of their pages: the pool grows past the queue depth
    // by at most that many, once, at warm-up.
    pool_.resize(uint32_t(pool_.size()) + 1);
    r = pool_.alloc();
  }
  if (!r) {
    fatal(Fes::PduSequenceError, 0,
          fmt::format("more commands outstanding than the queue depth ({})", pool_.size()));
    return false;
  }
  std::memcpy(&r->sqe, pdu.sqe, sizeof(Sqe));
  r->status = sc::Success;
  r->dw0 = r->dw1 = 0;
  r->data_len = 0;
  r->rx_next = 0;
  r->r2t_next = 0;
  r->tx_data = nullptr;
  r->tx_len = 0;
  r->tx_pad = 0;
  r->aborted = false;
  r->fence_counted = r->fence_owner = false;
  r->fused_partner = nullptr;
  if (sqsize_) sqhd_ = uint16_t((sqhd_ + 1) % sqsize_);
  h2c_req_ = r;
  if (data_len == 0) return true;
  // In-capsule data: check the SGL now, and drop the bytes of a bad one as they arrive.
  const SglDescriptor& sgl = r->sqe.sgl;
  if (data_len > max_incapsule()) r->status = sc::DataSglLengthInvalid;
  else if (sgl.type != kSglDataBlockOffset) r->status = sc::SglDescriptorTypeInvalid;
  else if (sgl.addr != 0) r->status = sc::SglOffsetInvalid;
  else if (sgl.length != data_len) r->status = sc::DataSglLengthInvalid;
  else if (BufferResult br = ensure_buffer(r, qid_ && ctrl_ ? buffer_bytes_for(r->sqe, data_len, ctrl_->mdts_bytes())
                                                   : data_len);
           br != BufferResult::Ok) {
    // The data is on its way and has nowhere to wait: drop it, and ask for a retry.
    r->status = br == BufferResult::Wait ? kCommandInterrupted : sc::InternalError;
    target_.usage.memory_waits.fetch_add(1, std::memory_order_relaxed);
    if (!memory_logged_) {
      log::warn("{}: no buffer memory for {} bytes of in-capsule data (limits: {} per connection, {} in all); "
                "cid {} ends with Command Interrupted, to be retried",
                peer_, data_len, target_.config.max_connection_buffer_memory, target_.config.max_buffer_memory,
                r->sqe.cid);
      memory_logged_ = true;
    }
    dst = nullptr;
    return true;
  }
  if (!r->status.ok()) {
    log::warn("{}: cid {}: bad in-capsule data ({} bytes, SGL type 0x{:02x} length {}): {}", peer_, r->sqe.cid,
              data_len, sgl.type, sgl.length, status_name(r->status));
    dst = nullptr;
    return true;
  }
  r->data_len = data_len;
  dst = r->buf.get();
  return true;
}

bool Connection::h2c_data_header(const H2CDataPdu& pdu, uint32_t data_len, uint8_t*& dst) {
  if (pdu.ttag >= pool_.size() || pool_.at(pdu.ttag)->state() != Request::State::AwaitingH2C) {
    fatal(Fes::InvalidHeaderField, offsetof(H2CDataPdu, ttag),
          fmt::format("H2CData for unknown transfer tag {}", pdu.ttag));
    return false;
  }
  Request* r = pool_.at(pdu.ttag);
  if (r->sqe.cid != pdu.cccid) {
    fatal(Fes::InvalidHeaderField, offsetof(H2CDataPdu, cccid),
          fmt::format("H2CData cccid {} does not match tag {} (cid {})", pdu.cccid, pdu.ttag, r->sqe.cid));
    return false;
  }
  if (pdu.datal != data_len) {
    fatal(Fes::InvalidHeaderField, offsetof(H2CDataPdu, datal),
          fmt::format("H2CData DATAL {} but the PDU carries {} bytes", pdu.datal, data_len));
    return false;
  }
  if (pdu.datal > target_.config.max_h2c_data) {
    fatal(Fes::DataLimitExceeded, 0, fmt::format("H2CData of {} bytes over MAXH2CDATA", pdu.datal));
    return false;
  }
  if (pdu.datao != r->rx_next || uint64_t(pdu.datao) + pdu.datal > r->r2t_next || pdu.datal == 0) {
    fatal(Fes::DataOutOfRange, 0,
          fmt::format("H2CData [{}, +{}) outside the requested window [{}, {})", pdu.datao, pdu.datal, r->rx_next,
                      r->r2t_next));
    return false;
  }
  h2c_req_ = r;
  dst = r->buf.get() + pdu.datao;
  return true;
}

void Connection::h2c_data_complete(const H2CDataPdu& pdu, bool data_ok) {
  Request* r = h2c_req_;
  h2c_req_ = nullptr;
  r->rx_next += pdu.datal;
  if (!data_ok) {
    log::warn("{}: data digest error in H2CData for cid {}", peer_, r->sqe.cid);
    r->status = sc::TransientTransportError;
  }
  if (r->rx_next < r->data_len) {
    send_r2ts(r);
    return;
  }
  set_request_state(r, Request::State::Executing);
  if (r->aborted) complete(r, sc::AbortRequested);
  else if (!r->status.ok()) complete(r, r->status);
  else if (qid_ == 0) execute_admin(r);
  else execute_io(r);
}

void Connection::fill_header(CommonHeader& ch, PduType type, uint8_t hlen, uint32_t data_len, uint8_t flags) {
  fill_common_header(ch, type, hlen, data_len, flags, hdgst_, ddgst_, hpda_);
}

void Connection::send_r2ts(Request* r) {
  const uint32_t chunk = target_.config.max_h2c_data;
  const uint32_t max_out = std::min({host_maxr2t_, target_.config.max_r2t_per_command, Request::kMaxR2T});
  while (r->r2t_next < r->data_len) {
    uint32_t sent = (r->r2t_next + chunk - 1) / chunk;
    uint32_t done = r->rx_next / chunk;
    if (sent - done >= max_out) break;
    uint32_t len = std::min(chunk, r->data_len - r->r2t_next);
    uint8_t* slot = r->r2t_pdu[sent % Request::kMaxR2T];
    auto* p = reinterpret_cast<R2TPdu*>(slot);
    std::memset(p, 0, sizeof(R2TPdu));
    fill_header(p->ch, PduType::R2T, sizeof(R2TPdu), 0, 0);
    p->cccid = r->sqe.cid;
    p->ttag = r->index;
    p->r2to = r->r2t_next;
    p->r2tl = len;
    if (hdgst_) {
      uint32_t crc = crc32c(slot, sizeof(R2TPdu));
      std::memcpy(slot + sizeof(R2TPdu), &crc, 4);
    }
    stream_.send(slot, p->ch.plen);
    r->r2t_sent_ns[sent % Request::kMaxR2T] = reactor::monotonic_ns();
    r->r2t_next += len;
  }
}

// ---------------------------------------------------------------- commands

void Connection::execute(Request* r) {
  r->shutdown_after_flush = false;
  // No fused operations; and fabrics commands describe data with SGLs only (PSDT 01b),
  // whatever the opcode: anything else would run as something the host did not ask for.
  if ((r->sqe.flags & kSqeFlagsPsdtMask) != kSqeFlagsPsdtSgl) {
    log::debug("{}: cid {} opcode 0x{:02x}: flags 0x{:02x} (not PSDT 01b)", peer_, r->sqe.cid, r->sqe.opc,
               r->sqe.flags);
    complete(r, sc::InvalidField);
    return;
  }
  if ((fused_first_ || (r->sqe.flags & kSqeFlagsFuseMask)) && fused_halves(r)) return;
  if (r->sqe.opc == uint8_t(AdminOpcode::Fabrics)) {
    execute_fabrics(r);
  } else if (state_ != State::Connected) {
    complete(r, sc::CommandSequenceError);
  } else if (qid_ == 0) {
    execute_admin(r);
  } else {
    execute_io(r);
  }
}

void Connection::execute_fabrics(Request* r) {
  auto fctype = static_cast<FabricsType>(r->sqe.fctype());
  if (fctype == FabricsType::Connect) {
    if (state_ == State::Connected) {
      complete(r, sc::CommandSequenceError);
      return;
    }
    execute_connect(r);
    return;
  }
  if (state_ != State::Connected) {
    complete(r, sc::CommandSequenceError);
    return;
  }
  switch (fctype) {
    case FabricsType::PropertyGet:
    case FabricsType::PropertySet: {
      if (qid_ != 0) break;
      PropertySetCmd pg;
      std::memcpy(&pg, &r->sqe, sizeof(pg));
      bool eight = (pg.attrib & 0x7) == 1;
      Status st;
      ctrl_->touch(reactor::monotonic_ns());
      if (fctype == FabricsType::PropertyGet) {
        uint64_t v = 0;
        st = ctrl_->property_get(pg.ofst, eight, v);
        r->dw0 = uint32_t(v);
        r->dw1 = uint32_t(v >> 32);
      } else {
        Controller::PropertySetResult set = ctrl_->property_set(pg.ofst, eight, pg.value);
        if (set.flush_for_shutdown) {
          r->shutdown_after_flush = true;
          start_flush(r, true);  // completes the Property Set once every cache is durable
          return;
        }
        st = set.status;
      }
      complete(r, st);
      return;
    }
    case FabricsType::Disconnect:
      close_after_send_ = true;
      complete(r, sc::Success);
      return;
    default: break;
  }
  complete(r, sc::InvalidOpcode);
}

void Connection::invalid_connect_param(Request* r, bool in_data, uint32_t offset) {
  r->dw0 = offset | (in_data ? (1u << 16) : 0);
  complete(r, sc::ConnectInvalidParameters);
}

void Connection::execute_connect(Request* r) {
  ConnectCmd cmd;
  std::memcpy(&cmd, &r->sqe, sizeof(cmd));
  if (r->data_len != kConnectDataLen) {
    log::warn("{}: Connect without its {}-byte data (got {})", peer_, kConnectDataLen, r->data_len);
    complete(r, sc::DataSglLengthInvalid);
    return;
  }
  if (cmd.recfmt != 0) {
    complete(r, sc::ConnectIncompatibleFormat);
    return;
  }
  ConnectData data;
  std::memcpy(&data, r->buf.get(), sizeof(data));
  std::string subnqn(data.subnqn, strnlen(data.subnqn, sizeof(data.subnqn)));
  std::string hostnqn(data.hostnqn, strnlen(data.hostnqn, sizeof(data.hostnqn)));
  Subsystem* sub = target_.find_subsystem(subnqn);
  if (!sub) {
    log::warn("{}: Connect to unknown subsystem '{}'", peer_, subnqn);
    invalid_connect_param(r, true, offsetof(ConnectData, subnqn));
    return;
  }
  // A subsystem not bound to this listener is not there for this host (nvmet answers the same).
  if (!sub->reachable_through(arrival_.portid)) {
    log::warn("{}: Connect to subsystem '{}', which is not on the listener this host came through", peer_, subnqn);
    invalid_connect_param(r, true, offsetof(ConnectData, subnqn));
    return;
  }
  if (!sub->is_discovery() && !sub->host_allowed(hostnqn)) {
    log::warn("{}: host '{}' is not allowed on {}", peer_, hostnqn, subnqn);
    complete(r, sc::ConnectInvalidHost);
    return;
  }
  // Admin and discovery queues carry few commands: at most kMaxAdminQueueDepth entries (the
  // Linux host asks for 32, SPDK allows 128), which also bounds how many responses one
  // discovery connection, open to any host, can have in flight.
  const uint32_t max_depth = cmd.qid == 0 ? std::min(kMaxAdminQueueDepth, target_.config.max_queue_depth)
                                          : target_.config.max_queue_depth;
  if (cmd.sqsize == 0 || uint32_t(cmd.sqsize) + 1 > max_depth) {
    log::warn("{}: Connect SQSIZE {} out of range", peer_, cmd.sqsize);
    invalid_connect_param(r, false, offsetof(ConnectCmd, sqsize));
    return;
  }
  // What this queue holds for its life: one of its host's connection slots, and its request
  // pool (SQSIZE requests), counted in the buffer budgets like data buffers.
  const auto& cfg = target_.config;
  auto host = target_.host_budget(hostnqn);
  if (host->connections.fetch_add(1, std::memory_order_relaxed) >= cfg.max_connections_per_host &&
      cfg.max_connections_per_host) {
    host->connections.fetch_sub(1, std::memory_order_relaxed);
    log::warn("{}: host '{}' already has {} queues (max_connections_per_host)", peer_, hostnqn,
              cfg.max_connections_per_host);
    complete(r, sc::ConnectControllerBusy);
    return;
  }
  const uint64_t pool = uint64_t(cmd.sqsize + 1) * sizeof(Request);
  if (!pool_.reserve_budgets(host.get(), pool, cfg.max_buffer_memory)) {
    host->connections.fetch_sub(1, std::memory_order_relaxed);
    log::warn("{}: no buffer memory for a queue of {} entries of host '{}' (max_buffer_memory {}, "
              "max_host_buffer_memory {})",
              peer_, cmd.sqsize + 1, hostnqn, cfg.max_buffer_memory, cfg.max_host_buffer_memory);
    complete(r, kCommandInterrupted);
    return;
  }
  auto undo = [&] {
    pool_.release_budgets(host.get(), pool);
    host->connections.fetch_sub(1, std::memory_order_relaxed);
  };
  std::shared_ptr<Controller> ctrl;
  if (cmd.qid == 0) {
    if (data.cntlid != kDynamicCntlid) {
      undo();
      invalid_connect_param(r, true, offsetof(ConnectData, cntlid));
      return;
    }
    uint16_t cntlid = sub->allocate_cntlid();
    if (cntlid == 0) {
      undo();
      complete(r, sc::ConnectControllerBusy);
      return;
    }
    ctrl = sub->add_controller(std::make_shared<Controller>(target_, *sub, cntlid, hostnqn, data.hostid, cmd.kato));
    ctrl->set_local_address(arrival_.local_address);
  } else {
    ctrl = sub->find_controller(data.cntlid);
    if (!ctrl || ctrl->hostnqn() != hostnqn || std::memcmp(ctrl->hostid(), data.hostid, 16) != 0) {
      log::warn("{}: I/O Connect names controller {} that this host does not own", peer_, data.cntlid);
      undo();
      invalid_connect_param(r, true, offsetof(ConnectData, cntlid));
      return;
    }
    if (!ctrl->ready()) {
      undo();
      complete(r, sc::CommandSequenceError);
      return;
    }
    if (!ctrl->claim_queue(cmd.qid)) {
      log::warn("{}: I/O Connect for qid {} (controller has {} queues, or it is taken)", peer_, cmd.qid,
                ctrl->num_io_queues());
      undo();
      invalid_connect_param(r, false, offsetof(ConnectCmd, qid));
      return;
    }
    stats_ = ctrl->stats(cmd.qid);
    resv_cache_.assign(sub->namespaces().size(), {});
  }
  ctrl_ = ctrl;
  if (cmd.qid == 0) ctrl_->attach_admin_queue(&reactor_, this);
  else ctrl_->register_io_queue(cmd.qid, &reactor_, this);
  host_ = std::move(host);
  pool_.attach_host(host_.get(), pool);
  qid_ = cmd.qid;
  sqsize_ = uint16_t(cmd.sqsize + 1);
  sqhd_ = 1 % sqsize_;  // the Connect itself was consumed
  sq_flow_disabled_ = cmd.cattr & kConnectAttrDisableSqFlow;
  set_state(State::Connected);
  pool_.resize(sqsize_);
  log::info("{}: host {} connected to {} (controller {}, qid {}, depth {}{}{}{})", peer_, hostnqn, subnqn,
            ctrl->cntlid(), qid_, sqsize_, sq_flow_disabled_ ? ", SQ flow control off" : "",
            hdgst_ ? ", header digest" : "", ddgst_ ? ", data digest" : "");
  reactor_.arm_timer(&timer_, kControllerPollNs);
  r->dw0 = ctrl->cntlid();
  complete(r, sc::Success);
}

void Connection::execute_admin(Request* r) {
  const Sqe& sqe = r->sqe;
  uint32_t sgl_len = 0;
  if (transfers_to_host(sqe)) {
    if (sqe.sgl.type != kSglTransportDataBlock) {
      complete(r, sc::SglDescriptorTypeInvalid);
      return;
    }
    sgl_len = sqe.sgl.length;
    if (sgl_len > ctrl_->mdts_bytes()) {
      complete(r, sc::InvalidField);
      return;
    }
    if (static_cast<AdminOpcode>(sqe.opc) == AdminOpcode::Identify) {
      switch (ensure_buffer(r, kIdentifyLen)) {
        case BufferResult::Ok: break;
        case BufferResult::Wait: park(r, true); return;
        case BufferResult::Fail: complete(r, sc::InternalError); return;
      }
    }
  }
  if (static_cast<AdminOpcode>(sqe.opc) == AdminOpcode::SetFeatures && sqe.sgl.length) {
    // A feature with data (16h): in the capsule, as hosts send it, or asked for with an R2T.
    if (sqe.sgl.length > kAdminInCapsule) {
      complete(r, sc::DataSglLengthInvalid);
      return;
    }
    if (!host_data(r, sqe.sgl.length)) return;
  }
  AdminResult res = ctrl_->execute_admin(sqe, r->buf.get(), sgl_len, r->data_len);
  if (res.status.ok() && res.src) {
    // A log page: a buffer the size of what the log holds in the window, zeros after it.
    switch (ensure_buffer(r, std::max<uint32_t>(res.data_len, 4))) {
      case BufferResult::Ok: break;
      case BufferResult::Wait: park(r, true); return;  // runs again (the log is built anew)
      case BufferResult::Fail: complete(r, sc::InternalError); return;
    }
    std::memcpy(r->buf.get(), res.src, res.data_len);
    r->tx_data = r->buf.get();
    r->tx_len = res.data_len;
    r->tx_pad = res.pad_len;
    complete(r, res.status);
    return;
  }
  if (res.held) {
    if (static_cast<AdminOpcode>(sqe.opc) == AdminOpcode::Abort) {
      set_request_state(r, Request::State::HeldAbort);  // abort_done() completes it
      return;
    }
    set_request_state(r, Request::State::HeldAer);
    deliver_async_events();  // an event may already be waiting for it
    return;
  }
  r->dw0 = res.dw0;
  r->dw1 = res.dw1;
  if (res.status.ok() && res.flush_after) {
    start_flush(r, true);  // a write cache turned off: what it held must be durable first
    return;
  }
  if (res.status.ok() && res.data_len) {
    r->tx_data = r->buf.get();
    r->tx_len = std::min(res.data_len, sgl_len);
  }
  if (!res.status.ok())
    log::debug("{}: admin opcode 0x{:02x}: {}", peer_, sqe.opc, status_name(res.status));
  complete(r, res.status);
}

void Connection::deliver_async_events() {
  if (state_ != State::Connected || !ctrl_) return;
  uint32_t dw0 = 0;
  for (auto& slot : pool_.slots()) {
    Request* r = slot.get();
    if (r->state() != Request::State::HeldAer) continue;
    if (!ctrl_->take_async_event(dw0)) return;
    r->dw0 = dw0;
    log::info("{}: asynchronous event 0x{:08x} to controller {}", peer_, dw0, ctrl_->cntlid());
    complete(r, sc::Success);
  }
}

void Connection::abort_done(uint16_t abort_cid, bool aborted) {
  if (state_ != State::Connected || !ctrl_) return;
  ctrl_->abort_finished();
  for (auto& slot : pool_.slots()) {
    Request* r = slot.get();
    if (r->state() != Request::State::HeldAbort || r->sqe.cid != abort_cid) continue;
    r->dw0 = aborted ? 0 : 1;
    complete(r, sc::Success);
    return;
  }
}

bool Connection::abort_held_aer(uint16_t cid) {
  for (auto& slot : pool_.slots()) {
    Request* r = slot.get();
    if (r->state() != Request::State::HeldAer || r->sqe.cid != cid) continue;
    if (!ctrl_->take_held_aer()) return false;
    complete(r, sc::AbortRequested);
    return true;
  }
  return false;
}

bool Connection::abort_command(uint16_t cid) {
  if (state_ != State::Connected) return false;
  for (auto& slot : pool_.slots()) {
    Request* r = slot.get();
    if (r->sqe.cid != cid) continue;
    if (r->state() == Request::State::Waiting) {
      // Out of the wait list, wherever it is in it.
      Request** link = &wait_head_;
      Request* prev = nullptr;
      while (*link && *link != r) {
        prev = *link;
        link = &(*link)->next_waiting;
      }
      if (!*link) return false;
      *link = r->next_waiting;
      if (wait_tail_ == r) wait_tail_ = prev;
      r->next_waiting = nullptr;
      --waiting_;
      log::info("{}: cid {} aborted while it waited", peer_, cid);
      complete(r, sc::AbortRequested);
      return true;
    }
    if (r->state() == Request::State::AwaitingH2C && !r->aborted) {
      // The data already asked for may still come: take it, ask for no more, then end.
      r->aborted = true;
      r->data_len = r->r2t_next;
      log::info("{}: cid {} aborted while it waited for data ({} of {} bytes asked for)", peer_, cid, r->rx_next,
                r->r2t_next);
      if (r->rx_next == r->data_len) {
        set_request_state(r, Request::State::Executing);
        complete(r, sc::AbortRequested);
      }
      return true;
    }
    // Commands that go to the device one step at a time (a range, a namespace) stop at the
    // next step: what the finished steps did stays done, as an aborted command may leave it.
    const auto opc = static_cast<IoOpcode>(r->sqe.opc);
    if (r->state() == Request::State::Executing && !r->aborted && !r->fused_partner &&
        (opc == IoOpcode::DatasetManagement || opc == IoOpcode::Copy || opc == IoOpcode::Flush)) {
      r->aborted = true;
      log::info("{}: cid {} (opcode 0x{:02x}) aborted between its steps", peer_, cid, r->sqe.opc);
      return true;
    }
    return false;  // one operation on the device, or being sent
  }
  return false;
}

void Connection::execute_io(Request* r) {
  const Sqe& sqe = r->sqe;
  // The admin queue's loss ends this queue now, not at the next periodic check; a reset or
  // shut-down controller runs no I/O (the host must re-enable it first).
  if (ctrl_->dead.load(std::memory_order_relaxed)) {
    close("its controller was torn down");
    return;
  }
  if (!ctrl_->ready()) {
    complete(r, sc::CommandSequenceError);
    return;
  }
  Namespace* ns = ctrl_->subsystem().find_namespace(sqe.nsid);
  auto opc = static_cast<IoOpcode>(sqe.opc);
  if (opc == IoOpcode::Flush && sqe.nsid == kNsidAll) {
    start_flush(r, true);
    return;
  }
  if (!ns) {
    complete(r, sc::InvalidNamespace);
    return;
  }
  // A reservation held on the namespace: one relaxed load while there is none.
  if (ns->reservations.held() &&
      !ns->reservations.allowed(ctrl_->hostid(), reads_blocks(opc), writes_blocks(opc), resv_cache_[ns->index])) {
    complete(r, sc::ReservationConflict);
    return;
  }
  backend::BlockIo& io = r->io;
  io.buffer = r->buf.get();
  io.read_data = nullptr;
  io.fua = (opc == IoOpcode::Write || opc == IoOpcode::WriteZeroes) && sqe.fua();
  switch (opc) {
    case IoOpcode::Verify: {
      // The range is read as a Read would read it, and nothing is sent: a device that could
      // not read a block fails the Verify (VSL in CNS 06h bounds it as MDTS bounds a read).
      uint64_t len = 0;
      if (Status st = block_range(sqe, *ns, true, len); !st.ok()) {
        complete(r, st);
        return;
      }
      io.op = backend::BlockIo::Op::Read;
      io.offset = sqe.slba() << ns->lbads;
      io.length = len;
      if (!read_buffer(r, ns, uint32_t(len))) return;
      break;
    }
    case IoOpcode::Read:
    case IoOpcode::Write:
    case IoOpcode::WriteZeroes: {
      uint64_t len = 0;
      if (Status st = block_range(sqe, *ns, opc != IoOpcode::WriteZeroes, len); !st.ok()) {
        complete(r, st);
        return;
      }
      io.offset = sqe.slba() << ns->lbads;
      io.length = len;
      if (opc == IoOpcode::WriteZeroes) {
        io.op = backend::BlockIo::Op::WriteZeroes;
        break;
      }
      if (sqe.sgl.length != len) {
        complete(r, sc::DataSglLengthInvalid);
        return;
      }
      if (opc == IoOpcode::Read) {
        if (sqe.sgl.type != kSglTransportDataBlock) {
          complete(r, sc::SglDescriptorTypeInvalid);
          return;
        }
        io.op = backend::BlockIo::Op::Read;
        if (!read_buffer(r, ns, uint32_t(len))) return;
        r->tx_pending = uint32_t(len);
        tx_pending_ += len;
        break;
      }
      io.op = backend::BlockIo::Op::Write;
      if (!host_data(r, uint32_t(len))) return;
      io.buffer = r->buf.get();
      break;
    }
    case IoOpcode::Compare: {
      // The host's blocks against the device's: Compare Failure on any difference.
      uint64_t len = 0;
      if (Status st = block_range(sqe, *ns, true, len); !st.ok()) {
        complete(r, st);
        return;
      }
      if (sqe.sgl.length != len) {
        complete(r, sc::DataSglLengthInvalid);
        return;
      }
      if (!host_data(r, uint32_t(len))) return;
      io.op = backend::BlockIo::Op::Read;
      io.offset = sqe.slba() << ns->lbads;
      io.length = len;
      io.buffer = r->buf.get() + align_4k(uint32_t(len));
      break;
    }
    case IoOpcode::Copy: {
      const uint32_t nr = (sqe.cdw12 & 0xFF) + 1, format = (sqe.cdw12 >> 8) & 0xF;
      if (format != 0) {  // source range format 0h only (OCFS)
        complete(r, sc::InvalidField);
        return;
      }
      if (nr > kCopyMaxRanges) {
        complete(r, sc::CommandSizeLimitExceeded);
        return;
      }
      const uint32_t len = nr * uint32_t(sizeof(CopySourceRange));
      if (sqe.sgl.length != len) {
        complete(r, sc::DataSglLengthInvalid);
        return;
      }
      if (!host_data(r, len)) return;
      const auto* ranges = reinterpret_cast<const CopySourceRange*>(r->buf.get());
      const uint64_t blocks = ns->blocks.load(std::memory_order_relaxed);
      const uint64_t max_range = copy_max_range_blocks(ctrl_->mdts_bytes(), ns->lbads);
      uint64_t total = 0;
      for (uint32_t i = 0; i < nr; ++i) {
        const uint64_t nlb = uint64_t(ranges[i].nlb) + 1;
        if (nlb > max_range) {
          complete(r, sc::CommandSizeLimitExceeded);
          return;
        }
        if (ranges[i].slba >= blocks || nlb > blocks - ranges[i].slba) {
          complete(r, sc::LbaOutOfRange);
          return;
        }
        total += nlb;
      }
      const uint64_t sdlba = sqe.slba();
      if (sdlba >= blocks || total > blocks - sdlba) {
        complete(r, sc::LbaOutOfRange);
        return;
      }
      r->copy_next = 0;
      r->copy_dst = sdlba;
      r->copy_writing = false;
      copy_step(r);
      return;
    }
    case IoOpcode::Flush: start_flush(r, false); return;
    case IoOpcode::ReservationRegister:
    case IoOpcode::ReservationAcquire:
    case IoOpcode::ReservationRelease:
    case IoOpcode::ReservationReport: execute_reservation(r, ns); return;
    case IoOpcode::DatasetManagement: {
      uint32_t nr = (sqe.cdw10 & 0xFF) + 1;
      uint32_t len = nr * uint32_t(sizeof(DsmRange));
      if (sqe.sgl.length != len) {
        complete(r, sc::DataSglLengthInvalid);
        return;
      }
      if (!host_data(r, len)) return;
      if (!(sqe.cdw11 & (1u << 2))) {  // only the Deallocate attribute asks us to act
        complete(r, sc::Success);
        return;
      }
      const auto* ranges = reinterpret_cast<const DsmRange*>(r->buf.get());
      const uint64_t blocks = ns->blocks.load(std::memory_order_relaxed);
      for (uint32_t i = 0; i < nr; ++i) {
        if (ranges[i].slba >= blocks || ranges[i].nlb > blocks - ranges[i].slba) {
          complete(r, sc::LbaOutOfRange);
          return;
        }
      }
      r->dsm_next = 0;
      dsm_step(r);
      return;
    }
    default:
      complete(r, sc::InvalidOpcode);
      return;
  }
  submit_io(r, ns);
}

// Reservation commands: the namespace's Reservations decides, under its lock; the notices a
// command causes go to the other hosts' controllers.
void Connection::execute_reservation(Request* r, Namespace* ns) {
  const Sqe& sqe = r->sqe;
  const auto opc = static_cast<IoOpcode>(sqe.opc);
  Reservations::HostId host;
  std::memcpy(host.data(), ctrl_->hostid(), host.size());
  if (opc == IoOpcode::ReservationReport) {
    const uint64_t len = (uint64_t(sqe.cdw10) + 1) * 4;  // NUMD, 0's based
    if (sqe.sgl.type != kSglTransportDataBlock) {
      complete(r, sc::SglDescriptorTypeInvalid);
      return;
    }
    if (len > ctrl_->mdts_bytes() || sqe.sgl.length != len) {
      complete(r, len > ctrl_->mdts_bytes() ? sc::InvalidField : sc::DataSglLengthInvalid);
      return;
    }
    switch (ensure_buffer(r, uint32_t(len))) {
      case BufferResult::Ok: break;
      case BufferResult::Wait: park(r, true); return;
      case BufferResult::Fail: complete(r, sc::InternalError); return;
    }
    const Status st = ns->reservations.report(sqe.cdw11 & 1, r->buf.get(), uint32_t(len));
    if (st.ok()) {
      r->tx_data = r->buf.get();
      r->tx_len = uint32_t(len);
    }
    complete(r, st);
    return;
  }
  const uint32_t len = opc == IoOpcode::ReservationRelease ? sizeof(ReservationReleaseData) : 16;
  if (sqe.sgl.length != len) {
    complete(r, sc::DataSglLengthInvalid);
    return;
  }
  if (!host_data(r, len)) return;
  std::vector<Reservations::Notice> notices;
  Status st;
  switch (opc) {
    case IoOpcode::ReservationRegister: {
      ReservationRegisterData d;
      std::memcpy(&d, r->buf.get(), sizeof(d));
      st = ns->reservations.do_register(host, sqe.cdw10, d, notices);
      break;
    }
    case IoOpcode::ReservationAcquire: {
      ReservationAcquireData d;
      std::memcpy(&d, r->buf.get(), sizeof(d));
      st = ns->reservations.acquire(host, sqe.cdw10, d, notices);
      break;
    }
    default: {
      ReservationReleaseData d;
      std::memcpy(&d, r->buf.get(), sizeof(d));
      st = ns->reservations.release(host, sqe.cdw10, d, notices);
      break;
    }
  }
  if (st.ok())
    log::info("{}: host {} reservation opcode 0x{:02x} cdw10 0x{:08x} on namespace {}: type now {}", peer_,
              ctrl_->hostnqn(), sqe.opc, sqe.cdw10, ns->nsid, uint8_t(ns->reservations.type()));
  ctrl_->subsystem().notify_reservation(ns->nsid, notices);
  complete(r, st);
}

// The blocks a command names (SLBA, NLB): inside the namespace, else LBA Out of Range; and,
// for a command that moves data, at most MDTS, else Invalid Field. len: their bytes. The
// namespace size (which a resize changes) is read once.
Status Connection::block_range(const Sqe& sqe, const Namespace& ns, bool bounded_by_mdts, uint64_t& len) const {
  const uint64_t blocks = ns.blocks.load(std::memory_order_relaxed);
  const uint64_t slba = sqe.slba(), nlb = sqe.nlb();
  if (slba >= blocks || nlb > blocks - slba) return sc::LbaOutOfRange;
  len = nlb << ns.lbads;
  if (bounded_by_mdts && len > ctrl_->mdts_bytes()) return sc::InvalidField;
  return sc::Success;
}

bool Connection::host_data(Request* r, uint32_t len) {
  if (r->data_len == 0) {
    // No in-capsule data: ask for it with R2Ts.
    if (r->sqe.sgl.type != kSglTransportDataBlock) {
      complete(r, sc::SglDescriptorTypeInvalid);
      return false;
    }
    switch (ensure_buffer(r, buffer_bytes_for(r->sqe, len, ctrl_->mdts_bytes()))) {
      case BufferResult::Ok: break;
      case BufferResult::Wait: park(r, true); return false;  // the R2Ts go out once memory is free
      case BufferResult::Fail: complete(r, sc::InternalError); return false;
    }
    r->data_len = len;
    set_request_state(r, Request::State::AwaitingH2C);
    send_r2ts(r);
    return false;
  }
  if (r->data_len != len) {
    complete(r, sc::DataSglLengthInvalid);
    return false;
  }
  return true;
}

// Copy: each source range is read into the buffer after the range list, then written at
// the destination, which moves on by that range's length.
void Connection::copy_step(Request* r) {
  if (r->aborted) {
    complete(r, sc::AbortRequested);
    return;
  }
  const uint32_t nr = (r->sqe.cdw12 & 0xFF) + 1;
  if (r->copy_next == nr) {
    complete(r, sc::Success);
    return;
  }
  Namespace* ns = ctrl_->subsystem().find_namespace(r->sqe.nsid);
  const auto& range = reinterpret_cast<const CopySourceRange*>(r->buf.get())[r->copy_next];
  r->copy_writing = false;
  r->io.op = backend::BlockIo::Op::Read;
  r->io.offset = range.slba << ns->lbads;
  r->io.length = (uint64_t(range.nlb) + 1) << ns->lbads;
  r->io.buffer = r->buf.get() + kCopyRangesBytes;
  r->io.read_data = nullptr;
  r->io.fua = false;
  submit_io(r, ns);
}

void Connection::copy_io_done(Request* r, Status st) {
  if (r->aborted && st.ok() && !r->copy_writing) st = sc::AbortRequested;  // the range is read, not written
  if (!st.ok()) {
    complete(r, st);
    return;
  }
  if (r->copy_writing) {
    r->copy_dst += r->io.length >> ctrl_->subsystem().find_namespace(r->sqe.nsid)->lbads;
    ++r->copy_next;
    copy_step(r);
    return;
  }
  // A device that lent its own memory for the read: copy out of it first, since the write
  // may overlap the range it came from.
  uint8_t* data = r->buf.get() + kCopyRangesBytes;
  if (r->io.read_data != data) std::memcpy(data, r->io.read_data, r->io.length);
  Namespace* ns = ctrl_->subsystem().find_namespace(r->sqe.nsid);
  r->copy_writing = true;
  r->io.op = backend::BlockIo::Op::Write;
  r->io.offset = r->copy_dst << ns->lbads;
  r->io.buffer = data;
  r->io.read_data = nullptr;
  r->io.fua = r->sqe.fua();  // CDW12 bit 30, as for a write
  submit_io(r, ns);
}

// Where a read (or a Verify) lands: the request's buffer, unless the device hands out its
// own memory. False when the request was parked until memory is free, or failed.
bool Connection::read_buffer(Request* r, Namespace* ns, uint32_t len) {
  if (ns->device->zero_copy_reads()) return true;
  switch (ensure_buffer(r, len)) {
    case BufferResult::Ok: break;
    case BufferResult::Wait: park(r, true); return false;
    case BufferResult::Fail: complete(r, sc::InternalError); return false;
  }
  r->io.buffer = r->buf.get();
  return true;
}

// Fused Compare and Write (the only fused operation NVM defines): a Compare marked first,
// then, as the very next command, a Write marked second, on the same blocks, each with its
// data in the capsule. True when r was taken here.
bool Connection::fused_halves(Request* r) {
  const uint8_t fuse = r->sqe.flags & kSqeFlagsFuseMask;
  if (Request* first = fused_first_; first && first != r) {
    fused_first_ = nullptr;
    const Sqe &c = first->sqe, &w = r->sqe;
    const uint64_t len = first->data_len;
    const bool pair = fuse == kSqeFlagsFuseSecond && w.opc == uint8_t(IoOpcode::Write) && w.nsid == c.nsid &&
                      w.slba() == c.slba() && w.nlb() == c.nlb() && r->data_len == len && len != 0;
    if (pair) {
      start_fused(first, r);
      return true;
    }
    log::warn("{}: fused Compare cid {} not followed by its Write (next: cid {} opcode 0x{:02x} fuse {})", peer_,
              c.cid, w.cid, w.opc, fuse);
    complete(first, fuse == kSqeFlagsFuseSecond ? sc::InvalidField : sc::MissingFusedCommand);
    if (fuse == kSqeFlagsFuseSecond) {
      complete(r, sc::FailedFusedCommand);
      return true;
    }
    return fuse != 0 && fused_halves(r);  // r itself may be a new first half
  }
  if (fuse == kSqeFlagsFuseFirst && qid_ != 0 && state_ == State::Connected &&
      r->sqe.opc == uint8_t(IoOpcode::Compare)) {
    if (r->data_len == 0) {  // the pair runs from its in-capsule data only
      complete(r, sc::InvalidField);
      return true;
    }
    fused_first_ = r;  // stays Executing (as execute() found it) until its second half comes
    return true;
  }
  complete(r, fuse == kSqeFlagsFuseSecond ? sc::MissingFusedCommand : sc::InvalidField);
  return true;
}

void Connection::start_fused(Request* cmp, Request* wr) {
  cmp->fused_partner = wr;
  wr->fused_partner = cmp;
  if (ctrl_->dead.load(std::memory_order_relaxed) || !ctrl_->ready()) {
    end_fused(cmp, sc::CommandSequenceError, sc::FailedFusedCommand);
    return;
  }
  Namespace* ns = ctrl_->subsystem().find_namespace(cmp->sqe.nsid);
  if (!ns) {
    end_fused(cmp, sc::InvalidNamespace, sc::FailedFusedCommand);
    return;
  }
  uint64_t len = 0;
  if (Status st = block_range(cmp->sqe, *ns, true, len); !st.ok()) {
    end_fused(cmp, st, sc::FailedFusedCommand);
    return;
  }
  if (len != cmp->data_len || cmp->sqe.sgl.length != cmp->data_len) {
    end_fused(cmp, sc::DataSglLengthInvalid, sc::FailedFusedCommand);
    return;
  }
  if (ns->reservations.held() && !ns->reservations.allowed(ctrl_->hostid(), true, true, resv_cache_[ns->index])) {
    end_fused(cmp, sc::ReservationConflict, sc::FailedFusedCommand);
    return;
  }
  cmp->fence_ns = ns;
  run_fused(cmp);
}

// Owns the fence, waits for the writes in flight to drain, then reads the blocks to compare.
void Connection::run_fused(Request* cmp) {
  Namespace* ns = cmp->fence_ns;
  if (!cmp->fence_owner) {
    if (!ns->fence.try_own()) {  // another fused operation on this namespace runs
      wait_for_fence(cmp);
      return;
    }
    cmp->fence_owner = true;
  }
  if (!ns->fence.drained()) {
    wait_for_fence(cmp);
    return;
  }
  backend::BlockIo& io = cmp->io;
  io.op = backend::BlockIo::Op::Read;
  io.offset = cmp->sqe.slba() << ns->lbads;
  io.length = cmp->data_len;
  io.fua = false;
  io.read_data = nullptr;
  io.buffer = cmp->buf.get() + align_4k(cmp->data_len);
  submit_io(cmp, ns);
}

void Connection::fused_io_done(Request* r, Status st) {
  Request* cmp = r->sqe.opc == uint8_t(IoOpcode::Compare) ? r : r->fused_partner;
  Request* wr = cmp->fused_partner;
  if (r == wr) {  // the write is done: the pair is
    if (st.ok() && stats_) stats_[wr->ns_index].add_write(wr->io.length);
    end_fused(cmp, st.ok() ? sc::Success : sc::FailedFusedCommand, st);
    return;
  }
  const uint8_t* device = cmp->io.read_data ? cmp->io.read_data : cmp->io.buffer;
  if (st.ok() && std::memcmp(cmp->buf.get(), device, cmp->data_len) != 0) st = sc::CompareFailure;
  if (!st.ok()) {
    end_fused(cmp, st, sc::FailedFusedCommand);
    return;
  }
  Namespace* ns = cmp->fence_ns;
  backend::BlockIo& io = wr->io;
  io.op = backend::BlockIo::Op::Write;
  io.offset = wr->sqe.slba() << ns->lbads;
  io.length = wr->data_len;
  io.buffer = wr->buf.get();
  io.read_data = nullptr;
  io.fua = wr->sqe.fua();
  wr->fence_owner = true;  // writes under the fence its Compare owns
  wr->fence_ns = ns;
  submit_io(wr, ns);
}

void Connection::end_fused(Request* cmp, Status cmp_st, Status wr_st) {
  Request* wr = cmp->fused_partner;
  if (cmp->fence_owner) cmp->fence_ns->fence.release();
  cmp->fence_owner = wr->fence_owner = false;
  cmp->fused_partner = wr->fused_partner = nullptr;
  cmp->tx_len = wr->tx_len = 0;
  complete(cmp, cmp_st);
  complete(wr, wr_st);
}

void Connection::wait_for_fence(Request* r) {
  fence_waiters_.push_back(r);
  if (!fence_timer_.linked) reactor_.arm_timer(&fence_timer_, kFenceRetryNs);
}

void Connection::on_fence_timer(reactor::Timer* t) {
  auto* self = static_cast<TimerSlot*>(t)->owner;
  std::vector<Request*> waiting;
  waiting.swap(self->fence_waiters_);
  for (Request* r : waiting) {
    // A fused Compare waits to own the fence or for it to drain; anything else is a write
    // whose device operation is ready to go.
    if (r->fused_partner && r->sqe.opc == uint8_t(IoOpcode::Compare)) self->run_fused(r);
    else self->submit_io(r, r->fence_ns);
  }
}

void Connection::submit_io(Request* r, Namespace* ns) {
  // Writes count themselves against the namespace's fence, or wait while a fused Compare
  // and Write holds it.
  const auto op = r->io.op;
  if (!r->fence_owner && (op == backend::BlockIo::Op::Write || op == backend::BlockIo::Op::WriteZeroes ||
                          op == backend::BlockIo::Op::Deallocate)) {
    r->fence_ns = ns;
    if (!ns->fence.begin_write(set_.index())) {
      wait_for_fence(r);
      return;
    }
    r->fence_counted = true;
  }
  r->ns_index = ns->index;
  r->io.user = r;
  r->io.done = [](backend::BlockIo* io, Status st) {
    Request* req = static_cast<Request*>(io->user);
    req->conn->io_done(req, st);
  };
  ++backend_inflight_;
  ns->device->submit(&r->io, reactor_);
}

void Connection::dsm_step(Request* r) {
  if (r->aborted) {
    complete(r, sc::AbortRequested);
    return;
  }
  Namespace* ns = ctrl_->subsystem().find_namespace(r->sqe.nsid);
  const auto* ranges = reinterpret_cast<const DsmRange*>(r->buf.get());
  uint32_t nr = (r->sqe.cdw10 & 0xFF) + 1;
  while (r->dsm_next < nr && ranges[r->dsm_next].nlb == 0) ++r->dsm_next;
  if (r->dsm_next == nr) {
    complete(r, sc::Success);
    return;
  }
  const DsmRange& d = ranges[r->dsm_next++];
  r->io.op = backend::BlockIo::Op::Deallocate;
  r->io.offset = d.slba << ns->lbads;
  r->io.length = uint64_t(d.nlb) << ns->lbads;
  submit_io(r, ns);
}

// Flush makes durable every write that completed before it arrived: on one namespace, or
// (NSID FFFFFFFFh, and when feature 06h turns a cache off) on each namespace the controller
// reaches, one after another. Namespaces without a volatile write cache have nothing to do.
void Connection::start_flush(Request* r, bool all) {
  r->flush_all = all;
  r->flush_next = 0;
  flush_step(r);
}

void Connection::flush_step(Request* r) {
  if (r->aborted) {
    complete(r, sc::AbortRequested);
    return;
  }
  const auto& namespaces = ctrl_->subsystem().namespaces();
  while (r->flush_next < namespaces.size()) {
    Namespace* ns = namespaces[r->flush_next++].get();
    if (!r->flush_all && ns->nsid != r->sqe.nsid) continue;
    if (!ns->device->volatile_write_cache()) continue;
    r->io.op = backend::BlockIo::Op::Flush;
    r->io.offset = r->io.length = 0;
    r->io.fua = false;
    r->io.buffer = nullptr;
    r->io.read_data = nullptr;
    submit_io(r, ns);
    return;
  }
  if (qid_ != 0) set_.count_flush();
  if (r->shutdown_after_flush) {
    r->shutdown_after_flush = false;
    ctrl_->shutdown_complete();
  }
  complete(r, sc::Success);
}

void Connection::io_done(Request* r, Status st) {
  --backend_inflight_;
  if (r->fence_counted) {
    r->fence_ns->fence.end_write(set_.index());
    r->fence_counted = false;
  }
  if (closed_ && r->fence_owner) {
    r->fence_ns->fence.release();  // the connection is gone: its fused operation ends here
    r->fence_owner = false;
  }
  tx_pending_ -= r->tx_pending;
  r->tx_pending = 0;
  if (closed_) {
    if (backend_inflight_ == 0) {
      set_.remove_draining();
      delete this;
    }
    return;
  }
  if (r->io.op == backend::BlockIo::Op::Deallocate && st.ok()) {
    dsm_step(r);
    return;
  }
  if (r->io.op == backend::BlockIo::Op::Flush && st.ok()) {
    flush_step(r);
    return;
  }
  // A device that failed a command is an error event for the host (Transient Internal
  // Error: the failure is the command's, the controller goes on).
  if (!st.ok() && ctrl_) ctrl_->raise_device_error();
  if (r->sqe.opc == uint8_t(IoOpcode::Verify)) {  // read to check it, never sent
    complete(r, st);
    return;
  }
  if (r->fused_partner) {
    fused_io_done(r, st);
    return;
  }
  if (r->sqe.opc == uint8_t(IoOpcode::Copy)) {
    copy_io_done(r, st);
    return;
  }
  if (r->sqe.opc == uint8_t(IoOpcode::Compare)) {
    const uint8_t* device = r->io.read_data ? r->io.read_data : r->io.buffer;
    if (st.ok() && std::memcmp(r->buf.get(), device, r->io.length) != 0) st = sc::CompareFailure;
    complete(r, st);
    return;
  }
  if (st.ok() && stats_) {
    if (r->io.op == backend::BlockIo::Op::Read) stats_[r->ns_index].add_read(r->io.length);
    else if (r->io.op == backend::BlockIo::Op::Write) stats_[r->ns_index].add_write(r->io.length);
  }
  if (st.ok() && r->io.fua) set_.count_fua_write();
  if (st.ok() && r->io.op == backend::BlockIo::Op::Read) {
    r->tx_data = r->io.read_data;
    r->tx_len = uint32_t(r->io.length);
  }
  complete(r, st);
}

void Connection::complete(Request* r, Status st) {
  r->status = st;
  if (qid_ != 0) set_.count_io();
  send_response(r);
}

void Connection::send_response(Request* r) {
  set_request_state(r, Request::State::Sending);
  // Failed commands go to the controller's error log; Command Interrupted only asks the
  // host to retry later, and is no error.
  if (!r->status.ok() && ctrl_ && r->status != kCommandInterrupted) ctrl_->record_error(qid_, r->sqe, r->status);
  if (ResponseObserver* o = target_.response_observer.load(std::memory_order_acquire))
    o->on_response(qid_, r->sqe, r->status, r->io);
  const bool data = r->tx_len > 0 && r->status.ok();
  const bool success_flag = data && sq_flow_disabled_;
  if (data) {
    const uint32_t total = r->tx_len + r->tx_pad;
    auto* c2h = reinterpret_cast<C2HDataPdu*>(r->c2h_pdu);
    std::memset(r->c2h_pdu, 0, sizeof(C2HDataPdu) + kDigestLen);
    fill_header(c2h->ch, PduType::C2HData, sizeof(C2HDataPdu), total,
                kFlagDataLast | (success_flag ? kFlagDataSuccess : 0));
    c2h->cccid = r->sqe.cid;
    c2h->datao = 0;
    c2h->datal = total;
    uint32_t pdo = c2h->ch.pdo;
    if (hdgst_) {
      uint32_t crc = crc32c(r->c2h_pdu, sizeof(C2HDataPdu));
      std::memcpy(r->c2h_pdu + sizeof(C2HDataPdu), &crc, 4);
    }
    std::memset(r->c2h_pdu + sizeof(C2HDataPdu) + (hdgst_ ? 4 : 0), 0,
                pdo - sizeof(C2HDataPdu) - (hdgst_ ? 4 : 0));
    stream_.send(r->c2h_pdu, pdo);
    // The data, then (a log page's end) zeros from the shared region, then the digest of
    // both; the last segment carries the SendDone.
    reactor::SendDone* done = success_flag ? &r->sent : nullptr;
    Crc32c crc;
    if (ddgst_) crc.update(r->tx_data, r->tx_len);
    stream_.send(r->tx_data, r->tx_len, r->tx_pad || ddgst_ ? nullptr : done);
    for (uint32_t left = r->tx_pad; left > 0;) {
      const uint32_t n = uint32_t(std::min<size_t>(left, kZeroBytesLen));
      if (ddgst_) crc.update(kZeroBytes, n);
      left -= n;
      stream_.send(kZeroBytes, n, left || ddgst_ ? nullptr : done);
    }
    if (ddgst_) {
      const uint32_t v = crc.value();
      std::memcpy(r->c2h_ddgst, &v, 4);
      stream_.send(r->c2h_ddgst, 4, done);
    }
    if (success_flag) {
      send_peak_ = std::max<uint64_t>(send_peak_, stream_.queued_bytes());
      return;
    }
  }
  auto* resp = reinterpret_cast<CapsuleRespPdu*>(r->resp_pdu);
  std::memset(r->resp_pdu, 0, sizeof(r->resp_pdu));
  fill_header(resp->ch, PduType::CapsuleResp, sizeof(CapsuleRespPdu), 0, 0);
  Cqe cqe{};
  cqe.dw0 = r->dw0;
  cqe.dw1 = r->dw1;
  cqe.sqhd = sq_flow_disabled_ ? 0 : sqhd_;
  cqe.sqid = qid_;
  cqe.cid = r->sqe.cid;
  cqe.status = r->status.to_cqe(r->status != kCommandInterrupted);
  std::memcpy(resp->cqe, &cqe, sizeof(cqe));
  if (hdgst_) {
    uint32_t crc = crc32c(r->resp_pdu, sizeof(CapsuleRespPdu));
    std::memcpy(r->resp_pdu + sizeof(CapsuleRespPdu), &crc, 4);
  }
  stream_.send(r->resp_pdu, resp->ch.plen, &r->sent);
  send_peak_ = std::max<uint64_t>(send_peak_, stream_.queued_bytes());
}

// ---------------------------------------------------------------- request pool

void Connection::release(Request* r) {
  // Admin and discovery commands are few and far between: their buffers (log pages up to
  // MDTS) go back at once instead of waiting, idle, for the next one.
  pool_.release(r, qid_ == 0);
  if (wait_head_) reactor_.defer(&resume_d_);
  if (close_after_send_) {
    close_after_send_ = false;
    close("host sent Disconnect");
  }
}

Connection::BufferResult Connection::ensure_buffer(Request* r, uint32_t len) {
  const uint32_t had = r->buf_cap;
  const BufferResult res = pool_.ensure_buffer(r, len, state_ == State::Connected && qid_ != 0);
  if (res == BufferResult::Fail) log::warn("{}: cannot allocate a {}-byte data buffer", peer_, align_4k(len));
  if (res == BufferResult::Ok && r->buf_cap != had && memory_logged_ && !wait_head_) {
    log::info("{}: buffer memory available again", peer_);
    memory_logged_ = false;
  }
  return res;
}

// ---------------------------------------------------------------- back-pressure

bool Connection::send_queue_full() const {
  const uint64_t cap = target_.config.max_send_queue_bytes;
  return cap && stream_.queued_bytes() + tx_pending_ > cap;
}

void Connection::admit(Request* r) {
  if (wait_head_ || send_queue_full()) {
    park(r, false);
    return;
  }
  execute(r);
}

void Connection::park(Request* r, bool for_memory) {
  set_request_state(r, Request::State::Waiting);
  r->next_waiting = nullptr;
  if (!wait_head_) {
    wait_head_ = wait_tail_ = r;
  } else if (resuming_) {
    r->next_waiting = wait_head_;  // it was the head a moment ago: keep arrival order
    wait_head_ = r;
  } else {
    wait_tail_->next_waiting = r;
    wait_tail_ = r;
  }
  ++waiting_;
  ++waits_;
  if (for_memory) {
    memory_short_ = true;
    target_.usage.memory_waits.fetch_add(1, std::memory_order_relaxed);
    if (!memory_logged_) {
      log::warn("{}: buffer memory exhausted (limits: {} per connection, {} in all); commands wait", peer_,
                target_.config.max_connection_buffer_memory, target_.config.max_buffer_memory);
      memory_logged_ = true;
    }
    reactor_.arm_timer(&retry_timer_, kMemoryRetryNs);
  } else if (!retry_timer_.linked) {
    reactor_.arm_timer(&retry_timer_, kSendQueueRetryNs);
  }
}

void Connection::resume_waiting() {
  if (resuming_ || state_ == State::Closing) return;
  resuming_ = true;
  memory_short_ = false;
  while (wait_head_ && state_ != State::Closing && !send_queue_full()) {
    Request* r = wait_head_;
    wait_head_ = r->next_waiting;
    if (!wait_head_) wait_tail_ = nullptr;
    r->next_waiting = nullptr;
    --waiting_;
    set_request_state(r, Request::State::Executing);
    execute(r);
    if (memory_short_) break;  // it is parked at the head again
  }
  resuming_ = false;
  if (!wait_head_) {
    reactor_.cancel_timer(&retry_timer_);
    if (memory_logged_) {
      log::info("{}: buffer memory available again", peer_);
      memory_logged_ = false;
    }
  } else if (!retry_timer_.linked) {
    reactor_.arm_timer(&retry_timer_, memory_short_ ? kMemoryRetryNs : kSendQueueRetryNs);
  }
}

void Connection::on_retry_timer(reactor::Timer* t) { static_cast<TimerSlot*>(t)->owner->resume_waiting(); }

}  // namespace nvtcp::target

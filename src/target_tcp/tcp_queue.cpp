// SPDX-License-Identifier: Apache-2.0
// The NVMe/TCP queue: a connection's life (accept, ICReq, deadlines, close and the last device
// completion that frees it), its PDUs in and out, back-pressure, and process(), which moves
// each request through its life.
#include "target_tcp/tcp_queue.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "reactor/tcp_stream.hpp"
#include "target/queue_limits.hpp"
#include "util/log.hpp"
#include "util/zeros.hpp"
#include "wire/digest.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

namespace {
constexpr uint64_t kMemoryRetryNs = 2'000'000;      // waiting for buffer memory freed elsewhere
constexpr uint64_t kSendQueueRetryNs = 50'000'000;  // a fallback: sent responses wake us sooner
}  // namespace

// ---------------------------------------------------------------- the connections of a reactor

void ConnectionSet::add(TcpQueue* c) { conns_.push_back(c); }
void ConnectionSet::remove(TcpQueue* c) {
  auto it = std::find(conns_.begin(), conns_.end(), c);
  if (it != conns_.end()) {
    *it = conns_.back();
    conns_.pop_back();
  }
}
void ConnectionSet::remove_draining(TcpQueue* c) {
  auto it = std::find(draining_.begin(), draining_.end(), c);
  if (it != draining_.end()) {
    *it = draining_.back();
    draining_.pop_back();
  }
}
void ConnectionSet::collect(std::vector<ConnectionInfo>& out) const {
  for (const TcpQueue* c : conns_) out.push_back(c->info());
}
namespace {
// Per-state figures of every connection of a reactor (the draining ones too), added up.
template <typename Sum, typename Of>
Sum add_up(Sum sum, const std::vector<TcpQueue*>& conns, const std::vector<TcpQueue*>& draining, Of of) {
  for (const auto* list : {&conns, &draining})
    for (const TcpQueue* c : *list) {
      const auto& counts = of(*c);
      for (size_t s = 0; s < sum.size(); ++s) sum[s] += counts[s];
    }
  return sum;
}
}  // namespace

RequestStateCounts ConnectionSet::request_states() const {
  return add_up(RequestStateCounts{}, conns_, draining_, [](const TcpQueue& c) { return c.request_states(); });
}
CommandStateCounts ConnectionSet::command_states() const {
  return add_up(CommandStateCounts{}, conns_, draining_, [](const TcpQueue& c) { return c.command_states(); });
}
RequestStateEntries ConnectionSet::request_entries() const {
  return add_up(retired_requests_, conns_, draining_, [](const TcpQueue& c) { return c.request_entries(); });
}
CommandStateEntries ConnectionSet::command_entries() const {
  return add_up(retired_commands_, conns_, draining_, [](const TcpQueue& c) { return c.command_entries(); });
}
void ConnectionSet::close_all() {
  auto copy = conns_;
  for (TcpQueue* c : copy) c->close("target shutting down");
}

// ---------------------------------------------------------------- life cycle

TcpQueue::TcpQueue(TargetState& target, reactor::Reactor& r, int fd, std::string peer, ConnectionSet& set,
                   std::string address, Arrival arrival, const reactor::Clock& clock)
    : TcpQueue(
          target, r, [&r, fd](reactor::StreamOwner& owner) { return std::make_unique<reactor::TcpStream>(r, fd, &owner); },
          std::move(peer), set, std::move(address), std::move(arrival), clock) {}

TcpQueue::TcpQueue(TargetState& target, reactor::Reactor& r, const MakeStream& make_stream, std::string peer,
                   ConnectionSet& set, std::string address, Arrival arrival, const reactor::Clock& clock)
    : target_(target),
      live_count_(target.usage.connections),
      reactor_(r),
      link_{&r, &clock, std::move(peer), std::move(arrival)},
      set_(set),
      stream_(make_stream(*this)),
      receiver_(transport::Side::Target, this),
      address_(std::move(address)),
      commands_(target, *this, link_, memory_, set, release_closed, this),
      memory_(target.config, target.usage, sizeof(TcpRequest)),
      pool_(memory_, this,
            [](reactor::SendDone* d) {
              TcpRequest* req = static_cast<TcpRequest::Sent*>(d)->req;
              req->owner->process(*req);
            }),
      deadlines_(this, r, clock,
                 {&TcpQueue::on_icreq_deadline, &TcpQueue::on_connect_deadline, &TcpQueue::on_keep_alive_check,
                  &TcpQueue::on_controller_poll, &TcpQueue::on_send_stall_check, &TcpQueue::on_h2c_data_check,
                  &TcpQueue::on_term_req_linger}) {
  tls_ = dynamic_cast<tls::TlsStream*>(stream_.get());
  term_sent_.owner = this;
  term_sent_.fn = [](reactor::SendDone* d) {
    TcpQueue* c = static_cast<TermSent*>(d)->owner;
    c->terminator_.closing();
    c->stream_->close();
  };
  retry_timer_.owner = this;
  retry_timer_.fn = on_retry_timer;
  resume_d_.owner = this;
  resume_d_.fn = [](reactor::Deferred* d) { static_cast<reactor::OwnedDeferred<TcpQueue>*>(d)->owner->resume_waiting(); };
  const auto& cfg = target_.config;
  receiver_.set_max_plen(std::max({cfg.in_capsule_data, cfg.max_h2c_data, kAdminInCapsule}) + 512);
  pool_.resize(1);  // until Connect says how deep the queue is, only Connect can arrive
  set_.add(this);
}

TcpQueue::~TcpQueue() {
  for (const auto& r : pool_.slots()) commands_.hold_namespace(*r, nullptr);
  set_.retire(pool_.entries(), commands_.command_entries());
  reactor_.cancel_timer(&retry_timer_);
  reactor_.undefer(&resume_d_);
  if (!address_.empty()) target_.addresses.release(address_);
}

ConnectionInfo TcpQueue::info() const {
  ConnectionInfo i;
  i.peer = link_.peer;
  i.qid = commands_.qid();
  i.connected = live();
  if (const Controller* c = commands_.controller()) {
    i.subnqn = c->subsystem().nqn();
    i.hostnqn = c->hostnqn();
    i.cntlid = c->cntlid();
  }
  i.portid = commands_.arrival().portid;
  i.local_address = commands_.arrival().local_address;
  i.reactor = set_.index();
  i.tls = tls_ != nullptr;
  i.hdgst = hdgst_;
  i.ddgst = ddgst_;
  i.send_queue_bytes = stream_->queued_bytes();
  i.send_queue_peak = send_peak_;
  i.buffer_bytes = memory_.buffer_bytes();
  i.pool_bytes = memory_.pool_bytes();
  i.waiting = waiting_;
  i.waits = waits_;
  i.request_states = pool_.counts();
  i.command_states = command_states();
  return i;
}

void TcpQueue::start() {
  log::debug("{}: connection accepted", link_.peer);
  deadlines_.arm(Deadline::ICReq, uint64_t(target_.config.icreq_timeout_ms) * 1000000ull);
  stream_->start();
}

void TcpQueue::close(const std::string& why) {
  if (state_ != State::Closing) {
    log::info("{}: closing connection: {}", link_.peer, why);
    set_state(State::Closing);
  }
  stream_->close();
}

const char* TcpQueue::state_name(State s) {
  switch (s) {
    case State::AwaitICReq: return "AwaitICReq";
    case State::Ready: return "Ready";
    case State::Closing: return "Closing";
    case State::kCount: break;
  }
  return "?";
}

void TcpQueue::set_state(State to) {
  if (kCheckTransitions && !kTransitions.allows(state_, to))
    illegal_transition("connection", state_name(state_), state_name(to), "TcpQueue::set_state",
                       long(commands_.qid()));
  state_ = to;
  link_.closing = to == State::Closing;
}

void TcpQueue::on_receive(const uint8_t* data, size_t len) {
  if (state_ == State::Closing) return;
  receiver_.feed(data, len);
}

bool TcpQueue::recv_direct(uint8_t*& p, size_t& n) {
  return state_ != State::Closing && receiver_.in_place_window(transport::kMinInPlaceBytes, p, n);
}

void TcpQueue::on_receive_direct(size_t len) {
  if (state_ == State::Closing) return;
  receiver_.consumed_in_place(len);
}

void TcpQueue::on_closed(int err) {
  if (err < 0) log::debug("{}: connection error: {}", link_.peer, strerror(-err));
  log::debug("{}: connection closed", link_.peer);
  if (state_ != State::Closing) set_state(State::Closing);
  terminator_.peer_closed();
  deadlines_.cancel_all();
  reactor_.cancel_timer(&retry_timer_);
  reactor_.undefer(&resume_d_);
  set_.remove(this);
  // Shutdown waits for draining connections: counted until the release frees this one, at
  // once or at its last device or worker completion.
  set_.add_draining(this);
  commands_.closed();  // may free this connection: touch nothing after
}

void TcpQueue::release_closed(void* conn) {
  auto* c = static_cast<TcpQueue*>(conn);
  c->set_.remove_draining(c);
  delete c;
}

void TcpQueue::describe_link() {
  link_.tls = tls_;
  link_.tls_identity = tls_ && tls_->established() ? tls_->session().identity : std::string();
  link_.hdgst = hdgst_;
  link_.ddgst = ddgst_;
}

void TcpQueue::on_connected() {
  pool_.resize(commands_.sqsize());
  // A queue that must authenticate gets icreq_timeout_ms more to do it (Connect deadline).
  if (commands_.authenticated()) deadlines_.cancel(Deadline::Connect);
  else deadlines_.arm(Deadline::Connect, uint64_t(target_.config.icreq_timeout_ms) * 1000000ull);
  // The first checks come one controller poll after Connect, then every poll_period().
  if (commands_.qid() == 0) deadlines_.arm(Deadline::KeepAlive, kControllerPollNs);
  deadlines_.arm(Deadline::ControllerPoll, kControllerPollNs);
  deadlines_.arm(Deadline::SendStall, kControllerPollNs);
  deadlines_.arm(Deadline::H2CData, kControllerPollNs);
}

// ---------------------------------------------------------------- the life of a request
//
// Every event that moves a request on lands here, with the request in the state the event
// ends: its capsule is in (ReceivingCapsule), its turn came (Queued) or its memory did
// (NeedBuffer), the data its R2Ts asked for is in (AwaitingH2C), the stream let go of its
// response (Sending). Each case runs the request as far as it can go now:
//
//   ReceivingCapsule -> [Queued] -> [NeedBuffer] -> [AwaitingH2C] -> Executing -> ... -> Sending -> Free
//
// In between, the command layer runs it (the device, a worker, its holds) and hands it back
// with complete(). A failure at any point answers at once (-> Sending).
void TcpQueue::process(TcpRequest& r) {
  switch (r.state()) {
    case RState::ReceivingCapsule:
      // Commands run in arrival order: behind older ones that wait, and not while the send
      // queue is over its cap (its responses would only pile up).
      if (wait_head_ || send_queue_full()) {
        park(r, RState::Queued);
        return;
      }
      [[fallthrough]];
    case RState::Queued:
      commands_.parse(r);
      if (state_ == State::Closing) return;  // its controller is gone: nothing is answered
      if (!r.status.ok()) {
        fail(r, r.status);
        return;
      }
      // Only a command whose buffer is not there yet (its slot's is too small) goes through
      // NeedBuffer, so its entries count buffer allocations and memory waits.
      if (r.xfer.buffer > r.buf_cap) set_request_state(r, RState::NeedBuffer);
      [[fallthrough]];
    case RState::NeedBuffer:
      if (!buffer_ready(r, r.xfer.buffer)) return;  // waits for memory, or failed
      if (r.xfer.dir == Command::Direction::HostToController && r.capsule_len == 0) {
        set_request_state(r, RState::AwaitingH2C);
        r.waited = true;
        send_r2ts(r);
        return;
      }
      execute(r);
      return;
    case RState::AwaitingH2C:  // every byte asked for is in
      if (r.aborted) fail(r, sc::AbortRequested);
      else if (!r.status.ok()) fail(r, r.status);
      else execute(r);
      return;
    case RState::Sending:
      release(r);
      return;
    case RState::Free:
    case RState::Executing:
    case RState::kCount: break;
  }
  log::error("{}: request {} (cid {}) moved on in state {}", link_.peer, r.index, r.sqe.cid, request_state_name(r.state()));
}

// A command that sends data to the host holds its bytes against the send queue's cap from
// now on, until its response is queued.
void TcpQueue::execute(TcpRequest& r) {
  set_request_state(r, RState::Executing);
  if (r.xfer.dir == Command::Direction::ControllerToHost && r.tx_pending == 0) {
    r.tx_pending = r.xfer.len;
    tx_pending_ += r.tx_pending;
  }
  commands_.execute(r);
}

void TcpQueue::fail(TcpRequest& r, Status st) { commands_.fail(r, st); }

void TcpQueue::complete(Command& c) {
  TcpRequest& r = TcpRequest::of(c);
  if (!connected_ && commands_.connected()) {  // a Connect succeeded: the queue takes its depth
    connected_ = true;
    on_connected();
  }
  tx_pending_ -= r.tx_pending;
  r.tx_pending = 0;
  if (commands_.qid() != 0) set_.count_io();
  send_response(r);
}

void TcpQueue::need_buffer(Command& c, uint32_t len) {
  TcpRequest& r = TcpRequest::of(c);
  r.xfer.buffer = len;
  // While it waits for memory its bytes are not on their way: they hold no room in the send
  // queue (execute() counts them again).
  tx_pending_ -= r.tx_pending;
  r.tx_pending = 0;
  set_request_state(r, RState::NeedBuffer);
  process(r);
}

bool TcpQueue::buffer_ready(TcpRequest& r, uint32_t len) {
  if (len == 0) return true;
  switch (ensure_buffer(r, len)) {
    case BufferResult::Ok: return true;
    case BufferResult::Wait: park(r, RState::NeedBuffer); return false;
    case BufferResult::Fail: fail(r, sc::InternalError); return false;
  }
  return false;
}

CommandTransport::AbortLookup TcpQueue::abort_before_execution(uint16_t cid) {
  for (auto& slot : pool_.slots()) {
    TcpRequest& r = *slot;
    // A free slot keeps the CID of the command it last carried, and a command being sent is
    // done: the host may already have its answer and reuse the CID for a live command in
    // another slot, which is the one to abort.
    const RState st = r.state();
    if (r.sqe.cid != cid || st == RState::Free || st == RState::Sending) continue;
    switch (st) {
      case RState::Queued:
      case RState::NeedBuffer:
        if (!withdraw(r)) return {};
        log::info("{}: cid {} aborted while it waited", link_.peer, r.sqe.cid);
        fail(r, sc::AbortRequested);
        return {true, nullptr};
      case RState::AwaitingH2C:
        if (r.aborted) return {};
        // The data already asked for may still come: take it, ask for no more, then end.
        r.aborted = true;
        log::info("{}: cid {} aborted while it waited for data ({} of {} bytes asked for)", link_.peer, r.sqe.cid,
                  r.rx_next, r.r2t_next);
        if (r.rx_next == r.r2t_next) process(r);
        return {true, nullptr};
      case RState::Executing: return {false, &r};
      default: return {};  // its capsule is still arriving
    }
  }
  return {};
}

// ---------------------------------------------------------------- PDUs in

bool TcpQueue::on_pdu_header(const uint8_t* hdr, uint32_t data_len, uint8_t*& dst) {
  // The connection began closing while the receiver still held bytes of the same segment
  // (an H2CTermReq with PDUs behind it): take nothing more from this host, as on_receive()
  // would not have. Refusing the PDU stops the receiver; on_pdu_error() sends nothing now.
  if (state_ == State::Closing) return false;
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

void TcpQueue::on_pdu_complete(const uint8_t* hdr, bool data_ok) {
  const auto& ch = *reinterpret_cast<const CommonHeader*>(hdr);
  switch (static_cast<PduType>(ch.type)) {
    case PduType::ICReq: return;  // answered in on_pdu_header
    case PduType::H2CTermReq: {
      const auto& t = *reinterpret_cast<const TermReqPdu*>(hdr);
      log::event(log::Level::Warn, "termreq",
                 {{"address", link_.peer}, {"direction", "received"}, {"fes", std::to_string(unsigned(t.fes))},
                  {"fei", std::to_string(uint32_t(t.fei))}},
                 "{}: host terminated the connection: {} (FES {}, FEI {})", link_.peer,
                 fes_name(Fes(t.fes), PduType::H2CTermReq), unsigned(t.fes), uint32_t(t.fei));
      close("H2CTermReq received");
      return;
    }
    case PduType::CapsuleCmd: {
      TcpRequest& r = *h2c_req_;
      h2c_req_ = nullptr;
      if (!data_ok) {
        log::warn("{}: data digest error in capsule cid {}", link_.peer, r.sqe.cid);
        fail(r, sc::TransientTransportError);
        return;
      }
      if (!r.status.ok()) {
        fail(r, r.status);
        return;
      }
      process(r);
      return;
    }
    case PduType::H2CData:
      h2c_data_complete(*reinterpret_cast<const H2CDataPdu*>(hdr), data_ok);
      return;
    default: return;
  }
}

void TcpQueue::fatal(Fes fes, uint32_t fei, const std::string& why) { receiver_.fail(fes, fei, why); }

void TcpQueue::on_pdu_error(Fes fes, uint32_t fei, const std::string& why) {
  if (state_ == State::Closing) return;  // already on its way out: no TermReq to send
  log::event(log::Level::Warn, "termreq",
             {{"address", link_.peer}, {"direction", "sent"}, {"fes", std::to_string(unsigned(fes))},
              {"fei", std::to_string(fei)}, {"reason", why}},
             "{}: fatal transport error: {} (FES {} {}, FEI {}); sending C2HTermReq", link_.peer, why, unsigned(fes),
             fes_name(fes, PduType::C2HTermReq), fei);
  set_state(State::Closing);
  // The same TermReq-and-linger piece as the host's. The target closes as soon as its C2HTermReq
  // has left (term_sent_), as nvmet and SPDK do; the linger only bounds a send that never leaves.
  const auto pdu = terminator_.start(receiver_, PduType::C2HTermReq, fes, fei, deadlines_.clock().now_ns());
  if (pdu.empty()) return;
  stream_->send(pdu.data(), uint32_t(pdu.size()), &term_sent_);
  deadlines_.arm(Deadline::TermReqLinger, terminator_.linger_ns());
}

bool TcpQueue::handle_icreq(const ICReqPdu& req) {
  if (req.pfv != kPfv) {
    fatal(Fes::UnsupportedParameter, offsetof(ICReqPdu, pfv), fmt::format("ICReq PFV {} unsupported", req.pfv));
    return false;
  }
  if (req.hpda > 31) {
    fatal(Fes::InvalidHeaderField, offsetof(ICReqPdu, hpda), fmt::format("ICReq HPDA {} out of range", req.hpda));
    return false;
  }
  hpda_ = req.hpda;
  host_maxr2t_ = std::min<uint32_t>(req.maxr2t, TcpRequest::kMaxR2T - 1) + 1;
  hdgst_ = (req.digest & kIcDigestHeader) && target_.config.allow_hdgst;
  ddgst_ = (req.digest & kIcDigestData) && target_.config.allow_ddgst;
  const ICRespPdu resp = make_icresp(0, hdgst_, ddgst_, target_.config.max_h2c_data);
  static_assert(sizeof(icresp_) == sizeof(resp));
  std::memcpy(icresp_, &resp, sizeof(resp));
  stream_->send(icresp_, sizeof(icresp_));
  receiver_.set_digests(hdgst_, ddgst_);
  describe_link();
  set_state(State::Ready);
  // Connect is due by the deadline the ICReq had: icreq_timeout_ms from accept covers both.
  deadlines_.arm_at(Deadline::Connect, deadlines_.deadline(Deadline::ICReq));
  deadlines_.cancel(Deadline::ICReq);
  log::debug("{}: ICReq hpda {} maxr2t {} hdgst {} ddgst {}", link_.peer, req.hpda, req.maxr2t, hdgst_, ddgst_);
  return true;
}

bool TcpQueue::capsule_header(const CapsuleCmdHeader& pdu, uint32_t data_len, uint8_t*& dst) {
  TcpRequest* found = pool_.alloc();
  const uint16_t sqsize = commands_.sqsize();
  // A request stays Sending until the stream lets go of its response, but the host may have
  // it already and reuse the slot: the kernel copies a batch of responses into the socket and
  // delivers the first ones (loopback: at once) before the send completes, which on a loaded
  // machine (socket memory short, the batch waiting for it) is long enough for the host's next
  // commands to arrive first; zero-copy sends hold theirs until the kernel lets go of the pages.
  // So the pool grows past the queue depth while fewer than sqsize commands are outstanding
  // besides those Sending, and never past twice the depth plus what the stream may hold after
  // delivery (zero-copy: 128 KiB reads at QD32 over loopback needed more than twice the depth,
  // and a conforming host was cut off). A host that stops reading fills the Sending set with
  // responses it never takes; the bound keeps that finite.
  const size_t sending = pool_.count(TcpRequest::State::Sending);
  const size_t sending_allowed = size_t(sqsize) + stream_->max_sends_held_after_delivery();
  if (!found && sqsize && pool_.size() < size_t(sqsize) + std::min(sending, sending_allowed)) {
    pool_.resize(uint32_t(pool_.size()) + 1);
    found = pool_.alloc();
  }
  if (!found) {
    fatal(Fes::PduSequenceError, 0, fmt::format("more commands outstanding than the queue depth ({})", pool_.size()));
    return false;
  }
  TcpRequest& r = *found;
  r.start(clock().turn_ns(reactor_));
  std::memcpy(&r.sqe, pdu.sqe, sizeof(Sqe));
  r.rx_next = 0;
  r.r2t_next = 0;
  h2c_req_ = &r;
  if (data_len == 0) return true;
  // In-capsule data: check the SGL now, and drop the bytes of a bad one as they arrive.
  const SglDescriptor& sgl = r.sqe.sgl;
  if (data_len > commands_.max_in_capsule()) r.status = sc::DataSglLengthInvalid;
  else if (sgl.type != kSglDataBlockOffset) r.status = sc::SglDescriptorTypeInvalid;
  else if (sgl.addr != 0) r.status = sc::SglOffsetInvalid;
  else if (sgl.length != data_len) r.status = sc::DataSglLengthInvalid;
  else if (BufferResult br = ensure_buffer(r, commands_.in_capsule_buffer(r.sqe, data_len)); br != BufferResult::Ok) {
    // The data is on its way and has nowhere to wait: drop it, and ask for a retry.
    r.status = br == BufferResult::Wait ? kCommandInterrupted : sc::InternalError;
    target_.usage.memory_waits.fetch_add(1, std::memory_order_relaxed);
    if (!memory_logged_) {
      log::warn("{}: no buffer memory for {} bytes of in-capsule data (limits: {} per connection, {} in all); "
                "cid {} ends with Command Interrupted, to be retried",
                link_.peer, data_len, target_.config.max_connection_buffer_memory, target_.config.max_buffer_memory,
                r.sqe.cid);
      memory_logged_ = true;
    }
    dst = nullptr;
    return true;
  }
  if (!r.status.ok()) {
    log::warn("{}: cid {}: bad in-capsule data ({} bytes, SGL type 0x{:02x} length {}): {}", link_.peer, r.sqe.cid,
              data_len, sgl.type, sgl.length, status_name(r.status));
    dst = nullptr;
    return true;
  }
  r.capsule_len = data_len;
  r.rx_next = data_len;
  dst = r.buf;
  return true;
}

bool TcpQueue::h2c_data_header(const H2CDataPdu& pdu, uint32_t data_len, uint8_t*& dst) {
  if (pdu.ttag >= pool_.size() || pool_.at(pdu.ttag)->state() != RState::AwaitingH2C) {
    fatal(Fes::InvalidHeaderField, offsetof(H2CDataPdu, ttag),
          fmt::format("H2CData for unknown transfer tag {}", pdu.ttag));
    return false;
  }
  TcpRequest* r = pool_.at(pdu.ttag);
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
  dst = r->xfer.buffer ? r->buf + pdu.datao : nullptr;  // none: a device that ignores the data
  return true;
}

void TcpQueue::h2c_data_complete(const H2CDataPdu& pdu, bool data_ok) {
  TcpRequest& r = *h2c_req_;
  h2c_req_ = nullptr;
  r.rx_next += pdu.datal;
  if (!data_ok) {
    log::warn("{}: data digest error in H2CData for cid {}", link_.peer, r.sqe.cid);
    r.status = sc::TransientTransportError;
  }
  // An aborted transfer ends with the data already asked for; otherwise with all of it.
  const uint32_t wanted = r.aborted ? r.r2t_next : r.xfer.len;
  if (r.rx_next < wanted) {
    send_r2ts(r);
    return;
  }
  process(r);
}

// ---------------------------------------------------------------- PDUs out

void TcpQueue::fill_header(CommonHeader& ch, PduType type, uint8_t hlen, uint32_t data_len, uint8_t flags) {
  fill_common_header(ch, type, hlen, data_len, flags, hdgst_, ddgst_, hpda_);
}

void TcpQueue::send_r2ts(TcpRequest& r) {
  if (r.aborted) return;  // an aborted command asks for no more data
  const uint32_t chunk = target_.config.max_h2c_data;
  const uint32_t max_out = std::min({host_maxr2t_, target_.config.max_r2t_per_command, TcpRequest::kMaxR2T});
  while (r.r2t_next < r.xfer.len) {
    uint32_t sent = (r.r2t_next + chunk - 1) / chunk;
    uint32_t done = r.rx_next / chunk;
    if (sent - done >= max_out) break;
    uint32_t len = std::min(chunk, r.xfer.len - r.r2t_next);
    uint8_t* slot = r.r2t_pdu[sent % TcpRequest::kMaxR2T];
    auto* p = reinterpret_cast<R2TPdu*>(slot);
    std::memset(p, 0, sizeof(R2TPdu));
    fill_header(p->ch, PduType::R2T, sizeof(R2TPdu), 0, 0);
    p->cccid = r.sqe.cid;
    p->ttag = r.index;
    p->r2to = r.r2t_next;
    p->r2tl = len;
    if (hdgst_) seal_header_digest(slot, sizeof(R2TPdu));
    stream_->send(slot, p->ch.plen);
    r.r2t_sent_ns[sent % TcpRequest::kMaxR2T] = deadlines_.clock().now_ns();
    r.r2t_next += len;
  }
}

void TcpQueue::send_response(TcpRequest& r) {
  set_request_state(r, RState::Sending);
  const Cqe& cqe = r.cqe;
  const bool data = r.tx_len > 0 && r.status.ok();
  const bool success_flag = data && commands_.sq_flow_disabled();
  if (data) {
    const uint32_t total = r.tx_len + r.tx_pad;
    auto* c2h = reinterpret_cast<C2HDataPdu*>(r.c2h_pdu);
    std::memset(r.c2h_pdu, 0, sizeof(C2HDataPdu) + kDigestLen);
    fill_header(c2h->ch, PduType::C2HData, sizeof(C2HDataPdu), total,
                kFlagDataLast | (success_flag ? kFlagDataSuccess : 0));
    c2h->cccid = r.sqe.cid;
    c2h->datao = 0;
    c2h->datal = total;
    uint32_t pdo = c2h->ch.pdo;
    if (hdgst_) seal_header_digest(r.c2h_pdu, sizeof(C2HDataPdu));
    std::memset(r.c2h_pdu + sizeof(C2HDataPdu) + (hdgst_ ? 4 : 0), 0, pdo - sizeof(C2HDataPdu) - (hdgst_ ? 4 : 0));
    stream_->send(r.c2h_pdu, pdo);
    // The data, then (a log page's end) zeros from the shared region, then the digest of
    // both; the last segment carries the SendDone.
    reactor::SendDone* done = success_flag ? &r.sent : nullptr;
    Crc32c crc;
    if (ddgst_) crc.update(r.tx_data, r.tx_len);
    stream_->send(r.tx_data, r.tx_len, r.tx_pad || ddgst_ ? nullptr : done);
    for (uint32_t left = r.tx_pad; left > 0;) {
      const uint32_t n = uint32_t(std::min<size_t>(left, kZeroBytesLen));
      if (ddgst_) crc.update(zero_bytes(), n);
      left -= n;
      stream_->send(zero_bytes(), n, left || ddgst_ ? nullptr : done);
    }
    if (ddgst_) {
      const uint32_t v = crc.value();
      std::memcpy(r.c2h_ddgst, &v, 4);
      stream_->send(r.c2h_ddgst, 4, done);
    }
    if (success_flag) {
      send_peak_ = std::max<uint64_t>(send_peak_, stream_->queued_bytes());
      return;
    }
  }
  auto* resp = reinterpret_cast<CapsuleRespPdu*>(r.resp_pdu);
  std::memset(r.resp_pdu, 0, sizeof(r.resp_pdu));
  fill_header(resp->ch, PduType::CapsuleResp, sizeof(CapsuleRespPdu), 0, 0);
  std::memcpy(resp->cqe, &cqe, sizeof(cqe));
  if (hdgst_) seal_header_digest(r.resp_pdu, sizeof(CapsuleRespPdu));
  stream_->send(r.resp_pdu, resp->ch.plen, &r.sent);
  send_peak_ = std::max<uint64_t>(send_peak_, stream_->queued_bytes());
}

void TcpQueue::release(TcpRequest& r) {
  const bool last = r.close_queue_after;
  commands_.release(r);
  // Admin and discovery commands are few and far between: their buffers (log pages up to
  // MDTS) go back at once instead of waiting, idle, for the next one.
  pool_.release(&r, commands_.qid() == 0);
  if (wait_head_) reactor_.defer(&resume_d_);
  if (last) close("host sent Disconnect");
}

// ---------------------------------------------------------------- back-pressure

TcpQueue::BufferResult TcpQueue::ensure_buffer(TcpRequest& r, uint32_t len) {
  const uint32_t had = r.buf_cap;
  const BufferResult res = pool_.ensure_buffer(&r, len, live() && commands_.qid() != 0);
  if (res == BufferResult::Fail) log::warn("{}: cannot allocate a {}-byte data buffer", link_.peer, align_4k(len));
  if (res == BufferResult::Ok && r.buf_cap != had && memory_logged_ && !wait_head_) {
    log::info("{}: buffer memory available again", link_.peer);
    memory_logged_ = false;
  }
  return res;
}

bool TcpQueue::send_queue_full() const {
  const uint64_t cap = target_.config.max_send_queue_bytes;
  return cap && stream_->queued_bytes() + tx_pending_ > cap;
}

void TcpQueue::park(TcpRequest& r, RState as) {
  if (r.state() != as) set_request_state(r, as);  // a NeedBuffer request resumed too early stays one
  r.waited = true;
  r.next_waiting = nullptr;
  if (!wait_head_) {
    wait_head_ = wait_tail_ = &r;
  } else if (resuming_) {
    r.next_waiting = wait_head_;  // it was the head a moment ago: keep arrival order
    wait_head_ = &r;
  } else {
    wait_tail_->next_waiting = &r;
    wait_tail_ = &r;
  }
  ++waiting_;
  ++waits_;
  if (as == RState::NeedBuffer) {
    memory_short_ = true;
    target_.usage.memory_waits.fetch_add(1, std::memory_order_relaxed);
    if (!memory_logged_) {
      log::warn("{}: buffer memory exhausted (limits: {} per connection, {} in all); commands wait", link_.peer,
                target_.config.max_connection_buffer_memory, target_.config.max_buffer_memory);
      memory_logged_ = true;
    }
    reactor_.arm_timer(&retry_timer_, kMemoryRetryNs);
  } else if (!retry_timer_.linked) {
    reactor_.arm_timer(&retry_timer_, kSendQueueRetryNs);
  }
}

bool TcpQueue::withdraw(TcpRequest& r) {
  TcpRequest** link = &wait_head_;
  TcpRequest* prev = nullptr;
  while (*link && *link != &r) {
    prev = *link;
    link = &(*link)->next_waiting;
  }
  if (!*link) return false;
  *link = r.next_waiting;
  if (wait_tail_ == &r) wait_tail_ = prev;
  r.next_waiting = nullptr;
  --waiting_;
  return true;
}

void TcpQueue::resume_waiting() {
  if (resuming_ || state_ == State::Closing) return;
  resuming_ = true;
  memory_short_ = false;
  while (wait_head_ && state_ != State::Closing && !send_queue_full()) {
    TcpRequest& r = *wait_head_;
    wait_head_ = r.next_waiting;
    if (!wait_head_) wait_tail_ = nullptr;
    r.next_waiting = nullptr;
    --waiting_;
    process(r);
    if (memory_short_) break;  // it is parked at the head again
  }
  resuming_ = false;
  if (!wait_head_) {
    reactor_.cancel_timer(&retry_timer_);
    if (memory_logged_) {
      log::info("{}: buffer memory available again", link_.peer);
      memory_logged_ = false;
    }
  } else if (!retry_timer_.linked) {
    reactor_.arm_timer(&retry_timer_, memory_short_ ? kMemoryRetryNs : kSendQueueRetryNs);
  }
}

void TcpQueue::on_retry_timer(reactor::Timer* t) { static_cast<TimerSlot*>(t)->owner->resume_waiting(); }

// ---------------------------------------------------------------- deadlines

const TcpRequest* TcpQueue::stalled_write(uint64_t now, uint64_t& next_due) const {
  // Checked on the connection's H2CData deadline, not per I/O: a scan of the slots.
  next_due = UINT64_MAX;
  const uint64_t limit = uint64_t(target_.config.h2c_data_timeout_ms) * 1000000ull;
  if (limit == 0) return nullptr;
  for (const auto& r : pool_.slots())
    if (r->state() == RState::AwaitingH2C && r->rx_next < r->r2t_next) {
      const uint64_t asked = r->r2t_sent_ns[(r->rx_next / target_.config.max_h2c_data) % TcpRequest::kMaxR2T];
      if (now > asked && now - asked > limit) return r.get();
      next_due = std::min(next_due, asked + limit + 1);
    }
  return nullptr;
}

// Responses queued and none of them taken by the host since send_timeout_ms ago. Progress
// is seen only here: the stall is counted from the check that first found the queue still.
bool TcpQueue::send_stalled(uint64_t now, uint64_t& next_due) {
  const uint64_t limit = uint64_t(target_.config.send_timeout_ms) * 1000000ull;
  if (stream_->queued_bytes() == 0 || stream_->sent_bytes() != sent_seen_ || send_progress_ns_ == 0) {
    sent_seen_ = stream_->sent_bytes();
    send_progress_ns_ = now;
  } else if (limit != 0 && now > send_progress_ns_ && now - send_progress_ns_ > limit) {
    return true;
  }
  next_due = limit != 0 && stream_->queued_bytes() != 0 ? send_progress_ns_ + limit + 1 : UINT64_MAX;
  return false;
}

void TcpQueue::on_icreq_deadline(uint64_t) {
  if (state_ == State::AwaitICReq) close(fmt::format("no ICReq within {} ms", target_.config.icreq_timeout_ms));
}

void TcpQueue::on_connect_deadline(uint64_t) {
  if (state_ != State::Ready) return;
  if (!commands_.connected()) close("no Connect after ICReq");
  else if (!commands_.authenticated())
    close(fmt::format("not authenticated within {} ms of Connect", target_.config.icreq_timeout_ms));
}

void TcpQueue::on_term_req_linger(uint64_t) {
  terminator_.closing();
  stream_->close();  // the peer did not take our TermReq in time
}

uint64_t TcpQueue::poll_period() const {
  uint64_t period = kControllerPollNs;
  const Controller* ctrl = commands_.controller();
  if (commands_.qid() == 0 && ctrl && ctrl->kato_ms())
    period = std::min<uint64_t>(period, uint64_t(ctrl->kato_ms()) * 250000ull);
  return period;
}

void TcpQueue::arm_check(Deadline d, uint64_t now, uint64_t due) {
  deadlines_.arm_at(d, std::min(due, now + poll_period()));
}

// Each check below stops (and is not armed again) once the connection is closing: a check
// that closes it ends the others due at the same time.
void TcpQueue::on_keep_alive_check(uint64_t now) {
  if (!live()) return;
  Controller& ctrl = *commands_.controller();
  // The controller stamps commands with the clock it got from this queue: KATO is measured on it.
  if (ctrl.keep_alive_expired(now)) {
    log::warn("{}: keep-alive timeout ({} ms) on controller {}", link_.peer, ctrl.kato_ms(), ctrl.cntlid());
    commands_.end_controller("keep-alive timeout");
    close("keep-alive timeout");
    return;
  }
  arm_check(Deadline::KeepAlive, now, ctrl.keep_alive_deadline());
}

void TcpQueue::on_controller_poll(uint64_t) {
  if (!live()) return;
  if (commands_.controller()->dead.load(std::memory_order_relaxed)) {
    close("its controller was torn down");
    return;
  }
  deadlines_.arm(Deadline::ControllerPoll, poll_period());
}

void TcpQueue::on_send_stall_check(uint64_t now) {
  if (!live()) return;
  uint64_t due = UINT64_MAX;
  if (send_stalled(now, due)) {
    log::warn("{}: the host has not read its responses ({} bytes queued) for {} ms; closing the connection", link_.peer,
              stream_->queued_bytes(), target_.config.send_timeout_ms);
    close("send timeout");
    return;
  }
  arm_check(Deadline::SendStall, now, due);
}

void TcpQueue::on_h2c_data_check(uint64_t now) {
  if (!live()) return;
  uint64_t due = UINT64_MAX;
  if (const TcpRequest* r = stalled_write(now, due)) {
    log::warn("{}: no H2CData for cid {} (qid {}) within {} ms of asking for it; closing the connection", link_.peer,
              r->sqe.cid, commands_.qid(), target_.config.h2c_data_timeout_ms);
    close("H2CData timeout");
    return;
  }
  arm_check(Deadline::H2CData, now, due);
}

}  // namespace nvtcp::target

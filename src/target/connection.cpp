// A target connection's life: accept, ICReq and Connect deadlines, the periodic checks of a
// connected queue (keep-alive, its controller, stalled sends and H2C data), close and the
// last device completion that frees it. PDUs: connection_pdu.cpp; commands:
// connection_exec.cpp (fabrics, admin, admission) and connection_io.cpp (NVM I/O).
#include "target/connection.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "reactor/tcp_stream.hpp"
#include "target/connection_internal.hpp"
#include "util/log.hpp"
#include "util/state_machine.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

void ConnectionSet::add(Connection* c) { conns_.push_back(c); }
void ConnectionSet::remove(Connection* c) {
  auto it = std::find(conns_.begin(), conns_.end(), c);
  if (it != conns_.end()) {
    *it = conns_.back();
    conns_.pop_back();
  }
}
void ConnectionSet::remove_draining(Connection* c) {
  auto it = std::find(draining_.begin(), draining_.end(), c);
  if (it != draining_.end()) {
    *it = draining_.back();
    draining_.pop_back();
  }
}
void ConnectionSet::collect(std::vector<ConnectionInfo>& out) const {
  for (const Connection* c : conns_) out.push_back(c->info());
}
RequestStateCounts ConnectionSet::request_states() const {
  RequestStateCounts sum{};
  for (const auto* list : {&conns_, &draining_})
    for (const Connection* c : *list)
      for (size_t s = 0; s < sum.size(); ++s) sum[s] += c->request_states()[s];
  return sum;
}
void ConnectionSet::close_all() {
  auto copy = conns_;
  for (Connection* c : copy) c->close("target shutting down");
}

Connection::Connection(TargetState& target, reactor::Reactor& r, int fd, std::string peer, ConnectionSet& set,
                       std::string address, Arrival arrival, const reactor::Clock& clock)
    : Connection(
          target, r, [&r, fd](reactor::StreamOwner& owner) { return std::make_unique<reactor::TcpStream>(r, fd, &owner); },
          std::move(peer), set, std::move(address), std::move(arrival), clock) {}

Connection::Connection(TargetState& target, reactor::Reactor& r, const MakeStream& make_stream, std::string peer,
                       ConnectionSet& set, std::string address, Arrival arrival, const reactor::Clock& clock)
    : target_(target),
      reactor_(r),
      peer_(std::move(peer)),
      set_(set),
      stream_(make_stream(*this)),
      receiver_(transport::Side::Target, this),
      pool_(target.config, target.usage, this, [](reactor::SendDone* d) {
        Request* req = static_cast<Request::Sent*>(d)->req;
        req->conn->release(req);
      }),
      backend_gate_(release_closed, this),
      deadlines_(this, r, clock,
                 {&Connection::on_icreq_deadline, &Connection::on_connect_deadline, &Connection::on_keep_alive_check,
                  &Connection::on_controller_poll, &Connection::on_send_stall_check, &Connection::on_h2c_data_check,
                  &Connection::on_term_req_linger}) {
  address_ = std::move(address);
  arrival_ = std::move(arrival);
  term_sent_.owner = this;
  term_sent_.fn = [](reactor::SendDone* d) {
    Connection* c = static_cast<TermSent*>(d)->owner;
    c->terminator_.closing();
    c->stream_->close();
  };
  retry_timer_.owner = this;
  retry_timer_.fn = on_retry_timer;
  fence_timer_.owner = this;
  fence_timer_.fn = on_fence_timer;
  durable_timer_.owner = this;
  durable_timer_.fn = on_durable_timer;
  resume_d_.owner = this;
  resume_d_.fn = [](reactor::Deferred* d) { static_cast<reactor::OwnedDeferred<Connection>*>(d)->owner->resume_waiting(); };
  target_.usage.connections.fetch_add(1);
  const auto& cfg = target_.config;
  receiver_.set_max_plen(std::max({cfg.in_capsule_data, cfg.max_h2c_data, kAdminInCapsule}) + 512);
  pool_.resize(1);  // until Connect says how deep the queue is, only Connect can arrive
  set_.add(this);
}

Connection::~Connection() {
  reactor_.cancel_timer(&retry_timer_);
  reactor_.cancel_timer(&fence_timer_);
  reactor_.cancel_timer(&durable_timer_);
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
  i.send_queue_bytes = stream_->queued_bytes();
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
  deadlines_.arm(Deadline::ICReq, uint64_t(target_.config.icreq_timeout_ms) * 1000000ull);
  stream_->start();
}

void Connection::close(const std::string& why) {
  if (state_ != State::Closing) {
    log::info("{}: closing connection: {}", peer_, why);
    set_state(State::Closing);
  }
  stream_->close();
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
    illegal_transition("connection", state_name(state_), state_name(to), "Connection::set_state", long(qid_));
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
  if (state_ != State::Closing) set_state(State::Closing);
  terminator_.peer_closed();
  teardown_controller("admin queue closed");
  deadlines_.cancel_all();
  reactor_.cancel_timer(&retry_timer_);
  reactor_.cancel_timer(&fence_timer_);
  reactor_.cancel_timer(&durable_timer_);
  durable_waiters_.clear();  // their changes are made; their answers have nowhere to go
  // A fused operation that owned its namespace's fence and never reached the device lets go.
  for (Request* w : fence_waiters_) {
    if (w->fence_owner) w->fence_ns->fence.release();
    w->fence_ns->fence.stop_waiting(w->fence_waiting);  // a write it held back no longer waits
  }
  fence_waiters_.clear();
  reactor_.undefer(&resume_d_);
  set_.remove(this);
  // Shutdown waits for draining connections: counted until the release frees this one, at
  // once or at its last device completion.
  set_.add_draining(this);
  backend_gate_.close();
}

void Connection::release_closed(void* conn) {
  auto* c = static_cast<Connection*>(conn);
  c->set_.remove_draining(c);
  delete c;
}

const Request* Connection::stalled_write(uint64_t now, uint64_t& next_due) const {
  // Checked on the connection's H2CData deadline, not per I/O: a scan of the slots.
  next_due = UINT64_MAX;
  const uint64_t limit = uint64_t(target_.config.h2c_data_timeout_ms) * 1000000ull;
  if (limit == 0) return nullptr;
  for (const auto& r : pool_.slots())
    if (r->state() == Request::State::AwaitingH2C && r->rx_next < r->r2t_next) {
      const uint64_t asked = r->r2t_sent_ns[(r->rx_next / target_.config.max_h2c_data) % Request::kMaxR2T];
      if (now > asked && now - asked > limit) return r.get();
      next_due = std::min(next_due, asked + limit + 1);
    }
  return nullptr;
}

// Responses queued and none of them taken by the host since send_timeout_ms ago. Progress
// is seen only here: the stall is counted from the check that first found the queue still.
bool Connection::send_stalled(uint64_t now, uint64_t& next_due) {
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

void Connection::on_icreq_deadline(uint64_t) {
  if (state_ == State::AwaitICReq) close(fmt::format("no ICReq within {} ms", target_.config.icreq_timeout_ms));
}

void Connection::on_connect_deadline(uint64_t) {
  if (state_ == State::AwaitConnect) close("no Connect after ICReq");
}

void Connection::on_term_req_linger(uint64_t) {
  terminator_.closing();
  stream_->close();  // the peer did not take our TermReq in time
}

uint64_t Connection::poll_period() const {
  uint64_t period = kControllerPollNs;
  if (qid_ == 0 && ctrl_ && ctrl_->kato_ms()) period = std::min<uint64_t>(period, uint64_t(ctrl_->kato_ms()) * 250000ull);
  return period;
}

void Connection::arm_check(Deadline d, uint64_t now, uint64_t due) {
  deadlines_.arm_at(d, std::min(due, now + poll_period()));
}

void Connection::start_connected_checks() {
  deadlines_.cancel(Deadline::Connect);
  // The first checks come one controller poll after Connect, then every poll_period().
  if (qid_ == 0) deadlines_.arm(Deadline::KeepAlive, kControllerPollNs);
  deadlines_.arm(Deadline::ControllerPoll, kControllerPollNs);
  deadlines_.arm(Deadline::SendStall, kControllerPollNs);
  deadlines_.arm(Deadline::H2CData, kControllerPollNs);
}

// Each check below stops (and is not armed again) once the connection is closing: a check
// that closes it ends the others due at the same time.
void Connection::on_keep_alive_check(uint64_t now) {
  if (state_ != State::Connected || !ctrl_) return;
  // The controller stamps commands with the clock it got from this queue: KATO is measured on it.
  if (ctrl_->keep_alive_expired(now)) {
    log::warn("{}: keep-alive timeout ({} ms) on controller {}", peer_, ctrl_->kato_ms(), ctrl_->cntlid());
    teardown_controller("keep-alive timeout");
    close("keep-alive timeout");
    return;
  }
  arm_check(Deadline::KeepAlive, now, ctrl_->keep_alive_deadline());
}

void Connection::on_controller_poll(uint64_t) {
  if (state_ != State::Connected || !ctrl_) return;
  if (ctrl_->dead.load(std::memory_order_relaxed)) {
    close("its controller was torn down");
    return;
  }
  deadlines_.arm(Deadline::ControllerPoll, poll_period());
}

void Connection::on_send_stall_check(uint64_t now) {
  if (state_ != State::Connected || !ctrl_) return;
  uint64_t due = UINT64_MAX;
  if (send_stalled(now, due)) {
    log::warn("{}: the host has not read its responses ({} bytes queued) for {} ms; closing the connection", peer_,
              stream_->queued_bytes(), target_.config.send_timeout_ms);
    close("send timeout");
    return;
  }
  arm_check(Deadline::SendStall, now, due);
}

void Connection::on_h2c_data_check(uint64_t now) {
  if (state_ != State::Connected || !ctrl_) return;
  uint64_t due = UINT64_MAX;
  if (const Request* r = stalled_write(now, due)) {
    log::warn("{}: no H2CData for cid {} (qid {}) within {} ms of asking for it; closing the connection", peer_,
              r->sqe.cid, qid_, target_.config.h2c_data_timeout_ms);
    close("H2CData timeout");
    return;
  }
  arm_check(Deadline::H2CData, now, due);
}

}  // namespace nvtcp::target

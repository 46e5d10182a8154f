// SPDX-License-Identifier: Apache-2.0
// The NVMe/TCP queue: a connection's life (accept, close and the last device completion that
// frees it), back-pressure, and process(), which moves each request through its life. Its PDUs
// in are tcp_queue_receive.cpp's, its PDUs out tcp_queue_send.cpp's, what its deadlines do
// tcp_queue_timeouts.cpp's.
#include "target_tcp/tcp_queue.hpp"

#include <algorithm>
#include <cstring>

#include "reactor/tcp_stream.hpp"
#include "target/queue_limits.hpp"
#include "util/log.hpp"

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

std::unique_ptr<reactor::TcpStream> target_tcp_stream(reactor::Reactor& r, int fd, reactor::StreamOwner& owner,
                                                      const ReactorCommands& set) {
  auto s = std::make_unique<reactor::TcpStream>(r, fd, &owner);
  s->limit_send_per_turn(set.send_limit());
  return s;
}

TcpQueue::TcpQueue(TargetState& target, reactor::Reactor& r, int fd, std::string peer, ConnectionSet& set,
                   SendShares::Lease send_share, Arrival arrival, const reactor::Clock& clock)
    : TcpQueue(
          target, r, [&r, fd, &set](reactor::StreamOwner& owner) { return target_tcp_stream(r, fd, owner, set); },
          std::move(peer), set, std::move(send_share), std::move(arrival), clock) {}

TcpQueue::TcpQueue(TargetState& target, reactor::Reactor& r, const MakeStream& make_stream, std::string peer,
                   ConnectionSet& set, SendShares::Lease send_share, Arrival arrival, const reactor::Clock& clock)
    : target_(target),
      live_count_(target.usage.connections),
      reactor_(r),
      link_{&r, &clock, std::move(peer), std::move(arrival)},
      set_(set),
      stream_(make_stream(*this)),
      receive_(*this),
      receiver_(transport::Side::Target, &receive_),
      send_share_(std::move(send_share)),
      commands_(target, *this, link_, memory_, set, release_closed, this),
      memory_(target.config, target.usage, sizeof(TcpRequest)),
      pool_(memory_, this,
            [](reactor::SendDone* d) {
              TcpRequest* req = static_cast<TcpRequest::Sent*>(d)->req;
              req->owner->process(*req);
            }),
      send_(*this),
      timeouts_(*this),
      deadlines_(&timeouts_, r, clock,
                 {&TcpQueueTimeouts::on_icreq_deadline, &TcpQueueTimeouts::on_connect_deadline,
                  &TcpQueueTimeouts::on_keep_alive_check, &TcpQueueTimeouts::on_controller_poll,
                  &TcpQueueTimeouts::on_send_stall_check, &TcpQueueTimeouts::on_h2c_data_check,
                  &TcpQueueTimeouts::on_term_req_linger}) {
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
  i.send_queue_peak = send_.peak();
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
  note_load();
}

// This I/O queue's load (its commands and their data outstanding), as its reactor counts it:
// the budgets of work per turn hold while a light queue shares the reactor with a heavy one
// (ReactorCommands::queue_load).
void TcpQueue::note_load() {
  using Load = ReactorCommands::Load;
  const bool counted = state_ == State::Ready && commands_.qid() != 0;
  const uint32_t commands = counted ? uint32_t(pool_.size() - pool_.count(RState::Free)) : 0;
  const Load was = load_.load;
  load_.load = load_.update(commands, outstanding_bytes_, reactor_.now_ns());
  if (load_.load != was) set_.queue_load(was, load_.load, reactor_.now_ns());
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
        send_.r2ts(r);
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
  set_request_state(r, RState::Sending);
  send_.response(r);
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

void TcpQueue::release(TcpRequest& r) {
  const bool last = r.close_queue_after;
  commands_.release(r);
  // Admin and discovery commands are few and far between: their buffers (log pages up to
  // MDTS) go back at once instead of waiting, idle, for the next one.
  outstanding_bytes_ -= r.sqe.sgl.length;
  pool_.release(&r, commands_.qid() == 0);
  note_load();
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

}  // namespace nvtcp::target

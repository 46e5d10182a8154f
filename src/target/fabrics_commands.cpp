// SPDX-License-Identifier: Apache-2.0
// Fabrics commands: Connect (which makes this queue an admin queue with a new controller, or an
// I/O queue of an existing one), Property Get and Set, Disconnect.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "auth/tls_psk.hpp"
#include "target/command_queue.hpp"
#include "target/queue_limits.hpp"
#include "util/log.hpp"
#include "wire/auth.hpp"
#include "wire/fabrics.hpp"

namespace nvtcp::target {

namespace {
// A refused Connect is a line any stranger can cause, once per connection it opens.
log::Limiter connect_refusals(20);
}  // namespace

using namespace nvtcp::wire;

namespace {
constexpr uint32_t kMaxAdminQueueDepth = 128;
}  // namespace

void CommandQueue::parse_fabrics(Command& r) {
  const auto fctype = static_cast<FabricsType>(r.sqe.fctype());
  if (fctype == FabricsType::Connect) {
    if (connected()) {
      r.status = sc::CommandSequenceError;
    } else if (r.capsule_len != kConnectDataLen) {
      // Its data comes in the capsule, as every host sends it.
      log::warn_limited(connect_refusals, "{}: Connect without its {}-byte data (got {})", link_.peer,
                        kConnectDataLen, r.capsule_len);
      r.status = sc::DataSglLengthInvalid;
    }
    return;
  }
  if (!connected()) {
    r.status = sc::CommandSequenceError;
    return;
  }
  switch (fctype) {
    case FabricsType::PropertyGet:
    case FabricsType::PropertySet:
      if (qid_ != 0) r.status = sc::InvalidOpcode;
      else if (!authenticated()) r.status = sc::AuthenticationRequired;
      return;
    case FabricsType::AuthSend:
    case FabricsType::AuthReceive: parse_auth(r); return;
    case FabricsType::Disconnect: return;
    default: r.status = sc::InvalidOpcode; return;
  }
}

void CommandQueue::execute_fabrics(Command& r) {
  const auto fctype = static_cast<FabricsType>(r.sqe.fctype());
  if (fctype == FabricsType::Connect) {
    execute_connect(r);
    return;
  }
  if (fctype == FabricsType::Disconnect) {
    r.close_queue_after = true;
    complete(r, sc::Success);
    return;
  }
  if (fctype == FabricsType::AuthSend || fctype == FabricsType::AuthReceive) {
    execute_auth(r);
    return;
  }
  PropertySetCmd pg;
  std::memcpy(&pg, &r.sqe, sizeof(pg));
  const bool eight = (pg.attrib & 0x7) == 1;
  ctrl_->touch();
  if (fctype == FabricsType::PropertyGet) {
    uint64_t v = 0;
    const Status st = ctrl_->property_get(pg.ofst, eight, v);
    r.dw0 = uint32_t(v);
    r.dw1 = uint32_t(v >> 32);
    complete(r, st);
    return;
  }
  const Controller::PropertySetResult set = ctrl_->property_set(pg.ofst, eight, pg.value);
  if (set.flush_for_shutdown) {
    start_flush(r, true, true);  // completes the Property Set once every cache is durable
    return;
  }
  complete(r, set.status);
}

void CommandQueue::invalid_connect_param(Command& r, bool in_data, uint32_t offset) {
  r.dw0 = offset | (in_data ? (1u << 16) : 0);
  complete(r, sc::ConnectInvalidParameters);
}

void CommandQueue::execute_connect(Command& r) {
  const std::string& peer = link_.peer;
  ConnectCmd cmd;
  std::memcpy(&cmd, &r.sqe, sizeof(cmd));
  if (cmd.recfmt != 0) {
    complete(r, sc::ConnectIncompatibleFormat);
    return;
  }
  ConnectData data;
  std::memcpy(&data, r.buf, sizeof(data));
  std::string subnqn(data.subnqn, strnlen(data.subnqn, sizeof(data.subnqn)));
  std::string hostnqn(data.hostnqn, strnlen(data.hostnqn, sizeof(data.hostnqn)));
  const std::shared_ptr<Subsystem> sub = target_.find_subsystem(subnqn);
  if (!sub) {
    log::warn_limited(connect_refusals, "{}: Connect to unknown subsystem '{}'", peer, subnqn);
    invalid_connect_param(r, true, offsetof(ConnectData, subnqn));
    return;
  }
  // A subsystem not bound to this listener is not there for this host (nvmet answers the same).
  if (!sub->listeners().reachable_through(link_.arrival.portid)) {
    log::warn_limited(connect_refusals,
                      "{}: Connect to subsystem '{}', which is not on the listener this host came through", peer,
                      subnqn);
    invalid_connect_param(r, true, offsetof(ConnectData, subnqn));
    return;
  }
  if (!sub->is_discovery() && !sub->hosts().allowed(hostnqn)) {
    log::warn_limited(connect_refusals, "{}: host '{}' is not allowed on {}", peer, hostnqn, subnqn);
    complete(r, sc::ConnectInvalidHost);
    return;
  }
  // In TLS, the PSK chose the host and the subsystem: the Connect must name the same two, or a
  // host holding one key could act as any other.
  const std::string_view tls = link_.tls_identity;
  // A host with a PSK comes in over TLS: in the clear, its NQN (which every ClientHello of it
  // shows) proves nothing.
  if (!sub->is_discovery() && tls.empty() && !sub->hosts().channel_allowed(hostnqn, false)) {
    log::warn_limited(connect_refusals,
                      "{}: host '{}' has a TLS PSK on {} and came in the clear: refused (admitted over TLS only unless "
                      "its allow_plain is set)",
                      peer, hostnqn, subnqn);
    complete(r, sc::ConnectInvalidHost);
    return;
  }
  if (!tls.empty()) {
    auth::PskIdentity id;
    std::string why;
    if (!auth::parse_psk_identity(tls, id, why) || id.hostnqn != hostnqn || id.subnqn != subnqn) {
      log::warn_limited(connect_refusals,
                        "{}: Connect as host '{}' to '{}' in a TLS session whose PSK is for host '{}' on '{}': refused",
                        peer, hostnqn, subnqn, id.hostnqn, id.subnqn);
      complete(r, sc::ConnectInvalidHost);
      return;
    }
  }
  // A host with a DH-HMAC-CHAP key authenticates every queue before anything else (ATR).
  const std::optional<HostKeys> keys = sub->is_discovery() ? std::nullopt : sub->hosts().keys(hostnqn);
  // Admin and discovery queues carry few commands: at most kMaxAdminQueueDepth entries (the
  // Linux host asks for 32, SPDK allows 128), which also bounds how many responses one
  // discovery connection, open to any host, can have in flight.
  const uint32_t max_depth = cmd.qid == 0 ? std::min(kMaxAdminQueueDepth, target_.config.max_queue_depth)
                                          : target_.config.max_queue_depth;
  if (cmd.sqsize == 0 || uint32_t(cmd.sqsize) + 1 > max_depth) {
    log::warn_limited(connect_refusals, "{}: Connect SQSIZE {} out of range", peer, cmd.sqsize);
    invalid_connect_param(r, false, offsetof(ConnectCmd, sqsize));
    return;
  }
  // What this queue holds for its life: one of its host's connection slots, and its request
  // pool (SQSIZE requests), counted in the buffer budgets like data buffers. The host is its
  // NQN when something vouches for it: the TLS PSK (checked above), or the subsystem's list of
  // allowed hosts when the host has no DH-HMAC-CHAP key. On a subsystem open to any host
  // nothing does, and a sender claiming a fresh NQN per connection would take a fresh budget
  // each time: those count under their address instead. So does a host with a key until it has
  // proven it (execute_auth moves the queue to its NQN then): else a sender claiming that NQN
  // could hold the host's connection slots until icreq_timeout_ms.
  const auto& cfg = target_.config;
  const bool must_prove = tls.empty() && keys && keys->dhchap;
  const bool vouched = !tls.empty() || (!must_prove && !sub->hosts().allows_any() && !sub->is_discovery());
  const std::string principal =
      vouched ? hostnqn : fmt::format("unauthenticated hosts at {}", link_.arrival.remote_address);
  auto host = target_.host_budget(principal);
  if (host->connections.fetch_add(1, std::memory_order_relaxed) >= cfg.max_connections_per_host &&
      cfg.max_connections_per_host) {
    host->connections.fetch_sub(1, std::memory_order_relaxed);
    log::warn_limited(connect_refusals, "{}: host '{}': {} already {} {} queues (max_connections_per_host)", peer,
                      hostnqn, vouched ? "it" : principal, vouched ? "has" : "have", cfg.max_connections_per_host);
    complete(r, sc::ConnectControllerBusy);
    return;
  }
  const uint64_t pool = memory_.pool_bytes_for(cmd.sqsize + 1u);
  if (!memory_.reserve_budgets(host.get(), pool, cfg.max_buffer_memory)) {
    host->connections.fetch_sub(1, std::memory_order_relaxed);
    log::warn_limited(
        connect_refusals,
        "{}: no buffer memory for a queue of {} entries of host '{}' (budget of {}; max_buffer_memory {}, "
        "max_host_buffer_memory {})",
        peer, cmd.sqsize + 1, hostnqn, principal, cfg.max_buffer_memory, cfg.max_host_buffer_memory);
    complete(r, kCommandInterrupted);
    return;
  }
  auto undo = [&] {
    memory_.release_budgets(host.get(), pool);
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
    auto made = std::make_shared<Controller>(target_, *sub, cntlid, hostnqn, data.hostid, cmd.kato, clock());
    // Where it came in is set before other threads can find it (ANA changes look at its port).
    made->set_local_address(link_.arrival.local_address);
    const bool on_listener = made->set_port(link_.arrival.portid);
    ctrl = on_listener ? sub->add_controller(std::move(made)) : nullptr;
    if (!ctrl) {  // deleted, or taken off this listener, by RPC since it was found: as if it had not been there
      undo();
      log::warn("{}: Connect to subsystem '{}', which was deleted or taken off this listener meanwhile", peer, subnqn);
      invalid_connect_param(r, true, offsetof(ConnectData, subnqn));
      return;
    }
  } else {
    ctrl = sub->find_controller(data.cntlid);
    if (!ctrl || ctrl->hostnqn() != hostnqn || std::memcmp(ctrl->hostid(), data.hostid, 16) != 0) {
      log::warn_limited(connect_refusals, "{}: I/O Connect names controller {} that this host does not own", peer,
                        data.cntlid);
      undo();
      invalid_connect_param(r, true, offsetof(ConnectData, cntlid));
      return;
    }
    // A controller lives on one port: its I/O queues come in where its admin queue did, or
    // their ANA states and counters would be another path's.
    if (ctrl->portid() != link_.arrival.portid) {
      log::warn_limited(connect_refusals,
                        "{}: I/O Connect for controller {} came in through another listener than its admin queue", peer,
                        data.cntlid);
      undo();
      invalid_connect_param(r, true, offsetof(ConnectData, cntlid));
      return;
    }
    if (!ctrl->ready()) {
      undo();
      complete(r, sc::CommandSequenceError);
      return;
    }
    // A queue that must still prove its key claims its qid once it has: else anyone who names
    // the controller (its host NQN, host ID and CNTLID travel in the clear) could hold the host's
    // qids until the authentication timeout closes them, over and over.
    const bool claim_now = !must_prove;
    if (cmd.qid == 0 || cmd.qid > ctrl->num_io_queues() || (claim_now && !ctrl->claim_queue(cmd.qid))) {
      log::warn_limited(connect_refusals, "{}: I/O Connect for qid {} (controller has {} queues, or it is taken)", peer,
                        cmd.qid, ctrl->num_io_queues());
      undo();
      invalid_connect_param(r, false, offsetof(ConnectCmd, qid));
      return;
    }
    stats_ = ctrl->stats(cmd.qid);
    resv_cache_.assign(sub->max_namespaces() + 1, {});  // by NSID
  }
  ctrl_ = ctrl;
  if (cmd.qid == 0) ctrl_->attach_admin_queue(&reactor(), this);
  else if (!must_prove)
    ctrl_->register_io_queue(cmd.qid, &reactor(), this);
  else
    qid_claim_after_auth_ = true;
  host_ = std::move(host);
  memory_.attach_host(host_.get(), pool);
  qid_ = cmd.qid;
  sqsize_ = uint16_t(cmd.sqsize + 1);
  sqhd_ = 0;  // the Connect itself is consumed as it completes (respond())
  sq_flow_disabled_ = cmd.cattr & kConnectAttrDisableSqFlow;
  if (keys) auth_keys_ = *keys;
  auth_required_ = keys && keys->dhchap;
  budget_after_auth_ = must_prove;
  log::event(log::Level::Info, "connect",
             {{"host_nqn", hostnqn},
              {"address", peer},
              {"subsystem", subnqn},
              {"cntlid", std::to_string(ctrl->cntlid())},
              {"qid", std::to_string(qid_)}},
             "{}: host {} connected to {} (controller {}, qid {}, depth {}{}{}{})", peer, hostnqn, subnqn,
             ctrl->cntlid(), qid_, sqsize_, sq_flow_disabled_ ? ", SQ flow control off" : "",
             link_.features(), auth_required_ ? ", must authenticate" : "");
  r.dw0 = ctrl->cntlid() | (auth_required_ ? kConnectResultAtr : 0);
  complete(r, sc::Success);
}

}  // namespace nvtcp::target

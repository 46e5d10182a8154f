// SPDX-License-Identifier: Apache-2.0
// Fabrics commands (fabrics_commands.hpp): Connect in its steps, Property Get and Set,
// Disconnect.
#include "target/fabrics_commands.hpp"

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

using namespace nvtcp::wire;

namespace {
// A refused Connect is a line any stranger can cause, once per connection it opens.
log::Limiter connect_refusals(20);
constexpr uint32_t kMaxAdminQueueDepth = 128;
}  // namespace

FabricsCommands::~FabricsCommands() {
  if (host_) host_->connections.fetch_sub(1, std::memory_order_relaxed);
}

void FabricsCommands::parse(Command& r) {
  const auto fctype = static_cast<FabricsType>(r.sqe.fctype());
  if (fctype == FabricsType::Connect) {
    if (q_.connected()) {
      r.status = sc::CommandSequenceError;
    } else if (r.capsule_len != kConnectDataLen) {
      // Its data comes in the capsule, as every host sends it.
      log::warn_limited(connect_refusals, "{}: Connect without its {}-byte data (got {})", q_.link_.peer,
                        kConnectDataLen, r.capsule_len);
      r.status = sc::DataSglLengthInvalid;
    }
    return;
  }
  if (!q_.connected()) {
    r.status = sc::CommandSequenceError;
    return;
  }
  switch (fctype) {
    case FabricsType::PropertyGet:
    case FabricsType::PropertySet:
      if (q_.qid_ != 0) r.status = sc::InvalidOpcode;
      else if (!authenticated()) r.status = sc::AuthenticationRequired;
      return;
    case FabricsType::AuthSend:
    case FabricsType::AuthReceive: parse_auth(r); return;
    case FabricsType::Disconnect: return;
    default: r.status = sc::InvalidOpcode; return;
  }
}

void FabricsCommands::execute(Command& r) {
  const auto fctype = static_cast<FabricsType>(r.sqe.fctype());
  if (fctype == FabricsType::Connect) {
    execute_connect(r);
    return;
  }
  if (fctype == FabricsType::Disconnect) {
    r.close_queue_after = true;
    q_.complete(r, sc::Success);
    return;
  }
  if (fctype == FabricsType::AuthSend || fctype == FabricsType::AuthReceive) {
    execute_auth(r);
    return;
  }
  execute_property(r);
}

void FabricsCommands::execute_property(Command& r) {
  const auto fctype = static_cast<FabricsType>(r.sqe.fctype());
  PropertySetCmd pg;
  std::memcpy(&pg, &r.sqe, sizeof(pg));
  const bool eight = (pg.attrib & 0x7) == 1;
  q_.ctrl_->touch();
  if (fctype == FabricsType::PropertyGet) {
    uint64_t v = 0;
    const Status st = q_.ctrl_->property_get(pg.ofst, eight, v);
    r.dw0 = uint32_t(v);
    r.dw1 = uint32_t(v >> 32);
    q_.complete(r, st);
    return;
  }
  const Controller::PropertySetResult set = q_.ctrl_->property_set(pg.ofst, eight, pg.value);
  if (set.flush_for_shutdown) {
    q_.io_.start_flush(r, true, true);  // completes the Property Set once every cache is durable
    return;
  }
  q_.complete(r, set.status);
}

void FabricsCommands::invalid_connect_param(Command& r, bool in_data, uint32_t offset) {
  r.dw0 = offset | (in_data ? (1u << 16) : 0);
  q_.complete(r, sc::ConnectInvalidParameters);
}


void FabricsCommands::execute_connect(Command& r) {
  Connecting c;
  std::memcpy(&c.cmd, &r.sqe, sizeof(c.cmd));
  if (c.cmd.recfmt != 0) {
    q_.complete(r, sc::ConnectIncompatibleFormat);
    return;
  }
  std::memcpy(&c.data, r.buf, sizeof(c.data));
  c.subnqn.assign(c.data.subnqn, strnlen(c.data.subnqn, sizeof(c.data.subnqn)));
  c.hostnqn.assign(c.data.hostnqn, strnlen(c.data.hostnqn, sizeof(c.data.hostnqn)));
  if (!admit_host(r, c) || !check_depth(r, c) || !reserve_queue(r, c)) return;
  std::shared_ptr<Controller> ctrl = c.cmd.qid == 0 ? new_controller(r, c) : existing_controller(r, c);
  if (ctrl) associate(r, c, std::move(ctrl));
}

// The subsystem the Connect names, and whether this host may use it over this link.
bool FabricsCommands::admit_host(Command& r, Connecting& c) {
  const std::string& peer = q_.link_.peer;
  const std::string& subnqn = c.subnqn;
  const std::string& hostnqn = c.hostnqn;
  c.sub = q_.target_.find_subsystem(subnqn);
  const std::shared_ptr<Subsystem>& sub = c.sub;
  if (!sub) {
    log::warn_limited(connect_refusals, "{}: Connect to unknown subsystem '{}'", peer, subnqn);
    invalid_connect_param(r, true, offsetof(ConnectData, subnqn));
    return false;
  }
  // A subsystem not bound to this listener is not there for this host (nvmet answers the same).
  if (!sub->listeners().reachable_through(q_.link_.arrival.portid)) {
    log::warn_limited(connect_refusals,
                      "{}: Connect to subsystem '{}', which is not on the listener this host came through", peer,
                      subnqn);
    invalid_connect_param(r, true, offsetof(ConnectData, subnqn));
    return false;
  }
  if (!sub->is_discovery() && !sub->hosts().allowed(hostnqn)) {
    log::warn_limited(connect_refusals, "{}: host '{}' is not allowed on {}", peer, hostnqn, subnqn);
    q_.complete(r, sc::ConnectInvalidHost);
    return false;
  }
  // In TLS, the PSK chose the host and the subsystem: the Connect must name the same two, or a
  // host holding one key could act as any other.
  const std::string_view tls = q_.link_.tls_identity;
  // A host with a PSK comes in over TLS: in the clear, its NQN (which every ClientHello of it
  // shows) proves nothing.
  if (!sub->is_discovery() && tls.empty() && !sub->hosts().channel_allowed(hostnqn, false)) {
    log::warn_limited(connect_refusals,
                      "{}: host '{}' has a TLS PSK on {} and came in the clear: refused (admitted over TLS only unless "
                      "its allow_plain is set)",
                      peer, hostnqn, subnqn);
    q_.complete(r, sc::ConnectInvalidHost);
    return false;
  }
  if (!tls.empty()) {
    auth::PskIdentity id;
    std::string why;
    if (!auth::parse_psk_identity(tls, id, why) || id.hostnqn != hostnqn || id.subnqn != subnqn) {
      log::warn_limited(connect_refusals,
                        "{}: Connect as host '{}' to '{}' in a TLS session whose PSK is for host '{}' on '{}': refused",
                        peer, hostnqn, subnqn, id.hostnqn, id.subnqn);
      q_.complete(r, sc::ConnectInvalidHost);
      return false;
    }
  }
  // A host with a DH-HMAC-CHAP key authenticates every queue before anything else (ATR).
  c.keys = sub->is_discovery() ? std::nullopt : sub->hosts().keys(hostnqn);
  c.must_prove = tls.empty() && c.keys && c.keys->dhchap;
  return true;
}

// Admin and discovery queues carry few commands: at most kMaxAdminQueueDepth entries (the
// Linux host asks for 32, SPDK allows 128), which also bounds how many responses one
// discovery connection, open to any host, can have in flight.
bool FabricsCommands::check_depth(Command& r, const Connecting& c) {
  const uint32_t max_depth = c.cmd.qid == 0 ? std::min(kMaxAdminQueueDepth, q_.target_.config.max_queue_depth)
                                            : q_.target_.config.max_queue_depth;
  if (c.cmd.sqsize == 0 || uint32_t(c.cmd.sqsize) + 1 > max_depth) {
    log::warn_limited(connect_refusals, "{}: Connect SQSIZE {} out of range", q_.link_.peer, c.cmd.sqsize);
    invalid_connect_param(r, false, offsetof(ConnectCmd, sqsize));
    return false;
  }
  return true;
}

// What this queue holds for its life: one of its host's connection slots, and its request
// pool (SQSIZE requests), counted in the buffer budgets like data buffers. The host is its
// NQN when something vouches for it: the TLS PSK (checked by admit_host), or the subsystem's
// list of allowed hosts when the host has no DH-HMAC-CHAP key. On a subsystem open to any host
// nothing does, and a sender claiming a fresh NQN per connection would take a fresh budget
// each time: those count under their address instead. So does a host with a key until it has
// proven it (complete_auth moves the queue to its NQN then): else a sender claiming that NQN
// could hold the host's connection slots until icreq_timeout_ms.
bool FabricsCommands::reserve_queue(Command& r, Connecting& c) {
  const auto& cfg = q_.target_.config;
  const std::string& hostnqn = c.hostnqn;
  const bool vouched =
      !q_.link_.tls_identity.empty() || (!c.must_prove && !c.sub->hosts().allows_any() && !c.sub->is_discovery());
  const std::string principal =
      vouched ? hostnqn : fmt::format("unauthenticated hosts at {}", q_.link_.arrival.remote_address);
  c.host = q_.target_.host_budget(principal);
  HostBudget& host = *c.host;
  if (host.connections.fetch_add(1, std::memory_order_relaxed) >= cfg.max_connections_per_host &&
      cfg.max_connections_per_host) {
    host.connections.fetch_sub(1, std::memory_order_relaxed);
    log::warn_limited(connect_refusals, "{}: host '{}': {} already {} {} queues (max_connections_per_host)",
                      q_.link_.peer, hostnqn, vouched ? "it" : principal, vouched ? "has" : "have",
                      cfg.max_connections_per_host);
    q_.complete(r, sc::ConnectControllerBusy);
    return false;
  }
  c.pool = q_.memory_.pool_bytes_for(c.cmd.sqsize + 1u);
  if (!q_.memory_.reserve_budgets(&host, c.pool, cfg.max_buffer_memory)) {
    host.connections.fetch_sub(1, std::memory_order_relaxed);
    log::warn_limited(
        connect_refusals,
        "{}: no buffer memory for a queue of {} entries of host '{}' (budget of {}; max_buffer_memory {}, "
        "max_host_buffer_memory {})",
        q_.link_.peer, c.cmd.sqsize + 1, hostnqn, principal, cfg.max_buffer_memory, cfg.max_host_buffer_memory);
    q_.complete(r, kCommandInterrupted);
    return false;
  }
  return true;
}

void FabricsCommands::unreserve_queue(const Connecting& c) {
  q_.memory_.release_budgets(c.host.get(), c.pool);
  c.host->connections.fetch_sub(1, std::memory_order_relaxed);
}

// An admin queue's Connect makes its controller.
std::shared_ptr<Controller> FabricsCommands::new_controller(Command& r, Connecting& c) {
  Subsystem& sub = *c.sub;
  if (c.data.cntlid != kDynamicCntlid) {
    unreserve_queue(c);
    invalid_connect_param(r, true, offsetof(ConnectData, cntlid));
    return nullptr;
  }
  uint16_t cntlid = sub.allocate_cntlid();
  if (cntlid == 0) {
    unreserve_queue(c);
    q_.complete(r, sc::ConnectControllerBusy);
    return nullptr;
  }
  auto made =
      std::make_shared<Controller>(q_.target_, sub, cntlid, c.hostnqn, c.data.hostid, c.cmd.kato, q_.clock());
  // Where it came in is set before other threads can find it (ANA changes look at its port).
  const bool on_listener = made->set_arrival(q_.link_.arrival.portid, q_.link_.arrival.local_address);
  std::shared_ptr<Controller> ctrl = on_listener ? sub.add_controller(std::move(made)) : nullptr;
  if (!ctrl) {  // deleted, or taken off this listener, by RPC since it was found: as if it had not been there
    unreserve_queue(c);
    log::warn("{}: Connect to subsystem '{}', which was deleted or taken off this listener meanwhile", q_.link_.peer,
              c.subnqn);
    invalid_connect_param(r, true, offsetof(ConnectData, subnqn));
  }
  return ctrl;
}

// An I/O queue's Connect joins the controller its host's admin queue made, on the same port.
std::shared_ptr<Controller> FabricsCommands::existing_controller(Command& r, Connecting& c) {
  const std::string& peer = q_.link_.peer;
  std::shared_ptr<Controller> ctrl = c.sub->find_controller(c.data.cntlid);
  if (!ctrl || ctrl->hostnqn() != c.hostnqn || std::memcmp(ctrl->hostid(), c.data.hostid, 16) != 0) {
    log::warn_limited(connect_refusals, "{}: I/O Connect names controller {} that this host does not own", peer,
                      c.data.cntlid);
    unreserve_queue(c);
    invalid_connect_param(r, true, offsetof(ConnectData, cntlid));
    return nullptr;
  }
  // A controller lives on one port: its I/O queues come in where its admin queue did, or
  // their ANA states and counters would be another path's.
  if (ctrl->portid() != q_.link_.arrival.portid) {
    log::warn_limited(connect_refusals,
                      "{}: I/O Connect for controller {} came in through another listener than its admin queue", peer,
                      c.data.cntlid);
    unreserve_queue(c);
    invalid_connect_param(r, true, offsetof(ConnectData, cntlid));
    return nullptr;
  }
  if (!ctrl->ready()) {
    unreserve_queue(c);
    q_.complete(r, sc::CommandSequenceError);
    return nullptr;
  }
  // A queue that must still prove its key claims its qid once it has: else anyone who names
  // the controller (its host NQN, host ID and CNTLID travel in the clear) could hold the host's
  // qids until the authentication timeout closes them, over and over.
  const uint16_t qid = c.cmd.qid;
  const bool claim_now = !c.must_prove;
  if (qid == 0 || qid > ctrl->num_io_queues() || (claim_now && !ctrl->io_queues.claim(qid))) {
    log::warn_limited(connect_refusals, "{}: I/O Connect for qid {} (controller has {} queues, or it is taken)", peer,
                      qid, ctrl->num_io_queues());
    unreserve_queue(c);
    invalid_connect_param(r, false, offsetof(ConnectCmd, qid));
    return nullptr;
  }
  q_.io_.attach(ctrl->io_queues.stats(qid), c.sub->max_namespaces());
  return ctrl;
}

void FabricsCommands::associate(Command& r, Connecting& c, std::shared_ptr<Controller> ctrl) {
  const ConnectCmd& cmd = c.cmd;
  q_.ctrl_ = std::move(ctrl);
  Controller& joined = *q_.ctrl_;
  if (cmd.qid == 0) joined.attach_admin_queue(&q_.reactor(), &q_.admin_);
  else if (!c.must_prove)
    joined.io_queues.add(cmd.qid, &q_.reactor(), &q_.io_);
  else
    qid_claim_after_auth_ = true;
  host_ = std::move(c.host);
  q_.memory_.attach_host(host_.get(), c.pool);
  q_.qid_ = cmd.qid;
  q_.sqsize_ = uint16_t(cmd.sqsize + 1);
  q_.sqhd_ = 0;  // the Connect itself is consumed as it completes (respond())
  q_.sq_flow_disabled_ = cmd.cattr & kConnectAttrDisableSqFlow;
  if (c.keys) auth_keys_ = *c.keys;
  auth_required_ = c.keys && c.keys->dhchap;
  budget_after_auth_ = c.must_prove;
  log::event(log::Level::Info, "connect",
             {{"host_nqn", c.hostnqn},
              {"address", q_.link_.peer},
              {"subsystem", c.subnqn},
              {"cntlid", std::to_string(joined.cntlid())},
              {"qid", std::to_string(q_.qid_)}},
             "{}: host {} connected to {} (controller {}, qid {}, depth {}{}{}{})", q_.link_.peer, c.hostnqn,
             c.subnqn, joined.cntlid(), q_.qid_, q_.sqsize_, q_.sq_flow_disabled_ ? ", SQ flow control off" : "",
             q_.link_.features(), auth_required_ ? ", must authenticate" : "");
  r.dw0 = joined.cntlid() | (auth_required_ ? kConnectResultAtr : 0);
  q_.complete(r, sc::Success);
}

}  // namespace nvtcp::target

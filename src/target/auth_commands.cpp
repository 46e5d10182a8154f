// SPDX-License-Identifier: Apache-2.0
// Authentication Send and Receive (NVMe Base Specification 2.0, 5.3-5.4, 8.13): the queue's
// DH-HMAC-CHAP transaction (auth/dhchap_transaction.hpp) fed with what the host sends and
// asked for what it receives. A transaction that fails ends a queue that had to authenticate
// (and with an admin queue, its controller), after the answer that says why has gone out.
#include <algorithm>
#include <cstring>

#include "target/command_queue.hpp"
#include "target/fabrics_commands.hpp"
#include "target/queue_limits.hpp"
#include "util/log.hpp"
#include "wire/auth.hpp"
#include "wire/fabrics.hpp"

namespace nvtcp::target {

using namespace nvtcp::wire;

namespace {
// The largest message either side sends is under 1.2 KiB (a Reply with SHA-512 and ffdhe8192);
// the Linux host receives with AL = 4096.
constexpr uint32_t kMaxAuthTransfer = 8192;

// The host's secrets for each transaction, had as it starts: a key named in the keyring is read
// from its file then, as SPDK's file keyring reads it at each use, so that a rewritten file holds
// from the next authentication on (re-authentication included). The transaction starts in an
// Authentication Send's part on a worker thread (execute_auth), so the read (a key file of at
// most 4 KiB) never holds the reactor. A key that cannot be had fails the transaction as a
// wrong key would, and why (the key's name and file) is the failure's log line.
auth::DhchapSecretSource secrets_of(const HostKeys& host) {
  struct Held {
    HostKey<auth::DhchapSecret> dhchap, dhchap_ctrl;
    std::shared_ptr<const auth::DhchapSecret> secret, ctrl_secret;  // this transaction's
  };
  auto held = std::make_shared<Held>(Held{host.dhchap, host.dhchap_ctrl, nullptr, nullptr});
  return [held](auth::DhchapKeys& keys, std::string& why) {
    held->secret = held->dhchap ? held->dhchap.material(why) : nullptr;
    held->ctrl_secret = held->secret && held->dhchap_ctrl ? held->dhchap_ctrl.material(why) : nullptr;
    keys.host_secret = held->secret.get();
    keys.ctrl_secret = held->ctrl_secret.get();
    return (!held->dhchap || held->secret) && (!held->dhchap_ctrl || held->ctrl_secret);
  };
}
}  // namespace

void FabricsCommands::parse_auth(Command& r) {
  AuthTransferCmd cmd;
  std::memcpy(&cmd, &r.sqe, sizeof(cmd));
  const bool send = FabricsType(cmd.fctype) == FabricsType::AuthSend;
  if (cmd.secp != kAuthSecp || cmd.spsp0 != kAuthSpsp0 || cmd.spsp1 != kAuthSpsp1 || cmd.length == 0 ||
      cmd.length > kMaxAuthTransfer) {
    log::warn("{}: Authentication {} with SECP 0x{:02x} SPSP {}/{} and length {}: not DH-HMAC-CHAP",
              q_.link_.peer, send ? "Send" : "Receive", cmd.secp, cmd.spsp0, cmd.spsp1, cmd.length);
    r.status = sc::InvalidField;
    return;
  }
  if (q_.ctrl_->subsystem().is_discovery()) {
    r.status = sc::InvalidOpcode;  // discovery controllers here do not authenticate
    return;
  }
  if (send) {
    // Its data in the capsule, as hosts send it, or asked for with an R2T; exactly TL bytes.
    if (cmd.sgl.length != cmd.length || cmd.length > kAdminInCapsule) {
      r.status = sc::DataSglLengthInvalid;
      return;
    }
    if (r.capsule_len == 0 && cmd.sgl.type != kSglTransportDataBlock) {
      r.status = sc::SglDescriptorTypeInvalid;
      return;
    }
    if (r.capsule_len != 0 && r.capsule_len != cmd.length) {
      r.status = sc::DataSglLengthInvalid;
      return;
    }
    r.xfer = {Command::Direction::HostToController, cmd.length, cmd.length};
    return;
  }
  if (cmd.sgl.type != kSglTransportDataBlock || cmd.sgl.length < cmd.length) {
    r.status = cmd.sgl.type != kSglTransportDataBlock ? sc::SglDescriptorTypeInvalid : sc::DataSglLengthInvalid;
    return;
  }
  r.xfer = {Command::Direction::ControllerToHost, cmd.length, cmd.length};
}

void FabricsCommands::execute_auth(Command& r) {
  const bool send = FabricsType(r.sqe.fctype()) == FabricsType::AuthSend;
  const std::string& hostnqn = q_.ctrl_->hostnqn();
  if (auth_work_.request) {
    // The transaction belongs to the worker until the last message's computation is back; a
    // host that does not wait for an answer before the next message is out of sequence.
    log::warn("{}: host {}: Authentication {} on qid {} before the last one was answered", q_.link_.peer, hostnqn,
              send ? "Send" : "Receive", q_.qid_);
    q_.complete(r, sc::CommandSequenceError);
    return;
  }
  if (!auth_) {
    auth::DhchapKeys keys{nullptr, nullptr, hostnqn, q_.ctrl_->subsystem().nqn()};
    auth::DhchapPolicy policy = auth::DhchapPolicy::controller_default();
    if (!auth_keys_.dhchap_hashes.empty()) policy.hashes = auth_keys_.dhchap_hashes;
    if (!auth_keys_.dhchap_groups.empty()) policy.dh_groups = auth_keys_.dhchap_groups;
    auth_ = std::make_unique<auth::DhchapController>(std::move(keys), std::move(policy), secrets_of(auth_keys_));
  }
  auth_was_authenticated_ = auth_->authenticated();
  if (send) {
    // What the host sends may cost a modular exponentiation (a Negotiate: our DH key pair; a
    // Reply: the shared secret), up to 100 ms in ffdhe8192 before the host has proven anything,
    // and a Negotiate reads a keyring key's file (secrets_of): it runs on a worker, and the
    // reactor goes on with its other queues (auth_send_done).
    auth_work_ = {&r, auth_.get(), r.buf, r.xfer.len};
    q_.run_off_reactor(
        r,
        [](void* arg) {
          auto* w = static_cast<AuthWork*>(arg);
          w->transaction->on_send({w->msg, w->len});
        },
        &auth_work_);
    return;
  }
  // All AL bytes go back, zeros after the message (as the Linux target answers).
  auth_->on_receive({r.buf, r.xfer.len});
  r.tx_data = r.buf;
  r.tx_len = r.xfer.len;
  complete_auth(r);
}

void FabricsCommands::auth_send_done(Command& r) {
  auth_work_ = {};
  complete_auth(r);
}

void FabricsCommands::complete_auth(Command& r) {
  const std::string& hostnqn = q_.ctrl_->hostnqn();
  const bool was_authenticated = auth_was_authenticated_;
  if (auth_->failed()) {
    static log::Limiter failures(20);  // a stranger claiming a keyed host's NQN fails at will
    log::event_limited(failures, log::Level::Warn, "auth",
                       {{"host_nqn", hostnqn},
                        {"address", q_.link_.peer},
                        {"subsystem", q_.ctrl_->subsystem().nqn()},
                        {"qid", std::to_string(q_.qid_)},
                        {"result", "failure"},
                        {"reason", auth_failure_name(auth_->failure_reason())}},
                       "{}: host {} failed DH-HMAC-CHAP authentication on qid {}: {} ({}){}", q_.link_.peer,
                       hostnqn, q_.qid_, auth_->failure_detail(), auth_failure_name(auth_->failure_reason()),
                       auth_required_ ? "; the queue closes" : "");
    // A host that had to authenticate and did not goes; one that needed not keeps its queue.
    if (auth_required_) r.close_queue_after = true;
    auth_.reset();
    authenticated_ = false;
  } else if (auth_->authenticated() && !was_authenticated) {
    log::event(log::Level::Info, "auth",
               {{"host_nqn", hostnqn},
                {"address", q_.link_.peer},
                {"subsystem", q_.ctrl_->subsystem().nqn()},
                {"qid", std::to_string(q_.qid_)},
                {"result", "success"},
                {"hash", dhchap_hash_name(auth_->hash())},
                {"dhgroup", dh_group_name(auth_->dh_group())}},
               "{}: host {} {} on qid {} (DH-HMAC-CHAP, {}, DH group {}{})", q_.link_.peer, hostnqn,
               authenticated_ ? "re-authenticated" : "authenticated", q_.qid_, dhchap_hash_name(auth_->hash()),
               dh_group_name(auth_->dh_group()),
               auth_->bidirectional() ? ", controller authenticated to the host too" : "");
    bool keep = !budget_after_auth_ || move_to_host_budget();
    if (keep && qid_claim_after_auth_) {
      if (q_.ctrl_->io_queues.claim(q_.qid_)) {
        qid_claim_after_auth_ = false;
        q_.ctrl_->io_queues.add(q_.qid_, &q_.reactor(), &q_.io_);
      } else {
        log::warn("{}: host {} authenticated on qid {}, which another queue of its controller has: the queue closes",
                  q_.link_.peer, q_.ctrl_->hostnqn(), q_.qid_);
        keep = false;
      }
    }
    if (!keep) r.close_queue_after = true;
    // A queue stays authenticated while its host re-authenticates, as nvmet's does: its commands
    // go on, and only a failed transaction ends it. One that closes runs nothing more.
    authenticated_ = keep;
  }
  q_.complete(r, sc::Success);
}

bool FabricsCommands::move_to_host_budget() {
  budget_after_auth_ = false;
  const auto& cfg = q_.target_.config;
  const std::string& hostnqn = q_.ctrl_->hostnqn();
  std::shared_ptr<HostBudget> to = q_.target_.host_budget(hostnqn);
  if (to == host_) return true;
  if (to->connections.fetch_add(1, std::memory_order_relaxed) >= cfg.max_connections_per_host &&
      cfg.max_connections_per_host) {
    to->connections.fetch_sub(1, std::memory_order_relaxed);
    log::warn("{}: host {} authenticated on qid {}, but it already has {} queues (max_connections_per_host): the "
              "queue closes",
              q_.link_.peer, hostnqn, q_.qid_, cfg.max_connections_per_host);
    return false;
  }
  // What the queue holds (its request pool and buffers) moves from the address's budget to the
  // host's, within the host's cap.
  const uint64_t held = q_.memory_.pool_bytes() + q_.memory_.buffer_bytes();
  if (!to->reserve(held, cfg.max_host_buffer_memory)) {
    to->connections.fetch_sub(1, std::memory_order_relaxed);
    log::warn("{}: host {} authenticated on qid {}, but its buffer budget has no room for the queue's {} bytes "
              "(max_host_buffer_memory {}): the queue closes",
              q_.link_.peer, hostnqn, q_.qid_, held, cfg.max_host_buffer_memory);
    return false;
  }
  host_->release(held);
  host_->connections.fetch_sub(1, std::memory_order_relaxed);
  host_ = std::move(to);
  q_.memory_.rebind_host(host_.get());
  return true;
}

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
#include "host/queue_authentication.hpp"

#include <fmt/format.h>

#include <cerrno>

#include "host/queue_pair_impl.hpp"
#include "host/reauthenticate.hpp"
#include "util/log.hpp"
#include "wire/auth.hpp"

namespace nvtcp::host::detail {

using namespace nvtcp::wire;

void QueueAuthentication::start(uint32_t connect_dw0) {
  const QueueParams& p = qp_.p_;
  const std::string where = fmt::format("{}:{} qid {}", p.trid.traddr, p.trid.trsvcid, p.qid);
  if (connect_dw0 & kConnectResultAscr) {
    qp_.fail_for_good(HostError::make(
        HostError::Kind::Controller,
        "the controller asks for a secure channel concatenation, which this host does not do"));
    return;
  }
  if (!p.dhchap_secret) {
    qp_.fail_for_good(HostError::from_status(
        sc::AuthenticationRequired, fmt::format("controller {} requires DH-HMAC-CHAP authentication, and no host "
                                                "secret was given (--dhchap-secret)",
                                                qp_.cntlid_)));
    return;
  }
  auth::DhchapKeys keys{p.dhchap_secret.get(), p.dhchap_ctrl_secret.get(), p.hostnqn, p.trid.subnqn};
  host_ = std::make_unique<auth::DhchapHost>(std::move(keys), auth::DhchapPolicy{}, ++transactions_);
  log::debug("{}: authenticating to controller {}", where, qp_.cntlid_);
  step();
}

void QueueAuthentication::on_step_done(void* ctx, const Completion& c) {
  auto* self = static_cast<QueueAuthentication*>(ctx);
  if (self->qp_.state_ != QueueState::AwaitConnect || !self->host_) return;
  const bool receive = self->receiving_;
  if (!c.status.ok()) {
    self->qp_.fail_for_good(HostError::from_status(
        c.status, fmt::format("Authentication {}: {}", receive ? "Receive" : "Send", status_name(c.status))));
    return;
  }
  if (receive) self->host_->on_receive(self->in_);
  self->step();
}

void QueueAuthentication::step() {
  if (qp_.state_ != QueueState::AwaitConnect || !host_) return;  // the connection went away meanwhile
  HostRequest* r = &qp_.pool_[qp_.p_.depth];                     // the Connect slot, free again
  std::vector<uint8_t> m = host_->next_message();
  if (!m.empty()) {
    out_ = std::move(m);
    receiving_ = false;
    const auto len = uint32_t(out_.size());
    qp_.start_request(r, auth_transfer_sqe(true, len), out_.data(), len, true, on_step_done, this);
    qp_.send_command(r);
    return;
  }
  if (host_->expects_receive()) {
    in_.assign(kAuthHostReceiveLength, 0);
    receiving_ = true;
    qp_.start_request(r, auth_transfer_sqe(false, kAuthHostReceiveLength), in_.data(), kAuthHostReceiveLength,
                      false, on_step_done, this);
    qp_.send_command(r);
    return;
  }
  end_transaction();
}

void QueueAuthentication::end_transaction() {
  const QueueParams& p = qp_.p_;
  const uint8_t hash = host_->hash(), group = host_->dh_group();
  const bool ok = host_->authenticated();
  const std::string detail = host_->failure_detail();
  const uint8_t reason = host_->failure_reason();
  host_.reset();
  if (!ok) {
    qp_.fail_for_good(HostError::from_status(
        sc::AuthenticationRequired, fmt::format("DH-HMAC-CHAP authentication with controller {} failed: {} ({})",
                                                qp_.cntlid_, detail, auth_failure_name(reason))));
    return;
  }
  log::debug("{}:{} qid {}: authenticated (DH-HMAC-CHAP, {}, DH group {}{})", p.trid.traddr, p.trid.trsvcid, p.qid,
             dhchap_hash_name(hash), dh_group_name(group), p.dhchap_ctrl_secret ? ", controller verified" : "");
  qp_.conn_.associated();
}

bool QueueAuthentication::fail_on_close(const std::string& why) {
  if (!host_) return false;
  // The Linux target ends the controller as soon as it has sent AUTH_Failure1 or taken our
  // AUTH_Failure2, and the last answer can be lost with the connection: a close in the middle
  // of the transaction is a refusal, ours (said already) or the target's.
  const std::string what =
      host_->failed() ? fmt::format("{} ({})", host_->failure_detail(), auth_failure_name(host_->failure_reason()))
                      : fmt::format("{} during the transaction (the target refused this host's response, or its "
                                    "secret)",
                                    why);
  host_.reset();
  qp_.fail_for_good(HostError::from_status(
      sc::AuthenticationRequired,
      fmt::format("DH-HMAC-CHAP authentication with controller {} failed: {}", qp_.cntlid_, what)));
  return true;
}

int QueueAuthentication::reauthenticate(std::string& err) {
  const QueueParams& p = qp_.p_;
  if (!p.dhchap_secret) {
    err = "no DH-HMAC-CHAP secret was given for this controller";
    return -EINVAL;
  }
  if (qp_.state_ != QueueState::Ready) {
    err = "the queue is not connected";
    return -ENOTCONN;
  }
  // The Connect slot carries the transaction's commands, one at a time, beside the queue's I/O.
  HostRequest* slot = &qp_.pool_[p.depth];
  struct Wait {
    bool done = false;
    Completion cpl;
  };
  // A controller that stops answering must not hold the caller for ever: past this, the
  // connection is given up (and reconnects, if it may) and the call says so.
  const uint64_t limit_ms = p.io_timeout_ms ? p.io_timeout_ms : 30000;
  auto exchange = [this, &p, slot, limit_ms](bool send, std::vector<uint8_t>& buf) {
    Wait w;
    qp_.start_request(slot, auth_transfer_sqe(send, uint32_t(buf.size())), buf.data(), uint32_t(buf.size()), send,
                      [](void* ctx, const Completion& c) {
                        auto* wait = static_cast<Wait*>(ctx);
                        wait->cpl = c;
                        wait->done = true;
                      },
                      &w);
    qp_.send_command(slot);
    const uint64_t deadline = p.clock->now_ns() + limit_ms * kNsPerMs;
    while (!w.done && qp_.state_ == QueueState::Ready) {
      if (p.clock->now_ns() >= deadline) {
        slot->cb = nullptr;  // before the connection goes: its end completes the slot
        slot->ctx = nullptr;
        qp_.fail(HostError::make(HostError::Kind::Transport,
                                 fmt::format("no answer to Authentication {} within {} ms", send ? "Send" : "Receive",
                                             limit_ms)));
        break;
      }
      qp_.poll(1000);
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
  auth::DhchapKeys keys{p.dhchap_secret.get(), p.dhchap_ctrl_secret.get(), p.hostnqn, p.trid.subnqn};
  const int rc = run_dhchap(keys, ++transactions_, exchange, err);
  if (rc == 0)
    log::debug("{}:{} qid {}: re-authenticated (DH-HMAC-CHAP)", p.trid.traddr, p.trid.trsvcid, p.qid);
  else
    log::warn("{}:{} qid {}: re-authentication failed: {}", p.trid.traddr, p.trid.trsvcid, p.qid, err);
  return rc;
}

}  // namespace nvtcp::host::detail

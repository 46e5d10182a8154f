// SPDX-License-Identifier: Apache-2.0
#include "auth/dhchap_transaction.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "auth/dhchap.hpp"
#include "util/state_machine.hpp"

namespace nvtcp::auth {

namespace {

using wire::AuthFailureReason;

template <class T>
T load(std::span<const uint8_t> msg) {
  T v{};
  std::memcpy(&v, msg.data(), sizeof(T));
  return v;
}

bool contains(const std::vector<uint8_t>& v, uint8_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::vector<uint8_t> random_vector(size_t n) {
  std::vector<uint8_t> v(n);
  if (!random_bytes(v.data(), n)) v.clear();
  return v;
}

std::vector<uint8_t> failure_message(wire::AuthId id, uint16_t tid, uint8_t reason) {
  wire::AuthFailure f{};
  f.h.auth_type = uint8_t(wire::AuthType::Common);
  f.h.auth_id = uint8_t(id);
  f.h.t_id = tid;
  f.rescode = wire::kAuthRescodeFailure;
  f.rescode_exp = reason;
  std::vector<uint8_t> m(sizeof(f));
  std::memcpy(m.data(), &f, sizeof(f));
  return m;
}

using CS = DhchapController::State;
constexpr TransitionTable<CS, size_t(CS::kCount)> kControllerMoves{
    {CS::Idle, CS::ChallengeReady},          {CS::Idle, CS::FailureReady},
    {CS::Authenticated, CS::ChallengeReady},  // re-authentication
    {CS::Authenticated, CS::FailureReady},   {CS::ChallengeReady, CS::AwaitReply},
    {CS::ChallengeReady, CS::FailureReady},  {CS::ChallengeReady, CS::Failed},
    {CS::AwaitReply, CS::Success1Ready},     {CS::AwaitReply, CS::FailureReady},
    {CS::AwaitReply, CS::Failed},            {CS::Success1Ready, CS::AwaitSuccess2},
    {CS::Success1Ready, CS::Authenticated},  {CS::Success1Ready, CS::FailureReady},
    {CS::Success1Ready, CS::Failed},         {CS::AwaitSuccess2, CS::Authenticated},
    {CS::AwaitSuccess2, CS::FailureReady},   {CS::AwaitSuccess2, CS::Failed},
    {CS::FailureReady, CS::Failed},          {CS::FailureReady, CS::FailureReady},
    {CS::Failed, CS::FailureReady},
};

using HS = DhchapHost::State;
constexpr TransitionTable<HS, size_t(HS::kCount)> kHostMoves{
    {HS::Start, HS::AwaitChallenge},       {HS::AwaitChallenge, HS::ReplyReady},
    {HS::AwaitChallenge, HS::Failure2Ready}, {HS::AwaitChallenge, HS::Failed},
    {HS::ReplyReady, HS::AwaitSuccess1},   {HS::AwaitSuccess1, HS::Success2Ready},
    {HS::AwaitSuccess1, HS::Authenticated}, {HS::AwaitSuccess1, HS::Failure2Ready},
    {HS::AwaitSuccess1, HS::Failed},       {HS::Success2Ready, HS::Authenticated},
    {HS::Failure2Ready, HS::Failed},
};

}  // namespace

uint32_t next_sequence_number() {
  static std::atomic<uint32_t> counter = [] {
    uint32_t seed = 0;
    random_bytes(reinterpret_cast<uint8_t*>(&seed), sizeof(seed));
    return seed;
  }();
  for (;;) {
    uint32_t s = counter.fetch_add(1, std::memory_order_relaxed) + 1;
    if (s != 0) return s;  // 0 means "no controller authentication"
  }
}

const char* to_string(DhchapController::State s) {
  switch (s) {
    case CS::Idle: return "Idle";
    case CS::ChallengeReady: return "ChallengeReady";
    case CS::AwaitReply: return "AwaitReply";
    case CS::Success1Ready: return "Success1Ready";
    case CS::AwaitSuccess2: return "AwaitSuccess2";
    case CS::FailureReady: return "FailureReady";
    case CS::Authenticated: return "Authenticated";
    case CS::Failed: return "Failed";
    case CS::kCount: break;
  }
  return "?";
}

const char* to_string(DhchapHost::State s) {
  switch (s) {
    case HS::Start: return "Start";
    case HS::AwaitChallenge: return "AwaitChallenge";
    case HS::ReplyReady: return "ReplyReady";
    case HS::AwaitSuccess1: return "AwaitSuccess1";
    case HS::Success2Ready: return "Success2Ready";
    case HS::Failure2Ready: return "Failure2Ready";
    case HS::Authenticated: return "Authenticated";
    case HS::Failed: return "Failed";
    case HS::kCount: break;
  }
  return "?";
}

// ---- controller ---------------------------------------------------------------------------------

DhchapController::DhchapController(DhchapKeys keys, DhchapPolicy policy, DhchapSecretSource source)
    : keys_(std::move(keys)), policy_(std::move(policy)), source_(std::move(source)) {}

void DhchapController::set_state(State s) {
  if (kCheckTransitions && !kControllerMoves.allows(state_, s))
    illegal_transition("DH-HMAC-CHAP controller", to_string(state_), to_string(s), __func__);
  state_ = s;
}

void DhchapController::fail(AuthFailureReason r, std::string detail) {
  reason_ = uint8_t(r);
  detail_ = std::move(detail);
  c1_.clear();
  r2_.clear();
  set_state(State::FailureReady);
}

void DhchapController::on_send(std::span<const uint8_t> msg) {
  if (msg.size() < sizeof(wire::AuthHeader) + 2) {
    fail(AuthFailureReason::IncorrectMessage, "a message of " + std::to_string(msg.size()) + " bytes");
    return;
  }
  const auto type = wire::AuthType(msg[0]);
  const auto id = wire::AuthId(msg[1]);
  const uint16_t tid = load<wire::AuthHeader>(msg).t_id;
  if (type == wire::AuthType::Common && id == wire::AuthId::Failure2) {
    if (!in_progress()) {
      fail(AuthFailureReason::IncorrectMessage, "AUTH_Failure2 with no transaction underway");
      return;
    }
    reason_ = msg[7];
    detail_ = std::string("the host ended the transaction: ") + wire::auth_failure_name(msg[7]);
    if (state_ != State::FailureReady) set_state(State::FailureReady);
    set_state(State::Failed);
    return;
  }
  if (type == wire::AuthType::Common && id == wire::AuthId::Negotiate) {
    if (state_ != State::Idle && state_ != State::Authenticated) {
      fail(AuthFailureReason::IncorrectMessage, std::string("AUTH_Negotiate in state ") + to_string(state_));
      return;
    }
    on_negotiate(msg);
    return;
  }
  if (type == wire::AuthType::Dhchap && id == wire::AuthId::Reply && state_ == State::AwaitReply) {
    on_reply(msg);
    return;
  }
  if (type == wire::AuthType::Dhchap && id == wire::AuthId::Success2 && state_ == State::AwaitSuccess2) {
    if (tid != tid_) {
      fail(AuthFailureReason::IncorrectMessage, "DH-HMAC-CHAP_Success2 of another transaction");
      return;
    }
    set_state(State::Authenticated);
    return;
  }
  fail(AuthFailureReason::IncorrectMessage, "message type " + std::to_string(msg[0]) + " id " +
                                                std::to_string(msg[1]) + " in state " + to_string(state_));
}

void DhchapController::on_negotiate(std::span<const uint8_t> msg) {
  const auto n = load<wire::AuthNegotiate>(msg);
  if (n.napd == 0 || msg.size() < sizeof(n) + size_t(n.napd) * sizeof(wire::AuthProtocolDescriptor)) {
    fail(AuthFailureReason::IncorrectPayload, "AUTH_Negotiate of " + std::to_string(msg.size()) + " bytes with " +
                                                  std::to_string(n.napd) + " protocol descriptors");
    return;
  }
  if (n.sc_c != wire::kAuthScNone) {
    fail(AuthFailureReason::ConcatMismatch, "secure channel concatenation asked for (SC_C " +
                                                std::to_string(n.sc_c) + "); not supported");
    return;
  }
  const wire::AuthProtocolDescriptor* dhchap = nullptr;
  for (uint8_t i = 0; i < n.napd && !dhchap; ++i) {
    auto d = reinterpret_cast<const wire::AuthProtocolDescriptor*>(msg.data() + sizeof(n) + i * sizeof(*dhchap));
    if (d->authid == wire::kAuthIdDhchap) dhchap = d;
  }
  if (!dhchap) {
    fail(AuthFailureReason::NotUsable, "the host offers no DH-HMAC-CHAP protocol descriptor");
    return;
  }
  wire::AuthProtocolDescriptor d;
  std::memcpy(&d, dhchap, sizeof(d));
  if (d.halen > wire::kAuthIdListMax || d.dhlen > wire::kAuthIdListMax) {
    fail(AuthFailureReason::IncorrectPayload, "hash or DH group list longer than 30");
    return;
  }
  const std::vector<uint8_t> offered_hashes(d.idlist, d.idlist + d.halen);
  const std::vector<uint8_t> offered_groups(d.idlist + wire::kAuthDhGroupListOffset,
                                            d.idlist + wire::kAuthDhGroupListOffset + d.dhlen);
  uint8_t hash = 0, group = 0xFF;
  for (uint8_t h : policy_.hashes)
    if (contains(offered_hashes, h)) {
      hash = h;
      break;
    }
  if (!hash) {
    fail(AuthFailureReason::HashUnusable, "no hash function in common with the host");
    return;
  }
  for (uint8_t g : policy_.dh_groups)
    if (contains(offered_groups, g)) {
      group = g;
      break;
    }
  if (group == 0xFF) {
    fail(AuthFailureReason::DhGroupUnusable, "no DH group in common with the host");
    return;
  }
  // The secrets this transaction binds, read now if they live in a file: a host whose key cannot
  // be had is refused as one with a wrong key would be (AUTH_Failure1, "failed").
  std::string why;
  if (source_ && !source_(keys_, why)) {
    fail(AuthFailureReason::Failed, why);
    return;
  }
  if (!keys_.host_secret) {
    fail(AuthFailureReason::NotUsable, "no DH-HMAC-CHAP secret configured for this host");
    return;
  }
  tid_ = n.h.t_id;
  hash_ = hash;
  group_ = group;
  c1_ = random_vector(hash_length(hash));
  s1_ = next_sequence_number();
  bidirectional_ = false;
  r2_.clear();
  std::string err;
  if (c1_.empty() || (group && !dh_.generate(wire::DhGroup(group), err))) {
    fail(AuthFailureReason::Failed, "challenge set-up failed: " + err);
    return;
  }
  set_state(State::ChallengeReady);
}

void DhchapController::on_reply(std::span<const uint8_t> msg) {
  if (msg.size() < sizeof(wire::DhchapReply)) {
    fail(AuthFailureReason::IncorrectPayload, "DH-HMAC-CHAP_Reply of " + std::to_string(msg.size()) + " bytes");
    return;
  }
  const auto r = load<wire::DhchapReply>(msg);
  const uint32_t hl = hash_length(hash_);
  if (r.h.t_id != tid_) {
    fail(AuthFailureReason::IncorrectMessage, "DH-HMAC-CHAP_Reply of another transaction");
    return;
  }
  if (r.hl != hl || r.cvalid > 1) {
    fail(AuthFailureReason::IncorrectPayload, "DH-HMAC-CHAP_Reply with HL " + std::to_string(r.hl) + " (expected " +
                                                  std::to_string(hl) + ") or CVALID " + std::to_string(r.cvalid));
    return;
  }
  const uint32_t plen = wire::dh_group_bytes(wire::DhGroup(group_));
  if ((group_ == 0 && r.dhvlen != 0) || (group_ != 0 && (r.dhvlen == 0 || r.dhvlen > plen))) {
    fail(group_ ? AuthFailureReason::DhGroupUnusable : AuthFailureReason::IncorrectPayload,
         "DH value of " + std::to_string(r.dhvlen) + " bytes in group " + wire::dh_group_name(group_));
    return;
  }
  if (msg.size() < sizeof(r) + 2 * size_t(hl) + r.dhvlen) {
    fail(AuthFailureReason::IncorrectPayload, "DH-HMAC-CHAP_Reply shorter than its fields");
    return;
  }
  const uint8_t* r1 = msg.data() + sizeof(r);
  const Bytes c2(r1 + hl, hl);
  const Bytes host_value(r1 + 2 * hl, r.dhvlen);
  SecretBytes ks;
  std::string err;
  if (group_ && !dh_.shared_secret(host_value, ks, err)) {
    fail(AuthFailureReason::DhGroupUnusable, "the host's DH value: " + err);
    return;
  }
  SecretBytes ca1, kt;
  uint8_t expected[64];
  ResponseInput in{{}, s1_, tid_, wire::kAuthScNone, keys_.hostnqn, keys_.subnqn};
  if (!augmented_challenge(hash_, c1_, ks.span(), ca1) ||
      !transform_dhchap_secret(*keys_.host_secret, keys_.hostnqn, kt, err)) {
    fail(AuthFailureReason::Failed, "response computation failed " + err);
    return;
  }
  in.challenge = ca1.span();
  if (!host_response(hash_, kt.span(), in, expected) || !responses_equal(expected, r1, hl)) {
    fail(AuthFailureReason::Failed, "the host's response does not match its DH-HMAC-CHAP secret");
    return;
  }
  r2_.clear();
  if (r.cvalid) {
    if (!keys_.ctrl_secret) {
      fail(AuthFailureReason::Failed, "the host asks the controller to authenticate, and no controller secret is set");
      return;
    }
    SecretBytes ca2, kc;
    r2_.resize(hl);
    in.challenge = {};
    in.seqnum = r.seqnum;
    if (!augmented_challenge(hash_, c2, ks.span(), ca2) ||
        !transform_dhchap_secret(*keys_.ctrl_secret, keys_.subnqn, kc, err)) {
      fail(AuthFailureReason::Failed, "controller response computation failed " + err);
      return;
    }
    in.challenge = ca2.span();
    if (!controller_response(hash_, kc.span(), in, r2_.data())) {
      fail(AuthFailureReason::Failed, "controller response computation failed");
      return;
    }
  }
  bidirectional_ = r.cvalid && r.seqnum != 0;
  c1_.clear();
  set_state(State::Success1Ready);
}

size_t DhchapController::on_receive(std::span<uint8_t> out) {
  std::fill(out.begin(), out.end(), 0);
  std::vector<uint8_t> m;
  switch (state_) {
    case State::ChallengeReady: {
      const uint32_t hl = hash_length(hash_);
      const auto& dhv = group_ ? dh_.public_value() : std::vector<uint8_t>{};
      wire::DhchapChallenge c{};
      c.h = {uint8_t(wire::AuthType::Dhchap), uint8_t(wire::AuthId::Challenge), {}, tid_};
      c.hl = uint8_t(hl);
      c.hashid = hash_;
      c.dhgid = group_;
      c.dhvlen = uint16_t(dhv.size());
      c.seqnum = s1_;
      m.resize(sizeof(c) + hl + dhv.size());
      std::memcpy(m.data(), &c, sizeof(c));
      std::memcpy(m.data() + sizeof(c), c1_.data(), hl);
      if (!dhv.empty()) std::memcpy(m.data() + sizeof(c) + hl, dhv.data(), dhv.size());
      set_state(State::AwaitReply);
      break;
    }
    case State::Success1Ready: {
      wire::DhchapSuccess1 s{};
      s.h = {uint8_t(wire::AuthType::Dhchap), uint8_t(wire::AuthId::Success1), {}, tid_};
      s.hl = uint8_t(hash_length(hash_));
      s.rvalid = r2_.empty() ? 0 : 1;
      m.resize(sizeof(s) + r2_.size());
      std::memcpy(m.data(), &s, sizeof(s));
      if (!r2_.empty()) std::memcpy(m.data() + sizeof(s), r2_.data(), r2_.size());
      r2_.clear();
      set_state(bidirectional_ ? State::AwaitSuccess2 : State::Authenticated);
      break;
    }
    case State::FailureReady:
      m = failure_message(wire::AuthId::Failure1, tid_, reason_);
      set_state(State::Failed);
      break;
    default:
      fail(AuthFailureReason::IncorrectMessage, std::string("Authentication Receive in state ") + to_string(state_));
      m = failure_message(wire::AuthId::Failure1, tid_, reason_);
      set_state(State::Failed);
      break;
  }
  if (!out.empty()) std::memcpy(out.data(), m.data(), std::min(out.size(), m.size()));
  return m.size();
}

// ---- host ---------------------------------------------------------------------------------------

DhchapHost::DhchapHost(DhchapKeys keys, DhchapPolicy policy, uint16_t transaction)
    : keys_(std::move(keys)), policy_(std::move(policy)), tid_(transaction) {}

void DhchapHost::set_state(State s) {
  if (kCheckTransitions && !kHostMoves.allows(state_, s))
    illegal_transition("DH-HMAC-CHAP host", to_string(state_), to_string(s), __func__);
  state_ = s;
}

void DhchapHost::fail(AuthFailureReason r, std::string detail, bool tell_controller) {
  reason_ = uint8_t(r);
  detail_ = std::move(detail);
  reply_.clear();
  expected_r2_.clear();
  set_state(tell_controller ? State::Failure2Ready : State::Failed);
}

std::vector<uint8_t> DhchapHost::next_message() {
  switch (state_) {
    case State::Start: {
      std::vector<uint8_t> m(sizeof(wire::AuthNegotiate) + sizeof(wire::AuthProtocolDescriptor));
      wire::AuthNegotiate n{};
      n.h = {uint8_t(wire::AuthType::Common), uint8_t(wire::AuthId::Negotiate), {}, tid_};
      n.sc_c = wire::kAuthScNone;
      n.napd = 1;
      wire::AuthProtocolDescriptor d{};
      d.authid = wire::kAuthIdDhchap;
      d.halen = uint8_t(std::min<size_t>(policy_.hashes.size(), wire::kAuthIdListMax));
      d.dhlen = uint8_t(std::min<size_t>(policy_.dh_groups.size(), wire::kAuthIdListMax));
      std::copy_n(policy_.hashes.begin(), d.halen, d.idlist);
      std::copy_n(policy_.dh_groups.begin(), d.dhlen, d.idlist + wire::kAuthDhGroupListOffset);
      std::memcpy(m.data(), &n, sizeof(n));
      std::memcpy(m.data() + sizeof(n), &d, sizeof(d));
      set_state(State::AwaitChallenge);
      return m;
    }
    case State::ReplyReady: {
      std::vector<uint8_t> m = std::move(reply_);
      reply_.clear();
      set_state(State::AwaitSuccess1);
      return m;
    }
    case State::Success2Ready: {
      wire::DhchapSuccess2 s{};
      s.h = {uint8_t(wire::AuthType::Dhchap), uint8_t(wire::AuthId::Success2), {}, tid_};
      std::vector<uint8_t> m(sizeof(s));
      std::memcpy(m.data(), &s, sizeof(s));
      set_state(State::Authenticated);
      return m;
    }
    case State::Failure2Ready: {
      set_state(State::Failed);
      return failure_message(wire::AuthId::Failure2, tid_, reason_);
    }
    default:
      return {};
  }
}

void DhchapHost::on_receive(std::span<const uint8_t> msg) {
  if (!expects_receive()) {
    // A receive the host did not ask for: nothing to do with it.
    return;
  }
  if (msg.size() < sizeof(wire::AuthFailure)) {
    fail(AuthFailureReason::IncorrectMessage, "a message of " + std::to_string(msg.size()) + " bytes", true);
    return;
  }
  const auto type = wire::AuthType(msg[0]);
  const auto id = wire::AuthId(msg[1]);
  if (type == wire::AuthType::Common && id == wire::AuthId::Failure1) {
    fail(AuthFailureReason(msg[7]), "the controller refused it (AUTH_Failure1)", false);
    return;
  }
  if (load<wire::AuthHeader>(msg).t_id != tid_) {
    fail(AuthFailureReason::IncorrectMessage, "a message of another transaction", true);
    return;
  }
  if (state_ == State::AwaitChallenge && type == wire::AuthType::Dhchap && id == wire::AuthId::Challenge) {
    on_challenge(msg);
    return;
  }
  if (state_ == State::AwaitSuccess1 && type == wire::AuthType::Dhchap && id == wire::AuthId::Success1) {
    on_success1(msg);
    return;
  }
  fail(AuthFailureReason::IncorrectMessage,
       "message type " + std::to_string(msg[0]) + " id " + std::to_string(msg[1]) + " in state " + to_string(state_),
       true);
}

void DhchapHost::on_challenge(std::span<const uint8_t> msg) {
  if (msg.size() < sizeof(wire::DhchapChallenge)) {
    fail(AuthFailureReason::IncorrectPayload, "DH-HMAC-CHAP_Challenge of " + std::to_string(msg.size()) + " bytes",
         true);
    return;
  }
  const auto c = load<wire::DhchapChallenge>(msg);
  const uint32_t hl = hash_length(c.hashid);
  if (!hl || !contains(policy_.hashes, c.hashid) || c.hl != hl) {
    fail(AuthFailureReason::HashUnusable,
         "challenge with hash " + std::to_string(c.hashid) + " and HL " + std::to_string(c.hl), true);
    return;
  }
  if (!wire::dh_group_known(c.dhgid) || !contains(policy_.dh_groups, c.dhgid) || (c.dhgid != 0 && c.dhvlen == 0)) {
    fail(AuthFailureReason::DhGroupUnusable, std::string("challenge with DH group ") + wire::dh_group_name(c.dhgid),
         true);
    return;
  }
  const uint32_t plen = wire::dh_group_bytes(wire::DhGroup(c.dhgid));
  if ((c.dhgid == 0 && c.dhvlen != 0) || c.dhvlen > plen || msg.size() < sizeof(c) + hl + c.dhvlen) {
    fail(AuthFailureReason::IncorrectPayload, "challenge fields do not fit its length", true);
    return;
  }
  if (!keys_.host_secret) {
    fail(AuthFailureReason::NotUsable, "no DH-HMAC-CHAP secret configured", true);
    return;
  }
  hash_ = c.hashid;
  group_ = c.dhgid;
  const Bytes c1(msg.data() + sizeof(c), hl);
  const Bytes ctrl_value(msg.data() + sizeof(c) + hl, c.dhvlen);
  DhKeyPair dh;
  SecretBytes ks;
  std::string err;
  if (group_ && (!dh.generate(wire::DhGroup(group_), err) || !dh.shared_secret(ctrl_value, ks, err))) {
    fail(AuthFailureReason::DhGroupUnusable, "the controller's DH value: " + err, true);
    return;
  }
  SecretBytes ca1, kt;
  ResponseInput in{{}, c.seqnum, tid_, wire::kAuthScNone, keys_.hostnqn, keys_.subnqn};
  const auto& own_value = group_ ? dh.public_value() : std::vector<uint8_t>{};
  std::vector<uint8_t> m(sizeof(wire::DhchapReply) + 2 * size_t(hl) + own_value.size());
  if (!augmented_challenge(hash_, c1, ks.span(), ca1) ||
      !transform_dhchap_secret(*keys_.host_secret, keys_.hostnqn, kt, err)) {
    fail(AuthFailureReason::Failed, "response computation failed " + err, true);
    return;
  }
  in.challenge = ca1.span();
  if (!host_response(hash_, kt.span(), in, m.data() + sizeof(wire::DhchapReply))) {
    fail(AuthFailureReason::Failed, "response computation failed", true);
    return;
  }
  wire::DhchapReply r{};
  r.h = {uint8_t(wire::AuthType::Dhchap), uint8_t(wire::AuthId::Reply), {}, tid_};
  r.hl = uint8_t(hl);
  r.dhvlen = uint16_t(own_value.size());
  expected_r2_.clear();
  if (keys_.ctrl_secret) {
    // Ask the controller to prove it holds the controller secret too.
    std::vector<uint8_t> c2 = random_vector(hl);
    s2_ = next_sequence_number();
    SecretBytes ca2, kc;
    expected_r2_.resize(hl);
    in.seqnum = s2_;
    if (c2.empty() || !augmented_challenge(hash_, c2, ks.span(), ca2) ||
        !transform_dhchap_secret(*keys_.ctrl_secret, keys_.subnqn, kc, err)) {
      fail(AuthFailureReason::Failed, "controller challenge set-up failed " + err, true);
      return;
    }
    in.challenge = ca2.span();
    if (!controller_response(hash_, kc.span(), in, expected_r2_.data())) {
      fail(AuthFailureReason::Failed, "controller challenge set-up failed", true);
      return;
    }
    r.cvalid = 1;
    r.seqnum = s2_;
    std::memcpy(m.data() + sizeof(r) + hl, c2.data(), hl);
  }
  std::memcpy(m.data(), &r, sizeof(r));
  if (!own_value.empty()) std::memcpy(m.data() + sizeof(r) + 2 * hl, own_value.data(), own_value.size());
  reply_ = std::move(m);
  set_state(State::ReplyReady);
}

void DhchapHost::on_success1(std::span<const uint8_t> msg) {
  if (msg.size() < sizeof(wire::DhchapSuccess1)) {
    fail(AuthFailureReason::IncorrectPayload, "DH-HMAC-CHAP_Success1 of " + std::to_string(msg.size()) + " bytes",
         true);
    return;
  }
  const auto s = load<wire::DhchapSuccess1>(msg);
  const uint32_t hl = hash_length(hash_);
  if (s.hl != hl) {
    fail(AuthFailureReason::IncorrectPayload, "DH-HMAC-CHAP_Success1 with HL " + std::to_string(s.hl), true);
    return;
  }
  if (expected_r2_.empty()) {
    set_state(State::Authenticated);
    return;
  }
  if (s.rvalid != 1 || msg.size() < sizeof(s) + hl) {
    fail(AuthFailureReason::Failed, "the controller did not answer the host's challenge", true);
    return;
  }
  if (!responses_equal(expected_r2_.data(), msg.data() + sizeof(s), hl)) {
    fail(AuthFailureReason::Failed, "the controller's response does not match the controller secret", true);
    return;
  }
  expected_r2_.clear();
  set_state(State::Success2Ready);
}

}  // namespace nvtcp::auth

// SPDX-License-Identifier: Apache-2.0
// One queue's DH-HMAC-CHAP transaction (NVMe Base Specification 2.0, 8.13.5), as two explicit
// state machines that know nothing of commands or sockets: the controller's consumes what the
// host sends with Authentication Send and produces what Authentication Receive returns; the
// host's produces the messages it sends and consumes the controller's. A protocol failure is a
// state too (the AUTH_Failure message to return or send, and its reason), never an exception.
// Each machine changes state in one setter that checks the move (util/state_machine.hpp).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "auth/crypto.hpp"
#include "auth/keys.hpp"
#include "wire/auth.hpp"

namespace nvtcp::auth {

// What a side accepts, in the order it prefers (the controller picks the first the host offers).
struct DhchapPolicy {
  std::vector<uint8_t> hashes = {uint8_t(wire::DhchapHash::Sha256), uint8_t(wire::DhchapHash::Sha384),
                                 uint8_t(wire::DhchapHash::Sha512)};
  std::vector<uint8_t> dh_groups = {uint8_t(wire::DhGroup::Ffdhe2048), uint8_t(wire::DhGroup::Ffdhe3072),
                                    uint8_t(wire::DhGroup::Ffdhe4096), uint8_t(wire::DhGroup::Ffdhe6144),
                                    uint8_t(wire::DhGroup::Ffdhe8192), uint8_t(wire::DhGroup::Null)};
  // A controller's default: every hash, and the groups up to ffdhe4096. The controller computes
  // its DH values before the host has proven anything, and an ffdhe8192 exchange costs each side
  // about 100 ms of CPU (bench/RESULTS.md, auth-connect): a host that offered only the largest
  // groups could make a target spend that per connection. Larger groups are there for a host
  // configured with them.
  static DhchapPolicy controller_default() {
    DhchapPolicy p;
    p.dh_groups = {uint8_t(wire::DhGroup::Ffdhe2048), uint8_t(wire::DhGroup::Ffdhe3072),
                   uint8_t(wire::DhGroup::Ffdhe4096), uint8_t(wire::DhGroup::Null)};
    return p;
  }
};

// The keys and names one transaction binds.
struct DhchapKeys {
  const DhchapSecret* host_secret = nullptr;  // required on both sides
  const DhchapSecret* ctrl_secret = nullptr;  // bidirectional when set (host: asks for it)
  std::string hostnqn;
  std::string subnqn;
};

// A fresh non-zero sequence number, from one process-wide counter that starts at random.
uint32_t next_sequence_number();

// Where a controller's secrets come from when they are kept where they can change (a key file
// an administrator rewrites): asked as each transaction starts (a Negotiate taken), on the
// thread that runs on_send, to set keys' secret pointers (to memory the source keeps until it
// is asked again or goes). False, with why: that transaction fails as with a wrong key.
using DhchapSecretSource = std::function<bool(DhchapKeys& keys, std::string& why)>;

class DhchapController {
 public:
  enum class State : uint8_t {
    Idle,            // nothing yet: a Negotiate starts a transaction
    ChallengeReady,  // Negotiate taken: the next receive returns the Challenge
    AwaitReply,
    Success1Ready,   // Reply checked out: the next receive returns Success1
    AwaitSuccess2,   // bidirectional: the host checks our response
    FailureReady,    // the next receive returns Failure1
    Authenticated,
    Failed,
    kCount
  };

  // source, when set, gives the secrets afresh for each transaction (keys' own are then unused).
  DhchapController(DhchapKeys keys, DhchapPolicy policy, DhchapSecretSource source = {});

  // The host's message of an Authentication Send.
  void on_send(std::span<const uint8_t> msg);
  // The message an Authentication Receive returns, written into out (the command's AL bytes,
  // zero-filled past the message); the message's length. A receive with nothing to return
  // answers Failure1 (incorrect protocol message).
  size_t on_receive(std::span<uint8_t> out);

  State state() const { return state_; }
  bool authenticated() const { return state_ == State::Authenticated; }
  bool failed() const { return state_ == State::Failed; }
  // Underway: a deadline applies (the transport's business).
  bool in_progress() const { return state_ != State::Idle && state_ != State::Authenticated && state_ != State::Failed; }
  // Why it failed (AUTH_Failure reason, 0 if it has not) and what the log says.
  uint8_t failure_reason() const { return reason_; }
  const std::string& failure_detail() const { return detail_; }
  uint8_t hash() const { return hash_; }
  uint8_t dh_group() const { return group_; }
  bool bidirectional() const { return bidirectional_; }

 private:
  void set_state(State s);
  void fail(wire::AuthFailureReason r, std::string detail);
  void on_negotiate(std::span<const uint8_t> msg);
  void on_reply(std::span<const uint8_t> msg);

  DhchapKeys keys_;
  DhchapPolicy policy_;
  DhchapSecretSource source_;
  State state_ = State::Idle;
  uint16_t tid_ = 0;
  uint8_t hash_ = 0;
  uint8_t group_ = 0;
  uint32_t s1_ = 0;
  std::vector<uint8_t> c1_;
  DhKeyPair dh_;
  bool bidirectional_ = false;
  std::vector<uint8_t> r2_;
  uint8_t reason_ = 0;
  std::string detail_;
};

class DhchapHost {
 public:
  enum class State : uint8_t {
    Start,
    AwaitChallenge,  // Negotiate sent
    ReplyReady,      // the Challenge checked out: the Reply goes out next
    AwaitSuccess1,   // Reply sent
    Success2Ready,   // bidirectional and the controller's response checked out
    Failure2Ready,   // the controller's message was wrong: Failure2 goes out, then Failed
    Authenticated,
    Failed,
    kCount
  };

  DhchapHost(DhchapKeys keys, DhchapPolicy policy, uint16_t transaction);

  // The next message to send with Authentication Send, if one is due (Negotiate, Reply,
  // Success2 or Failure2); empty when the host should receive (or has finished).
  std::vector<uint8_t> next_message();
  // Whether the next step is an Authentication Receive.
  bool expects_receive() const { return state_ == State::AwaitChallenge || state_ == State::AwaitSuccess1; }
  // The controller's message of an Authentication Receive (trailing zero fill allowed).
  void on_receive(std::span<const uint8_t> msg);

  State state() const { return state_; }
  bool authenticated() const { return state_ == State::Authenticated; }
  bool failed() const { return state_ == State::Failed; }
  uint8_t failure_reason() const { return reason_; }
  const std::string& failure_detail() const { return detail_; }
  uint8_t hash() const { return hash_; }
  uint8_t dh_group() const { return group_; }

 private:
  void set_state(State s);
  void fail(wire::AuthFailureReason r, std::string detail, bool tell_controller);
  void on_challenge(std::span<const uint8_t> msg);
  void on_success1(std::span<const uint8_t> msg);

  DhchapKeys keys_;
  DhchapPolicy policy_;
  State state_ = State::Start;
  uint16_t tid_;
  uint8_t hash_ = 0;
  uint8_t group_ = 0;
  std::vector<uint8_t> reply_;
  std::vector<uint8_t> expected_r2_;
  uint32_t s2_ = 0;
  uint8_t reason_ = 0;
  std::string detail_;
};

const char* to_string(DhchapController::State s);
const char* to_string(DhchapHost::State s);

}  // namespace nvtcp::auth

// SPDX-License-Identifier: Apache-2.0
// Fabrics commands, the part of a CommandQueue that runs them: Connect (which makes the queue an
// admin queue with a new controller, or an I/O queue of an existing one), Property Get and Set,
// Disconnect (fabrics_commands.cpp), and in-band authentication: Authentication Send and Receive
// run the queue's DH-HMAC-CHAP transaction (auth_commands.cpp). It holds what the queue's
// association holds for its life: its host's budget and, while it has not proven its key, the
// transaction and the claims that wait for it.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "auth/dhchap_transaction.hpp"
#include "target/command.hpp"
#include "target/controller.hpp"
#include "wire/fabrics.hpp"

namespace nvtcp::target {

class CommandQueue;

class FabricsCommands {
 public:
  explicit FabricsCommands(CommandQueue& q) : q_(q) {}
  ~FabricsCommands();
  FabricsCommands(const FabricsCommands&) = delete;
  FabricsCommands& operator=(const FabricsCommands&) = delete;

  void parse(Command& r);
  void execute(Command& r);
  // Whether the queue may run commands: it needs no authentication or has authenticated.
  bool authenticated() const { return !auth_required_ || authenticated_; }
  // An I/O queue that must authenticate claims its qid only once it has.
  bool qid_claimed() const { return !qid_claim_after_auth_; }
  // The worker's part of an Authentication Send is back (OnWorker -> Running).
  void auth_send_done(Command& r);

 private:
  // What a Connect asks for, and what it has been granted so far, from one step to the next.
  struct Connecting {
    wire::ConnectCmd cmd;
    wire::ConnectData data;
    std::string subnqn, hostnqn;
    std::shared_ptr<Subsystem> sub;
    std::optional<HostKeys> keys;
    bool must_prove = false;  // a DH-HMAC-CHAP key, and no TLS PSK that vouches for the host
    std::shared_ptr<HostBudget> host;
    uint64_t pool = 0;  // the request pool's bytes, reserved in the budgets
  };
  void execute_property(Command& r);
  // The steps of a Connect, each of which ends r (and undoes what the ones before it
  // reserved) when it refuses: false then.
  void execute_connect(Command& r);
  bool admit_host(Command& r, Connecting& c);
  bool check_depth(Command& r, const Connecting& c);
  bool reserve_queue(Command& r, Connecting& c);
  void unreserve_queue(const Connecting& c);
  std::shared_ptr<Controller> new_controller(Command& r, Connecting& c);
  std::shared_ptr<Controller> existing_controller(Command& r, Connecting& c);
  // The queue joins ctrl: it is connected from here on.
  void associate(Command& r, Connecting& c, std::shared_ptr<Controller> ctrl);
  void invalid_connect_param(Command& r, bool in_data, uint32_t offset);
  void parse_auth(Command& r);
  void execute_auth(Command& r);
  void complete_auth(Command& r);
  bool move_to_host_budget();

  CommandQueue& q_;
  std::shared_ptr<HostBudget> host_;  // the host's budget, from its Connect on
  // A host that must prove its DH-HMAC-CHAP key counts under its address until it has: a
  // sender claiming its NQN could otherwise take its connection slots. Set at Connect; the move
  // to the NQN's budget happens when the queue authenticates.
  bool budget_after_auth_ = false;
  // An I/O queue that must authenticate claims its qid only once it has (fabrics_commands.cpp).
  bool qid_claim_after_auth_ = false;
  // Authentication: required when the host has a DH-HMAC-CHAP key (Connect answered with ATR);
  // until the transaction succeeds, every other command but Disconnect is refused. The keys are
  // held for the queue's life (a keyring key by reference, read as each transaction starts);
  // the transaction is made at the first Authentication command.
  bool auth_required_ = false;
  HostKeys auth_keys_;
  std::unique_ptr<auth::DhchapController> auth_;
  // The transaction's state as the reactor knows it: while an Authentication Send's part runs
  // on a worker (auth_work_.request set), the reactor touches nothing of auth_.
  bool authenticated_ = false;
  bool auth_was_authenticated_ = false;
  struct AuthWork {
    Command* request = nullptr;  // the Authentication Send whose part is on the worker
    auth::DhchapController* transaction = nullptr;
    const uint8_t* msg = nullptr;
    size_t len = 0;
  } auth_work_;
};

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
// Which hosts may come into one subsystem, with which keys, and over which channel. Changed
// by RPC under a mutex that the data path never takes (hosts are read at Connect and in the
// TLS handshake only).
#pragma once
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "target/config.hpp"

namespace nvtcp::target {

class HostAccess {
 public:
  // subnqn: the subsystem's, for the log lines.
  HostAccess(std::string subnqn, bool allow_any, std::vector<std::string> hosts, std::map<std::string, HostKeys> keys);

  bool allowed(const std::string& hostnqn) const;
  bool allows_any() const { return allow_any_.load(std::memory_order_relaxed); }
  // The keys configured for a host (nullopt: none; it connects without authenticating). A
  // copy: the host may be removed (RPC) while its connection uses them. A keyring key in it is
  // a reference, read from its file when it is used (HostKey::material), off this lock.
  std::optional<HostKeys> keys(const std::string& hostnqn) const;
  // Whether the host may come in through a listener with TLS (over_tls) or without: over TLS
  // only with a PSK of its own; in the clear unless it has a PSK (and no allow_plain).
  bool channel_allowed(const std::string& hostnqn, bool over_tls) const;
  // Live changes (RPC). A removed host is refused at its next Connect.
  void set_allow_any(bool any) { allow_any_.store(any, std::memory_order_relaxed); }
  // Adds the host, or replaces its keys; false if it was there already (keys then replaced).
  bool add(const std::string& hostnqn, std::optional<HostKeys> keys);
  // The list only: Subsystem::remove_host also ends the removed host's controllers.
  bool remove(const std::string& hostnqn);  // false: it was not allowed
  // The allowed hosts, each with whether it has keys (which never leave the target), and the
  // keyring keys they name (their names are what save_config writes).
  struct Entry {
    std::string nqn;
    bool dhchap = false, dhchap_ctrl = false, psk = false, allow_plain = false;
    KeyringRef dhchap_ref, dhchap_ctrl_ref, psk_ref;
  };
  std::vector<Entry> list() const;

 private:
  const std::string subnqn_;
  std::atomic<bool> allow_any_;
  mutable std::mutex mu_;  // hosts_ and keys_
  std::vector<std::string> hosts_;
  std::map<std::string, HostKeys> keys_;
};

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
#include "target/host_access.hpp"

#include <algorithm>

#include "util/log.hpp"

namespace nvtcp::target {

namespace {
// Said once per host when its keys are set (start, RPC): which channels it is admitted on.
void log_channels(const std::string& subnqn, const std::string& hostnqn, const HostKeys& keys) {
  if (!keys.psk) return;
  if (keys.allow_plain)
    log::warn(
        "subsystem {}: host {} has a TLS PSK and is admitted on plain listeners too (allow_plain): anyone "
        "who sends its NQN is that host there",
        subnqn, hostnqn);
  else
    log::info("subsystem {}: host {} has a TLS PSK: admitted over TLS only", subnqn, hostnqn);
}
}  // namespace

HostAccess::HostAccess(std::string subnqn, bool allow_any, std::vector<std::string> hosts,
                       std::map<std::string, HostKeys> keys)
    : subnqn_(std::move(subnqn)), allow_any_(allow_any), hosts_(std::move(hosts)), keys_(std::move(keys)) {
  for (const auto& [host, k] : keys_) log_channels(subnqn_, host, k);
}

bool HostAccess::channel_allowed(const std::string& hostnqn, bool over_tls) const {
  std::lock_guard lk(mu_);
  auto it = keys_.find(hostnqn);
  const bool psk = it != keys_.end() && it->second.psk;
  if (over_tls) return psk;
  return !psk || it->second.allow_plain;
}

bool HostAccess::allowed(const std::string& hostnqn) const {
  if (allows_any()) return true;
  std::lock_guard lk(mu_);
  return std::find(hosts_.begin(), hosts_.end(), hostnqn) != hosts_.end();
}

std::optional<HostKeys> HostAccess::keys(const std::string& hostnqn) const {
  std::lock_guard lk(mu_);
  auto it = keys_.find(hostnqn);
  if (it == keys_.end()) return std::nullopt;
  return it->second;
}

bool HostAccess::add(const std::string& hostnqn, std::optional<HostKeys> keys) {
  std::lock_guard lk(mu_);
  if (keys) log_channels(subnqn_, hostnqn, *keys);
  if (keys) keys_[hostnqn] = std::move(*keys);
  else keys_.erase(hostnqn);
  if (std::find(hosts_.begin(), hosts_.end(), hostnqn) != hosts_.end()) return false;
  hosts_.push_back(hostnqn);
  return true;
}

bool HostAccess::remove(const std::string& hostnqn) {
  std::lock_guard lk(mu_);
  keys_.erase(hostnqn);
  auto it = std::find(hosts_.begin(), hosts_.end(), hostnqn);
  if (it == hosts_.end()) return false;
  hosts_.erase(it);
  return true;
}

std::vector<HostAccess::Entry> HostAccess::list() const {
  std::lock_guard lk(mu_);
  std::vector<Entry> out;
  for (const auto& nqn : hosts_) {
    Entry e{nqn};
    auto k = keys_.find(nqn);
    if (k != keys_.end()) {
      e.dhchap = bool(k->second.dhchap);
      e.dhchap_ctrl = bool(k->second.dhchap_ctrl);
      e.psk = bool(k->second.psk);
      e.allow_plain = k->second.allow_plain;
      e.dhchap_ref = k->second.dhchap.ref();
      e.dhchap_ctrl_ref = k->second.dhchap_ctrl.ref();
      e.psk_ref = k->second.psk.ref();
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace nvtcp::target

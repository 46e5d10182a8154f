// SPDX-License-Identifier: Apache-2.0
#include "target/subsystem.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "nvtcp/log_pages.hpp"
#include "target/controller.hpp"
#include "util/log.hpp"
#include "wire/digest.hpp"
#include "wire/fabrics.hpp"

namespace nvtcp::target {

Subsystem::Subsystem(const SubsystemConfig& cfg, bool discovery, uint32_t reactors)
    : nqn_(cfg.nqn),
      serial_(cfg.serial),
      model_(cfg.model),
      discovery_(discovery),
      hosts_(cfg.nqn, cfg.allow_any_host, cfg.hosts, cfg.host_keys),
      max_namespaces_(discovery ? 0 : cfg.max_namespaces),
      ns_by_id_(std::make_unique<std::atomic<Namespace*>[]>(max_namespaces_ + 1)),
      ana_reporting_(!discovery && cfg.ana_reporting),
      listeners_(max_namespaces_, reactors),
      min_cntlid_(cfg.min_cntlid),
      max_cntlid_(cfg.max_cntlid),
      next_cntlid_(cfg.min_cntlid) {}

bool Subsystem::remove_host(const std::string& hostnqn) {
  if (!hosts_.remove(hostnqn)) return false;
  if (hosts_.allows_any()) return true;  // still let in: its connections stay
  // Its controllers end, as SPDK disconnects a removed host: otherwise a host taken off keeps its
  // access for as long as its connections live. Each of their queues sees it at its next
  // controller poll and closes.
  std::lock_guard lk(mu_);
  for (auto& [id, c] : controllers_)
    if (c->hostnqn() == hostnqn && !c->dead.exchange(true))
      log::event(log::Level::Info, "disconnect",
                 {{"host_nqn", hostnqn}, {"subsystem", nqn_}, {"cntlid", std::to_string(id)}, {"reason", "host removed"}},
                 "controller {} of {} torn down: host {} was removed", id, nqn_, hostnqn);
  return true;
}

std::vector<std::shared_ptr<Controller>> Subsystem::controllers() const {
  std::lock_guard lk(mu_);
  std::vector<std::shared_ptr<Controller>> out;
  for (const auto& [id, c] : controllers_) out.push_back(c);
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a->cntlid() < b->cntlid(); });
  return out;
}

bool Subsystem::add_namespace(std::unique_ptr<Namespace> ns) {
  std::lock_guard lk(ns_mu_);
  const uint32_t nsid = ns->nsid;
  if (nsid == 0 || nsid > max_namespaces_ || namespaces_.count(nsid)) return false;
  ns->index = nsid;
  Namespace* raw = ns.get();
  namespaces_.emplace(nsid, std::move(ns));
  // Under the controller lock: each controller there is learns whether its host sees it before
  // it is published, and one that joins meanwhile (add_controller) finds it published.
  std::lock_guard clk(mu_);
  for (auto& [id, c] : controllers_) c->set_hidden(nsid, !raw->visible_to(c->hostnqn()));
  ns_by_id_[nsid].store(raw, std::memory_order_release);
  return true;
}

int Subsystem::set_namespace_visible(uint32_t nsid, const std::string& hostnqn, bool visible) {
  std::lock_guard lk(ns_mu_);
  auto it = namespaces_.find(nsid);
  if (it == namespaces_.end()) return -ENOENT;
  Namespace& ns = *it->second;
  if (ns.auto_visible) return -EPERM;  // SPDK: no control of single hosts over one every host sees
  std::lock_guard clk(mu_);
  if (visible) ns.visible_hosts.insert(hostnqn);
  else ns.visible_hosts.erase(hostnqn);
  for (auto& [id, c] : controllers_)
    if (c->hostnqn() == hostnqn && c->set_hidden(nsid, !visible))
      c->raise(nvme::AsyncEventType::Notice, nvme::kAsyncNoticeNamespaceChanged, nvme::LogPageId::ChangedNamespaces,
               nsid);
  return 0;
}

std::unique_ptr<Namespace> Subsystem::detach_namespace(uint32_t nsid) {
  std::lock_guard lk(ns_mu_);
  auto it = namespaces_.find(nsid);
  if (it == namespaces_.end()) return nullptr;
  ns_by_id_[nsid].store(nullptr, std::memory_order_release);
  auto ns = std::move(it->second);
  namespaces_.erase(it);
  return ns;
}

std::vector<Namespace*> Subsystem::namespaces() const {
  std::vector<Namespace*> out;
  for (uint32_t nsid = 1; nsid <= max_namespaces_; ++nsid)
    if (Namespace* ns = find_namespace(nsid)) out.push_back(ns);
  return out;
}

void Subsystem::notify_namespace_changed(uint32_t nsid) {
  // Only the hosts that see it hear of it: a masked NSID in another host's Changed Namespace
  // List would tell that host the namespace exists.
  std::lock_guard lk(mu_);
  for (auto& [id, c] : controllers_)
    if (!c->masked(nsid))
      c->raise(nvme::AsyncEventType::Notice, nvme::kAsyncNoticeNamespaceChanged, nvme::LogPageId::ChangedNamespaces,
               nsid);
}

int Subsystem::set_namespace_ana_group(uint32_t nsid, uint32_t grp) {
  if (grp == 0 || grp > max_namespaces_) return -EINVAL;
  std::lock_guard lk(ns_mu_);
  auto it = namespaces_.find(nsid);
  if (it == namespaces_.end()) return -ENOENT;
  it->second->anagrpid.store(grp, std::memory_order_relaxed);
  listeners_.note_change();
  std::lock_guard clk(mu_);
  for (auto& [id, c] : controllers_) {
    if (c->masked(nsid)) continue;  // nothing it can see changed
    c->raise(nvme::AsyncEventType::Notice, nvme::kAsyncNoticeNamespaceChanged, nvme::LogPageId::ChangedNamespaces, nsid);
    if (ana_reporting_) c->raise(nvme::AsyncEventType::Notice, nvme::kAsyncNoticeAnaChange, nvme::LogPageId::Ana);
  }
  return 0;
}

void Subsystem::notify_discovery_log_changed() {
  std::lock_guard lk(mu_);
  for (auto& [id, c] : controllers_)
    c->raise(nvme::AsyncEventType::Notice, nvme::kAsyncNoticeDiscoveryLogChange, nvme::LogPageId::Discovery);
}

std::vector<uint32_t> Subsystem::set_ana_state(uint16_t portid, uint32_t grp, nvme::AnaState state) {
  std::vector<uint32_t> changed = listeners_.set_ana_state(portid, grp, state);
  if (changed.empty()) return changed;
  // The NSIDs in the groups that changed: a host hears of the change if it sees one of them
  // (its ANA log lists only the groups of the namespaces it sees).
  std::vector<uint32_t> nsids;
  {
    std::lock_guard nlk(ns_mu_);
    for (const auto& [nsid, ns] : namespaces_)
      if (std::find(changed.begin(), changed.end(), ns->anagrpid.load(std::memory_order_relaxed)) != changed.end())
        nsids.push_back(nsid);
  }
  std::lock_guard lk(mu_);
  for (auto& [id, c] : controllers_)
    if (c->portid() == portid &&
        std::any_of(nsids.begin(), nsids.end(), [&c = *c](uint32_t nsid) { return !c.masked(nsid); }))
      c->raise(nvme::AsyncEventType::Notice, nvme::kAsyncNoticeAnaChange, nvme::LogPageId::Ana);
  return changed;
}

std::vector<uint32_t> Subsystem::ana_groups() const {
  std::vector<uint32_t> groups;
  for (const Namespace* ns : namespaces()) groups.push_back(ns->anagrpid);
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  return groups;
}

uint16_t Subsystem::allocate_cntlid() {
  std::lock_guard lk(mu_);
  // From this subsystem's range (min_cntlid..max_cntlid, within the dynamic 1..0xFFEF), round
  // robin, so that an ID just freed is not handed out again at once; 0 when all are in use.
  for (uint32_t tries = 0; tries <= uint32_t(max_cntlid_ - min_cntlid_); ++tries) {
    const uint16_t id = next_cntlid_;
    next_cntlid_ = next_cntlid_ >= max_cntlid_ ? min_cntlid_ : uint16_t(next_cntlid_ + 1);
    if (!controllers_.count(id)) return id;
  }
  return 0;
}

std::shared_ptr<Controller> Subsystem::add_controller(std::shared_ptr<Controller> c) {
  std::lock_guard lk(mu_);
  if (deleted_.load(std::memory_order_relaxed)) return nullptr;
  // Its listener checked under mu_: a listener taken away after this finds the controller when
  // it tears down that listener's controllers (under mu_ too), and one taken away before is
  // seen here, so no controller outlives the listener it came in through.
  if (!listeners_.reachable_through(c->portid())) return nullptr;
  // The namespaces masked from its host, as they are now (add_namespace and
  // set_namespace_visible change them under this lock too).
  for (uint32_t nsid = 1; nsid <= max_namespaces_; ++nsid)
    if (const Namespace* ns = find_namespace(nsid); ns && !ns->visible_to(c->hostnqn())) c->set_hidden(nsid, true);
  controllers_[c->cntlid()] = c;
  return c;
}

size_t Subsystem::mark_deleted() {
  std::lock_guard lk(mu_);
  deleted_.store(true, std::memory_order_release);
  size_t n = 0;
  for (auto& [id, c] : controllers_)
    if (!c->dead.exchange(true)) {
      log::event(log::Level::Info, "disconnect",
                 {{"host_nqn", c->hostnqn()}, {"subsystem", nqn_}, {"cntlid", std::to_string(id)},
                  {"reason", "subsystem deleted"}},
                 "controller {} of {} torn down: the subsystem was deleted", id, nqn_);
      ++n;
    }
  return n;
}

size_t Subsystem::tear_down_controllers_on(uint16_t portid) {
  std::lock_guard lk(mu_);
  size_t n = 0;
  for (auto& [id, c] : controllers_)
    if (c->portid() == portid && !c->dead.exchange(true)) {
      log::event(log::Level::Info, "disconnect",
                 {{"host_nqn", c->hostnqn()}, {"subsystem", nqn_}, {"cntlid", std::to_string(id)},
                  {"reason", "listener removed"}},
                 "controller {} of {} torn down: host {} came in through a listener taken from the subsystem", id,
                 nqn_, c->hostnqn());
      ++n;
    }
  return n;
}

std::shared_ptr<Controller> Subsystem::find_controller(uint16_t cntlid) const {
  std::lock_guard lk(mu_);
  auto it = controllers_.find(cntlid);
  return it == controllers_.end() ? nullptr : it->second;
}

std::vector<uint32_t> Subsystem::revalidate_namespaces() {
  // Once a second on reactor 0: no allocation unless something changed.
  std::vector<uint32_t> changed;
  for (uint32_t nsid = 1; nsid <= max_namespaces_; ++nsid) {
    Namespace* ns = find_namespace(nsid);
    if (!ns) continue;
    const uint64_t blocks = ns->device->revalidate_size() / ns->block_size;
    const uint64_t was = ns->blocks.load(std::memory_order_relaxed);
    if (blocks == was) continue;
    ns->blocks.store(blocks, std::memory_order_relaxed);
    log::info("subsystem {} namespace {}: its {} was resized: {} -> {} blocks of {} bytes", nqn_, ns->nsid,
              ns->device->kind(), was, blocks, ns->block_size);
    changed.push_back(ns->nsid);
  }
  for (uint32_t nsid : changed) notify_namespace_changed(nsid);
  return changed;
}

void Subsystem::notify_reservation(uint32_t nsid, const std::vector<Reservations::Notice>& notices) {
  if (notices.empty()) return;
  // Sorted by host, then one look-up per controller: a Clear or Preempt among thousands of
  // registrants and controllers must not cost their product under the controller mutex.
  std::vector<const Reservations::Notice*> by_host;
  by_host.reserve(notices.size());
  for (const auto& n : notices) by_host.push_back(&n);
  auto host_less = [](const Reservations::Notice* a, const Reservations::Notice* b) { return a->host < b->host; };
  std::stable_sort(by_host.begin(), by_host.end(), host_less);
  std::lock_guard lk(mu_);
  for (auto& [id, c] : controllers_) {
    Reservations::Notice probe{};
    std::memcpy(probe.host.data(), c->hostid(), 16);
    auto [first, last] = std::equal_range(by_host.begin(), by_host.end(), &probe, host_less);
    for (auto it = first; it != last; ++it) c->add_reservation_notice((*it)->type, nsid);
  }
}

void Subsystem::remove_controller(uint16_t cntlid) {
  std::lock_guard lk(mu_);
  controllers_.erase(cntlid);
}

bool Subsystem::volatile_write_cache() const {
  for (uint32_t nsid = 1; nsid <= max_namespaces_; ++nsid)
    if (const Namespace* ns = find_namespace(nsid); ns && ns->device->volatile_write_cache()) return true;
  return false;
}

bool Subsystem::write_cache_enabled() const {
  for (uint32_t nsid = 1; nsid <= max_namespaces_; ++nsid)
    if (const Namespace* ns = find_namespace(nsid);
        ns && ns->device->volatile_write_cache() && ns->device->write_cache_enabled())
      return true;
  return false;
}

void Subsystem::set_write_cache_enabled(bool on) {
  for (uint32_t nsid = 1; nsid <= max_namespaces_; ++nsid)
    if (Namespace* ns = find_namespace(nsid); ns && ns->device->volatile_write_cache())
      ns->device->set_write_cache_enabled(on);
}

size_t Subsystem::controller_count() const {
  std::lock_guard lk(mu_);
  return controllers_.size();
}

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
#include "target/subsystem.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "nvtcp/log_pages.hpp"
#include "target/controller.hpp"
#include "util/log.hpp"
#include "wire/digest.hpp"
#include "wire/fabrics.hpp"

namespace nvtcp::target {

Subsystem::Subsystem(const SubsystemConfig& cfg, bool discovery)
    : nqn_(cfg.nqn),
      serial_(cfg.serial),
      model_(cfg.model),
      discovery_(discovery),
      allow_any_(cfg.allow_any_host),
      hosts_(cfg.hosts),
      host_keys_(cfg.host_keys),
      max_namespaces_(discovery ? 0 : cfg.max_namespaces),
      ns_by_id_(std::make_unique<std::atomic<Namespace*>[]>(max_namespaces_ + 1)),
      ana_reporting_(!discovery && cfg.ana_reporting) {}

bool Subsystem::host_allowed(const std::string& hostnqn) const {
  if (allows_any_host()) return true;
  std::lock_guard lk(hosts_mu_);
  return std::find(hosts_.begin(), hosts_.end(), hostnqn) != hosts_.end();
}

std::optional<HostKeys> Subsystem::host_keys(const std::string& hostnqn) const {
  std::lock_guard lk(hosts_mu_);
  auto it = host_keys_.find(hostnqn);
  if (it == host_keys_.end()) return std::nullopt;
  return it->second;
}

bool Subsystem::add_host(const std::string& hostnqn, std::optional<HostKeys> keys) {
  std::lock_guard lk(hosts_mu_);
  if (keys) host_keys_[hostnqn] = std::move(*keys);
  else host_keys_.erase(hostnqn);
  if (std::find(hosts_.begin(), hosts_.end(), hostnqn) != hosts_.end()) return false;
  hosts_.push_back(hostnqn);
  return true;
}

bool Subsystem::remove_host(const std::string& hostnqn) {
  {
    std::lock_guard lk(hosts_mu_);
    host_keys_.erase(hostnqn);
    auto it = std::find(hosts_.begin(), hosts_.end(), hostnqn);
    if (it == hosts_.end()) return false;
    hosts_.erase(it);
  }
  if (allows_any_host()) return true;  // still let in: its connections stay
  // Its controllers end, as SPDK disconnects a removed host: otherwise a host taken off keeps its
  // access for as long as its connections live. Each of their queues sees it at its next
  // controller poll and closes.
  std::lock_guard lk(mu_);
  for (auto& [id, c] : controllers_)
    if (c->hostnqn() == hostnqn && !c->dead.exchange(true))
      log::info("controller {} of {} torn down: host {} was removed", id, nqn_, hostnqn);
  return true;
}

std::vector<Subsystem::HostEntry> Subsystem::hosts() const {
  std::lock_guard lk(hosts_mu_);
  std::vector<HostEntry> out;
  for (const auto& nqn : hosts_) {
    HostEntry e{nqn};
    auto k = host_keys_.find(nqn);
    if (k != host_keys_.end()) {
      e.dhchap = bool(k->second.dhchap);
      e.dhchap_ctrl = bool(k->second.dhchap_ctrl);
      e.psk = bool(k->second.psk);
    }
    out.push_back(std::move(e));
  }
  return out;
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
  ns_by_id_[nsid].store(raw, std::memory_order_release);
  return true;
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
  std::lock_guard lk(mu_);
  for (auto& [id, c] : controllers_)
    c->raise(nvme::AsyncEventType::Notice, nvme::kAsyncNoticeNamespaceChanged, nvme::LogPageId::ChangedNamespaces, nsid);
}

const AnaPort* Subsystem::ana_port(uint16_t portid) {
  std::lock_guard lk(ana_mu_);
  auto& p = ana_ports_[portid];
  if (!p) p = std::make_unique<AnaPort>(max_namespaces_);
  return p.get();
}

std::vector<uint32_t> Subsystem::set_ana_state(uint16_t portid, uint32_t grp, nvme::AnaState state) {
  std::vector<uint32_t> changed;
  {
    std::lock_guard lk(ana_mu_);
    auto& p = ana_ports_[portid];
    if (!p) p = std::make_unique<AnaPort>(max_namespaces_);
    const uint32_t first = grp ? grp : 1, last = grp ? grp : max_namespaces_;
    for (uint32_t g = first; g <= last && g <= max_namespaces_; ++g)
      if (p->states[g].exchange(uint8_t(state), std::memory_order_relaxed) != uint8_t(state)) changed.push_back(g);
    if (changed.empty()) return changed;
    p->change_count.fetch_add(1, std::memory_order_relaxed);
  }
  std::lock_guard lk(mu_);
  for (auto& [id, c] : controllers_)
    if (c->portid() == portid) c->raise(nvme::AsyncEventType::Notice, nvme::kAsyncNoticeAnaChange, nvme::LogPageId::Ana);
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
  // Valid dynamic controller IDs are 1..0xFFEF.
  for (int tries = 0; tries < 0xFFEF; ++tries) {
    uint16_t id = next_cntlid_;
    next_cntlid_ = next_cntlid_ >= 0xFFEF ? 1 : uint16_t(next_cntlid_ + 1);
    if (!controllers_.count(id)) return id;
  }
  return 0;
}

std::shared_ptr<Controller> Subsystem::add_controller(std::shared_ptr<Controller> c) {
  std::lock_guard lk(mu_);
  controllers_[c->cntlid()] = c;
  return c;
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

std::shared_ptr<HostBudget> TargetState::host_budget(const std::string& principal) {
  std::lock_guard lk(hosts_mu_);
  if (auto b = hosts_[principal].lock()) return b;
  // Forget hosts that have gone, so that made-up NQNs cannot grow the table for good.
  for (auto it = hosts_.begin(); it != hosts_.end();) it = it->second.expired() ? hosts_.erase(it) : std::next(it);
  auto b = std::make_shared<HostBudget>();
  b->principal = principal;
  hosts_[principal] = b;
  return b;
}

WorkerPool& TargetState::workers() {
  // Two threads: a burst of hosts authenticating does not queue behind one exponentiation, and
  // the reactors keep the other cores.
  std::call_once(workers_once_, [this] { workers_ = std::make_unique<WorkerPool>(2, "nvtcp-auth"); });
  return *workers_;
}

Subsystem* TargetState::find_subsystem(const std::string& nqn) const {
  if (nqn == nvme::kDiscoveryNqn) return discovery.get();
  for (auto& s : subsystems)
    if (s->nqn() == nqn) return s.get();
  return nullptr;
}

std::string build_state(const TargetConfig& cfg, TargetState& st, const DeviceFactory& factory) {
  st.config = cfg;
  SubsystemConfig dc;
  dc.nqn = nvme::kDiscoveryNqn;
  dc.serial = "NVTCP-DISCOVERY";
  dc.model = "nvtcp discovery";
  st.discovery = std::make_unique<Subsystem>(dc, true);
  uint16_t portid = 1;
  for (const auto& l : cfg.listeners)
    st.listeners.push_back(
        {l.address, l.port, portid++, l.address.find(':') != std::string::npos, l.wildcard(), l.tls_required});
  for (const auto& sc : cfg.subsystems) {
    auto sub = std::make_unique<Subsystem>(sc, false);
    std::vector<uint16_t> bound;  // finalize_config checked that every name is a listener
    for (const auto& name : sc.listeners)
      if (const int i = listener_index(cfg, name); i >= 0) bound.push_back(st.listeners[size_t(i)].portid);
    sub->bind_listeners(std::move(bound));
    for (const auto& nc : sc.namespaces) {
      std::string err;
      auto device = make_device(nc, cfg.cores, factory, err);
      if (!device) return fmt::format("subsystem {} namespace {}: {}", sc.nqn, nc.nsid, err);
      auto ns = make_namespace(cfg, sc.nqn, nc, std::move(device), err);
      if (!ns) return fmt::format("subsystem {} namespace {}: {}", sc.nqn, nc.nsid, err);
      if (!sub->add_namespace(std::move(ns)))
        return fmt::format("subsystem {} namespace {}: NSID taken or above max_namespaces", sc.nqn, nc.nsid);
      NamespaceConfig bdev = nc;  // the identifiers are the namespace's, not its device's
      bdev.nguid.clear();
      bdev.eui64.clear();
      bdev.uuid.clear();
      st.bdevs.add(bdev, nullptr, sc.nqn, nc.nsid);
    }
    st.subsystems.push_back(std::move(sub));
  }
  for (const auto& b : cfg.bdevs) {
    std::string err;
    auto device = make_device(b, cfg.cores, factory, err);
    if (!device) return fmt::format("bdev {}: {}", b.name, err);
    st.bdevs.add(b, std::move(device));
  }
  return {};
}

}  // namespace nvtcp::target

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

Subsystem::Subsystem(const SubsystemConfig& cfg, bool discovery, uint32_t reactors)
    : nqn_(cfg.nqn),
      serial_(cfg.serial),
      model_(cfg.model),
      discovery_(discovery),
      allow_any_(cfg.allow_any_host),
      hosts_(cfg.hosts),
      host_keys_(cfg.host_keys),
      max_namespaces_(discovery ? 0 : cfg.max_namespaces),
      ns_by_id_(std::make_unique<std::atomic<Namespace*>[]>(max_namespaces_ + 1)),
      ana_reporting_(!discovery && cfg.ana_reporting),
      reactors_(std::max(1u, reactors)) {
  for (const auto& [host, keys] : host_keys_) log_channels(nqn_, host, keys);
}

bool Subsystem::channel_allowed(const std::string& hostnqn, bool over_tls) const {
  std::lock_guard lk(hosts_mu_);
  auto it = host_keys_.find(hostnqn);
  const bool psk = it != host_keys_.end() && it->second.psk;
  if (over_tls) return psk;
  return !psk || it->second.allow_plain;
}

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
  if (keys) log_channels(nqn_, hostnqn, *keys);
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
      log::event(log::Level::Info, "disconnect",
                 {{"host_nqn", hostnqn}, {"subsystem", nqn_}, {"cntlid", std::to_string(id)}, {"reason", "host removed"}},
                 "controller {} of {} torn down: host {} was removed", id, nqn_, hostnqn);
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
      e.allow_plain = k->second.allow_plain;
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

void Subsystem::notify_discovery_log_changed() {
  std::lock_guard lk(mu_);
  for (auto& [id, c] : controllers_)
    c->raise(nvme::AsyncEventType::Notice, nvme::kAsyncNoticeDiscoveryLogChange, nvme::LogPageId::Discovery);
}

std::shared_ptr<SubsystemPort> Subsystem::port(uint16_t portid) {
  std::lock_guard lk(ports_mu_);
  if (!every_listener_ && std::find(portids_.begin(), portids_.end(), portid) == portids_.end()) return nullptr;
  auto& p = ports_[portid];
  if (!p) p = std::make_shared<SubsystemPort>(max_namespaces_, reactors_);
  return p;
}

std::shared_ptr<const SubsystemPort> Subsystem::find_port(uint16_t portid) const {
  std::lock_guard lk(ports_mu_);
  auto it = ports_.find(portid);
  return it == ports_.end() ? nullptr : it->second;
}

std::vector<uint32_t> Subsystem::set_ana_state(uint16_t portid, uint32_t grp, nvme::AnaState state) {
  std::vector<uint32_t> changed;
  {
    const std::shared_ptr<SubsystemPort> p = port(portid);
    if (!p) return changed;  // the listener was taken away meanwhile
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
  if (deleted_.load(std::memory_order_relaxed)) return nullptr;
  // Its listener checked under mu_: a listener taken away after this finds the controller when
  // it tears down that listener's controllers (under mu_ too), and one taken away before is
  // seen here, so no controller outlives the listener it came in through.
  if (!reachable_through(c->portid())) return nullptr;
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

bool Subsystem::reachable_through(uint16_t portid) const {
  std::lock_guard lk(ports_mu_);
  return every_listener_ || std::find(portids_.begin(), portids_.end(), portid) != portids_.end();
}

bool Subsystem::bound_to_every_listener() const {
  std::lock_guard lk(ports_mu_);
  return every_listener_;
}

void Subsystem::bind_listeners(std::vector<uint16_t> portids) {
  std::lock_guard lk(ports_mu_);
  every_listener_ = false;
  portids_ = std::move(portids);
}

bool Subsystem::add_listener(uint16_t portid) {
  std::lock_guard lk(ports_mu_);
  if (every_listener_ || std::find(portids_.begin(), portids_.end(), portid) != portids_.end()) return false;
  portids_.push_back(portid);
  return true;
}

bool Subsystem::remove_listener(uint16_t portid, const std::vector<uint16_t>& every_portid) {
  std::lock_guard lk(ports_mu_);
  if (every_listener_) {
    every_listener_ = false;
    portids_ = every_portid;
  }
  auto it = std::find(portids_.begin(), portids_.end(), portid);
  if (it == portids_.end()) return false;
  portids_.erase(it);
  ports_.erase(portid);
  return true;
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
  // the reactors keep the other cores. One source address runs on one of them at a time: a
  // stranger's flood of key exchanges (which it can cause before proving anything) holds one
  // core at most, and the other serves every other address.
  std::call_once(workers_once_, [this] { workers_ = std::make_unique<WorkerPool>(2, "nvtcp-auth", 1); });
  return *workers_;
}

std::vector<std::shared_ptr<Subsystem>> TargetState::subsystems() const {
  std::lock_guard lk(table_mu_);
  return subsystems_;
}

std::shared_ptr<Subsystem> TargetState::find_subsystem(const std::string& nqn) const {
  if (nqn == nvme::kDiscoveryNqn) return discovery;
  std::lock_guard lk(table_mu_);
  for (auto& s : subsystems_)
    if (s->nqn() == nqn) return s;
  return nullptr;
}

bool TargetState::add_subsystem(std::shared_ptr<Subsystem> sub) {
  std::lock_guard lk(table_mu_);
  if (sub->nqn() == nvme::kDiscoveryNqn) return false;
  for (auto& s : subsystems_)
    if (s->nqn() == sub->nqn()) return false;
  subsystems_.push_back(std::move(sub));
  return true;
}

std::shared_ptr<Subsystem> TargetState::take_subsystem(const std::string& nqn) {
  std::lock_guard lk(table_mu_);
  for (auto it = subsystems_.begin(); it != subsystems_.end(); ++it)
    if ((*it)->nqn() == nqn) {
      auto s = std::move(*it);
      subsystems_.erase(it);
      return s;
    }
  return nullptr;
}

std::vector<Listener> TargetState::listeners() const {
  std::lock_guard lk(table_mu_);
  return listeners_;
}

std::optional<Listener> TargetState::find_listener(const std::string& address, uint16_t port) const {
  std::lock_guard lk(table_mu_);
  for (const auto& l : listeners_)
    if (l.address == address && l.port == port) return l;
  return std::nullopt;
}

uint16_t TargetState::next_portid() {
  std::lock_guard lk(table_mu_);
  return next_portid_++;
}

void TargetState::add_listener(Listener l) {
  std::lock_guard lk(table_mu_);
  listeners_.push_back(l);
}

void TargetState::set_listener_port(uint16_t portid, uint16_t port) {
  std::lock_guard lk(table_mu_);
  for (auto& l : listeners_)
    if (l.portid == portid) l.port = port;
}

bool TargetState::remove_listener(uint16_t portid) {
  std::lock_guard lk(table_mu_);
  for (auto it = listeners_.begin(); it != listeners_.end(); ++it)
    if (it->portid == portid) {
      listeners_.erase(it);
      return true;
    }
  return false;
}

Listener listener_of(const ListenerConfig& l) {
  return {l.address, l.port, 0, l.address.find(':') != std::string::npos, l.wildcard(), l.tls_required};
}

std::string build_state(const TargetConfig& cfg, TargetState& st, const DeviceFactory& factory) {
  st.config = cfg;
  SubsystemConfig dc;
  dc.nqn = nvme::kDiscoveryNqn;
  dc.serial = "NVTCP-DISCOVERY";
  dc.model = "nvtcp discovery";
  st.discovery = std::make_shared<Subsystem>(dc, true, cfg.cores);
  std::vector<Listener> listeners;
  for (const auto& l : cfg.listeners) {
    listeners.push_back(listener_of(l));
    listeners.back().portid = st.next_portid();
    st.add_listener(listeners.back());
  }
  for (const auto& sc : cfg.subsystems) {
    auto sub = std::make_shared<Subsystem>(sc, false, cfg.cores);
    // Bound to the listeners it names, or to every one configured and the discovery port (0);
    // not to those RPC adds later, which belong to the subsystems they are added to.
    std::vector<uint16_t> bound;
    if (sc.listeners.empty()) {
      bound.push_back(0);
      for (const Listener& l : listeners) bound.push_back(l.portid);
    }
    for (const auto& name : sc.listeners)  // finalize_config checked that every name is a listener
      if (const int i = listener_index(cfg, name); i >= 0) bound.push_back(listeners[size_t(i)].portid);
    sub->bind_listeners(std::move(bound));
    for (const auto& nc : sc.namespaces) {
      std::string err;
      auto device = make_device(nc, cfg.cores, factory, err);
      if (!device) return fmt::format("subsystem {} namespace {}: {}", sc.nqn, nc.nsid, err);
      const std::string device_uuid = configured_device_uuid(nc, sc.nqn);
      auto ns = make_namespace(cfg, sc.nqn, nc, std::move(device), err, device_uuid);
      if (!ns) return fmt::format("subsystem {} namespace {}: {}", sc.nqn, nc.nsid, err);
      if (!sub->add_namespace(std::move(ns)))
        return fmt::format("subsystem {} namespace {}: NSID taken or above max_namespaces", sc.nqn, nc.nsid);
      NamespaceConfig bdev = nc;  // the identifiers given are the namespace's; the device has its UUID
      bdev.nguid.clear();
      bdev.eui64.clear();
      bdev.uuid = device_uuid;
      st.bdevs.add(bdev, nullptr, sc.nqn, nc.nsid);
    }
    if (!st.add_subsystem(std::move(sub))) return fmt::format("subsystem {} is listed twice", sc.nqn);
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

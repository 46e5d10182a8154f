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
      host_keys_(cfg.host_keys) {}

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
  std::lock_guard lk(hosts_mu_);
  host_keys_.erase(hostnqn);
  auto it = std::find(hosts_.begin(), hosts_.end(), hostnqn);
  if (it == hosts_.end()) return false;
  hosts_.erase(it);
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

void Subsystem::add_namespace(std::unique_ptr<Namespace> ns) {
  if (ns_by_id_.size() <= ns->nsid) ns_by_id_.resize(ns->nsid + 1, nullptr);
  ns_by_id_[ns->nsid] = ns.get();
  namespaces_.push_back(std::move(ns));
  std::sort(namespaces_.begin(), namespaces_.end(), [](auto& a, auto& b) { return a->nsid < b->nsid; });
  for (size_t i = 0; i < namespaces_.size(); ++i) namespaces_[i]->index = uint32_t(i);
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
  std::vector<uint32_t> changed;
  for (const auto& ns : namespaces_) {
    const uint64_t blocks = ns->device->revalidate_size() / ns->block_size;
    const uint64_t was = ns->blocks.load(std::memory_order_relaxed);
    if (blocks == was) continue;
    ns->blocks.store(blocks, std::memory_order_relaxed);
    log::info("subsystem {} namespace {}: its {} was resized: {} -> {} blocks of {} bytes", nqn_, ns->nsid,
              ns->device->kind(), was, blocks, ns->block_size);
    changed.push_back(ns->nsid);
  }
  if (changed.empty()) return changed;
  std::lock_guard lk(mu_);
  for (auto& [id, c] : controllers_)
    for (uint32_t nsid : changed)
      c->raise(nvme::AsyncEventType::Notice, nvme::kAsyncNoticeNamespaceChanged, nvme::LogPageId::ChangedNamespaces,
               nsid);
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
  return std::any_of(namespaces_.begin(), namespaces_.end(),
                     [](const auto& ns) { return ns->device->volatile_write_cache(); });
}

bool Subsystem::write_cache_enabled() const {
  return std::any_of(namespaces_.begin(), namespaces_.end(), [](const auto& ns) {
    return ns->device->volatile_write_cache() && ns->device->write_cache_enabled();
  });
}

void Subsystem::set_write_cache_enabled(bool on) {
  for (const auto& ns : namespaces_)
    if (ns->device->volatile_write_cache()) ns->device->set_write_cache_enabled(on);
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
      // Reservations persist (PTPL) next to a regular file's image: NAME.nvtcp-resv.
      std::string resv_path;
      struct stat sb{};
      if (nc.type == "file" && ::stat(nc.path.c_str(), &sb) == 0 && S_ISREG(sb.st_mode))
        resv_path = nc.path + ".nvtcp-resv";
      auto ns = std::make_unique<Namespace>(resv_path, cfg.max_registrants_per_namespace);
      ns->fence.init(std::max(1u, cfg.cores));
      ns->nsid = nc.nsid;
      ns->name = nc.name;
      ns->block_size = nc.block_size;
      ns->lbads = nc.block_size == 4096 ? 12 : 9;
      std::string err;
      if (factory) ns->device = factory(nc, err);
      if (!ns->device && err.empty()) {
        if (nc.type == "null") ns->device = backend::make_null(nc.size - nc.size % nc.block_size, nc.block_size);
        else if (nc.type == "ram")
          ns->device = backend::make_ram(nc.size - nc.size % nc.block_size, nc.block_size, cfg.cores, err);
        else ns->device = backend::make_file(nc.path, nc.size, nc.block_size, err);
      }
      if (!ns->device) return fmt::format("subsystem {} namespace {}: {}", sc.nqn, nc.nsid, err);
      // A state file that cannot be trusted costs this namespace its persistence, not the
      // target its start: every other namespace and subsystem is served as usual.
      if (std::string e = ns->reservations.load(); !e.empty())
        log::error("subsystem {} namespace {}: reservation state not restored: {}", sc.nqn, nc.nsid, e);
      ns->blocks = ns->device->size_bytes() / nc.block_size;
      // Stable identifiers derived from the subsystem NQN and nsid, so a host that
      // reconnects to a restarted target sees the same namespace.
      std::string seed = fmt::format("{}/{}", sc.nqn, nc.nsid);
      for (int i = 0; i < 4; ++i) {
        uint32_t h = wire::crc32c((seed + char('a' + i)).data(), seed.size() + 1);
        std::memcpy(ns->nguid + 4 * i, &h, 4);
      }
      std::memcpy(ns->uuid, ns->nguid, 16);
      ns->uuid[6] = uint8_t((ns->uuid[6] & 0x0F) | 0x40);  // RFC 4122 version 4 layout
      ns->uuid[8] = uint8_t((ns->uuid[8] & 0x3F) | 0x80);
      std::memcpy(ns->eui64, ns->nguid + 8, 8);
      sub->add_namespace(std::move(ns));
    }
    st.subsystems.push_back(std::move(sub));
  }
  return {};
}

}  // namespace nvtcp::target

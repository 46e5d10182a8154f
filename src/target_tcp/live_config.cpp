// SPDX-License-Identifier: Apache-2.0
// The target's configuration changed while it serves: see live_config.hpp.
#include "target_tcp/live_config.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "nvtcp/log_pages.hpp"
#include "target_tcp/target.hpp"
#include "util/log.hpp"

namespace nvtcp::target {
namespace {

// How long a removal waits for the commands on the namespace (a device that never answers).
constexpr auto kDrainLimit = std::chrono::seconds(60);

}  // namespace

std::string LiveConfig::create_bdev(const NamespaceConfig& nc) {
  BdevInTheMaking b;
  if (std::string err = prepare_bdev(nc, b); !err.empty()) return err;
  make_bdev(b);
  return adopt_bdev(std::move(b));
}

namespace {

// Why a bdev cannot take its name or its uuid in bdevs as they are now (empty: it can).
std::string name_or_uuid_taken(const BdevTable& bdevs, const NamespaceConfig& nc) {
  BdevTable::Info existing;
  if (bdevs.find(nc.name, existing)) return fmt::format("a bdev named {} exists", nc.name);
  if (nc.uuid.empty()) return {};
  const std::string other = bdevs.name_of_uuid(nc.uuid);
  if (other.empty()) return {};
  return fmt::format("bdev {}: a bdev with uuid {} exists ({}): two devices must not show one identity", nc.name,
                     nc.uuid, other);
}

}  // namespace

std::string LiveConfig::prepare_bdev(const NamespaceConfig& given, BdevInTheMaking& out) {
  std::lock_guard lk(t_.control_mu_);
  if (std::string err = check_name(given.name, "bdev name"); !err.empty()) return err;
  // Its own identity, which its namespaces show (a new device gets a new one, whatever NSID it
  // takes), as SPDK gives each bdev: the one given, or a random one; an RBD image's is the
  // image's (known once it is open), the same on every gateway that opens it.
  NamespaceConfig nc = given;
  if (!nc.uuid.empty() && !canonical_uuid(given.uuid, nc.uuid))
    return fmt::format("bdev {}: uuid '{}' is not a UUID", nc.name, given.uuid);
  // A UUID given is checked before the device is made (a file device may create its file).
  if (std::string e = name_or_uuid_taken(t_.state_->bdevs, nc); !e.empty()) return e;
  std::string err;
  if (nc.type == "rbd" && !t_.state_->rbd_clusters.resolve(nc.rbd, err)) return err;
  out.nc = std::move(nc);
  out.reactors = t_.cfg_.cores;
  out.factory = t_.factory_;
  return {};
}

void LiveConfig::make_bdev(BdevInTheMaking& b) {
  b.device = make_device(b.nc, b.reactors, b.factory, b.err);
  if (!b.device && b.err.empty()) b.err = fmt::format("bdev {}: no device was made", b.nc.name);
}

std::string LiveConfig::adopt_bdev(BdevInTheMaking b) {
  if (!b.device) return b.err;
  std::lock_guard lk(t_.control_mu_);
  NamespaceConfig& nc = b.nc;
  // Calls served while the device was made may have taken its name or its uuid, or taken its
  // cluster away.
  if (std::string e = name_or_uuid_taken(t_.state_->bdevs, nc); !e.empty()) return e;
  backend::RbdSpec cluster;
  if (nc.type == "rbd" && !nc.rbd.cluster_name.empty() && !t_.state_->rbd_clusters.find(nc.rbd.cluster_name, cluster))
    return fmt::format("bdev {}: cluster {} was unregistered while its image opened", nc.name, nc.rbd.cluster_name);
  if (nc.uuid.empty()) {
    nc.uuid = nc.type == "rbd" ? storage_uuid(nc, {}, 0, b.device.get()) : random_uuid();
    if (std::string e = name_or_uuid_taken(t_.state_->bdevs, nc); !e.empty()) return e;  // the same image twice
  }
  const uint64_t bytes = b.device->size_bytes();  // a file's or an image's size is the device's, not the request's
  if (!t_.state_->bdevs.add(nc, std::move(b.device))) return fmt::format("a bdev named {} exists", nc.name);
  log::info("control: bdev {}: {} {} bytes, {}-byte blocks{}, uuid {}", nc.name, nc.type, bytes, nc.block_size,
            nc.path.empty() ? "" : fmt::format(" ({})", nc.path), nc.uuid);
  return {};
}

std::string LiveConfig::add_namespace(const std::string& subnqn, NamespaceConfig nc, uint32_t& nsid) {
  std::lock_guard lk(t_.control_mu_);
  const std::shared_ptr<Subsystem> sub = t_.state_->find_subsystem(subnqn);
  if (!sub || sub->is_discovery()) return fmt::format("no subsystem {}", subnqn);
  if (nc.nsid == 0) {
    for (uint32_t n = 1; n <= sub->max_namespaces() && nc.nsid == 0; ++n)
      if (!sub->find_namespace(n)) nc.nsid = n;
    if (nc.nsid == 0) return fmt::format("subsystem {} holds its most namespaces ({})", subnqn, sub->max_namespaces());
  } else if (nc.nsid > sub->max_namespaces()) {
    return fmt::format("nsid {} is above subsystem {}'s max_namespaces ({})", nc.nsid, subnqn, sub->max_namespaces());
  } else if (sub->find_namespace(nc.nsid)) {
    return fmt::format("subsystem {} has a namespace {} already", subnqn, nc.nsid);
  }
  if (nc.anagrpid > sub->max_namespaces())
    return fmt::format("anagrpid {} is above subsystem {}'s max_namespaces ({}, its ANAGRPMAX)", nc.anagrpid, subnqn,
                       sub->max_namespaces());
  NamespaceConfig spec;
  std::string err;
  if (!valid_identifiers(nc, err)) return err;
  auto device = t_.state_->bdevs.claim(nc.name, subnqn, nc.nsid, spec, err);
  if (!device) return err;
  // The namespace's identifiers: those given, else its device's (spec.uuid, the bdev's UUID).
  const std::string bdev_uuid = spec.uuid;
  spec.nsid = nc.nsid;
  spec.nguid = nc.nguid;
  spec.eui64 = nc.eui64;
  spec.uuid = nc.uuid;
  spec.anagrpid = nc.anagrpid;
  spec.no_auto_visible = nc.no_auto_visible;
  spec.visible_hosts = nc.visible_hosts;
  auto ns = make_namespace(t_.state_->config, subnqn, spec, std::move(device), err, bdev_uuid);
  if (!ns) return err;  // not with identifiers checked above
  Namespace* raw = ns.get();
  if (!sub->add_namespace(std::move(ns))) {
    t_.state_->bdevs.unclaim(nc.name, nullptr);
    return fmt::format("subsystem {}: nsid {} was taken", subnqn, nc.nsid);
  }
  nsid = nc.nsid;
  log::info("control: subsystem {} namespace {}: bdev {} ({} {} bytes, {}-byte blocks)", subnqn, nsid, nc.name,
            raw->device->kind(), raw->device->size_bytes(), raw->block_size);
  sub->notify_namespace_changed(nsid);
  return {};
}

std::string LiveConfig::remove_namespace(const std::string& subnqn, uint32_t nsid) {
  Leaving l;
  if (std::string err = begin_remove_namespace(subnqn, nsid, l); !err.empty()) return err;
  drain(l);
  return settle(std::move(l));
}

std::string LiveConfig::begin_remove_namespace(const std::string& subnqn, uint32_t nsid, Leaving& out) {
  std::lock_guard lk(t_.control_mu_);
  const std::shared_ptr<Subsystem> sub = t_.state_->find_subsystem(subnqn);
  if (!sub || sub->is_discovery()) return fmt::format("no subsystem {}", subnqn);
  std::unique_ptr<Namespace> ns = sub->detach_namespace(nsid);
  if (!ns) return fmt::format("subsystem {} has no namespace {}", subnqn, nsid);
  // From here no command finds it; the hosts hear of it while the last ones finish.
  sub->notify_namespace_changed(nsid);
  out.what = Leaving::What::Namespace;
  out.subnqn = subnqn;
  out.nss.push_back(std::move(ns));
  leave(out);
  return {};
}

void LiveConfig::leave(Leaving& out) {
  for (const auto& ns : out.nss) t_.state_->bdevs.set_leaving(ns->name);
  t_.quiesce();
}

void LiveConfig::drain(Leaving& l) {
  const auto start = std::chrono::steady_clock::now();
  l.drained.clear();
  for (const auto& ns : l.nss) {
    Leaving::Drained d;
    if (const uint64_t held = ns->holds.total(); held != 0)
      log::info("control: subsystem {} namespace {}: waiting for the {} command(s) still on it (up to {} s)", l.subnqn,
                ns->nsid, held, std::chrono::duration_cast<std::chrono::seconds>(kDrainLimit).count());
    while ((d.held = ns->holds.total()) != 0) {
      if (std::chrono::steady_clock::now() - start > kDrainLimit) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    d.waited_ms = uint64_t(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count());
    l.drained.push_back(d);
  }
  if (l.what != Leaving::What::Bdev) return;
  // A bdev deleted: its namespace's device, once no command is left on it, is the job's alone.
  if (!l.nss.empty() && l.drained[0].held == 0) l.device = std::move(l.nss[0]->device);
  l.device.reset();  // closed here: an RBD image's close waits for its cluster, a file's for its server
}

std::string LiveConfig::settle(Leaving l) {
  std::lock_guard lk(t_.control_mu_);
  size_t set_aside = 0;
  for (size_t i = 0; i < l.nss.size(); ++i) {
    std::unique_ptr<Namespace>& ns = l.nss[i];
    const Leaving::Drained d = i < l.drained.size() ? l.drained[i] : Leaving::Drained{ns->holds.total(), 0};
    if (d.held != 0) {
      // Destroying it would pull the device from under commands that may still finish: it is
      // kept (its memory and file) rather than risk that, and its bdev stays leaving.
      log::error("control: subsystem {} namespace {}: {} command(s) still on it after {} s; it is set aside, not freed",
                 l.subnqn, ns->nsid, d.held, std::chrono::duration_cast<std::chrono::seconds>(kDrainLimit).count());
      std::lock_guard g(graveyard_mu_);
      graveyard_.push_back(std::move(ns));
      ++set_aside;
      continue;
    }
    log::info("control: subsystem {} namespace {} (bdev {}) removed{}", l.subnqn, ns->nsid, ns->name,
              d.waited_ms ? fmt::format(" after its commands finished ({} ms)", d.waited_ms) : "");
    if (l.what != Leaving::What::Bdev) t_.state_->bdevs.unclaim(ns->name, std::move(ns->device), ns->metrics.totals());
  }
  switch (l.what) {
    case Leaving::What::Namespace:
      return {};
    case Leaving::What::Subsystem:
      log::info("control: subsystem {} deleted ({} controller(s) torn down, {} namespace(s) removed)", l.subnqn,
                l.controllers, l.nss.size());
      return {};
    case Leaving::What::Bdev:
      if (set_aside) return fmt::format("bdev {}: the commands on its namespace never finished; it is set aside", l.bdev);
      // One a namespace had is still in the table (leaving), its device closed by drain.
      if (!l.nss.empty() && !t_.state_->bdevs.remove_leaving(l.bdev)) return fmt::format("no bdev named {}", l.bdev);
      log::info("control: bdev {} deleted", l.bdev);
      return {};
  }
  return {};
}

std::string LiveConfig::create_subsystem(SubsystemConfig sc) {
  std::lock_guard lk(t_.control_mu_);
  if (!t_.started_) return "the target is not running";
  if (!sc.namespaces.empty() || !sc.listeners.empty())
    return "a new subsystem starts without namespaces and listeners (add them after)";
  if (std::string err = check_subsystem(sc, unsigned(t_.state_->subsystems().size()) + 1); !err.empty()) return err;
  if (sc.nqn == nvme::kDiscoveryNqn) return fmt::format("{} is the discovery subsystem", sc.nqn);
  auto sub = std::make_shared<Subsystem>(sc, false, t_.cfg_.cores);
  sub->listeners().bind({});  // reachable through the listeners RPC adds, as in SPDK
  if (!t_.state_->add_subsystem(sub)) return fmt::format("subsystem {} exists", sc.nqn);
  log::info("control: subsystem {} created (serial {}, model '{}', up to {} namespaces{}{})", sc.nqn, sc.serial,
            sc.model, sc.max_namespaces, sc.allow_any_host ? ", any host" : "",
            sc.ana_reporting ? ", ANA reporting" : "");
  discovery_log_changed();
  return {};
}

std::string LiveConfig::delete_subsystem(const std::string& nqn) {
  Leaving l;
  if (std::string err = begin_delete_subsystem(nqn, l); !err.empty()) return err;
  drain(l);
  return settle(std::move(l));
}

std::string LiveConfig::begin_delete_subsystem(const std::string& nqn, Leaving& out) {
  std::lock_guard lk(t_.control_mu_);
  if (nqn == nvme::kDiscoveryNqn) return "the discovery subsystem cannot be deleted";
  const std::shared_ptr<Subsystem> sub = t_.state_->take_subsystem(nqn);
  if (!sub) return fmt::format("no subsystem {}", nqn);
  out.what = Leaving::What::Subsystem;
  out.subnqn = nqn;
  // No Connect finds it now; one that found it just before is refused by add_controller.
  out.controllers = sub->mark_deleted();
  for (Namespace* ns : sub->namespaces()) out.nss.push_back(sub->detach_namespace(ns->nsid));
  leave(out);
  // The listeners only it was reachable through close, as SPDK's do when their last subsystem
  // goes: left open, one would stay in the discovery log while save_config no longer names it.
  const auto rest = t_.state_->subsystems();
  for (const Listener& l : t_.state_->listeners()) {
    if (!sub->listeners().reachable_through(l.portid)) continue;
    if (std::any_of(rest.begin(), rest.end(), [&](const auto& s) { return s->listeners().reachable_through(l.portid); }))
      continue;
    t_.state_->remove_listener(l.portid);
    t_.sockets_.close_listener(l.portid);
    log::info("control: listener {}:{} closed: subsystem {} was the last reachable through it", l.address, l.port, nqn);
  }
  discovery_log_changed();
  return {};
}

std::string LiveConfig::add_listener(const std::string& subnqn, ListenerConfig& lc) {
  std::lock_guard lk(t_.control_mu_);
  if (!t_.started_) return "the target is not running";
  const std::shared_ptr<Subsystem> sub = t_.state_->find_subsystem(subnqn);
  if (!sub) return fmt::format("no subsystem {}", subnqn);
  std::optional<Listener> l = lc.port ? t_.state_->find_listener(lc.address, lc.port) : std::nullopt;
  if (l && l->tls_required != lc.tls_required)
    return fmt::format("listener {}:{} exists {} TLS", lc.address, lc.port, l->tls_required ? "with" : "without");
  bool opened = false;
  if (!l) {
    Listener fresh = listener_of(lc);
    uint16_t port = 0;
    fresh.portid = t_.state_->next_portid();
    if (std::string err = t_.sockets_.open_listener(fresh, lc.ktls, port); !err.empty()) return err;
    fresh.port = port;
    t_.state_->add_listener(fresh);
    l = fresh;
    opened = true;
  }
  lc.port = l->port;
  const bool added = !sub->is_discovery() && sub->listeners().add(l->portid);
  if (added) log::info("control: subsystem {} reachable through {}:{}", subnqn, l->address, l->port);
  if (opened || added) discovery_log_changed();
  return {};
}

std::string LiveConfig::remove_listener(const std::string& subnqn, const std::string& address, uint16_t port) {
  std::lock_guard lk(t_.control_mu_);
  const std::shared_ptr<Subsystem> sub = t_.state_->find_subsystem(subnqn);
  if (!sub) return fmt::format("no subsystem {}", subnqn);
  const std::optional<Listener> l = t_.state_->find_listener(address, port);
  // The discovery service's own port (--discovery-port) is no listener of the table: it is the
  // socket of portid 0, which serves discovery alone. Taken away as rpc.py asks for it.
  if (!l && sub->is_discovery() && port != 0 && port == t_.discovery_port() &&
      address == t_.cfg_.listeners[0].address) {
    t_.sockets_.close_listener(0);
    const size_t ended = sub->tear_down_controllers_on(0);
    t_.discovery_port_.store(0, std::memory_order_relaxed);
    log::info("control: discovery service on {}:{} stopped ({} controller(s) ended)", address, port, ended);
    return {};
  }
  if (!l) return fmt::format("no listener {}:{}", address, port);
  std::vector<uint16_t> every;
  for (const Listener& x : t_.state_->listeners()) every.push_back(x.portid);
  const auto subsystems = t_.state_->subsystems();
  if (sub->is_discovery()) {
    for (const auto& s : subsystems) {
      s->listeners().remove(l->portid, every);
      s->tear_down_controllers_on(l->portid);
    }
  } else {
    if (!sub->listeners().remove(l->portid, every))
      return fmt::format("subsystem {} is not reachable through {}:{}", subnqn, address, port);
    log::info("control: subsystem {} no longer reachable through {}:{}", subnqn, address, port);
    sub->tear_down_controllers_on(l->portid);
  }
  const bool still_used = std::any_of(subsystems.begin(), subsystems.end(),
                                      [&](const auto& s) { return s->listeners().reachable_through(l->portid); });
  if (!still_used) {
    t_.state_->remove_listener(l->portid);
    t_.sockets_.close_listener(l->portid);
  }
  discovery_log_changed();
  return {};
}

void LiveConfig::discovery_log_changed() {
  t_.state_->genctr.fetch_add(1, std::memory_order_relaxed);
  t_.state_->discovery->notify_discovery_log_changed();
}

std::string LiveConfig::delete_bdev(const std::string& name) {
  Leaving l;
  if (std::string err = begin_delete_bdev(name, l); !err.empty()) return err;
  drain(l);
  return settle(std::move(l));
}

std::string LiveConfig::begin_delete_bdev(const std::string& name, Leaving& out) {
  std::lock_guard lk(t_.control_mu_);
  if (resizing_.count(name)) return fmt::format("bdev {} is being resized: delete it once that is done", name);
  BdevTable::Info info;
  if (!t_.state_->bdevs.find(name, info)) return fmt::format("no bdev named {}", name);
  if (info.leaving)
    return fmt::format("bdev {} is being removed from namespace {} of {} (its commands are finishing): delete it "
                       "once that is done",
                       name, info.nsid, info.subnqn);
  out.what = Leaving::What::Bdev;
  out.bdev = name;
  if (info.subnqn.empty()) {
    out.device = t_.state_->bdevs.take(name);  // gone from the table at once; drain closes it
    return out.device ? std::string() : fmt::format("no bdev named {}", name);
  }
  const std::shared_ptr<Subsystem> sub = t_.state_->find_subsystem(info.subnqn);
  std::unique_ptr<Namespace> ns = sub ? sub->detach_namespace(info.nsid) : nullptr;
  if (!ns) return fmt::format("bdev {}: namespace {} of {} is not there", name, info.nsid, info.subnqn);
  sub->notify_namespace_changed(info.nsid);
  out.subnqn = info.subnqn;
  out.nss.push_back(std::move(ns));
  leave(out);
  return {};
}

std::string LiveConfig::resize_bdev(const std::string& name, uint64_t bytes) {
  backend::BlockDevice* device = nullptr;
  if (std::string err = begin_resize(name, bytes, device); !err.empty()) return err;
  return end_resize(name, bytes, device->resize(bytes));
}

std::string LiveConfig::begin_resize(const std::string& name, uint64_t bytes, backend::BlockDevice*& device) {
  std::lock_guard lk(t_.control_mu_);
  BdevTable::Info info;
  if (!t_.state_->bdevs.find(name, info)) return fmt::format("no bdev named {}", name);
  if (info.leaving)
    return fmt::format("bdev {} is being removed from namespace {} of {} (its commands are finishing)", name,
                       info.nsid, info.subnqn);
  if (info.spec.type != "null" && info.spec.type != "rbd")
    return fmt::format("bdev {} is {}: only NULL and RBD bdevs resize", name, info.spec.type);
  if (bytes < info.spec.block_size) return fmt::format("bdev {}: {} bytes is less than a block", name, bytes);
  if (resizing_.count(name)) return fmt::format("bdev {} is being resized already", name);
  // The device of a namespace is the namespace's; one nobody has is in the table. Either way it
  // stays this object until the bdev is deleted, which resizing_ holds off.
  const std::shared_ptr<Subsystem> sub = info.subnqn.empty() ? nullptr : t_.state_->find_subsystem(info.subnqn);
  const Namespace* ns = sub ? sub->find_namespace(info.nsid) : nullptr;
  device = ns ? ns->device.get() : t_.state_->bdevs.unclaimed_device(name);
  if (!device) return fmt::format("bdev {} cannot be resized", name);
  resizing_.insert(name);
  return {};
}

std::string LiveConfig::end_resize(const std::string& name, uint64_t bytes, bool resized) {
  std::lock_guard lk(t_.control_mu_);
  resizing_.erase(name);
  if (!resized) return fmt::format("bdev {} cannot be resized", name);
  // Which namespace has the device now (it may have moved while it resized; one leaving is no
  // namespace's any more).
  BdevTable::Info info;
  t_.state_->bdevs.find(name, info);
  const std::shared_ptr<Subsystem> sub =
      info.subnqn.empty() || info.leaving ? nullptr : t_.state_->find_subsystem(info.subnqn);
  Namespace* ns = sub ? sub->find_namespace(info.nsid) : nullptr;
  if (ns) ns->blocks.store(ns->device->size_bytes() / ns->block_size, std::memory_order_relaxed);
  t_.state_->bdevs.set_size(name, bytes - bytes % info.spec.block_size);
  log::info("control: bdev {} resized to {} bytes{}", name, bytes - bytes % info.spec.block_size,
            ns ? fmt::format(" (namespace {} of {})", info.nsid, info.subnqn) : "");
  if (ns) sub->notify_namespace_changed(info.nsid);
  return {};
}

std::string LiveConfig::set_ana_state(const std::string& subnqn, const std::string& address, uint16_t port,
                                      uint32_t anagrpid, nvme::AnaState state) {
  std::lock_guard lk(t_.control_mu_);
  const std::shared_ptr<Subsystem> sub = t_.state_->find_subsystem(subnqn);
  if (!sub || sub->is_discovery()) return fmt::format("no subsystem {}", subnqn);
  if (!sub->ana_reporting())
    return fmt::format("subsystem {} does not report ANA (create it with ana_reporting)", subnqn);
  const std::optional<Listener> listener = t_.state_->find_listener(address, port);
  if (!listener || !sub->listeners().reachable_through(listener->portid))
    return fmt::format("subsystem {} has no listener {}:{}", subnqn, address, port);
  if (anagrpid > sub->max_namespaces())
    return fmt::format("anagrpid {} is above subsystem {}'s ANAGRPMAX ({})", anagrpid, subnqn, sub->max_namespaces());
  const std::shared_ptr<const SubsystemPort> before = sub->listeners().port(listener->portid);
  if (!before) return fmt::format("subsystem {} has no listener {}:{}", subnqn, address, port);
  std::vector<std::pair<uint32_t, nvme::AnaState>> was;
  for (uint32_t g : sub->ana_groups())
    if (anagrpid == 0 || g == anagrpid) was.emplace_back(g, before->state(g));
  const std::vector<uint32_t> changed = sub->set_ana_state(listener->portid, anagrpid, state);
  // One line per transition a host can see (a group that has namespaces); the other groups
  // change silently, ready for namespaces added to them later.
  for (const auto& [g, old] : was)
    if (old != state)
      log::event(log::Level::Info, "ana_change",
                 {{"subsystem", subnqn},
                  {"listener", fmt::format("{}:{}", address, port)},
                  {"anagrpid", std::to_string(g)},
                  {"from", ana_state_name(old)},
                  {"to", ana_state_name(state)}},
                 "ANA: subsystem {} listener {}:{} group {}: {} -> {}", subnqn, address, port, g, ana_state_name(old),
                 ana_state_name(state));
  if (changed.empty())
    log::debug("ANA: subsystem {} listener {}:{}: already {}", subnqn, address, port, ana_state_name(state));
  return {};
}

}  // namespace nvtcp::target

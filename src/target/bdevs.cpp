// SPDX-License-Identifier: Apache-2.0
#include "target/bdevs.hpp"

#include <sys/stat.h>

#include <cstring>

#include <fmt/format.h>

#include "target/subsystem.hpp"
#include "util/log.hpp"
#include "wire/digest.hpp"

namespace nvtcp::target {
namespace {

// Hex digits (dashes skipped) into n bytes; false if they are not exactly that.
bool parse_hex(const std::string& text, uint8_t* out, size_t n) {
  size_t k = 0;
  int hi = -1;
  for (char c : text) {
    if (c == '-') continue;
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (v < 0) return false;
    if (hi < 0) {
      hi = v;
      continue;
    }
    if (k == n) return false;
    out[k++] = uint8_t(hi << 4 | v);
    hi = -1;
  }
  return k == n && hi < 0;
}

}  // namespace

bool valid_identifiers(const NamespaceConfig& nc, std::string& err) {
  uint8_t scratch[16];
  if (!nc.nguid.empty() && !parse_hex(nc.nguid, scratch, 16)) err = fmt::format("nguid '{}' is not 32 hex digits", nc.nguid);
  else if (!nc.eui64.empty() && !parse_hex(nc.eui64, scratch, 8)) err = fmt::format("eui64 '{}' is not 16 hex digits", nc.eui64);
  else if (!nc.uuid.empty() && !parse_hex(nc.uuid, scratch, 16)) err = fmt::format("uuid '{}' is not a UUID", nc.uuid);
  return err.empty();
}

std::unique_ptr<backend::BlockDevice> make_device(const NamespaceConfig& nc, unsigned reactors,
                                                  const DeviceFactory& factory, std::string& err) {
  std::unique_ptr<backend::BlockDevice> d;
  if (factory) d = factory(nc, err);
  if (d || !err.empty()) return d;
  if (nc.type == "null") return backend::make_null(nc.size - nc.size % nc.block_size, nc.block_size);
  if (nc.type == "ram") return backend::make_ram(nc.size - nc.size % nc.block_size, nc.block_size, reactors, err);
  if (nc.type == "file") return backend::make_file(nc.path, nc.size, nc.block_size, err);
  err = fmt::format("namespace type '{}' is not null, ram or file", nc.type);
  return nullptr;
}

std::unique_ptr<Namespace> make_namespace(const TargetConfig& cfg, const std::string& subnqn, const NamespaceConfig& nc,
                                          std::unique_ptr<backend::BlockDevice> device, std::string& err) {
  // Reservations persist (PTPL) next to a regular file's image: NAME.nvtcp-resv.
  std::string resv_path;
  struct stat sb {};
  if (nc.type == "file" && ::stat(nc.path.c_str(), &sb) == 0 && S_ISREG(sb.st_mode)) resv_path = nc.path + ".nvtcp-resv";
  auto ns = std::make_unique<Namespace>(resv_path, cfg.max_registrants_per_namespace);
  ns->fence.init(std::max(1u, cfg.cores));
  ns->holds.init(std::max(1u, cfg.cores));
  ns->metrics.init(std::max(1u, cfg.cores));
  ns->nsid = nc.nsid;
  ns->anagrpid = nc.anagrpid ? nc.anagrpid : nc.nsid;
  ns->name = nc.name;
  ns->block_size = nc.block_size;
  ns->lbads = nc.block_size == 4096 ? 12 : 9;
  ns->device = std::move(device);
  // A state file that cannot be trusted costs this namespace its persistence, not the target
  // its start: every other namespace and subsystem is served as usual.
  if (std::string e = ns->reservations.load(); !e.empty())
    log::error("subsystem {} namespace {}: reservation state not restored: {}", subnqn, nc.nsid, e);
  ns->blocks = ns->device->size_bytes() / nc.block_size;
  // Stable identifiers derived from the subsystem NQN and nsid, so a host that reconnects to a
  // restarted target sees the same namespace; or those given.
  std::string seed = fmt::format("{}/{}", subnqn, nc.nsid);
  for (int i = 0; i < 4; ++i) {
    uint32_t h = wire::crc32c((seed + char('a' + i)).data(), seed.size() + 1);
    std::memcpy(ns->nguid + 4 * i, &h, 4);
  }
  std::memcpy(ns->uuid, ns->nguid, 16);
  ns->uuid[6] = uint8_t((ns->uuid[6] & 0x0F) | 0x40);  // RFC 4122 version 4 layout
  ns->uuid[8] = uint8_t((ns->uuid[8] & 0x3F) | 0x80);
  std::memcpy(ns->eui64, ns->nguid + 8, 8);
  if (!nc.nguid.empty() && !parse_hex(nc.nguid, ns->nguid, 16)) err = fmt::format("nguid '{}' is not 32 hex digits", nc.nguid);
  if (!nc.eui64.empty() && !parse_hex(nc.eui64, ns->eui64, 8)) err = fmt::format("eui64 '{}' is not 16 hex digits", nc.eui64);
  if (!nc.uuid.empty() && !parse_hex(nc.uuid, ns->uuid, 16)) err = fmt::format("uuid '{}' is not a UUID", nc.uuid);
  if (!err.empty()) return nullptr;
  return ns;
}

bool BdevTable::add(const NamespaceConfig& spec, std::unique_ptr<backend::BlockDevice> device,
                    const std::string& subnqn, uint32_t nsid) {
  std::lock_guard lk(mu_);
  if (entries_.count(spec.name)) return false;
  Entry& e = entries_[spec.name];
  e.spec = spec;
  e.device = std::move(device);
  e.subnqn = subnqn;
  e.nsid = nsid;
  e.order = next_order_++;
  return true;
}

std::unique_ptr<backend::BlockDevice> BdevTable::claim(const std::string& name, const std::string& subnqn, uint32_t nsid,
                                                       NamespaceConfig& spec, std::string& why) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    why = fmt::format("no bdev named {}", name);
    return nullptr;
  }
  if (!it->second.device) {
    why = fmt::format("bdev {} is namespace {} of {} already", name, it->second.nsid, it->second.subnqn);
    return nullptr;
  }
  it->second.subnqn = subnqn;
  it->second.nsid = nsid;
  spec = it->second.spec;
  return std::move(it->second.device);
}

void BdevTable::unclaim(const std::string& name, std::unique_ptr<backend::BlockDevice> device) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return;  // deleted meanwhile: the device goes
  it->second.device = std::move(device);
  it->second.subnqn.clear();
  it->second.nsid = 0;
}

bool BdevTable::remove(const std::string& name) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end() || !it->second.device) return false;
  entries_.erase(it);
  return true;
}

bool BdevTable::find(const std::string& name, Info& out) const {
  std::lock_guard lk(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return false;
  out = {it->second.spec, it->second.subnqn, it->second.nsid, it->second.spec.size};
  if (it->second.device) out.size_bytes = it->second.device->size_bytes();
  return true;
}

std::vector<BdevTable::Info> BdevTable::list() const {
  std::lock_guard lk(mu_);
  std::vector<std::pair<uint64_t, Info>> sorted;
  for (const auto& [name, e] : entries_) {
    Info i{e.spec, e.subnqn, e.nsid, e.spec.size};
    if (e.device) i.size_bytes = e.device->size_bytes();
    sorted.emplace_back(e.order, std::move(i));
  }
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<Info> out;
  for (auto& [o, i] : sorted) out.push_back(std::move(i));
  return out;
}

bool BdevTable::resize(const std::string& name, uint64_t bytes) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(name);
  return it != entries_.end() && it->second.device && it->second.device->resize(bytes);
}

void BdevTable::set_size(const std::string& name, uint64_t bytes) {
  std::lock_guard lk(mu_);
  if (auto it = entries_.find(name); it != entries_.end()) it->second.spec.size = bytes;
}

}  // namespace nvtcp::target

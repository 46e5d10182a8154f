// SPDX-License-Identifier: Apache-2.0
#include "target/bdevs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <map>

#include <fmt/format.h>

#include "auth/crypto.hpp"
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

std::string uuid_text(const uint8_t u[16]) {
  std::string h;
  for (int i = 0; i < 16; ++i) h += fmt::format("{:02x}", u[i]);
  return fmt::format("{}-{}-{}-{}-{}", h.substr(0, 8), h.substr(8, 4), h.substr(12, 4), h.substr(16, 4), h.substr(20));
}

// Version 4 / RFC 4122 variant bits over 16 bytes of hash or randomness.
std::string as_uuid(uint8_t u[16]) {
  u[6] = uint8_t((u[6] & 0x0F) | 0x40);
  u[8] = uint8_t((u[8] & 0x3F) | 0x80);
  return uuid_text(u);
}

// A UUID named by text: the first 16 bytes of its SHA-256, so that different texts give
// different UUIDs (a CRC would give colliding ones to texts made to collide).
std::string uuid_of(const std::string& text) {
  uint8_t d[32];
  if (!auth::digest(1, {auth::as_bytes(text)}, d)) return random_uuid();
  return as_uuid(d);
}

// Random bytes of this process, drawn once: what makes a RAM device's UUID its own run's.
const std::string& process_salt() {
  static const std::string salt = random_uuid();
  return salt;
}

// What a namespace of the device with this UUID shows: UUID and NGUID the device's UUID, as
// SPDK makes them; EUI-64 (which SPDK leaves zero) the first 8 bytes of its SHA-256.
bool device_identifiers(const std::string& device_uuid, uint8_t uuid[16], uint8_t nguid[16], uint8_t eui64[8]) {
  if (!parse_hex(device_uuid, uuid, 16)) return false;
  std::memcpy(nguid, uuid, 16);
  uint8_t d[32];
  if (!auth::digest(1, {auth::Bytes(uuid, 16)}, d)) return false;
  std::memcpy(eui64, d, 8);
  return true;
}

std::string hex_of(const uint8_t* b, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{:02X}", b[i]);
  return s;
}

}  // namespace

bool inherit_identifiers(const std::string& bdev_uuid, NamespaceConfig& nc) {
  uint8_t uuid[16], nguid[16], eui64[8];
  if (!device_identifiers(bdev_uuid, uuid, nguid, eui64)) return false;
  if (nc.uuid.empty()) nc.uuid = uuid_text(uuid);
  if (nc.nguid.empty()) nc.nguid = hex_of(nguid, 16);
  if (nc.eui64.empty()) nc.eui64 = hex_of(eui64, 8);
  return true;
}

bool canonical_uuid(const std::string& text, std::string& out) {
  uint8_t u[16];
  if (!parse_hex(text, u, 16)) return false;
  out = uuid_text(u);
  return true;
}

std::string random_uuid() {
  uint8_t u[16];
  if (!auth::random_bytes(u, sizeof(u))) {
    // No entropy source at all: a UUID no other device of this process has, at least.
    static std::atomic<uint64_t> n{0};
    return uuid_of(fmt::format("nvtcp fallback {} {} {}", ::getpid(), n.fetch_add(1), ::time(nullptr)));
  }
  return as_uuid(u);
}

std::string storage_uuid(const NamespaceConfig& spec, const std::string& subnqn, uint32_t nsid,
                         const backend::BlockDevice* device) {
  if (spec.type == "file") {
    struct statx sx {};
    if (::statx(AT_FDCWD, spec.path.c_str(), 0, STATX_INO | STATX_BTIME | STATX_TYPE, &sx) != 0) {
      log::warn("bdev {}: cannot look at {} ({}): it gets a random UUID", spec.name, spec.path, std::strerror(errno));
      return random_uuid();
    }
    if (S_ISBLK(sx.stx_mode))
      return uuid_of(fmt::format("nvtcp block device\n{}\n{}:{}", spec.path, sx.stx_rdev_major, sx.stx_rdev_minor));
    // Without a birth time (a file system that keeps none) a reused inode number could pass for
    // the old file: the change time at least moves when a file is made anew there.
    const bool born = sx.stx_mask & STATX_BTIME;
    return uuid_of(fmt::format("nvtcp file\n{}:{}\n{}\n{}.{}", sx.stx_dev_major, sx.stx_dev_minor, sx.stx_ino,
                               born ? sx.stx_btime.tv_sec : sx.stx_ctime.tv_sec,
                               born ? sx.stx_btime.tv_nsec : sx.stx_ctime.tv_nsec));
  }
  // An RBD image is the same storage through every gateway that opens it: its namespace shows
  // the same identifiers on each, so a multipath host sees one namespace over both paths. Named
  // by the cluster's fsid and the pool's and image's IDs (the device's storage_identity), never
  // by the names alone, which two clusters, or an image made anew, share.
  if (spec.type == "rbd") {
    const std::string identity = device ? device->storage_identity() : std::string();
    if (!identity.empty()) return uuid_of("nvtcp rbd\n" + identity);
    log::warn("bdev {}: RBD image {}/{} without its cluster's identity: it gets a random UUID", spec.name,
              spec.rbd.pool, spec.rbd.image);
    return random_uuid();
  }
  if (subnqn.empty()) return random_uuid();
  if (spec.type == "ram")
    return uuid_of(fmt::format("nvtcp ram\n{}\n{}\n{}\n{}", process_salt(), subnqn, nsid, spec.name));
  return uuid_of(fmt::format("nvtcp {}\n{}\n{}\n{}\n{}\n{}", spec.type, subnqn, nsid, spec.name, spec.size,
                             spec.block_size));
}

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
  if (nc.type == "rbd") return backend::make_rbd(nc.rbd, nc.block_size, err);
  err = fmt::format("namespace type '{}' is not null, ram, file or rbd", nc.type);
  return nullptr;
}

std::string configured_device_uuid(const NamespaceConfig& nc, const std::string& subnqn,
                                   const backend::BlockDevice* device) {
  std::string uuid;
  if (!nc.device_uuid.empty() && canonical_uuid(nc.device_uuid, uuid)) return uuid;
  if (nc.uuid.empty() || !canonical_uuid(nc.uuid, uuid)) uuid = storage_uuid(nc, subnqn, nc.nsid, device);
  return uuid;
}

std::unique_ptr<Namespace> make_namespace(const TargetConfig& cfg, const std::string& subnqn, const NamespaceConfig& nc,
                                          std::unique_ptr<backend::BlockDevice> device, std::string& err,
                                          const std::string& bdev_uuid) {
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
  ns->auto_visible = !nc.no_auto_visible;
  ns->qos.set(nc.qos);
  ns->visible_hosts.insert(nc.visible_hosts.begin(), nc.visible_hosts.end());
  ns->name = nc.name;
  ns->block_size = nc.block_size;
  ns->lbads = nc.block_size == 4096 ? 12 : 9;
  ns->device = std::move(device);
  // A state file that cannot be trusted costs this namespace its persistence, not the target
  // its start: every other namespace and subsystem is served as usual.
  if (std::string e = ns->reservations.load(); !e.empty())
    log::error("subsystem {} namespace {}: reservation state not restored: {}", subnqn, nc.nsid, e);
  ns->blocks = ns->device->size_bytes() / nc.block_size;
  // The identity of the storage, never of the slot: a namespace made of another device at a
  // freed NSID must not pass for the one that was there (a host keeps its cache of a namespace
  // whose identifiers did not change).
  const std::string device_uuid =
      bdev_uuid.empty() ? configured_device_uuid(nc, subnqn, ns->device.get()) : bdev_uuid;
  if (!device_identifiers(device_uuid, ns->uuid, ns->nguid, ns->eui64)) {
    err = fmt::format("bdev {}: uuid '{}' is not a UUID", nc.name, device_uuid);
    return nullptr;
  }
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
  if (e.spec.uuid.empty() || !canonical_uuid(e.spec.uuid, e.spec.uuid))
    e.spec.uuid = storage_uuid(spec, subnqn, nsid, device.get());
  // An image's size is the cluster's: kept here, for the listings, once the device is claimed.
  if (e.spec.type == "rbd" && device) e.spec.size = device->size_bytes();
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
  if (it->second.leaving) {
    why = fmt::format("bdev {} is being removed from namespace {} of {} (its commands are finishing): add it once "
                      "that is done", name, it->second.nsid, it->second.subnqn);
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

void BdevTable::unclaim(const std::string& name, std::unique_ptr<backend::BlockDevice> device, const IoTotals& io) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return;  // deleted meanwhile: the device goes
  it->second.device = std::move(device);
  add_totals(it->second.past_io, io);
  it->second.subnqn.clear();
  it->second.nsid = 0;
  it->second.leaving = false;
}

bool BdevTable::set_leaving(const std::string& name) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end() || it->second.subnqn.empty()) return false;
  it->second.leaving = true;
  return true;
}

bool BdevTable::remove_leaving(const std::string& name) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end() || !it->second.leaving || it->second.device) return false;
  entries_.erase(it);
  return true;
}

std::unique_ptr<backend::BlockDevice> BdevTable::take(const std::string& name) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end() || !it->second.device) return nullptr;
  std::unique_ptr<backend::BlockDevice> device = std::move(it->second.device);
  entries_.erase(it);
  return device;
}

bool BdevTable::find(const std::string& name, Info& out) const {
  std::lock_guard lk(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return false;
  out = {it->second.spec, it->second.subnqn, it->second.nsid, it->second.spec.size, it->second.past_io,
         it->second.leaving};
  if (it->second.device) out.size_bytes = it->second.device->size_bytes();
  return true;
}

std::string BdevTable::name_of_uuid(const std::string& uuid) const {
  std::lock_guard lk(mu_);
  for (const auto& [name, e] : entries_)
    if (e.spec.uuid == uuid) return name;
  return {};
}

std::vector<BdevTable::Info> BdevTable::list() const {
  std::lock_guard lk(mu_);
  std::vector<std::pair<uint64_t, Info>> sorted;
  for (const auto& [name, e] : entries_) {
    Info i{e.spec, e.subnqn, e.nsid, e.spec.size, e.past_io, e.leaving};
    if (e.device) i.size_bytes = e.device->size_bytes();
    sorted.emplace_back(e.order, std::move(i));
  }
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<Info> out;
  for (auto& [o, i] : sorted) out.push_back(std::move(i));
  return out;
}

backend::BlockDevice* BdevTable::unclaimed_device(const std::string& name) const {
  std::lock_guard lk(mu_);
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : it->second.device.get();
}

void BdevTable::set_size(const std::string& name, uint64_t bytes) {
  std::lock_guard lk(mu_);
  if (auto it = entries_.find(name); it != entries_.end()) it->second.spec.size = bytes;
}

bool BdevTable::set_qos(const std::string& name, const QosLimits& limits, Info& out) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return false;
  it->second.spec.qos = limits;
  out = {it->second.spec, it->second.subnqn, it->second.nsid, 0, it->second.past_io, it->second.leaving};
  return true;
}

bool RbdClusterTable::add(const backend::RbdSpec& cluster) {
  std::lock_guard lk(mu_);
  return clusters_.emplace(cluster.cluster_name, cluster).second;
}

bool RbdClusterTable::remove(const std::string& name) {
  std::lock_guard lk(mu_);
  return clusters_.erase(name) != 0;
}

bool RbdClusterTable::find(const std::string& name, backend::RbdSpec& out) const {
  std::lock_guard lk(mu_);
  auto it = clusters_.find(name);
  if (it == clusters_.end()) return false;
  out = it->second;
  return true;
}

std::vector<backend::RbdSpec> RbdClusterTable::list() const {
  std::lock_guard lk(mu_);
  std::vector<backend::RbdSpec> out;
  for (const auto& [name, c] : clusters_) out.push_back(c);
  return out;
}

bool RbdClusterTable::resolve(backend::RbdSpec& spec, std::string& err) const {
  if (spec.cluster_name.empty()) return true;
  backend::RbdSpec c;
  if (!find(spec.cluster_name, c)) {
    err = fmt::format("no Ceph cluster registered as {} (bdev_rbd_register_cluster)", spec.cluster_name);
    return false;
  }
  spec.user = c.user;
  spec.config_file = c.config_file;
  spec.key_file = c.key_file;
  spec.config = c.config;
  return true;
}

}  // namespace nvtcp::target

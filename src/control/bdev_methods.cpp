// SPDX-License-Identifier: Apache-2.0
// The bdev_* methods: the devices namespaces are made of (sizes in blocks; rpc.py converts MiB).
#include <fmt/format.h>

#include <chrono>
#include <optional>

#include "control/method_table.hpp"
#include "util/log.hpp"

namespace nvtcp::control {
namespace {

using target::Target;

// The bdev methods' names for nvtcp's device types, and what bdev_get_bdevs calls them.
const char* product_name(const std::string& type) {
  return type == "null" ? "Null disk" : type == "ram" ? "Malloc disk" : type == "rbd" ? "Ceph Rbd Disk" : "AIO disk";
}

constexpr int kNoSuchFile = -2;      // -ENOENT
constexpr int kInvalidArgument = -22;  // -EINVAL

uint32_t checked_block_size(std::optional<uint64_t> bs, uint32_t dflt) {
  const uint64_t v = bs.value_or(dflt);
  if (v != 512 && v != 4096) throw RpcError(kInvalidArgument, fmt::format("block_size {}: nvtcp serves 512 or 4096", v));
  return uint32_t(v);
}

// num_blocks of block_size bytes, up to 2^60 bytes (an exabyte: anything larger is a mistake).
uint64_t checked_size(uint64_t num_blocks, uint32_t block_size) {
  if (num_blocks == 0 || num_blocks > (1ull << 60) / block_size)
    throw RpcError(kInvalidArgument, fmt::format("num_blocks {} of {} bytes is not a size from one block to 2^60 bytes",
                                                 num_blocks, block_size));
  return num_blocks * block_size;
}

// SPDK's metadata and protection-information options: accepted only when they ask for none.
void no_metadata(Params& p) {
  if (p.opt_u64("md_size").value_or(0) != 0 || p.opt_u64("dif_type").value_or(0) != 0)
    throw RpcError(kInvalidArgument, "metadata and protection information are not supported");
  p.opt_bool("dif_is_head_of_md");
  p.opt_u64("dif_pi_format");
  p.opt_bool("md_interleave");
  if (auto pbs = p.opt_u64("physical_block_size"); pbs && *pbs != 0 && *pbs != 512 && *pbs != 4096)
    throw RpcError(kInvalidArgument, fmt::format("physical_block_size {} is not 512 or 4096", *pbs));
}

// A bdev created without a name takes the first free PREFIXn, as SPDK names them (Malloc0, Ceph0).
std::string first_free_name(Target& t, const char* prefix) {
  target::BdevTable::Info ignored;
  for (unsigned i = 0;; ++i)
    if (std::string name = fmt::format("{}{}", prefix, i); !t.state().bdevs.find(name, ignored)) return name;
}

[[noreturn]] void refuse_create(const std::string& err) {
  const int code = err.find("exists") != std::string::npos ? kExists
                   : err.find("No such file") != std::string::npos || err.find("cannot open") != std::string::npos
                       ? kNoSuchFile
                       : kInvalidArgument;
  throw RpcError(code, err);
}

void create_bdev(Target& t, const target::NamespaceConfig& nc) {
  if (nc.name.empty()) throw RpcError(kInvalidParams, "\"name\" is required");
  if (std::string err = t.live_config().create_bdev(nc); !err.empty()) refuse_create(err);
}

// create_bdev as a slow method (method_table.hpp): the checks now, the device made on a worker
// (make_bdev reaches nothing of the target), added by the commit if its name and uuid are still
// free. auto_prefix: the name was chosen here as the first free PREFIXn, and is chosen again at
// the commit if a bdev made meanwhile took it.
SlowWork create_bdev_slowly(Target& t, const target::NamespaceConfig& nc, const char* auto_prefix = nullptr) {
  if (nc.name.empty()) throw RpcError(kInvalidParams, "\"name\" is required");
  using Making = target::LiveConfig::BdevInTheMaking;
  auto making = std::make_shared<Making>();
  if (std::string err = t.live_config().prepare_bdev(nc, *making); !err.empty()) refuse_create(err);
  return [&t, making, auto_prefix]() -> SlowCommit {
    target::LiveConfig::make_bdev(*making);
    return [&t, making, auto_prefix]() -> Json {
      if (auto_prefix) making->nc.name = first_free_name(t, auto_prefix);
      const std::string name = making->nc.name;
      if (std::string err = t.live_config().adopt_bdev(std::move(*making)); !err.empty()) refuse_create(err);
      return Json(name);
    };
  };
}

Json qos_json(const target::QosLimits& q) {
  return Json{{"rw_ios_per_sec", q.rw_ios_per_sec},
              {"rw_mbytes_per_sec", q.rw_mbytes_per_sec},
              {"r_mbytes_per_sec", q.r_mbytes_per_sec},
              {"w_mbytes_per_sec", q.w_mbytes_per_sec}};
}

Json bdev_json(const target::BdevTable::Info& b) {
  const bool null = b.spec.type == "null", file = b.spec.type == "file";
  Json j{{"name", b.spec.name},
         {"aliases", Json::array()},
         {"product_name", product_name(b.spec.type)},
         {"block_size", b.spec.block_size},
         {"num_blocks", b.size_bytes / b.spec.block_size},
         {"claimed", !b.subnqn.empty()},
         {"zoned", false},
         {"supported_io_types",
          {{"read", true}, {"write", true}, {"unmap", !null}, {"write_zeroes", true}, {"flush", !null},
           {"reset", false}, {"compare", false}, {"compare_and_write", false}, {"abort", false},
           {"nvme_admin", false}, {"nvme_io", false}}},
         {"driver_specific", Json::object()}};
  if (!b.spec.uuid.empty()) j["uuid"] = b.spec.uuid;
  j["assigned_rate_limits"] = qos_json(b.spec.qos);
  if (!b.subnqn.empty()) {
    j["claim_type"] = "exclusive_write";
    j["driver_specific"]["nvtcp"] = {{"subsystem", b.subnqn}, {"nsid", b.nsid}};
    // Its namespace is taken away and the commands on it are finishing: the bdev is free once
    // they have (LiveConfig::Leaving).
    if (b.leaving) j["driver_specific"]["nvtcp"]["being_removed"] = true;
  }
  if (file) j["driver_specific"]["aio"] = {{"filename", b.spec.path}, {"readonly", false}};
  return j;
}

// The bdev named in params, of type, on its way out of the target (LiveConfig::begin_delete_bdev):
// gone from the table if no namespace had it, else its namespace detached and draining.
std::shared_ptr<target::LiveConfig::Leaving> begin_delete(Target& t, const Json& params, const char* type) {
  Params p(params);
  const std::string name = p.str("name");
  p.done();
  target::BdevTable::Info info;
  if (!t.state().bdevs.find(name, info) || info.spec.type != type)
    throw RpcError(kNoSuchDevice, fmt::format("No such device: no {} bdev named {}", type, name));
  auto leaving = std::make_shared<target::LiveConfig::Leaving>();
  if (std::string err = t.live_config().begin_delete_bdev(name, *leaving); !err.empty())
    throw RpcError(target::busy_error(err) ? kBusy : kInternalError, err);
  return leaving;
}

Json bdev_null_create(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  target::NamespaceConfig nc;
  nc.type = "null";
  nc.name = p.str("name");
  nc.block_size = checked_block_size(p.opt_u64("block_size"), 512);
  nc.size = checked_size(p.u64("num_blocks"), nc.block_size);
  nc.uuid = p.opt_str("uuid").value_or("");
  no_metadata(p);
  p.done();
  create_bdev(t, nc);
  return Json(nc.name);
}

Json bdev_malloc_create(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  target::NamespaceConfig nc;
  nc.type = "ram";
  nc.name = p.opt_str("name").value_or("");
  nc.block_size = checked_block_size(p.opt_u64("block_size"), 512);
  nc.size = checked_size(p.u64("num_blocks"), nc.block_size);
  nc.uuid = p.opt_str("uuid").value_or("");
  p.opt_u64("optimal_io_boundary");
  no_metadata(p);
  p.done();
  if (nc.name.empty()) nc.name = first_free_name(t, "Malloc");
  create_bdev(t, nc);
  return Json(nc.name);
}

// A file or block device; nvtcp's file namespaces go through io_uring either way. Slow: the
// open of a path on a network file system waits for its server.
SlowWork bdev_file_create(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  target::NamespaceConfig nc;
  nc.type = "file";
  nc.name = p.str("name");
  nc.path = p.str("filename");
  nc.block_size = checked_block_size(p.opt_u64("block_size"), 512);
  nc.uuid = p.opt_str("uuid").value_or("");
  if (p.opt_bool("readonly").value_or(false)) throw RpcError(kInvalidArgument, "read-only bdevs are not supported");
  p.opt_bool("fallocate");
  p.done();
  return create_bdev_slowly(t, nc);
}

// Ceph options as SPDK takes them ({"mon_host": "...", ...}), every value a string.
std::vector<std::pair<std::string, std::string>> ceph_options(const Json* config, const char* what) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!config) return out;
  if (!config->is_object()) throw RpcError(kInvalidParams, fmt::format("\"{}\" is an object of Ceph options", what));
  for (const auto& [k, v] : config->items()) {
    if (!v.is_string()) throw RpcError(kInvalidParams, fmt::format("Ceph option {} is not a string", k));
    out.emplace_back(k, v.get<std::string>());
  }
  return out;
}

// Options as save_config and bdev_rbd_get_clusters_info show them: never a key itself ("key"),
// so that what is written names a keyring and holds no secret.
Json shown_options(const std::vector<std::pair<std::string, std::string>>& config) {
  Json out = Json::object();
  for (const auto& [k, v] : config)
    if (k != "key") out[k] = v;
  return out;
}

// A Ceph cluster by name, as ceph-nvmeof registers one on each gateway before its images: the
// client ID, a ceph.conf, a keyring and options. Its RBD bdevs (bdev_rbd_create cluster_name)
// share one rados connection. core_mask (where SPDK pins librbd's threads) is refused rather
// than taken without effect.
Json bdev_rbd_register_cluster(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  backend::RbdSpec c;
  c.cluster_name = p.str("name");
  c.user = p.opt_str("user_id").value_or("");
  c.config = ceph_options(p.opt_json("config_param"), "config_param");
  c.config_file = p.opt_str("config_file").value_or("");
  c.key_file = p.opt_str("key_file").value_or("");
  if (p.opt_str("core_mask")) throw RpcError(kInvalidArgument, "core_mask: librbd's threads are not pinned by nvtcp");
  p.done();
  if (c.cluster_name.empty()) throw RpcError(kInvalidParams, "\"name\" is required");
  if (!t.state().rbd_clusters.add(c))
    throw RpcError(kExists, fmt::format("cluster {} is registered already", c.cluster_name));
  log::info("control: Ceph cluster {} registered{}{}", c.cluster_name, c.config_file.empty() ? "" : " from ",
            c.config_file);
  return Json(c.cluster_name);
}

// The RBD bdevs that connect through cluster name.
std::vector<std::string> bdevs_of_cluster(Target& t, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& b : t.state().bdevs.list())
    if (b.spec.type == "rbd" && b.spec.rbd.cluster_name == name) out.push_back(b.spec.name);
  return out;
}

Json bdev_rbd_unregister_cluster(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string name = p.str("name");
  p.done();
  backend::RbdSpec c;
  if (!t.state().rbd_clusters.find(name, c)) throw RpcError(kNoSuchDevice, fmt::format("No such cluster: {}", name));
  if (auto users = bdevs_of_cluster(t, name); !users.empty())
    throw RpcError(kInvalidArgument,
                   fmt::format("cluster {} is in use by bdev(s) {}: delete them first", name, fmt::join(users, ", ")));
  t.state().rbd_clusters.remove(name);
  log::info("control: Ceph cluster {} unregistered", name);
  return Json(true);
}

Json cluster_json(const backend::RbdSpec& c) {
  Json j{{"cluster_name", c.cluster_name}};
  if (!c.user.empty()) j["user_id"] = c.user;
  if (!c.config.empty()) j["config_param"] = shown_options(c.config);
  if (!c.config_file.empty()) j["config_file"] = c.config_file;
  if (!c.key_file.empty()) j["key_file"] = c.key_file;
  return j;
}

// One cluster (name given) as an object, or every one as an array, as SPDK answers.
Json bdev_rbd_get_clusters_info(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const auto name = p.opt_str("name");
  p.done();
  if (name) {
    backend::RbdSpec c;
    if (!t.state().rbd_clusters.find(*name, c)) throw RpcError(kNoSuchDevice, fmt::format("No such cluster: {}", *name));
    return cluster_json(c);
  }
  Json out = Json::array();
  for (const auto& c : t.state().rbd_clusters.list()) out.push_back(cluster_json(c));
  return out;
}

// A Ceph RBD image, as SPDK's bdev_rbd_create takes it: pool_name/rbd_name of a cluster
// registered by name (cluster_name), or as user_id with Ceph options in "config"
// ({"mon_host": ...}) over the default ceph.conf. The image's size is its own. Slow: the
// connect waits for the cluster's monitors (30 s, Ceph's mount timeout, when none answers).
SlowWork bdev_rbd_create(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  target::NamespaceConfig nc;
  nc.type = "rbd";
  nc.name = p.opt_str("name").value_or("");
  nc.rbd.pool = p.str("pool_name");
  nc.rbd.image = p.str("rbd_name");
  nc.block_size = checked_block_size(p.opt_u64("block_size"), 512);
  nc.rbd.user = p.opt_str("user_id").value_or("");
  nc.rbd.config = ceph_options(p.opt_json("config"), "config");
  nc.rbd.cluster_name = p.opt_str("cluster_name").value_or("");
  if (!nc.rbd.cluster_name.empty() && (!nc.rbd.user.empty() || !nc.rbd.config.empty()))
    throw RpcError(kInvalidArgument, "cluster_name and user_id or config: the registered cluster's settings are used");
  nc.uuid = p.opt_str("uuid").value_or("");
  p.done();
  if (!nc.name.empty()) return create_bdev_slowly(t, nc);
  nc.name = first_free_name(t, "Ceph");
  return create_bdev_slowly(t, nc, "Ceph");
}

// bdev_null_delete, bdev_malloc_delete, bdev_aio_delete, bdev_uring_delete, bdev_rbd_delete:
// each deletes a bdev of its own type (nvtcp's file type serves both aio and uring). One no
// namespace has leaves the table at once; one a namespace has loses it at once and leaves once
// the commands on it are done. Those commands (waiting on the device) and the device's close (an
// RBD image's waits for its cluster, a file's on a network file system for its server) are
// waited for off the RPC thread; the client is answered once they are done.
constexpr char kNullType[] = "null", kRamType[] = "ram", kFileType[] = "file", kRbdType[] = "rbd";
template <const char* Type>
SlowWork bdev_delete_of_type(MethodContext& ctx, const Json& params) {
  return settle_slowly(ctx.target, begin_delete(ctx.target, params, Type), kInternalError);
}

Json bdev_null_resize(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string name = p.str("name");
  const uint64_t mib = p.u64("new_size");  // MiB, as rpc.py sends it
  p.done();
  target::BdevTable::Info info;
  if (!t.state().bdevs.find(name, info) || info.spec.type != "null")
    throw RpcError(kNoSuchDevice, fmt::format("No such device: no null bdev named {}", name));
  if (mib == 0 || mib > (1ull << 40)) throw RpcError(kInvalidArgument, fmt::format("new_size {} MiB is out of range", mib));
  if (std::string err = t.live_config().resize_bdev(name, mib << 20); !err.empty())
    throw RpcError(target::busy_error(err) ? kBusy : kInvalidArgument, err);
  return Json(true);
}

// The image grows on the cluster (SPDK's bdev_rbd_resize: new_size in MiB, larger than now);
// hosts of its namespace get a namespace attribute notice, other gateways of the image see it
// through their header watch. Slow: the resize waits for the cluster. The device is the
// target's, but begin_resize holds it for the worker (the bdev cannot be deleted until
// end_resize), and a device resizes beside the I/O of the reactors.
SlowWork bdev_rbd_resize(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string name = p.str("name");
  const uint64_t mib = p.u64("new_size");
  p.done();
  target::BdevTable::Info info;
  if (!t.state().bdevs.find(name, info) || info.spec.type != "rbd")
    throw RpcError(kNoSuchDevice, fmt::format("No such device: no rbd bdev named {}", name));
  // Whether it grows is the device's to say: the image's size now is the cluster's, which another
  // client may have changed since this gateway last looked.
  if (mib == 0 || mib > (1ull << 40)) throw RpcError(kInvalidArgument, fmt::format("new_size {} MiB is out of range", mib));
  const uint64_t bytes = mib << 20;
  backend::BlockDevice* device = nullptr;
  if (std::string err = t.live_config().begin_resize(name, bytes, device); !err.empty())
    throw RpcError(target::busy_error(err) ? kBusy : kInvalidArgument, err);
  return [&t, name, bytes, device]() -> SlowCommit {
    const bool resized = device->resize(bytes);
    return [&t, name, bytes, resized]() -> Json {
      if (std::string err = t.live_config().end_resize(name, bytes, resized); !err.empty())
        throw RpcError(kInvalidArgument, err);
      return Json(true);
    };
  };
}

// The namespace a bdev serves now (null: none; one leaving serves none, and another namespace
// may have its NSID already). Control path: namespaces change on it alone.
target::Namespace* namespace_of(Target& t, const target::BdevTable::Info& b) {
  if (b.subnqn.empty() || b.leaving) return nullptr;
  const auto sub = t.state().find_subsystem(b.subnqn);
  return sub ? sub->find_namespace(b.nsid) : nullptr;
}

Json bdev_get_bdevs(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  auto name = p.opt_str("name");
  p.opt_u64("timeout");
  p.done();
  Json out = Json::array();
  for (auto b : t.state().bdevs.list()) {
    if (name && b.spec.name != *name) continue;
    // A namespace's device may have grown since (an RBD image resized on the cluster, a file):
    // the size it serves now.
    if (const target::Namespace* ns = namespace_of(t, b)) b.size_bytes = ns->device->size_bytes();
    out.push_back(bdev_json(b));
  }
  if (name && out.empty()) throw RpcError(kNoSuchDevice, fmt::format("No such device: {}", *name));
  return out;
}

// SPDK's I/O statistics of a bdev, in its shape (ceph-nvmeof reads every field): what the hosts'
// commands to the namespaces it served did, counted as each response leaves (IoMetrics), in
// ticks of one nanosecond. Counted at the namespace (commands reach a bdev through one only) and
// kept by the bdev when its namespace is removed, so they run from the bdev's creation, as
// SPDK's do.
Json bdev_iostat_json(const std::string& name, const target::IoTotals& io) {
  Json j{{"name", name},
         {"bytes_read", io.read_bytes},
         {"num_read_ops", io.reads},
         {"bytes_written", io.write_bytes},
         {"num_write_ops", io.writes},
         {"bytes_unmapped", io.unmap_bytes},
         {"num_unmap_ops", io.unmaps},
         {"bytes_copied", io.copy_bytes},
         {"num_copy_ops", io.copies},
         {"read_latency_ticks", io.read_latency_ns},
         {"write_latency_ticks", io.write_latency_ns},
         {"unmap_latency_ticks", io.unmap_latency_ns},
         {"copy_latency_ticks", io.copy_latency_ns},
         {"io_error", Json::object()}};
  auto range = [&j](const char* kind, const target::LatencyRange& r) {
    j[fmt::format("max_{}_latency_ticks", kind)] = r.max_ns;
    j[fmt::format("min_{}_latency_ticks", kind)] = r.min_ns;
  };
  range("read", io.read_range);
  range("write", io.write_range);
  range("unmap", io.unmap_range);
  range("copy", io.copy_range);
  return j;
}

// Rate limits on a bdev, enforced on every reactor for the namespace that has it (QosLimiter):
// SPDK's parameters, each left as it was when not given, 0 for none; its checks.
Json bdev_set_qos_limit(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string name = p.str("name");
  const auto ios = p.opt_u64("rw_ios_per_sec"), rw = p.opt_u64("rw_mbytes_per_sec"), r = p.opt_u64("r_mbytes_per_sec"),
             w = p.opt_u64("w_mbytes_per_sec");
  p.done();
  if (!ios && !rw && !r && !w) throw RpcError(kInvalidArgument, "No rate limits specified");
  if (ios && *ios % 1000)
    throw RpcError(kInvalidArgument, fmt::format("rw_ios_per_sec {} is not a multiple of 1000", *ios));
  for (auto v : {rw, r, w})
    if (v && *v > (1ull << 40)) throw RpcError(kInvalidArgument, fmt::format("{} MB/s is out of range", *v));
  target::BdevTable::Info b;
  if (!t.state().bdevs.find(name, b)) throw RpcError(kNoSuchDevice, fmt::format("No such device: {}", name));
  target::QosLimits q = b.spec.qos;
  if (ios) q.rw_ios_per_sec = *ios;
  if (rw) q.rw_mbytes_per_sec = *rw;
  if (r) q.r_mbytes_per_sec = *r;
  if (w) q.w_mbytes_per_sec = *w;
  if (!t.state().bdevs.set_qos(name, q, b)) throw RpcError(kNoSuchDevice, fmt::format("No such device: {}", name));
  if (target::Namespace* ns = namespace_of(t, b)) ns->qos.set(q);
  log::info("RPC: bdev {} rate limits: {} IO/s, {} MB/s read and write, {} MB/s read, {} MB/s write (0: none)", name,
            q.rw_ios_per_sec, q.rw_mbytes_per_sec, q.r_mbytes_per_sec, q.w_mbytes_per_sec);
  return Json(true);
}

Json bdev_get_iostat(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  auto name = p.opt_str("name");
  // Per SPDK thread: nvtcp's counters are per reactor, but not shown apart (yet): refused rather
  // than answered with the totals under another meaning.
  if (p.opt_bool("per_channel").value_or(false))
    throw RpcError(kInvalidArgument, "per_channel: I/O statistics per reactor are not shown");
  p.done();
  Json bdevs = Json::array();
  for (const auto& b : t.state().bdevs.list()) {
    if (name && b.spec.name != *name) continue;
    target::IoTotals io = b.past_io;
    if (const target::Namespace* ns = namespace_of(t, b)) target::add_totals(io, ns->metrics.totals());
    bdevs.push_back(bdev_iostat_json(b.spec.name, io));
  }
  if (name && bdevs.empty()) throw RpcError(kNoSuchDevice, fmt::format("No such device: {}", *name));
  const uint64_t now =
      uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
  return Json{{"tick_rate", 1'000'000'000ull}, {"ticks", now}, {"bdevs", bdevs}};
}

}  // namespace

// What save_config writes for the bdevs: one create per device, those of namespaces first (by
// subsystem, then NSID), then the others in creation order: the order a target loading it
// makes them in, so that saving again writes the same.
Json bdev_config(Target& t) {
  Json out = Json::array();
  // The clusters first: a gateway restarted from the file must have them before its images
  // (ceph-nvmeof's users found SPDK's save_config leaving them out).
  for (const auto& c : t.state().rbd_clusters.list()) {
    Json p = cluster_json(c);
    p["name"] = p["cluster_name"];
    p.erase("cluster_name");
    out.push_back(Json{{"method", "bdev_rbd_register_cluster"}, {"params", p}});
  }
  std::vector<target::BdevTable::Info> ordered;
  for (const auto& s : t.state().subsystems())
    for (const auto* ns : s->namespaces()) {
      target::BdevTable::Info b;
      if (t.state().bdevs.find(ns->name, b)) ordered.push_back(b);
    }
  for (const auto& b : t.state().bdevs.list())
    if (b.subnqn.empty() || b.leaving) ordered.push_back(b);  // leaving its namespace: free once settled
  for (const auto& b : ordered) {
    Json p{{"name", b.spec.name}, {"block_size", b.spec.block_size}};
    const char* method = "bdev_aio_create";
    if (b.spec.type == "file") {
      p["filename"] = b.spec.path;
    } else if (b.spec.type == "rbd") {
      method = "bdev_rbd_create";
      p["pool_name"] = b.spec.rbd.pool;
      p["rbd_name"] = b.spec.rbd.image;
      if (!b.spec.rbd.cluster_name.empty()) {
        p["cluster_name"] = b.spec.rbd.cluster_name;  // registered before it (below)
      } else {
        if (!b.spec.rbd.user.empty()) p["user_id"] = b.spec.rbd.user;
        if (Json config = shown_options(b.spec.rbd.config); !config.empty()) p["config"] = config;
      }
    } else {
      method = b.spec.type == "null" ? "bdev_null_create" : "bdev_malloc_create";
      p["num_blocks"] = b.size_bytes / b.spec.block_size;
    }
    if (!b.spec.uuid.empty()) p["uuid"] = b.spec.uuid;
    out.push_back(Json{{"method", method}, {"params", p}});
    if (b.spec.qos.any()) {
      Json q = qos_json(b.spec.qos);
      q["name"] = b.spec.name;
      out.push_back(Json{{"method", "bdev_set_qos_limit"}, {"params", q}});
    }
  }
  return out;
}

std::span<const MethodEntry> bdev_methods() {
  static constexpr MethodEntry kMethods[] = {
    {"bdev_null_create", bdev_null_create},
    {"bdev_malloc_create", bdev_malloc_create},
    {"bdev_rbd_register_cluster", bdev_rbd_register_cluster},
    {"bdev_rbd_unregister_cluster", bdev_rbd_unregister_cluster},
    {"bdev_rbd_get_clusters_info", bdev_rbd_get_clusters_info},
    {"bdev_get_iostat", bdev_get_iostat},
    {"bdev_set_qos_limit", bdev_set_qos_limit},
    {"bdev_null_resize", bdev_null_resize},
    {"bdev_get_bdevs", bdev_get_bdevs},
  };
  return kMethods;
}

std::span<const SlowMethodEntry> bdev_slow_methods() {
  static constexpr SlowMethodEntry kMethods[] = {
    {"bdev_aio_create", bdev_file_create},
    {"bdev_uring_create", bdev_file_create},
    {"bdev_rbd_create", bdev_rbd_create},
    {"bdev_rbd_resize", bdev_rbd_resize},
    {"bdev_null_delete", bdev_delete_of_type<kNullType>},
    {"bdev_malloc_delete", bdev_delete_of_type<kRamType>},
    {"bdev_aio_delete", bdev_delete_of_type<kFileType>},
    {"bdev_uring_delete", bdev_delete_of_type<kFileType>},
    {"bdev_rbd_delete", bdev_delete_of_type<kRbdType>},
  };
  return kMethods;
}

}  // namespace nvtcp::control

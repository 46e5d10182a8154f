// SPDX-License-Identifier: Apache-2.0
// A configuration in SPDK's save_config shape ({"subsystems": [{"subsystem": "bdev", "config":
// [{"method", "params"}, ...]}, {"subsystem": "nvmf", ...}]}), as nvmf_tgt and nvtcp's own
// save_config write it, read into a TargetConfig: the keyring, bdev and nvmf methods nvtcp has
// are replayed in order (the keyring's first, as save_config writes them, so that hosts find
// the keys they name); the rest (SPDK's framework, sock, accel, iobuf options) have no meaning
// here and are listed in one log line.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "target/bdevs.hpp"
#include "target/config.hpp"
#include "util/log.hpp"

namespace nvtcp::target {
namespace {

using Json = nlohmann::json;

const Json& params_of(const Json& entry) {
  static const Json empty = Json::object();
  auto it = entry.find("params");
  return it == entry.end() || !it->is_object() ? empty : *it;
}

uint64_t u64(const Json& p, const char* key, const std::string& method) {
  auto it = p.find(key);
  if (it == p.end() || !it->is_number_unsigned())
    throw std::runtime_error(fmt::format("{}: \"{}\" must be a non-negative integer", method, key));
  return it->get<uint64_t>();
}

std::string str(const Json& p, const char* key, const std::string& method) {
  auto it = p.find(key);
  if (it == p.end() || !it->is_string()) throw std::runtime_error(fmt::format("{}: \"{}\" must be a string", method, key));
  return it->get<std::string>();
}

// "ADDRESS:PORT" of a listen_address, adding the listener to the target when it is new.
std::string listener_of(const Json& p, const std::string& method, TargetConfig& cfg) {
  auto it = p.find("listen_address");
  if (it == p.end() || !it->is_object()) throw std::runtime_error(fmt::format("{}: \"listen_address\" is missing", method));
  std::string trtype = it->value("trtype", std::string("TCP"));
  for (char& c : trtype) c = char(std::toupper(c));
  if (trtype != "TCP") throw std::runtime_error(fmt::format("{}: transport {} (nvtcp serves TCP)", method, trtype));
  const std::string addr = str(*it, "traddr", method);
  const std::string svc = str(*it, "trsvcid", method);
  ListenerConfig l;
  l.address = addr;
  l.port = uint16_t(std::stoul(svc));
  l.tls_required = p.value("secure_channel", false);
  const std::string name = addr.find(':') != std::string::npos ? fmt::format("[{}]:{}", addr, svc) : fmt::format("{}:{}", addr, svc);
  if (listener_index(cfg, name) < 0) cfg.listeners.push_back(l);
  return name;
}

// The methods of a save_config file replayed in order into a TargetConfig, one function each;
// each throws std::runtime_error on what it cannot take.
class SpdkConfigReplay {
 public:
  explicit SpdkConfigReplay(TargetConfig& cfg) : cfg_(cfg) {}

  void replay(const std::string& method, const Json& p) {
    if (method == "bdev_null_create" || method == "bdev_malloc_create" || method == "bdev_aio_create" ||
        method == "bdev_uring_create" || method == "bdev_rbd_create") {
      create_bdev(method, p);
    } else if (method == "bdev_set_qos_limit") {
      set_qos(method, p);
    } else if (method == "bdev_rbd_register_cluster") {
      register_cluster(method, p);
    } else if (method == "keyring_file_add_key") {
      add_key(method, p);
    } else if (method == "nvmf_create_transport") {
      create_transport(method, p);
    } else if (method == "nvmf_create_subsystem") {
      create_subsystem(method, p);
    } else if (method == "nvmf_subsystem_add_host") {
      add_host(method, p);
    } else if (method == "nvmf_subsystem_add_ns") {
      add_ns(method, p);
    } else if (method == "nvmf_ns_add_host") {
      ns_add_host(method, p);
    } else if (method == "nvmf_subsystem_add_listener") {
      add_listener(method, p);
    } else if (method == "nvmf_subsystem_listener_set_ana_state") {
      listener_set_ana_state(method, p);
    } else if (!method.empty()) {
      ignored_.push_back(method);
    }
  }

  // The bdevs no namespace took go to the configuration; the methods skipped are logged.
  void finish() {
    for (const auto& name : bdev_order_)
      if (auto it = bdevs_.find(name); it != bdevs_.end()) cfg_.bdevs.push_back(it->second);
    if (!ignored_.empty()) {
      std::sort(ignored_.begin(), ignored_.end());
      ignored_.erase(std::unique(ignored_.begin(), ignored_.end()), ignored_.end());
      std::string list;
      for (const auto& m : ignored_) list += (list.empty() ? "" : ", ") + m;
      log::info("configuration: SPDK methods with no meaning for nvtcp, skipped: {}", list);
    }
  }

 private:
  SubsystemConfig& find_sub(const std::string& nqn, const std::string& method) {
    for (auto& s : cfg_.subsystems)
      if (s.nqn == nqn) return s;
    throw std::runtime_error(fmt::format("{}: no subsystem {} (nvmf_create_subsystem comes first)", method, nqn));
  }

  void create_bdev(const std::string& method, const Json& p) {
    NamespaceConfig nc;
    nc.name = str(p, "name", method);
    nc.block_size = uint32_t(p.value("block_size", 512u));
    if (method == "bdev_null_create" || method == "bdev_malloc_create") {
      nc.type = method == "bdev_null_create" ? "null" : "ram";
      nc.size = u64(p, "num_blocks", method) * nc.block_size;
    } else if (method == "bdev_rbd_create") {
      nc.type = "rbd";
      nc.rbd.pool = str(p, "pool_name", method);
      nc.rbd.image = str(p, "rbd_name", method);
      if (p.contains("user_id")) nc.rbd.user = str(p, "user_id", method);
      // Its settings are the cluster's, registered before it in the file (finalize_config checks).
      if (p.contains("cluster_name")) nc.rbd.cluster_name = str(p, "cluster_name", method);
      // Held by name: a range-for over a temporary's items() would walk a destroyed object.
      const Json config = p.value("config", Json::object());
      for (const auto& [k, v] : config.items())
        if (v.is_string()) nc.rbd.config.emplace_back(k, v.get<std::string>());
    } else {
      nc.type = "file";
      nc.path = str(p, "filename", method);
    }
    // The device's own identity, which its namespaces show unless they are given others.
    if (p.contains("uuid") && p["uuid"].is_string() && !canonical_uuid(p["uuid"].get<std::string>(), nc.uuid))
      throw std::runtime_error(fmt::format("{}: bdev {}: uuid '{}' is not a UUID", method, nc.name,
                                           p["uuid"].get<std::string>()));
    if (!bdevs_.emplace(nc.name, nc).second) throw std::runtime_error(fmt::format("bdev {} twice", nc.name));
    bdev_order_.push_back(nc.name);
  }

  void register_cluster(const std::string& method, const Json& p) {
    backend::RbdSpec c;
    c.cluster_name = str(p, "name", method);
    if (p.contains("user_id")) c.user = str(p, "user_id", method);
    if (p.contains("config_file")) c.config_file = str(p, "config_file", method);
    if (p.contains("key_file")) c.key_file = str(p, "key_file", method);
    const Json config = p.value("config_param", Json::object());
    for (const auto& [k, v] : config.items())
      if (v.is_string()) c.config.emplace_back(k, v.get<std::string>());
    cfg_.rbd_clusters.push_back(c);
  }

  // With SPDK's checks (an absolute path, a file only its owner can read): a key file whose mode
  // has changed since it was saved stops the load rather than serve hosts without their key.
  void add_key(const std::string& method, const Json& p) {
    const std::string name = str(p, "name", method);
    std::string why;
    if (cfg_.keyring->add_file_key(name, str(p, "path", method), why) != 0)
      throw std::runtime_error(fmt::format("{}: key '{}': {}", method, name, why));
  }

  void create_transport(const std::string& method, const Json& p) {
    if (p.contains("max_queue_depth")) cfg_.max_queue_depth = uint32_t(u64(p, "max_queue_depth", method));
    if (p.contains("in_capsule_data_size")) cfg_.in_capsule_data = uint32_t(u64(p, "in_capsule_data_size", method));
    if (p.contains("max_io_size")) cfg_.mdts_bytes = uint32_t(u64(p, "max_io_size", method));
    if (p.contains("max_io_qpairs_per_ctrlr"))
      cfg_.max_io_queues = uint32_t(std::max<uint64_t>(1, u64(p, "max_io_qpairs_per_ctrlr", method) - 1));
  }

  void create_subsystem(const std::string& method, const Json& p) {
    SubsystemConfig sc;
    sc.nqn = str(p, "nqn", method);
    sc.serial = p.value("serial_number", std::string());
    sc.model = p.value("model_number", sc.model);
    sc.allow_any_host = p.value("allow_any_host", false);  // SPDK's default
    sc.max_namespaces = uint32_t(p.value("max_namespaces", 0u));
    // Past 16 bits is out of range, not cut to fit; finalize_config checks the range itself.
    if (p.contains("min_cntlid")) sc.min_cntlid = uint16_t(std::min<uint64_t>(u64(p, "min_cntlid", method), 0xFFFF));
    if (p.contains("max_cntlid")) sc.max_cntlid = uint16_t(std::min<uint64_t>(u64(p, "max_cntlid", method), 0xFFFF));
    sc.ana_reporting = p.value("ana_reporting", false);
    cfg_.subsystems.push_back(sc);
  }

  void add_host(const std::string& method, const Json& p) {
    SubsystemConfig& sc = find_sub(str(p, "nqn", method), method);
    Json host{{"nqn", str(p, "host", method)}};
    if (p.contains("psk")) host["psk"] = p["psk"];
    if (p.contains("dhchap_key")) host["dhchap_key"] = p["dhchap_key"];
    if (p.contains("dhchap_ctrlr_key")) host["dhchap_ctrl_key"] = p["dhchap_ctrlr_key"];
    if (p.contains("allow_plain")) host["allow_plain"] = p["allow_plain"];
    read_host(sc, host, cfg_.keyring);
  }

  void add_ns(const std::string& method, const Json& p) {
    SubsystemConfig& sc = find_sub(str(p, "nqn", method), method);
    const Json& ns = p.value("namespace", Json::object());
    const std::string name = str(ns, "bdev_name", method);
    auto it = bdevs_.find(name);
    if (it == bdevs_.end()) throw std::runtime_error(fmt::format("{}: no bdev {} (or another namespace has it)", method, name));
    NamespaceConfig nc = it->second;
    bdevs_.erase(it);
    nc.nsid = uint32_t(ns.value("nsid", 0u));
    nc.nguid = ns.value("nguid", std::string());
    nc.eui64 = ns.value("eui64", std::string());
    const std::string bdev_uuid = nc.uuid;
    nc.uuid = ns.value("uuid", std::string());
    // What the namespace does not give comes from its device's UUID, as when it is added live;
    // the device keeps its own.
    if (!bdev_uuid.empty()) inherit_identifiers(bdev_uuid, nc);
    nc.device_uuid = bdev_uuid;
    nc.anagrpid = uint32_t(ns.value("anagrpid", 0u));
    nc.no_auto_visible = ns.value("no_auto_visible", false);
    sc.namespaces.push_back(nc);
  }

  // A bdev's rate limits: after its bdev_*_create, before a namespace takes it.
  void set_qos(const std::string& method, const Json& p) {
    const std::string name = str(p, "name", method);
    auto it = bdevs_.find(name);
    if (it == bdevs_.end()) throw std::runtime_error(fmt::format("{}: no bdev {} (its bdev_*_create comes first)", method, name));
    QosLimits& q = it->second.qos;
    q.rw_ios_per_sec = p.value("rw_ios_per_sec", q.rw_ios_per_sec);
    q.rw_mbytes_per_sec = p.value("rw_mbytes_per_sec", q.rw_mbytes_per_sec);
    q.r_mbytes_per_sec = p.value("r_mbytes_per_sec", q.r_mbytes_per_sec);
    q.w_mbytes_per_sec = p.value("w_mbytes_per_sec", q.w_mbytes_per_sec);
  }

  // A namespace added with no_auto_visible, seen by one more host.
  void ns_add_host(const std::string& method, const Json& p) {
    SubsystemConfig& sc = find_sub(str(p, "nqn", method), method);
    const uint32_t nsid = uint32_t(p.value("nsid", 0u));
    const std::string host = str(p, "host", method);
    for (auto& nc : sc.namespaces)
      if (nc.nsid == nsid) {
        if (!nc.no_auto_visible)
          throw std::runtime_error(fmt::format("{}: namespace {} of {} is visible to every host", method, nsid, sc.nqn));
        nc.visible_hosts.push_back(host);
        return;
      }
    throw std::runtime_error(fmt::format("{}: no namespace {} in {} (nvmf_subsystem_add_ns comes first)", method, nsid, sc.nqn));
  }

  void add_listener(const std::string& method, const Json& p) {
    const std::string nqn = str(p, "nqn", method);
    if (!listeners_replaced_) {
      cfg_.listeners.clear();  // the file's listeners, not the command line's default
      listeners_replaced_ = true;
    }
    const std::string name = listener_of(p, method, cfg_);
    if (nqn == "nqn.2014-08.org.nvmexpress.discovery") {
      // nvtcp serves discovery on every listener, and on one port of its own besides.
      cfg_.discovery_port = uint16_t(std::stoul(name.substr(name.rfind(':') + 1)));
      cfg_.listeners.erase(cfg_.listeners.begin() + listener_index(cfg_, name));
    } else {
      find_sub(nqn, method).listeners.push_back(name);
    }
  }

  void listener_set_ana_state(const std::string& method, const Json& p) {
    // A state save_config wrote for a listener added before it in the file.
    SubsystemConfig& sc = find_sub(str(p, "nqn", method), method);
    SubsystemConfig::AnaSetting a;
    a.listener = listener_of(p, method, cfg_);
    a.anagrpid = uint32_t(p.value("anagrpid", 0u));
    const std::string state = str(p, "ana_state", method);
    if (!nvme::ana_state_from_name(state, a.state))
      throw std::runtime_error(fmt::format("{}: \"{}\" is not an ANA state", method, state));
    sc.ana_states.push_back(a);
  }

  TargetConfig& cfg_;
  std::map<std::string, NamespaceConfig> bdevs_;  // by name, until a namespace takes one
  std::vector<std::string> bdev_order_;
  std::vector<std::string> ignored_;
  bool listeners_replaced_ = false;
};

}  // namespace

bool is_spdk_config(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("subsystems") || !j["subsystems"].is_array()) return false;
  for (const auto& s : j["subsystems"])
    if (!s.is_object() || !s.contains("subsystem")) return false;
  return true;
}

std::string load_spdk_config(const nlohmann::json& j, TargetConfig& cfg) {
  SpdkConfigReplay replay(cfg);
  try {
    cfg.subsystems.clear();
    cfg.keyring = std::make_shared<Keyring>();  // the file's keys only
    cfg.discovery_port = 0;  // unless the file gives the discovery subsystem a listener
    for (const auto& group : j["subsystems"]) {
      const auto& config = group.value("config", Json::array());
      if (!config.is_array()) continue;
      for (const auto& entry : config) replay.replay(entry.value("method", std::string()), params_of(entry));
    }
  } catch (const std::exception& e) {
    return fmt::format("SPDK-style configuration: {}", e.what());
  }
  replay.finish();
  return {};
}

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
#include "target/config.hpp"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <set>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/block_device.hpp"
#include "wire/auth.hpp"
#include "util/zeros.hpp"

namespace nvtcp::target {

// A NULL namespace sends every read it accepts from the shared zero region.
static_assert(kZeroBytesLen >= kMaxMdtsBytes, "the zero region must cover the largest MDTS");

namespace {
// A JSON integer that must fit T: a value that would be cut to fit (70000 for a port,
// 2^32 for a 32-bit count) is an error, not a different setting.
template <class T>
T int_field(const nlohmann::json& j, const char* key, T dflt) {
  if (!j.contains(key)) return dflt;
  const auto& v = j.at(key);
  const bool fits = std::is_signed_v<T>
                        ? v.is_number_integer() && v.get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
                              v.get<int64_t>() <= int64_t(std::numeric_limits<T>::max())
                        : v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max());
  if (!fits)
    throw std::runtime_error(fmt::format("'{}' must be an integer from {} to {} (got {})", key,
                                         std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), v.dump()));
  return v.get<T>();
}

uint64_t size_field(const nlohmann::json& j, const char* key, uint64_t dflt) {
  if (!j.contains(key)) return dflt;
  const auto& v = j.at(key);
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  uint64_t out = 0;
  if (!v.is_string() || !backend::parse_size(v.get<std::string>(), out))
    throw std::runtime_error(fmt::format("'{}' must be a size like 1G or a byte count", key));
  return out;
}
uint32_t size32_field(const nlohmann::json& j, const char* key, uint32_t dflt) {
  uint64_t v = size_field(j, key, dflt);
  if (v > std::numeric_limits<uint32_t>::max())
    throw std::runtime_error(fmt::format("'{}' must be below 4G (got {})", key, v));
  return uint32_t(v);
}

// Every numeric setting's range, checked before anything is built from it. The reasons
// are what breaks outside it.
std::string check_ranges(const TargetConfig& cfg) {
  struct Range {
    const char* name;
    uint64_t value, min, max;
    const char* why;
  };
  const Range ranges[] = {
      {"cores", cfg.cores, 1, 256, "reactor threads"},
      {"max_h2c_data", cfg.max_h2c_data, 4096, 16u << 20, "MAXH2CDATA, at least 4 KiB as NVMe/TCP requires"},
      {"in_capsule_data", cfg.in_capsule_data, 0, 1u << 20, "IOCCSZ counts 16-byte units"},
      {"max_queue_depth", cfg.max_queue_depth, 2, 65535,
       "SQSIZE is a 16-bit 0's based count and the queue's head index is 16 bits"},
      {"max_io_queues", cfg.max_io_queues, 1, 1024, "each controller keeps per-queue state for all of them"},
      {"max_r2t_per_command", cfg.max_r2t_per_command, 1, 4, "R2T PDUs each write keeps room for"},
      {"mdts_bytes", cfg.mdts_bytes, 4096, kMaxMdtsBytes, "MDTS is a power of two of 4 KiB pages"},
      {"icreq_timeout_ms", cfg.icreq_timeout_ms, 1, 3600000, "at most an hour"},
      {"h2c_data_timeout_ms", cfg.h2c_data_timeout_ms, 0, 86400000, "0 = never; at most a day"},
      {"send_timeout_ms", cfg.send_timeout_ms, 0, 86400000, "0 = never; at most a day"},
      {"discovery_kato_ms", cfg.discovery_kato_ms, 0, 3600000, "0 = discovery sessions may stay forever"},
      {"max_connections", cfg.max_connections, 0, 1u << 20, "0 = no limit"},
      {"max_connections_per_address", cfg.max_connections_per_address, 0, 1u << 20, "0 = no limit"},
      {"max_connections_per_host", cfg.max_connections_per_host, 0, 1u << 20, "0 = no limit"},
      {"max_send_queue_bytes", cfg.max_send_queue_bytes, 0, 1ull << 30, "0 = no limit"},
      {"send_buffer_budget_bytes", cfg.send_buffer_budget_bytes, 0, 1ull << 40, "0 = a quarter of tcp_mem's pressure point"},
      {"address_send_buffer_bytes", cfg.address_send_buffer_bytes, 0, 1ull << 40, "0 = a quarter of the target's budget"},
      {"min_send_buffer_bytes", cfg.min_send_buffer_bytes, 4096, 1u << 30, "the least SO_SNDBUF a connection gets"},
      {"max_registrants_per_namespace", cfg.max_registrants_per_namespace, 1, 65535,
       "Reservation Report counts registrants in 16 bits"},
      {"sqpoll_idle_ms", cfg.sqpoll_idle_ms, 0, 60000, "at most a minute"},
      {"send_zc_threshold", cfg.send_zc_threshold, 0, 1u << 30, "0 = off"},
      {"socket_buffer_bytes", cfg.socket_buffer_bytes, 0, 1u << 30,
       "0 = the defaults (receive 4 MiB, send 512 KiB); the kernel also caps it at net.core.rmem_max and wmem_max"},
      {"send_buffer_bytes", cfg.send_buffer_bytes.value_or(0), 0, 1u << 30,
       "0 = the kernel's autotuning; the kernel also caps it at net.core.wmem_max"},
  };
  for (const Range& r : ranges) {
    if (r.value < r.min || r.value > r.max)
      return fmt::format("{} must be from {} to {} ({}); got {}", r.name, r.min, r.max, r.why, r.value);
  }
  if (cfg.in_capsule_data % 16) return fmt::format("in_capsule_data must be a multiple of 16 (IOCCSZ counts 16-byte units); got {}", cfg.in_capsule_data);
  if (cfg.mdts_bytes & (cfg.mdts_bytes - 1)) return fmt::format("mdts_bytes must be a power of two; got {}", cfg.mdts_bytes);
  if (cfg.sqpoll_cpu < -1 || cfg.sqpoll_cpu >= CPU_SETSIZE)
    return fmt::format("sqpoll_cpu must be -1 (unpinned) or a CPU from 0 to {}; got {}", CPU_SETSIZE - 1, cfg.sqpoll_cpu);
  for (int cpu : cfg.cpus)
    if (cpu < 0 || cpu >= CPU_SETSIZE) return fmt::format("cpus: {} is not a CPU number (0 to {})", cpu, CPU_SETSIZE - 1);
  return {};
}

// A key field of a host: the name of a keyring key, the key itself or "@FILE"; parse checks
// it. A name is looked up first: no key text is a valid name (both interchange formats hold ':'
// after their first character). A keyring key's file is read and parsed here as a check only:
// the host holds the key by reference, read again at each use. Errors name the field, the host
// and a keyring key's name, never the key.
template <class Key>
HostKey<Key> read_key(const nlohmann::json& h, const char* field, const std::string& hostnqn,
                      typename HostKey<Key>::Parse parse, const std::shared_ptr<const Keyring>& keyring) {
  if (!h.contains(field)) return {};
  if (!h[field].is_string()) throw std::runtime_error(fmt::format("host {}: {} must be a string", hostnqn, field));
  const std::string& value = h[field].get_ref<const std::string&>();
  auth::SecretString text;
  std::string err;
  auto key = std::make_shared<Key>();
  if (keyring && keyring->find(value)) {
    KeyringRef ref;
    if (!keyring->read(value, text, ref, err) || !parse(text.view(), *key, err))
      throw std::runtime_error(fmt::format("host {}: {}: keyring key '{}': {}", hostnqn, field, value, err));
    return HostKey<Key>(keyring, std::move(ref), parse);
  }
  if (!auth::read_key_value(value, text, err) || !parse(text.view(), *key, err)) {
    // Not a name the keyring has, nor a key: the value is not repeated (it may be a key cut short).
    if (keyring) err += " (nor is it the name of a key in the keyring: keyring_file_add_key adds one)";
    throw std::runtime_error(fmt::format("host {}: {}: {}", hostnqn, field, err));
  }
  return HostKey<Key>(std::move(key));
}

// An rbd namespace's image and cluster: "pool", "image", and optionally "ceph_conf" (a
// ceph.conf), "user" (the client ID), "key_file" (a keyring) and "config" ({"mon_host": ...}:
// Ceph options, as bdev_rbd_create's "config" gives them).
void read_rbd(const nlohmann::json& n, backend::RbdSpec& rbd) {
  rbd.pool = n.value("pool", "");
  rbd.image = n.value("image", "");
  rbd.cluster_name = n.value("cluster", "");  // one of "ceph_clusters": its settings, not these
  rbd.config_file = n.value("ceph_conf", "");
  rbd.user = n.value("user", "");
  rbd.key_file = n.value("key_file", "");
  if (n.contains("config")) {
    if (!n.at("config").is_object()) throw std::runtime_error("an rbd namespace's \"config\" is an object of Ceph options");
    for (const auto& [k, v] : n.at("config").items()) {
      if (!v.is_string()) throw std::runtime_error(fmt::format("rbd option {} must be a string", k));
      rbd.config.emplace_back(k, v.get<std::string>());
    }
  }
}

// States listeners start in: [{"listener": "ADDRESS:PORT", "anagrpid": 1, "state": "non_optimized"}]
// (anagrpid 0 or none: every group), as save_config's nvmf_subsystem_listener_set_ana_state.
void read_ana_states(const nlohmann::json& s, SubsystemConfig& sc) {
  for (const auto& a : s.value("ana_states", nlohmann::json::array())) {
    SubsystemConfig::AnaSetting set;
    set.listener = a.at("listener").get<std::string>();
    set.anagrpid = int_field(a, "anagrpid", 0u);
    if (!nvme::ana_state_from_name(a.value("state", ""), set.state))
      throw std::runtime_error(fmt::format("subsystem {}: ANA state '{}' is not optimized, non_optimized or inaccessible",
                                           sc.nqn, a.value("state", "")));
    sc.ana_states.push_back(set);
  }
}

// Ceph clusters by name (bdev_rbd_register_cluster's): [{"name": ..., "ceph_conf", "user",
// "key_file", "config": {...}}]; an rbd namespace names one with "cluster".
void read_ceph_clusters(const nlohmann::json& j, TargetConfig& cfg) {
  for (const auto& c : j.value("ceph_clusters", nlohmann::json::array())) {
    backend::RbdSpec cluster;
    read_rbd(c, cluster);
    cluster.cluster_name = c.at("name").get<std::string>();
    cfg.rbd_clusters.push_back(cluster);
  }
}

}  // namespace

// One "hosts" entry: a host NQN, or {"nqn": ..., "dhchap_key": ..., "dhchap_ctrl_key": ...,
// "psk": ..., "allow_plain": ...}.
void read_host(SubsystemConfig& sc, const nlohmann::json& h, std::shared_ptr<const Keyring> keyring) {
  if (h.is_string()) {
    sc.hosts.push_back(h.get<std::string>());
    return;
  }
  if (!h.is_object() || !h.contains("nqn") || !h["nqn"].is_string())
    throw std::runtime_error(fmt::format("subsystem {}: a hosts entry is a host NQN or an object with \"nqn\"", sc.nqn));
  const std::string nqn = h["nqn"].get<std::string>();
  if (std::string err = check_nqn(nqn, "host NQN"); !err.empty()) throw std::runtime_error(err);
  for (const auto& [k, v] : h.items())
    if (k != "nqn" && k != "dhchap_key" && k != "dhchap_ctrl_key" && k != "psk" && k != "dhchap_hash" &&
        k != "dhchap_dhgroup" && k != "allow_plain")
      throw std::runtime_error(
          fmt::format("host {}: unknown key \"{}\" (nqn, dhchap_key, dhchap_ctrl_key, dhchap_hash, dhchap_dhgroup, "
                      "psk, allow_plain)",
                      nqn, k));
  HostKeys keys;
  keys.dhchap = read_key<auth::DhchapSecret>(h, "dhchap_key", nqn, auth::parse_dhchap_secret, keyring);
  keys.dhchap_ctrl = read_key<auth::DhchapSecret>(h, "dhchap_ctrl_key", nqn, auth::parse_dhchap_secret, keyring);
  keys.psk = read_key<auth::ConfiguredPsk>(h, "psk", nqn, auth::parse_tls_psk, keyring);
  if (h.contains("dhchap_hash")) {
    const std::string v = h["dhchap_hash"].is_string() ? h["dhchap_hash"].get<std::string>() : "";
    uint8_t id = 0;
    for (uint8_t i = 1; i <= 3; ++i)
      if (v == wire::dhchap_hash_name(i) || "hmac(" + v + ")" == wire::dhchap_hash_name(i)) id = i;
    if (!id)
      throw std::runtime_error(fmt::format("host {}: dhchap_hash \"{}\" is not sha256, sha384 or sha512", nqn, v));
    keys.dhchap_hashes = {id};
  }
  if (h.contains("dhchap_dhgroup")) {
    const std::string v = h["dhchap_dhgroup"].is_string() ? h["dhchap_dhgroup"].get<std::string>() : "";
    int id = -1;
    for (uint8_t i = 0; i <= 5; ++i)
      if (v == wire::dh_group_name(i)) id = i;
    if (id < 0)
      throw std::runtime_error(
          fmt::format("host {}: dhchap_dhgroup \"{}\" is not null or ffdhe2048/3072/4096/6144/8192", nqn, v));
    keys.dhchap_groups = {uint8_t(id)};
  }
  if (h.contains("allow_plain")) {
    if (!h["allow_plain"].is_boolean())
      throw std::runtime_error(fmt::format("host {}: allow_plain is true or false", nqn));
    keys.allow_plain = h["allow_plain"].get<bool>();
    if (keys.allow_plain && !keys.psk)
      throw std::runtime_error(
          fmt::format("host {}: allow_plain is for a host with a psk (one without is admitted "
                      "on plain listeners anyway)",
                      nqn));
  }
  if (keys.dhchap_ctrl && !keys.dhchap)
    throw std::runtime_error(fmt::format("host {}: dhchap_ctrl_key needs dhchap_key (the host authenticates first)", nqn));
  sc.hosts.push_back(nqn);
  if (keys.dhchap || keys.psk) sc.host_keys[nqn] = std::move(keys);
}

std::string load_config_file(const std::string& path, TargetConfig& cfg) {
  std::ifstream in(path);
  if (!in) return fmt::format("cannot read config file '{}'", path);
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (is_spdk_config(j)) return load_spdk_config(j, cfg);
    if (j.contains("listeners")) {
      cfg.listeners.clear();
      for (const auto& l : j.at("listeners")) {
        ListenerConfig lc;
        lc.address = l.value("address", lc.address);
        lc.port = int_field(l, "port", lc.port);
        const std::string tls = l.value("tls", std::string("none"));
        if (tls != "none" && tls != "required")
          return fmt::format("listener {}:{}: \"tls\" is \"required\" or \"none\", not \"{}\"", lc.address, lc.port,
                             tls);
        lc.tls_required = tls == "required";
        if (l.contains("ktls") && !l.at("ktls").is_boolean())
          return fmt::format("listener {}:{}: \"ktls\" is true or false", lc.address, lc.port);
        lc.ktls = l.value("ktls", lc.ktls);
        cfg.listeners.push_back(lc);
      }
    }
    if (j.contains("tls_psk_derivation")) {
      const std::string d = j.at("tls_psk_derivation").is_string() ? j.at("tls_psk_derivation").get<std::string>() : "";
      if (d == "both")
        cfg.tls_psk_derivations = PskDerivations::Both;
      else if (d == "rfc8446")
        cfg.tls_psk_derivations = PskDerivations::Rfc8446;
      else if (d == "libnvme")
        cfg.tls_psk_derivations = PskDerivations::Libnvme;
      else
        return fmt::format("config '{}': \"tls_psk_derivation\" is \"both\", \"rfc8446\" or \"libnvme\"", path);
    }
    cfg.discovery_port = int_field(j, "discovery_port", cfg.discovery_port);
    cfg.cores = int_field(j, "cores", cfg.cores);
    cfg.allow_hdgst = j.value("hdgst", cfg.allow_hdgst);
    cfg.allow_ddgst = j.value("ddgst", cfg.allow_ddgst);
    cfg.max_h2c_data = size32_field(j, "max_h2c_data", cfg.max_h2c_data);
    cfg.in_capsule_data = size32_field(j, "in_capsule_data", cfg.in_capsule_data);
    cfg.mdts_bytes = size32_field(j, "mdts_bytes", cfg.mdts_bytes);
    cfg.max_queue_depth = int_field(j, "max_queue_depth", cfg.max_queue_depth);
    cfg.max_io_queues = int_field(j, "max_io_queues", cfg.max_io_queues);
    cfg.icreq_timeout_ms = int_field(j, "icreq_timeout_ms", cfg.icreq_timeout_ms);
    cfg.h2c_data_timeout_ms = int_field(j, "h2c_data_timeout_ms", cfg.h2c_data_timeout_ms);
    cfg.discovery_kato_ms = int_field(j, "discovery_kato_ms", cfg.discovery_kato_ms);
    cfg.send_timeout_ms = int_field(j, "send_timeout_ms", cfg.send_timeout_ms);
    cfg.max_connections = int_field(j, "max_connections", cfg.max_connections);
    cfg.max_connections_per_address = int_field(j, "max_connections_per_address", cfg.max_connections_per_address);
    cfg.max_connections_per_host = int_field(j, "max_connections_per_host", cfg.max_connections_per_host);
    cfg.max_buffer_memory = size_field(j, "max_buffer_memory", cfg.max_buffer_memory);
    cfg.max_connection_buffer_memory =
        size_field(j, "max_connection_buffer_memory", cfg.max_connection_buffer_memory);
    cfg.max_host_buffer_memory = size_field(j, "max_host_buffer_memory", cfg.max_host_buffer_memory);
    cfg.max_send_queue_bytes = size_field(j, "max_send_queue_bytes", cfg.max_send_queue_bytes);
    cfg.send_buffer_budget_bytes = size_field(j, "send_buffer_budget_bytes", cfg.send_buffer_budget_bytes);
    cfg.address_send_buffer_bytes = size_field(j, "address_send_buffer_bytes", cfg.address_send_buffer_bytes);
    cfg.min_send_buffer_bytes = size32_field(j, "min_send_buffer_bytes", cfg.min_send_buffer_bytes);
    cfg.max_registrants_per_namespace =
        int_field(j, "max_registrants_per_namespace", cfg.max_registrants_per_namespace);
    cfg.tcp_congestion = j.value("tcp_congestion", cfg.tcp_congestion);
    cfg.socket_buffer_bytes = size_field(j, "socket_buffer_bytes", cfg.socket_buffer_bytes);
    if (j.contains("send_buffer_bytes")) cfg.send_buffer_bytes = size_field(j, "send_buffer_bytes", 0);
    cfg.poll = j.value("poll", cfg.poll);
    cfg.sqpoll = j.value("sqpoll", cfg.sqpoll);
    cfg.sqpoll_idle_ms = int_field(j, "sqpoll_idle_ms", cfg.sqpoll_idle_ms);
    cfg.sqpoll_cpu = int_field(j, "sqpoll_cpu", cfg.sqpoll_cpu);
    cfg.send_zc_threshold = size32_field(j, "send_zc_threshold", cfg.send_zc_threshold);
    cfg.recv_multishot = j.value("recv_multishot", cfg.recv_multishot);
    cfg.spin_recv = j.value("spin_recv", cfg.spin_recv);
    for (const auto& s : j.value("subsystems", nlohmann::json::array())) {
      SubsystemConfig sc;
      sc.nqn = s.at("nqn").get<std::string>();
      sc.serial = s.value("serial", "");
      sc.model = s.value("model", sc.model);
      sc.max_namespaces = int_field(s, "max_namespaces", 0u);
      sc.min_cntlid = int_field(s, "min_cntlid", sc.min_cntlid);
      sc.max_cntlid = int_field(s, "max_cntlid", sc.max_cntlid);
      if (s.contains("ana_reporting") && !s.at("ana_reporting").is_boolean())
        throw std::runtime_error(fmt::format("subsystem {}: \"ana_reporting\" is true or false", sc.nqn));
      sc.ana_reporting = s.value("ana_reporting", false);
      sc.allow_any_host = s.value("allow_any_host", !s.contains("hosts"));
      for (const auto& h : s.value("hosts", nlohmann::json::array())) read_host(sc, h);
      sc.listeners = s.value("listeners", std::vector<std::string>{});
      for (const auto& n : s.value("namespaces", nlohmann::json::array())) {
        NamespaceConfig nc;
        nc.nsid = int_field(n, "nsid", 0u);
        nc.type = n.value("type", nc.type);
        nc.size = size_field(n, "size", 0);
        nc.path = n.value("path", "");
        nc.block_size = int_field(n, "block_size", nc.block_size);
        nc.name = n.value("name", "");
        nc.anagrpid = int_field(n, "anagrpid", 0u);
        // Masking: "visible_to": [host NQNs] and no other host sees the namespace.
        if (n.contains("visible_to")) {
          nc.no_auto_visible = true;
          nc.visible_hosts = n.at("visible_to").get<std::vector<std::string>>();
        }
        if (nc.type == "rbd") read_rbd(n, nc.rbd);
        sc.namespaces.push_back(nc);
      }
      read_ana_states(s, sc);
      cfg.subsystems.push_back(sc);
    }
    read_ceph_clusters(j, cfg);
  } catch (const std::exception& e) {
    return fmt::format("config '{}': {}", path, e.what());
  }
  return {};
}

std::string finalize_config(TargetConfig& cfg) {
  // A target with no subsystem yet (an empty start, to be configured over JSON-RPC as nvmf_tgt
  // is) listens nowhere until told: no default port of 4420 and no discovery port, so that two
  // such gateways on one machine do not fight over them. One with subsystems and no listener
  // gets the default. The discovery port is bound at the first listener's address.
  if (cfg.listeners.empty() && !cfg.subsystems.empty()) cfg.listeners.push_back({});
  if (cfg.listeners.empty()) cfg.discovery_port = 0;
  if (cfg.poll != "interrupt" && cfg.poll != "busy" && cfg.poll != "hybrid")
    return fmt::format("poll mode '{}' is not interrupt, busy or hybrid", cfg.poll);
  if (std::string err = check_ranges(cfg); !err.empty()) return err;
  // One command's buffer must always fit, or it would wait for memory forever. Idle
  // connections may keep up to half the global budget cached, so that takes two.
  const uint64_t one_command =
      (uint64_t(std::max({cfg.mdts_bytes, cfg.in_capsule_data, 8192u})) + 4095) & ~uint64_t(4095);
  if (cfg.max_buffer_memory && cfg.max_buffer_memory < 2 * one_command)
    return fmt::format("max_buffer_memory must be 0 (no limit) or at least {} bytes (two largest transfers)",
                       2 * one_command);
  if (cfg.max_connection_buffer_memory && cfg.max_connection_buffer_memory < one_command)
    return fmt::format("max_connection_buffer_memory must be 0 (no limit) or at least {} bytes (one largest transfer)",
                       one_command);
  if (cfg.max_host_buffer_memory && cfg.max_host_buffer_memory < one_command)
    return fmt::format("max_host_buffer_memory must be 0 (no limit) or at least {} bytes (one largest transfer)",
                       one_command);
  std::set<std::string> nqns;
  std::set<std::string> names;  // namespace names, unique in the target
  unsigned index = 0;
  for (auto& s : cfg.subsystems) {
    ++index;
    if (std::string err = check_subsystem_identity(s, index); !err.empty()) return err;
    if (!nqns.insert(s.nqn).second) return fmt::format("subsystem {} is listed twice", s.nqn);
    std::set<uint32_t> used;
    for (auto& n : s.namespaces) {
      if (n.nsid) used.insert(n.nsid);
    }
    uint32_t next = 1;
    for (auto& n : s.namespaces) {
      if (n.nsid == 0) {
        while (used.count(next)) ++next;
        n.nsid = next;
        used.insert(next);
      }
      if (n.nsid >= 0xFFFFFFFE) return fmt::format("nsid {:#x} is reserved", n.nsid);
      if (n.block_size != 512 && n.block_size != 4096) return "block_size must be 512 or 4096";
      if (n.type != "null" && n.type != "ram" && n.type != "file" && n.type != "rbd")
        return fmt::format("namespace type '{}' is not null, ram, file or rbd", n.type);
      if (n.type != "file" && n.type != "rbd" && n.size < n.block_size)
        return fmt::format("namespace {} needs a size", n.nsid);
      if (n.type == "file" && n.path.empty()) return fmt::format("file namespace {} needs a path", n.nsid);
      if (n.type == "rbd" && (n.rbd.pool.empty() || n.rbd.image.empty()))
        return fmt::format("rbd namespace {} needs a pool and an image", n.nsid);
    }
    if (used.size() != s.namespaces.size()) return fmt::format("subsystem {} repeats an nsid", s.nqn);
    const uint32_t highest = used.empty() ? 0 : *used.rbegin();
    if (s.max_namespaces == 0) s.max_namespaces = std::max(kDefaultMaxNamespaces, highest);
    if (std::string err = check_subsystem(s, index); !err.empty()) return err;
    if (highest > s.max_namespaces)
      return fmt::format("subsystem {}: nsid {} is above its max_namespaces ({})", s.nqn, highest, s.max_namespaces);
    for (auto& n : s.namespaces) {
      if (!n.name.empty())
        if (std::string err = check_name(n.name, "namespace name"); !err.empty()) return err;
      if (!n.name.empty() && !names.insert(n.name).second) return fmt::format("namespace name '{}' is used twice", n.name);
      // ANA group IDs run from 1 to ANAGRPMAX, which is max_namespaces (as SPDK has it).
      if (n.anagrpid == 0) n.anagrpid = n.nsid;
      if (n.anagrpid > s.max_namespaces)
        return fmt::format("subsystem {}: namespace {}'s anagrpid {} is above its max_namespaces ({})", s.nqn, n.nsid,
                           n.anagrpid, s.max_namespaces);
    }
    for (const auto& name : s.listeners) {
      ListenerConfig want;
      if (!parse_listener(name, want)) return fmt::format("subsystem {}: listener '{}' is not ADDRESS:PORT", s.nqn, name);
      if (listener_index(cfg, name) < 0)
        return fmt::format("subsystem {}: '{}' is not one of the target's listeners", s.nqn, name);
    }
    for (const auto& a : s.ana_states) {
      if (!s.ana_reporting) return fmt::format("subsystem {}: ANA states without ana_reporting", s.nqn);
      ListenerConfig want;
      if (!parse_listener(a.listener, want) || listener_index(cfg, a.listener) < 0)
        return fmt::format("subsystem {}: ANA state for '{}', which is not one of the target's listeners", s.nqn,
                           a.listener);
      if (a.anagrpid > s.max_namespaces)
        return fmt::format("subsystem {}: ANA state for group {}, above its max_namespaces ({})", s.nqn, a.anagrpid,
                           s.max_namespaces);
    }
  }
  std::set<std::string> clusters;
  for (const auto& c : cfg.rbd_clusters) {
    if (c.cluster_name.empty()) return "a Ceph cluster needs a name";
    if (!clusters.insert(c.cluster_name).second) return fmt::format("Ceph cluster {} is registered twice", c.cluster_name);
  }
  auto cluster_known = [&](const NamespaceConfig& n) {
    return n.type != "rbd" || n.rbd.cluster_name.empty() || clusters.count(n.rbd.cluster_name);
  };
  for (const auto& s : cfg.subsystems)
    for (const auto& n : s.namespaces)
      if (!cluster_known(n))
        return fmt::format("subsystem {} namespace {}: no Ceph cluster {} is registered", s.nqn, n.nsid, n.rbd.cluster_name);
  for (const auto& b : cfg.bdevs) {
    if (!cluster_known(b)) return fmt::format("bdev {}: no Ceph cluster {} is registered", b.name, b.rbd.cluster_name);
    if (b.name.empty()) return "a bdev needs a name";
    if (!names.insert(b.name).second) return fmt::format("bdev name '{}' is used twice", b.name);
    if (b.block_size != 512 && b.block_size != 4096) return fmt::format("bdev {}: block_size must be 512 or 4096", b.name);
    if (b.type != "null" && b.type != "ram" && b.type != "file" && b.type != "rbd")
      return fmt::format("bdev {}: type '{}' is not null, ram, file or rbd", b.name, b.type);
    if (b.type != "file" && b.type != "rbd" && b.size < b.block_size) return fmt::format("bdev {} needs a size", b.name);
  }
  // Every namespace has a name (its bdev name, as RPC lists it): "null0", "ram1", ...
  std::map<std::string, unsigned> counts;
  for (auto& s : cfg.subsystems)
    for (auto& n : s.namespaces)
      while (n.name.empty()) {
        std::string name = fmt::format("{}{}", n.type, counts[n.type]++);
        if (names.insert(name).second) n.name = name;
      }
  return {};
}

namespace {
// Valid UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF) without C0 or C1
// control characters or DEL.
bool printable_utf8(const std::string& text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const unsigned c = *p;
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7F) return false;
      ++p;
      continue;
    }
    const int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 ? 1 : -1;
    if (n < 0 || c > 0xF4 || end - p <= n) return false;
    uint32_t cp = c & (0x3F >> n);
    for (int i = 1; i <= n; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0x80 && cp <= 0x9F)) return false;
    p += n + 1;
  }
  return true;
}
}  // namespace

std::string check_nqn(const std::string& nqn, const char* what) {
  if (nqn.empty() || nqn.size() > 223) return fmt::format("a {} is 1 to 223 bytes long ({} given)", what, nqn.size());
  if (!printable_utf8(nqn)) return fmt::format("the {} is not UTF-8 text without control characters", what);
  if (nqn.rfind("nqn.", 0) != 0) return fmt::format("{} '{}' is not an NQN (it must start with 'nqn.')", what, nqn);
  return {};
}

std::string check_name(const std::string& name, const char* what) {
  if (name.empty() || name.size() > 255) return fmt::format("a {} is 1 to 255 bytes long ({} given)", what, name.size());
  if (!printable_utf8(name)) return fmt::format("the {} is not UTF-8 text without control characters", what);
  return {};
}

std::string check_subsystem_identity(SubsystemConfig& s, unsigned index) {
  if (std::string err = check_nqn(s.nqn, "subsystem NQN"); !err.empty()) return err;
  if (s.serial.empty()) s.serial = fmt::format("NVTCP{:015d}", index);
  if (s.serial.size() > 20) return fmt::format("serial '{}' is longer than 20 characters", s.serial);
  if (s.model.size() > 40) return fmt::format("model '{}' is longer than 40 characters", s.model);
  return {};
}

std::string check_subsystem(SubsystemConfig& s, unsigned index) {
  if (std::string err = check_subsystem_identity(s, index); !err.empty()) return err;
  if (s.max_namespaces == 0) s.max_namespaces = kDefaultMaxNamespaces;
  if (s.max_namespaces > kMaxNamespacesLimit)
    return fmt::format("subsystem {}: max_namespaces {} is over {}", s.nqn, s.max_namespaces, kMaxNamespacesLimit);
  if (s.min_cntlid < 1 || s.min_cntlid > s.max_cntlid || s.max_cntlid > kMaxCntlid)
    return fmt::format("subsystem {}: controller IDs {} to {} are not a range within 1 to {}", s.nqn, s.min_cntlid,
                       s.max_cntlid, kMaxCntlid);
  return {};
}

int listener_index(const TargetConfig& cfg, const std::string& name) {
  ListenerConfig want;
  if (!parse_listener(name, want)) return -1;
  for (size_t i = 0; i < cfg.listeners.size(); ++i)
    if (cfg.listeners[i].address == want.address && cfg.listeners[i].port == want.port) return int(i);
  return -1;
}

bool parse_listener(const std::string& text, ListenerConfig& out) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return false;
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = text.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  const unsigned long p = std::stoul(port);
  if (p > 65535) return false;
  out.address = host;
  out.port = uint16_t(p);
  return true;
}

}  // namespace nvtcp::target

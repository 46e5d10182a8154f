#include "target/config.hpp"

#include <algorithm>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/block_device.hpp"

namespace nvtcp::target {

namespace {
uint64_t size_field(const nlohmann::json& j, const char* key, uint64_t dflt) {
  if (!j.contains(key)) return dflt;
  const auto& v = j.at(key);
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  uint64_t out = 0;
  if (!v.is_string() || !backend::parse_size(v.get<std::string>(), out))
    throw std::runtime_error(fmt::format("'{}' must be a size like 1G or a byte count", key));
  return out;
}
}  // namespace

std::string load_config_file(const std::string& path, TargetConfig& cfg) {
  std::ifstream in(path);
  if (!in) return fmt::format("cannot read config file '{}'", path);
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.contains("listeners")) {
      cfg.listeners.clear();
      for (const auto& l : j.at("listeners")) {
        ListenerConfig lc;
        lc.address = l.value("address", lc.address);
        lc.port = l.value("port", lc.port);
        cfg.listeners.push_back(lc);
      }
    }
    cfg.discovery_port = j.value("discovery_port", cfg.discovery_port);
    cfg.cores = j.value("cores", cfg.cores);
    cfg.allow_hdgst = j.value("hdgst", cfg.allow_hdgst);
    cfg.allow_ddgst = j.value("ddgst", cfg.allow_ddgst);
    cfg.max_h2c_data = static_cast<uint32_t>(size_field(j, "max_h2c_data", cfg.max_h2c_data));
    cfg.in_capsule_data = static_cast<uint32_t>(size_field(j, "in_capsule_data", cfg.in_capsule_data));
    cfg.max_queue_depth = j.value("max_queue_depth", cfg.max_queue_depth);
    cfg.max_io_queues = j.value("max_io_queues", cfg.max_io_queues);
    cfg.icreq_timeout_ms = j.value("icreq_timeout_ms", cfg.icreq_timeout_ms);
    cfg.h2c_data_timeout_ms = j.value("h2c_data_timeout_ms", cfg.h2c_data_timeout_ms);
    cfg.max_connections = j.value("max_connections", cfg.max_connections);
    cfg.max_buffer_memory = size_field(j, "max_buffer_memory", cfg.max_buffer_memory);
    cfg.max_connection_buffer_memory =
        size_field(j, "max_connection_buffer_memory", cfg.max_connection_buffer_memory);
    cfg.max_send_queue_bytes = size_field(j, "max_send_queue_bytes", cfg.max_send_queue_bytes);
    cfg.tcp_congestion = j.value("tcp_congestion", cfg.tcp_congestion);
    cfg.poll = j.value("poll", cfg.poll);
    cfg.sqpoll = j.value("sqpoll", cfg.sqpoll);
    cfg.sqpoll_idle_ms = j.value("sqpoll_idle_ms", cfg.sqpoll_idle_ms);
    cfg.sqpoll_cpu = j.value("sqpoll_cpu", cfg.sqpoll_cpu);
    cfg.send_zc_threshold = static_cast<uint32_t>(size_field(j, "send_zc_threshold", cfg.send_zc_threshold));
    cfg.recv_multishot = j.value("recv_multishot", cfg.recv_multishot);
    cfg.spin_recv = j.value("spin_recv", cfg.spin_recv);
    for (const auto& s : j.value("subsystems", nlohmann::json::array())) {
      SubsystemConfig sc;
      sc.nqn = s.at("nqn").get<std::string>();
      sc.serial = s.value("serial", "");
      sc.model = s.value("model", sc.model);
      sc.allow_any_host = s.value("allow_any_host", !s.contains("hosts"));
      sc.hosts = s.value("hosts", std::vector<std::string>{});
      for (const auto& n : s.value("namespaces", nlohmann::json::array())) {
        NamespaceConfig nc;
        nc.nsid = n.value("nsid", 0u);
        nc.type = n.value("type", nc.type);
        nc.size = size_field(n, "size", 0);
        nc.path = n.value("path", "");
        nc.block_size = n.value("block_size", nc.block_size);
        sc.namespaces.push_back(nc);
      }
      cfg.subsystems.push_back(sc);
    }
  } catch (const std::exception& e) {
    return fmt::format("config '{}': {}", path, e.what());
  }
  return {};
}

std::string finalize_config(TargetConfig& cfg) {
  if (cfg.listeners.empty()) cfg.listeners.push_back({});
  if (cfg.cores == 0) cfg.cores = 1;
  if (cfg.poll != "interrupt" && cfg.poll != "busy" && cfg.poll != "hybrid")
    return fmt::format("poll mode '{}' is not interrupt, busy or hybrid", cfg.poll);
  if (cfg.in_capsule_data > 1u << 20) return "in_capsule_data must be at most 1 MiB";
  if (cfg.max_h2c_data < 4096) return "max_h2c_data must be at least 4096";
  if (cfg.max_queue_depth < 2 || cfg.max_queue_depth > 65536) return "max_queue_depth must be 2..65536";
  if (cfg.icreq_timeout_ms == 0) return "icreq_timeout_ms must be at least 1";
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
  std::set<std::string> nqns;
  unsigned index = 0;
  for (auto& s : cfg.subsystems) {
    ++index;
    if (s.nqn.empty() || s.nqn.size() > 223) return "every subsystem needs an NQN of at most 223 bytes";
    if (s.nqn.rfind("nqn.", 0) != 0) return fmt::format("'{}' is not an NQN (it must start with 'nqn.')", s.nqn);
    if (!nqns.insert(s.nqn).second) return fmt::format("subsystem {} is listed twice", s.nqn);
    if (s.serial.empty()) s.serial = fmt::format("NVTCP{:015d}", index);
    if (s.serial.size() > 20) return fmt::format("serial '{}' is longer than 20 characters", s.serial);
    if (s.model.size() > 40) return fmt::format("model '{}' is longer than 40 characters", s.model);
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
      if (n.nsid == 0xFFFFFFFF) return "nsid 0xFFFFFFFF is reserved";
      if (n.block_size != 512 && n.block_size != 4096) return "block_size must be 512 or 4096";
      if (n.type != "null" && n.type != "ram" && n.type != "file")
        return fmt::format("namespace type '{}' is not null, ram or file", n.type);
      if (n.type != "file" && n.size < n.block_size) return fmt::format("namespace {} needs a size", n.nsid);
      if (n.type == "file" && n.path.empty()) return fmt::format("file namespace {} needs a path", n.nsid);
    }
    if (used.size() != s.namespaces.size()) return fmt::format("subsystem {} repeats an nsid", s.nqn);
  }
  return {};
}

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
#include "control/target_methods.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "nvtcp/log_pages.hpp"
#include "target/controller.hpp"
#include "util/log.hpp"

namespace nvtcp::control {
namespace {

using target::Listener;
using target::Subsystem;
using target::Target;

std::string hex(const uint8_t* b, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{:02X}", b[i]);
  return s;
}

std::string uuid_text(const uint8_t u[16]) {
  std::string h = hex(u, 16);
  std::transform(h.begin(), h.end(), h.begin(), [](char c) { return char(std::tolower(c)); });
  return fmt::format("{}-{}-{}-{}-{}", h.substr(0, 8), h.substr(8, 4), h.substr(12, 4), h.substr(16, 4), h.substr(20));
}

Json listen_address(const Listener& l, const std::string& reached = {}) {
  // A wildcard listener is listed as configured; reached is the address a host came to.
  const std::string addr = reached.empty() ? l.address : reached;
  return Json{{"trtype", "TCP"}, {"adrfam", l.ipv6 ? "IPv6" : "IPv4"}, {"traddr", addr},
              {"trsvcid", std::to_string(l.port)}};
}

// As nvmf_get_subsystems lists a listener: SPDK 24.01 also names the transport "transport"
// (deprecated there, still read by tools written against it).
Json subsystem_listen_address(const Listener& l) {
  Json j = listen_address(l);
  j["transport"] = "TCP";
  return j;
}

Subsystem& subsystem_named(Target& t, const std::string& nqn) {
  Subsystem* s = t.state().find_subsystem(nqn);
  if (!s || s->is_discovery())
    throw RpcError(kInvalidParams, fmt::format("Unable to find subsystem with NQN {}", nqn));
  return *s;
}

Json subsystem_json(Target& t, const Subsystem& s) {
  auto& st = t.state();
  Json listeners = Json::array();
  for (const auto& l : st.listeners)
    if (s.reachable_through(l.portid)) listeners.push_back(subsystem_listen_address(l));
  Json hosts = Json::array();
  for (const auto& h : s.hosts()) {
    Json e{{"nqn", h.nqn}};
    // Whether a key is configured, never the key.
    if (h.psk) e["psk"] = "(configured)";
    if (h.dhchap) e["dhchap_key"] = "(configured)";
    if (h.dhchap_ctrl) e["dhchap_ctrlr_key"] = "(configured)";
    hosts.push_back(std::move(e));
  }
  Json j{{"nqn", s.nqn()},
         {"subtype", s.is_discovery() ? "Discovery" : "NVMe"},
         {"listen_addresses", listeners},
         {"allow_any_host", s.is_discovery() || s.allows_any_host()},
         {"hosts", hosts}};
  if (s.is_discovery()) return j;
  j["serial_number"] = s.serial();
  j["model_number"] = s.model();
  j["max_namespaces"] = s.max_nsid();
  j["min_cntlid"] = 1;
  j["max_cntlid"] = 0xFFEF;
  Json nss = Json::array();
  for (const auto& ns : s.namespaces())
    nss.push_back(Json{{"nsid", ns->nsid},
                       {"bdev_name", ns->name},
                       {"name", ns->name},
                       {"nguid", hex(ns->nguid, 16)},
                       {"eui64", hex(ns->eui64, 8)},
                       {"uuid", uuid_text(ns->uuid)}});
  j["namespaces"] = nss;
  return j;
}

// The connections of one subsystem's controllers, from every reactor.
std::vector<target::ConnectionInfo> connections_of(Target& t, const std::string& nqn) {
  std::vector<target::ConnectionInfo> out;
  for (auto& c : t.connection_info())
    if (c.subnqn == nqn) out.push_back(std::move(c));
  return out;
}

// "ADDRESS:PORT" of the host end of a connection (peer is "[ADDRESS]:PORT" or "ADDRESS:PORT").
void split_peer(const std::string& peer, std::string& addr, std::string& port) {
  auto colon = peer.rfind(':');
  addr = colon == std::string::npos ? peer : peer.substr(0, colon);
  port = colon == std::string::npos ? "" : peer.substr(colon + 1);
  if (addr.size() > 1 && addr.front() == '[' && addr.back() == ']') addr = addr.substr(1, addr.size() - 2);
}

}  // namespace

void add_target_methods(Dispatcher& d, Target& t, const std::string& version) {
  d.add("rpc_get_methods", [&d](const Json& params) {
    Params p(params);
    p.opt_bool("current");  // every method works at any time: no start-up-only state
    p.opt_bool("include_aliases");
    p.done();
    return Json(d.names());
  });

  d.add("spdk_get_version", [version](const Json& params) {
    Params p(params);
    p.done();
    unsigned major = 0, minor = 0, patch = 0;
    std::sscanf(version.c_str(), "%u.%u.%u", &major, &minor, &patch);
    return Json{{"version", fmt::format("nvtcp {}", version)},
                {"fields", {{"major", major}, {"minor", minor}, {"patch", patch}, {"suffix", ""}}}};
  });

  // The TCP transport exists from start-up: creating it again is accepted, as a script written
  // for SPDK does it first. Its sizes are the target's own; one that asks for different ones is
  // told which are in effect rather than silently ignored.
  d.add("nvmf_create_transport", [&t](const Json& params) {
    if (!params.is_object()) throw RpcError(kInvalidParams, "parameters must be given by name (a JSON object)");
    const auto& cfg = t.state().config;
    std::string trtype = params.value("trtype", std::string());
    std::transform(trtype.begin(), trtype.end(), trtype.begin(), [](char c) { return char(std::toupper(c)); });
    if (trtype != "TCP") throw RpcError(kInvalidParams, fmt::format("Invalid transport type '{}': nvtcp serves TCP", trtype));
    const std::map<std::string, uint64_t> fixed{
        {"max_queue_depth", cfg.max_queue_depth},
        {"max_io_qpairs_per_ctrlr", uint64_t(cfg.max_io_queues) + 1},
        {"in_capsule_data_size", cfg.in_capsule_data},
        {"max_io_size", cfg.mdts_bytes},
    };
    for (const auto& [name, value] : fixed) {
      auto it = params.find(name);
      if (it != params.end() && it->is_number_unsigned() && it->get<uint64_t>() != value)
        log::warn("RPC nvmf_create_transport: {} {} asked; this target runs with {} (set at start)", name,
                  it->get<uint64_t>(), value);
    }
    return Json(true);
  });

  d.add("nvmf_get_transports", [&t](const Json& params) {
    Params p(params);
    p.opt_str("trtype");
    p.opt_str("tgt_name");
    p.done();
    const auto& cfg = t.state().config;
    return Json::array({Json{{"trtype", "TCP"},
                             {"max_queue_depth", cfg.max_queue_depth},
                             {"max_io_qpairs_per_ctrlr", cfg.max_io_queues + 1},
                             {"in_capsule_data_size", cfg.in_capsule_data},
                             {"max_io_size", cfg.mdts_bytes},
                             {"max_h2c_data", cfg.max_h2c_data}}});
  });

  d.add("nvmf_get_subsystems", [&t](const Json& params) {
    Params p(params);
    auto nqn = p.opt_str("nqn");
    p.opt_str("tgt_name");
    p.done();
    Json out = Json::array();
    auto& st = t.state();
    if (!nqn || *nqn == nvme::kDiscoveryNqn) out.push_back(subsystem_json(t, *st.discovery));
    for (const auto& s : st.subsystems)
      if (!nqn || *nqn == s->nqn()) out.push_back(subsystem_json(t, *s));
    if (nqn && out.empty()) throw RpcError(kNoSuchDevice, fmt::format("Unable to find subsystem with NQN {}", *nqn));
    return out;
  });

  d.add("nvmf_subsystem_get_listeners", [&t](const Json& params) {
    Params p(params);
    const std::string nqn = p.str("nqn");
    p.opt_str("tgt_name");
    p.done();
    auto& s = subsystem_named(t, nqn);
    Json out = Json::array();
    for (const auto& l : t.state().listeners)
      if (s.reachable_through(l.portid)) {
        // Without ANA reporting every path is optimized; one group per namespace (its NSID, as
        // SPDK numbers them by default).
        Json states = Json::array();
        for (const auto& ns : s.namespaces()) states.push_back(Json{{"ana_group", ns->nsid}, {"ana_state", "optimized"}});
        out.push_back(Json{{"address", listen_address(l)}, {"ana_states", states}});
      }
    return out;
  });

  d.add("nvmf_subsystem_get_controllers", [&t](const Json& params) {
    Params p(params);
    const std::string nqn = p.str("nqn");
    p.opt_str("tgt_name");
    p.done();
    auto& s = subsystem_named(t, nqn);
    Json out = Json::array();
    for (const auto& c : s.controllers()) {
      const uint8_t* id = c->hostid();
      out.push_back(Json{{"cntlid", c->cntlid()},
                         {"hostnqn", c->hostnqn()},
                         {"hostid", uuid_text(id)},
                         {"num_io_qpairs", c->num_io_queues()}});
    }
    return out;
  });

  d.add("nvmf_subsystem_get_qpairs", [&t](const Json& params) {
    Params p(params);
    const std::string nqn = p.str("nqn");
    p.opt_str("tgt_name");
    p.done();
    subsystem_named(t, nqn);
    Json out = Json::array();
    auto& listeners = t.state().listeners;
    for (const auto& c : connections_of(t, nqn)) {
      std::string addr, port;
      split_peer(c.peer, addr, port);
      Json q{{"cntlid", c.cntlid},
             {"qid", c.qid},
             {"state", c.connected ? "active" : "deleting"},
             {"thread", fmt::format("nvmf_tgt_poll_group_{}", c.reactor)},
             {"hostnqn", c.hostnqn},
             {"peer_address", {{"trtype", "TCP"}, {"adrfam", addr.find(':') != std::string::npos ? "IPv6" : "IPv4"},
                               {"traddr", addr}, {"trsvcid", port}}}};
      for (const auto& l : listeners)
        if (l.portid == c.portid) q["listen_address"] = listen_address(l, l.wildcard ? c.local_address : std::string());
      q["tls"] = c.tls;
      q["header_digest"] = c.hdgst;
      q["data_digest"] = c.ddgst;
      out.push_back(std::move(q));
    }
    return out;
  });

  d.add("nvmf_get_stats", [&t](const Json& params) {
    Params p(params);
    p.opt_str("tgt_name");
    p.done();
    const auto conns = t.connection_info();
    const auto ios = t.io_counts_per_reactor();
    Json groups = Json::array();
    for (unsigned r = 0; r < t.reactor_count(); ++r) {
      uint64_t admin = 0, io = 0;
      for (const auto& c : conns)
        if (c.reactor == r && c.connected) ++(c.qid == 0 ? admin : io);
      groups.push_back(Json{{"name", fmt::format("nvmf_tgt_poll_group_{}", r)},
                            {"current_admin_qpairs", admin},
                            {"current_io_qpairs", io},
                            {"completed_nvme_io", r < ios.size() ? ios[r] : 0},
                            {"transports", Json::array({Json{{"trtype", "TCP"}}})}});
    }
    return Json{{"tick_rate", 1000000000}, {"poll_groups", groups}};
  });

  d.add("nvmf_subsystem_allow_any_host", [&t](const Json& params) {
    Params p(params);
    const std::string nqn = p.str("nqn");
    auto any = p.opt_bool("allow_any_host");
    p.opt_str("tgt_name");
    p.done();
    if (!any) throw RpcError(kInvalidParams, "\"allow_any_host\" is required");
    subsystem_named(t, nqn).set_allow_any_host(*any);
    log::info("RPC: subsystem {} {} any host", nqn, *any ? "allows" : "no longer allows");
    return Json(true);
  });

  // Keys as nvtcp's configuration takes them (the interchange strings nvme-cli writes, or
  // "@FILE"), under SPDK's parameter names; SPDK 24.01 names keyring entries there instead,
  // and nvtcp has no keyring.
  d.add("nvmf_subsystem_add_host", [&t](const Json& params) {
    Params p(params);
    const std::string nqn = p.str("nqn");
    const std::string host = p.str("host");
    auto psk = p.opt_str("psk");
    auto dhchap = p.opt_str("dhchap_key");
    auto dhchap_ctrl = p.opt_str("dhchap_ctrlr_key");
    p.opt_str("tgt_name");
    p.done();
    auto& s = subsystem_named(t, nqn);
    Json entry{{"nqn", host}};
    if (psk) entry["psk"] = *psk;
    if (dhchap) entry["dhchap_key"] = *dhchap;
    if (dhchap_ctrl) entry["dhchap_ctrl_key"] = *dhchap_ctrl;
    target::SubsystemConfig parsed;
    try {
      target::read_host(parsed, entry);
    } catch (const std::exception& e) {
      throw RpcError(kInvalidParams, e.what());
    }
    std::optional<target::HostKeys> keys;
    if (auto it = parsed.host_keys.find(host); it != parsed.host_keys.end()) keys = it->second;
    const bool added = s.add_host(host, std::move(keys));
    log::info("RPC: subsystem {}: host {} {}", nqn, host, added ? "allowed" : "keys replaced");
    return Json(true);
  });

  d.add("nvmf_subsystem_remove_host", [&t](const Json& params) {
    Params p(params);
    const std::string nqn = p.str("nqn");
    const std::string host = p.str("host");
    p.opt_str("tgt_name");
    p.done();
    if (!subsystem_named(t, nqn).remove_host(host))
      throw RpcError(kInternalError, fmt::format("host {} is not allowed on {}", host, nqn));
    log::info("RPC: subsystem {}: host {} no longer allowed (its connections end when they do)", nqn, host);
    return Json(true);
  });
}

}  // namespace nvtcp::control

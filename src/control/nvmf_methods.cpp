// SPDX-License-Identifier: Apache-2.0
// The nvmf_* methods: the transport, subsystems, their listeners, hosts and namespaces.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "nvtcp/log_pages.hpp"
#include "target/controller.hpp"

#include "control/method_table.hpp"
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

// The discovery service's own port as a listener of the discovery subsystem, while it has one.
std::optional<Listener> discovery_listener(const Target& t) {
  if (!t.discovery_port()) return std::nullopt;
  Listener d;
  d.address = t.discovery_address();
  d.ipv6 = d.address.find(':') != std::string::npos;
  d.wildcard = d.address == "0.0.0.0" || d.address == "::";
  d.port = t.discovery_port();
  d.tls_required = t.discovery_tls();
  return d;
}

// Held by the caller for the method's run: RPC may delete it (another method) only after.
std::shared_ptr<Subsystem> subsystem_named(Target& t, const std::string& nqn) {
  std::shared_ptr<Subsystem> s = t.state().find_subsystem(nqn);
  if (!s || s->is_discovery())
    throw RpcError(kInvalidParams, fmt::format("Unable to find subsystem with NQN {}", nqn));
  return s;
}

Json subsystem_json(Target& t, const Subsystem& s) {
  auto& st = t.state();
  Json listeners = Json::array();
  // The discovery service's own port is the discovery subsystem's (save_config writes it so).
  if (s.is_discovery())
    if (auto d = discovery_listener(t)) listeners.push_back(subsystem_listen_address(*d));
  for (const auto& l : st.listeners())
    if (s.listeners().reachable_through(l.portid)) listeners.push_back(subsystem_listen_address(l));
  Json hosts = Json::array();
  for (const auto& h : s.hosts().list()) {
    Json e{{"nqn", h.nqn}};
    // The keyring key's name a key came from, as SPDK lists them; a key given inline only as
    // configured. Never the key.
    auto key = [](const target::KeyringRef& ref) { return ref ? ref.name : std::string("(configured)"); };
    if (h.psk) e["psk"] = key(h.psk_ref);
    if (h.allow_plain) e["allow_plain"] = true;
    if (h.dhchap) e["dhchap_key"] = key(h.dhchap_ref);
    if (h.dhchap_ctrl) e["dhchap_ctrlr_key"] = key(h.dhchap_ctrl_ref);
    hosts.push_back(std::move(e));
  }
  Json j{{"nqn", s.nqn()},
         {"subtype", s.is_discovery() ? "Discovery" : "NVMe"},
         {"listen_addresses", listeners},
         {"allow_any_host", s.is_discovery() || s.hosts().allows_any()},
         {"hosts", hosts}};
  if (s.is_discovery()) return j;
  j["serial_number"] = s.serial();
  j["model_number"] = s.model();
  j["max_namespaces"] = s.max_namespaces();
  j["min_cntlid"] = s.cntlid_range().first;
  j["max_cntlid"] = s.cntlid_range().second;
  Json nss = Json::array();
  for (const auto& ns : s.namespaces())
    nss.push_back(Json{{"nsid", ns->nsid},
                       {"bdev_name", ns->name},
                       {"name", ns->name},
                       {"nguid", hex(ns->nguid, 16)},
                       {"eui64", hex(ns->eui64, 8)},
                       {"uuid", uuid_text(ns->uuid)},
                       {"anagrpid", ns->anagrpid.load()},
                       // nvtcp's: whether every host sees it, and if not, which do
                       {"no_auto_visible", !ns->auto_visible},
                       {"hosts", Json(std::vector<std::string>(ns->visible_hosts.begin(), ns->visible_hosts.end()))}});
  j["namespaces"] = nss;
  return j;
}

// SPDK's "listen_address" object: {"trtype": "TCP", "traddr": ..., "trsvcid": "4420", "adrfam": ...}.
struct ListenAddress {
  std::string traddr;
  uint16_t port = 0;
};

ListenAddress listen_address_param(const Json* la) {
  if (!la || !la->is_object()) throw RpcError(kInvalidParams, "\"listen_address\" must be an object");
  Params a(*la);
  std::string trtype = a.opt_str("trtype").value_or("TCP");
  std::transform(trtype.begin(), trtype.end(), trtype.begin(), [](char c) { return char(std::toupper(c)); });
  ListenAddress out;
  out.traddr = a.str("traddr");
  // A string, as SPDK has it; a number too (what `nvtcp rpc --listen-address.trsvcid 4420` sends).
  const Json* svc = a.opt_json("trsvcid");
  if (!svc || !(svc->is_string() || svc->is_number_unsigned()))
    throw RpcError(kInvalidParams, "\"trsvcid\" must be a string (a port)");
  const std::string trsvcid = svc->is_string() ? svc->get<std::string>() : std::to_string(svc->get<uint64_t>());
  std::string adrfam = a.opt_str("adrfam").value_or("");
  a.done();
  if (trtype != "TCP") throw RpcError(kInvalidParams, fmt::format("transport {}: nvtcp serves TCP", trtype));
  std::transform(adrfam.begin(), adrfam.end(), adrfam.begin(), [](char c) { return char(std::tolower(c)); });
  if (!adrfam.empty() && adrfam != "ipv4" && adrfam != "ipv6")
    throw RpcError(kInvalidParams, fmt::format("adrfam {}: nvtcp serves IPv4 and IPv6", adrfam));
  unsigned port = 0;
  if (trsvcid.empty() || trsvcid.size() > 5 || trsvcid.find_first_not_of("0123456789") != std::string::npos ||
      (port = unsigned(std::stoul(trsvcid))) > 65535)
    throw RpcError(kInvalidParams, fmt::format("trsvcid \"{}\" is not a port", trsvcid));
  out.port = uint16_t(port);
  return out;
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

// A placeholder that no key parser takes: a configuration saved with it fails to load (and says
// which host), rather than let that host in without its key.
constexpr const char* kKeyNotExported = "(a key is configured here; keys are never exported: give it again)";

// The TCP transport exists from start-up: creating it again is accepted, as a script written
// for SPDK does it first. Its sizes are the target's own; one that asks for different ones is
// told which are in effect rather than silently ignored.
Json nvmf_create_transport(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
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
}

Json nvmf_get_transports(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
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
}

Json nvmf_get_subsystems(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  auto nqn = p.opt_str("nqn");
  p.opt_str("tgt_name");
  p.done();
  Json out = Json::array();
  auto& st = t.state();
  if (!nqn || *nqn == nvme::kDiscoveryNqn) out.push_back(subsystem_json(t, *st.discovery));
  for (const auto& s : st.subsystems())
    if (!nqn || *nqn == s->nqn()) out.push_back(subsystem_json(t, *s));
  if (nqn && out.empty()) throw RpcError(kNoSuchDevice, fmt::format("Unable to find subsystem with NQN {}", *nqn));
  return out;
}

// SPDK's defaults: no host allowed until one is added (or allow_any_host), no listener until
// one is added. max_namespaces 0 (SPDK: no limit) is nvtcp's default of 32. The controller ID
// range is this target's share of the subsystem's (a gateway beside another takes its own);
// the discard and write-zeroes sizes are taken and not used.
Json nvmf_create_subsystem(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  target::SubsystemConfig sc;
  sc.nqn = p.str("nqn");
  sc.serial = p.opt_str("serial_number").value_or("");
  sc.model = p.opt_str("model_number").value_or(sc.model);
  sc.allow_any_host = p.opt_bool("allow_any_host").value_or(false);
  const uint64_t max_ns = p.opt_u64("max_namespaces").value_or(0);
  sc.ana_reporting = p.opt_bool("ana_reporting").value_or(false);
  const uint64_t min_cntlid = p.opt_u64("min_cntlid").value_or(1);
  const uint64_t max_cntlid = p.opt_u64("max_cntlid").value_or(target::kMaxCntlid);
  p.opt_u64("max_discard_size_kib");
  p.opt_u64("max_write_zeroes_size_kib");
  p.opt_str("tgt_name");
  p.done();
  // SPDK's checks and words.
  if (min_cntlid < 1 || min_cntlid > target::kMaxCntlid)
    throw RpcError(kInvalidParams, fmt::format("Invalid min_cntlid value {}", min_cntlid));
  if (max_cntlid < 1 || max_cntlid > target::kMaxCntlid)
    throw RpcError(kInvalidParams, fmt::format("Invalid max_cntlid value {}", max_cntlid));
  if (min_cntlid > max_cntlid)
    throw RpcError(kInvalidParams, fmt::format("Invalid cntlid range [{}-{}]", min_cntlid, max_cntlid));
  sc.min_cntlid = uint16_t(min_cntlid);
  sc.max_cntlid = uint16_t(max_cntlid);
  if (max_ns > target::kMaxNamespacesLimit)
    throw RpcError(kInvalidParams, fmt::format("max_namespaces {} is over {}", max_ns, target::kMaxNamespacesLimit));
  sc.max_namespaces = uint32_t(max_ns);
  if (std::string err = t.live_config().create_subsystem(sc); !err.empty()) throw RpcError(kInvalidParams, err);
  return Json(true);
}

// Slow: the subsystem is gone at once (its controllers torn down, its namespaces detached), and
// the answer comes once the commands on its namespaces are done and their devices are back with
// their bdevs (LiveConfig::Leaving), off the RPC thread.
SlowWork nvmf_delete_subsystem(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string nqn = p.str("nqn");
  p.opt_str("tgt_name");
  p.done();
  subsystem_named(t, nqn);
  auto leaving = std::make_shared<target::LiveConfig::Leaving>();
  if (std::string err = t.live_config().begin_delete_subsystem(nqn, *leaving); !err.empty())
    throw RpcError(kInvalidParams, err);
  return settle_slowly(t, std::move(leaving), kInvalidParams);
}

// The discovery NQN (rpc.py turns "discovery" into it) opens a listener that serves
// discovery alone; any other makes that subsystem reachable through it, opening it if the
// target has none at that address and port. ana_state sets every group's state through it.
Json nvmf_subsystem_add_listener(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string nqn = p.str("nqn");
  const ListenAddress la = listen_address_param(p.opt_json("listen_address"));
  const bool secure = p.opt_bool("secure_channel").value_or(false);
  const std::optional<std::string> ana = p.opt_str("ana_state");
  p.opt_str("tgt_name");
  p.done();
  nvme::AnaState state{};
  if (ana && !nvme::ana_state_from_name(*ana, state))
    throw RpcError(kInvalidParams, fmt::format("ana_state \"{}\" is not a state", *ana));
  if (nqn != nvme::kDiscoveryNqn) subsystem_named(t, nqn);
  target::ListenerConfig lc;
  lc.address = la.traddr;
  lc.port = la.port;
  lc.tls_required = secure;
  if (std::string err = t.live_config().add_listener(nqn, lc); !err.empty()) throw RpcError(kInvalidParams, err);
  if (ana && nqn != nvme::kDiscoveryNqn)
    if (std::string err = t.live_config().set_ana_state(nqn, lc.address, lc.port, 0, state); !err.empty())
      throw RpcError(kInvalidParams, err);
  return Json(true);
}

Json nvmf_subsystem_remove_listener(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string nqn = p.str("nqn");
  const ListenAddress la = listen_address_param(p.opt_json("listen_address"));
  p.opt_str("tgt_name");
  p.done();
  if (nqn != nvme::kDiscoveryNqn) subsystem_named(t, nqn);
  if (std::string err = t.live_config().remove_listener(nqn, la.traddr, la.port); !err.empty())
    throw RpcError(kInvalidParams, err);
  return Json(true);
}

Json nvmf_subsystem_get_listeners(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string nqn = p.str("nqn");
  p.opt_str("tgt_name");
  p.done();
  const auto held = subsystem_named(t, nqn);
  Subsystem& s = *held;
  Json out = Json::array();
  for (const auto& l : t.state().listeners())
    if (s.listeners().reachable_through(l.portid)) {
      // Each group that has a namespace, with its state through this listener (every path
      // optimized without ANA reporting).
      const std::shared_ptr<const target::SubsystemPort> port = s.listeners().find_port(l.portid);
      Json states = Json::array();
      for (uint32_t g : s.ana_groups())
        states.push_back(Json{{"ana_group", g},
                              {"ana_state", nvme::ana_state_name(port ? port->state(g) : nvme::AnaState::Optimized)}});
      out.push_back(Json{{"address", listen_address(l)}, {"ana_states", states}});
    }
  return out;
}

// A listener's ANA state for one group, or all (no anagrpid): SPDK's three states, and the
// specification's persistent_loss and change besides.
Json nvmf_subsystem_listener_set_ana_state(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string nqn = p.str("nqn");
  const Json* la = p.opt_json("listen_address");
  const std::string state_name = p.str("ana_state");
  const uint64_t anagrpid = p.opt_u64("anagrpid").value_or(0);
  p.opt_str("tgt_name");
  p.done();
  const ListenAddress la_ = listen_address_param(la);
  const std::string& traddr = la_.traddr;
  const uint16_t port = la_.port;
  nvme::AnaState state{};
  if (!nvme::ana_state_from_name(state_name, state))
    throw RpcError(kInvalidParams,
                   fmt::format("ana_state \"{}\": optimized, non_optimized, inaccessible, persistent_loss or change",
                               state_name));
  if (anagrpid > 0xFFFFFFFFull) throw RpcError(kInvalidParams, fmt::format("anagrpid {} is out of range", anagrpid));
  subsystem_named(t, nqn);
  if (std::string err = t.live_config().set_ana_state(nqn, traddr, port, uint32_t(anagrpid), state); !err.empty())
    throw RpcError(kInvalidParams, err);
  return Json(true);
}

Json nvmf_subsystem_get_controllers(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string nqn = p.str("nqn");
  p.opt_str("tgt_name");
  p.done();
  const auto held = subsystem_named(t, nqn);
  Subsystem& s = *held;
  Json out = Json::array();
  for (const auto& c : s.controllers()) {
    const uint8_t* id = c->hostid();
    out.push_back(Json{{"cntlid", c->cntlid()},
                       {"hostnqn", c->hostnqn()},
                       {"hostid", uuid_text(id)},
                       {"num_io_qpairs", c->num_io_queues()}});
  }
  return out;
}

Json nvmf_subsystem_get_qpairs(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string nqn = p.str("nqn");
  p.opt_str("tgt_name");
  p.done();
  subsystem_named(t, nqn);
  Json out = Json::array();
  const auto listeners = t.state().listeners();
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
}

Json nvmf_get_stats(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
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
}

Json nvmf_subsystem_allow_any_host(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string nqn = p.str("nqn");
  auto any = p.opt_bool("allow_any_host");
  p.opt_str("tgt_name");
  p.done();
  if (!any) throw RpcError(kInvalidParams, "\"allow_any_host\" is required");
  subsystem_named(t, nqn)->hosts().set_allow_any(*any);
  t.live_config().discovery_log_changed();
  log::info("RPC: subsystem {} {} any host", nqn, *any ? "allows" : "no longer allows");
  return Json(true);
}

// Keys under SPDK's parameter names: the name of a keyring key (keyring_file_add_key), as
// SPDK (24.05 and later) and Ceph's gateway give them, checked now (its file reads and parses,
// as SPDK checks the key exists) and held by name: read from its file at each use, and written
// by name by save_config; or, as nvtcp's configuration takes them, the interchange string
// nvme-cli writes or "@FILE".
Json nvmf_subsystem_add_host(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string nqn = p.str("nqn");
  const std::string host = p.str("host");
  auto psk = p.opt_str("psk");
  auto dhchap = p.opt_str("dhchap_key");
  auto dhchap_ctrl = p.opt_str("dhchap_ctrlr_key");
  auto allow_plain = p.opt_bool("allow_plain");  // nvtcp's: a PSK host admitted in the clear too
  p.opt_str("tgt_name");
  p.done();
  const auto held = subsystem_named(t, nqn);
  Subsystem& s = *held;
  Json entry{{"nqn", host}};
  if (psk) entry["psk"] = *psk;
  if (dhchap) entry["dhchap_key"] = *dhchap;
  if (dhchap_ctrl) entry["dhchap_ctrl_key"] = *dhchap_ctrl;
  if (allow_plain) entry["allow_plain"] = *allow_plain;
  target::SubsystemConfig parsed;
  try {
    target::read_host(parsed, entry, t.state().config.keyring);
  } catch (const std::exception& e) {
    log::warn("RPC nvmf_subsystem_add_host: subsystem {}: {}", nqn, e.what());
    throw RpcError(kInvalidParams, e.what());
  }
  std::optional<target::HostKeys> keys;
  if (auto it = parsed.host_keys.find(host); it != parsed.host_keys.end()) keys = it->second;
  std::string from_keyring;
  if (keys)
    for (const target::KeyringRef* r : {&keys->dhchap.ref(), &keys->dhchap_ctrl.ref(), &keys->psk.ref()})
      if (*r) from_keyring += (from_keyring.empty() ? " (keyring keys: " : ", ") + r->name;
  if (!from_keyring.empty()) from_keyring += ")";
  const bool added = s.hosts().add(host, std::move(keys));
  log::info("RPC: subsystem {}: host {} {}{}", nqn, host, added ? "allowed" : "keys replaced", from_keyring);
  if (added) t.live_config().discovery_log_changed();
  return Json(true);
}

Json nvmf_subsystem_add_ns(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string nqn = p.str("nqn");
  const Json* nsp = p.opt_json("namespace");
  p.opt_str("tgt_name");
  p.done();
  if (!nsp || !nsp->is_object()) throw RpcError(kInvalidParams, "\"namespace\" must be an object with \"bdev_name\"");
  Params q(*nsp);
  target::NamespaceConfig nc;
  nc.name = q.str("bdev_name");
  const uint64_t nsid = q.opt_u64("nsid").value_or(0);
  if (nsid > 0xFFFFFFFEull) throw RpcError(kInvalidParams, fmt::format("nsid {} is out of range", nsid));
  nc.nsid = uint32_t(nsid);
  nc.nguid = q.opt_str("nguid").value_or("");
  nc.eui64 = q.opt_str("eui64").value_or("");
  nc.uuid = q.opt_str("uuid").value_or("");
  // Its ANA group; 0 or none: its NSID, as SPDK.
  const uint64_t anagrpid = q.opt_u64("anagrpid").value_or(0);
  if (anagrpid > 0xFFFFFFFFull) throw RpcError(kInvalidParams, fmt::format("anagrpid {} is out of range", anagrpid));
  nc.anagrpid = uint32_t(anagrpid);
  // Refused rather than ignored: taken without effect, it would leave reservations unpersisted.
  if (q.opt_str("ptpl_file").value_or("") != "")
    throw RpcError(kInvalidParams, "ptpl_file: reservations that persist through power loss are not supported");
  // Seen by no host until named for it with nvmf_ns_add_host.
  nc.no_auto_visible = q.opt_bool("no_auto_visible").value_or(false);
  q.done();
  subsystem_named(t, nqn);
  uint32_t got = 0;
  if (std::string err = t.live_config().add_namespace(nqn, nc, got); !err.empty())
    throw RpcError(target::busy_error(err) ? kBusy : kInvalidParams, err);
  return Json(got);
}

// nvmf_ns_add_host / nvmf_ns_remove_host: a namespace added with no_auto_visible is seen by the
// hosts named for it only. The host's controllers hear of the change at once (a namespace
// attribute notice); SPDK's checks and its one error, Invalid parameters, for each.
Json ns_visible(MethodContext& ctx, const Json& params, bool visible) {
  Target& t = ctx.target;
  Params p(params);
  const std::string nqn = p.str("nqn");
  const uint64_t nsid = p.u64("nsid");
  const std::string host = p.str("host");
  p.opt_str("tgt_name");
  p.done();
  const auto sub = subsystem_named(t, nqn);
  const char* verb = visible ? "add" : "remove";
  std::string why;
  if (std::string bad = target::check_nqn(host, "host NQN"); !bad.empty()) why = bad;
  else if (nsid == 0 || nsid > sub->max_namespaces()) why = fmt::format("nsid {} is out of range", nsid);
  else if (int r = sub->set_namespace_visible(uint32_t(nsid), host, visible); r == -ENOENT) why = "no such namespace";
  else if (r == -EPERM) why = "the namespace is visible to every host (it was added without no_auto_visible)";
  if (!why.empty()) {
    log::warn("RPC: unable to {} host {} to namespace {} of {}: {}", verb, host, nsid, nqn, why);
    throw RpcError(kInvalidParams, "Invalid parameters");
  }
  log::info("RPC: subsystem {} namespace {}: {} host {}", nqn, nsid, visible ? "visible to" : "no longer visible to",
            host);
  return Json(true);
}
Json nvmf_ns_add_host(MethodContext& ctx, const Json& params) { return ns_visible(ctx, params, true); }

// A namespace to another ANA group, live (ceph-nvmeof moves a namespace to the group of the
// gateway that is to serve it): SPDK's checks, and the hosts told.
Json nvmf_subsystem_set_ns_ana_group(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string nqn = p.str("nqn");
  const uint64_t nsid = p.u64("nsid");
  const uint64_t grp = p.u64("anagrpid");
  p.opt_str("tgt_name");
  p.done();
  const auto sub = subsystem_named(t, nqn);
  int r = nsid == 0 || nsid > sub->max_namespaces() || grp > 0xFFFFFFFFull
              ? -ENOENT
              : sub->set_namespace_ana_group(uint32_t(nsid), uint32_t(grp));
  if (r == -EINVAL)
    throw RpcError(kInvalidParams, fmt::format("anagrpid {} is not from 1 to {}'s max_namespaces ({})", grp, nqn,
                                               sub->max_namespaces()));
  if (r < 0) throw RpcError(kInvalidParams, fmt::format("subsystem {} has no namespace {}", nqn, nsid));
  log::info("RPC: subsystem {} namespace {}: now in ANA group {}", nqn, nsid, grp);
  return Json(true);
}
Json nvmf_ns_remove_host(MethodContext& ctx, const Json& params) { return ns_visible(ctx, params, false); }

// Slow as nvmf_delete_subsystem: no command finds the namespace once the checks pass, and the
// answer comes once the commands under way on it are done and its device is its bdev's again.
SlowWork nvmf_subsystem_remove_ns(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string nqn = p.str("nqn");
  const uint64_t nsid = p.u64("nsid");
  p.opt_str("tgt_name");
  p.done();
  subsystem_named(t, nqn);
  auto leaving = std::make_shared<target::LiveConfig::Leaving>();
  if (std::string err =
          t.live_config().begin_remove_namespace(nqn, uint32_t(std::min<uint64_t>(nsid, 0xFFFFFFFF)), *leaving);
      !err.empty())
    throw RpcError(kInvalidParams, err);
  return settle_slowly(t, std::move(leaving), kInvalidParams);
}

Json nvmf_subsystem_remove_host(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string nqn = p.str("nqn");
  const std::string host = p.str("host");
  p.opt_str("tgt_name");
  p.done();
  if (!subsystem_named(t, nqn)->remove_host(host))
    throw RpcError(kInternalError, fmt::format("host {} is not allowed on {}", host, nqn));
  log::info("RPC: subsystem {}: host {} no longer allowed", nqn, host);
  t.live_config().discovery_log_changed();
  return Json(true);
}

}  // namespace

// What save_config writes for NVMe-oF: the transport, the discovery port, then each subsystem
// with its hosts, namespaces and listeners, as SPDK orders them.
Json nvmf_config(Target& t) {
  auto& st = t.state();
  const auto& cfg = st.config;
  Json out = Json::array();
  out.push_back(Json{{"method", "nvmf_create_transport"},
                     {"params",
                      {{"trtype", "TCP"},
                       {"max_queue_depth", cfg.max_queue_depth},
                       {"max_io_qpairs_per_ctrlr", cfg.max_io_queues + 1},
                       {"in_capsule_data_size", cfg.in_capsule_data},
                       {"max_io_size", cfg.mdts_bytes}}}});
  auto add_listener = [&](const std::string& nqn, const Listener& l, uint16_t port) {
    Json a = listen_address(l);
    a["trsvcid"] = std::to_string(port);
    out.push_back(Json{{"method", "nvmf_subsystem_add_listener"},
                       {"params", {{"nqn", nqn}, {"listen_address", a}, {"secure_channel", l.tls_required}}}});
  };
  const std::vector<Listener> listeners = st.listeners();
  // The port as it is now: none once remove_listener took it away.
  if (auto d = discovery_listener(t)) add_listener(nvme::kDiscoveryNqn, *d, d->port);
  for (const auto& s : st.subsystems()) {
    out.push_back(Json{{"method", "nvmf_create_subsystem"},
                       {"params",
                        {{"nqn", s->nqn()},
                         {"allow_any_host", s->hosts().allows_any()},
                         {"serial_number", s->serial()},
                         {"model_number", s->model()},
                         {"max_namespaces", s->max_namespaces()},
                         {"min_cntlid", s->cntlid_range().first},
                         {"max_cntlid", s->cntlid_range().second},
                         {"ana_reporting", s->ana_reporting()}}}});
    for (const auto& h : s->hosts().list()) {
      Json p{{"nqn", s->nqn()}, {"host", h.nqn}};
      // A key read from the keyring by its name, as SPDK writes it (the keyring section,
      // first, adds the name again); one given inline is never written.
      if (h.psk) p["psk"] = h.psk_ref ? h.psk_ref.name : kKeyNotExported;
      if (h.allow_plain) p["allow_plain"] = true;
      if (h.dhchap) p["dhchap_key"] = h.dhchap_ref ? h.dhchap_ref.name : kKeyNotExported;
      if (h.dhchap_ctrl) p["dhchap_ctrlr_key"] = h.dhchap_ctrl_ref ? h.dhchap_ctrl_ref.name : kKeyNotExported;
      out.push_back(Json{{"method", "nvmf_subsystem_add_host"}, {"params", p}});
    }
    for (const auto* ns : s->namespaces()) {
      Json nsj{{"nsid", ns->nsid},
               {"bdev_name", ns->name},
               {"nguid", hex(ns->nguid, 16)},
               {"eui64", hex(ns->eui64, 8)},
               {"uuid", uuid_text(ns->uuid)},
               {"anagrpid", ns->anagrpid.load()}};
      if (!ns->auto_visible) nsj["no_auto_visible"] = true;
      out.push_back(Json{{"method", "nvmf_subsystem_add_ns"}, {"params", {{"nqn", s->nqn()}, {"namespace", nsj}}}});
      for (const std::string& h : ns->visible_hosts)
        out.push_back(Json{{"method", "nvmf_ns_add_host"},
                           {"params", {{"nqn", s->nqn()}, {"nsid", ns->nsid}, {"host", h}}}});
    }
    for (const Listener& l : listeners)
      if (s->listeners().reachable_through(l.portid)) add_listener(s->nqn(), l, l.port);
    // States set by RPC: after the listeners, which they name.
    for (const Listener& l : listeners) {
      if (!s->ana_reporting() || !s->listeners().reachable_through(l.portid)) continue;
      const std::shared_ptr<const target::SubsystemPort> port = s->listeners().find_port(l.portid);
      for (uint32_t g : s->ana_groups()) {
        if (!port || port->state(g) == nvme::AnaState::Optimized) continue;
        out.push_back(Json{{"method", "nvmf_subsystem_listener_set_ana_state"},
                           {"params",
                            {{"nqn", s->nqn()},
                             {"listen_address", listen_address(l)},
                             {"ana_state", nvme::ana_state_name(port->state(g))},
                             {"anagrpid", g}}}});
      }
    }
  }
  return out;
}

namespace {

// Namespaces part 1 detached are finished whatever becomes of the request: one the RPC server
// drops without running its parts 2 and 3 (it stopped before a worker took the request) waits
// for their commands and settles them as it goes, rather than freeing them under those commands.
struct Settling {
  Target& t;
  target::LiveConfig::Leaving leaving;
  bool drained = false, settled = false;
  Settling(Target& target, target::LiveConfig::Leaving&& l) : t(target), leaving(std::move(l)) {}
  Settling(const Settling&) = delete;
  Settling& operator=(const Settling&) = delete;
  ~Settling() {
    if (settled) return;
    if (!drained) target::LiveConfig::drain(leaving);
    t.live_config().settle(std::move(leaving));
  }
};

}  // namespace

SlowWork settle_slowly(Target& t, std::shared_ptr<target::LiveConfig::Leaving> leaving, int error_code) {
  auto s = std::make_shared<Settling>(t, std::move(*leaving));
  return [s, error_code]() -> SlowCommit {
    target::LiveConfig::drain(s->leaving);  // the commands on its namespaces, up to 60 s
    s->drained = true;
    return [s, error_code]() -> Json {
      s->settled = true;
      if (std::string err = s->t.live_config().settle(std::move(s->leaving)); !err.empty())
        throw RpcError(error_code, err);
      return Json(true);
    };
  };
}

std::span<const SlowMethodEntry> nvmf_slow_methods() {
  static constexpr SlowMethodEntry kMethods[] = {
    {"nvmf_delete_subsystem", nvmf_delete_subsystem},
    {"nvmf_subsystem_remove_ns", nvmf_subsystem_remove_ns},
  };
  return kMethods;
}

std::span<const MethodEntry> nvmf_methods() {
  static constexpr MethodEntry kMethods[] = {
    {"nvmf_create_transport", nvmf_create_transport},
    {"nvmf_get_transports", nvmf_get_transports},
    {"nvmf_get_subsystems", nvmf_get_subsystems},
    {"nvmf_create_subsystem", nvmf_create_subsystem},
    {"nvmf_subsystem_add_listener", nvmf_subsystem_add_listener},
    {"nvmf_subsystem_remove_listener", nvmf_subsystem_remove_listener},
    {"nvmf_subsystem_get_listeners", nvmf_subsystem_get_listeners},
    {"nvmf_subsystem_listener_set_ana_state", nvmf_subsystem_listener_set_ana_state},
    {"nvmf_subsystem_get_controllers", nvmf_subsystem_get_controllers},
    {"nvmf_subsystem_get_qpairs", nvmf_subsystem_get_qpairs},
    {"nvmf_get_stats", nvmf_get_stats},
    {"nvmf_subsystem_allow_any_host", nvmf_subsystem_allow_any_host},
    {"nvmf_subsystem_add_host", nvmf_subsystem_add_host},
    {"nvmf_subsystem_add_ns", nvmf_subsystem_add_ns},
    {"nvmf_ns_add_host", nvmf_ns_add_host},
    {"nvmf_ns_remove_host", nvmf_ns_remove_host},
    {"nvmf_subsystem_set_ns_ana_group", nvmf_subsystem_set_ns_ana_group},
    {"nvmf_subsystem_remove_host", nvmf_subsystem_remove_host},
  };
  return kMethods;
}

}  // namespace nvtcp::control

// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cctype>
#include <random>

#include <fmt/format.h>

#include "nvtcp/host.hpp"

namespace nvtcp::host {

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

bool parse_bool(const std::string& v, bool& out) {
  std::string l = lower(v);
  if (l.empty() || l == "1" || l == "true" || l == "yes" || l == "on") out = true;
  else if (l == "0" || l == "false" || l == "no" || l == "off") out = false;
  else return false;
  return true;
}
}  // namespace

bool TransportId::parse(const std::string& text, TransportId& out, std::string& err) {
  TransportId t;
  bool have_addr = false;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t start = i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (start == i) break;
    std::string tok = text.substr(start, i - start);
    // The key ends at the first ':' or '='; values (NQNs, IPv6 addresses) may hold more.
    size_t sep = tok.find_first_of(":=");
    std::string key = lower(tok.substr(0, sep));
    std::string val = sep == std::string::npos ? "" : tok.substr(sep + 1);
    if (key == "trtype") {
      // engine: the offload engine on this machine, traddr = its UNIX socket.
      if (lower(val) != "tcp" && lower(val) != "engine") {
        err = fmt::format("trtype '{}' is not supported (tcp or engine)", val);
        return false;
      }
      t.trtype = lower(val);
    } else if (key == "adrfam") {
      std::string l = lower(val);
      if (l != "ipv4" && l != "ipv6") {
        err = fmt::format("adrfam '{}' is not IPv4 or IPv6", val);
        return false;
      }
      t.adrfam = l == "ipv4" ? "IPv4" : "IPv6";
    } else if (key == "traddr") {
      if (val.empty()) {
        err = "traddr is empty";
        return false;
      }
      t.traddr = val;
      have_addr = true;
    } else if (key == "trsvcid") {
      try {
        size_t pos = 0;
        unsigned long p = std::stoul(val, &pos);
        if (pos != val.size() || p == 0 || p > 65535) throw std::out_of_range("port");
        t.trsvcid = uint16_t(p);
      } catch (...) {
        err = fmt::format("trsvcid '{}' is not a TCP port", val);
        return false;
      }
    } else if (key == "subnqn") {
      t.subnqn = val;
    } else if (key == "hostnqn") {
      t.hostnqn = val;
    } else if (key == "ns" || key == "nsid") {
      try {
        size_t pos = 0;
        unsigned long n = std::stoul(val, &pos);
        if (pos != val.size() || n == 0 || n >= 0xFFFFFFFFul) throw std::out_of_range("ns");
        t.nsid = uint32_t(n);
      } catch (...) {
        err = fmt::format("ns '{}' is not a namespace ID", val);
        return false;
      }
    } else if (key == "hdgst" || key == "ddgst") {
      bool b = true;
      if (!parse_bool(val, b)) {
        err = fmt::format("{} '{}' is not a yes/no value", key, val);
        return false;
      }
      (key == "hdgst" ? t.hdgst : t.ddgst) = b;
    } else {
      err = fmt::format("unknown transport ID key '{}' (known: trtype adrfam traddr trsvcid subnqn hostnqn ns hdgst ddgst)",
                        key);
      return false;
    }
  }
  if (!have_addr) {
    err = "transport ID needs traddr (e.g. 'trtype:tcp traddr:127.0.0.1 trsvcid:4420 subnqn:nqn...')";
    return false;
  }
  if (t.trtype == "engine" && t.subnqn.empty()) {
    err = "an engine transport ID needs subnqn (the remote subsystem the engine carries)";
    return false;
  }
  if (t.subnqn.size() > 223 || t.hostnqn.size() > 223) {
    err = "NQNs are at most 223 bytes";
    return false;
  }
  out = t;
  return true;
}

std::string TransportId::to_string() const {
  std::string s = trtype == "engine"
                      ? fmt::format("trtype:engine traddr:{}", traddr)
                      : fmt::format("trtype:{} adrfam:{} traddr:{} trsvcid:{}", trtype, adrfam, traddr, trsvcid);
  if (!subnqn.empty()) s += " subnqn:" + subnqn;
  if (!hostnqn.empty()) s += " hostnqn:" + hostnqn;
  if (nsid != 1) s += fmt::format(" ns:{}", nsid);
  if (hdgst) s += " hdgst";
  if (ddgst) s += " ddgst";
  return s;
}

std::string default_hostnqn(const uint8_t id[16]) {
  return fmt::format(
      "nqn.2014-08.org.nvmexpress:uuid:{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-"
      "{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
      id[0], id[1], id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11], id[12], id[13], id[14],
      id[15]);
}

bool parse_poll_mode(const std::string& text, PollMode& out) {
  const std::string l = lower(text);
  if (l == "default") out = PollMode::Default;
  else if (l == "interrupt") out = PollMode::Interrupt;
  else if (l == "busy") out = PollMode::Busy;
  else if (l == "hybrid") out = PollMode::Hybrid;
  else return false;
  return true;
}

}  // namespace nvtcp::host

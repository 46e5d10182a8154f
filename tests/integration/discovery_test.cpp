// SPDX-License-Identifier: Apache-2.0
// The discovery service as a remote `nvme connect-all` sees it: which subsystems it lists on
// which listener, and the addresses it gives, so that every entry can be dialled.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "nvtcp/host.hpp"
#include "nvtcp/log_pages.hpp"
#include "test_target.hpp"
#include "wire/fabrics.hpp"

namespace nvtcp::test::discovery_test {
namespace {

using host::Controller;
using host::ControllerOptions;

constexpr const char* kBoundNqn = "nqn.2026-11.io.nvtcp:bound";

std::string field(const char* f, size_t n) {
  std::string s(f, strnlen(f, n));
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

struct Entry {
  uint8_t subtype, adrfam;
  uint16_t eflags;
  std::string nqn, traddr, trsvcid;
  bool operator<(const Entry& o) const {
    return std::tie(nqn, traddr, trsvcid, subtype) < std::tie(o.nqn, o.traddr, o.trsvcid, o.subtype);
  }
};

// The discovery log as read through traddr:port.
std::vector<Entry> discover(const std::string& traddr, uint16_t port) {
  host::TransportId trid;
  trid.traddr = traddr;
  trid.trsvcid = port;
  trid.subnqn = nvme::kDiscoveryNqn;
  std::string err;
  auto disc = Controller::connect(trid, ControllerOptions{}, err);
  EXPECT_TRUE(disc) << err;
  if (!disc) return {};
  std::vector<uint8_t> log;
  EXPECT_TRUE(disc->discovery_log(log, err)) << err;
  std::vector<Entry> out;
  if (log.size() < sizeof(nvme::DiscoveryLogHeader)) return out;
  nvme::DiscoveryLogHeader h;
  std::memcpy(&h, log.data(), sizeof(h));
  for (uint64_t i = 0; i < h.numrec && sizeof(h) + (i + 1) * sizeof(nvme::DiscoveryLogEntry) <= log.size(); ++i) {
    nvme::DiscoveryLogEntry e;
    std::memcpy(&e, log.data() + sizeof(h) + i * sizeof(e), sizeof(e));
    out.push_back({e.subtype, e.adrfam, e.eflags, field(e.subnqn, sizeof(e.subnqn)), field(e.traddr, sizeof(e.traddr)),
                   field(e.trsvcid, sizeof(e.trsvcid))});
  }
  return out;
}

bool can_connect(const std::string& traddr, uint16_t port, const std::string& nqn) {
  host::TransportId trid;
  trid.traddr = traddr;
  trid.trsvcid = port;
  trid.subnqn = nqn;
  std::string err;
  return Controller::connect(trid, ControllerOptions{}, err) != nullptr;
}

// A listener on 0.0.0.0 cannot be dialled: each host is given the address it reached.
TEST(Discovery, WildcardListenerAdvertisesTheAddressTheHostReached) {
  auto cfg = default_config();
  cfg.listeners = {{"0.0.0.0", 0}};
  RunningTarget t(cfg);
  const std::string port = std::to_string(t.port());
  for (const std::string addr : {"127.0.0.1", "127.0.0.2"}) {
    SCOPED_TRACE("reached through " + addr);
    auto entries = discover(addr, t.port());
    ASSERT_EQ(entries.size(), 2u);  // the subsystem and the discovery subsystem, on the one listener
    std::set<std::string> nqns;
    for (const auto& e : entries) {
      nqns.insert(e.nqn);
      EXPECT_EQ(e.traddr, addr) << e.nqn;
      EXPECT_EQ(e.trsvcid, port);
      EXPECT_EQ(e.adrfam, nvme::kAdrfamIpv4);
      EXPECT_EQ(e.eflags, 0) << "nvmet sets no EFLAGS";
    }
    EXPECT_EQ(nqns, (std::set<std::string>{kTestNqn, nvme::kDiscoveryNqn}));
    for (const auto& e : entries) {  // and every entry can be dialled as given
      if (e.subtype == nvme::kSubtypeNvme) {
        EXPECT_TRUE(can_connect(e.traddr, uint16_t(std::stoi(e.trsvcid)), e.nqn));
      }
    }
  }
}

// A subsystem bound to named listeners is listed, and accepts Connect, on those only; one
// bound to none is on every listener, as before.
TEST(Discovery, SubsystemsAreReachedOnlyThroughTheirListeners) {
  auto cfg = default_config();
  cfg.listeners = {{"127.0.0.1", 0}, {"0.0.0.0", 0}};
  target::SubsystemConfig bound;
  bound.nqn = kBoundNqn;
  bound.listeners = {"127.0.0.1:0"};
  bound.namespaces.push_back({1, "null", 1ull << 30, "", 512});
  cfg.subsystems.push_back(bound);
  RunningTarget t(cfg);
  const std::string p0 = std::to_string(t.port(0)), p1 = std::to_string(t.port(1));
  ASSERT_NE(p0, p1);

  auto entries = discover("127.0.0.3", t.port(1));
  std::multiset<std::tuple<std::string, std::string, std::string>> got;
  for (const auto& e : entries) got.insert({e.nqn, e.traddr, e.trsvcid});
  const std::multiset<std::tuple<std::string, std::string, std::string>> want{
      {kTestNqn, "127.0.0.1", p0},           {kTestNqn, "127.0.0.3", p1},
      {kBoundNqn, "127.0.0.1", p0},          {nvme::kDiscoveryNqn, "127.0.0.1", p0},
      {nvme::kDiscoveryNqn, "127.0.0.3", p1}};
  EXPECT_EQ(got, want);

  EXPECT_TRUE(can_connect("127.0.0.1", t.port(0), kBoundNqn));
  EXPECT_FALSE(can_connect("127.0.0.1", t.port(1), kBoundNqn)) << "not bound to the wildcard listener";
  EXPECT_TRUE(can_connect("127.0.0.1", t.port(0), kTestNqn));
  EXPECT_TRUE(can_connect("127.0.0.1", t.port(1), kTestNqn));
}

}  // namespace
}  // namespace nvtcp::test::discovery_test

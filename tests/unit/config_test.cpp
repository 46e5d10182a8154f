// SPDX-License-Identifier: Apache-2.0
// The target configuration: every numeric setting is checked against its range before
// anything is built from it, from the JSON file and from code alike.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "target/config.hpp"

namespace nvtcp::target::config_test {
namespace {

// Loads json (one subsystem with a RAM namespace added when it names none) and finalizes it;
// returns the first error, or empty.
std::string load(const std::string& json) {
  std::string path = "/tmp/nvtcp-config-test-" + std::to_string(getpid()) + ".json";
  {
    std::ofstream f(path);
    f << json;
  }
  TargetConfig cfg;
  std::string err = load_config_file(path, cfg);
  std::remove(path.c_str());
  if (!err.empty()) return err;
  if (cfg.subsystems.empty()) cfg.subsystems.push_back({"nqn.2026-11.io.nvtcp:t", "", "m", true, {}, {{0, "ram", 1 << 20, "", 512}}});
  return finalize_config(cfg);
}

TEST(ConfigRanges, DefaultsAreAccepted) { EXPECT_EQ(load("{}"), ""); }

// NQNs: at most 223 bytes, "nqn." first, UTF-8 text with no control character (C0, DEL, C1),
// no overlong form, no surrogate. Names: 1 to 255 bytes of the same text.
TEST(ConfigNames, NqnsAndNamesAreBoundedPrintableUtf8) {
  EXPECT_EQ(check_nqn("nqn.2014-08.org.nvmexpress:uuid:2b9e1c7a-0d3f-4c55-9a61-7f00a1b2c3d4", "host NQN"), "");
  EXPECT_EQ(check_nqn("nqn.2026-12.io.nvtcp:caf\xc3\xa9-\xe2\x82\xac-\xf0\x9f\x92\xbe", "subsystem NQN"), "");
  EXPECT_EQ(check_nqn("nqn." + std::string(219, 'x'), "subsystem NQN"), "");
  for (const std::string& bad :
       {std::string(), "nqn." + std::string(220, 'x'), std::string("iqn.2026-12.io.nvtcp:a"),
        std::string("nqn.a\nb"), std::string("nqn.a\x1b[2J"), std::string("nqn.a\x7f"), std::string("nqn.a\xc2\x9b"),
        std::string("nqn.a\xff"), std::string("nqn.a\xc0\xaf"), std::string("nqn.a\xed\xa0\x80"),
        std::string("nqn.a\xf4\x90\x80\x80"), std::string("nqn.a\xe2\x82")})
    EXPECT_NE(check_nqn(bad, "subsystem NQN"), "") << bad.size();
  EXPECT_EQ(check_name("Malloc0", "bdev name"), "");
  EXPECT_EQ(check_name(std::string(255, 'n'), "bdev name"), "");
  EXPECT_NE(check_name(std::string(256, 'n'), "bdev name"), "");
  EXPECT_NE(check_name("", "bdev name"), "");
  EXPECT_NE(check_name("a\tb", "bdev name"), "");
}

// MDTS comes from the file (SPDK's default is 128 KiB); it was checked but never read.
TEST(ConfigRanges, MdtsIsReadFromTheFile) {
  std::string path = "/tmp/nvtcp-config-mdts-" + std::to_string(getpid()) + ".json";
  {
    std::ofstream f(path);
    f << R"({"mdts_bytes": "128K"})";
  }
  TargetConfig cfg;
  EXPECT_EQ(load_config_file(path, cfg), "");
  std::remove(path.c_str());
  EXPECT_EQ(cfg.mdts_bytes, 128u << 10);
  EXPECT_NE(load(R"({"mdts_bytes": 100000})").find("power of two"), std::string::npos);
  EXPECT_NE(load(R"({"mdts_bytes": 2048})"), "");
}

TEST(ConfigRanges, QueueDepthMustFitSixteenBits) {
  EXPECT_EQ(load(R"({"max_queue_depth": 65535})"), "");
  EXPECT_NE(load(R"({"max_queue_depth": 65536})").find("max_queue_depth must be from 2 to 65535"), std::string::npos);
  EXPECT_NE(load(R"({"max_queue_depth": 1})"), "");
}

TEST(ConfigRanges, QueueCountThatWouldWrapIsRefused) {
  EXPECT_NE(load(R"({"max_io_queues": 4294967295})").find("max_io_queues must be from 1 to 1024"), std::string::npos);
  EXPECT_NE(load(R"({"max_io_queues": 0})"), "");
  EXPECT_NE(load(R"({"max_io_queues": 4294967296})").find("'max_io_queues' must be an integer"), std::string::npos);
  EXPECT_EQ(load(R"({"max_io_queues": 1024})"), "");
}

TEST(ConfigRanges, RegistrantLimitMustFitReportsSixteenBitCount) {
  EXPECT_EQ(TargetConfig{}.max_registrants_per_namespace, 256u);
  EXPECT_EQ(load(R"({"max_registrants_per_namespace": 65535})"), "");
  EXPECT_EQ(load(R"({"max_registrants_per_namespace": 1})"), "");
  EXPECT_NE(load(R"({"max_registrants_per_namespace": 65536})").find("max_registrants_per_namespace must be from 1 to 65535"),
            std::string::npos);
  EXPECT_NE(load(R"({"max_registrants_per_namespace": 0})"), "");
  EXPECT_NE(load(R"({"max_registrants_per_namespace": -1})"), "");
}

TEST(ConfigRanges, SocketBuffersAreASizeUpToAGibibyte) {
  EXPECT_EQ(TargetConfig{}.socket_buffer_bytes, 0u);  // the kernel autotunes unless told
  EXPECT_EQ(load(R"({"socket_buffer_bytes": "2M"})"), "");
  EXPECT_FALSE(TargetConfig{}.send_buffer_bytes);  // not set: socket_buffer_bytes, else 512 KiB
  EXPECT_EQ(load(R"({"send_buffer_bytes": "256K"})"), "");
  EXPECT_EQ(load(R"({"send_buffer_bytes": 0})"), "");
  EXPECT_NE(load(R"({"send_buffer_bytes": "2G"})").find("send_buffer_bytes must be from 0 to 1073741824"),
            std::string::npos);
  EXPECT_NE(load(R"({"socket_buffer_bytes": "2G"})").find("socket_buffer_bytes must be from 0 to 1073741824"),
            std::string::npos);
}

TEST(ConfigRanges, ValuesAreNotCutToFit) {
  EXPECT_NE(load(R"({"listeners": [{"address": "127.0.0.1", "port": 70000}]})").find("'port' must be an integer"),
            std::string::npos);
  EXPECT_NE(load(R"({"discovery_port": -1})"), "");
  EXPECT_NE(load(R"({"cores": 0})"), "");
  EXPECT_NE(load(R"({"icreq_timeout_ms": 0})"), "");
  EXPECT_NE(load(R"({"max_h2c_data": "8G"})").find("below 4G"), std::string::npos);
  EXPECT_NE(load(R"({"in_capsule_data": 1000})").find("multiple of 16"), std::string::npos);
  EXPECT_NE(load(R"({"sqpoll_cpu": -2})"), "");
  EXPECT_NE(load(R"({"max_queue_depth": 1.5})"), "");
  EXPECT_NE(load(R"({"max_queue_depth": "64"})"), "");
  EXPECT_NE(load(R"({"subsystems": [{"nqn": "nqn.2026-11.io.nvtcp:x",
                                     "namespaces": [{"type": "ram", "size": "1M", "nsid": 4294967294}]}]})"),
            "");
}

TEST(ConfigRanges, CodeBuiltConfigurationsAreCheckedToo) {
  TargetConfig cfg;
  cfg.subsystems.push_back({"nqn.2026-11.io.nvtcp:t", "", "m", true, {}, {{0, "null", 1 << 20, "", 512}}});
  cfg.max_r2t_per_command = 16;
  EXPECT_NE(finalize_config(cfg).find("max_r2t_per_command"), std::string::npos);
  cfg.max_r2t_per_command = 4;
  cfg.mdts_bytes = 3 << 12;
  EXPECT_NE(finalize_config(cfg).find("power of two"), std::string::npos);
  cfg.mdts_bytes = 1 << 20;
  cfg.cpus = {0, 100000};
  EXPECT_NE(finalize_config(cfg).find("cpus"), std::string::npos);
  cfg.cpus = {0};
  EXPECT_EQ(finalize_config(cfg), "");
}

// An RBD namespace names its pool and image, and how to reach the cluster; its size is the
// image's, so it needs none.
TEST(ConfigNamespaces, AnRbdNamespaceNamesItsPoolImageAndCluster) {
  std::string path = "/tmp/nvtcp-config-rbd-" + std::to_string(getpid()) + ".json";
  {
    std::ofstream f(path);
    f << R"({"subsystems": [{"nqn": "nqn.2026-12.io.nvtcp:gw", "namespaces": [
          {"type": "rbd", "pool": "rbd", "image": "disk", "ceph_conf": "/etc/ceph/ceph.conf", "user": "gw",
           "config": {"mon_host": "v2:127.0.0.1:3300"}}]}]})";
  }
  TargetConfig cfg;
  ASSERT_EQ(load_config_file(path, cfg), "");
  std::remove(path.c_str());
  ASSERT_EQ(finalize_config(cfg), "");
  const NamespaceConfig& n = cfg.subsystems.at(0).namespaces.at(0);
  EXPECT_EQ(n.type, "rbd");
  EXPECT_EQ(n.rbd.pool, "rbd");
  EXPECT_EQ(n.rbd.image, "disk");
  EXPECT_EQ(n.rbd.config_file, "/etc/ceph/ceph.conf");
  EXPECT_EQ(n.rbd.user, "gw");
  ASSERT_EQ(n.rbd.config.size(), 1u);
  EXPECT_EQ(n.rbd.config[0], (std::pair<std::string, std::string>{"mon_host", "v2:127.0.0.1:3300"}));
  const std::string no_image = R"({"subsystems": [{"nqn": "nqn.2026-12.io.nvtcp:gw", "namespaces": [
      {"type": "rbd", "pool": "rbd"}]}]})";
  EXPECT_NE(load(no_image).find("needs a pool and an image"), std::string::npos) << load(no_image);
  const std::string bad_option = R"({"subsystems": [{"nqn": "nqn.2026-12.io.nvtcp:gw", "namespaces": [
      {"type": "rbd", "pool": "rbd", "image": "disk", "config": {"rbd_cache": true}}]}]})";
  EXPECT_NE(load(bad_option).find("must be a string"), std::string::npos) << load(bad_option);
}

TEST(ConfigListeners, SubsystemsNameListenersTheTargetHas) {
  const std::string listeners = R"("listeners": [{"address": "127.0.0.1", "port": 4420}, {"address": "::", "port": 4421}])";
  auto with = [&](const std::string& bound) {
    return load("{" + listeners + R"(, "subsystems": [{"nqn": "nqn.2026-11.io.nvtcp:b", "listeners": )" + bound +
                R"(, "namespaces": [{"type": "ram", "size": "1M"}]}]})");
  };
  EXPECT_EQ(with(R"(["127.0.0.1:4420"])"), "");
  EXPECT_EQ(with(R"(["[::]:4421", "127.0.0.1:4420"])"), "");
  EXPECT_EQ(with("[]"), "");  // every listener
  EXPECT_NE(with(R"(["127.0.0.1:4421"])").find("'127.0.0.1:4421' is not one of the target's listeners"),
            std::string::npos);
  EXPECT_NE(with(R"(["4420"])").find("is not ADDRESS:PORT"), std::string::npos);
  EXPECT_NE(with(R"(["127.0.0.1:99999"])").find("is not ADDRESS:PORT"), std::string::npos);
}

// A subsystem's controller ID range in nvtcp's own file: within 1..0xFFEF, min not above max.
TEST(ConfigRanges, ControllerIdRangeIsChecked) {
  auto with = [](const std::string& range) {
    return load(R"({"subsystems": [{"nqn": "nqn.2026-11.io.nvtcp:c", )" + range +
                R"(, "namespaces": [{"type": "ram", "size": "1M"}]}]})");
  };
  EXPECT_EQ(with(R"("min_cntlid": 2049, "max_cntlid": 4096)"), "");
  EXPECT_NE(with(R"("min_cntlid": 5, "max_cntlid": 4)").find("controller IDs 5 to 4"), std::string::npos);
  EXPECT_NE(with(R"("min_cntlid": 0)").find("controller IDs 0 to"), std::string::npos);
  EXPECT_NE(with(R"("max_cntlid": 65520)").find("not a range within 1 to 65519"), std::string::npos);
  EXPECT_NE(with(R"("max_cntlid": 70000)").find("'max_cntlid' must be an integer"), std::string::npos);
}

// An empty start (no subsystem, to be configured over JSON-RPC) listens nowhere until told, so
// two such gateways on one machine do not both take 4420 and 8009; with a subsystem and no
// listener, the default port and the discovery port are taken as before.
TEST(ConfigListeners, AnEmptyStartListensNowhereUntilTold) {
  TargetConfig empty;
  ASSERT_EQ(finalize_config(empty), "");
  EXPECT_TRUE(empty.listeners.empty());
  EXPECT_EQ(empty.discovery_port, 0);

  TargetConfig one;
  one.subsystems.push_back({"nqn.2026-11.io.nvtcp:t", "", "m", true, {}, {{0, "ram", 1 << 20, "", 512}}});
  ASSERT_EQ(finalize_config(one), "");
  ASSERT_EQ(one.listeners.size(), 1u);
  EXPECT_EQ(one.listeners[0].port, 4420);
  EXPECT_EQ(one.discovery_port, 8009);

  TargetConfig told;  // --listen given: kept, with the discovery port beside it
  told.listeners.push_back({"127.0.0.1", 4430});
  ASSERT_EQ(finalize_config(told), "");
  ASSERT_EQ(told.listeners.size(), 1u);
  EXPECT_EQ(told.discovery_port, 8009);
}

// A listener's TLS settings: "tls" required or none, "ktls" a boolean (kTLS TX on by default).
TEST(ConfigListeners, TlsAndKtlsAreReadAndChecked) {
  std::string path = "/tmp/nvtcp-config-ktls-" + std::to_string(getpid()) + ".json";
  auto read = [&](const std::string& json, TargetConfig& cfg) {
    {
      std::ofstream f(path);
      f << json;
    }
    std::string err = load_config_file(path, cfg);
    std::remove(path.c_str());
    return err;
  };
  TargetConfig cfg;
  ASSERT_EQ(read(R"({"listeners": [{"port": 4420, "tls": "required", "ktls": false}, {"port": 4421}]})", cfg), "");
  ASSERT_EQ(cfg.listeners.size(), 2u);
  EXPECT_TRUE(cfg.listeners[0].tls_required);
  EXPECT_FALSE(cfg.listeners[0].ktls);
  EXPECT_FALSE(cfg.listeners[1].tls_required);
  EXPECT_TRUE(cfg.listeners[1].ktls);
  TargetConfig bad;
  EXPECT_NE(read(R"({"listeners": [{"port": 4420, "tls": "required", "ktls": "off"}]})", bad).find("\"ktls\" is true or false"),
            std::string::npos);
  EXPECT_NE(read(R"({"listeners": [{"port": 4420, "tls": "yes"}]})", bad).find("\"tls\" is \"required\" or \"none\""),
            std::string::npos);
}

TEST(ConfigListeners, ParseListener) {
  ListenerConfig l;
  ASSERT_TRUE(parse_listener("10.1.2.3:4420", l));
  EXPECT_EQ(l.address, "10.1.2.3");
  EXPECT_EQ(l.port, 4420);
  ASSERT_TRUE(parse_listener("[fe80::1]:8009", l));
  EXPECT_EQ(l.address, "fe80::1");
  EXPECT_EQ(l.port, 8009);
  EXPECT_FALSE(parse_listener("10.1.2.3", l));
  EXPECT_FALSE(parse_listener("10.1.2.3:", l));
  EXPECT_FALSE(parse_listener(":4420", l));
  EXPECT_FALSE(parse_listener("10.1.2.3:44x", l));
  EXPECT_TRUE((ListenerConfig{"0.0.0.0", 1}.wildcard()));
  EXPECT_TRUE((ListenerConfig{"::", 1}.wildcard()));
  EXPECT_FALSE((ListenerConfig{"127.0.0.1", 1}.wildcard()));
}


// "hosts" entries with keys: parsed and checked on load, inline or from an owner-only file;
// errors name the host and the field, never the key.
constexpr const char* kKey = "DHHC-1:01:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:";

std::string load_hosts(const std::string& hosts, TargetConfig& cfg) {
  std::string path = "/tmp/nvtcp-config-hosts-" + std::to_string(getpid()) + ".json";
  {
    std::ofstream f(path);
    f << R"({"subsystems": [{"nqn": "nqn.2026-11.io.nvtcp:t", "hosts": )" << hosts
      << R"(, "namespaces": [{"type": "ram", "size": "1M"}]}]})";
  }
  std::string err = load_config_file(path, cfg);
  std::remove(path.c_str());
  return err;
}

TEST(ConfigHosts, PlainNqnsAndHostsWithKeys) {
  TargetConfig cfg;
  std::string hosts = std::string(R"(["nqn.h1", {"nqn": "nqn.h2", "dhchap_key": ")") + kKey +
                      R"(", "dhchap_ctrl_key": ")" + kKey + R"(", "psk": "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:"}])";
  ASSERT_EQ(load_hosts(hosts, cfg), "");
  const SubsystemConfig& sc = cfg.subsystems.at(0);
  EXPECT_FALSE(sc.allow_any_host);
  EXPECT_EQ(sc.hosts, (std::vector<std::string>{"nqn.h1", "nqn.h2"}));
  ASSERT_EQ(sc.host_keys.count("nqn.h2"), 1u);
  EXPECT_EQ(sc.host_keys.count("nqn.h1"), 0u);
  const HostKeys& k = sc.host_keys.at("nqn.h2");
  ASSERT_TRUE(k.dhchap && k.dhchap_ctrl && k.psk);
  std::string why;
  const auto dhchap = k.dhchap.material(why);
  const auto psk = k.psk.material(why);
  ASSERT_TRUE(dhchap && psk) << why;
  EXPECT_EQ(dhchap->transform, 1);
  EXPECT_EQ(dhchap->key.size(), 32u);
  EXPECT_EQ(psk->hash, 1);
  EXPECT_FALSE(k.allow_plain) << "a PSK host is admitted over TLS only unless the configuration says otherwise";
}

TEST(ConfigHosts, APskHostIsAdmittedInTheClearOnlyWhenSaidSo) {
  TargetConfig cfg;
  ASSERT_EQ(load_hosts(R"([{"nqn": "nqn.h", "psk": "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
                            "allow_plain": true}])",
                       cfg),
            "");
  EXPECT_TRUE(cfg.subsystems.at(0).host_keys.at("nqn.h").allow_plain);
}

TEST(ConfigHosts, HashAndGroupPerHostAsNvmetNamesThem) {
  TargetConfig cfg;
  ASSERT_EQ(load_hosts(std::string(R"([{"nqn": "nqn.h", "dhchap_key": ")") + kKey +
                           R"json(", "dhchap_hash": "hmac(sha384)", "dhchap_dhgroup": "ffdhe3072"},
                           {"nqn": "nqn.g", "dhchap_key": ")json" + kKey +
                           R"(", "dhchap_hash": "sha512", "dhchap_dhgroup": "null"}])",
                       cfg),
            "");
  const auto& k = cfg.subsystems.at(0).host_keys;
  EXPECT_EQ(k.at("nqn.h").dhchap_hashes, std::vector<uint8_t>{2});
  EXPECT_EQ(k.at("nqn.h").dhchap_groups, std::vector<uint8_t>{2});
  EXPECT_EQ(k.at("nqn.g").dhchap_hashes, std::vector<uint8_t>{3});
  EXPECT_EQ(k.at("nqn.g").dhchap_groups, std::vector<uint8_t>{0});
  TargetConfig bad;
  EXPECT_NE(load_hosts(std::string(R"([{"nqn": "nqn.h", "dhchap_key": ")") + kKey + R"(", "dhchap_hash": "md5"}])", bad)
                .find("dhchap_hash \"md5\" is not sha256"),
            std::string::npos);
  EXPECT_NE(load_hosts(std::string(R"([{"nqn": "nqn.h", "dhchap_key": ")") + kKey + R"(", "dhchap_dhgroup": "modp"}])",
                       bad)
                .find("dhchap_dhgroup \"modp\""),
            std::string::npos);
}

TEST(ConfigHosts, AKeyFromAFileMustBeTheOwners) {
  std::string key_path = "/tmp/nvtcp-config-key-" + std::to_string(getpid());
  {
    std::ofstream f(key_path);
    f << kKey << "\n";
  }
  chmod(key_path.c_str(), 0600);
  TargetConfig cfg;
  EXPECT_EQ(load_hosts(R"([{"nqn": "nqn.h", "dhchap_key": "@)" + key_path + R"("}])", cfg), "");
  ASSERT_TRUE(cfg.subsystems.at(0).host_keys.at("nqn.h").dhchap);
  chmod(key_path.c_str(), 0644);
  TargetConfig again;
  std::string err = load_hosts(R"([{"nqn": "nqn.h", "dhchap_key": "@)" + key_path + R"("}])", again);
  EXPECT_NE(err.find("mode 0644"), std::string::npos) << err;
  EXPECT_NE(err.find("host nqn.h: dhchap_key"), std::string::npos) << err;
  std::remove(key_path.c_str());
}

TEST(ConfigHosts, BadKeysAndEntriesAreRefusedWithoutShowingTheKey) {
  struct Case {
    std::string hosts;
    const char* says;
  } cases[] = {
      {R"([{"nqn": "nqn.h", "dhchap_key": "DHHC-1:01:ja6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"}])",
       "host nqn.h: dhchap_key: DH-HMAC-CHAP secret: CRC mismatch"},
      {R"([{"nqn": "nqn.h", "dhchap_ctrl_key": ")" + std::string(kKey) + R"("}])", "dhchap_ctrl_key needs dhchap_key"},
      {R"([{"nqn": "nqn.h", "psk": ")" + std::string(kKey) + R"("}])", "host nqn.h: psk: not a TLS PSK"},
      {R"([{"nqn": "nqn.h", "dhchap_secret": ")" + std::string(kKey) + R"("}])", "unknown key \"dhchap_secret\""},
      {R"([{"dhchap_key": ")" + std::string(kKey) + R"("}])", "a hosts entry is a host NQN or an object"},
      {R"([{"nqn": "nqn.h", "dhchap_key": 5}])", "dhchap_key must be a string"},
      {R"([{"nqn": "nqn.h", "allow_plain": true}])", "allow_plain is for a host with a psk"},
      {R"([{"nqn": "nqn.h", "psk": "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
            "allow_plain": "yes"}])",
       "allow_plain is true or false"},
  };
  for (const auto& c : cases) {
    TargetConfig cfg;
    std::string err = load_hosts(c.hosts, cfg);
    EXPECT_NE(err.find(c.says), std::string::npos) << c.hosts << " -> " << err;
    EXPECT_EQ(err.find("zGodOr4SEG0"), std::string::npos) << "the key must not appear: " << err;
  }
}

}  // namespace
}  // namespace nvtcp::target::config_test

namespace nvtcp::target::config_test {
namespace {

TargetConfig load_spdk(const std::string& json, std::string& err) {
  TargetConfig cfg;
  err = load_spdk_config(nlohmann::json::parse(json), cfg);
  if (err.empty()) err = finalize_config(cfg);
  return cfg;
}

// The shape nvmf_tgt's save_config writes, with the methods nvtcp has no use for around the ones
// it replays.
// "ana_reporting" per subsystem and "anagrpid" per namespace (default: its NSID), each checked.
TEST(ConfigAna, ReportingAndGroupsAreReadAndChecked) {
  auto with = [](const std::string& sub) {
    return load(R"({"subsystems": [{"nqn": "nqn.2026-12.io.nvtcp:ana", )" + sub + "}]}");
  };
  EXPECT_EQ(with(R"("ana_reporting": true, "namespaces": [{"type": "ram", "size": "1M", "anagrpid": 3}])"), "");
  EXPECT_EQ(with(R"("max_namespaces": 4, "namespaces": [{"type": "ram", "size": "1M", "anagrpid": 4}])"), "");
  EXPECT_NE(with(R"("max_namespaces": 4, "namespaces": [{"type": "ram", "size": "1M", "anagrpid": 5}])")
                .find("anagrpid 5 is above its max_namespaces (4)"),
            std::string::npos);
  EXPECT_NE(with(R"("ana_reporting": "yes", "namespaces": [{"type": "ram", "size": "1M"}])").find("true or false"),
            std::string::npos);
  TargetConfig cfg;
  cfg.subsystems.push_back({"nqn.2026-12.io.nvtcp:ana", "", "m", true, {}, {{7, "ram", 1 << 20, "", 512}}});
  ASSERT_EQ(finalize_config(cfg), "");
  EXPECT_EQ(cfg.subsystems[0].namespaces[0].anagrpid, 7u);  // its NSID
  EXPECT_FALSE(cfg.subsystems[0].ana_reporting);
}

TEST(SpdkConfig, NvmfTgtsSavedConfigurationLoads) {
  const std::string json = R"({"subsystems": [
    {"subsystem": "scheduler", "config": [{"method": "framework_set_scheduler", "params": {"name": "static"}}]},
    {"subsystem": "bdev", "config": [
      {"method": "bdev_set_options", "params": {"bdev_io_pool_size": 65535}},
      {"method": "bdev_null_create", "params": {"name": "Null0", "num_blocks": 16384, "block_size": 4096,
        "physical_block_size": 4096, "md_size": 0, "dif_type": 0, "dif_is_head_of_md": false}},
      {"method": "bdev_malloc_create", "params": {"name": "Malloc0", "num_blocks": 2048, "block_size": 512}},
      {"method": "bdev_malloc_create", "params": {"name": "Spare", "num_blocks": 2048, "block_size": 512}},
      {"method": "bdev_wait_for_examine"}]},
    {"subsystem": "nvmf", "config": [
      {"method": "nvmf_set_config", "params": {"discovery_filter": "match_any"}},
      {"method": "nvmf_create_transport", "params": {"trtype": "TCP", "max_queue_depth": 128,
        "max_io_qpairs_per_ctrlr": 127, "in_capsule_data_size": 4096, "max_io_size": 131072}},
      {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "nqn.2014-08.org.nvmexpress.discovery",
        "listen_address": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "8009"}, "secure_channel": false}},
      {"method": "nvmf_create_subsystem", "params": {"nqn": "nqn.2016-06.io.spdk:cnode1", "allow_any_host": false,
        "serial_number": "SPDK0001", "model_number": "SPDK Model", "max_namespaces": 32, "min_cntlid": 1, "max_cntlid": 65519,
        "ana_reporting": true}},
      {"method": "nvmf_subsystem_add_host", "params": {"nqn": "nqn.2016-06.io.spdk:cnode1",
        "host": "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"}},
      {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {"nsid": 1,
        "bdev_name": "Null0", "nguid": "087BA6E5FE7E41FDBDCD6E6A2C0F7E8D", "uuid": "087ba6e5-fe7e-41fd-bdcd-6e6a2c0f7e8d", "anagrpid": 1}}},
      {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {"nsid": 5,
        "bdev_name": "Malloc0", "anagrpid": 3}}},
      {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "nqn.2016-06.io.spdk:cnode1",
        "listen_address": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "4420"}, "secure_channel": false}}]}]})";
  ASSERT_TRUE(is_spdk_config(nlohmann::json::parse(json)));
  std::string err;
  TargetConfig cfg = load_spdk(json, err);
  ASSERT_EQ(err, "");
  EXPECT_EQ(cfg.discovery_port, 8009);
  ASSERT_EQ(cfg.listeners.size(), 1u);
  EXPECT_EQ(cfg.listeners[0].port, 4420);
  EXPECT_EQ(cfg.max_queue_depth, 128u);
  EXPECT_EQ(cfg.in_capsule_data, 4096u);
  EXPECT_EQ(cfg.mdts_bytes, 131072u);
  EXPECT_EQ(cfg.max_io_queues, 126u);
  ASSERT_EQ(cfg.subsystems.size(), 1u);
  const auto& s = cfg.subsystems[0];
  EXPECT_EQ(s.serial, "SPDK0001");
  EXPECT_FALSE(s.allow_any_host);
  EXPECT_EQ(s.hosts, std::vector<std::string>{"nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"});
  EXPECT_EQ(s.listeners, std::vector<std::string>{"127.0.0.1:4420"});
  ASSERT_EQ(s.namespaces.size(), 2u);
  EXPECT_EQ(s.namespaces[0].name, "Null0");
  EXPECT_EQ(s.namespaces[0].type, "null");
  EXPECT_EQ(s.namespaces[0].size, 16384u * 4096);
  EXPECT_EQ(s.namespaces[0].nguid, "087BA6E5FE7E41FDBDCD6E6A2C0F7E8D");
  EXPECT_EQ(s.namespaces[1].nsid, 5u);
  EXPECT_EQ(s.namespaces[1].type, "ram");
  EXPECT_TRUE(s.ana_reporting);
  EXPECT_EQ(s.namespaces[0].anagrpid, 1u);
  EXPECT_EQ(s.namespaces[1].anagrpid, 3u);
  ASSERT_EQ(cfg.bdevs.size(), 1u);
  EXPECT_EQ(cfg.bdevs[0].name, "Spare");
  // nvtcp's own format is not taken for SPDK's.
  EXPECT_FALSE(is_spdk_config(nlohmann::json::parse(R"({"subsystems": [{"nqn": "nqn.2026-11.io.nvtcp:a"}]})")));
}

// A gateway's saved configuration: its RBD bdev as bdev_rbd_create writes it (Ceph options
// included) and a subsystem with its own controller ID range come back as they were.
TEST(SpdkConfig, AGatewaysRbdBdevAndControllerIdRangeLoad) {
  std::string err;
  TargetConfig cfg = load_spdk(R"({"subsystems": [
    {"subsystem": "bdev", "config": [{"method": "bdev_rbd_create", "params": {"name": "Ceph0", "pool_name": "rbd",
      "rbd_name": "disk1", "block_size": 4096, "user_id": "gw", "config": {"mon_host": "v2:127.0.0.1:3300",
      "rbd_cache": "false"}}}]},
    {"subsystem": "nvmf", "config": [
      {"method": "nvmf_create_subsystem", "params": {"nqn": "nqn.2016-06.io.spdk:gw", "min_cntlid": 2049,
        "max_cntlid": 4096, "ana_reporting": true}},
      {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "nqn.2016-06.io.spdk:gw",
        "namespace": {"nsid": 1, "bdev_name": "Ceph0", "anagrpid": 1}}}]}]})",
                               err);
  ASSERT_EQ(err, "");
  ASSERT_EQ(cfg.subsystems.size(), 1u);
  const SubsystemConfig& s = cfg.subsystems[0];
  EXPECT_EQ(s.min_cntlid, 2049);
  EXPECT_EQ(s.max_cntlid, 4096);
  ASSERT_EQ(s.namespaces.size(), 1u);
  const backend::RbdSpec& rbd = s.namespaces[0].rbd;
  EXPECT_EQ(std::tuple(s.namespaces[0].type, rbd.pool, rbd.image, rbd.user), std::tuple("rbd", "rbd", "disk1", "gw"));
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(rbd.config, (Pairs{{"mon_host", "v2:127.0.0.1:3300"}, {"rbd_cache", "false"}}));

  // A cluster registered by name, and an image of it; one named but never registered is refused.
  cfg = load_spdk(R"({"subsystems": [{"subsystem": "bdev", "config": [
    {"method": "bdev_rbd_register_cluster", "params": {"name": "ceph_a", "user_id": "gw",
      "config_param": {"mon_host": "v2:127.0.0.1:3300"}, "key_file": "/etc/ceph/gw.keyring"}},
    {"method": "bdev_rbd_create", "params": {"name": "Ceph1", "pool_name": "rbd", "rbd_name": "disk2",
      "block_size": 512, "cluster_name": "ceph_a"}}]}]})",
                  err);
  ASSERT_EQ(err, "");
  ASSERT_EQ(cfg.rbd_clusters.size(), 1u);
  EXPECT_EQ(std::tuple(cfg.rbd_clusters[0].cluster_name, cfg.rbd_clusters[0].user, cfg.rbd_clusters[0].key_file),
            std::tuple("ceph_a", "gw", "/etc/ceph/gw.keyring"));
  ASSERT_EQ(cfg.bdevs.size(), 1u);
  EXPECT_EQ(cfg.bdevs[0].rbd.cluster_name, "ceph_a");
  load_spdk(R"({"subsystems": [{"subsystem": "bdev", "config": [{"method": "bdev_rbd_create", "params": {"name": "C",
    "pool_name": "rbd", "rbd_name": "d", "block_size": 512, "cluster_name": "ceph_b"}}]}]})", err);
  EXPECT_NE(err.find("no Ceph cluster ceph_b is registered"), std::string::npos) << err;

  for (const char* range : {R"("min_cntlid": 9, "max_cntlid": 8)", R"("max_cntlid": 65520)", R"("min_cntlid": 65537)"}) {
    load_spdk(std::string(R"({"subsystems": [{"subsystem": "nvmf", "config": [{"method": "nvmf_create_subsystem",
      "params": {"nqn": "nqn.2016-06.io.spdk:gw", )") + range + "}}]}]}", err);
    EXPECT_NE(err.find("controller IDs"), std::string::npos) << range << ": " << err;
  }
}

TEST(SpdkConfig, WhatCannotBeReplayedIsAnError) {
  std::string err;
  load_spdk(R"({"subsystems": [{"subsystem": "nvmf", "config": [{"method": "nvmf_subsystem_add_ns",
      "params": {"nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {"bdev_name": "Null0"}}}]}]})", err);
  EXPECT_NE(err.find("no subsystem nqn.2016-06.io.spdk:cnode1"), std::string::npos) << err;
  load_spdk(R"({"subsystems": [{"subsystem": "nvmf", "config": [
      {"method": "nvmf_create_subsystem", "params": {"nqn": "nqn.2016-06.io.spdk:cnode1"}},
      {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {"bdev_name": "Null0"}}}]}]})",
            err);
  EXPECT_NE(err.find("no bdev Null0"), std::string::npos) << err;
  load_spdk(R"({"subsystems": [{"subsystem": "bdev", "config": [{"method": "bdev_null_create",
      "params": {"name": "N", "num_blocks": "many", "block_size": 512}}]}]})", err);
  EXPECT_NE(err.find("num_blocks"), std::string::npos) << err;
  load_spdk(R"J({"subsystems": [{"subsystem": "nvmf", "config": [
      {"method": "nvmf_create_subsystem", "params": {"nqn": "nqn.2016-06.io.spdk:cnode1"}},
      {"method": "nvmf_subsystem_add_host", "params": {"nqn": "nqn.2016-06.io.spdk:cnode1", "host": "nqn.h",
        "dhchap_key": "(a key is configured here; keys are never exported: give it again)"}}]}]})J", err);
  EXPECT_NE(err.find("host nqn.h: dhchap_key"), std::string::npos) << err;
}

// SPDK's file keyring as save_config writes it (its section first): a host's dhchap_key that
// names a key is that key's file, checked now and held by name; the keyring's checks stop
// the load (a relative path, a file others can read, a name given twice), as does a host that
// names a key the file does not add.
TEST(SpdkConfig, KeyringKeysAreReplayedAndHostsNameThem) {
  const std::string key_path = "/tmp/nvtcp-config-keyring-" + std::to_string(getpid());
  {
    std::ofstream f(key_path);
    f << kKey << "\n";
  }
  chmod(key_path.c_str(), 0600);
  auto config = [&](const std::string& keys, const std::string& host_key) {
    return R"({"subsystems": [{"subsystem": "keyring", "config": [)" + keys +
           R"(]}, {"subsystem": "nvmf", "config": [
        {"method": "nvmf_create_subsystem", "params": {"nqn": "nqn.2016-06.io.spdk:cnode1"}},
        {"method": "nvmf_subsystem_add_host", "params": {"nqn": "nqn.2016-06.io.spdk:cnode1", "host": "nqn.h",
          "dhchap_key": ")" + host_key + R"("}}]}]})";
  };
  auto add_key = [](const std::string& name, const std::string& path) {
    return R"({"method": "keyring_file_add_key", "params": {"name": ")" + name + R"(", "path": ")" + path + R"("}})";
  };
  std::string err;
  TargetConfig cfg = load_spdk(config(add_key("key0", key_path), "key0"), err);
  ASSERT_EQ(err, "");
  const HostKeys& keys = cfg.subsystems.at(0).host_keys.at("nqn.h");
  ASSERT_TRUE(keys.dhchap);
  EXPECT_EQ(keys.dhchap.ref().name, "key0");
  EXPECT_FALSE(keys.dhchap_ctrl.ref());
  ASSERT_EQ(cfg.keyring->keys().size(), 1u);
  EXPECT_EQ(cfg.keyring->keys()[0].path, key_path);
  // The key read is the file's: the same secret as given inline.
  TargetConfig inline_cfg = load_spdk(config("", kKey), err);
  ASSERT_EQ(err, "");
  const HostKeys& inline_keys = inline_cfg.subsystems.at(0).host_keys.at("nqn.h");
  EXPECT_FALSE(inline_keys.dhchap.ref());
  const auto from_file = keys.dhchap.material(err), given = inline_keys.dhchap.material(err);
  ASSERT_TRUE(from_file && given) << err;
  EXPECT_EQ(given->key.size(), from_file->key.size());
  EXPECT_EQ(std::memcmp(given->key.data(), from_file->key.data(), from_file->key.size()), 0);

  load_spdk(config("", "key0"), err);
  EXPECT_NE(err.find("host nqn.h: dhchap_key"), std::string::npos) << err;
  EXPECT_NE(err.find("keyring_file_add_key adds one"), std::string::npos) << err;
  load_spdk(config(add_key("key0", "relative/key"), "key0"), err);
  EXPECT_NE(err.find("Non-absolute paths are not allowed: relative/key"), std::string::npos) << err;
  load_spdk(config(add_key("key0", key_path) + "," + add_key("key0", key_path), "key0"), err);
  EXPECT_NE(err.find("Key 'key0' already exists"), std::string::npos) << err;
  chmod(key_path.c_str(), 0644);
  load_spdk(config(add_key("key0", key_path), "key0"), err);
  EXPECT_NE(err.find("Invalid permissions for key file '" + key_path + "'"), std::string::npos) << err;
  EXPECT_EQ(err.find("ia6zGodOr4"), std::string::npos) << "a key in an error: " << err;
  std::remove(key_path.c_str());
}

// A host's key named in the keyring is its file as it is each time it is used (as SPDK's
// keyring_file reads it): a rewritten file gives the new key; one that no longer reads, or a key
// removed from the keyring (SPDK: -ENOKEY), gives none, with why naming the key and its file and
// never the key; the key given inline is the one given.
TEST(SpdkConfig, KeyringKeysAreReadAtEachUse) {
  const std::string key_path = "/tmp/nvtcp-config-keyring-use-" + std::to_string(getpid());
  auto write = [&](const std::string& text) {
    std::ofstream f(key_path);
    f << text << "\n";
  };
  write(kKey);
  chmod(key_path.c_str(), 0600);
  auto keyring = std::make_shared<Keyring>();
  std::string why;
  ASSERT_EQ(keyring->add_file_key("key0", key_path, why), 0) << why;
  SubsystemConfig sc;
  read_host(sc, nlohmann::json{{"nqn", "nqn.h"}, {"dhchap_key", "key0"}}, keyring);
  const HostKey<auth::DhchapSecret> key = sc.host_keys.at("nqn.h").dhchap;
  ASSERT_TRUE(key);
  EXPECT_EQ(key.ref().name, "key0");
  auto first = key.material(why);
  ASSERT_TRUE(first) << why;

  const std::vector<uint8_t> other(32, 0x5A);
  const std::string other_text(auth::format_dhchap_secret(0, other).view());
  write(other_text);
  auto second = key.material(why);
  ASSERT_TRUE(second) << why;
  EXPECT_EQ(second->transform, 0);
  ASSERT_EQ(second->key.size(), other.size());
  EXPECT_EQ(std::memcmp(second->key.data(), other.data(), other.size()), 0) << "the key read when the host was added";

  write("DHHC-1:01:garbage:");
  EXPECT_FALSE(key.material(why));
  EXPECT_NE(why.find("keyring key 'key0' (file " + key_path + ")"), std::string::npos) << why;
  write(other_text);
  chmod(key_path.c_str(), 0640);
  EXPECT_FALSE(key.material(why));
  EXPECT_NE(why.find("Invalid permissions for key file"), std::string::npos) << why;
  chmod(key_path.c_str(), 0600);
  ASSERT_TRUE(key.material(why)) << why;
  EXPECT_EQ(keyring->remove_file_key("key0", why), 0);
  EXPECT_FALSE(key.material(why)) << "a removed key still usable";
  EXPECT_NE(why.find("'key0' was removed"), std::string::npos) << why;
  // A new key0, another file: the host still holds the removed one.
  ASSERT_EQ(keyring->add_file_key("key0", key_path, why), 0) << why;
  EXPECT_FALSE(key.material(why));
  EXPECT_EQ(why.find(other_text.substr(10, 20)), std::string::npos) << "a key in an error: " << why;
  std::remove(key_path.c_str());
}

// The two gateways of the README ("Two gateways in front of one image", in nvtcp's own
// configuration file): a Ceph cluster by name, an rbd namespace of it in ANA group 1, each
// gateway's controller ID range, and B's listener starting non-optimized.
TEST(ConfigGateways, TheReadmesTwoGatewayFilesLoad) {
  auto gateway = [](const char* address, int min_cntlid, int max_cntlid, const char* ana_states) {
    return fmt::format(R"({{
  "listeners": [{{"address": "{0}", "port": 4420}}],
  "discovery_port": 0,
  "ceph_clusters": [{{"name": "cluster_a", "user": "nvmeof",
                      "config": {{"mon_host": "v2:10.0.0.9:3300"}},
                      "key_file": "/etc/ceph/ceph.client.nvmeof.keyring"}}],
  "subsystems": [{{
    "nqn": "nqn.2016-06.io.spdk:cnode1", "serial": "SPDK00000000000001",
    "allow_any_host": true, "ana_reporting": true, "min_cntlid": {1}, "max_cntlid": {2},
    "namespaces": [{{"nsid": 1, "type": "rbd", "pool": "rbd", "image": "disk1", "cluster": "cluster_a",
                     "block_size": 4096, "anagrpid": 1}}]{3}
  }}]
}})",
                       address, min_cntlid, max_cntlid, ana_states);
  };
  const std::string b_states = R"(,
    "ana_states": [{"listener": "10.0.0.2:4420", "anagrpid": 1, "state": "non_optimized"}])";
  for (const auto& [text, is_b] : {std::pair{gateway("10.0.0.1", 1, 1000, ""), false},
                                   std::pair{gateway("10.0.0.2", 1001, 2000, b_states.c_str()), true}}) {
    std::string path = "/tmp/nvtcp-config-gw-" + std::to_string(getpid()) + ".json";
    {
      std::ofstream f(path);
      f << text;
    }
    TargetConfig cfg;
    std::string err = load_config_file(path, cfg);
    std::remove(path.c_str());
    ASSERT_EQ(err, "") << text;
    ASSERT_EQ(finalize_config(cfg), "") << text;
    ASSERT_EQ(cfg.rbd_clusters.size(), 1u);
    EXPECT_EQ(cfg.rbd_clusters[0].cluster_name, "cluster_a");
    EXPECT_EQ(cfg.rbd_clusters[0].user, "nvmeof");
    ASSERT_EQ(cfg.subsystems.size(), 1u);
    const SubsystemConfig& s = cfg.subsystems[0];
    EXPECT_EQ(s.min_cntlid, is_b ? 1001 : 1);
    EXPECT_EQ(s.max_cntlid, is_b ? 2000 : 1000);
    ASSERT_EQ(s.namespaces.size(), 1u);
    EXPECT_EQ(s.namespaces[0].rbd.cluster_name, "cluster_a");
    EXPECT_EQ(s.namespaces[0].anagrpid, 1u);
    ASSERT_EQ(s.ana_states.size(), is_b ? 1u : 0u);
    if (is_b) {
      EXPECT_EQ(s.ana_states[0].listener, "10.0.0.2:4420");
      EXPECT_EQ(s.ana_states[0].state, nvme::AnaState::NonOptimized);
    }
  }
  EXPECT_NE(load(R"({"subsystems": [{"nqn": "nqn.2026-12.io.nvtcp:x", "namespaces": [{"type": "rbd", "pool": "p",
               "image": "i", "cluster": "nope"}]}]})"),
            "")
      << "a namespace of a cluster not registered";
}

}  // namespace
}  // namespace nvtcp::target::config_test

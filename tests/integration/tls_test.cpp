// SPDX-License-Identifier: Apache-2.0
// TLS end to end, in process: a target with a TLS listener and a plain one, the host library
// with its PSK. Writes read back over TLS (with digests on top too); both PSK identity versions
// and both derivations in the field are accepted; a wrong or unknown key, a host in the clear on
// the TLS listener and a TLS host on the plain one are refused with a clear reason, and the
// target goes on serving; a host with a PSK is refused in the clear unless its allow_plain says
// otherwise; the discovery log says which listener requires TLS and offers each host only the
// ports it may use.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "auth/keys.hpp"
#include "nvtcp/log_pages.hpp"
#include "test_target.hpp"

namespace nvtcp::test::tls_test {
namespace {

constexpr const char* kTlsHost = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
constexpr const char* kPlainHost = "nqn.2026-12.io.nvtcp:no-psk";

std::string psk_text(uint8_t fill, uint8_t hash = 1) {
  std::vector<uint8_t> key(hash == 2 ? 48 : 32);
  for (size_t i = 0; i < key.size(); ++i) key[i] = uint8_t(fill + i);
  return std::string(auth::format_tls_psk(hash, key).view());
}

// Listener 0 requires TLS, listener 1 is plain; kTlsHost has a PSK, kPlainHost none.
target::TargetConfig tls_config(uint8_t hash = 1) {
  target::TargetConfig cfg = default_config();
  cfg.listeners.clear();
  target::ListenerConfig secure{"127.0.0.1", 0};
  secure.tls_required = true;
  cfg.listeners.push_back(secure);
  cfg.listeners.push_back({"127.0.0.1", 0});
  cfg.icreq_timeout_ms = 2000;
  auto& sc = cfg.subsystems.at(0);
  sc.allow_any_host = false;
  sc.hosts = {kTlsHost, kPlainHost};
  target::HostKeys keys;
  auto psk = std::make_shared<auth::ConfiguredPsk>();
  std::string err;
  EXPECT_TRUE(auth::parse_tls_psk(psk_text(0x30, hash), *psk, err)) << err;
  keys.psk = psk;
  sc.host_keys[kTlsHost] = keys;
  return cfg;
}

host::ControllerOptions options(const std::string& key, const char* hostnqn = kTlsHost) {
  host::ControllerOptions o;
  o.hostnqn = hostnqn;
  o.kato_ms = 0;
  o.io_queues = 2;
  o.tls = !key.empty();
  o.tls_key = key;
  o.connect_timeout_ms = 3000;
  return o;
}

host::TransportId trid_on(RunningTarget& t, size_t listener, const std::string& nqn = kTestNqn) {
  host::TransportId id = t.trid(nqn);
  id.trsvcid = t.port(listener);
  return id;
}

void write_and_read_back(host::Controller& ctrl, size_t bytes = 4096) {
  std::string err;
  auto qp = ctrl.create_io_qpair(32, err);
  ASSERT_NE(qp, nullptr) << err;
  const uint32_t blocks = uint32_t(bytes / 512);
  std::vector<uint8_t> data = pattern(bytes, bytes), back(bytes, 0);
  EXPECT_TRUE(one_command(*qp, [&](host::CompletionFn cb, void* ctx) {
                return qp->write(2, 64, blocks, data.data(), cb, ctx);
              }).ok());
  EXPECT_TRUE(one_command(*qp, [&](host::CompletionFn cb, void* ctx) {
                return qp->read(2, 64, blocks, back.data(), cb, ctx);
              }).ok());
  EXPECT_EQ(back, data);
}

void expect_plain_host_served(RunningTarget& t) {
  std::string err;
  auto ctrl = host::Controller::connect(trid_on(t, 1), options("", kPlainHost), err);
  ASSERT_NE(ctrl, nullptr) << err;
  write_and_read_back(*ctrl);
}

TEST(Tls, WritesReadBackOverTls) {
  RunningTarget t(tls_config());
  std::string err;
  auto ctrl = host::Controller::connect(trid_on(t, 0), options(psk_text(0x30)), err);
  ASSERT_NE(ctrl, nullptr) << err;
  write_and_read_back(*ctrl);
  write_and_read_back(*ctrl, 1 << 20);  // records of 16 KiB, R2T and H2CData inside TLS
}

TEST(Tls, DigestsOnTop) {
  RunningTarget t(tls_config());
  std::string err;
  auto o = options(psk_text(0x30));
  o.hdgst = o.ddgst = true;
  auto ctrl = host::Controller::connect(trid_on(t, 0), o, err);
  ASSERT_NE(ctrl, nullptr) << err;
  write_and_read_back(*ctrl, 256 * 1024);
}

TEST(Tls, Sha384KeyAndBothIdentityVersionsAndDerivations) {
  RunningTarget t(tls_config(2));
  for (int version : {0, 1})
    for (bool legacy : {false, true}) {
      std::string err;
      auto o = options(psk_text(0x30, 2));
      o.tls_identity_version = version;
      o.tls_legacy_derivation = legacy;
      auto ctrl = host::Controller::connect(trid_on(t, 0), o, err);
      ASSERT_NE(ctrl, nullptr) << "version " << version << (legacy ? " legacy: " : ": ") << err;
      write_and_read_back(*ctrl);
    }
}

// A target that holds the key derived one way only (a Linux target whose keyring nvme-cli up to
// 2.14 filled holds libnvme's): the host with just its key finds the derivation by itself, the
// second handshake after the first is refused, and keeps it for every queue; a derivation forced
// to the other one fails.
TEST(Tls, TheHostFindsTheDerivationATargetHolds) {
  for (auto held : {target::PskDerivations::Libnvme, target::PskDerivations::Rfc8446}) {
    SCOPED_TRACE(held == target::PskDerivations::Libnvme ? "libnvme's" : "RFC 8446's");
    target::TargetConfig cfg = tls_config();
    cfg.tls_psk_derivations = held;
    RunningTarget t(cfg);
    std::string err;
    auto ctrl = host::Controller::connect(trid_on(t, 0), options(psk_text(0x30)), err);
    ASSERT_NE(ctrl, nullptr) << err;
    write_and_read_back(*ctrl);  // an I/O queue: the derivation found is every queue's
    auto forced = options(psk_text(0x30));
    (held == target::PskDerivations::Libnvme ? forced.tls_rfc8446_derivation : forced.tls_legacy_derivation) = true;
    EXPECT_EQ(host::Controller::connect(trid_on(t, 0), forced, err), nullptr) << "the other derivation, forced";
    EXPECT_NE(err.find("TLS handshake"), std::string::npos) << err;
  }
}

// As tlshd 1.0 binds it: a SHA-384 PSK with a SHA-256 binder, the session on a SHA-256 suite.
TEST(Tls, Sha384KeyBoundWithSha256) {
  RunningTarget t(tls_config(2));
  std::string err;
  auto o = options(psk_text(0x30, 2));
  o.tls_sha256_binder = true;
  o.tls_legacy_derivation = true;
  auto ctrl = host::Controller::connect(trid_on(t, 0), o, err);
  ASSERT_NE(ctrl, nullptr) << err;
  write_and_read_back(*ctrl);
}

TEST(Tls, KeyFromAFile) {
  RunningTarget t(tls_config());
  const std::string path = "/tmp/nvtcp-tls-key-" + std::to_string(getpid());
  {
    std::ofstream f(path);
    f << psk_text(0x30) << "\n";
  }
  chmod(path.c_str(), 0644);
  std::string err;
  EXPECT_EQ(host::Controller::connect(trid_on(t, 0), options("@" + path), err), nullptr);
  EXPECT_NE(err.find("chmod 600"), std::string::npos) << err;
  chmod(path.c_str(), 0600);
  auto ctrl = host::Controller::connect(trid_on(t, 0), options("@" + path), err);
  std::remove(path.c_str());
  ASSERT_NE(ctrl, nullptr) << err;
  write_and_read_back(*ctrl);
}

TEST(Tls, AWrongPskIsRefusedAndTheTargetGoesOn) {
  RunningTarget t(tls_config());
  std::string err;
  const std::string wrong = psk_text(0x31);
  EXPECT_EQ(host::Controller::connect(trid_on(t, 0), options(wrong), err), nullptr);
  EXPECT_NE(err.find("TLS handshake"), std::string::npos) << err;
  EXPECT_EQ(err.find(wrong.substr(16, 20)), std::string::npos) << "no key in errors: " << err;
  // A host the subsystem has no PSK for.
  EXPECT_EQ(host::Controller::connect(trid_on(t, 0), options(psk_text(0x30), kPlainHost), err), nullptr);
  EXPECT_NE(err.find("TLS handshake"), std::string::npos) << err;
  // A malformed key never reaches the network.
  EXPECT_EQ(host::Controller::connect(trid_on(t, 0), options("NVMeTLSkey-1:01:bm90IGEga2V5:"), err), nullptr);
  EXPECT_NE(err.find("TLS PSK"), std::string::npos) << err;
  expect_plain_host_served(t);
  auto ctrl = host::Controller::connect(trid_on(t, 0), options(psk_text(0x30)), err);
  ASSERT_NE(ctrl, nullptr) << err;
}

TEST(Tls, AHostInTheClearOnTheTlsListenerIsRefusedQuickly) {
  RunningTarget t(tls_config());
  std::string err;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(host::Controller::connect(trid_on(t, 0), options("", kTlsHost), err), nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3)) << "refused, not left to time out";
  EXPECT_FALSE(err.empty());
  expect_plain_host_served(t);
}

TEST(Tls, ATlsHostOnAPlainListenerFails) {
  RunningTarget t(tls_config());
  std::string err;
  EXPECT_EQ(host::Controller::connect(trid_on(t, 1), options(psk_text(0x30)), err), nullptr);
  EXPECT_NE(err.find("TLS handshake"), std::string::npos) << err;
}

// The NQN of a host with a PSK travels in the clear in every ClientHello: on a plain listener it
// proves nothing, so that host is refused there unless the configuration says so.
TEST(Tls, AHostWithAPskIsRefusedInTheClearUnlessAllowed) {
  {
    RunningTarget t(tls_config());
    std::string err;
    EXPECT_EQ(host::Controller::connect(trid_on(t, 1), options("", kTlsHost), err), nullptr)
        << "anyone sending the PSK host's NQN reached its namespace in the clear";
    EXPECT_FALSE(err.empty());
    expect_plain_host_served(t);
    auto ctrl = host::Controller::connect(trid_on(t, 0), options(psk_text(0x30)), err);
    ASSERT_NE(ctrl, nullptr) << err;
    write_and_read_back(*ctrl);
  }
  target::TargetConfig cfg = tls_config();
  cfg.subsystems.at(0).host_keys[kTlsHost].allow_plain = true;
  RunningTarget t(cfg);
  std::string err;
  auto ctrl = host::Controller::connect(trid_on(t, 1), options("", kTlsHost), err);
  ASSERT_NE(ctrl, nullptr) << "allow_plain admits it in the clear: " << err;
  write_and_read_back(*ctrl);
}

struct EntryCounts {
  int secure = 0, plain = 0;
};

// The NVMe subsystem's entries in the discovery log the host gets through listener `via`.
EntryCounts discovery_entries(RunningTarget& t, size_t via, const host::ControllerOptions& o) {
  EntryCounts n;
  std::string err;
  auto disc = host::Controller::connect(trid_on(t, via, nvme::kDiscoveryNqn), o, err);
  EXPECT_NE(disc, nullptr) << err;
  if (!disc) return n;
  std::vector<uint8_t> log;
  EXPECT_TRUE(disc->discovery_log(log, err)) << err;
  const auto* h = reinterpret_cast<const nvme::DiscoveryLogHeader*>(log.data());
  for (uint64_t i = 0; i < h->numrec; ++i) {
    const auto* e = reinterpret_cast<const nvme::DiscoveryLogEntry*>(log.data() + sizeof(nvme::DiscoveryLogHeader)) + i;
    if (e->subtype != nvme::kSubtypeNvme) continue;
    const uint16_t port = uint16_t(std::atoi(std::string(e->trsvcid, sizeof(e->trsvcid)).c_str()));
    if (port == t.port(0)) {
      EXPECT_EQ(e->treq & nvme::kTreqSecureChannelMask, nvme::kTreqRequired);
      EXPECT_EQ(e->tsas[0], nvme::kTcpSectypeTls13);
      ++n.secure;
    } else {
      EXPECT_EQ(e->treq & nvme::kTreqSecureChannelMask, 0);
      EXPECT_EQ(e->tsas[0], nvme::kTcpSectypeNone);
      ++n.plain;
    }
  }
  return n;
}

TEST(Tls, TheDiscoveryLogSaysWhichListenerRequiresTlsAndOffersEachHostItsOwn) {
  {
    RunningTarget t(tls_config());
    const EntryCounts psk_host = discovery_entries(t, 0, options(psk_text(0x30)));
    EXPECT_EQ(psk_host.secure, 1);
    EXPECT_EQ(psk_host.plain, 0) << "the PSK host is offered a port that refuses it";
    const EntryCounts plain_host = discovery_entries(t, 1, options("", kPlainHost));
    EXPECT_EQ(plain_host.secure, 0) << "a host without a PSK is offered the TLS port";
    EXPECT_EQ(plain_host.plain, 1);
  }
  target::TargetConfig cfg = tls_config();
  cfg.subsystems.at(0).host_keys[kTlsHost].allow_plain = true;
  RunningTarget t(cfg);
  const EntryCounts both = discovery_entries(t, 0, options(psk_text(0x30)));
  EXPECT_EQ(both.secure, 1);
  EXPECT_EQ(both.plain, 1);
}

}  // namespace
}  // namespace nvtcp::test::tls_test

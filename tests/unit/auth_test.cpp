// SPDX-License-Identifier: Apache-2.0
// In-band authentication and TLS key material: the AUTH message layouts against known bytes,
// the key formats nvme-cli writes (parsed, checked and written back), key files, and every
// derivation against published vectors (the kernel's KUnit test, libnvme's PSK tests) or, where
// none is published, against docs/security/kat.py (marked LOCAL: computed from the formulas in
// docs/security/interop-facts.md with Python's hashlib).
#include "wire/auth.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "auth/crypto.hpp"
#include "auth/dhchap.hpp"
#include "auth/keys.hpp"
#include "auth/tls_psk.hpp"
#include "wire/fabrics.hpp"

namespace nvtcp::auth::auth_test {
namespace {

std::vector<uint8_t> unhex(std::string_view h) {
  std::vector<uint8_t> v;
  for (size_t i = 0; i + 1 < h.size(); i += 2) v.push_back(uint8_t(std::stoi(std::string(h.substr(i, 2)), nullptr, 16)));
  return v;
}

std::string hex(std::span<const uint8_t> b) {
  std::string s;
  char buf[3];
  for (uint8_t c : b) {
    snprintf(buf, sizeof(buf), "%02x", c);
    s += buf;
  }
  return s;
}

std::string sha256_hex(std::span<const uint8_t> b) {
  uint8_t d[32];
  EXPECT_TRUE(digest(1, {b}, d));
  return hex(d);
}

template <class T>
std::string bytes_of(const T& v) {
  return hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&v), sizeof(v)));
}

constexpr std::string_view kSpecHost = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
constexpr std::string_view kSpecSub = "nqn.2014-08.org.nvmexpress:uuid:36ebf5a9-1df9-47b3-a6d0-e9ba32e428a2";
constexpr std::string_view kTestHost = "nqn.psk-test-host";
constexpr std::string_view kTestSub = "nqn.psk-test-subsys";
// libnvme test/psk.c's configured PSKs (interop-facts 5.2).
const std::vector<uint8_t> kPsk32 = unhex("5512DBB6737D0106F65975B773DFB011FFC344BCF442E2DD6D8BC4870B5D5B03");
std::vector<uint8_t> psk48() {
  auto k = kPsk32;
  auto tail = unhex("FFC344BCF442E2DD6D8BC4870B5D5B03");
  k.insert(k.end(), tail.begin(), tail.end());
  return k;
}
constexpr std::string_view kPsk32Text = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
constexpr std::string_view kPsk48Text =
    "NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:";
// The specification's example DH-HMAC-CHAP secret (interop-facts 5.5).
constexpr std::string_view kDhchapBase64 = "ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n";

// ---- wire layouts -------------------------------------------------------------------------------

TEST(AuthWire, NegotiateAsLinuxSendsItByteForByte) {
  // SC_C 0, one DH-HMAC-CHAP descriptor offering SHA-256/384/512 and every group: TL = 72.
  uint8_t msg[72] = {};
  auto* n = reinterpret_cast<wire::AuthNegotiate*>(msg);
  n->h.auth_type = uint8_t(wire::AuthType::Common);
  n->h.auth_id = uint8_t(wire::AuthId::Negotiate);
  n->h.t_id = 0x1234;
  n->sc_c = wire::kAuthScNone;
  n->napd = 1;
  auto* d = reinterpret_cast<wire::AuthProtocolDescriptor*>(msg + sizeof(wire::AuthNegotiate));
  d->authid = wire::kAuthIdDhchap;
  d->halen = 3;
  d->dhlen = 6;
  for (uint8_t i = 0; i < 3; ++i) d->idlist[i] = i + 1;
  for (uint8_t i = 0; i < 6; ++i) d->idlist[wire::kAuthDhGroupListOffset + i] = i;
  std::string want = "0000000034120001" "01000306" "010203" + std::string(27 * 2, '0') + "000102030405" +
                     std::string(24 * 2, '0');
  EXPECT_EQ(hex(msg), want);
}

TEST(AuthWire, ChallengeReplySuccessAndFailureHeaders) {
  wire::DhchapChallenge c{};
  c.h = {uint8_t(wire::AuthType::Dhchap), uint8_t(wire::AuthId::Challenge), {}, 0x1234};
  c.hl = 32;
  c.hashid = uint8_t(wire::DhchapHash::Sha256);
  c.dhgid = uint8_t(wire::DhGroup::Ffdhe3072);
  c.dhvlen = 384;
  c.seqnum = 0x12345678;
  EXPECT_EQ(bytes_of(c), "01010000341220000102800178563412");
  wire::DhchapReply r{};
  r.h = {uint8_t(wire::AuthType::Dhchap), uint8_t(wire::AuthId::Reply), {}, 0x0001};
  r.hl = 48;
  r.cvalid = 1;
  r.dhvlen = 256;
  r.seqnum = 7;
  EXPECT_EQ(bytes_of(r), "01020000010030000100000107000000");
  wire::DhchapSuccess1 s1{};
  s1.h = {uint8_t(wire::AuthType::Dhchap), uint8_t(wire::AuthId::Success1), {}, 0x0002};
  s1.hl = 64;
  s1.rvalid = 1;
  EXPECT_EQ(bytes_of(s1), "01030000020040000100000000000000");
  wire::DhchapSuccess2 s2{};
  s2.h = {uint8_t(wire::AuthType::Dhchap), uint8_t(wire::AuthId::Success2), {}, 0x0003};
  EXPECT_EQ(bytes_of(s2), "01040000030000000000000000000000");
  wire::AuthFailure f{};
  f.h = {uint8_t(wire::AuthType::Common), uint8_t(wire::AuthId::Failure1), {}, 0x0004};
  f.rescode = wire::kAuthRescodeFailure;
  f.rescode_exp = uint8_t(wire::AuthFailureReason::DhGroupUnusable);
  EXPECT_EQ(bytes_of(f), "00f1000004000105");
}

TEST(AuthWire, AuthenticationSendCommandFields) {
  wire::AuthTransferCmd cmd{};
  cmd.opc = 0x7F;
  cmd.cid = 0x0A0B;
  cmd.fctype = uint8_t(wire::FabricsType::AuthSend);
  cmd.spsp0 = wire::kAuthSpsp0;
  cmd.spsp1 = wire::kAuthSpsp1;
  cmd.secp = wire::kAuthSecp;
  cmd.length = 72;
  const auto* b = reinterpret_cast<const uint8_t*>(&cmd);
  EXPECT_EQ(b[0], 0x7F);
  EXPECT_EQ(b[4], 0x05);
  EXPECT_EQ(hex(std::span<const uint8_t>(b + 40, 8)), "000101e948000000");
  EXPECT_EQ(wire::kConnectResultAtr, 0x20000u);
}

TEST(AuthWire, SizesAndNames) {
  EXPECT_EQ(wire::dhchap_hash_length(wire::DhchapHash::Sha384), 48u);
  EXPECT_EQ(wire::dh_group_bytes(wire::DhGroup::Ffdhe8192), 1024u);
  EXPECT_EQ(wire::dh_group_bytes(wire::DhGroup::Null), 0u);
  EXPECT_STREQ(wire::dh_group_name(4), "ffdhe6144");
  EXPECT_STREQ(wire::dhchap_hash_name(3), "hmac(sha512)");
  EXPECT_STREQ(wire::auth_failure_name(7), "incorrect protocol message");
  EXPECT_FALSE(wire::dh_group_known(6));
  EXPECT_FALSE(wire::dhchap_hash_known(0));
}

// ---- key formats --------------------------------------------------------------------------------

TEST(AuthKeys, CrcIsZlibsCrc32) {
  // libnvme's 32-byte test key carries CRC bytes 5f f4 ba d9 (little-endian).
  EXPECT_EQ(key_crc32(kPsk32.data(), kPsk32.size()), 0xd9baf45fu);
}

TEST(AuthKeys, TlsPskInterchangeFormatBothWays) {
  ConfiguredPsk p;
  std::string err;
  ASSERT_TRUE(parse_tls_psk(kPsk32Text, p, err)) << err;
  EXPECT_EQ(p.hash, 1);
  EXPECT_EQ(hex(p.key.span()), hex(kPsk32));
  EXPECT_EQ(format_tls_psk(1, kPsk32).view(), kPsk32Text);
  ASSERT_TRUE(parse_tls_psk(kPsk48Text, p, err)) << err;
  EXPECT_EQ(p.hash, 2);
  EXPECT_EQ(hex(p.key.span()), hex(psk48()));
  EXPECT_EQ(format_tls_psk(2, psk48()).view(), kPsk48Text);
  // 00: no transform, either length.
  ASSERT_TRUE(parse_tls_psk("NVMeTLSkey-1:00:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:\n", p, err)) << err;
  EXPECT_EQ(p.hash, 0);
  EXPECT_EQ(psk_hash(p), 1);
}

TEST(AuthKeys, DhchapSecretAsGenDhchapKeyWritesIt) {
  for (int xx = 0; xx <= 3; ++xx) {
    std::string text = "DHHC-1:0" + std::to_string(xx) + ":" + std::string(kDhchapBase64) + ":";
    DhchapSecret s;
    std::string err;
    ASSERT_TRUE(parse_dhchap_secret(text, s, err)) << err;
    EXPECT_EQ(s.transform, xx);
    EXPECT_EQ(hex(s.key.span()), "89aeb31a874eaf84841b46736b0dfdf2ba58d30aa2a545a3e235a3521e07594c");
    EXPECT_EQ(format_dhchap_secret(uint8_t(xx), s.key.span()).view(), text);
  }
}

TEST(AuthKeys, DhchapTransformWithEachHash) {
  // LOCAL (interop-facts 5.5): the example secret transformed with the specification's host NQN.
  const char* want[] = {
      "b9e21c833ba5dbb60ddf4c29b195ac232cd89302646bfdb848bc5b732c93cee5",
      "6da795652a95e8ef6a71dcdeae480f6f0c99c659e18222685d91c43fbbab057269a9d2b760f0fd87a008530fdc235349",
      "b627b6d227367cf5f07907f593993b24bfaeb80d6bdaf43de8e315c9f6fb5955538b88edc89c5973041a9d2f2ab251dbf1f109097f"
      "ce176cf48bfffac75fdcb5",
  };
  for (int xx = 1; xx <= 3; ++xx) {
    DhchapSecret s;
    std::string err;
    ASSERT_TRUE(parse_dhchap_secret("DHHC-1:0" + std::to_string(xx) + ":" + std::string(kDhchapBase64) + ":", s, err));
    SecretBytes kt;
    ASSERT_TRUE(transform_dhchap_secret(s, kSpecHost, kt, err)) << err;
    EXPECT_EQ(hex(kt.span()), want[xx - 1]) << "hash " << xx;
  }
  DhchapSecret plain;
  std::string err;
  ASSERT_TRUE(parse_dhchap_secret("DHHC-1:00:" + std::string(kDhchapBase64) + ":", plain, err));
  SecretBytes kt;
  ASSERT_TRUE(transform_dhchap_secret(plain, kSpecHost, kt, err));
  EXPECT_EQ(kt, plain.key) << "00 uses the secret as it is";
}

TEST(AuthKeys, BadKeysAreRefusedWithoutShowingThem) {
  const std::string good = "DHHC-1:01:" + std::string(kDhchapBase64) + ":";
  struct Case {
    std::string text;
    const char* says;
  } cases[] = {
      {"DHHC-2:01:" + std::string(kDhchapBase64) + ":", "not a DH-HMAC-CHAP secret"},
      {"DHHC-1:1:" + std::string(kDhchapBase64) + ":", "two digits"},
      {"DHHC-1:04:" + std::string(kDhchapBase64) + ":", "unknown transformation hash 4"},
      {"DHHC-1:01:ja6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:", "CRC mismatch"},
      {"DHHC-1:01:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2:", "not valid base64"},
      {"DHHC-1:01:ia6z*odOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:", "not valid base64"},
      {"DHHC-1:01:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4H=Uz6aQ2n:", "not valid base64"},
      {"DHHC-1:01:AAAAAAAA:", "too short"},
      {"", "not a DH-HMAC-CHAP secret"},
  };
  for (const auto& c : cases) {
    DhchapSecret s;
    std::string err;
    EXPECT_FALSE(parse_dhchap_secret(c.text, s, err)) << c.text;
    EXPECT_NE(err.find(c.says), std::string::npos) << c.text << " -> " << err;
    EXPECT_EQ(err.find("ia6z"), std::string::npos) << "the key must not appear in: " << err;
    EXPECT_TRUE(s.key.empty());
  }
  // A 40-byte secret with a correct CRC is still the wrong length.
  std::vector<uint8_t> k40(40, 0x5A);
  DhchapSecret s;
  std::string err;
  EXPECT_FALSE(parse_dhchap_secret(format_dhchap_secret(0, k40).view(), s, err));
  EXPECT_NE(err.find("40 bytes"), std::string::npos) << err;
  // TLS: 48 bytes do not go with SHA-256, nor 32 with SHA-384.
  ConfiguredPsk p;
  EXPECT_FALSE(parse_tls_psk(format_tls_psk(1, psk48()).view(), p, err));
  EXPECT_NE(err.find("do not go with hash 1"), std::string::npos) << err;
  EXPECT_FALSE(parse_tls_psk(format_tls_psk(2, kPsk32).view(), p, err));
  EXPECT_FALSE(parse_tls_psk(format_tls_psk(3, kPsk32).view(), p, err));
  EXPECT_NE(err.find("unknown hash 3"), std::string::npos) << err;
  EXPECT_FALSE(parse_tls_psk(good, p, err)) << "a DH-HMAC-CHAP secret is not a PSK";
}

class KeyFile : public ::testing::Test {
 protected:
  std::string path;
  void SetUp() override {
    char tmpl[] = "/tmp/nvtcp-key-XXXXXX";
    int fd = mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    close(fd);
    path = tmpl;
  }
  void TearDown() override { unlink(path.c_str()); }
  void write(const std::string& text, mode_t mode) {
    std::ofstream(path) << text;
    ASSERT_EQ(chmod(path.c_str(), mode), 0);
  }
};

TEST_F(KeyFile, AnOwnerOnlyFileGivesItsFirstLine) {
  write(std::string(kPsk32Text) + "\nsecond line\n", 0600);
  SecretString v;
  std::string err;
  ASSERT_TRUE(read_key_value("@" + path, v, err)) << err;
  EXPECT_EQ(v.view(), kPsk32Text);
  write(std::string(kPsk32Text), 0400);
  ASSERT_TRUE(read_key_value("@" + path, v, err)) << err;
  EXPECT_EQ(v.view(), kPsk32Text);
}

TEST_F(KeyFile, AFileOthersCanReadIsRefused) {
  write(std::string(kPsk32Text) + "\n", 0644);
  SecretString v;
  std::string err;
  EXPECT_FALSE(read_key_value("@" + path, v, err));
  EXPECT_NE(err.find("mode 0644"), std::string::npos) << err;
  EXPECT_NE(err.find("chmod 600"), std::string::npos) << err;
  EXPECT_EQ(err.find("NVMeTLSkey"), std::string::npos) << err;
  write(std::string(kPsk32Text) + "\n", 0620);
  EXPECT_FALSE(read_key_value("@" + path, v, err));
}

// A FIFO where the key file should be is refused at once: opening it for reading would wait for a
// writer, holding the configuration load (or the RPC thread) for as long as another local user
// likes. The watchdog only ends a hang; the call must return by itself.
TEST_F(KeyFile, AFifoIsRefusedWithoutWaitingForAWriter) {
  ::unlink(path.c_str());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  std::atomic<bool> returned{false}, unblocked{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 200 && !returned; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (returned) return;
    unblocked = true;
    int w = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  });
  SecretString v;
  std::string err;
  EXPECT_FALSE(read_key_value("@" + path, v, err));
  returned = true;
  watchdog.join();
  EXPECT_FALSE(unblocked) << "reading the key waited on the FIFO until someone opened it";
  EXPECT_NE(err.find("not a regular file"), std::string::npos) << err;
}

// Whoever owns the file can put a key of theirs in it whatever its mode: it must be this user's
// or root's.
TEST_F(KeyFile, AFileOfAnotherUserIsRefused) {
  write(std::string(kPsk32Text) + "\n", 0600);
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the file away";
  ASSERT_EQ(::chown(path.c_str(), 54321, 54321), 0);
  SecretString v;
  std::string err;
  EXPECT_FALSE(read_key_value("@" + path, v, err));
  EXPECT_NE(err.find("owned by uid 54321"), std::string::npos) << err;
  ASSERT_EQ(::chown(path.c_str(), 0, 0), 0);
  EXPECT_TRUE(read_key_value("@" + path, v, err)) << err;
}

TEST_F(KeyFile, MissingEmptyOrNotAFile) {
  SecretString v;
  std::string err;
  EXPECT_FALSE(read_key_value("@" + path + ".none", v, err));
  EXPECT_NE(err.find("No such file"), std::string::npos) << err;
  write("\n", 0600);
  EXPECT_FALSE(read_key_value("@" + path, v, err));
  EXPECT_NE(err.find("empty"), std::string::npos) << err;
  EXPECT_FALSE(read_key_value("@/tmp", v, err));
  // Inline values are taken as they are (trimmed).
  ASSERT_TRUE(read_key_value("  DHHC-1:00:x: ", v, err));
  EXPECT_EQ(v.view(), "DHHC-1:00:x:");
}

// ---- TLS PSK derivations ------------------------------------------------------------------------

TEST(AuthTlsPsk, KernelKunitVectors) {
  // drivers/nvme/common/tests/auth_kunit.c: psk = HMAC(skey, c1 || c2), its v1 digest and TLS PSK.
  struct V {
    uint8_t hash;
    const char* psk;
    const char* digest;
    const char* tls;
  } vs[] = {
      {1, "1733c59fa7f48fcf37f5f26fc4ff0268ad4f78e030f4f3b0bfd1d47e7bb1447a",
       "OldoKuTfKddMuyCznAZojkWD7P4D9/AtzDzLimtOxqI=",
       "3c17da628474a04d2247c4cab47968c915388193f7c071bd9489cc3666cd7cc8"},
      {2, "f14b2dd3234c459694d3bc63f8968bd6b37c2c6de849e22e118749001ce4bbe8640b9e3a748cb11ce4b1d71d359cce39",
       "cffMWk8TSS7HOQebjgYEIkrPrjWPV4JE5cdPB8WhEvY4JBW5YynKyv66XscN4A9n",
       "2774753233537b3fa50eb7d16a8e43457d85f4906c005b2236616c5d80939d0898fff15bb8b77119d2be0aac423e7590"},
  };
  for (const V& v : vs) {
    const uint32_t hl = hash_length(v.hash);
    std::vector<uint8_t> skey(hl), c1(hl), c2(hl);
    for (uint32_t i = 0; i < hl; ++i) {
      skey[i] = uint8_t('A' + i);
      c1[i] = uint8_t(i);
      c2[i] = uint8_t(0xFF - i);
    }
    std::vector<uint8_t> psk(hl);
    ASSERT_TRUE(hmac(v.hash, skey, {c1, c2}, psk.data()));
    EXPECT_EQ(hex(psk), v.psk);
    std::string dig;
    ASSERT_TRUE(psk_identity_digest(v.hash, psk, "hostnqn", "subsysnqn", dig));
    EXPECT_EQ(dig, v.digest);
    const std::string identity = psk_identity_v1(v.hash, "hostnqn", "subsysnqn", dig);
    EXPECT_EQ(tls_psk_context(identity), "0" + std::to_string(v.hash) + " " + dig);
    SecretBytes tls;
    ASSERT_TRUE(tls_psk(v.hash, psk, tls_psk_context(identity), LabelEncoding::Rfc8446, tls));
    EXPECT_EQ(hex(tls.span()), v.tls);
  }
}

TEST(AuthTlsPsk, LibnvmeVersion1IdentitiesInBothEncodings) {
  // libnvme test/psk.c: the digest is over the retained PSK, which each encoding derives
  // differently; nvme-cli up to 2.14 used the legacy ("compat") one.
  struct V {
    bool wide;
    LabelEncoding enc;
    const char* identity;
  } vs[] = {
      {false, LabelEncoding::Rfc8446,
       "NVMe1R01 nqn.psk-test-host nqn.psk-test-subsys iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU="},
      {true, LabelEncoding::Rfc8446,
       "NVMe1R02 nqn.psk-test-host nqn.psk-test-subsys "
       "QhW2+Rp6RzHlNtCslyRxMnwJ11tKKhz8JCAQpQ+XUD8f9td1VeH5h53yz2wKJG1a"},
      {false, LabelEncoding::Libnvme,
       "NVMe1R01 nqn.psk-test-host nqn.psk-test-subsys 66GuqV08TsAGII39teWUfwQwizjv06Jy8jOcX3NAAzM="},
      {true, LabelEncoding::Libnvme,
       "NVMe1R02 nqn.psk-test-host nqn.psk-test-subsys "
       "RsKmYJ3nAn1ApjjMloJFbAkLPivONDAX/xW327YBUsn2eGShXSjCZvBaOxscLqmz"},
  };
  for (const V& v : vs) {
    ConfiguredPsk c;
    std::string err;
    ASSERT_TRUE(parse_tls_psk(v.wide ? kPsk48Text : kPsk32Text, c, err)) << err;
    SecretBytes retained;
    ASSERT_TRUE(retained_psk(c, kTestHost, v.enc, retained));
    std::string dig;
    ASSERT_TRUE(psk_identity_digest(psk_hash(c), retained.span(), kTestHost, kTestSub, dig));
    EXPECT_EQ(psk_identity_v1(psk_hash(c), kTestHost, kTestSub, dig), v.identity);
  }
}

TEST(AuthTlsPsk, RetainedAndTlsPskLocalVectors) {
  // LOCAL (interop-facts 5.4, kat.py identities): the 32-byte key, SHA-256.
  ConfiguredPsk c;
  std::string err;
  ASSERT_TRUE(parse_tls_psk(kPsk32Text, c, err));
  struct V {
    LabelEncoding enc;
    std::string_view host, sub;
    int version;
    const char* retained;
    const char* tls;
  } vs[] = {
      {LabelEncoding::Rfc8446, kTestHost, kTestSub, 1, "073311dec37e219ff3acd43f130130c5bdd443c066e1cc3424e49030234ff7d5",
       "8fc3c0badfd4c0c66fa3ca33aadd0314f85536cc9bc47338b60f3e6e563786ca"},
      {LabelEncoding::Libnvme, kTestHost, kTestSub, 1, "ad4cdadfcbaf4e353fcbd09aac891c4d75c5300fe5ee7bb04ae87726a312eddc",
       "b9f5ab2a41ba6e72a23a12066302a2f775fa6c0942c8e0b18ca8ac07edf305e2"},
      {LabelEncoding::Rfc8446, kSpecHost, kSpecSub, 0, "f0af1bc718d4f23bdd7c1683a3d79bd953ea789d106a0f5207bb574bbe5446ce",
       "8e981666c96a88ef69f6e6a0460ff77ba9039e3d38cbdeee264c4de09d75d246"},
      {LabelEncoding::Libnvme, kSpecHost, kSpecSub, 0, "c8304c516f121bc4cd37c9d434635c70ed18c8809004448c3d7ff17b8265ac5e",
       "be4ef89f73206dc2b64f95a33f73318a0064758aa0dab40f38f269c336b359c5"},
  };
  for (const V& v : vs) {
    SecretBytes retained;
    ASSERT_TRUE(retained_psk(c, v.host, v.enc, retained));
    EXPECT_EQ(hex(retained.span()), v.retained);
    std::string identity = psk_identity_v0(1, v.host, v.sub);
    if (v.version == 1) {
      std::string dig;
      ASSERT_TRUE(psk_identity_digest(1, retained.span(), v.host, v.sub, dig));
      identity = psk_identity_v1(1, v.host, v.sub, dig);
    }
    SecretBytes tls;
    ASSERT_TRUE(tls_psk(1, retained.span(), tls_psk_context(identity), v.enc, tls));
    EXPECT_EQ(hex(tls.span()), v.tls) << identity;
  }
  EXPECT_EQ(psk_identity_v0(2, "h", "s"), "NVMe0R02 h s");
  // An untransformed PSK is its own retained PSK.
  ConfiguredPsk plain;
  ASSERT_TRUE(parse_tls_psk(format_tls_psk(0, kPsk32).view(), plain, err));
  SecretBytes retained;
  ASSERT_TRUE(retained_psk(plain, kTestHost, LabelEncoding::Rfc8446, retained));
  EXPECT_EQ(hex(retained.span()), hex(kPsk32));
}

// ---- Diffie-Hellman and DH-HMAC-CHAP ------------------------------------------------------------

std::vector<uint8_t> sha256_of(std::string_view s) {
  std::vector<uint8_t> d(32);
  EXPECT_TRUE(digest(1, {as_bytes(s)}, d.data()));
  return d;
}

TEST(AuthDh, FixedExponentsKnownAnswer) {
  // LOCAL (kat.py dhchap): x = SHA-256("nvtcp host exponent"), y = SHA-256("nvtcp controller
  // exponent") in ffdhe2048.
  DhKeyPair host, ctrl;
  std::string err;
  ASSERT_TRUE(host.set_private(wire::DhGroup::Ffdhe2048, sha256_of("nvtcp host exponent"), err)) << err;
  ASSERT_TRUE(ctrl.set_private(wire::DhGroup::Ffdhe2048, sha256_of("nvtcp controller exponent"), err)) << err;
  ASSERT_EQ(host.public_value().size(), 256u);
  EXPECT_EQ(hex(std::span(host.public_value()).first(4)), "439fb2f5");
  EXPECT_EQ(sha256_hex(host.public_value()), "c7c802e9460c16bfe47ae6f6baeea9064a17f19fb2cc3d811bea4af00c270cf5");
  SecretBytes ks1, ks2;
  ASSERT_TRUE(host.shared_secret(ctrl.public_value(), ks1, err)) << err;
  ASSERT_TRUE(ctrl.shared_secret(host.public_value(), ks2, err)) << err;
  EXPECT_EQ(ks1, ks2);
  ASSERT_EQ(ks1.size(), 256u);
  EXPECT_EQ(sha256_hex(ks1.span()), "2d1fabc29bdb23c81f7b22398a74700c94b952309dc9e0c78e2d62ce1a115446");

  // The augmented challenge and both responses over it (LOCAL, kat.py dhchap).
  std::vector<uint8_t> c1(32);
  for (size_t i = 0; i < c1.size(); ++i) c1[i] = uint8_t(i);
  SecretBytes ca;
  ASSERT_TRUE(augmented_challenge(1, c1, ks1.span(), ca));
  EXPECT_EQ(hex(ca.span()), "3bdda433385726910292c69d7db9bb4293bdc36b6cdf390b5f95e6da35b0d746");
  DhchapSecret s;
  ASSERT_TRUE(parse_dhchap_secret("DHHC-1:01:" + std::string(kDhchapBase64) + ":", s, err));
  SecretBytes kt_host, kt_ctrl;
  ASSERT_TRUE(transform_dhchap_secret(s, kSpecHost, kt_host, err));
  ASSERT_TRUE(transform_dhchap_secret(s, kSpecSub, kt_ctrl, err));
  ResponseInput in{ca.span(), 0x12345678, 0x0102, 0, kSpecHost, kSpecSub};
  uint8_t r1[32], r2[32];
  ASSERT_TRUE(host_response(1, kt_host.span(), in, r1));
  ASSERT_TRUE(controller_response(1, kt_ctrl.span(), in, r2));
  EXPECT_EQ(hex(r1), "c468dd80380b4028c941ad904f80521459cd82ffabfb78317aa9f4279c3cb0d5");
  EXPECT_EQ(hex(r2), "a43225e03c6fc287c7ed87a29d85111180b3a6ff92f8d35c41ee9ecb226d48e6");
  EXPECT_TRUE(responses_equal(r1, r1, 32));
  EXPECT_FALSE(responses_equal(r1, r2, 32));
}

TEST(AuthDh, FreshKeysAgreeInEachGroup) {
  for (auto g : {wire::DhGroup::Ffdhe2048, wire::DhGroup::Ffdhe3072, wire::DhGroup::Ffdhe4096}) {
    DhKeyPair a, b;
    std::string err;
    ASSERT_TRUE(a.generate(g, err)) << err;
    ASSERT_TRUE(b.generate(g, err)) << err;
    EXPECT_EQ(a.public_value().size(), wire::dh_group_bytes(g));
    EXPECT_NE(a.public_value(), b.public_value());
    SecretBytes x, y;
    ASSERT_TRUE(a.shared_secret(b.public_value(), x, err)) << err;
    ASSERT_TRUE(b.shared_secret(a.public_value(), y, err)) << err;
    EXPECT_EQ(x, y) << wire::dh_group_name(uint8_t(g));
    EXPECT_EQ(x.size(), wire::dh_group_bytes(g));
    // A peer that sends its value without leading zeros (SPDK does) gets the same secret.
    std::vector<uint8_t> pub = b.public_value();
    size_t lead = 0;
    while (lead < pub.size() && pub[lead] == 0) ++lead;
    ASSERT_TRUE(a.shared_secret(std::span(pub).subspan(lead), x, err)) << err;
    EXPECT_EQ(x, y);
  }
}

TEST(AuthDh, InvalidPeerValuesAreRefused) {
  DhKeyPair a;
  std::string err;
  ASSERT_TRUE(a.generate(wire::DhGroup::Ffdhe2048, err)) << err;
  SecretBytes ks;
  std::vector<uint8_t> zero(256, 0), one(256, 0), all_ff(256, 0xFF), too_long(257, 0x01);
  one.back() = 1;
  {
    DhKeyPair probe;
    ASSERT_TRUE(probe.set_private(wire::DhGroup::Ffdhe2048, std::vector<uint8_t>{1}, err)) << err;
    EXPECT_EQ(probe.public_value().back(), 2) << "2^1 mod p";
  }
  for (const auto& bad : {zero, one, all_ff, too_long, std::vector<uint8_t>{}}) {
    err.clear();
    EXPECT_FALSE(a.shared_secret(bad, ks, err));
    EXPECT_FALSE(err.empty());
    EXPECT_TRUE(ks.empty());
  }
  DhKeyPair none;
  EXPECT_FALSE(none.generate(wire::DhGroup::Null, err));
}

TEST(AuthDh, NullGroupChallengeIsTheChallenge) {
  std::vector<uint8_t> c(48, 0x42);
  SecretBytes ca;
  ASSERT_TRUE(augmented_challenge(2, c, {}, ca));
  EXPECT_EQ(hex(ca.span()), hex(c));
  EXPECT_FALSE(augmented_challenge(9, c, {}, ca)) << "unknown hash";
}

TEST(AuthCrypto, Base64EdgesAndHkdfLabel) {
  SecretBytes out;
  EXPECT_TRUE(base64_decode("", out));
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(base64_decode("YQ==", out));
  EXPECT_EQ(hex(out.span()), "61");
  ASSERT_TRUE(base64_decode("YWI=", out));
  EXPECT_EQ(hex(out.span()), "6162");
  EXPECT_FALSE(base64_decode("Y===", out));
  EXPECT_FALSE(base64_decode("YQ=a", out));
  EXPECT_FALSE(base64_decode("YQ", out));
  EXPECT_EQ(base64_encode(as_bytes("ab")), "YWI=");
  // RFC 5869 test case 1 (SHA-256): PRK and OKM.
  std::vector<uint8_t> ikm(22, 0x0b), salt = unhex("000102030405060708090a0b0c"), info = unhex("f0f1f2f3f4f5f6f7f8f9");
  uint8_t prk[32];
  ASSERT_TRUE(hmac(1, salt, {ikm}, prk));
  EXPECT_EQ(hex(prk), "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5");
  SecretBytes okm;
  ASSERT_TRUE(hkdf_expand(1, prk, info, 42, okm));
  EXPECT_EQ(hex(okm.span()),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865");
  // RFC 5869 test case 3: zero-length salt.
  SecretBytes prk3;
  ASSERT_TRUE(hkdf_extract(1, ikm, prk3));
  EXPECT_EQ(hex(prk3.span()), "19ef24a32c717b167f33a91d6f648bdf96596776afdb6377ac434c1c293ccb04");
}

TEST(AuthCrypto, SecretBytesWipeOnClear) {
  SecretBytes s(16);
  std::memset(s.data(), 0xAB, 16);
  SecretBytes moved = std::move(s);
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(moved.size(), 16u);
  moved.clear();
  EXPECT_TRUE(moved.empty());
}

}  // namespace
}  // namespace nvtcp::auth::auth_test

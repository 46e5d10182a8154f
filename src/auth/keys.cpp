// SPDX-License-Identifier: Apache-2.0
#include "auth/keys.hpp"

#include <fcntl.h>
#include <isa-l/crc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "auth/crypto.hpp"

namespace nvtcp::auth {

namespace {

constexpr std::string_view kDhchapPrefix = "DHHC-1:";
constexpr std::string_view kTlsPrefix = "NVMeTLSkey-1:";
constexpr std::string_view kTransformSeed = "NVMe-over-Fabrics";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// "PREFIX" "XX:" "<base64>" [":"]: the two-digit XX and the decoded bytes with the CRC checked
// and removed. `what` names the format in errors.
bool parse_keyed(std::string_view text, std::string_view prefix, const char* what, uint8_t& xx, SecretBytes& key,
                 std::string& err) {
  text = trim(text);
  if (text.substr(0, prefix.size()) != prefix) {
    err = std::string("not a ") + what + " (it must start with \"" + std::string(prefix) + "\")";
    return false;
  }
  text.remove_prefix(prefix.size());
  if (text.size() < 3 || text[2] != ':' || text[0] < '0' || text[0] > '9' || text[1] < '0' || text[1] > '9') {
    err = std::string(what) + ": the hash indicator after \"" + std::string(prefix) + "\" must be two digits and a colon";
    return false;
  }
  xx = uint8_t((text[0] - '0') * 10 + (text[1] - '0'));
  text.remove_prefix(3);
  if (!text.empty() && text.back() == ':') text.remove_suffix(1);
  SecretBytes raw;
  if (!base64_decode(text, raw)) {
    err = std::string(what) + ": the key is not valid base64";
    return false;
  }
  if (raw.size() < 4 + 32) {
    err = std::string(what) + ": the key is too short (" + std::to_string(raw.size()) + " bytes with its CRC)";
    return false;
  }
  const size_t n = raw.size() - 4;
  const uint8_t* c = raw.data() + n;
  const uint32_t stored = uint32_t(c[0]) | uint32_t(c[1]) << 8 | uint32_t(c[2]) << 16 | uint32_t(c[3]) << 24;
  if (key_crc32(raw.data(), n) != stored) {
    err = std::string(what) + ": CRC mismatch (the key was mistyped or cut)";
    return false;
  }
  key = SecretBytes(raw.data(), n);
  return true;
}

SecretString format_keyed(std::string_view prefix, uint8_t xx, std::span<const uint8_t> key) {
  SecretBytes raw(key.size() + 4);
  std::memcpy(raw.data(), key.data(), key.size());
  const uint32_t crc = key_crc32(key.data(), key.size());
  for (int i = 0; i < 4; ++i) raw.data()[key.size() + size_t(i)] = uint8_t(crc >> (8 * i));
  std::string b64 = base64_encode(raw.span());
  std::string s;
  s.reserve(prefix.size() + 4 + b64.size());
  s.append(prefix);
  s.push_back(char('0' + xx / 10));
  s.push_back(char('0' + xx % 10));
  s.push_back(':');
  s.append(b64);
  s.push_back(':');
  SecretString out(s);
  wipe(s.data(), s.size());
  wipe(b64.data(), b64.size());
  return out;
}

}  // namespace

uint32_t key_crc32(const uint8_t* p, size_t n) { return crc32_gzip_refl(0, p, n); }

bool parse_dhchap_secret(std::string_view text, DhchapSecret& out, std::string& err) {
  uint8_t xx = 0;
  SecretBytes key;
  if (!parse_keyed(text, kDhchapPrefix, "DH-HMAC-CHAP secret", xx, key, err)) return false;
  if (xx > 3) {
    err = "DH-HMAC-CHAP secret: unknown transformation hash " + std::to_string(xx) + " (0-3: none, SHA-256, -384, -512)";
    return false;
  }
  if (key.size() != 32 && key.size() != 48 && key.size() != 64) {
    err = "DH-HMAC-CHAP secret: " + std::to_string(key.size()) + " bytes (it must be 32, 48 or 64)";
    return false;
  }
  out.transform = xx;
  out.key = std::move(key);
  return true;
}

SecretString format_dhchap_secret(uint8_t transform, std::span<const uint8_t> key) {
  return format_keyed(kDhchapPrefix, transform, key);
}

bool transform_dhchap_secret(const DhchapSecret& s, std::string_view nqn, SecretBytes& out, std::string& err) {
  if (s.transform == 0) {
    out = s.key;
    return true;
  }
  out.resize(hash_length(s.transform));
  if (out.empty() || !hmac(s.transform, s.key.span(), {as_bytes(nqn), as_bytes(kTransformSeed)}, out.data())) {
    out.clear();
    err = "DH-HMAC-CHAP secret: transformation failed";
    return false;
  }
  return true;
}

bool parse_tls_psk(std::string_view text, ConfiguredPsk& out, std::string& err) {
  uint8_t xx = 0;
  SecretBytes key;
  if (!parse_keyed(text, kTlsPrefix, "TLS PSK", xx, key, err)) return false;
  if (xx > 2) {
    err = "TLS PSK: unknown hash " + std::to_string(xx) + " (0-2: none, SHA-256, SHA-384)";
    return false;
  }
  const bool ok = xx == 1 ? key.size() == 32 : xx == 2 ? key.size() == 48 : (key.size() == 32 || key.size() == 48);
  if (!ok) {
    err = "TLS PSK: " + std::to_string(key.size()) + " bytes do not go with hash " + std::to_string(xx) +
          " (01: 32 bytes, 02: 48, 00: either)";
    return false;
  }
  out.hash = xx;
  out.key = std::move(key);
  return true;
}

SecretString format_tls_psk(uint8_t hash, std::span<const uint8_t> key) { return format_keyed(kTlsPrefix, hash, key); }

bool read_key_value(std::string_view value, SecretString& out, std::string& err) {
  out.clear();
  if (value.empty() || value.front() != '@') {
    out = SecretString(trim(value));
    return true;
  }
  const std::string path(value.substr(1));
  // O_NONBLOCK: a FIFO put where a key file should be opens at once (and is refused below as not a
  // regular file) instead of holding the configuration load or the RPC thread for ever.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    err = "key file " + path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    err = "key file " + path + ": not a regular file";
    return false;
  }
  // Another user who owns the file can put their key in it whatever its mode says.
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    ::close(fd);
    err = "key file " + path + ": owned by uid " + std::to_string(st.st_uid) +
          ", neither this process's user nor root (chown it)";
    return false;
  }
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    ::close(fd);
    char mode[8];
    snprintf(mode, sizeof(mode), "%04o", unsigned(st.st_mode & 07777));
    err = "key file " + path + ": mode " + mode + " lets others than its owner at it (chmod 600 " + path + ")";
    return false;
  }
  // A key line is at most a few hundred characters; a larger file is not a key file.
  char buf[4096];
  size_t have = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf + have, sizeof(buf) - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += size_t(n);
    if (have == sizeof(buf)) break;
  }
  ::close(fd);
  if (have == sizeof(buf)) {
    wipe(buf, sizeof(buf));
    err = "key file " + path + ": too large for a key";
    return false;
  }
  std::string_view text(buf, have);
  const size_t nl = text.find('\n');
  if (nl != std::string_view::npos) text = text.substr(0, nl);
  out = SecretString(trim(text));
  wipe(buf, sizeof(buf));
  if (out.empty()) {
    err = "key file " + path + ": empty";
    return false;
  }
  return true;
}

}  // namespace nvtcp::auth

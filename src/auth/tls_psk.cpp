// SPDX-License-Identifier: Apache-2.0
#include "auth/tls_psk.hpp"

#include <fmt/format.h>
#include <openssl/crypto.h>

namespace nvtcp::auth {

namespace {

// HKDF-Expand-Label in either encoding, over HKDF-Extract(0, ikm).
bool extract_expand_label(uint8_t hash, Bytes ikm, std::string_view label, Bytes context, size_t len,
                          LabelEncoding enc, SecretBytes& out) {
  SecretBytes prk;
  if (!hkdf_extract(hash, ikm, prk)) return false;
  if (enc == LabelEncoding::Rfc8446) return hkdf_expand_label(hash, prk.span(), label, context, len, out);
  std::string info;
  info.push_back(char(uint8_t(len)));
  info.push_back(char(uint8_t(len >> 8)));
  info += "tls13 ";
  info += label;
  info.append(reinterpret_cast<const char*>(context.data()), context.size());
  return hkdf_expand(hash, prk.span(), as_bytes(info), len, out);
}

std::string identity(char version, uint8_t hash, std::string_view hostnqn, std::string_view subnqn) {
  std::string s = "NVMe";
  s += version;
  s += "R0";
  s += char('0' + hash);
  s += ' ';
  s += hostnqn;
  s += ' ';
  s += subnqn;
  return s;
}

}  // namespace

uint8_t psk_hash(const ConfiguredPsk& c) {
  if (c.hash) return c.hash;
  return c.key.size() == 48 ? 2 : 1;
}

bool retained_psk(const ConfiguredPsk& c, std::string_view hostnqn, LabelEncoding enc, SecretBytes& out) {
  if (c.hash == 0) {
    out = c.key;
    return true;
  }
  return extract_expand_label(c.hash, c.key.span(), "HostNQN", as_bytes(hostnqn), c.key.size(), enc, out);
}

std::string psk_identity_v0(uint8_t hash, std::string_view hostnqn, std::string_view subnqn) {
  return identity('0', hash, hostnqn, subnqn);
}

bool psk_identity_digest(uint8_t hash, Bytes psk, std::string_view hostnqn, std::string_view subnqn,
                         std::string& out) {
  uint8_t mac[64];
  if (!hmac(hash, psk, {as_bytes(hostnqn), as_bytes(" "), as_bytes(subnqn), as_bytes(" NVMe-over-Fabrics")}, mac))
    return false;
  out = base64_encode(Bytes(mac, hash_length(hash)));
  return true;
}

std::string psk_identity_v1(uint8_t hash, std::string_view hostnqn, std::string_view subnqn,
                            std::string_view digest) {
  std::string s = identity('1', hash, hostnqn, subnqn);
  s += ' ';
  s += digest;
  return s;
}

std::string tls_psk_context(std::string_view identity) {
  // "NVMe1R0H host sub digest" -> "0H digest"
  if (identity.size() > 8 && identity.substr(0, 5) == "NVMe1") {
    const size_t last = identity.rfind(' ');
    return std::string(identity.substr(6, 2)) + " " + std::string(identity.substr(last + 1));
  }
  return std::string(identity);
}

bool tls_psk(uint8_t hash, Bytes psk, std::string_view context, LabelEncoding enc, SecretBytes& out) {
  const uint32_t len = hash_length(hash);
  if (!len || hash > 2) return false;  // TLS 1.3 PSKs use SHA-256 or SHA-384
  return extract_expand_label(hash, psk, "nvme-tls-psk", as_bytes(context), len, enc, out);
}

bool parse_psk_identity(std::string_view text, PskIdentity& out, std::string& why) {
  out = {};
  if (text.size() < 10 || text.substr(0, 4) != "NVMe" || (text[4] != '0' && text[4] != '1') || text[6] != '0' ||
      (text[7] != '1' && text[7] != '2') || text[8] != ' ') {
    why = text.size() >= 6 && text.substr(0, 4) == "NVMe" && text[5] == 'G'
              ? "a generated PSK (secure channel concatenation), which this target does not use"
              : "not an NVMe PSK identity (\"NVMe0R01 <hostnqn> <subnqn>\")";
    return false;
  }
  if (text[5] != 'R') {
    why = text[5] == 'G' ? "a generated PSK (secure channel concatenation), which this target does not use"
                         : "not an NVMe PSK identity (\"NVMe0R01 <hostnqn> <subnqn>\")";
    return false;
  }
  out.version = text[4] - '0';
  out.hash = uint8_t(text[7] - '0');
  std::string_view rest = text.substr(9);
  const size_t sp = rest.find(' ');
  if (sp == std::string_view::npos || sp == 0) {
    why = "no subsystem NQN in the PSK identity";
    return false;
  }
  out.hostnqn = std::string(rest.substr(0, sp));
  rest = rest.substr(sp + 1);
  if (out.version == 1) {
    const size_t last = rest.rfind(' ');
    if (last == std::string_view::npos || last == 0 || last + 1 == rest.size()) {
      why = "a version 1 PSK identity without its digest";
      return false;
    }
    out.subnqn = std::string(rest.substr(0, last));
    out.digest = std::string(rest.substr(last + 1));
  } else {
    out.subnqn = std::string(rest);
  }
  if (out.subnqn.empty() || out.subnqn.find(' ') != std::string::npos) {
    why = "a malformed subsystem NQN in the PSK identity";
    return false;
  }
  return true;
}

bool host_tls_psk(const ConfiguredPsk& c, std::string_view hostnqn, std::string_view subnqn, int version,
                  LabelEncoding enc, OfferedPsk& out) {
  out.hash = psk_hash(c);
  SecretBytes retained;
  if (!retained_psk(c, hostnqn, enc, retained)) return false;
  if (version == 1) {
    std::string digest;
    if (!psk_identity_digest(out.hash, retained.span(), hostnqn, subnqn, digest)) return false;
    out.identity = psk_identity_v1(out.hash, hostnqn, subnqn, digest);
  } else {
    out.identity = psk_identity_v0(out.hash, hostnqn, subnqn);
  }
  return tls_psk(out.hash, retained.span(), tls_psk_context(out.identity), enc, out.key);
}

bool target_tls_psk(const ConfiguredPsk& c, std::string_view identity_text, const PskIdentity& id, LabelEncoding enc,
                    SecretBytes& out, std::string& why) {
  if (id.hash != psk_hash(c)) {
    why = fmt::format("the identity names hash {:02} but the PSK configured for the host is for hash {:02}", id.hash,
                      psk_hash(c));
    return false;
  }
  SecretBytes retained;
  if (!retained_psk(c, id.hostnqn, enc, retained)) {
    why = "deriving the retained PSK failed";
    return false;
  }
  if (id.version == 1) {
    std::string digest;
    if (!psk_identity_digest(id.hash, retained.span(), id.hostnqn, id.subnqn, digest) ||
        digest.size() != id.digest.size() || CRYPTO_memcmp(digest.data(), id.digest.data(), digest.size()) != 0) {
      why = "the identity's digest does not match the PSK configured for the host";
      return false;
    }
  }
  if (!tls_psk(id.hash, retained.span(), tls_psk_context(identity_text), enc, out)) {
    why = "deriving the TLS PSK failed";
    return false;
  }
  return true;
}

}  // namespace nvtcp::auth

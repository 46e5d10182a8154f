#include "auth/tls_psk.hpp"

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

}  // namespace nvtcp::auth

// SPDX-License-Identifier: Apache-2.0
// The cryptography authentication and TLS PSKs need, from OpenSSL 3: hashes and HMAC by the
// NVMe hash identifier, HKDF (RFC 5869) and TLS 1.3's HKDF-Expand-Label (RFC 8446, 7.1),
// Base64, random bytes, and finite-field Diffie-Hellman in the RFC 7919 groups.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "auth/secret_bytes.hpp"
#include "wire/auth.hpp"

namespace nvtcp::auth {

using Bytes = std::span<const uint8_t>;
inline Bytes as_bytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

// Digest length of hash id 1, 2 or 3 (SHA-256, -384, -512); 0 for anything else.
uint32_t hash_length(uint8_t hash);

// H(parts...) and HMAC_H(key, parts...), written to out (hash_length bytes); false for an
// unknown hash or an OpenSSL failure.
bool digest(uint8_t hash, std::initializer_list<Bytes> parts, uint8_t* out);
bool hmac(uint8_t hash, Bytes key, std::initializer_list<Bytes> parts, uint8_t* out);

// HKDF-Extract with an empty salt (a salt of hash_length zeros: the same thing).
bool hkdf_extract(uint8_t hash, Bytes ikm, SecretBytes& prk);
// HKDF-Expand of len bytes.
bool hkdf_expand(uint8_t hash, Bytes prk, Bytes info, size_t len, SecretBytes& out);
// HKDF-Expand-Label: info = BE16(len) || u8 || "tls13 " label || u8 || context.
bool hkdf_expand_label(uint8_t hash, Bytes prk, std::string_view label, Bytes context, size_t len,
                       SecretBytes& out);

// Base64 (RFC 4648, standard alphabet, '=' padding).
std::string base64_encode(Bytes b);
// False for a length that is not a multiple of 4, a character outside the alphabet or padding
// anywhere but at the end.
bool base64_decode(std::string_view s, SecretBytes& out);

// Cryptographically strong random bytes.
bool random_bytes(uint8_t* p, size_t n);

// One side's Diffie-Hellman key pair in an RFC 7919 group.
class DhKeyPair {
 public:
  DhKeyPair();
  ~DhKeyPair();
  DhKeyPair(const DhKeyPair&) = delete;
  DhKeyPair& operator=(const DhKeyPair&) = delete;

  // A fresh private value in group g (not the NULL group).
  bool generate(wire::DhGroup g, std::string& err);
  // A given private value (big-endian): for known-answer tests.
  bool set_private(wire::DhGroup g, Bytes priv, std::string& err);
  // g^x mod p, big-endian, left-padded with zeros to the prime's length.
  const std::vector<uint8_t>& public_value() const { return public_; }
  wire::DhGroup group() const { return group_; }
  // The shared secret with a peer's public value (big-endian, at most the prime's length; a
  // shorter one is taken as left-padded), left-padded to the prime's length. False when the value
  // is not a valid public value of the group (1 < y < p - 1, in the prime-order subgroup).
  bool shared_secret(Bytes peer, SecretBytes& out, std::string& err) const;

 private:
  struct Key;
  std::unique_ptr<Key> key_;
  wire::DhGroup group_ = wire::DhGroup::Null;
  std::vector<uint8_t> public_;
  bool load_public(std::string& err);
};

}  // namespace nvtcp::auth

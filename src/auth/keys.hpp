// SPDX-License-Identifier: Apache-2.0
// Keys as users hold them: DH-HMAC-CHAP secrets in the representation nvme-cli's
// gen-dhchap-key writes ("DHHC-1:XX:<base64>:"), configured TLS PSKs in the PSK interchange
// format gen-tls-key writes ("NVMeTLSkey-1:XX:<base64>:"), both given inline or as "@FILE".
// Parsing follows the Linux kernel and libnvme (docs/security/interop-facts.md, 1.2-1.6 and
// 4.1). No error message ever contains key material.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "auth/secret_bytes.hpp"

namespace nvtcp::auth {

// A DH-HMAC-CHAP secret: 32, 48 or 64 bytes and the hash (XX) that transforms it before use
// (0: used as it is; 1, 2, 3: SHA-256, SHA-384, SHA-512). The secret's length does not have to
// match the hash (Linux accepts any mix since 6.7).
struct DhchapSecret {
  uint8_t transform = 0;
  SecretBytes key;
};

// Parses "DHHC-1:XX:<base64 of the secret and its CRC-32>:" (the trailing colon may be missing,
// surrounding white space is ignored). Checks the CRC.
bool parse_dhchap_secret(std::string_view text, DhchapSecret& out, std::string& err);
SecretString format_dhchap_secret(uint8_t transform, std::span<const uint8_t> key);

// The key the responses are computed with: the secret itself, or, when it names a hash,
// HMAC_hash(secret, nqn || "NVMe-over-Fabrics") (the host's NQN for a host secret, the
// subsystem's for a controller secret).
bool transform_dhchap_secret(const DhchapSecret& s, std::string_view nqn, SecretBytes& out, std::string& err);

// A configured TLS PSK: 32 or 48 bytes, and the hash (XX) of the retained PSK's derivation
// (0: none, the configured PSK is the retained PSK; 1: SHA-256, 32 bytes; 2: SHA-384, 48 bytes).
struct ConfiguredPsk {
  uint8_t hash = 0;
  SecretBytes key;
};

bool parse_tls_psk(std::string_view text, ConfiguredPsk& out, std::string& err);
SecretString format_tls_psk(uint8_t hash, std::span<const uint8_t> key);

// A key value as configuration and flags take it: the key text itself, or "@PATH", the first
// line of that file. A key file must be a regular file that only its owner can read or write
// (mode 0600 or stricter), or it is refused.
bool read_key_value(std::string_view value, SecretString& out, std::string& err);

// CRC-32 as zlib computes it (the IEEE 802.3 polynomial, reflected), which both formats append.
uint32_t key_crc32(const uint8_t* p, size_t n);

}  // namespace nvtcp::auth

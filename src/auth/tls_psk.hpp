// SPDX-License-Identifier: Apache-2.0
// NVMe/TCP TLS pre-shared keys (NVMe/TCP transport specification, 3.6.1; TP 8018): from the
// configured PSK a user holds to the TLS PSK the handshake uses, and the PSK identity that names
// it. Each step as the Linux kernel, libnvme and SPDK compute it (docs/security/interop-facts.md,
// 4.2-4.5), with both encodings of the HKDF label found in the field.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "auth/crypto.hpp"
#include "auth/keys.hpp"

namespace nvtcp::auth {

// How HKDF-Expand-Label's info is encoded: as RFC 8446 writes it (the specification, the kernel,
// SPDK, libnvme since 2025), or as libnvme up to 1.14 (nvme-cli up to 2.14) wrote it: the length
// little-endian and neither label nor context prefixed by its length.
enum class LabelEncoding { Rfc8446, Libnvme };

// The identity's and the derivations' hash: the configured PSK's, or for an untransformed one,
// SHA-256 for 32 bytes and SHA-384 for 48.
uint8_t psk_hash(const ConfiguredPsk& c);

// The retained PSK: HKDF-Expand-Label(HKDF-Extract(0, configured), "HostNQN", NQNh, length of
// the configured PSK) with the PSK's hash; the configured PSK itself when it names no hash.
bool retained_psk(const ConfiguredPsk& c, std::string_view hostnqn, LabelEncoding enc, SecretBytes& out);

// "NVMe0R0H <NQNh> <NQNs>" (H: 1 for SHA-256, 2 for SHA-384).
std::string psk_identity_v0(uint8_t hash, std::string_view hostnqn, std::string_view subnqn);
// Base64(HMAC_H(psk, NQNh || " " || NQNs || " NVMe-over-Fabrics")): the digest of a version 1
// identity, over the retained (or generated) PSK.
bool psk_identity_digest(uint8_t hash, Bytes psk, std::string_view hostnqn, std::string_view subnqn, std::string& out);
// "NVMe1R0H <NQNh> <NQNs> <digest>".
std::string psk_identity_v1(uint8_t hash, std::string_view hostnqn, std::string_view subnqn, std::string_view digest);
// The context a TLS PSK is derived with: a version 0 identity whole; for version 1, "0H <digest>".
std::string tls_psk_context(std::string_view identity);

// TLS PSK = HKDF-Expand-Label(HKDF-Extract(0, psk), "nvme-tls-psk", context, hash length).
bool tls_psk(uint8_t hash, Bytes psk, std::string_view context, LabelEncoding enc, SecretBytes& out);

// A PSK identity as a client offers it, split into its fields.
struct PskIdentity {
  int version = 0;            // 0 or 1
  uint8_t hash = 0;           // 1 (SHA-256) or 2 (SHA-384)
  std::string hostnqn, subnqn;
  std::string digest;         // version 1 only
};
// False (with why) for anything but "NVMe0R0H <NQNh> <NQNs>" or "NVMe1R0H <NQNh> <NQNs> <digest>"
// with H 1 or 2 (generated PSKs, "NVMe.G..", come from secure channel concatenation, which
// nvtcp does not do).
bool parse_psk_identity(std::string_view text, PskIdentity& out, std::string& why);

// The host's side: the identity it offers and the TLS PSK behind it, from its configured PSK.
struct OfferedPsk {
  std::string identity;
  uint8_t hash = 0;
  SecretBytes key;
};
bool host_tls_psk(const ConfiguredPsk& c, std::string_view hostnqn, std::string_view subnqn, int version,
                  LabelEncoding enc, OfferedPsk& out);

// The target's side: the TLS PSK for an identity a host offered, from the PSK configured for
// that host. False (with why) when the identity's hash is not the configured PSK's, or its
// digest (version 1) does not match the retained PSK.
bool target_tls_psk(const ConfiguredPsk& c, std::string_view identity_text, const PskIdentity& id, LabelEncoding enc,
                    SecretBytes& out, std::string& why);

}  // namespace nvtcp::auth

// SPDX-License-Identifier: Apache-2.0
#include "target/tls_keys.hpp"

#include <fmt/format.h>

#include "auth/tls_psk.hpp"
#include "nvtcp/log_pages.hpp"

namespace nvtcp::target {

bool TargetPskResolver::resolve(std::string_view identity, std::vector<tls::Psk>& candidates,
                                std::string& why) const {
  auth::PskIdentity id;
  if (!auth::parse_psk_identity(identity, id, why)) return false;
  HostKey<auth::ConfiguredPsk> configured;  // a copy: RPC may remove the host meanwhile
  if (id.subnqn == nvme::kDiscoveryNqn) {
    for (const auto& s : state_.subsystems()) {
      auto k = s->hosts().allowed(id.hostnqn) ? s->hosts().keys(id.hostnqn) : std::nullopt;
      if (k && k->psk) {
        configured = k->psk;
        break;
      }
    }
  } else {
    const std::shared_ptr<const Subsystem> sub = state_.find_subsystem(id.subnqn);
    if (!sub) {
      why = fmt::format("no subsystem {}", id.subnqn);
      return false;
    }
    if (!sub->hosts().allowed(id.hostnqn)) {
      why = fmt::format("host {} is not allowed on {}", id.hostnqn, id.subnqn);
      return false;
    }
    auto k = sub->hosts().keys(id.hostnqn);
    if (k && k->psk) configured = k->psk;
  }
  if (!configured) {
    why = fmt::format("no PSK is configured for host {} on {}", id.hostnqn, id.subnqn);
    return false;
  }
  // A PSK named in the keyring is read from its file here, at each handshake, so that a rewritten
  // file holds from the next connection on (SPDK 24.05's TCP transport reads it once, at
  // add_host). This runs on the reactor, in the ClientHello callback: the read is of one key
  // file of at most 4 KiB (a few system calls), for at most kMaxIdentitiesLookedUp distinct
  // identities per hello (handshake_keys.cpp), as the binder checks next to it are bounded. One
  // that cannot be read refuses the handshake as a wrong key would, and why (the key's name and
  // file) is the handshake's refusal line.
  const std::shared_ptr<const auth::ConfiguredPsk> psk = configured.material(why);
  if (!psk) return false;
  const PskDerivations accepted = state_.config.tls_psk_derivations;
  for (auto enc : {auth::LabelEncoding::Rfc8446, auth::LabelEncoding::Libnvme}) {
    if ((enc == auth::LabelEncoding::Rfc8446 && accepted == PskDerivations::Libnvme) ||
        (enc == auth::LabelEncoding::Libnvme && accepted == PskDerivations::Rfc8446))
      continue;
    tls::Psk c;
    c.hash = id.hash;
    c.derivation = enc == auth::LabelEncoding::Rfc8446 ? "RFC 8446 labels" : "libnvme's legacy labels";
    if (!auth::target_tls_psk(*psk, identity, id, enc, c.key, why)) continue;
    candidates.push_back(std::move(c));
  }
  return !candidates.empty();
}

}  // namespace nvtcp::target

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
  std::shared_ptr<const auth::ConfiguredPsk> psk;  // held: RPC may remove the host meanwhile
  if (id.subnqn == nvme::kDiscoveryNqn) {
    for (const auto& s : state_.subsystems()) {
      auto k = s->hosts().allowed(id.hostnqn) ? s->hosts().keys(id.hostnqn) : std::nullopt;
      if (k && k->psk) {
        psk = k->psk;
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
    if (k && k->psk) psk = k->psk;
  }
  if (!psk) {
    why = fmt::format("no PSK is configured for host {} on {}", id.hostnqn, id.subnqn);
    return false;
  }
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

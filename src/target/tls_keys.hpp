// SPDX-License-Identifier: Apache-2.0
// The target's TLS key store: which TLS PSK an identity a host offers stands for, from the
// "psk" configured for that host ("hosts": [{"nqn": ..., "psk": "NVMeTLSkey-1:01:...:"}]).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "target/target_state.hpp"
#include "tls/tls_stream.hpp"

namespace nvtcp::target {

class TargetPskResolver final : public tls::PskResolver {
 public:
  explicit TargetPskResolver(const TargetState& state) : state_(state) {}
  // An identity "NVMe<0|1>R0<1|2> <hostnqn> <subnqn>[ <digest>]" names the host and the
  // subsystem: the key is the one configured for that host on that subsystem (for the discovery
  // subsystem, on any subsystem that lists it). Both derivations in the field are candidates:
  // RFC 8446's labels (the kernel, SPDK, libnvme 1.15+) and libnvme's older ones (nvme-cli up to
  // 2.14 inserts keys derived that way); the client's binder picks.
  bool resolve(std::string_view identity, std::vector<tls::Psk>& candidates, std::string& why) const override;

 private:
  const TargetState& state_;
};

}  // namespace nvtcp::target

// SPDX-License-Identifier: Apache-2.0
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace nvtcp::app {
// Each adds its subcommand; the callback stores the exit code in rc.
void add_target_command(CLI::App& app, int& rc);
void add_discover_command(CLI::App& app, int& rc);
void add_identify_command(CLI::App& app, int& rc);
void add_perf_command(CLI::App& app, int& rc);
void add_bench_command(CLI::App& app, int& rc);
void add_engine_command(CLI::App& app, int& rc);
void add_rpc_command(CLI::App& app, int& rc);

// --socket-buffer and --send-buffer of the NVMe/TCP host connections (perf, engine).
void add_socket_buffer_options(CLI::App* c, uint32_t& socket_buffer, std::optional<uint32_t>& send_buffer);
// --dhchap-secret and --dhchap-ctrl-secret (perf, identify, discover, engine).
void add_dhchap_options(CLI::App* c, std::string& secret, std::string& ctrl_secret);

// --tls, --tls-key, --tls-identity-version, --tls-legacy-derivation, --tls-sha256-binder, --no-ktls (perf,
// identify, discover, engine), and what they set in a host's controller options.
struct TlsArgs {
  bool tls = false;
  std::string key;
  int identity_version = 0;
  bool legacy_derivation = false;
  bool rfc8446_derivation = false;
  bool sha256_binder = false;
  bool no_ktls = false;
  template <class Options>
  void apply(Options& o) const {
    o.tls = tls;
    o.tls_key = key;
    o.tls_identity_version = identity_version;
    o.tls_legacy_derivation = legacy_derivation;
    o.tls_rfc8446_derivation = rfc8446_derivation;
    o.tls_sha256_binder = sha256_binder;
    o.ktls = !no_ktls;
  }
};
void add_tls_options(CLI::App* c, TlsArgs& t);
}  // namespace nvtcp::app

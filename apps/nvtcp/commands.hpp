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

// --socket-buffer and --send-buffer of the NVMe/TCP host connections (perf, engine).
void add_socket_buffer_options(CLI::App* c, uint32_t& socket_buffer, std::optional<uint32_t>& send_buffer);
// --dhchap-secret and --dhchap-ctrl-secret (perf, identify, discover, engine).
void add_dhchap_options(CLI::App* c, std::string& secret, std::string& ctrl_secret);
}  // namespace nvtcp::app

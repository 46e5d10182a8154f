#pragma once
#include <CLI/CLI.hpp>

namespace nvtcp::app {
// Each adds its subcommand; the callback stores the exit code in rc.
void add_target_command(CLI::App& app, int& rc);
void add_discover_command(CLI::App& app, int& rc);
void add_identify_command(CLI::App& app, int& rc);
void add_perf_command(CLI::App& app, int& rc);
void add_bench_command(CLI::App& app, int& rc);
void add_engine_command(CLI::App& app, int& rc);
}  // namespace nvtcp::app

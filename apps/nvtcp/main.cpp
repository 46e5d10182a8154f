// SPDX-License-Identifier: Apache-2.0
// nvtcp: the command-line front end. Each subcommand is a thin layer over the libraries.
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "nvtcp/log.hpp"
#include "util/log.hpp"

int main(int argc, char** argv) {
  CLI::App app{"nvtcp: a userspace NVMe/TCP target, initiator and benchmark"};
  app.require_subcommand(1);
  app.fallthrough();  // --log-level works after the subcommand too
  app.set_version_flag("--version", "nvtcp " NVTCP_VERSION);
  std::string log_level;
  app.add_option("--log-level", log_level, "debug, info, warn, error or off (also NVTCP_LOG)");
  std::string log_format = "text";
  app.add_option("--log-format", log_format,
                 "text, or json: one JSON object per line (time, level, message; connect, disconnect, auth, "
                 "termreq and ana_change events with their own keys) for a log shipper")
      ->check(CLI::IsMember({"text", "json"}));
  app.parse_complete_callback([&] {
    nvtcp::LogLevel l;
    if (!log_level.empty() && nvtcp::parse_log_level(log_level, l)) nvtcp::set_log_level(l);
    nvtcp::log::Format f;
    if (nvtcp::log::parse_format(log_format, f)) nvtcp::log::set_format(f);
  });
  int rc = 0;
  nvtcp::app::add_target_command(app, rc);
  nvtcp::app::add_discover_command(app, rc);
  nvtcp::app::add_identify_command(app, rc);
  nvtcp::app::add_perf_command(app, rc);
  nvtcp::app::add_bench_command(app, rc);
  nvtcp::app::add_engine_command(app, rc);
  nvtcp::app::add_rpc_command(app, rc);
  CLI11_PARSE(app, argc, argv);
  return rc;
}

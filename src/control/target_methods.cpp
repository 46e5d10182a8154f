// SPDX-License-Identifier: Apache-2.0
#include "control/target_methods.hpp"

#include <fmt/format.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "control/method_table.hpp"
#include "util/log.hpp"

namespace nvtcp::control {
namespace {

using target::Target;

Json config_of(Target& t, const std::string& name) {
  if (name == "bdev") return bdev_config(t);
  if (name == "nvmf") return nvmf_config(t);
  if (name == "keyring") return keyring_config(t);
  throw RpcError(kInvalidParams, fmt::format("no subsystem {} (nvtcp has keyring, bdev and nvmf)", name));
}

Json rpc_get_methods(MethodContext& ctx, const Json& params) {
  Dispatcher& d = ctx.dispatcher;
  Params p(params);
  p.opt_bool("current");  // every method works at any time: no start-up-only state
  p.opt_bool("include_aliases");
  p.done();
  return Json(d.names());
}

Json spdk_get_version(MethodContext& ctx, const Json& params) {
  const std::string& version = ctx.version;
  Params p(params);
  p.done();
  unsigned major = 0, minor = 0, patch = 0;
  std::sscanf(version.c_str(), "%u.%u.%u", &major, &minor, &patch);
  return Json{{"version", fmt::format("nvtcp {}", version)},
              {"fields", {{"major", major}, {"minor", minor}, {"patch", patch}, {"suffix", ""}}}};
}

// The configuration as SPDK's save_config writes it; nvtcp target --config loads it back.
// rpc.py builds save_config from the two framework methods; nvtcp rpc save_config asks for it
// whole.
Json framework_get_subsystems(MethodContext& /*ctx*/, const Json& params) {
  Params p(params);
  p.done();
  // The keyring first: nvmf's hosts name its keys.
  return Json::array({Json{{"subsystem", "keyring"}, {"depends_on", Json::array()}},
                      Json{{"subsystem", "bdev"}, {"depends_on", Json::array()}},
                      Json{{"subsystem", "nvmf"}, {"depends_on", Json::array({"bdev", "keyring"})}}});
}

Json framework_get_config(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  const std::string name = p.str("name");
  p.done();
  return config_of(t, name);
}

Json save_config(MethodContext& ctx, const Json& params) {
  Target& t = ctx.target;
  Params p(params);
  p.done();
  return Json{{"subsystems", Json::array({Json{{"subsystem", "keyring"}, {"config", config_of(t, "keyring")}},
                                          Json{{"subsystem", "bdev"}, {"config", config_of(t, "bdev")}},
                                          Json{{"subsystem", "nvmf"}, {"config", config_of(t, "nvmf")}}})}};
}

// SPDK's log levels, as log_set_print_level and log_set_level name them. nvtcp has one log,
// what it prints (stderr, or the journal under systemd): both methods set its level, and NOTICE
// is its info level as INFO is.
bool level_of(std::string name, log::Level& out) {
  for (auto& c : name) c = char(std::toupper(static_cast<unsigned char>(c)));
  if (name == "ERROR") out = log::Level::Error;
  else if (name == "WARNING" || name == "WARN") out = log::Level::Warn;
  else if (name == "NOTICE" || name == "INFO") out = log::Level::Info;
  else if (name == "DEBUG") out = log::Level::Debug;
  else if (name == "DISABLED") out = log::Level::Off;
  else return false;
  return true;
}

const char* spdk_level_name(log::Level l) {
  switch (l) {
    case log::Level::Error: return "ERROR";
    case log::Level::Warn: return "WARNING";
    case log::Level::Info: return "INFO";
    case log::Level::Debug: return "DEBUG";
    case log::Level::Off: return "DISABLED";
  }
  return "INFO";
}

Json log_set_level(MethodContext& /*ctx*/, const Json& params) {
  Params p(params);
  const std::string name = p.str("level");
  p.done();
  log::Level l{};
  if (!level_of(name, l)) throw RpcError(kInvalidParams, fmt::format("Invalid parameters: level {}", name));
  log::set_level(l);
  log::info("control: log level {}", spdk_level_name(l));
  return Json(true);
}

Json log_get_level(MethodContext& /*ctx*/, const Json& params) {
  Params p(params);
  p.done();
  return Json(spdk_level_name(log::level()));
}

// SPDK's per-component debug flags (log_set_flag nvmf_tcp, ...): nvtcp has none, so every name
// is an unknown flag, as SPDK answers one, and the list is empty.
Json log_set_flag(MethodContext& /*ctx*/, const Json& params) {
  Params p(params);
  const std::string flag = p.str("flag");
  p.done();
  throw RpcError(kInvalidParams, fmt::format("Invalid parameters: no log flag {} (nvtcp has none; "
                                             "log_set_print_level DEBUG logs everything)", flag));
}

Json log_get_flags(MethodContext& /*ctx*/, const Json& params) {
  Params p(params);
  p.done();
  return Json::object();
}

// The target asked to end, as nvmf_tgt is: SIGTERM and SIGINT shut it down cleanly (as the
// signal itself does), SIGKILL at once. The answer goes first: the signal is sent a moment after,
// from a thread of its own, once this method has returned and its answer is written.
Json spdk_kill_instance(MethodContext& /*ctx*/, const Json& params) {
  Params p(params);
  std::string name = p.str("sig_name");
  p.done();
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  const int sig = name == "TERM" ? SIGTERM : name == "INT" ? SIGINT : name == "KILL" ? SIGKILL : 0;
  if (!sig) throw RpcError(kInvalidParams, fmt::format("sig_name {}: SIGTERM, SIGINT or SIGKILL", name));
  log::info("control: spdk_kill_instance SIG{}", name);
  std::thread([sig] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::kill(::getpid(), sig);
  }).detach();
  return Json(true);
}

// SPDK's threads are nvtcp's reactors, named as nvmf_get_stats names their poll groups: busy is
// the time in loop turns that had work, idle the rest since the reactor started, in ticks of one
// nanosecond. A reactor's loop is its one poller (nvtcp has no timed or paused pollers).
Json thread_get_stats(MethodContext& ctx, const Json& params) {
  Params p(params);
  p.done();
  Json threads = Json::array();
  const auto times = ctx.target.reactor_times();
  const long cpus = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  for (size_t i = 0; i < times.size(); ++i) {
    const auto& r = times[i];
    std::string mask;  // hex, as SPDK shows a cpumask: the pinned CPU's bit, or every CPU's
    if (r.cpu >= 0) mask = fmt::format("{:x}", 1ull << (r.cpu % 64));
    else mask = cpus >= 64 ? "ffffffffffffffff" : fmt::format("{:x}", (1ull << cpus) - 1);
    threads.push_back(Json{{"name", fmt::format("nvmf_tgt_poll_group_{}", i)},
                           {"id", i + 1},
                           {"cpumask", mask},
                           {"busy", r.busy_ns},
                           {"idle", r.run_ns > r.busy_ns ? r.run_ns - r.busy_ns : 0},
                           {"active_pollers_count", 1},
                           {"timed_pollers_count", 0},
                           {"paused_pollers_count", 0}});
  }
  return Json{{"tick_rate", 1'000'000'000ull}, {"threads", threads}};
}

std::span<const MethodEntry> framework_methods() {
  static constexpr MethodEntry kMethods[] = {
    {"rpc_get_methods", rpc_get_methods},
    {"spdk_get_version", spdk_get_version},
    {"framework_get_subsystems", framework_get_subsystems},
    {"framework_get_config", framework_get_config},
    {"save_config", save_config},
    {"log_set_level", log_set_level},
    {"log_get_level", log_get_level},
    {"log_set_print_level", log_set_level},
    {"log_get_print_level", log_get_level},
    {"log_set_flag", log_set_flag},
    {"log_clear_flag", log_set_flag},
    {"log_get_flags", log_get_flags},
    {"spdk_kill_instance", spdk_kill_instance},
    {"thread_get_stats", thread_get_stats},
  };
  return kMethods;
}

}  // namespace

void add_target_methods(Dispatcher& d, Target& t, const std::string& version) {
  auto c = std::make_shared<MethodContext>(MethodContext{d, t, version});
  for (auto family : {framework_methods(), nvmf_methods(), bdev_methods(), keyring_methods()})
    for (const MethodEntry& m : family) d.add(m.name, [c, fn = m.fn](const Json& params) { return fn(*c, params); });
  for (auto family : {nvmf_slow_methods(), bdev_slow_methods()})
    for (const SlowMethodEntry& m : family)
      d.add_slow(m.name, [c, fn = m.fn](const Json& params) { return fn(*c, params); });
}

}  // namespace nvtcp::control

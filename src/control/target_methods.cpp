// SPDX-License-Identifier: Apache-2.0
#include "control/target_methods.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "control/method_table.hpp"

namespace nvtcp::control {
namespace {

using target::Target;

Json config_of(Target& t, const std::string& name) {
  if (name == "bdev") return bdev_config(t);
  if (name == "nvmf") return nvmf_config(t);
  throw RpcError(kInvalidParams, fmt::format("no subsystem {} (nvtcp has bdev and nvmf)", name));
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
  return Json::array({Json{{"subsystem", "bdev"}, {"depends_on", Json::array()}},
                      Json{{"subsystem", "nvmf"}, {"depends_on", Json::array({"bdev"})}}});
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
  return Json{{"subsystems", Json::array({Json{{"subsystem", "bdev"}, {"config", config_of(t, "bdev")}},
                                          Json{{"subsystem", "nvmf"}, {"config", config_of(t, "nvmf")}}})}};
}

std::span<const MethodEntry> framework_methods() {
  static constexpr MethodEntry kMethods[] = {
    {"rpc_get_methods", rpc_get_methods},
    {"spdk_get_version", spdk_get_version},
    {"framework_get_subsystems", framework_get_subsystems},
    {"framework_get_config", framework_get_config},
    {"save_config", save_config},
  };
  return kMethods;
}

}  // namespace

void add_target_methods(Dispatcher& d, Target& t, const std::string& version) {
  auto c = std::make_shared<MethodContext>(MethodContext{d, t, version});
  for (auto family : {framework_methods(), nvmf_methods(), bdev_methods()})
    for (const MethodEntry& m : family) d.add(m.name, [c, fn = m.fn](const Json& params) { return fn(*c, params); });
}

}  // namespace nvtcp::control

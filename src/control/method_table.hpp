// SPDX-License-Identifier: Apache-2.0
// The target's RPC methods as SPDK registers its own: one named function per method, listed
// in a table per family (nvmf_*, bdev_*, keyring_*, and the framework's), each family in its own file.
// add_target_methods (target_methods.cpp) registers every table with the dispatcher.
#pragma once
#include <span>
#include <string>

#include "control/json_rpc.hpp"
#include "target_tcp/target.hpp"

namespace nvtcp::control {

// What a method may reach: the dispatcher (rpc_get_methods lists it), the target, and the
// version spdk_get_version reports. One per server, alive as long as its methods.
struct MethodContext {
  Dispatcher& dispatcher;
  target::Target& target;
  std::string version;
};

using TargetMethod = Json (*)(MethodContext& ctx, const Json& params);
struct MethodEntry {
  const char* name;
  TargetMethod fn;
};

std::span<const MethodEntry> nvmf_methods();  // nvmf_methods.cpp
std::span<const MethodEntry> bdev_methods();  // bdev_methods.cpp
std::span<const MethodEntry> keyring_methods();  // keyring_methods.cpp

// Each family's part of save_config / framework_get_config, in SPDK's shapes.
Json nvmf_config(target::Target& t);
Json bdev_config(target::Target& t);
Json keyring_config(target::Target& t);

}  // namespace nvtcp::control

// SPDX-License-Identifier: Apache-2.0
// The target's RPC methods as SPDK registers its own: one named function per method, listed
// in a table per family (nvmf_*, bdev_*, keyring_*, and the framework's), each family in its own file.
// add_target_methods (target_methods.cpp) registers every table with the dispatcher.
#pragma once
#include <memory>
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

// A slow method: one that can wait on the network or a file (a Ceph cluster's connect, resize
// or close, an open or close of a path on a network file system, the commands still on a
// namespace taken away, which wait on its device). Every other client's calls, an ANA
// failover among them, are answered while it waits; its own client's later requests wait for
// its answer (RpcServer). It runs in three parts, and what each may touch is the rule:
//  1. The function in the table, on the RPC thread: parameters, names, what it needs from the
//     target (a cluster's settings, a device to resize held for it), copied or held so that
//     part 2 needs nothing else. Throws RpcError as any method; returns part 2.
//  2. The blocking part, on a worker thread, while the RPC thread serves other calls (which
//     change the target, and may end its subsystems, bdevs and clusters): it touches nothing of
//     the target, no table, no lock of it, no Target& (capture it for part 3 only), and nothing
//     the RPC thread uses; only what part 1 gave it (copies, or a device it took out of the
//     target), what it builds (the device, held alone until part 3) and what part 1 holds alive
//     for it until part 3 and made safe to use beside the reactors (LiveConfig::begin_resize's
//     device, the namespaces LiveConfig::Leaving detached, whose holds the reactors drop
//     atomically). Returns part 3.
//  3. The commit, on the RPC thread under the target's locks (LiveConfig): checks again what
//     part 1 checked and calls since may have changed (the name taken by another create, the
//     uuid, the cluster unregistered), then changes the target or gives up (what part 2 built
//     is freed); the answer, or RpcError. It runs even when the client has left (its request
//     was received; the answer is dropped), and the RPC server's stop waits for it.
using SlowTargetMethod = SlowWork (*)(MethodContext& ctx, const Json& params);
struct SlowMethodEntry {
  const char* name;
  SlowTargetMethod fn;
};

std::span<const MethodEntry> nvmf_methods();  // nvmf_methods.cpp
std::span<const SlowMethodEntry> nvmf_slow_methods();  // nvmf_methods.cpp
std::span<const MethodEntry> bdev_methods();  // bdev_methods.cpp
std::span<const SlowMethodEntry> bdev_slow_methods();  // bdev_methods.cpp
std::span<const MethodEntry> keyring_methods();  // keyring_methods.cpp

// Parts 2 and 3 of a method that took namespaces away (part 1: a LiveConfig::begin_* into
// leaving): the wait for their commands, then LiveConfig::settle; answers true, or error_code
// and why (nvmf_methods.cpp).
SlowWork settle_slowly(target::Target& t, std::shared_ptr<target::LiveConfig::Leaving> leaving, int error_code);

// Each family's part of save_config / framework_get_config, in SPDK's shapes.
Json nvmf_config(target::Target& t);
Json bdev_config(target::Target& t);
Json keyring_config(target::Target& t);

}  // namespace nvtcp::control

// SPDX-License-Identifier: Apache-2.0
// The target's JSON-RPC methods, named and shaped as SPDK's nvmf and bdev methods wherever
// SPDK has one (so SPDK's rpc.py drives nvtcp unchanged for them); methods of nvtcp's own are
// named nvtcp_*. They run on the RPC server's thread and reach the reactors only through the
// target's control calls; a slow one's blocking part runs on a worker. Each is a named
// function in its family's table (method_table.hpp, which says what a slow one may touch).
#pragma once
#include <string>

#include "control/json_rpc.hpp"
#include "target_tcp/target.hpp"

namespace nvtcp::control {

// version: what spdk_get_version reports ("0.1.0").
void add_target_methods(Dispatcher& d, target::Target& t, const std::string& version);

}  // namespace nvtcp::control

// SPDX-License-Identifier: Apache-2.0
// The offload engine's figures as Prometheus text (what `nvtcp engine --metrics-listen`
// answers GET /metrics with): every family named nvtcp_engine_..., rendered from a
// Engine::stats() snapshot. Per engine core (label core, and cpu when pinned), per remote
// controller (label subsystem) and per path of it (labels subsystem, path).
#pragma once
#include <string>

#include "engine/engine.hpp"

namespace nvtcp::engine {

std::string render_engine_metrics(const EngineStats& s);

}  // namespace nvtcp::engine

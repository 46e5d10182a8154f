// SPDX-License-Identifier: Apache-2.0
// The target's metrics as Prometheus text (what GET /metrics answers): every family named
// nvtcp_..., rendered from a Target::metrics() snapshot.
#pragma once
#include <string>

#include "target/metrics.hpp"

namespace nvtcp::control {

std::string render_target_metrics(const target::TargetMetrics& m);

}  // namespace nvtcp::control

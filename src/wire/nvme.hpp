// SPDX-License-Identifier: Apache-2.0
// The NVMe structures the public API shares with the stack (SQE/CQE/SGL and opcodes, status,
// Identify, log pages, properties) are declared in include/nvtcp in namespace nvtcp::nvme, the
// namespace an application sees. Below the API they are part of the wire formats like the PDUs
// and fabrics commands here, so wire:: names them too: the using-directive makes wire::Sqe the
// same type as nvme::Sqe (not a copy), and code below the API may use either name. Every wire
// header that describes NVMe structures includes this one.
#pragma once
#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"
#include "nvtcp/properties.hpp"
#include "nvtcp/sqe.hpp"
#include "nvtcp/status.hpp"

namespace nvtcp::wire {
using namespace nvtcp::nvme;
}  // namespace nvtcp::wire

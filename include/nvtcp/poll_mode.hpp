// SPDX-License-Identifier: Apache-2.0
// How a thread's event loop waits for completions: the host's queue pairs (ControllerOptions::
// poll, fio's and the CLI's poll options) and the reactors under them and under the target.
#pragma once

namespace nvtcp {

// Interrupt: always sleep in io_uring until something completes (for hosts shared with other
// work; about 5x the latency at QD1 on loopback). Busy: never sleep (the lowest latency, a
// whole core). Hybrid: spin while completions keep coming and sleep after a spin window of
// silence (50 us by default): an idle loop costs no CPU, and on a VM it avoids most cross-CPU
// wake-ups under load. Default: the choice is left to whoever runs the loop; the host library
// makes it Hybrid over TCP and Interrupt through the offload engine (trtype:engine), whose own
// cores poll, and a reactor given Default sleeps as with Interrupt.
enum class PollMode { Default, Interrupt, Busy, Hybrid };

}  // namespace nvtcp

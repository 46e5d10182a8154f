// Checks of state-machine transitions: on in Debug builds and in every sanitizer or fuzzer
// build (ASan implies them, so the fuzzer's RelWithDebInfo build checks too), compiled out
// of Release builds so the data path pays nothing for them.
#pragma once

#if !defined(NDEBUG) || defined(__SANITIZE_ADDRESS__)
#define NVTCP_STATE_CHECKS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NVTCP_STATE_CHECKS 1
#endif
#endif
#ifndef NVTCP_STATE_CHECKS
#define NVTCP_STATE_CHECKS 0
#endif

namespace nvtcp::target {

// Prints which machine made which illegal move, then aborts: an illegal transition means
// the code lost track of an object's life, which no caller can repair.
[[noreturn]] void illegal_transition(const char* machine, const char* from, const char* to, unsigned id);

}  // namespace nvtcp::target

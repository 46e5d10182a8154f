// SPDX-License-Identifier: Apache-2.0
// State machines, target and host alike: each changes state in one setter that asks whether the
// move is legal, so an impossible sequence of events (a completion for a request already freed,
// a reconnect after a final failure) stops the process where it happens instead of corrupting
// a later step. The checks are on in Debug builds and in every sanitizer or fuzzing build (those
// are RelWithDebInfo, so NDEBUG alone would switch them off exactly where they find the most),
// and compiled out of Release builds, so the data path pays nothing for them.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <utility>

#if !defined(NDEBUG) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NVTCP_STATE_CHECKS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define NVTCP_STATE_CHECKS 1
#endif
#endif
#ifndef NVTCP_STATE_CHECKS
#define NVTCP_STATE_CHECKS 0
#endif

namespace nvtcp {

inline constexpr bool kCheckTransitions = NVTCP_STATE_CHECKS;

// Which (from, to) pairs a machine with kStates states allows. A self-transition is legal only
// when listed: writing the state it already has usually means two events were handled as one.
template <typename StateEnum, size_t kStates>
class TransitionTable {
 public:
  constexpr TransitionTable(std::initializer_list<std::pair<StateEnum, StateEnum>> legal) {
    for (const auto& [from, to] : legal) allowed_[size_t(from)][size_t(to)] = true;
  }
  constexpr bool allows(StateEnum from, StateEnum to) const {
    return size_t(from) < kStates && size_t(to) < kStates && allowed_[size_t(from)][size_t(to)];
  }

 private:
  bool allowed_[kStates][kStates] = {};
};

// An illegal transition is a bug in nvtcp, not an input error, and no caller can repair it: say
// which machine made which move where (and for which object, if id >= 0), then abort so the
// sanitizer or fuzzer run reports the stack.
[[noreturn]] void illegal_transition(const char* machine, const char* from, const char* to, const char* where,
                                     long id = -1);

}  // namespace nvtcp

// The legal moves of one of the host's state machines, as data. Each machine changes state in
// one setter that asks its table first, so an impossible sequence of events (a completion for a
// connection already given up, a reconnect after a final failure) stops the process where it
// happens instead of corrupting a later step.
#pragma once
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <utility>

// Checked in Debug builds and in every sanitizer or fuzzing build (those are RelWithDebInfo,
// so NDEBUG alone would switch the check off exactly where it finds the most).
#if !defined(NDEBUG) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NVTCP_HOST_CHECK_TRANSITIONS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define NVTCP_HOST_CHECK_TRANSITIONS 1
#endif
#endif
#ifndef NVTCP_HOST_CHECK_TRANSITIONS
#define NVTCP_HOST_CHECK_TRANSITIONS 0
#endif

namespace nvtcp::host::detail {

inline constexpr bool kCheckTransitions = NVTCP_HOST_CHECK_TRANSITIONS;

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

// An illegal transition is a bug in the host, not an input error: say which, then abort so the
// sanitizer or fuzzer run reports the stack.
[[noreturn]] inline void illegal_transition(const char* machine, const char* from, const char* to,
                                            const char* where) {
  std::fprintf(stderr, "nvtcp host: illegal %s transition %s -> %s (%s)\n", machine, from, to, where);
  std::abort();
}

}  // namespace nvtcp::host::detail

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make test` after `make deps`: the Release build and its tests; the same tests under ASan +
# UBSan; the threaded ones under TSan; every fuzzer briefly. Stops at the first pass that fails.
#
# The sanitizer and fuzzer trees build at idle priority (SCHED_IDLE, `chrt --idle`) while the
# passes before them run. The Release tests leave a core idle much of the time (an emulated guest
# waiting on its network, a keep-alive timer, a test on one core), and a job at idle priority runs
# only on a core that nothing else wants, so the tests see the machine they saw before and the
# builds take the rest. Each pass starts once its own tree is built. At the end, where the time
# went: each stage's wall time, and how long each pass waited for its build.
#
# Usage: make-test.sh   (env: MAKE, BUILD, ASAN_BUILD, TSAN_BUILD, FUZZ_BUILD, JOBS)
set -uo pipefail
cd "$(dirname "$0")/.."
make=(${MAKE:-make} --no-print-directory)
work=$(mktemp -d /tmp/nvtcp-make-test.XXXXXX)
chain=
stop_chain() {
  [[ -n $chain ]] && { kill -TERM -- "-$chain"; kill -CONT -- "-$chain"; } 2>/dev/null
  chain=
}
# The tests labelled bench measure, and judge what else ran on their CPUs: the chain is stopped
# (SIGSTOP to its process group) while they run, so they see the machine they saw before.
pause_chain() { [[ -z $chain ]] || kill -STOP -- "-$chain" 2>/dev/null || true; }
resume_chain() { [[ -z $chain ]] || kill -CONT -- "-$chain" 2>/dev/null || true; }
trap 'stop_chain; rm -rf "$work"' EXIT

times=()
stage_start=$SECONDS
stage_done() {  # stage_done NAME: records the wall time since the last stage ended
  times+=("$(printf '%-26s %4d s' "$1" $((SECONDS - stage_start)))")
  stage_start=$SECONDS
}
summary() {
  echo "make test: where the time went (wall)"
  printf '  %s\n' "${times[@]}"
  printf '  %-26s %4d s\n' total "$SECONDS"
}

"${make[@]}" build || exit 1
stage_done "Release build"

# The chain: one tree after another, in the order their passes need them; each leaves its exit
# status in $work/NAME.rc and its output in $work/NAME.log. setsid gives it a process group of its
# own, so a failing pass stops every compiler under it. Without SCHED_IDLE (a kernel or container
# that refuses it) the builds run at nice 19, which is nearly the same.
idle=(chrt --idle 0)
"${idle[@]}" true 2>/dev/null || idle=(nice -n 19)
setsid "${idle[@]}" bash -c '
  for name in asan tsan fuzz; do
    start=$SECONDS
    "$@" "$name-build" >"'"$work"'/$name.log" 2>&1
    rc=$?
    echo $((SECONDS - start)) >"'"$work"'/$name.seconds"
    echo $rc >"'"$work"'/$name.rc"
    [[ $rc -eq 0 ]] || exit $rc
  done' chain "${make[@]}" &
chain=$!

# wait_for NAME: until the chain has built NAME's tree; fails with the build's output if it failed.
wait_for() {
  while [[ ! -e $work/$1.rc ]]; do
    if ! kill -0 "$chain" 2>/dev/null && [[ ! -e $work/$1.rc ]]; then
      echo "make test: the $1 build stopped without a result" >&2
      tail -n 60 "$work/$1.log" >&2 2>/dev/null
      return 1
    fi
    sleep 1
  done
  if [[ $(cat "$work/$1.rc") != 0 ]]; then
    echo "make test: the $1 build failed:" >&2
    tail -n 100 "$work/$1.log" >&2
    return 1
  fi
  echo "make test: the $1 tree was built in $(cat "$work/$1.seconds") s, beside the passes before it"
}

run_pass() {  # run_pass NAME MAKE_TARGET
  "${make[@]}" "$2" || { summary; exit 1; }
  stage_done "$1"
}
run_measuring_pass() {  # run_measuring_pass NAME MAKE_TARGET: the bench-labelled tests apart, chain paused
  "${make[@]}" "$2" BENCH_TESTS=exclude || { summary; exit 1; }
  pause_chain
  "${make[@]}" "$2" BENCH_TESTS=only || { resume_chain; summary; exit 1; }
  resume_chain
  stage_done "$1"
}

run_measuring_pass "Release tests" release-tests
wait_for asan || { summary; exit 1; }
stage_done "waiting for the ASan tree"
run_measuring_pass "ASan + UBSan tests" asan-tests
wait_for tsan || { summary; exit 1; }
stage_done "waiting for the TSan tree"
run_pass "TSan tests" tsan-tests
wait_for fuzz || { summary; exit 1; }
stage_done "waiting for the fuzzers"
run_pass "fuzz smoke" fuzz-smoke-run
chain=
summary

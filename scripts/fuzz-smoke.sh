#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make fuzz-smoke: every fuzzer for FUZZ_SMOKE_SECONDS from its seed corpus, JOBS at a time
# (a fuzzer is one process on one core, so running them one after another left cores idle
# and made the smoke run the longest part of make test after the builds).
# Usage: fuzz-smoke.sh JOBS FUZZER...   (env: FUZZ_BUILD, FUZZ_SMOKE_SECONDS)
set -euo pipefail
jobs=$1; shift
build=${FUZZ_BUILD:-build-fuzz}
seconds=${FUZZ_SMOKE_SECONDS:-30}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

run_one() {
  local f=$1 work
  work=$(mktemp -d)
  mkdir "$work/corpus"
  # Artifacts (crash-*, leak-*, timeout-*) land in the fuzzer's own directory, so two
  # fuzzers running side by side cannot take each other's for their own.
  if (cd "$work" && "$OLDPWD/$build/fuzz_$f" -max_total_time="$seconds" -print_final_stats=1 \
        "$work/corpus" "$OLDPWD/tests/fuzz/corpus/$f") >"$logs/$f.log" 2>&1 \
     && ! ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* >/dev/null 2>&1; then
    rm -rf "$work"; echo ok >"$logs/$f.result"
  else
    mkdir -p fuzz-artifacts
    cp "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* fuzz-artifacts/ 2>/dev/null || true
    rm -rf "$work"; echo failed >"$logs/$f.result"
  fi
}
export -f run_one
export build seconds logs

printf '%s\n' "$@" | xargs -P "$jobs" -n 1 bash -c 'run_one "$1"' run_one

failed=0
for f in "$@"; do
  echo "fuzz_$f:"
  grep -E 'stat::number_of_executed_units|ERROR|SUMMARY' "$logs/$f.log" || true
  if [[ $(cat "$logs/$f.result" 2>/dev/null) != ok ]]; then
    echo "fuzz_$f found a crash (artifacts in fuzz-artifacts/):"; tail -40 "$logs/$f.log"
    failed=$((failed + 1))
  fi
done
echo "fuzz: $(($# - failed)) passed, $failed failed"
[[ $failed -eq 0 ]]

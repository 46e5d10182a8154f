#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ctest, then why each skipped test was skipped. ctest lists skipped tests by name only and
# shows no output of theirs, so a test that skips on a new machine (a missing package, no
# root) would pass unnoticed; here its own reason (its "SKIP: ..." line, or GoogleTest's
# "Skipped" message) is printed under the list.
# Usage: ctest-with-skips.sh BUILD_DIR [ctest arguments...]
set -uo pipefail
build=$1
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
(cd "$build" && ctest "$@") 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
mapfile -t skipped < <(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$out")
if ((${#skipped[@]})); then
  echo "Why they were skipped:"
  log="$build/Testing/Temporary/LastTest.log"
  for t in "${skipped[@]}"; do
    # The test's output block in ctest's log; its skip reason is the line that says SKIP or
    # GoogleTest's "Skipped" line and the message after it.
    reason=$(awk -v name="$t" '
      $0 ~ "^[0-9]+/[0-9]+ Testing: " { mine = (substr($0, index($0, ": ") + 2) == name); inblock = 0 }
      mine && /^Output:$/ { inblock = 1; next }
      inblock && /^<end of output>/ { inblock = 0 }
      inblock && after { print; after = 0 }
      inblock && /SKIP|: Skipped$/ { print; if ($0 ~ /: Skipped$/) after = 1 }
    ' "$log" | grep -v '^\[  SKIPPED \]' | sed 's/^.*: Skipped$//' | grep -v '^$' | head -3 | paste -sd ' ')
    echo "  $t: ${reason:-no reason printed}"
  done
fi
exit "$rc"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `nvtcp perf --verify` when writes are still outstanding as the write half ends: the target is
# stopped (SIGSTOP) across the end of the write half for longer than perf waits for them, and
# the host has no I/O timeout, so the read-back half starts beside them. A slot whose write is
# still out must not be issued again as a read: it would share its buffer between the two
# commands and take the write's completion for the read's (a mismatch that is not in the data).
# Seen in CI as five "mismatches" through two RBD gateways whose writes waited on the image's
# exclusive lock. Every write completes once the target runs again; none may fail or mismatch.
set -euo pipefail
NVTCP=$1
dir=$(mktemp -d /tmp/nvtcp-verify-stall.XXXXXX)
target_pid= perf_pid=
cleanup() {
  [ -n "$perf_pid" ] && kill "$perf_pid" 2>/dev/null || true
  [ -n "$target_pid" ] && { kill -CONT "$target_pid"; kill -9 "$target_pid"; } 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
NQN=nqn.2026-12.io.nvtcp:verify-stall
truncate -s 64M "$dir/ns.img"
"$NVTCP" target -l 127.0.0.1:0 --discovery-port 0 --nqn "$NQN" --file "$dir/ns.img" \
  --ready-file "$dir/ready" >"$dir/target.log" 2>&1 &
target_pid=$!
for _ in $(seq 200); do [ -s "$dir/ready" ] && break; sleep 0.05; done
[ -s "$dir/ready" ] || { echo "target did not start"; cat "$dir/target.log"; exit 1; }
port=$(cat "$dir/ready")

# Writes from 0 to 1.5 s; perf waits 5 s for what is outstanding (to 6.5 s) and reads back
# from then on. The target stops at about 1 s and runs again at about 8 s.
"$NVTCP" perf -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN ns:1" --verify -t 3 -q 16 -o 4K \
  --io-timeout 0 --json >"$dir/perf.json" 2>"$dir/perf.log" &
perf_pid=$!
sleep 1
kill -STOP "$target_pid"
sleep 7
kill -CONT "$target_pid"
rc=0
wait "$perf_pid" || rc=$?
perf_pid=
[ "$rc" = 0 ] || { echo "FAIL: perf exited with $rc"; cat "$dir/perf.log"; exit 1; }
grep -q "still outstanding as the write half ended" "$dir/perf.log" ||
  { echo "FAIL: perf did not say that writes were outstanding (the stall came too late?)"; cat "$dir/perf.log"; exit 1; }
/usr/bin/python3 - "$dir/perf.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["errors"] == 0, r
assert r["verify_failures"] == 0, r
assert r["writes"] > 0 and r["reads"] > 0, r
print(f"verify with writes outstanding into the read-back: {r['writes']} writes, {r['reads']} reads, "
      f"0 mismatches, {r['verify_skipped']} reads of blocks with no write acknowledged in the write half not checked")
PY
echo "PASS: the read-back half started beside outstanding writes without reusing their slots"

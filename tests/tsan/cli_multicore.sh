#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The CLI's multi-threaded paths under ThreadSanitizer (run by `make test-tsan`):
#
#   tests/tsan/cli_multicore.sh path/to/tsan-built/nvtcp
#
# `nvtcp target --cores 2` (two reactor threads, connections handed between them) against
# `nvtcp perf --cores 2 -P 2` (two host threads, two queue pairs each, plus the admin thread):
#   1. sequential writes then read-back with --verify on a RAM namespace (each perf thread has its
#      own region: threads writing the same blocks would make the check itself meaningless);
#   2. random reads of the RAM namespace and random writes to the NULL namespace, with header and
#      data digests, at the same time.
# Any TSan report makes a process exit with 66 (TSan's exitcode), which fails this script.
set -euo pipefail
NVTCP=$(readlink -f "${1:?usage: cli_multicore.sh path/to/nvtcp}")
NQN=nqn.2026-11.io.nvtcp:tsan
WORK=$(mktemp -d /tmp/nvtcp-tsan.XXXXXX)
TARGET_PID=""
cleanup() {
  local rc=$?
  if [[ -n $TARGET_PID ]] && kill -0 "$TARGET_PID" 2>/dev/null; then kill -KILL "$TARGET_PID"; fi
  if [[ $rc -ne 0 ]]; then echo "tsan cli: logs kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

"$NVTCP" target --listen 127.0.0.1:0 --discovery-port 0 --null 1G --ram 256M --nqn "$NQN" --cores 2 \
  --ready-file "$WORK/ready" >"$WORK/target.log" 2>&1 &
TARGET_PID=$!
for _ in $(seq 300); do [[ -s $WORK/ready ]] && break; kill -0 "$TARGET_PID" || break; sleep 0.1; done
[[ -s $WORK/ready ]] || { cat "$WORK/target.log"; echo "tsan cli: target did not start"; exit 1; }
PORT=$(head -1 "$WORK/ready")
TRID="trtype:tcp traddr:127.0.0.1 trsvcid:$PORT subnqn:$NQN"

run() {  # run NAME cmd...: the command must succeed (TSan reports make it exit 66)
  local name=$1; shift
  if ! "$@" >"$WORK/$name.log" 2>&1; then
    cat "$WORK/$name.log"; echo "tsan cli: $name failed: $*"; exit 1
  fi
}
run verify "$NVTCP" perf -r "$TRID ns:2" --cores 2 -P 2 -q 8 -o 8K -w write --verify -t 2
grep -q "verify: 0 mismatches" "$WORK/verify.log" || { cat "$WORK/verify.log"; echo "tsan cli: verify failed"; exit 1; }
"$NVTCP" perf -r "$TRID ns:2 hdgst ddgst" --cores 2 -P 2 -q 8 -o 16K -w randread -t 1 >"$WORK/reads.log" 2>&1 &
READS=$!
run writes "$NVTCP" perf -r "$TRID ns:1 hdgst ddgst" --cores 2 -P 2 -q 8 -o 64K -w randwrite -t 1
wait "$READS" || { cat "$WORK/reads.log"; echo "tsan cli: random reads failed"; exit 1; }

kill -INT "$TARGET_PID"
rc=0; wait "$TARGET_PID" || rc=$?
TARGET_PID=""
if [[ $rc -ne 0 ]]; then cat "$WORK/target.log"; echo "tsan cli: target exited with $rc"; exit 1; fi
if grep -l "ThreadSanitizer" "$WORK"/*.log; then echo "tsan cli: ThreadSanitizer reports above"; exit 1; fi
echo "tsan cli: target --cores 2, perf --cores 2 -P 2 (verify, digests): no ThreadSanitizer report"

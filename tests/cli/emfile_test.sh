#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The target at its open files limit: a crowd of connections past RLIMIT_NOFILE must not spin
# the accept loop (a failed accept retried at once fails again: one core at 100% and a log
# line per try), the start-up log must say that --max-connections cannot be met, and once
# the crowd leaves a healthy host is served again.
#
# The target runs with soft and hard limits of 64 descriptors (so it cannot raise them) and
# the default --max-connections 4096; 150 connections are held open for 3 s.
set -euo pipefail
NVTCP=$1
# Sanitizer runtimes need descriptors of their own: UBSan's vptr check opens a pipe to see
# whether a vtable is readable, and reports a false "invalid vptr" when it cannot. Out of
# descriptors is this test's whole point, so it runs on plain builds only.
# (ldd's output is taken whole first: under pipefail, grep -q closing the pipe early would
# turn a match into a failed pipeline.)
libs=$(ldd "$NVTCP" 2>/dev/null || true)
if grep -qE 'lib(asan|ubsan|tsan)' <<<"$libs"; then
  echo "SKIP: a sanitizer build cannot run out of file descriptors cleanly"
  exit 77
fi
. "$(dirname "$0")/lib/target.sh" emfile
target_exit_signal=KILL

(ulimit -n 64 && exec "$NVTCP" target --ram 1M -l 127.0.0.1:0 --discovery-port 0 --nqn nqn.2026-11.io.nvtcp:emfile \
  --ready-file "$dir/ready") >"$dir/target.log" 2>&1 &
target_pid=$!
wait_ready "$dir/ready" "the target"
port=$(cat "$dir/ready")
grep -q "max_connections 4096 cannot be met: the open files limit is 64" "$dir/target.log" ||
  fail "no start-up warning that max_connections is beyond the open files limit"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$target_pid/stat"; }
before=$(cpu_ticks)
python3 - "$port" <<'PY'
import socket, sys, time
port = int(sys.argv[1])
held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(150)]
time.sleep(3)
for s in held:
    s.close()
PY
after=$(cpu_ticks)
tick=$(getconf CLK_TCK)
reports=$(grep -c "accept on 127.0.0.1:$port: Too many open files" "$dir/target.log" || true)
echo "target at its descriptor limit for 3 s: $reports accept report(s), $(( (after - before) * 1000 / tick )) ms of CPU"
[ "$reports" -ge 1 ] || fail "the accept failures were not reported"
# One report a second at most (3 s held, plus the edges): a retry loop logs thousands.
[ "$reports" -le 6 ] || fail "$reports accept reports in about 3 s: the failed accept is retried without backing off"

# The crowd has gone: a healthy host is served again (the back-off is at most 1 s).
ok=0
for _ in $(seq 30); do
  if "$NVTCP" discover -a 127.0.0.1 -s "$port" >"$dir/discover.out" 2>&1; then ok=1; break; fi
  sleep 0.2
done
[ "$ok" = 1 ] || { cat "$dir/discover.out"; fail "no discovery after the connections closed"; }
grep -q "nqn.2026-11.io.nvtcp:emfile" "$dir/discover.out" || fail "the discovery log does not list the subsystem"
kill -INT "$target_pid"
wait "$target_pid" || fail "the target exited with $?"
target_pid=
echo "PASS"

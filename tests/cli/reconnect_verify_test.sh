#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Data integrity across target crashes: `nvtcp perf --verify` writes tagged blocks to a file
# namespace and reads them back while the target process is killed with SIGKILL and
# started again, twice in the write half and once in the read half. The host reconnects
# by itself (--ctrl-loss-tmo); every acknowledged write must read back intact, and with
# reconnect on no I/O may fail at all.
set -euo pipefail
NVTCP=$1
dir=$(mktemp -d /tmp/nvtcp-reconnect-cli.XXXXXX)
target_pid=
perf_pid=
cleanup() {
  [ -n "$perf_pid" ] && kill "$perf_pid" 2>/dev/null || true
  [ -n "$target_pid" ] && kill -9 "$target_pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
NQN=nqn.2026-11.io.nvtcp:reconnect
truncate -s 64M "$dir/ns.img"

start_target() {  # $1: port (0 = any)
  rm -f "$dir/ready"
  "$NVTCP" target -l "127.0.0.1:$1" --discovery-port 0 --nqn "$NQN" --file "$dir/ns.img" \
    --ready-file "$dir/ready" >>"$dir/target.log" 2>&1 &
  target_pid=$!
  for _ in $(seq 200); do [ -s "$dir/ready" ] && break; sleep 0.05; done
  [ -s "$dir/ready" ] || { echo "target did not start"; cat "$dir/target.log"; exit 1; }
}

start_target 0
port=$(cat "$dir/ready")
# 14 s: the three kills and restarts below take 6.9 s by their sleeps, and each restart waits
# for the target to start, which took over a second under ASan on a loaded machine: with 8 s
# the last restart came after perf had ended (2 reconnects seen, CI run, ASan pass).
"$NVTCP" perf -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN ns:1" --verify -t 14 -q 16 -o 4K \
  --ctrl-loss-tmo 30 --reconnect-delay 0.1 --io-timeout 5 --json >"$dir/perf.json" 2>"$dir/perf.log" &
perf_pid=$!
# Crashes at about 1.2 s and 3.2 s (write half: the first 4 s) and 6.2 s (read-back half).
for pause in 1.2 1.5 2.5; do
  sleep "$pause"
  kill -9 "$target_pid"
  wait "$target_pid" 2>/dev/null || true
  sleep 0.3
  start_target "$port"
done
wait "$perf_pid"
perf_pid=
cat "$dir/perf.json"
/usr/bin/python3 - "$dir/perf.json" "$dir/perf.log" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
log = open(sys.argv[2]).read()
reconnects = log.count("reconnected as controller")
assert r["verify_failures"] == 0, r
assert r["errors"] == 0, r
assert r["verify_skipped"] == 0, r
assert r["iops"] > 0, r
assert reconnects >= 3, f"only {reconnects} controller reconnects in the log"
print(f"verify across 3 target crashes: {r['verify_failures']} mismatches, {r['errors']} errors, "
      f"{reconnects} reconnects, {r['iops']:.0f} IOPS")
PY

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `nvtcp perf` over two paths to one namespace (-r given twice): a target serving a RAM
# namespace on two listeners with ANA reporting, changed through `nvtcp rpc` while perf --verify
# runs: listener A's group made inaccessible and optimized again, then A taken away and given
# back, all in the write half. No I/O may fail and every block must read back;
# both paths carry I/O; the path comes back by itself; SPDK's rpc.py is not needed.
set -euo pipefail
NVTCP=$1
. "$(dirname "$0")/lib/target.sh" multipath-cli
perf_pid=
exit_kills=(perf_pid "${exit_kills[@]}")
fail() { echo "FAIL: $*"; echo "--- target log"; tail -30 "$dir/target.log"; echo "--- perf log"; tail -30 "$dir/perf.log" 2>/dev/null; exit 1; }
NQN=nqn.2026-12.io.nvtcp:multipath
SOCK=$dir/rpc.sock
# Two free ports: bound by the target (port 0 twice would give one port to the first only).
read -r pa pb < <(free_ports 2)
start_target -l "127.0.0.1:$pa" -l "127.0.0.1:$pb" --discovery-port 0 --nqn "$NQN" --ram 64M --ana-reporting \
  --rpc-socket "$SOCK"
[ -S "$SOCK" ] || fail "the target is ready without its RPC socket"
rpc() { "$NVTCP" rpc -s "$SOCK" "$@" >/dev/null; }
ana() { rpc nvmf_subsystem_listener_set_ana_state --nqn "$NQN" --listen-address.trtype tcp \
          --listen-address.traddr 127.0.0.1 --listen-address.trsvcid "$pa" --ana-state "$1"; }
listener() { rpc "nvmf_subsystem_${1}_listener" --nqn "$NQN" --listen-address.trtype tcp \
               --listen-address.traddr 127.0.0.1 --listen-address.trsvcid "$pa"; }

T="trtype:tcp traddr:127.0.0.1 subnqn:$NQN ns:1"
# 14 s: the changes below take 5.5 s by their sleeps, but each `nvtcp rpc` is a process of its
# own, and under ASan on a loaded machine one took 1.3 s to start: with 8 s the listener was
# taken away after perf had ended, and never came back within it.
"$NVTCP" perf -r "$T trsvcid:$pa" -r "$T trsvcid:$pb" --verify -t 14 -q 16 -o 4K -w randwrite \
  --reconnect-delay 0.2 --io-timeout 5 --json >"$dir/perf.json" 2>"$dir/perf.log" &
perf_pid=$!
# The write half is the first 7 s, the read-back half the next 7.
sleep 1.2; ana inaccessible || fail "set_ana_state inaccessible"
sleep 1.0; ana optimized || fail "set_ana_state optimized"
sleep 2.3; listener remove || fail "remove_listener"
sleep 1.0; listener add || fail "add_listener"
wait "$perf_pid" || fail "perf exited $?"
perf_pid=
cat "$dir/perf.json"
grep -q "group 1: optimized -> inaccessible" "$dir/target.log" || fail "the ANA change was not made"
grep -q "namespace 1 ANA state optimized -> inaccessible" "$dir/perf.log" || fail "the host did not read the new ANA state"
grep -q "reconnected as controller" "$dir/perf.log" || fail "the path taken away did not come back"
python3 - "$dir/perf.json" "$pa" "$pb" <<'PY' || fail "perf's figures"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["errors"] == 0, r
assert r["verify_failures"] == 0 and r["verify_skipped"] == 0, r
paths = {p["trsvcid"]: p["commands"] for p in r["paths"]}
a, b = paths[int(sys.argv[2])], paths[int(sys.argv[3])]
assert a > 0 and b > 0, paths
assert b > a, f"path B, up all the time, should carry more than A: {paths}"
print(f"two paths under ANA changes and a cut listener: 0 errors, 0 mismatches, commands {paths}, "
      f"{r['failovers']} failovers, {r['iops']:.0f} IOPS")
PY

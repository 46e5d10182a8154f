#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# nvtcp bench driving several initiator hosts through fio's client/server mode, on one
# machine: network namespaces stand for the machines.
#
#   ns T: nvtcp target on 10.213.0.1 (a bridge), nothing on loopback
#   ns A: fio --server and an nvtcp engine, 10.213.0.2 on a veth to T's bridge
#   ns B: the same, 10.213.0.3
#
# The bench runs here, in the root namespace, which gets no address: it reaches the fio
# servers through Unix sockets and never the target. Checked: every point has figures from
# both hosts, the total is their sum, and the bytes crossed both veth pairs.
set -euo pipefail
NVTCP=$1
so="$(dirname "$NVTCP")/libnvtcp_fio.so"
if [ "$(id -u)" != 0 ]; then echo "SKIP: network namespaces need root"; exit 77; fi
if ! command -v fio >/dev/null || ! command -v ip >/dev/null || [ ! -f "$so" ]; then
  echo "SKIP: needs fio, iproute2 and $so"; exit 77
fi
libs=$(ldd "$so" 2>/dev/null || true)
if grep -qE 'lib(asan|tsan|ubsan)' <<<"$libs"; then
  echo "SKIP: fio cannot load a sanitizer build of the ioengine"; exit 77
fi

NQN=nqn.2026-11.io.nvtcp:multihost
T=nvtcp-mh$$-t A=nvtcp-mh$$-a B=nvtcp-mh$$-b
dir=$(mktemp -d /tmp/nvtcp-multihost.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for f in "$dir"/fio-*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  sleep 0.3
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for ns in $T $A $B; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$dir"/*.log; do echo "--- $f (last 15 lines)"; tail -15 "$f"; done
  exit 1
}
wait_for() {  # FILE WHAT
  for _ in $(seq 300); do [ -e "$1" ] && [ -s "$1" -o -S "$1" ] && return 0; sleep 0.05; done
  fail "$2 did not start"
}

if ! ip netns add "$T" 2>/dev/null; then echo "SKIP: cannot create network namespaces here"; exit 77; fi
ip netns add "$A"
ip netns add "$B"
for ns in $T $A $B; do ip -n "$ns" link set lo up; done
ip -n "$T" link add br0 type bridge
ip -n "$T" addr add 10.213.0.1/24 dev br0
ip -n "$T" link set br0 up
n=2
for h in A B; do
  ns=${!h}
  # Both ends are made inside the namespaces: the root namespace never holds them.
  ip -n "$T" link add "v$h" type veth peer name eth0 netns "$ns"
  ip -n "$T" link set "v$h" master br0 up
  ip -n "$ns" addr add "10.213.0.$n/24" dev eth0
  ip -n "$ns" link set eth0 up
  n=$((n + 1))
done

ip netns exec "$T" taskset -c 0 "$NVTCP" target --null 1T --nqn "$NQN" --listen 10.213.0.1:4420 \
  --discovery-port 0 --ready-file "$dir/target.ready" >"$dir/target.log" 2>&1 &
pids+=($!)
wait_for "$dir/target.ready" "the target"
trid="trtype:tcp traddr:10.213.0.1 trsvcid:4420 subnqn:$NQN"

for h in a b; do
  ns=$A; [ $h = b ] && ns=$B
  ip netns exec "$ns" fio --server="sock:$dir/fio-$h.sock" --daemonize="$dir/fio-$h.pid" >"$dir/fio-$h.log" 2>&1
  ip netns exec "$ns" "$NVTCP" engine --controller "$trid" --socket "$dir/engine-$h.sock" --cpus 1 \
    --ready-file "$dir/engine-$h.ready" >"$dir/engine-$h.log" 2>&1 &
  pids+=($!)
done
for h in a b; do
  wait_for "$dir/fio-$h.sock" "fio --server in host $h"
  wait_for "$dir/engine-$h.ready" "the engine in host $h"
done
# The root namespace cannot reach the target: only the hosts can.
if ip netns identify $$ | grep -q .; then fail "the test should run in the root namespace"; fi

cat >"$dir/hosts" <<EOF
# fio servers of the two initiator hosts, and their offload engines
sock:$dir/fio-a.sock engine=$dir/engine-a.sock
sock:$dir/fio-b.sock engine=$dir/engine-b.sock   # same target address as --target
EOF
"$NVTCP" bench --target "$trid ns:1" --hosts "$dir/hosts" --quick --points 2 --runtime 1 --repeat 2 \
  --initiators perf,fio,engine --fio-engine "$(realpath "$so")" -O "$dir/out" >"$dir/bench.log" 2>&1 ||
  fail "nvtcp bench failed"
cat "$dir/bench.log"
grep -q "skipping perf" "$dir/bench.log" || fail "perf cannot run on remote hosts and should be skipped"
grep -q "Per host" "$dir/bench.log" || fail "no per-host table"

/usr/bin/python3 - "$dir/out/bench.json" "$dir" <<'PY' || fail "bench.json"
import json, sys
doc = json.load(open(sys.argv[1]))
d = sys.argv[2]
servers = [f"sock:{d}/fio-a.sock", f"sock:{d}/fio-b.sock"]
assert doc["hosts"] == servers, doc["hosts"]
pts = doc["points"]
assert {p["initiator"] for p in pts} == {"fio", "engine"}, pts
assert len(pts) == 4, pts
for p in pts:
    assert "error" not in p, p
    hs = p["hosts"]
    assert [h["server"] for h in hs] == servers, hs
    for h in hs:
        assert h["iops"] > 0 and h["lat_avg_us"] > 0 and h["init_cpu_s_per_mio"] > 0, h
        assert h["runs"] == 2 and h["iops_min"] <= h["iops"] <= h["iops_max"], h
    for run in range(2):  # each run's total is the sum of its hosts
        total = p["iops_runs"][run]
        parts = sum(h["iops_runs"][run] for h in hs)
        assert abs(total - parts) <= 1e-6 * total, (total, parts)
    assert p["target_cpu_s_per_mio"] is None
print("bench.json: ok")
PY
# The I/O went over both veth pairs (reads: the data leaves the target towards each host).
for h in A B; do
  tx=$(ip -n "$T" -s -j link show "v$h" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])')
  [ "$tx" -gt $((64 * 1024 * 1024)) ] || fail "only $tx bytes went to host $h"
  echo "veth to host $h: $tx bytes"
done
ls "$dir"/out/jobs/*-host1.fio "$dir"/out/jobs/*-host2.fio >/dev/null || fail "no per-host job files"
echo "PASS"

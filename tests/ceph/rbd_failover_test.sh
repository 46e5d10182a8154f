#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ceph.rbd_failover: two nvtcp gateways in front of one RBD image, built over JSON-RPC from an
# empty start as an orchestrator builds them (ceph-nvmeof drives SPDK this way), against a real
# one-node cluster started here (tests/ceph/cluster.sh; no mock of librbd anywhere).
#
#   rbd_failover_test.sh path/to/nvtcp [CHECK [path/to/libnvtcp_fio.so]]
#
#   build      each gateway: bdev_rbd_register_cluster, bdev_rbd_create of that cluster (three
#              images), nvmf_create_subsystem with ANA reporting and a controller ID range of its
#              own, the namespaces in ANA group 1, a listener; group 1 optimized on A,
#              non-optimized on B; A's save_config kept
#   failover   three applications write and verify, each on its own namespace: nvtcp perf over
#              both paths (ns 1), fio with the nvtcp ioengine and paths= (ns 2, with the fio
#              engine) and nvtcp perf through the offload engine, which holds both paths (ns 3).
#              A is SIGKILLed in their write half: each goes on through B (made optimized, as an
#              orchestrator does) with no error, once librbd in B has broken the exclusive lock A
#              died holding
#   failback   A restarts from its saved configuration, B goes back to non-optimized: the hosts
#              return to A, and every acknowledged write reads back (perf's and fio's verify)
#   both       group 1 optimized on both: writes through both gateways at once (librbd's
#              exclusive lock moves between them) and every block reads back
#   fenced     the cluster blocklists A's rados client mid-run (as a lock broken by another
#              client does): A fails commands with a path error, the host goes on through B, and A
#              reconnects as a new client by itself and serves again
#   atomic     (with CHECK, rbd_compare_write_check) the backend's Compare and Write from two
#              rados clients at once: a counter incremented from both loses nothing
#
# Needs root and Debian's ceph-mon, ceph-osd and ceph-common (make deps); exits 77 without them.
set -euo pipefail
NVTCP=$1
CHECK=${2:-}
FIO_ENGINE=${3:-}
here=$(dirname "$(readlink -f "$0")")
# shellcheck source=cluster.sh
source "$here/cluster.sh"
ceph_skip_unless_available

dir=$(mktemp -d /tmp/nvtcp-rbd-failover.XXXXXX)
cluster=$dir/ceph
pid_a= pid_b= perf_pid= eperf_pid= fio_pid= engine_pid=
# The gateways first (KILL: a target whose cluster is gone can wait on it), then the cluster.
cleanup() {
  local p
  # "|| true": under set -e a failed kill (a process already gone) would end the cleanup there,
  # leaving the rest (the cluster among them) running.
  for p in "$perf_pid" "$eperf_pid" "$fio_pid" "$engine_pid" "$pid_a" "$pid_b"; do
    [ -n "$p" ] && kill -KILL "$p" 2>/dev/null || true
  done
  ceph_cluster_stop "$cluster" >/dev/null 2>&1 || true
  [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  local f
  for f in a.log b.log perf.log engine.log eperf.log fio.err; do
    [ -f "$dir/$f" ] && { echo "--- $f (last 15 lines)" >&2; tail -15 "$dir/$f" >&2; }
  done
  exit 1
}
step() { echo "== $*"; }

step "a one-node cluster (memstore OSD) and three 256 MiB images"
ceph_cluster_start "$cluster" rbd || fail "the Ceph cluster did not start"
for img in shared shared_fio shared_engine; do
  rbd_cli "$cluster" create --size 256 "rbd/$img" || fail "rbd create rbd/$img"
done
rbd_cli "$cluster" info rbd/shared | grep -q exclusive-lock || fail "the image has no exclusive-lock feature (Ceph's default)"
mon_host=$(sed -n 's/^mon host = //p' "$cluster/ceph.conf")
NQN=nqn.2016-06.io.spdk:cnode1
read -r pa pb < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')

GW_DIR=$dir GW_NQN=$NQN GW_MON_HOST=$mon_host
gw_fail() { fail "$@"; }
# shellcheck source=gateways.sh
source "$here/gateways.sh"
trid() { echo "trtype:tcp traddr:127.0.0.1 trsvcid:$1 subnqn:$NQN"; }
cntlid() { "$NVTCP" identify -r "$(trid "$1")" | sed -n 's/^cntlid *: *//p'; }

step "two gateways built over RPC from an empty start"
gw_start a
gw_start b
gw_build a "$pa" 1 1000 shared shared_fio shared_engine
gw_build b "$pb" 1001 2000 shared shared_fio shared_engine
gw_ana b "$pb" non_optimized
"$NVTCP" rpc -s "$dir/a.sock" save_config >"$dir/a.json" || fail "save_config on A"
grep -q bdev_rbd_register_cluster "$dir/a.json" || fail "save_config left out the registered cluster"
"$NVTCP" rpc -s "$dir/b.sock" bdev_rbd_get_clusters_info --name cluster_a | grep -q '"mon_host"' ||
  fail "bdev_rbd_get_clusters_info does not show the cluster's options"
ca=$(cntlid "$pa") cb=$(cntlid "$pb")
[ -n "$ca" ] && [ -n "$cb" ] || fail "identify through both gateways"
((ca >= 1 && ca <= 1000 && cb >= 1001 && cb <= 2000)) || fail "controller IDs $ca (A) and $cb (B) are not from their ranges"
echo "controller IDs: $((ca)) through A (1-1000), $((cb)) through B (1001-2000)"

# The other two applications: fio with the nvtcp ioengine over both paths (paths=), and an
# application of the offload engine, which holds both paths itself.
fio_cmd=() preload=
if [ -n "$FIO_ENGINE" ] && [ -f "$FIO_ENGINE" ] && command -v fio >/dev/null; then
  preload=$(ldd "$FIO_ENGINE" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ {print $3}' | paste -sd: -)
  fio_cmd=(env "LD_PRELOAD=$preload" "ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}" fio --name=failover
    --ioengine="external:$FIO_ENGINE" --thread=1
    --filename="trtype=tcp adrfam=IPv4 traddr=127.0.0.1 trsvcid=$pa subnqn=${NQN//:/\\:} ns=2"
    --paths="127.0.0.1:$pb" --reconnect_delay=1 --io_timeout=20
    --rw=randwrite --bs=4k --size=16M --iodepth=8 --rate_iops=250 --verify=crc32c --verify_fatal=1
    --output-format=json --output="$dir/fio.json")
fi
rm -f "$dir/engine.ready"
"$NVTCP" engine --controller "$(trid "$pa")" --controller "$(trid "$pb")" --socket "$dir/engine.sock" \
  --reconnect-delay 0.2 --idle-spin-us 0 --ready-file "$dir/engine.ready" >"$dir/engine.log" 2>&1 &
engine_pid=$!
for _ in $(seq 200); do [ -s "$dir/engine.ready" ] && break; sleep 0.05; done
[ -s "$dir/engine.ready" ] || fail "the offload engine did not start"
grep -q "over 2 paths" "$dir/engine.log" || fail "the offload engine does not hold both gateways as paths"

step "failover: A SIGKILLed in the applications' write half; failback: A restarted from its save_config"
# 24 s: writes for 12, then every block written is read back and compared (fio: 16 s of writes
# at 250 IO/s, then its verify). A dies holding the images' exclusive locks, so B's writes wait
# until the cluster drops A's watches (the test cluster's osd_client_watch_timeout, 5 s) and
# librbd in B breaks the locks; B then serves alone for a while before A comes back at 8.5 s.
# All of it falls in the write halves.
"$NVTCP" perf -r "$(trid "$pa") ns:1" -r "$(trid "$pb") ns:1" --verify -t 24 -q 16 -o 4K -w randwrite \
  --reconnect-delay 0.2 --io-timeout 20 --json >"$dir/perf.json" 2>"$dir/perf.log" &
perf_pid=$!
"$NVTCP" perf -r "trtype:engine traddr:$dir/engine.sock subnqn:$NQN ns:3" --verify -t 24 -q 16 -o 4K -w randwrite \
  --io-timeout 20 --json >"$dir/eperf.json" 2>"$dir/eperf.log" &
eperf_pid=$!
if [ ${#fio_cmd[@]} -gt 0 ]; then
  (cd "$dir" && exec "${fio_cmd[@]}" 2>"$dir/fio.err") &
  fio_pid=$!
fi
sleep 1.5
kill -KILL "$pid_a"
wait "$pid_a" 2>/dev/null || true
pid_a=
gw_ana b "$pb" optimized  # the orchestrator moves the group to the gateway that is left
sleep 7
gw_start a --config "$dir/a.json"
gw_ana b "$pb" non_optimized  # and back once A serves again
wait "$perf_pid" || fail "perf exited with an error"
perf_pid=
wait "$eperf_pid" || fail "perf through the offload engine exited with an error"
eperf_pid=
if [ -n "$fio_pid" ]; then
  wait "$fio_pid" || fail "fio over both paths exited with an error: $(tail -3 "$dir/fio.err")"
  fio_pid=
fi
python3 - "$dir/perf.json" "$pa" "$pb" <<'PY' || fail "perf's figures"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["errors"] == 0, r
assert r["verify_failures"] == 0 and r["verify_skipped"] == 0, r
paths = {p["trsvcid"]: p["commands"] for p in r["paths"]}
a, b = paths[int(sys.argv[2])], paths[int(sys.argv[3])]
# B carried more than the 16 commands that failed over from A at the kill: it served alone.
assert a > 0 and b > 64, paths
print(f"perf: A killed and back: 0 errors, 0 mismatches, commands per path {paths}, {r['failovers']} failovers, "
      f"the longest command took {r['lat_max_us'] / 1e6:.1f} s")
PY
python3 - "$dir/eperf.json" <<'PY' || fail "the offload engine's application's figures"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["errors"] == 0 and r["verify_failures"] == 0 and r["verify_skipped"] == 0 and r["ios"] > 0, r
print(f"offload engine: A killed and back: {r['ios']} I/Os, 0 errors, 0 mismatches, "
      f"the longest command took {r['lat_max_us'] / 1e6:.1f} s")
PY
if [ ${#fio_cmd[@]} -gt 0 ]; then
  python3 - "$dir/fio.json" <<'PY' || fail "fio's figures"
import json, sys
text = open(sys.argv[1]).read()
r = json.loads(text[text.index("{"):])  # fio may print notes before its JSON
j = r["jobs"][0]
assert j["error"] == 0, j["error"]
w, rd = j["write"]["total_ios"], j["read"]["total_ios"]
assert w == 4096 and rd == 4096, (w, rd)  # every block written, then every block read and verified
print(f"fio (paths=): A killed and back: {w} writes, {rd} verified reads, no error")
PY
else
  echo "(fio or the fio engine is not here: fio's part is left out)"
fi
grep -q "reconnected as controller" "$dir/perf.log" || fail "the host did not reconnect to gateway A"
grep -q "reconnected" "$dir/engine.log" || fail "the offload engine did not reconnect to gateway A"
kill -TERM "$engine_pid"
wait "$engine_pid" || fail "the offload engine did not exit cleanly"
engine_pid=
# The restarted A's own counts, per namespace: each application's I/O came back to it (failback),
# not only to B.
"$NVTCP" rpc -s "$dir/a.sock" bdev_get_iostat >"$dir/a-iostat.json" || fail "bdev_get_iostat on the restarted A"
want_apps="Ceph0 Ceph2${fio_cmd:+ Ceph1}"
python3 - "$dir/a-iostat.json" $want_apps <<'PY' || fail "I/O did not come back to gateway A after its restart"
import json, sys
r = json.load(open(sys.argv[1]))
ops = {b["name"]: b["num_read_ops"] + b["num_write_ops"] for b in r["bdevs"]}
assert all(ops.get(n, 0) > 0 for n in sys.argv[2:]), ops
print(f"failback: the restarted gateway A served I/O commands per bdev {ops}")
PY
kill -TERM "$pid_a"
wait "$pid_a" || fail "gateway A (restarted) did not exit cleanly"
pid_a=

step "both gateways optimized: writes through both at once, every block read back"
watchers() { rbd_cli "$cluster" status rbd/shared | sed -n 's/.*watcher=\([^ ]*\).*/\1/p' | sort; }
watchers >"$dir/watchers-b"
gw_start a --config "$dir/a.json"
gw_ana b "$pb" optimized
"$NVTCP" perf -r "$(trid "$pa") ns:1" -r "$(trid "$pb") ns:1" --verify -t 4 -q 16 -o 4K -w randwrite \
  --io-timeout 20 --json >"$dir/perf-both.json" 2>"$dir/perf.log" || fail "perf through both gateways"
python3 - "$dir/perf-both.json" <<'PY' || fail "perf's figures through both gateways"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["errors"] == 0 and r["verify_failures"] == 0 and r["verify_skipped"] == 0, r
paths = {p["trsvcid"]: p["commands"] for p in r["paths"]}
assert all(n > 0 for n in paths.values()) and len(paths) == 2, paths
print(f"both active: 0 errors, 0 mismatches, commands per path {paths}, {r['iops']:.0f} IOPS")
PY

step "fenced: the cluster blocklists gateway A's client mid-run; A reconnects as a new client and serves again"
# What another gateway's librbd does when it breaks a lock A holds, or an administrator does:
# from then on every operation of A's client fails. A answers with a path error (the host goes
# on through B) and reconnects as a new client by itself.
addr_a=$(watchers | comm -13 "$dir/watchers-b" -)
[ -n "$addr_a" ] && [ "$(echo "$addr_a" | wc -l)" = 1 ] || fail "gateway A's client among the image's watchers ($addr_a)"
"$NVTCP" perf -r "$(trid "$pa") ns:1" -r "$(trid "$pb") ns:1" --verify -t 8 -q 16 -o 4K -w randwrite \
  --io-timeout 20 --json >"$dir/perf-fenced.json" 2>"$dir/perf.log" &
perf_pid=$!
sleep 1.5
ceph_cluster "$cluster" osd blocklist add "$addr_a" >/dev/null 2>&1 || fail "ceph osd blocklist add $addr_a"
wait "$perf_pid" || fail "perf with gateway A fenced"
perf_pid=
python3 - "$dir/perf-fenced.json" <<'PY' || fail "perf's figures with gateway A fenced"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["errors"] == 0 and r["verify_failures"] == 0, r
print(f"A fenced mid-run: 0 errors, 0 mismatches, {r['failovers']} failovers")
PY
grep -q "fenced this gateway's client" "$dir/a.log" || fail "gateway A did not see that it was fenced"
for _ in $(seq 100); do grep -q "reconnected to the cluster as a new client" "$dir/a.log" && break; sleep 0.1; done
grep -q "reconnected to the cluster as a new client" "$dir/a.log" || fail "gateway A did not reconnect"
watchers | grep -qxF "$addr_a" && fail "A's fenced client still watches the image"
"$NVTCP" perf -r "$(trid "$pa") ns:1" --verify -t 2 -q 16 -o 4K -w randwrite --json >"$dir/perf-a.json" \
  2>"$dir/perf.log" || fail "perf through gateway A alone after it reconnected"
python3 - "$dir/perf-a.json" <<'PY' || fail "perf's figures through A after it reconnected"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["errors"] == 0 and r["verify_failures"] == 0 and r["ios"] > 0, r
print(f"A alone after reconnecting: {r['ios']} I/Os, 0 errors, 0 mismatches")
PY
kill -TERM "$pid_a" "$pid_b"
wait "$pid_a" || fail "gateway A did not exit cleanly"
wait "$pid_b" || fail "gateway B did not exit cleanly"
pid_a= pid_b=
if [ -n "$CHECK" ]; then
  step "compare-and-write from two rados clients at once (rbd_aio_compare_and_write)"
  rbd_cli "$cluster" create --size 64 rbd/caw || fail "rbd create rbd/caw"
  "$CHECK" "$cluster/ceph.conf" rbd caw 2>"$dir/check.err" || { cat "$dir/check.err"; fail "compare-and-write on the cluster"; }
fi
echo "PASS: two RBD gateways built over RPC from an empty start, distinct controller IDs, failover to B with A SIGKILLed (perf, fio with paths= and the offload engine), failback to A restarted from save_config, both active: no error, every write read back; A fenced by the cluster, reconnected and served again${CHECK:+; compare-and-write atomic across two clients}"

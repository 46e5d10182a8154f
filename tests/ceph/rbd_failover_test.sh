#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ceph.rbd_failover: two nvtcp gateways in front of one RBD image, built over JSON-RPC from an
# empty start as an orchestrator builds them (ceph-nvmeof drives SPDK this way), against a real
# one-node cluster started here (tests/ceph/cluster.sh; no mock of librbd anywhere).
#
#   rbd_failover_test.sh path/to/nvtcp [CHECK]
#
#   build      each gateway: bdev_rbd_register_cluster, bdev_rbd_create of that cluster,
#              nvmf_create_subsystem with ANA reporting and a
#              controller ID range of its own, the namespace in ANA group 1, a listener; group 1
#              optimized on A, non-optimized on B; A's save_config kept
#   failover   nvtcp perf --verify over both paths; A is SIGKILLed in the write half: the host
#              goes on through B (made optimized, as an orchestrator does) with no error, once
#              librbd in B has broken the exclusive lock A died holding
#   failback   A restarts from its saved configuration, B goes back to non-optimized: the host
#              returns to A, and every acknowledged write reads back (perf's verify)
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
here=$(dirname "$(readlink -f "$0")")
# shellcheck source=cluster.sh
source "$here/cluster.sh"
ceph_skip_unless_available

dir=$(mktemp -d /tmp/nvtcp-rbd-failover.XXXXXX)
cluster=$dir/ceph
pid_a= pid_b= perf_pid=
# The gateways first (KILL: a target whose cluster is gone can wait on it), then the cluster.
cleanup() {
  local p
  for p in "$perf_pid" "$pid_a" "$pid_b"; do [ -n "$p" ] && kill -KILL "$p" 2>/dev/null; done
  ceph_cluster_stop "$cluster" >/dev/null 2>&1 || true
  [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  local f
  for f in a.log b.log perf.log; do
    [ -f "$dir/$f" ] && { echo "--- $f (last 15 lines)" >&2; tail -15 "$dir/$f" >&2; }
  done
  exit 1
}
step() { echo "== $*"; }

step "a one-node cluster (memstore OSD) and a 256 MiB image"
ceph_cluster_start "$cluster" rbd || fail "the Ceph cluster did not start"
rbd_cli "$cluster" create --size 256 rbd/shared || fail "rbd create"
rbd_cli "$cluster" info rbd/shared | grep -q exclusive-lock || fail "the image has no exclusive-lock feature (Ceph's default)"
mon_host=$(sed -n 's/^mon host = //p' "$cluster/ceph.conf")
NQN=nqn.2016-06.io.spdk:cnode1
read -r pa pb < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')

# start_gateway NAME [ARGS...]: an nvtcp target with its RPC socket $dir/NAME.sock; sets pid_NAME.
start_gateway() {
  local name=$1
  shift
  rm -f "$dir/$name.ready"
  "$NVTCP" target --rpc-socket "$dir/$name.sock" --ready-file "$dir/$name.ready" "$@" >>"$dir/$name.log" 2>&1 &
  printf -v "pid_$name" %s $!
  for _ in $(seq 400); do [ -s "$dir/$name.ready" ] && return 0; sleep 0.05; done
  fail "gateway $name did not start"
}
rpc() { local name=$1; shift; "$NVTCP" rpc -s "$dir/$name.sock" "$@" >/dev/null || fail "gateway $name: rpc $*"; }
ana() {  # ana GATEWAY PORT STATE: group 1's state through that gateway's listener
  rpc "$1" nvmf_subsystem_listener_set_ana_state --nqn "$NQN" --listen-address.trtype tcp \
    --listen-address.traddr 127.0.0.1 --listen-address.trsvcid "$2" --ana-state "$3" --anagrpid 1
}
# build NAME PORT MIN MAX: the gateway as ceph-nvmeof builds one, on an empty start.
build() {
  local name=$1 p=$2
  rpc "$name" bdev_rbd_register_cluster "{\"name\": \"cluster_a\",
    \"config_param\": {\"mon_host\": \"$mon_host\", \"auth_client_required\": \"none\",
      \"objecter_tick_interval\": \"1\"}}"
  rpc "$name" bdev_rbd_create --name Ceph0 --pool-name rbd --rbd-name shared --block-size 4096 --cluster-name cluster_a
  rpc "$name" nvmf_create_subsystem --nqn "$NQN" --serial-number SPDK00000000000001 --allow-any-host true \
    --ana-reporting true --min-cntlid "$3" --max-cntlid "$4"
  rpc "$name" nvmf_subsystem_add_ns --nqn "$NQN" --namespace.bdev-name Ceph0 --namespace.nsid 1 --namespace.anagrpid 1
  rpc "$name" nvmf_subsystem_add_listener --nqn "$NQN" --listen-address.trtype tcp --listen-address.traddr 127.0.0.1 \
    --listen-address.trsvcid "$p"
}
trid() { echo "trtype:tcp traddr:127.0.0.1 trsvcid:$1 subnqn:$NQN"; }
cntlid() { "$NVTCP" identify -r "$(trid "$1")" | sed -n 's/^cntlid *: *//p'; }

step "two gateways built over RPC from an empty start"
start_gateway a
start_gateway b
build a "$pa" 1 1000
build b "$pb" 1001 2000
ana b "$pb" non_optimized
"$NVTCP" rpc -s "$dir/a.sock" save_config >"$dir/a.json" || fail "save_config on A"
grep -q bdev_rbd_register_cluster "$dir/a.json" || fail "save_config left out the registered cluster"
"$NVTCP" rpc -s "$dir/b.sock" bdev_rbd_get_clusters_info --name cluster_a | grep -q '"mon_host"' ||
  fail "bdev_rbd_get_clusters_info does not show the cluster's options"
ca=$(cntlid "$pa") cb=$(cntlid "$pb")
[ -n "$ca" ] && [ -n "$cb" ] || fail "identify through both gateways"
((ca >= 1 && ca <= 1000 && cb >= 1001 && cb <= 2000)) || fail "controller IDs $ca (A) and $cb (B) are not from their ranges"
echo "controller IDs: $((ca)) through A (1-1000), $((cb)) through B (1001-2000)"

step "failover: A SIGKILLed in perf --verify's write half; failback: A restarted from its save_config"
# 24 s: writes for 12, then every block written is read back and compared. A dies holding the
# image's exclusive lock, so B's writes wait until the cluster drops A's watch (the test
# cluster's osd_client_watch_timeout, 5 s) and librbd in B breaks the lock; B then serves alone
# for a while before A comes back at 8.5 s. All of it falls in the write half.
"$NVTCP" perf -r "$(trid "$pa") ns:1" -r "$(trid "$pb") ns:1" --verify -t 24 -q 16 -o 4K -w randwrite \
  --reconnect-delay 0.2 --io-timeout 20 --json >"$dir/perf.json" 2>"$dir/perf.log" &
perf_pid=$!
sleep 1.5
kill -KILL "$pid_a"
wait "$pid_a" 2>/dev/null || true
pid_a=
ana b "$pb" optimized  # the orchestrator moves the group to the gateway that is left
sleep 7
start_gateway a --config "$dir/a.json"
ana b "$pb" non_optimized  # and back once A serves again
wait "$perf_pid" || fail "perf exited with an error"
perf_pid=
python3 - "$dir/perf.json" "$pa" "$pb" <<'PY' || fail "perf's figures"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["errors"] == 0, r
assert r["verify_failures"] == 0 and r["verify_skipped"] == 0, r
paths = {p["trsvcid"]: p["commands"] for p in r["paths"]}
a, b = paths[int(sys.argv[2])], paths[int(sys.argv[3])]
# B carried more than the 16 commands that failed over from A at the kill: it served alone.
assert a > 0 and b > 64, paths
print(f"A killed and back: 0 errors, 0 mismatches, commands per path {paths}, {r['failovers']} failovers, "
      f"the longest command took {r['lat_max_us'] / 1e6:.1f} s")
PY
grep -q "reconnected as controller" "$dir/perf.log" || fail "the host did not reconnect to gateway A"
kill -TERM "$pid_a"
wait "$pid_a" || fail "gateway A (restarted) did not exit cleanly"
pid_a=
# The restarted A's own count: I/O came back to it (failback), not only to B.
back=$(sed -n 's/.*target: \([0-9]*\) I\/O commands.*/\1/p' "$dir/a.log" | tail -1)
[ -n "$back" ] && [ "$back" -gt 0 ] || fail "no I/O reached gateway A after its restart"
echo "failback: the restarted gateway A served $back I/O commands"

step "both gateways optimized: writes through both at once, every block read back"
watchers() { rbd_cli "$cluster" status rbd/shared | sed -n 's/.*watcher=\([^ ]*\).*/\1/p' | sort; }
watchers >"$dir/watchers-b"
start_gateway a --config "$dir/a.json"
ana b "$pb" optimized
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
echo "PASS: two RBD gateways built over RPC from an empty start, distinct controller IDs, failover to B with A SIGKILLed, failback to A restarted from save_config, both active: no error, every write read back; A fenced by the cluster, reconnected and served again${CHECK:+; compare-and-write atomic across two clients}"

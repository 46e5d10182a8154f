#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ceph.rbd_gateway: nvtcp serving a Ceph RBD image, against a real one-node cluster started here
# (tests/ceph/cluster.sh; no mock of librbd anywhere).
#
#   rbd_gateway_test.sh path/to/nvtcp [path/to/libnvtcp_fio.so]
#
#   identify   the namespace is the image: its size, and the same identifiers from two gateways;
#              its UUID from the cluster's fsid, the pool's ID and the image's ID (an image made
#              anew under its old name gets another)
#   perf       nvtcp perf --verify, 4 KiB and 128 KiB, reads and writes through librbd
#   bytes      what fio writes through the gateway is what `rbd export` reads from the cluster,
#              at the same offsets
#   outlives   fio writes with crc32c verify headers through gateway A; A is SIGKILLed; gateway B
#              opens the same image and fio verifies every block through it
#   trim/flush fio's trims (Deallocate: rbd_aio_discard) and fsyncs (Flush) succeed
#   resize     `rbd resize` on the cluster reaches the namespace (librbd's header watch);
#              bdev_rbd_resize grows the image from the gateway
#   lost       the OSD stopped past the client's operation timeout: commands end with a path
#              error, none hangs; a RAM namespace of the same gateway is served meanwhile, with
#              1,536 reads waiting on the OSD; the OSD back, the same gateway serves again
#
# Needs root and Debian's ceph-mon, ceph-osd and ceph-common (make deps); exits 77 without them.
set -euo pipefail
NVTCP=$1
ENGINE=${2:-}
here=$(dirname "$(readlink -f "$0")")
# shellcheck source=cluster.sh
source "$here/cluster.sh"
ceph_skip_unless_available

# shellcheck source=../cli/lib/target.sh
. "$here/../cli/lib/target.sh" rbd-gateway
cluster=$dir/ceph
# The gateway goes first (KILL: a target whose cluster is gone can wait on it), then the cluster,
# then the directory that holds both.
trap '[ -n "$target_pid" ] && kill -KILL "$target_pid" 2>/dev/null || true; ceph_cluster_stop "$cluster" >/dev/null 2>&1 || true; cleanup' EXIT
step() { echo "== $*"; }

step "a one-node cluster (memstore OSD) and a 256 MiB image"
ceph_cluster_start "$cluster" rbd || fail "the Ceph cluster did not start"
rbd_cli "$cluster" create --size 256 rbd/disk || fail "rbd create"
NQN=nqn.2026-12.io.nvtcp:rbd
gateway=(--rbd rbd/disk --ceph-conf "$cluster/ceph.conf" --nqn "$NQN" -l 127.0.0.1:0 --discovery-port 0)

# nvtcp perf --verify through librbd, 4 KiB and 128 KiB (random writes, then reads of them).
perf_verify() {
  step "perf --verify through librbd"
  local size
  for size in 4K 128K; do
    "$NVTCP" perf -r "$trid ns:1" -q 16 -o "$size" -w randwrite --verify -t 1 --json >"$dir/perf-$size.json" ||
      fail "perf --verify $size"
    python3 - "$dir/perf-$size.json" "$size" <<'PY' || fail "perf --verify $size saw errors or did nothing"
import json, sys
r = json.load(open(sys.argv[1]))
ios = r.get("ios", r.get("total_ios", 0))
print(f"perf --verify {sys.argv[2]}: {ios} I/Os, {r.get('iops', 0):.0f} IOPS")
sys.exit(0 if ios > 0 and r.get("errors", 0) == 0 else 1)
PY
  done
}

step "gateway A"
start_target "${gateway[@]}"
trid="trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN"
"$NVTCP" identify -r "$trid" >"$dir/identify-a.txt" || fail "identify through gateway A"
grep -qE "268435456|256(\.0)? MiB" "$dir/identify-a.txt" || { cat "$dir/identify-a.txt"; fail "the namespace is not the 256 MiB image"; }
grep -iE "nguid|uuid" "$dir/identify-a.txt" | sort >"$dir/ids-a.txt" || true

if [ -n "$ENGINE" ] && [ -f "$ENGINE" ] && command -v fio >/dev/null; then
  preload=$(ldd "$ENGINE" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ {print $3}' | paste -sd: -)
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
  ftrid() { echo "trtype=tcp adrfam=IPv4 traddr=127.0.0.1 trsvcid=$1 subnqn=${NQN//:/\\:} ns=1"; }
  fio_run() {  # fio_run NAME PORT ARGS...
    local name=$1 p=$2
    shift 2
    (cd "$dir" && env LD_PRELOAD="$preload" fio --name="$name" --ioengine="external:$ENGINE" --thread=1 --filename="$(ftrid "$p")" \
      "$@" --output="$dir/$name.txt" 2>"$dir/$name.err") || { cat "$dir/$name.err" "$dir/$name.txt"; fail "fio $name"; }
  }

  step "the bytes fio writes are the image's bytes"
  fio_run pattern "$port" --rw=write --bs=64k --offset=1M --size=1M --iodepth=4 --buffer_pattern=0x5aa55aa5
  rbd_cli "$cluster" export rbd/disk "$dir/disk.img" >/dev/null 2>&1 || fail "rbd export"
  python3 - "$dir/disk.img" <<'PY' || fail "the image does not hold what was written through the gateway"
import sys
data = open(sys.argv[1], "rb").read()
MiB = 1 << 20
want = bytes.fromhex("5aa55aa5") * (MiB // 4)
assert len(data) == 256 * MiB, len(data)
assert data[MiB:2 * MiB] == want, "1 MiB at 1 MiB differs"
assert data[:MiB] == bytes(MiB), "the first MiB was written to"
assert data[2 * MiB:3 * MiB] == bytes(MiB), "the third MiB was written to"
print("rbd export: 1 MiB at 1 MiB is fio's pattern, around it zeros")
PY

  perf_verify

  step "trim and fsync"
  fio_run trim "$port" --rw=randtrim --bs=64k --offset=64M --size=8M --iodepth=8
  fio_run fsync "$port" --rw=randwrite --bs=4k --offset=96M --size=4M --iodepth=8 --fsync=4

  step "written through A, A killed, verified through B"
  fio_run write_a "$port" --rw=randwrite --bs=16k --offset=128M --size=32M --iodepth=16 --verify=crc32c \
    --do_verify=0 --verify_state_save=0
  target_exit_signal=KILL
  kill -KILL "$target_pid"
  wait "$target_pid" 2>/dev/null || true
  target_pid=
  target_log_append=1
  start_target "${gateway[@]}"
  "$NVTCP" identify -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN" >"$dir/identify-b.txt" ||
    fail "identify through gateway B"
  grep -iE "nguid|uuid" "$dir/identify-b.txt" | sort >"$dir/ids-b.txt" || true
  cmp -s "$dir/ids-a.txt" "$dir/ids-b.txt" || { diff "$dir/ids-a.txt" "$dir/ids-b.txt"; fail "gateway B shows other identifiers for the image"; }
  fio_run verify_b "$port" --rw=randwrite --bs=16k --offset=128M --size=32M --iodepth=16 --verify=crc32c \
    --verify_only=1 --verify_fatal=1 --verify_state_load=0
  echo "fio verified 32 MiB through gateway B that gateway A wrote before it was killed"
else
  echo "(fio or the fio engine is not here: the fio steps are left out)"
  perf_verify
fi
stop_target

step "a gateway built by RPC (bdev_rbd_create, as rpc.py sends it), and its save_config"
rbd_cli "$cluster" create --size 64 rbd/second || fail "rbd create rbd/second"
sock=$dir/rpc.sock
target_log_append=1
start_target "${gateway[@]}" --rpc-socket "$sock"
rpc() { "$NVTCP" rpc -s "$sock" "$@"; }
mon_host=$(sed -n 's/^mon host = //p' "$cluster/ceph.conf")
rpc bdev_rbd_create "{\"pool_name\": \"rbd\", \"rbd_name\": \"second\", \"block_size\": 4096, \"name\": \"Ceph7\",
  \"config\": {\"mon_host\": \"$mon_host\", \"auth_client_required\": \"none\"}}" >"$dir/create.txt" ||
  { cat "$dir/create.txt"; fail "bdev_rbd_create"; }
[ "$(rpc nvmf_subsystem_add_ns --nqn "$NQN" --namespace.bdev-name Ceph7)" = 2 ] || fail "nvmf_subsystem_add_ns of the RBD bdev"
rpc bdev_get_bdevs --name Ceph7 >"$dir/bdev.json" || fail "bdev_get_bdevs"
python3 - "$dir/bdev.json" <<'PY' || fail "bdev_get_bdevs does not describe the RBD bdev"
import json, sys
b = json.load(open(sys.argv[1]))[0]
assert b["product_name"] == "Ceph Rbd Disk", b
assert b["block_size"] == 4096 and b["num_blocks"] == 64 * 256, b
PY
# The bdev's UUID (which its namespace shows as its UUID and NGUID) names the image on this cluster:
# the cluster's fsid, the pool's ID and the image's ID, not the names alone (two clusters may
# each have an rbd/second; an image made anew under the old name is other storage).
image_uuid() {  # POOL IMAGE: the UUID nvtcp gives a bdev of that image of this cluster
  python3 - "$(ceph_cluster "$cluster" fsid)" "$(ceph_cluster "$cluster" osd pool ls detail --format json)" \
    "$(rbd_cli "$cluster" info "$1/$2" --format json)" "$1" <<'PY'
import hashlib, json, sys
fsid, pools, info, pool = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
pool_id = [p["pool_id"] for p in pools if p["pool_name"] == pool][0]
d = bytearray(hashlib.sha256(f"nvtcp rbd\n{fsid}\n{pool_id}\n{info['id']}".encode()).digest()[:16])
d[6] = (d[6] & 0x0F) | 0x40
d[8] = (d[8] & 0x3F) | 0x80
h = d.hex()
print(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
PY
}
bdev_uuid() { rpc bdev_get_bdevs --name "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["uuid"])'; }
want=$(image_uuid rbd second) || fail "the image's fsid, pool ID and image ID"
[ "$(bdev_uuid Ceph7)" = "$want" ] || fail "bdev Ceph7's UUID is $(bdev_uuid Ceph7), not $want (fsid, pool ID, image ID)"
"$NVTCP" identify -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN ns:2" >"$dir/identify-uuid.txt" ||
  fail "identify of namespace 2"
grep -qi "nguid *: *${want//-/}" "$dir/identify-uuid.txt" ||
  { cat "$dir/identify-uuid.txt"; fail "namespace 2 does not show NGUID ${want//-/}"; }
# An image removed and made anew under its old name is another device: another UUID.
rbd_cli "$cluster" create --size 16 rbd/anew || fail "rbd create rbd/anew"
create_anew() {  # NAME: a bdev of rbd/anew
  rpc bdev_rbd_create "{\"pool_name\": \"rbd\", \"rbd_name\": \"anew\", \"block_size\": 4096, \"name\": \"$1\",
    \"config\": {\"mon_host\": \"$mon_host\", \"auth_client_required\": \"none\"}}"
}
create_anew Anew >/dev/null || fail "bdev_rbd_create of rbd/anew"
first=$(bdev_uuid Anew)
# The same image twice is refused: two bdevs must not show one identity.
create_anew Anew2 >"$dir/twice.txt" 2>&1 && fail "a second bdev of the same image was created"
grep -q "two devices must not show one identity" "$dir/twice.txt" || { cat "$dir/twice.txt"; fail "no reason for refusing the same image twice"; }
rpc bdev_rbd_delete --name Anew >/dev/null || fail "bdev_rbd_delete"
rbd_cli "$cluster" rm rbd/anew >/dev/null 2>&1 || fail "rbd rm rbd/anew"
rbd_cli "$cluster" create --size 16 rbd/anew || fail "rbd create rbd/anew again"
create_anew Anew >/dev/null || fail "bdev_rbd_create of the new rbd/anew"
second=$(bdev_uuid Anew)
[ "$first" != "$second" ] || fail "an image made anew under its old name kept the old image's UUID $first"
[ "$second" = "$(image_uuid rbd anew)" ] || fail "the new image's UUID is not its fsid, pool ID and image ID"
rpc bdev_rbd_delete --name Anew >/dev/null || fail "bdev_rbd_delete"
echo "UUIDs: rbd/second $want; rbd/anew $first, then $second once made anew"
"$NVTCP" perf -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN ns:2" -q 8 -o 4K -w randwrite --verify -t 1 \
  >"$dir/perf-ns2.txt" || { cat "$dir/perf-ns2.txt"; fail "perf --verify on the RBD namespace added by RPC"; }
# A resize made on the cluster: librbd's header watch tells the gateway, whose once-a-second
# check then finds the new size, logs it and tells connected hosts (a namespace attribute notice).
rbd_cli "$cluster" resize --size 96 rbd/second >/dev/null 2>&1 || fail "rbd resize"
for _ in $(seq 100); do grep -q "namespace 2: its rbd was resized: 16384 -> 24576 blocks" "$dir/target.log" && break; sleep 0.1; done
grep -q "namespace 2: its rbd was resized: 16384 -> 24576 blocks" "$dir/target.log" ||
  fail "the resize made on the cluster did not reach the namespace"
"$NVTCP" identify -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN ns:2" >"$dir/identify-2.txt" ||
  fail "identify of namespace 2"
grep -qE "100663296|96(\.0)? MiB" "$dir/identify-2.txt" || { cat "$dir/identify-2.txt"; fail "identify does not show the new size"; }
rpc bdev_get_bdevs --name Ceph7 | python3 -c 'import json,sys; b=json.load(sys.stdin)[0]; assert b["num_blocks"] == 96 * 256, b' ||
  fail "bdev_get_bdevs does not show the size the cluster gave the image"
# And grown from the gateway (bdev_rbd_resize, MiB as rpc.py sends it): the image on the cluster
# grows; shrinking is refused, as SPDK refuses it.
rpc bdev_rbd_resize --name Ceph7 --new-size 128 >/dev/null || fail "bdev_rbd_resize"
rbd_cli "$cluster" info rbd/second 2>/dev/null | grep -q "size 128 MiB" || fail "the image did not grow on the cluster"
grep -q "control: bdev Ceph7 resized to 134217728 bytes (namespace 2" "$dir/target.log" || fail "no log line for bdev_rbd_resize"
# 100 MiB: above the size the gateway was created with (64), below the image's now (128).
rpc bdev_rbd_resize --name Ceph7 --new-size 100 >/dev/null 2>&1 && fail "bdev_rbd_resize accepted a shrink"
rbd_cli "$cluster" info rbd/second 2>/dev/null | grep -q "size 128 MiB" || fail "bdev_rbd_resize shrank the image"
# nvtcp's librbd settings (rbd_non_blocking_aio off, the Objecter's throttles lifted) apply where
# nothing else sets them, and a cluster's config_param overrides them: read back from each
# client's admin socket.
for c in plain over; do
  extra=
  [ $c = over ] && extra=', "rbd_non_blocking_aio": "true", "objecter_inflight_ops": "1024"'
  rpc bdev_rbd_register_cluster "{\"name\": \"$c\", \"config_param\": {\"mon_host\": \"$mon_host\",
    \"auth_client_required\": \"none\", \"admin_socket\": \"$dir/$c.asok\"$extra}}" >/dev/null ||
    fail "bdev_rbd_register_cluster $c"
  rpc bdev_rbd_create --name "Opt_$c" --pool-name rbd --rbd-name second --block-size 4096 --cluster-name "$c" \
    --uuid "$(python3 -c 'import uuid; print(uuid.uuid4())')" >/dev/null || fail "bdev_rbd_create through cluster $c"
done
client_option() { ceph --admin-daemon "$dir/$1.asok" config get "$2" | python3 -c 'import json,sys; print(*json.load(sys.stdin).values())'; }
[ "$(client_option plain rbd_non_blocking_aio) $(client_option plain objecter_inflight_ops) $(client_option plain objecter_inflight_op_bytes)" = "false 0 0" ] ||
  fail "nvtcp's librbd defaults: $(client_option plain rbd_non_blocking_aio) $(client_option plain objecter_inflight_ops)"
[ "$(client_option over rbd_non_blocking_aio) $(client_option over objecter_inflight_ops) $(client_option over objecter_inflight_op_bytes)" = "true 1024 0" ] ||
  fail "config_param did not override nvtcp's librbd defaults"
for c in plain over; do rpc bdev_rbd_delete --name "Opt_$c" >/dev/null || fail "bdev_rbd_delete Opt_$c"; done
echo "librbd settings: nvtcp's where nothing else sets them, config_param's where it does"
rpc save_config >"$dir/saved.json" || fail "save_config"
python3 - "$dir/saved.json" "$want" <<'PY' || fail "save_config does not hold the RBD bdev as bdev_rbd_create"
import json, sys
doc = json.load(open(sys.argv[1]))
calls = [c for s in doc["subsystems"] for c in (s.get("config") or [])]
rbd = [c["params"] for c in calls if c["method"] == "bdev_rbd_create"]
assert len(rbd) == 2, rbd  # the command line's image and the one added by RPC
second = [p for p in rbd if p["rbd_name"] == "second"][0]
assert second["pool_name"] == "rbd" and second["name"] == "Ceph7" and second["block_size"] == 4096, second
assert second["config"]["mon_host"], second
# The UUID is written, so that a restarted gateway shows the same identifiers whatever the
# release that derived them.
assert second["uuid"] == sys.argv[2], second
print("save_config: bdev_rbd_create for both images")
PY

step "a lost cluster: the OSD stopped past the client's operation timeout, then back"
# An image whose client gives up on an operation after 3 s: rados_osd_op_timeout from the
# registered cluster's configuration file (the gateway's default, 30 s, applies only where the
# file says nothing). While the OSD is stopped, the gateway's commands end with a path error (a
# multipath host takes that to another gateway), none hangs; once it is back, the same gateway
# serves again with nothing restarted (librados reconnects by itself).
rbd_cli "$cluster" create --size 64 rbd/lost || fail "rbd create rbd/lost"
{ cat "$cluster/ceph.conf"; printf '[client]\nrados osd op timeout = 3\n'; } >"$dir/short-timeout.conf"
rpc bdev_rbd_register_cluster "{\"name\": \"short\", \"config_file\": \"$dir/short-timeout.conf\"}" >/dev/null ||
  fail "bdev_rbd_register_cluster with a configuration file"
rpc bdev_rbd_create --name Ceph8 --pool-name rbd --rbd-name lost --block-size 4096 --cluster-name short >/dev/null ||
  fail "bdev_rbd_create of rbd/lost"
lost_ns=$(rpc nvmf_subsystem_add_ns --nqn "$NQN" --namespace.bdev-name Ceph8) || fail "nvmf_subsystem_add_ns of rbd/lost"
osd_pid=$(cat "$cluster/run/osd.0.pid")
trid="trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN"  # this gateway's
"$NVTCP" perf -r "$trid ns:$lost_ns" -q 4 -o 4K -w randwrite -t 8 --io-timeout 0 --json >"$dir/perf-lost.json" \
  2>"$dir/perf-lost.log" &
perf_pid=$!
# A RAM namespace on the same gateway: its reactor starts librbd's operations itself
# (rbd_non_blocking_aio off), and must not wait for the stopped OSD even when more reads wait on
# it than the Objecter's default in-flight throttle (1024) would let through.
rpc bdev_malloc_create --name Ram9 --num-blocks 8192 --block-size 4096 >/dev/null || fail "bdev_malloc_create"
ram_ns=$(rpc nvmf_subsystem_add_ns --nqn "$NQN" --namespace.bdev-name Ram9) || fail "nvmf_subsystem_add_ns of a RAM bdev"
sleep 1
kill -STOP "$osd_pid"
stopped_at=$(date +%s.%N)
"$NVTCP" perf -r "$trid ns:$lost_ns" -q 128 -P 12 -o 4K -w randread -t 4 --io-timeout 0 >/dev/null 2>&1 &
crowd_pid=$!
sleep 1
timeout 20 "$NVTCP" perf -r "$trid ns:$ram_ns" -q 8 -o 4K -w randread -t 1 --io-timeout 5 --json >"$dir/perf-ram.json" \
  2>"$dir/perf-ram.log" || { tail -3 "$dir/perf-ram.log"; fail "the RAM namespace was not served while the OSD was stopped"; }
python3 - "$dir/perf-ram.json" <<'PY' || fail "the RAM namespace with the OSD stopped"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["ios"] > 0 and r["errors"] == 0, r
print(f"OSD stopped, 1,536 reads waiting on it: the RAM namespace on the same gateway did {r['ios']} I/Os, no error")
PY
sleep 3
kill -CONT "$osd_pid"
stopped_for=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$stopped_at" "$(date +%s.%N)")
wait "$crowd_pid" || true  # its reads end with path errors after the 3 s timeout
wait "$perf_pid" && fail "perf saw no error with the OSD stopped for 5 s"
python3 - "$dir/perf-lost.json" "$stopped_for" <<'PY' || { tail -5 "$dir/perf-lost.log"; fail "perf with the OSD stopped"; }
import json, sys
r = json.load(open(sys.argv[1]))
stopped = float(sys.argv[2])
# Each command in flight ended with an error after the 3 s timeout, no hang: the 4 in flight when
# the OSD stopped, and 4 more for every further 3 s it stayed stopped (the stop lasts 5 s or more,
# longer on a loaded machine, where the RAM step takes longer).
most = 4 * (int(stopped // 3) + 1)
assert 0 < r["errors"] <= most and r["ios"] > r["errors"], (r, stopped, most)
print(f"OSD stopped for {stopped:.1f} s: {r['errors']} commands failed (at most {most}), {r['ios']} I/Os in all")
PY
grep -q "Internal Path Error" "$dir/perf-lost.log" || { tail -5 "$dir/perf-lost.log"; fail "the failed commands' status is not a path error"; }
"$NVTCP" perf -r "$trid ns:$lost_ns" -q 16 -o 4K -w randwrite --verify -t 1 --json >"$dir/perf-back.json" 2>&1 ||
  fail "perf --verify with the OSD back"
python3 - "$dir/perf-back.json" <<'PY' || fail "the gateway did not serve again with the OSD back"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["errors"] == 0 and r["verify_failures"] == 0 and r["ios"] > 0, r
print(f"the OSD back: {r['ios']} I/Os verified through the same gateway, no error")
PY

stop_target
echo "PASS: an RBD image served over NVMe/TCP: identify, perf --verify, bytes on the cluster, trim, flush, a second gateway, bdev_rbd_create, a resize made on the cluster, save_config, and a lost cluster (path errors, then served again)"

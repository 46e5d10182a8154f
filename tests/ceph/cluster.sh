# SPDX-License-Identifier: Apache-2.0
# A one-node Ceph cluster for a test, from Debian 12's packages (ceph-mon, ceph-osd, ceph-common,
# which `make deps` installs): one monitor on a free 127.0.0.1 port and one OSD on memstore (no
# disk), pool size 1, no authentication, everything (data, logs, sockets, pid files) under the
# test's directory. It starts in a few seconds and leaves nothing behind once stopped.
#
#   source tests/ceph/cluster.sh
#   ceph_cluster_start DIR [POOL]    # DIR/ceph.conf; POOL (default rbd) made and initialised for RBD
#   ceph_cluster DIR ARGS...         # the ceph CLI against it;  rbd_cli DIR ARGS...: the rbd CLI
#   ceph_cluster_stop DIR            # both daemons, by their pid files
#
# ceph_cluster_available says whether the packages are here; ceph_skip_unless_available exits 77
# (a skipped test) with the reason when they, or root, are not.

ceph_cluster_available() {
  command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null && command -v ceph >/dev/null &&
    command -v monmaptool >/dev/null && command -v rbd >/dev/null
}

# For a test: exits 77 (skipped), saying why, where no cluster can start here.
ceph_skip_unless_available() {
  [ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (the Ceph daemons)"; exit 77; }
  ceph_cluster_available || { echo "SKIP: ceph-mon, ceph-osd and ceph-common are not installed (make deps)"; exit 77; }
}

ceph_cluster() {
  local dir=$1
  shift
  timeout 60 ceph -c "$dir/ceph.conf" "$@"
}

rbd_cli() {
  local dir=$1
  shift
  timeout 60 rbd -c "$dir/ceph.conf" "$@"
}

ceph_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

ceph_cluster_start() {
  local dir=$1 pool=${2:-rbd} port fsid
  mkdir -p "$dir/mon" "$dir/osd" "$dir/run" "$dir/log"
  port=$(ceph_free_port)
  fsid=$(cat /proc/sys/kernel/random/uuid)
  # memstore page set: objects kept as 64 KiB pages. Ceph's default keeps each object as one
  # buffer list that every small write at a random offset splits further, so each operation on
  # it costs more than the one before: a run of random writes made every later run slower
  # (bench/RESULTS.md, 08:05).
  cat >"$dir/ceph.conf" <<CONF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$port
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
osd objectstore = memstore
memstore page set = true
memstore device bytes = 1073741824
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon allow pool delete = true
osd crush chooseleaf type = 0
mon warn on pool no redundancy = false
run dir = $dir/run
admin socket = $dir/run/\$name.asok
pid file = $dir/run/\$name.pid
log file = $dir/log/\$name.log
mon data = $dir/mon/\$cluster-\$id
osd data = $dir/osd/\$cluster-\$id
ms bind ipv4 = true
ms bind ipv6 = false
# A client that dies holding an image's exclusive lock (a SIGKILLed gateway) keeps its watch on
# the image until this passes; only then does librbd in another client break the lock (and
# blocklist the dead one), and that client's writes wait for it. Ceph's default is 30 s, longer
# than the tests' I/O timeouts; a production cluster chooses its own (README: two gateways).
osd client watch timeout = 5
# A live client keeps its watch by pinging once per objecter tick, every 5 s by default: with
# the timeout above, a ping a moment late lets the watch lapse, and another gateway then breaks
# a live gateway's lock and blocklists it. Clients ping every second (the failover test gives
# its gateways the same through bdev_rbd_register_cluster, which reads no file).
objecter tick interval = 1
CONF
  monmaptool --create --addv a "[v2:127.0.0.1:$port]" --fsid "$fsid" "$dir/monmap" >/dev/null || return 1
  ceph-mon -c "$dir/ceph.conf" --mkfs -i a --monmap "$dir/monmap" >"$dir/log/mkfs-mon.out" 2>&1 ||
    { cat "$dir/log/mkfs-mon.out"; return 1; }
  ceph-mon -c "$dir/ceph.conf" -i a >"$dir/log/mon-start.out" 2>&1 || { cat "$dir/log/mon-start.out"; return 1; }
  local id
  id=$(ceph_cluster "$dir" osd create) || { echo "ceph osd create failed"; return 1; }
  mkdir -p "$dir/osd/ceph-$id"
  ceph-osd -c "$dir/ceph.conf" -i "$id" --mkfs >"$dir/log/mkfs-osd.out" 2>&1 || { cat "$dir/log/mkfs-osd.out"; return 1; }
  ceph-osd -c "$dir/ceph.conf" -i "$id" >"$dir/log/osd-start.out" 2>&1 || { cat "$dir/log/osd-start.out"; return 1; }
  local up=
  for _ in $(seq 120); do
    if ceph_cluster "$dir" osd stat 2>/dev/null | grep -q "1 up"; then up=1; break; fi
    sleep 0.5
  done
  [[ -n $up ]] || { echo "the OSD did not come up"; tail -20 "$dir/log/osd.$id.log"; return 1; }
  ceph_cluster "$dir" osd pool create "$pool" 8 >/dev/null 2>&1 || { echo "ceph osd pool create failed"; return 1; }
  rbd_cli "$dir" pool init "$pool" || { echo "rbd pool init failed"; return 1; }
}

ceph_cluster_stop() {
  local dir=$1 pid pids=()
  for f in "$dir"/run/*.pid; do
    [[ -s $f ]] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null && pids+=("$pid")
  done
  # An OSD takes a few seconds to exit; after 20 it is killed.
  for _ in $(seq 40); do
    local alive=
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [[ -z $alive ]] && return 0
    sleep 0.5
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
}

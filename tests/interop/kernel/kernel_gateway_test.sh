#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# interop.kernel_gateway: Linux's native multipath (Debian 13's kernel, nvme-cli 2.13) in front of
# two nvtcp gateways that serve one RBD image of a real one-node Ceph cluster started here
# (tests/ceph/cluster.sh), built over RPC from an empty start (tests/ceph/gateways.sh): controller
# IDs 1-1000 on A and 1001-2000 on B, ANA group 1 optimized on A and non-optimized on B.
#
#   kernel_gateway_test.sh path/to/nvtcp CACHE_DIR
#
# The guest (guest/gateway.sh) connects to both gateways through QEMU's gateway (10.0.2.2) and
# runs fio (libaio, O_DIRECT, crc32c verify) through the multipath head device. When it asks, this
# script SIGKILLs gateway A, makes B optimized (the orchestrator's part), restarts A 7 s later from
# the configuration A's save_config wrote, and puts B back to non-optimized. Guest steps (each
# must PASS):
#
#   connect          two controllers, their IDs from each gateway's range
#   ana.initial      A's path optimized, B's non-optimized
#   io.failover      fio's writes go on through B while A is dead: no I/O error reaches fio, and
#                    every block it wrote (acknowledged) verifies
#   failback.path    the kernel reconnects to the restarted A by itself; A optimized, B not
#   io.failback      fio reads every block again (--verify_only), through A, and verifies it
#   io.failback.write  a write through the head device goes to A
#   mask.hidden      a second image added on both gateways as ceph-nvmeof adds namespaces
#                    (no_auto_visible): not in the kernel's active list, no device
#   mask.shown       nvmf_ns_add_host names this host on both: the kernel rescans (namespace
#                    attribute notice) and the namespace appears with two paths and takes I/O
#   mask.removed     nvmf_ns_remove_host: it goes away again
#   ana.move         nvmf_subsystem_set_ns_ana_group moves namespace 1 to group 2 (inaccessible
#                    through A, optimized through B) on both gateways: the kernel's paths take
#                    group 2's states (sysfs ana_grpid 2) and I/O goes on through B
#   ana.back         moved back to group 1: A optimized again
#   qos              bdev_set_qos_limit r_mbytes_per_sec 1 on both gateways: fio's 4 KiB random
#                    reads through the head device get no more than 300 IOPS (1 MiB/s is 256;
#                    only the upper bound is checked), where the same job without the limit got
#                    more. A byte limit far below the guest's own rate: an IOPS limit of 1000 sat
#                    at what a 2-core machine's guest reaches without any limit (1,054 IOPS)
#
# Also: the restarted A's bdev_get_iostat counts the guest's reads and writes, the guest kernel
# printed no warning. Runs as root (apt-get); otherwise, without Debian's packages or without
# Ceph, prints SKIP and exits 77. NVTCP_INTEROP_KEEP=1 keeps the console and logs.
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/common.sh"
kernel_test_args interop.kernel_gateway "Debian's kernel, busybox, nvme-cli, QEMU and Ceph" "$@"
CEPH_TESTS=$(readlink -f "$KERNEL_TEST_DIR/../../ceph")
# shellcheck source=../../ceph/cluster.sh
source "$CEPH_TESTS/cluster.sh"
ceph_skip_unless_available

START=$SECONDS
NQN=nqn.2016-06.io.spdk:cnode1
HOSTID=5b0e6a7c-3d2f-4e1a-9c8b-7f6e5d4c3b2a
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:$HOSTID
WORK=$(mktemp -d /tmp/nvtcp-kgateway.XXXXXX)
pid_a= pid_b=
cleanup() {
  local rc=$? p
  set +e
  kernel_stop 0
  for p in "$pid_a" "$pid_b"; do [[ -n $p ]] && kill -KILL "$p" 2>/dev/null; done
  ceph_cluster_stop "$WORK/ceph" >/dev/null 2>&1
  if [[ ($rc -ne 0 && $rc -ne 77) || ${NVTCP_INTEROP_KEEP:-0} == 1 ]]; then
    echo "console and gateway logs kept in $WORK"
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

kernel_prepare "$CACHE" trixie
echo "kernel: $KERNEL_PKG ($KERNEL_VERSION), $(qemu-system-x86_64 --version | head -1)"

ceph_cluster_start "$WORK/ceph" rbd || die "the Ceph cluster did not start"
rbd_cli "$WORK/ceph" create --size 256 rbd/gw || die "rbd create"
GW_DIR=$WORK GW_NQN=$NQN GW_MON_HOST=$(sed -n 's/^mon host = //p' "$WORK/ceph/ceph.conf")
gw_fail() { die "$@"; }
# shellcheck source=../../ceph/gateways.sh
source "$CEPH_TESTS/gateways.sh"
PORT_A=$(kfree_port)
PORT_B=$(kfree_port "$PORT_A")
gw_start a
gw_start b
gw_build a "$PORT_A" 1 1000 gw
gw_build b "$PORT_B" 1001 2000 gw
gw_ana b "$PORT_B" non_optimized
"$NVTCP" rpc -s "$WORK/a.sock" save_config >"$WORK/a.json" || die "save_config on A"
echo "gateways on 127.0.0.1:$PORT_A (A, pid $pid_a) and :$PORT_B (B, pid $pid_b) in front of rbd/gw"

kernel_boot_with_dd_fio gateway "$KERNEL_TEST_DIR/guest/gateway.sh" "NQN=$NQN" "PORT_A=$PORT_A" "PORT_B=$PORT_B" \
  "HOSTNQN=$HOSTNQN" "HOSTID=$HOSTID"
T0=$SECONDS

# The guest's requests: what the orchestrator and the administrator do, carried out in order.
serve() {
  case $1 in
    kill-a)
      kill -KILL "$pid_a"
      wait "$pid_a" 2>/dev/null || true
      pid_a=
      echo "gateway A SIGKILLed"
      gw_ana b "$PORT_B" optimized  # the orchestrator moves the group to the gateway that is left
      sleep 7
      gw_start a --config "$WORK/a.json"
      gw_ana b "$PORT_B" non_optimized  # and back once A serves again
      echo "gateway A restarted from its save_config (pid $pid_a), B non-optimized again" ;;
    ns-hidden)
      rbd_cli "$WORK/ceph" create --size 64 rbd/gw2 || die "rbd create rbd/gw2"
      for g in a b; do
        gw_rpc "$g" bdev_rbd_create --name Ceph1 --pool-name rbd --rbd-name gw2 --block-size 4096 --cluster-name cluster_a
        gw_rpc "$g" nvmf_subsystem_add_ns --nqn "$NQN" --namespace.bdev-name Ceph1 --namespace.nsid 2 \
          --namespace.anagrpid 1 --namespace.no-auto-visible true
      done ;;
    ns-show) for g in a b; do gw_rpc "$g" nvmf_ns_add_host --nqn "$NQN" --nsid 2 --host "$HOSTNQN"; done ;;
    ns-hide) for g in a b; do gw_rpc "$g" nvmf_ns_remove_host --nqn "$NQN" --nsid 2 --host "$HOSTNQN"; done ;;
    ana-move)
      for g in a b; do
        port=$PORT_A state=inaccessible
        [[ $g == b ]] && port=$PORT_B state=optimized
        gw_rpc "$g" nvmf_subsystem_listener_set_ana_state --nqn "$NQN" --listen-address.trtype tcp \
          --listen-address.traddr 127.0.0.1 --listen-address.trsvcid "$port" --ana-state "$state" --anagrpid 2
        gw_rpc "$g" nvmf_subsystem_set_ns_ana_group --nqn "$NQN" --nsid 1 --anagrpid "$2"
      done ;;
    qos) for g in a b; do gw_rpc "$g" bdev_set_qos_limit --name Ceph0 --r-mbytes-per-sec "$2"; done ;;
    *) fail "unknown guest request: $*" ;;
  esac
}
kernel_serve_requests serve
kernel_wait_marker 'NVTCP-GUEST .* RUN-EXIT' 120 || fail "the guest did not finish in time"
GUEST_S=$((SECONDS - T0))
kernel_stop 30

tr -d '\r' <"$CONSOLE" >"$WORK/console.txt"
grep -a 'NVTCP-GUEST' "$WORK/console.txt" | grep -v REQUEST | sed 's/^/  /'
grep -qa 'NVTCP-GUEST .* RUN-EXIT 0$' "$WORK/console.txt" || fail "the guest script did not exit cleanly"
STEPS=(connect ana.initial io.failover failback.path io.failback io.failback.write mask.hidden mask.shown
       mask.removed ana.move ana.back qos)
kernel_check_steps "${STEPS[@]}"

# The restarted A's own counts: the guest's verify pass and last write went to it (failback).
if [[ -n $pid_a ]]; then
  "$NVTCP" rpc -s "$WORK/a.sock" bdev_get_iostat >"$WORK/a-iostat.json" || fail "bdev_get_iostat on the restarted A"
  python3 - "$WORK/a-iostat.json" <<'PY' || fail "the restarted gateway A did not serve the guest"
import json, sys
b = json.load(open(sys.argv[1]))["bdevs"][0]
assert b["num_read_ops"] >= 2048 and b["num_write_ops"] > 0, b
print(f"failback: the restarted gateway A served {b['num_read_ops']} reads and {b['num_write_ops']} writes")
PY
fi
grep -aiE 'WARNING:|BUG:|Call Trace|Oops' "$WORK/console.txt" >"$WORK/kmsg.oops" && {
  fail "the guest kernel warned or oopsed:"; sed 's/^/    /' "$WORK/kmsg.oops" | head -20; }
echo "guest $GUEST_S s, test $((SECONDS - START)) s"
if [[ $FAILURES -gt 0 ]]; then
  for f in a.log b.log; do echo "--- $f (last 20 lines):"; tail -20 "$WORK/$f"; done
  echo "--- guest kernel messages:"; grep -a '^KMSG ' "$WORK/console.txt" | tail -40
  echo "interop.kernel_gateway: $FAILURES failure(s)"
  exit 1
fi
echo "interop.kernel_gateway: every step passed"

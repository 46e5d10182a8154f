#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# interop.kernel_fabric: the Linux host (Debian 13's kernel, nvme-cli 2.13) with native multipath
# against one nvtcp subsystem on two listeners with ANA reporting, and live changes made through
# nvtcp's RPC socket while the kernel is connected.
#
#   kernel_fabric_test.sh path/to/nvtcp CACHE_DIR
#
# Runs `nvtcp target --ram RAM_MIB --listen 127.0.0.1:PORT_A --listen 127.0.0.1:PORT_B --ana-reporting
# --rpc-socket WORK/rpc.sock` and boots the guest with guest/fabric.sh (nvme_core multipath=Y), which
# connects to both ports (10.0.2.2, QEMU's gateway) and asks for changes with "REQUEST SEQ ACTION" lines
# on its console; this script carries each out with `nvtcp rpc` and the guest waits for the kernel to
# see it. Guest steps (each must PASS):
#
#   connect, multipath     two controllers, one head device /dev/nvmeXn1 with two paths
#   id.ana                 Identify: CMIC bit 3, the namespace's ANAGRPID 1
#   ana.initial, list-subsys  both paths "optimized" in sysfs and in `nvme list-subsys`
#   io.head                4 MiB written and read back through the head device
#   ana.a / ana.b / ana.c  nvmf_subsystem_listener_set_ana_state: A inaccessible; A optimized with B
#                          non-optimized; B inaccessible: the kernel's path states follow (ANA change
#                          notice, log 0Ch) and I/O through the head device goes on, read back equal
#   io.flip                a 16 MiB O_DIRECT write runs while A, then B turn inaccessible and back: no
#                          I/O error reaches dd, and the data reads back equal
#   io.cut                 fio (write, crc32c verify) runs through the head device while
#                          nvmf_subsystem_remove_listener takes listener A away (its controller torn
#                          down, its port closed): fio sees no I/O error and every block verifies
#   cut.down, cut.restored A's controller is not live while its listener is gone; added back
#                          (nvmf_subsystem_add_listener), the kernel reconnects by itself and the path
#                          is live and optimized again, taking I/O
#   ns.add, io.ns2         bdev_null_create + nvmf_subsystem_add_ns: /dev/nvmeXn2 appears with its size
#                          (namespace attribute notice, changed-namespace log), without a reconnect,
#                          and takes I/O (a NULL namespace: writes taken, zeros read)
#   ns.resize              bdev_null_resize: the device's size follows
#   ns.remove              nvmf_subsystem_remove_ns: the device goes away
#   ns.noreconnect         the same two controllers throughout
#
# Also: the target logs every ANA transition once and no error, the guest kernel no warning.
# Runs as root (apt-get); otherwise, or if Debian's packages cannot be fetched, prints SKIP and exits
# 77. NVTCP_INTEROP_KEEP=1 keeps the console and target logs (kept on failure anyway).
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/common.sh"
kernel_test_args interop.kernel_fabric "Debian's kernel, busybox, nvme-cli and QEMU" "$@"

START=$SECONDS
NQN=nqn.2026-12.io.nvtcp:fabric
HOSTID=7d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:$HOSTID
RAM_MIB=32
WORK=$(mktemp -d /tmp/nvtcp-kfabric.XXXXXX)
SOCK=$WORK/rpc.sock
trap kernel_target_cleanup EXIT
trap 'exit 130' INT TERM

kernel_prepare "$CACHE" trixie
echo "kernel: $KERNEL_PKG ($KERNEL_VERSION), $(qemu-system-x86_64 --version | head -1)"

for attempt in 1 2 3 4 5; do
  PORT_A=$(kfree_port)
  PORT_B=$(kfree_port "$PORT_A")
  rm -f "$WORK/ready"
  "$NVTCP" target --ram "${RAM_MIB}M" --listen "127.0.0.1:$PORT_A" --listen "127.0.0.1:$PORT_B" --discovery-port 0 \
    --nqn "$NQN" --ana-reporting --rpc-socket "$SOCK" --ready-file "$WORK/ready" --log-level debug \
    >"$WORK/target.log" 2>&1 &
  TARGET_PID=$!
  ktarget_ready && break
  echo "target failed to start on $PORT_A/$PORT_B (attempt $attempt): $(tail -1 "$WORK/target.log")"
done
[[ -n $TARGET_PID ]] || die "could not start the target"
echo "nvtcp target on 127.0.0.1:$PORT_A and :$PORT_B, pid $TARGET_PID, RPC $SOCK"
rpc() { "$NVTCP" rpc -s "$SOCK" "$@"; }

kernel_boot_with_dd_fio fabric "$KERNEL_TEST_DIR/guest/fabric.sh" "NQN=$NQN" "PORT_A=$PORT_A" "PORT_B=$PORT_B" \
  "HOSTNQN=$HOSTNQN" "HOSTID=$HOSTID" "RAM_MIB=$RAM_MIB"
T0=$SECONDS

# ana_state PORT STATE: the guest's names (non-optimized) are RPC's with a dash.
ana_state() {
  rpc nvmf_subsystem_listener_set_ana_state --nqn "$NQN" --listen-address.trtype tcp \
    --listen-address.traddr 127.0.0.1 --listen-address.trsvcid "$1" --ana-state "${2//-/_}" >/dev/null
}
# Carry out the guest's requests in order until it is done.
# The guest's requests, carried out in order.
serve() {
  case $1 in
    ana) ana_state "$2" "$3" || fail "rpc for the request ($*)" ;;
    flip)
      for s in "$2 inaccessible" "$2 optimized" "$3 inaccessible" "$3 optimized"; do
        sleep 0.5
        ana_state $s || fail "rpc for the request ($s)"
      done ;;
    ns-add)
      rpc bdev_null_create --name Live2 --num-blocks $((RAM_MIB * 2048)) --block-size 512 >/dev/null \
        && [[ $(rpc nvmf_subsystem_add_ns --nqn "$NQN" --namespace.bdev-name Live2 --namespace.nsid 2) == 2 ]] \
        || fail "rpc for the request (ns-add)" ;;
    cut)  # once fio is under way
      sleep 1.5
      rpc nvmf_subsystem_remove_listener --nqn "$NQN" --listen-address.trtype tcp --listen-address.traddr 127.0.0.1 \
        --listen-address.trsvcid "$2" >/dev/null || fail "rpc for the request ($*)" ;;
    restore)
      rpc nvmf_subsystem_add_listener --nqn "$NQN" --listen-address.trtype tcp --listen-address.traddr 127.0.0.1 \
        --listen-address.trsvcid "$2" >/dev/null || fail "rpc for the request ($*)" ;;
    ns-resize) rpc bdev_null_resize --name Live2 --new-size $((RAM_MIB * 2)) >/dev/null || fail "rpc for the request (ns-resize)" ;;
    ns-remove)
      rpc nvmf_subsystem_remove_ns --nqn "$NQN" --nsid 2 >/dev/null && rpc bdev_null_delete --name Live2 >/dev/null \
        || fail "rpc for the request (ns-remove)" ;;
    *) fail "unknown guest request: $*" ;;
  esac
}
kernel_serve_requests serve
kernel_wait_marker 'NVTCP-GUEST .* RUN-EXIT' 120 || fail "the guest did not finish in time"
GUEST_S=$((SECONDS - T0))
kernel_stop 30
stop_target

tr -d '\r' <"$CONSOLE" >"$WORK/console.txt"
grep -a 'NVTCP-GUEST' "$WORK/console.txt" | grep -v REQUEST | sed 's/^/  /'
grep -a '^LISTSUBSYS ' "$WORK/console.txt" | sed 's/^LISTSUBSYS /    /'
grep -qa 'NVTCP-GUEST .* RUN-EXIT 0$' "$WORK/console.txt" || fail "the guest script did not exit cleanly"
STEPS=(connect multipath id.ana ana.initial list-subsys io.head ana.a ana.b ana.c io.flip io.cut cut.down cut.restored
       ns.add io.ns2 ns.resize ns.remove ns.noreconnect)
kernel_check_steps "${STEPS[@]}"

# The target logged each transition once (A: 4 in ana.a/b and the flip; B: 3 and 2 in the flip).
n=$(grep -c "ANA: subsystem $NQN listener 127.0.0.1:$PORT_A group 1: " "$WORK/target.log" || true)
[[ $n == 4 ]] || fail "listener A logged $n ANA transitions, not 4"
n=$(grep -c "ANA: subsystem $NQN listener 127.0.0.1:$PORT_B group 1: " "$WORK/target.log" || true)
[[ $n == 5 ]] || fail "listener B logged $n ANA transitions, not 5"
grep -aiE 'WARNING:|BUG:|Call Trace|Oops' "$WORK/console.txt" >"$WORK/kmsg.oops" && {
  fail "the guest kernel warned or oopsed:"; sed 's/^/    /' "$WORK/kmsg.oops" | head -20; }
grep -aiE ' (error|fatal|critical)[: ]' "$WORK/target.log" >"$WORK/target.errors" || true
if [[ -s $WORK/target.errors ]]; then
  fail "the target logged errors:"
  sed 's/^/    /' "$WORK/target.errors" | head -20
fi
echo "guest $GUEST_S s, test $((SECONDS - START)) s"
if [[ $FAILURES -gt 0 ]]; then
  echo "--- target log (last 30 lines):"; tail -30 "$WORK/target.log"
  echo "--- guest kernel messages:"; grep -a '^KMSG ' "$WORK/console.txt" | tail -30
  echo "interop.kernel_fabric: $FAILURES failure(s)"
  exit 1
fi
echo "interop.kernel_fabric: every step passed"

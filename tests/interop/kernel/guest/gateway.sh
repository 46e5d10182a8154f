#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Guest side of interop.kernel_gateway (busybox ash): the Linux host (nvme_core multipath=Y) in
# front of two nvtcp gateways serving one RBD image in one subsystem, gateway A optimized and B
# non-optimized for ANA group 1. The host script kills and restarts gateway A when asked:
#
#   NVTCP-GUEST [uptime] REQUEST SEQ ACTION
#
# Each step prints PASS/FAIL NAME for the host script.
#
# Configuration (/etc/nvtcp-test.conf): NQN PORT_A PORT_B HOSTNQN HOSTID.
. /guest/lib.sh
. /etc/nvtcp-test.conf

SEQ=0
request() { SEQ=$((SEQ + 1)); say "REQUEST $SEQ $*"; }
within() {  # within SECONDS CMD...: true once CMD succeeds, polled every 100 ms
  local n=$(($1 * 10)) i=0; shift
  while [ $i -lt $n ]; do "$@" && return 0; usleep 100000; i=$((i + 1)); done
  return 1
}
ctrl_at() {  # ctrl_at PORT: the controller connected to the gateway on PORT
  local c
  for c in /sys/class/nvme/nvme*; do
    [ -e "$c/address" ] || continue
    case "$(cat "$c/address")" in *"trsvcid=$1"*) [ "$(cat "$c/subsysnqn")" = "$NQN" ] && echo "${c##*/}" ;; esac
  done
}
path_of() {  # path_of CTRL: the controller's path device of namespace 1 (nvmeXcYn1)
  local d
  for d in /sys/class/nvme/"$1"/nvme*c*n*; do
    [ -e "$d/nsid" ] && [ "$(cat "$d/nsid")" = 1 ] && echo "${d##*/}" && return 0
  done
  return 1
}
ana_of() { cat "/sys/block/$(path_of "$1")/ana_state" 2>/dev/null; }
state_of() { cat "/sys/class/nvme/$1/state" 2>/dev/null; }
paths_are() { [ "$(ana_of "$CA")" = "$1" ] && [ "$(ana_of "$CB")" = "$2" ]; }
live_and() { [ "$(state_of "$CA")" = live ] && paths_are "$@"; }
head_of() { path_of "$CA" | sed 's/c[0-9]*n/n/'; }
reads_of() { awk '{print $1}' "/sys/block/$(path_of "$1")/stat" 2>/dev/null; }  # reads completed on CTRL's path
writes_of() { awk '{print $5}' "/sys/block/$(path_of "$1")/stat" 2>/dev/null; }
# fio_job NAME ARGS...: the failover job (its blocks and their crc32c headers; the same arguments
# with --verify_only read and check them again), output in /tmp/NAME.out, exit status in /tmp/NAME.rc.
fio_job() {
  local name=$1; shift
  fio --name=gateway --filename="/dev/$H1" --direct=1 --ioengine=libaio --iodepth=8 --rw=randwrite --bs=4k \
    --size=8M --randseed=4242 --verify=crc32c --verify_fatal=1 "$@" --output=/tmp/$name.out >/dev/null 2>/tmp/$name.err
  echo $? >/tmp/$name.rc
}
fio_ok() {  # fio_ok NAME: exited 0, no error, nothing said about verification
  [ "$(cat /tmp/$1.rc)" = 0 ] && grep -q "err= 0" /tmp/$1.out && ! grep -qi "verify" /tmp/$1.err
}
fio_why() { echo "fio exit $(cat /tmp/$1.rc): $(tail -2 /tmp/$1.err | tr '\n' ' ') $(grep -m1 'err=' /tmp/$1.out)"; }

md5() { md5sum <"$1" | cut -d' ' -f1; }
rw() {  # rw STEP DEV OFFSET_MIB: 4 MiB of random data written with O_DIRECT and read back equal
  dd if=/dev/urandom of=/tmp/w.bin bs=1M count=4 2>/dev/null
  /usr/bin/dd if=/tmp/w.bin of="/dev/$2" bs=1M seek="$3" oflag=direct conv=notrunc 2>/tmp/dd.err \
    && /usr/bin/dd if="/dev/$2" of=/tmp/r.bin bs=1M skip="$3" count=4 iflag=direct 2>>/tmp/dd.err \
    || { fail "$1" "I/O on /dev/$2: $(tail -1 /tmp/dd.err)"; return 1; }
  [ "$(md5 /tmp/w.bin)" = "$(md5 /tmp/r.bin)" ] || { fail "$1" "read back differs"; return 1; }
}

load_mod crc32c_generic || exit 1
load_mod nvme-core multipath=Y || exit 1
load_mod nvme-tcp || exit 1
mkdir -p /etc/nvme
echo "$HOSTNQN" >/etc/nvme/hostnqn
echo "$HOSTID" >/etc/nvme/hostid
say "kernel $(uname -r), nvme-cli: $(nvme version | tr '\n' ' ')"
dmesg -c >/dev/null

# --- both gateways, one namespace: A optimized, B non-optimized ----------------------------------
for p in "$PORT_A" "$PORT_B"; do
  nvme connect -t tcp -a 10.0.2.2 -s "$p" -n "$NQN" --reconnect-delay=1 --ctrl-loss-tmo=120 >/tmp/connect.out 2>&1 \
    || fail "connect.$p" "$(tail -1 /tmp/connect.out)"
done
CA=$(ctrl_at "$PORT_A"); CB=$(ctrl_at "$PORT_B")
IA=$(cat "/sys/class/nvme/$CA/cntlid" 2>/dev/null); IB=$(cat "/sys/class/nvme/$CB/cntlid" 2>/dev/null)
if [ -n "$CA" ] && [ -n "$CB" ] && [ "$IA" -ge 1 ] && [ "$IA" -le 1000 ] && [ "$IB" -ge 1001 ] && [ "$IB" -le 2000 ]; then
  pass connect "$CA (controller ID $IA) via gateway A, $CB (controller ID $IB) via gateway B"
else
  fail connect "controllers '$CA' '$CB', controller IDs '$IA' '$IB'"
fi
if within 20 path_of "$CB" >/dev/null && within 20 paths_are optimized non-optimized; then
  H1=$(head_of)
  pass ana.initial "/dev/$H1: path $(path_of "$CA") optimized, $(path_of "$CB") non-optimized"
else
  fail ana.initial "path states '$(ana_of "$CA")' / '$(ana_of "$CB")'"
  nvme disconnect -n "$NQN" >/dev/null 2>&1
  request done
  exit $FAILED
fi
kmsg connect

# --- failover: gateway A SIGKILLed under a verifying fio; B made optimized; A restarted from its
# saved configuration and B back to non-optimized (the orchestrator's part, done by the host) ----
wb=$(writes_of "$CB")
( fio_job failover --rate_iops=100 ) &
BG=$!
sleep 2
request kill-a
wait $BG
sed 's/^/FIO /' /tmp/failover.out
db=$(($(writes_of "$CB") - wb))
if fio_ok failover && [ "$db" -gt 0 ]; then
  pass io.failover "fio wrote 8 MiB and verified every block through /dev/$H1 while gateway A was killed and restarted ($db writes through B)"
else
  fail io.failover "$(fio_why failover); $db writes through B"
fi
kmsg failover

# --- failback: the kernel reconnects to the restarted A by itself, A optimized again, and I/O
# goes back to it -------------------------------------------------------------------------------
if within 60 live_and optimized non-optimized; then
  pass failback.path "$CA live and optimized again, $CB non-optimized"
else
  fail failback.path "$CA is $(state_of "$CA"), paths '$(ana_of "$CA")' / '$(ana_of "$CB")'"
fi
ra=$(reads_of "$CA"); rb=$(reads_of "$CB")
fio_job readback --verify_only=1
sed 's/^/FIO /' /tmp/readback.out
da=$(($(reads_of "$CA") - ra)); db=$(($(reads_of "$CB") - rb))
if fio_ok readback && [ "$da" -ge 2048 ]; then
  pass io.failback "every block fio wrote verified again, read through gateway A ($da reads on A, $db on B)"
else
  fail io.failback "$(fio_why readback); $da reads on A, $db on B"
fi
wa=$(writes_of "$CA")
/usr/bin/dd if=/dev/urandom of="/dev/$H1" bs=1M seek=64 count=4 oflag=direct 2>/tmp/dd.err \
  && [ $(($(writes_of "$CA") - wa)) -gt 0 ] && pass io.failback.write "4 MiB written through gateway A" \
  || fail io.failback.write "$(tail -1 /tmp/dd.err); $(($(writes_of "$CA") - wa)) writes on A"
kmsg failback

# --- a namespace for named hosts only (as ceph-nvmeof adds every namespace: no_auto_visible, then
# nvmf_ns_add_host), on both gateways: the kernel sees it only while this host is named ---------
ns2_paths() { ls -d /sys/class/nvme/"$CA"/nvme*c*n* /sys/class/nvme/"$CB"/nvme*c*n* 2>/dev/null |
  while read -r d; do [ "$(cat "$d/nsid")" = 2 ] && echo "${d##*/}"; done; }
ns2_count_is() { [ "$(ns2_paths | wc -l)" = "$1" ]; }
request ns-hidden
sleep 3  # the namespace exists on both gateways now; a notice would have come at once
if ns2_count_is 0 && ! nvme list-ns "/dev/$CA" 2>/dev/null | grep -q ':0x2$'; then
  pass mask.hidden "namespace 2 (no_auto_visible) not in the active list, no device"
else
  fail mask.hidden "paths of namespace 2: $(ns2_paths | tr '\n' ' '); active list: $(nvme list-ns "/dev/$CA" 2>&1 | tr '\n' ' ')"
fi
request ns-show
if within 20 ns2_count_is 2; then
  H2=$(ns2_paths | head -1 | sed 's/c[0-9]*n/n/')
  rw mask.io "$H2" 0 && pass mask.shown "nvmf_ns_add_host: /dev/$H2 appeared over $(ns2_paths | tr '\n' ' ')and took I/O"
else
  fail mask.shown "paths of namespace 2: $(ns2_paths | tr '\n' ' ')"
fi
request ns-hide
if within 20 ns2_count_is 0; then pass mask.removed "nvmf_ns_remove_host: namespace 2 went away"
else fail mask.removed "paths of namespace 2: $(ns2_paths | tr '\n' ' ')"; fi
kmsg mask

# --- a namespace moved to another ANA group live (nvmf_subsystem_set_ns_ana_group, as
# ceph-nvmeof moves a namespace between gateways' groups): group 2 is inaccessible through A and
# optimized through B; the kernel re-reads the ANA log and its paths take group 2's states -----
grp_of() { cat "/sys/block/$(path_of "$1")/ana_grpid" 2>/dev/null; }
moved_to() { [ "$(grp_of "$CA")" = "$1" ] && [ "$(grp_of "$CB")" = "$1" ] && paths_are "$2" "$3"; }
request ana-move 2
if within 20 moved_to 2 inaccessible optimized; then
  rw ana.move.io "$H1" 16 && pass ana.move "namespace 1 in group 2: $(path_of "$CA") inaccessible, $(path_of "$CB") optimized, I/O through B"
else
  fail ana.move "groups '$(grp_of "$CA")' / '$(grp_of "$CB")', paths '$(ana_of "$CA")' / '$(ana_of "$CB")'"
fi
request ana-move 1
if within 20 moved_to 1 optimized non-optimized; then pass ana.back "namespace 1 in group 1 again: A optimized"
else fail ana.back "groups '$(grp_of "$CA")' / '$(grp_of "$CB")', paths '$(ana_of "$CA")' / '$(ana_of "$CB")'"; fi
kmsg ana

# --- a rate limit on the namespace (bdev_set_qos_limit on both gateways, as ceph-nvmeof sets it):
# the kernel's reads through the optimized path get no more than the limit. Only the upper bound
# is checked (a slow machine may get fewer); without the limit the same job ran faster ----------
fio_rate() {  # fio_rate NAME: 3 s of 4 KiB random reads at queue depth 16; prints the IOPS
  fio --name=qos --filename="/dev/$H1" --direct=1 --ioengine=libaio --iodepth=16 --rw=randread --bs=4k \
    --size=8M --time_based --runtime=3 --output-format=terse --output=/tmp/$1.out >/dev/null 2>/tmp/$1.err
  cut -d';' -f8 /tmp/$1.out
}
free=$(fio_rate qos-free)
request qos 1
limited=$(fio_rate qos-limited)
request qos 0
if [ -n "$limited" ] && [ "$limited" -gt 0 ] && [ "$limited" -le 300 ] && [ "${free:-0}" -gt 300 ]; then
  pass qos "r_mbytes_per_sec 1: fio got $limited IOPS through /dev/$H1 ($free without the limit)"
else
  fail qos "r_mbytes_per_sec 1: fio got '$limited' IOPS ('$free' without the limit): $(tail -1 /tmp/qos-limited.err)"
fi

nvme disconnect -n "$NQN" >/dev/null 2>&1
request done
exit $FAILED

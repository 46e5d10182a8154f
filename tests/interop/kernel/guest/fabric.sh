#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Guest side of interop.kernel_fabric (busybox ash): the Linux host with native multipath
# (nvme_core multipath=Y) over two listeners of one nvtcp subsystem with ANA reporting, and the
# chain RPC -> asynchronous event -> host rescan. What changes on the target is done by the host
# script through nvtcp's RPC socket when this script asks for it:
#
#   NVTCP-GUEST [uptime] REQUEST SEQ ACTION ARGS...
#
# and this script then waits for the kernel to see the effect (it never needs an answer: the
# kernel's own view is what is tested). Each step prints PASS/FAIL NAME for the host script.
#
# Configuration (/etc/nvtcp-test.conf): NQN PORT_A PORT_B HOSTNQN HOSTID RAM_MIB.
. /guest/lib.sh
. /etc/nvtcp-test.conf

SEQ=0
request() { SEQ=$((SEQ + 1)); say "REQUEST $SEQ $*"; }
# within SECONDS CMD...: true once CMD succeeds, polled every 100 ms.
within() {
  local n=$(($1 * 10)) i=0; shift
  while [ $i -lt $n ]; do "$@" && return 0; usleep 100000; i=$((i + 1)); done
  return 1
}
# ctrl_at PORT: the controller connected to the target's PORT.
ctrl_at() {
  local c
  for c in /sys/class/nvme/nvme*; do
    [ -e "$c/address" ] || continue
    case "$(cat "$c/address")" in *"trsvcid=$1"*) [ "$(cat "$c/subsysnqn")" = "$NQN" ] && echo "${c##*/}" ;; esac
  done
}
# path_of CTRL NSID: the controller's hidden path device of the namespace (nvmeXcYnZ).
path_of() {
  local d
  for d in /sys/class/nvme/"$1"/nvme*c*n*; do
    [ -e "$d/nsid" ] || continue
    [ "$(cat "$d/nsid")" = "$2" ] && echo "${d##*/}" && return 0
  done
  return 1
}
ana_of() { cat "/sys/block/$(path_of "$1" "$2")/ana_state" 2>/dev/null; }
ana_is() { [ "$(ana_of "$1" "$2")" = "$3" ]; }
# paths_are NSID STATE_A STATE_B: both paths at once (one RPC per path, so the two changes reach the
# kernel one after the other: waiting for one and then looking at the other races the second).
paths_are() { ana_is "$CA" "$1" "$2" && ana_is "$CB" "$1" "$3"; }
# head_of NSID: the multipath head device (nvmeXnY) of the subsystem's namespace: the name of a
# path device (nvmeXcZnY, whose nsid sysfs gives) without its controller part.
head_of() {
  local p h
  p=$(path_of "$CA" "$1") || p=$(path_of "$CB" "$1") || return 1
  h=$(echo "$p" | sed 's/c[0-9]*n/n/')
  [ -e "/sys/block/$h" ] && echo "$h"
}
# paths_of HEAD: its path devices.
paths_of() { ls -d /sys/block/$(echo "$1" | sed 's/n\([0-9]*\)$/c*n\1/') 2>/dev/null | sed 's|.*/||'; }
head_exists() { head_of "$1" >/dev/null; }
head_gone() { ! head_of "$1" >/dev/null; }
sectors_are() { local h; h=$(head_of "$1") && [ "$(cat "/sys/block/$h/size")" = "$2" ]; }
md5() { md5sum <"$1" | cut -d' ' -f1; }
# rw NAME DEV OFFSET_MIB: 4 MiB of fresh random data written with O_DIRECT at OFFSET_MIB and read
# back through the same device, equal.
rw() {
  local s=$1 dev=$2 off=$3
  dd if=/dev/urandom of=/tmp/w.bin bs=1M count=4 2>/dev/null
  /usr/bin/dd if=/tmp/w.bin of="/dev/$dev" bs=1M seek="$off" oflag=direct conv=notrunc 2>/tmp/dd.err \
    || { fail "$s" "write to /dev/$dev: $(tail -1 /tmp/dd.err)"; return 1; }
  /usr/bin/dd if="/dev/$dev" of=/tmp/r.bin bs=1M skip="$off" count=4 iflag=direct 2>/tmp/dd.err \
    || { fail "$s" "read from /dev/$dev: $(tail -1 /tmp/dd.err)"; return 1; }
  [ "$(md5 /tmp/w.bin)" = "$(md5 /tmp/r.bin)" ] || { fail "$s" "read back differs"; return 1; }
  return 0
}

load_mod crc32c_generic || exit 1
load_mod nvme-core multipath=Y || exit 1
load_mod nvme-tcp || exit 1
[ "$(cat /sys/module/nvme_core/parameters/multipath)" = Y ] || { say "FAIL modules: multipath is off"; exit 1; }
mkdir -p /etc/nvme
echo "$HOSTNQN" >/etc/nvme/hostnqn
echo "$HOSTID" >/etc/nvme/hostid
say "nvme-cli: $(nvme version | tr '\n' ' ')"
dmesg -c >/dev/null

# --- two paths, one namespace ---------------------------------------------------------------------
for p in "$PORT_A" "$PORT_B"; do
  nvme connect -t tcp -a 10.0.2.2 -s "$p" -n "$NQN" --reconnect-delay=1 >/tmp/connect.out 2>&1 \
    || fail "connect.$p" "$(tail -1 /tmp/connect.out)"
done
CA=$(ctrl_at "$PORT_A"); CB=$(ctrl_at "$PORT_B")
if [ -n "$CA" ] && [ -n "$CB" ] && [ "$CA" != "$CB" ]; then pass connect "$CA via $PORT_A, $CB via $PORT_B"
else fail connect "controllers: '$CA' '$CB'"; fi
if within 10 head_exists 1; then
  H1=$(head_of 1)
  n=$(paths_of "$H1" | wc -l)
  [ "$n" = 2 ] && pass multipath "/dev/$H1 over $(paths_of "$H1" | tr '\n' ' ')" \
    || fail multipath "/dev/$H1 has $n paths: $(paths_of "$H1" | tr '\n' ' ')"
else
  fail multipath "no multipath head for namespace 1: $(ls /sys/block | tr '\n' ' ')"
fi
cmic=$(nvme id-ctrl "/dev/$CA" 2>/dev/null | sed -n 's/^cmic *: *//p')
anagrp=$(nvme id-ns "/dev/$H1" 2>/dev/null | sed -n 's/^anagrpid *: *//p')
[ $((cmic & 8)) -eq 8 ] && [ "$anagrp" = 1 ] && pass id.ana "cmic $cmic, anagrpid $anagrp" \
  || fail id.ana "cmic '$cmic' anagrpid '$anagrp'"
if ana_is "$CA" 1 optimized && ana_is "$CB" 1 optimized; then pass ana.initial "both paths optimized"
else fail ana.initial "path states: $(ana_of "$CA" 1) / $(ana_of "$CB" 1)"; fi
nvme list-subsys "/dev/$H1" >/tmp/list-subsys.out 2>&1
sed 's/^/LISTSUBSYS /' /tmp/list-subsys.out
[ "$(grep -c 'optimized' /tmp/list-subsys.out)" -ge 2 ] && pass list-subsys "two live paths, optimized" \
  || fail list-subsys "$(tr '\n' ' ' </tmp/list-subsys.out)"
rw io.head "$H1" 0 && pass io.head "4 MiB through /dev/$H1"

# --- ANA states set by RPC reach the kernel (ANA change notice, log 0Ch) -------------------------
request ana "$PORT_A" inaccessible
if within 20 paths_are 1 inaccessible optimized; then
  rw io.ana.a "$H1" 4 && pass ana.a "path $CA inaccessible, I/O through $CB"
else fail ana.a "path states: $(ana_of "$CA" 1) / $(ana_of "$CB" 1)"; fi
request ana "$PORT_A" optimized
request ana "$PORT_B" non-optimized
if within 20 paths_are 1 optimized non-optimized; then
  rw io.ana.b "$H1" 8 && pass ana.b "path $CA optimized, $CB non-optimized"
else fail ana.b "path states: $(ana_of "$CA" 1) / $(ana_of "$CB" 1)"; fi
request ana "$PORT_B" inaccessible
if within 20 ana_is "$CB" 1 inaccessible; then
  rw io.ana.c "$H1" 12 && pass ana.c "path $CB inaccessible, I/O through $CA"
else fail ana.c "path states: $(ana_of "$CA" 1) / $(ana_of "$CB" 1)"; fi

# The paths change under a running write (B made optimized first, so one path is always
# usable): no I/O error reaches the application.
request ana "$PORT_B" optimized
within 20 ana_is "$CB" 1 optimized || fail ana.restored "path $CB: $(ana_of "$CB" 1)"
dd if=/dev/urandom of=/tmp/big.bin bs=1M count=16 2>/dev/null
( /usr/bin/dd if=/tmp/big.bin of="/dev/$H1" bs=64K seek=256 oflag=direct conv=notrunc 2>/tmp/bg.err
  echo $? >/tmp/bg.rc ) &
BG=$!
request flip "$PORT_A" "$PORT_B"
wait $BG
if [ "$(cat /tmp/bg.rc)" = 0 ]; then
  /usr/bin/dd if="/dev/$H1" of=/tmp/big.r bs=1M skip=16 count=16 iflag=direct 2>/dev/null
  [ "$(md5 /tmp/big.bin)" = "$(md5 /tmp/big.r)" ] && pass io.flip "16 MiB written while the paths changed, read back equal" \
    || fail io.flip "read back differs"
else
  fail io.flip "the write failed: $(tail -1 /tmp/bg.err)"
fi
within 20 paths_are 1 optimized optimized \
  || fail ana.restored "path states: $(ana_of "$CA" 1) / $(ana_of "$CB" 1)"
kmsg ana

# --- a listener cut during an fio verify run: no I/O error, the data verifies, the path comes
# back by itself once the listener is added again --------------------------------------------------
( fio --name=cut --filename="/dev/$H1" --direct=1 --ioengine=psync --rw=write --bs=64k --size=24M --rate=6m \
      --verify=crc32c --verify_fatal=1 --output=/tmp/fio.out >/dev/null 2>/tmp/fio.err
  echo $? >/tmp/fio.rc ) &
BG=$!
request cut "$PORT_A"
wait $BG
sed 's/^/FIO /' /tmp/fio.out
if [ "$(cat /tmp/fio.rc)" = 0 ] && grep -q "err= 0" /tmp/fio.out && ! grep -qi "verify" /tmp/fio.err; then
  pass io.cut "fio wrote and verified 24 MiB through /dev/$H1 while listener $PORT_A was removed"
else
  fail io.cut "fio exit $(cat /tmp/fio.rc): $(tail -2 /tmp/fio.err | tr '\n' ' ') $(grep -m1 'err=' /tmp/fio.out)"
fi
state_of() { cat "/sys/class/nvme/$1/state" 2>/dev/null; }
state_is() { [ "$(state_of "$1")" = "$2" ]; }
if [ "$(state_of "$CA")" != live ]; then pass cut.down "$CA is $(state_of "$CA") while its listener is gone"
else fail cut.down "$CA is still live"; fi
request restore "$PORT_A"
if within 40 state_is "$CA" live && within 20 ana_is "$CA" 1 optimized; then
  rw io.restored "$H1" 4 && pass cut.restored "$CA live and optimized again, I/O through /dev/$H1"
else
  fail cut.restored "$CA is $(state_of "$CA"), path $(ana_of "$CA" 1)"
fi
kmsg cut

# --- namespaces made, resized and removed by RPC appear, change and go without a reconnect -------
request ns-add
if within 20 head_exists 2; then
  H2=$(head_of 2)
  sectors_are 2 $((RAM_MIB * 2048)) && pass ns.add "/dev/$H2 appeared, $(cat "/sys/block/$H2/size") sectors" \
    || fail ns.add "/dev/$H2 has $(cat "/sys/block/$H2/size") sectors"
  # A NULL namespace (the kind RPC can resize): writes are taken, reads give zeros.
  dd if=/dev/urandom of=/tmp/w.bin bs=1M count=4 2>/dev/null
  dd if=/dev/zero of=/tmp/z.bin bs=1M count=4 2>/dev/null
  if /usr/bin/dd if=/tmp/w.bin of="/dev/$H2" bs=1M oflag=direct conv=notrunc 2>/tmp/dd.err \
     && /usr/bin/dd if="/dev/$H2" of=/tmp/r.bin bs=1M count=4 iflag=direct 2>>/tmp/dd.err \
     && [ "$(md5 /tmp/r.bin)" = "$(md5 /tmp/z.bin)" ]; then
    pass io.ns2 "4 MiB written to /dev/$H2 (NULL) and zeros read back"
  else
    fail io.ns2 "I/O on /dev/$H2: $(tail -1 /tmp/dd.err)"
  fi
else
  fail ns.add "no device for namespace 2: $(ls /sys/block | tr '\n' ' ')"
fi
request ns-resize
within 20 sectors_are 2 $((RAM_MIB * 4096)) && pass ns.resize "/dev/$H2: $(cat "/sys/block/$H2/size") sectors" \
  || fail ns.resize "/dev/$H2: $(cat "/sys/block/$H2/size" 2>/dev/null) sectors"
request ns-remove
within 20 head_gone 2 && pass ns.remove "/dev/$H2 went away" || fail ns.remove "/dev/$H2 is still there"
[ "$(ctrl_at "$PORT_A")" = "$CA" ] && [ "$(ctrl_at "$PORT_B")" = "$CB" ] && pass ns.noreconnect "same controllers" \
  || fail ns.noreconnect "controllers changed: $(ctrl_at "$PORT_A") $(ctrl_at "$PORT_B")"
kmsg ns

nvme disconnect -n "$NQN" >/dev/null 2>&1
request done
exit $FAILED

#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Guest side of interop.kernel_ublk (busybox ash): everything runs inside the guest, on its own
# loopback. An nvtcp target serves a RAM namespace; `nvtcp engine --ublk` connects to it and
# shows the namespace as /dev/ublkb0; then unmodified programs use the block device:
#
#   ublk.device      /dev/ublkb0 appears with the namespace's size
#   ublk.fio.libaio  fio (libaio, O_DIRECT) random writes with crc32c verify
#   ublk.fio.uring   the same with io_uring, elsewhere on the device
#   ublk.mkfs        mkfs.ext4 on the device
#   ublk.fs          mount, write a file, fsync, unmount
#   ublk.readback    mount again: the file reads back intact (and again after the engine restarts:
#                    the data lives on the remote namespace, not in the engine)
#   ublk.stop        SIGINT to the engine removes /dev/ublkb0 and the engine exits 0
#   ublk.multipath   the engine over both of the target's listeners: the first path's listener
#                    is taken away (RPC) and given back under a verifying fio, which sees no error
. /guest/lib.sh
. /etc/nvtcp-test.conf
NQN=nqn.2026-11.io.nvtcp:ublk

load_mod ublk_drv || exit 1
load_mod crc32c_generic || exit 1  # ext4 asks the crypto API for crc32c at mount
load_mod ext4 || exit 1

/usr/bin/nvtcp target --ram "$RAM_MIB"M --listen 127.0.0.1:4420 --listen 127.0.0.1:4421 --discovery-port 0 \
  --nqn "$NQN" --rpc-socket /tmp/target.sock --ready-file /tmp/target.ready >/tmp/target.log 2>&1 &
TPID=$!
i=0
while [ ! -s /tmp/target.ready ] && [ $i -lt 300 ]; do usleep 100000; i=$((i + 1)); done
[ -s /tmp/target.ready ] || { cat /tmp/target.log; fail target "did not start"; exit 1; }

start_engine() {  # [another --controller for a second path]
  rm -f /tmp/engine.ready
  /usr/bin/nvtcp engine --controller "trtype:tcp traddr:127.0.0.1 trsvcid:4420 subnqn:$NQN" "$@" \
    --socket /tmp/engine.sock --ublk --ready-file /tmp/engine.ready >>/tmp/engine.log 2>&1 &
  EPID=$!
  i=0
  while [ ! -s /tmp/engine.ready ] && [ $i -lt 300 ]; do usleep 100000; i=$((i + 1)); done
  [ -s /tmp/engine.ready ]
}
stop_engine() {
  kill -INT "$EPID"
  wait "$EPID"
}

if ! start_engine; then
  cat /tmp/engine.log
  fail ublk.device "the engine did not start"
  exit 1
fi
DEV=/dev/ublkb0
size=$(blockdev --getsize64 $DEV 2>/dev/null)
if [ -b $DEV ] && [ "$size" = $((RAM_MIB * 1024 * 1024)) ]; then
  pass ublk.device "$DEV, $size bytes"
else
  fail ublk.device "$DEV: size '$size', expected $((RAM_MIB * 1024 * 1024))"
  cat /tmp/engine.log
  exit 1
fi
kmsg device

run_fio() {  # NAME ENGINE OFFSET
  if /usr/bin/fio --name="$1" --filename=$DEV --ioengine="$2" --direct=1 --rw=randwrite --bs=4k \
      --offset="$3" --size=16M --iodepth=16 --verify=crc32c --verify_fatal=1 --do_verify=1 \
      --output=/tmp/"$1".out >/tmp/"$1".err 2>&1; then
    pass "ublk.fio.$1" "$(grep -m1 -E 'write: IOPS' /tmp/"$1".out | sed 's/^ *//')"
  else
    fail "ublk.fio.$1" "$(tail -3 /tmp/"$1".err /tmp/"$1".out | tr '\n' ' ')"
  fi
  kmsg "fio.$1"
}
run_fio libaio libaio 0
run_fio uring io_uring 32M

if /usr/bin/mke2fs -t ext4 -q -F $DEV >/tmp/mkfs.log 2>&1; then pass ublk.mkfs; else fail ublk.mkfs "$(cat /tmp/mkfs.log)"; fi
kmsg mkfs

mkdir -p /mnt/u
if mount -t ext4 $DEV /mnt/u; then
  dd if=/dev/urandom of=/tmp/payload bs=1M count=4 2>/dev/null
  cp /tmp/payload /mnt/u/payload && { fsync /mnt/u/payload 2>/dev/null || sync; }
  want=$(md5sum </tmp/payload | cut -d' ' -f1)
  if umount /mnt/u; then pass ublk.fs "4 MiB written, fsync, unmounted"; else fail ublk.fs "umount"; fi
else
  fail ublk.fs "mount -t ext4 failed"
fi
kmsg fs

readback() {  # STEP
  if mount -t ext4 $DEV /mnt/u; then
    got=$(md5sum </mnt/u/payload | cut -d' ' -f1)
    umount /mnt/u
    if [ "$got" = "$want" ]; then pass "$1" "md5 $got"; else fail "$1" "md5 $got, wrote $want"; fi
  else
    fail "$1" "mount failed"
  fi
}
readback ublk.readback

# The engine goes and comes back: the device is the remote namespace, so the file is still there.
stop_engine
erc=$?
if [ -e $DEV ]; then fail ublk.stop "$DEV still there after the engine stopped"; \
elif [ $erc -ne 0 ]; then fail ublk.stop "the engine exited $erc"; else pass ublk.stop; fi
kmsg stop
if start_engine && [ -b $DEV ]; then readback ublk.readback.restart; else fail ublk.readback.restart "engine restart"; fi
stop_engine

# Two paths: the block device's requests go through the multipath queue pair. The listener
# the first path came through goes away under a rate-limited write-and-verify run (about 4 s
# of writes), then comes back; with one path only, the requests on it would fail with EIO.
listener() {  # add|remove
  /usr/bin/nvtcp rpc -s /tmp/target.sock "nvmf_subsystem_${1}_listener" --nqn "$NQN" --listen-address.trtype tcp \
    --listen-address.traddr 127.0.0.1 --listen-address.trsvcid 4420 >/dev/null
}
if start_engine --controller "trtype:tcp traddr:127.0.0.1 trsvcid:4421 subnqn:$NQN" && [ -b $DEV ] &&
    grep -q "over 2 paths" /tmp/engine.log; then
  /usr/bin/fio --name=mp --filename=$DEV --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --offset=64M \
    --size=8M --iodepth=8 --rate_iops=500 --verify=crc32c --verify_fatal=1 --do_verify=1 \
    --output=/tmp/mp.out >/tmp/mp.err 2>&1 &
  FPID=$!
  sleep 1
  listener remove || fail ublk.multipath "remove_listener"
  sleep 2
  listener add || fail ublk.multipath "add_listener"
  if wait "$FPID"; then
    pass ublk.multipath "no error through the cut: $(grep -m1 -E 'write: IOPS' /tmp/mp.out | sed 's/^ *//')"
  else
    fail ublk.multipath "$(tail -3 /tmp/mp.err /tmp/mp.out | tr '\n' ' ')"
  fi
  grep -q "stopped listening on 127.0.0.1:4420" /tmp/target.log || fail ublk.multipath "the listener was not cut"
  stop_engine
else
  fail ublk.multipath "the engine over two paths did not start"
  tail -5 /tmp/engine.log | while read -r l; do say "ENGINE $l"; done
fi
kmsg multipath
grep -E "ublk block requests|moved to another path|multipath|error" /tmp/engine.log | while read -r l; do say "ENGINE $l"; done
kill -INT "$TPID"
wait "$TPID"
[ "$FAILED" -eq 0 ]

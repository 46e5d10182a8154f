#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Guest side of interop.kernel_target: the Linux kernel's NVMe/TCP target (nvmet-tcp), configured
# through configfs, for the nvtcp host on the other side of QEMU's port forward.
#   subsystem $NQN, allow_any_host
#     namespace 1: null_blk /dev/nullb0 (1 GiB)      namespace 2: brd /dev/ram0 (64 MiB, RAM)
#   port 1: tcp 0.0.0.0:4420 (the discovery service answers there too)
#   port 2: tcp 0.0.0.0:4421, the same subsystem: a second path (nvmet reports ANA on every port)
# Prints READY, then takes commands on port $CTL_PORT (forwarded), one per connection:
# "ana PORT STATE" sets that port's ANA group 1 state (nvmet's names: optimized, non-optimized,
# inaccessible, ...); "cut PORT" takes the subsystem off that port (nvmet ends the controllers
# that came in through it) and "restore PORT" puts it back; anything else ends the script, so
# that /init dumps dmesg and powers off.
. /guest/lib.sh
. /etc/nvtcp-test.conf

load_mod crc32c_generic || exit 1
load_mod nvmet-tcp || exit 1
load_mod null_blk nr_devices=1 gb=1 bs=512 queue_mode=2 || exit 1
load_mod brd rd_nr=1 rd_size=65536 || exit 1
mount -t configfs none /sys/kernel/config 2>/dev/null || grep -q configfs /proc/mounts || { say "FAIL mount configfs"; exit 1; }

set -e
cd /sys/kernel/config/nvmet
mkdir "subsystems/$NQN"
echo 1 >"subsystems/$NQN/attr_allow_any_host"
echo NVTCPKERNEL01 >"subsystems/$NQN/attr_serial" 2>/dev/null || true
mkdir "subsystems/$NQN/namespaces/1"
echo -n /dev/nullb0 >"subsystems/$NQN/namespaces/1/device_path"
echo 1 >"subsystems/$NQN/namespaces/1/enable"
mkdir "subsystems/$NQN/namespaces/2"
echo -n /dev/ram0 >"subsystems/$NQN/namespaces/2/device_path"
echo 1 >"subsystems/$NQN/namespaces/2/enable"
mkdir ports/1
echo tcp >ports/1/addr_trtype
echo ipv4 >ports/1/addr_adrfam
echo 0.0.0.0 >ports/1/addr_traddr
echo 4420 >ports/1/addr_trsvcid
ln -s "/sys/kernel/config/nvmet/subsystems/$NQN" "ports/1/subsystems/$NQN"
mkdir ports/2
echo tcp >ports/2/addr_trtype
echo ipv4 >ports/2/addr_adrfam
echo 0.0.0.0 >ports/2/addr_traddr
echo 4421 >ports/2/addr_trsvcid
ln -s "/sys/kernel/config/nvmet/subsystems/$NQN" "ports/2/subsystems/$NQN"
set +e
say "nullb0 $(cat /sys/block/nullb0/size) sectors, ram0 $(cat /sys/block/ram0/size) sectors"
say "READY nvmet-tcp 0.0.0.0:4420 and 0.0.0.0:4421 $NQN"

# The host changes ANA states here, and connects with anything else when it is done (or the test
# gives up): then dmesg and poweroff.
while :; do
  cmd=$(nc -l -p "$CTL_PORT" </dev/null 2>/dev/null)
  say "control: '$cmd'"
  case $cmd in
    "ana "*)
      set -- $cmd
      if echo "$3" >"/sys/kernel/config/nvmet/ports/$2/ana_groups/1/ana_state"; then
        say "ANA port $2 group 1: $(cat "/sys/kernel/config/nvmet/ports/$2/ana_groups/1/ana_state")"
      else
        say "FAIL setting ANA port $2 to $3"
      fi
      ;;
    "cut "*)
      set -- $cmd
      rm "/sys/kernel/config/nvmet/ports/$2/subsystems/$NQN" && say "port $2: subsystem removed" ||
        say "FAIL removing the subsystem from port $2"
      ;;
    "restore "*)
      set -- $cmd
      ln -s "/sys/kernel/config/nvmet/subsystems/$NQN" "/sys/kernel/config/nvmet/ports/$2/subsystems/$NQN" &&
        say "port $2: subsystem back" || say "FAIL putting the subsystem back on port $2"
      ;;
    *) break ;;
  esac
done
exit 0

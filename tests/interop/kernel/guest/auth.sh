#!/bin/sh
# Guest side of interop.kernel_auth (busybox ash): DH-HMAC-CHAP between this Linux 6.12 and nvtcp.
#   1. The kernel host (nvme-cli 2.13 `nvme connect --dhchap-secret [--dhchap-ctrl-secret]`) against
#      the nvtcp target on the host (10.0.2.2:$TPORT): three hosts, each with the hash and DH group
#      the target is configured to choose for it (H1 SHA-256/ffdhe2048 one way, H2 SHA-384/ffdhe3072
#      both ways, H3 SHA-512/NULL both ways); each connects, writes 1 MiB of random data to the RAM
#      namespace at its own offset with O_DIRECT, reads it back (md5 equal) and disconnects. A wrong
#      host secret and a wrong controller secret: the connect fails, no controller is left.
#   2. This kernel's nvmet (configfs, 0.0.0.0:4420, forwarded) with host $HN allowed only with its
#      DH-HMAC-CHAP keys (dhchap_key, dhchap_ctrl_key, dhchap_hash hmac(sha384), dhchap_dhgroup
#      ffdhe4096), and $HN2 with a host key only (hmac(sha512), ffdhe3072): prints NVMET-READY and waits for the host script (the nvtcp host) to say it is done
#      on $CTL_PORT.
# Each step prints "NVTCP-GUEST [t] PASS|FAIL STEP: detail" for the host script.
. /guest/lib.sh
. /etc/nvtcp-test.conf

load_mod crc32c_generic || exit 1
load_mod nvme-core multipath=N || exit 1
load_mod nvme-tcp || exit 1
load_mod nvmet-tcp || exit 1
load_mod brd rd_nr=1 rd_size=32768 || exit 1
say "nvme-cli: $(nvme version 2>&1 | head -1)"

# find_ctrl HOSTNQN SUBNQN: the controller of that host to that subsystem.
find_ctrl() {
  local c
  for c in /sys/class/nvme/nvme*; do
    [ -e "$c/subsysnqn" ] || continue
    [ "$(cat "$c/subsysnqn")" = "$2" ] && [ "$(cat "$c/hostnqn")" = "$1" ] && echo "${c##*/}"
  done
}
# ns1 CTRL: the controller's block device of namespace 1, once the kernel has scanned it.
ns1() {
  local i=0 d
  while [ $i -lt 100 ]; do
    for d in /sys/class/nvme/"$1"/"$1"n*; do
      [ -e "$d" ] && [ "$(cat "/sys/block/${d##*/}/nsid" 2>/dev/null)" = 1 ] && { echo "${d##*/}"; return 0; }
    done
    usleep 100000; i=$((i + 1))
  done
  return 1
}
hostid_of() { echo "${1##*:uuid:}"; }

# authenticated STEP HOSTNQN KEY CTRLKEY OFFSET_MIB: connect, 1 MiB written and read back, disconnect.
authenticated() {
  local s=$1 h=$2 key=$3 ckey=$4 off=$5 c dev
  kmsg "$s.before" >/dev/null
  if ! nvme connect -t tcp -a 10.0.2.2 -s "$TPORT" -n "$NQN" --hostnqn="$h" --hostid="$(hostid_of "$h")" \
       --dhchap-secret="$key" ${ckey:+--dhchap-ctrl-secret="$ckey"} >/tmp/$s.out 2>&1; then
    fail "$s" "nvme connect failed: $(tail -1 /tmp/$s.out)"; kmsg "$s"; return
  fi
  c=$(find_ctrl "$h" "$NQN")
  [ -n "$c" ] && [ "$(cat "/sys/class/nvme/$c/state")" = live ] || { fail "$s" "no live controller"; kmsg "$s"; return; }
  dev=$(ns1 "$c") || { fail "$s" "$c has no namespace 1"; nvme disconnect -d "$c" >/dev/null 2>&1; return; }
  dd if=/dev/urandom of=/tmp/$s.data bs=64k count=16 2>/dev/null
  dd if=/tmp/$s.data of="/dev/$dev" bs=64k seek=$((off * 16)) oflag=direct 2>/tmp/$s.dd || { fail "$s" "write: $(tail -1 /tmp/$s.dd)"; }
  dd if="/dev/$dev" of=/tmp/$s.back bs=64k skip=$((off * 16)) count=16 iflag=direct 2>/tmp/$s.dd || { fail "$s" "read: $(tail -1 /tmp/$s.dd)"; }
  a=$(md5sum </tmp/$s.data | cut -d' ' -f1); b=$(md5sum </tmp/$s.back | cut -d' ' -f1)
  q=$(cat "/sys/class/nvme/$c/queue_count" 2>/dev/null)
  nvme disconnect -d "$c" >/dev/null 2>&1
  [ "$a" = "$b" ] || { fail "$s" "read back md5 $b, wrote $a"; kmsg "$s"; return; }
  pass "$s" "$c, $q queues, 1 MiB at $off MiB read back (md5 $a)"
  kmsg "$s"
}

# refused STEP HOSTNQN KEY CTRLKEY: the connect must fail and leave no controller.
refused() {
  local s=$1 h=$2 key=$3 ckey=$4
  if nvme connect -t tcp -a 10.0.2.2 -s "$TPORT" -n "$NQN" --hostnqn="$h" --hostid="$(hostid_of "$h")" \
       --dhchap-secret="$key" ${ckey:+--dhchap-ctrl-secret="$ckey"} >/tmp/$s.out 2>&1; then
    c=$(find_ctrl "$h" "$NQN")
    [ -n "$c" ] && nvme disconnect -d "$c" >/dev/null 2>&1
    fail "$s" "nvme connect succeeded with a wrong secret"
  else
    c=$(find_ctrl "$h" "$NQN")
    if [ -n "$c" ]; then fail "$s" "a controller ($c) is left after the refused connect"
    else pass "$s" "refused: $(tail -1 /tmp/$s.out)"; fi
  fi
  kmsg "$s"
}

say "=== kernel host -> nvtcp target"
authenticated h1.sha256.ffdhe2048 "$H1" "$K1" "" 0
authenticated h2.sha384.ffdhe3072.bi "$H2" "$K2" "$C2" 2
authenticated h3.sha512.null.bi "$H3" "$K3" "$C3" 4
refused wrong-host-secret "$H1" "$WRONG" ""
refused wrong-ctrl-secret "$H2" "$K2" "$WRONG"
authenticated h1.after-refusals "$H1" "$K1" "" 6

say "=== nvmet for the nvtcp host"
mount -t configfs none /sys/kernel/config 2>/dev/null || grep -q configfs /proc/mounts || { say "FAIL mount configfs"; exit 1; }
set -e
cd /sys/kernel/config/nvmet
mkdir "hosts/$HN"
echo "$KN" >"hosts/$HN/dhchap_key"
echo "$CN" >"hosts/$HN/dhchap_ctrl_key"
echo 'hmac(sha384)' >"hosts/$HN/dhchap_hash"
echo ffdhe4096 >"hosts/$HN/dhchap_dhgroup"
mkdir "hosts/$HN2"
echo "$KN2" >"hosts/$HN2/dhchap_key"
echo 'hmac(sha512)' >"hosts/$HN2/dhchap_hash"
echo ffdhe3072 >"hosts/$HN2/dhchap_dhgroup"
mkdir "subsystems/$KNQN"
echo 0 >"subsystems/$KNQN/attr_allow_any_host"
ln -s "/sys/kernel/config/nvmet/hosts/$HN" "subsystems/$KNQN/allowed_hosts/$HN"
ln -s "/sys/kernel/config/nvmet/hosts/$HN2" "subsystems/$KNQN/allowed_hosts/$HN2"
mkdir "subsystems/$KNQN/namespaces/1"
echo -n /dev/ram0 >"subsystems/$KNQN/namespaces/1/device_path"
echo 1 >"subsystems/$KNQN/namespaces/1/enable"
mkdir ports/1
echo tcp >ports/1/addr_trtype
echo ipv4 >ports/1/addr_adrfam
echo 0.0.0.0 >ports/1/addr_traddr
echo 4420 >ports/1/addr_trsvcid
ln -s "/sys/kernel/config/nvmet/subsystems/$KNQN" "ports/1/subsystems/$KNQN"
set +e
say "NVMET-READY $KNQN host $HN hash $(cat "hosts/$HN/dhchap_hash") group $(cat "hosts/$HN/dhchap_dhgroup")"
cmd=$(nc -l -p "$CTL_PORT" </dev/null 2>/dev/null)
say "control: '$cmd'"
kmsg nvmet
[ "$FAILED" -eq 0 ]

# SPDX-License-Identifier: Apache-2.0
# Helpers for the guest scripts (busybox ash), sourced by /init and /guest/run.sh.

# say TEXT: one console line, prefixed and stamped with the guest's uptime.
say() { echo "NVTCP-GUEST [$(cut -d' ' -f1 /proc/uptime)] $*"; }

# load_mod NAME [PARAMS...]: insmod NAME's dependencies, then NAME with PARAMS, in the order that
# /lib/modules/load.dep gives (computed on the host from the package's modules.dep). Modules already
# loaded are skipped; a built-in module has an empty list.
load_mod() {
  local name deps p m last
  name=$(echo "$1" | tr - _); shift
  if ! grep -q "^$name:" /lib/modules/load.dep; then say "FAIL load_mod: $name is not in load.dep"; return 1; fi
  deps=$(sed -n "s|^$name: *||p" /lib/modules/load.dep)
  last=""
  for p in $deps; do last=$p; done
  for p in $deps; do
    m=$(basename "$p" .ko | tr - _)
    [ -d "/sys/module/$m/sections" ] && continue
    if [ "$p" = "$last" ]; then
      insmod "/lib/modules/$p" "$@" || { say "FAIL insmod $p $*"; return 1; }
    else
      insmod "/lib/modules/$p" || { say "FAIL insmod $p"; return 1; }
    fi
  done
  return 0
}

FAILED=0
# pass NAME [DETAIL] / fail NAME [DETAIL]: the per-step markers the host script greps.
pass() { local s=$1; shift; say "PASS $s${*:+: $*}"; }
fail() { local s=$1; shift; say "FAIL $s${*:+: $*}"; FAILED=$((FAILED + 1)); }

# kmsg STEP: print and clear the kernel log since the last call, each line prefixed "KMSG STEP:".
kmsg() { dmesg -c 2>/dev/null | sed "s/^/KMSG $1: /"; }

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

# nvmet_serve SUBNQN ADDRESS PORT TSAS HOSTNQN...: in nvmet's configfs (run from
# /sys/kernel/config/nvmet, each hosts/HOSTNQN made by the caller with its keys) a subsystem that
# admits those hosts only, with /dev/ram0 as namespace 1, on port 1 at ADDRESS:PORT over TCP; TSAS
# tls1.3 makes the port require TLS ("" for none). Non-zero at the first step that fails.
nvmet_serve() {
  local nqn=$1 addr=$2 port=$3 tsas=$4 h
  shift 4
  mkdir "subsystems/$nqn" && echo 0 >"subsystems/$nqn/attr_allow_any_host" || return 1
  for h in "$@"; do ln -s "/sys/kernel/config/nvmet/hosts/$h" "subsystems/$nqn/allowed_hosts/$h" || return 1; done
  mkdir "subsystems/$nqn/namespaces/1" && echo -n /dev/ram0 >"subsystems/$nqn/namespaces/1/device_path" &&
    echo 1 >"subsystems/$nqn/namespaces/1/enable" || return 1
  mkdir ports/1 && echo tcp >ports/1/addr_trtype && echo ipv4 >ports/1/addr_adrfam &&
    echo "$addr" >ports/1/addr_traddr && echo "$port" >ports/1/addr_trsvcid || return 1
  if [ -n "$tsas" ]; then echo "$tsas" >ports/1/addr_tsas || return 1; fi
  ln -s "/sys/kernel/config/nvmet/subsystems/$nqn" "ports/1/subsystems/$nqn"
}

# connect_rw STEP HOSTNQN OFFSET_MIB CONNECT_OPTIONS...: nvme connect to $NQN at ${TADDR:-10.0.2.2}:$TPORT
# (the nvtcp target on the host unless TADDR says otherwise), 1 MiB of random data written to namespace 1 at OFFSET_MIB with
# O_DIRECT and read back (md5 equal), disconnect.
connect_rw() {
  local s=$1 h=$2 off=$3 c dev q tk a b
  shift 3
  kmsg "$s.before" >/dev/null
  if ! nvme connect -t tcp -a "${TADDR:-10.0.2.2}" -s "$TPORT" -n "$NQN" --hostnqn="$h" --hostid="$(hostid_of "$h")" \
       "$@" >/tmp/$s.out 2>&1; then
    fail "$s" "nvme connect failed: $(tail -1 /tmp/$s.out)"; kmsg "$s"; return
  fi
  c=$(find_ctrl "$h" "$NQN")
  [ -n "$c" ] && [ "$(cat "/sys/class/nvme/$c/state")" = live ] || { fail "$s" "no live controller"; kmsg "$s"; return; }
  dev=$(ns1 "$c") || { fail "$s" "$c has no namespace 1"; nvme disconnect -d "$c" >/dev/null 2>&1; return; }
  dd if=/dev/urandom of=/tmp/$s.data bs=64k count=16 2>/dev/null
  dd if=/tmp/$s.data of="/dev/$dev" bs=64k seek=$((off * 16)) oflag=direct 2>/tmp/$s.dd || fail "$s" "write: $(tail -1 /tmp/$s.dd)"
  dd if="/dev/$dev" of=/tmp/$s.back bs=64k skip=$((off * 16)) count=16 iflag=direct 2>/tmp/$s.dd || fail "$s" "read: $(tail -1 /tmp/$s.dd)"
  a=$(md5sum </tmp/$s.data | cut -d' ' -f1); b=$(md5sum </tmp/$s.back | cut -d' ' -f1)
  q=$(cat "/sys/class/nvme/$c/queue_count" 2>/dev/null)
  tk=$(cat "/sys/class/nvme/$c/tls_key" 2>/dev/null)
  nvme disconnect -d "$c" >/dev/null 2>&1
  [ "$a" = "$b" ] || { fail "$s" "read back md5 $b, wrote $a"; kmsg "$s"; return; }
  pass "$s" "$c, $q queues${tk:+, TLS key $tk}, 1 MiB at $off MiB read back (md5 $a)"
  kmsg "$s"
}

# connect_refused STEP HOSTNQN CONNECT_OPTIONS...: the same connect must fail and leave no controller.
connect_refused() {
  local s=$1 h=$2 c
  shift 2
  if nvme connect -t tcp -a "${TADDR:-10.0.2.2}" -s "$TPORT" -n "$NQN" --hostnqn="$h" --hostid="$(hostid_of "$h")" \
       "$@" >/tmp/$s.out 2>&1; then
    c=$(find_ctrl "$h" "$NQN")
    [ -n "$c" ] && nvme disconnect -d "$c" >/dev/null 2>&1
    fail "$s" "nvme connect succeeded"
  else
    c=$(find_ctrl "$h" "$NQN")
    if [ -n "$c" ]; then fail "$s" "a controller ($c) is left after the refused connect"
    else pass "$s" "refused: $(tail -1 /tmp/$s.out)"; fi
  fi
  kmsg "$s"
}

#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Guest side of interop.kernel_host: the Linux kernel's NVMe/TCP host (nvme-tcp) against the nvtcp
# target on the host machine, reached as 10.0.2.2 through QEMU's user-mode network.
# /etc/nvtcp-test.conf: NQN, HOSTNQN, TPORT (I/O port), DPORT (discovery port), RAM_SECTORS,
# NULL_SECTORS, FILE_SECTORS (namespace sizes in 512-byte sectors, to tell the block devices apart),
# DSYNC_DD (a dd that knows oflag=dsync, i.e. GNU dd staged by the host script; empty if there is none:
# busybox dd has no dsync, so without it the file steps issue no FUA writes).
# Every step prints "PASS step" or "FAIL step: why" and then the kernel messages it caused
# ("KMSG step: ..."). The reconnect step prints "KILL-TARGET" and waits for the host script to kill -9
# the target and start it again on the same port.
. /guest/lib.sh
. /etc/nvtcp-test.conf
DISC_NQN=nqn.2014-08.org.nvmexpress.discovery
# The boot log is not part of any step.
dmesg -c >/tmp/boot.dmesg 2>&1

load_mod crc32c_generic || exit 1
load_mod nvme-tcp || exit 1
[ -c /dev/nvme-fabrics ] || { fail modules "no /dev/nvme-fabrics after loading nvme-tcp"; exit 1; }
pass modules "nvme-core, nvme-fabrics, nvme-tcp, crc32c_generic loaded"
kmsg modules

CTRL=""
# connect STEP OPTIONS: writes the options to /dev/nvme-fabrics; sets CTRL (nvmeN) from the answer
# "instance=N,cntlid=M".
connect() {
  local step=$1 opts=$2 ans
  CTRL=""
  say "connect: $opts"
  exec 3<>/dev/nvme-fabrics
  if ! echo "$opts" >&3; then
    exec 3>&-
    fail "$step" "writing the connect options to /dev/nvme-fabrics failed"
    return 1
  fi
  read -r ans <&3
  exec 3>&-
  case $ans in
    instance=*) ;;
    *) fail "$step" "unexpected answer '$ans' from /dev/nvme-fabrics"; return 1 ;;
  esac
  ans=${ans#instance=}
  CTRL=nvme${ans%%,*}
  say "connected: $CTRL cntlid $(cat /sys/class/nvme/$CTRL/cntlid 2>/dev/null)"
  return 0
}

state() { cat "/sys/class/nvme/$1/state" 2>/dev/null || echo gone; }

# check_ctrl STEP SUBNQN PORT: the controller is live, for SUBNQN, over tcp to 10.0.2.2:PORT.
check_ctrl() {
  local step=$1 sub=$2 port=$3 d=/sys/class/nvme/$CTRL s a
  s=$(state "$CTRL")
  [ "$s" = live ] || { fail "$step" "$CTRL state is '$s', not live"; return 1; }
  [ "$(cat $d/subsysnqn)" = "$sub" ] || { fail "$step" "$CTRL subsysnqn is '$(cat $d/subsysnqn)'"; return 1; }
  [ "$(cat $d/transport)" = tcp ] || { fail "$step" "$CTRL transport is '$(cat $d/transport)'"; return 1; }
  a=$(cat $d/address)
  case $a in *traddr=10.0.2.2,trsvcid=$port*) ;; *) fail "$step" "$CTRL address is '$a'"; return 1 ;; esac
  return 0
}

# delete_ctrl STEP: disconnect (delete_controller) and wait until the controller is gone.
delete_ctrl() {
  local step=$1 i=0 b
  echo 1 >"/sys/class/nvme/$CTRL/delete_controller" || { fail "$step" "delete_controller write failed"; return 1; }
  while [ -e "/sys/class/nvme/$CTRL" ] && [ $i -lt 100 ]; do usleep 100000; i=$((i + 1)); done
  [ -e "/sys/class/nvme/$CTRL" ] && { fail "$step" "$CTRL still there 10 s after delete_controller"; return 1; }
  for b in /sys/block/nvme*; do [ -e "$b" ] && { fail "$step" "block device ${b##*/} left"; return 1; }; done
  pass "$step" "$CTRL deleted"
}

# find_ns STEP: RAM, NULL and FILE = the /dev/nvme* block devices of RAM_SECTORS, NULL_SECTORS and
# FILE_SECTORS sectors (only one controller is connected at a time). Waits up to 10 s for the
# namespace scan.
find_ns() {
  local step=$1 i=0 b sz
  RAM=""; NULL=""; FILE=""
  while [ $i -lt 100 ]; do
    for b in /sys/block/nvme*n*; do
      [ -e "$b" ] || continue
      sz=$(cat "$b/size")
      [ "$sz" = "$RAM_SECTORS" ] && RAM=/dev/${b##*/}
      [ "$sz" = "$NULL_SECTORS" ] && NULL=/dev/${b##*/}
      [ "$sz" = "$FILE_SECTORS" ] && FILE=/dev/${b##*/}
    done
    [ -n "$RAM" ] && [ -n "$NULL" ] && [ -n "$FILE" ] && [ -b "$RAM" ] && [ -b "$NULL" ] && [ -b "$FILE" ] && break
    usleep 100000; i=$((i + 1))
  done
  if [ -z "$RAM" ] || [ -z "$NULL" ] || [ -z "$FILE" ]; then
    fail "$step" "namespaces not found: $(for b in /sys/block/nvme*; do echo "${b##*/}=$(cat $b/size 2>/dev/null)"; done)"
    return 1
  fi
  pass "$step" "RAM namespace $RAM ($RAM_SECTORS sectors), NULL namespace $NULL ($NULL_SECTORS sectors), FILE namespace $FILE ($FILE_SECTORS sectors)"
}

# cache STEP: the kernel's view of the write cache (it follows VWC in Identify Controller): the FILE
# namespace's queue is "write back" with FUA; the controller-wide VWC bit makes every namespace of
# the controller write back, which is recorded for RAM and NULL.
cache() {
  local step=$1 q=/sys/block/${FILE##*/}/queue wc fua
  wc=$(cat "$q/write_cache" 2>/dev/null); fua=$(cat "$q/fua" 2>/dev/null)
  [ "$wc" = "write back" ] || { fail "$step" "$q/write_cache is '$wc', not 'write back' (no volatile write cache seen)"; return 1; }
  [ "$fua" = 1 ] || { fail "$step" "$q/fua is '$fua', not 1"; return 1; }
  pass "$step" "${FILE##*/}: write_cache '$wc', fua $fua (RAM ${RAM##*/}: '$(cat /sys/block/${RAM##*/}/queue/write_cache)', NULL ${NULL##*/}: '$(cat /sys/block/${NULL##*/}/queue/write_cache)')"
}

# file_io STEP MIB: 3 MiB of fresh random data on the FILE namespace at MIB MiB, all O_DIRECT:
#   MiB 0    4 x 256 KiB writes with O_DSYNC (R2T + H2CData): the kernel sets FUA on each
#   MiB 1    256 x 4 KiB writes with O_DSYNC (in-capsule): FUA again
#   MiB 2    1 MiB in 1 MiB writes without O_DSYNC, then fsync (conv=fsync) and `sync -d`: Flushes
# (without DSYNC_DD the first 2 MiB go like the third), then `blockdev --flushbufs`, and the 3 MiB
# read back with O_DIRECT must have the md5 written. Prints "FILEDATA STEP offset=BYTES bytes=BYTES
# md5=MD5 dsync_writes=N" for the host script, which finds the same bytes in the image file after the
# target stopped. Sets FILE_MD5 to the md5.
file_io() {
  local step=$1 mib=$2 got want nd=0
  FILE_MD5=""
  dd if=/dev/urandom of=/tmp/file.data bs=1M count=3 2>/dev/null
  want=$(md5 </tmp/file.data)
  if [ -n "$DSYNC_DD" ]; then
    $DSYNC_DD if=/tmp/file.data of="$FILE" bs=256k count=4 seek=$((mib * 4)) oflag=direct,dsync conv=notrunc 2>/tmp/dd.err \
      || { fail "$step" "O_DSYNC write 4 x 256 KiB failed: $(tail -1 /tmp/dd.err)"; return 1; }
    $DSYNC_DD if=/tmp/file.data of="$FILE" bs=4k count=256 skip=256 seek=$(((mib + 1) * 256)) oflag=direct,dsync conv=notrunc 2>/tmp/dd.err \
      || { fail "$step" "O_DSYNC write 256 x 4 KiB failed: $(tail -1 /tmp/dd.err)"; return 1; }
    nd=260
  else
    dd if=/tmp/file.data of="$FILE" bs=1M count=2 seek="$mib" oflag=direct conv=fsync 2>/tmp/dd.err \
      || { fail "$step" "dd write 2 x 1 MiB failed: $(tail -1 /tmp/dd.err)"; return 1; }
  fi
  dd if=/tmp/file.data of="$FILE" bs=1M count=1 skip=2 seek=$((mib + 2)) oflag=direct conv=fsync 2>/tmp/dd.err \
    || { fail "$step" "dd write + fsync of 1 MiB failed: $(tail -1 /tmp/dd.err)"; return 1; }
  sync -d "$FILE" || { fail "$step" "sync -d $FILE (fdatasync) failed"; return 1; }
  blockdev --flushbufs "$FILE" || { fail "$step" "blockdev --flushbufs $FILE failed"; return 1; }
  got=$(dd if="$FILE" bs=1M count=3 skip="$mib" iflag=direct 2>/tmp/dd.err | md5)
  [ "$got" = "$want" ] || { fail "$step" "3 MiB read back md5 $got, written $want: $(tail -1 /tmp/dd.err)"; return 1; }
  FILE_MD5=$want
  say "FILEDATA $step offset=$((mib * 1048576)) bytes=3145728 md5=$want dsync_writes=$nd"
  if [ "$nd" -gt 0 ]; then
    pass "$step" "3 MiB at $mib MiB: $nd O_DIRECT|O_DSYNC writes (256 KiB and 4 KiB) + 1 MiB then fsync, read back intact, md5 $want"
  else
    pass "$step" "3 MiB at $mib MiB: O_DIRECT writes then fsync (no dsync dd: no FUA), read back intact, md5 $want"
  fi
}

md5() { md5sum | cut -d' ' -f1; }
ZERO1M=$(dd if=/dev/zero bs=1M count=1 2>/dev/null | md5)
# A random 8 MiB pattern, made once.
dd if=/dev/urandom of=/tmp/pattern bs=1M count=8 2>/dev/null
PAT=$(md5 </tmp/pattern)
PAT1M=$(head -c 1048576 /tmp/pattern | md5)

# data STEP: on the RAM namespace, O_DIRECT: 8 MiB in 1 MiB writes at offset 0 (R2T + H2CData), 1 MiB
# in 4 KiB writes at 16 MiB (in-capsule), read both back and compare md5; a never-written MiB at
# 32 MiB reads as zeros.
data() {
  local step=$1 got
  dd if=/tmp/pattern of="$RAM" bs=1M count=8 oflag=direct conv=fsync 2>/tmp/dd.err \
    || { fail "$step" "dd write 8 x 1 MiB failed: $(tail -1 /tmp/dd.err)"; return 1; }
  dd if=/tmp/pattern of="$RAM" bs=4k count=256 seek=4096 oflag=direct conv=fsync 2>/tmp/dd.err \
    || { fail "$step" "dd write 256 x 4 KiB failed: $(tail -1 /tmp/dd.err)"; return 1; }
  got=$(dd if="$RAM" bs=1M count=8 iflag=direct 2>/tmp/dd.err | md5)
  [ "$got" = "$PAT" ] || { fail "$step" "8 MiB read back (1 MiB reads) md5 $got, written $PAT: $(tail -1 /tmp/dd.err)"; return 1; }
  got=$(dd if="$RAM" bs=4k skip=4096 count=256 iflag=direct 2>/tmp/dd.err | md5)
  [ "$got" = "$PAT1M" ] || { fail "$step" "1 MiB read back (4 KiB reads) md5 $got, written $PAT1M: $(tail -1 /tmp/dd.err)"; return 1; }
  got=$(dd if="$RAM" bs=64k skip=512 count=16 iflag=direct 2>/tmp/dd.err | md5)
  [ "$got" = "$ZERO1M" ] || { fail "$step" "never-written MiB at 32 MiB is not zeros (md5 $got)"; return 1; }
  pass "$step" "8 MiB (1 MiB I/Os) + 1 MiB (4 KiB I/Os) written and read back intact, md5 $PAT"
}

# null_io STEP: the NULL namespace reads zeros (16 MiB in 1 MiB and 1 MiB in 4 KiB reads) and takes
# writes.
null_io() {
  local step=$1 got z16
  z16=$(dd if=/dev/zero bs=1M count=16 2>/dev/null | md5)
  got=$(dd if="$NULL" bs=1M count=16 skip=100 iflag=direct 2>/tmp/dd.err | md5)
  [ "$got" = "$z16" ] || { fail "$step" "16 MiB read from NULL: md5 $got, not zeros: $(tail -1 /tmp/dd.err)"; return 1; }
  got=$(dd if="$NULL" bs=4k count=256 skip=1000 iflag=direct 2>/tmp/dd.err | md5)
  [ "$got" = "$ZERO1M" ] || { fail "$step" "1 MiB in 4 KiB reads from NULL: md5 $got: $(tail -1 /tmp/dd.err)"; return 1; }
  dd if=/tmp/pattern of="$NULL" bs=1M count=4 seek=200 oflag=direct conv=fsync 2>/tmp/dd.err \
    || { fail "$step" "dd write to NULL failed: $(tail -1 /tmp/dd.err)"; return 1; }
  pass "$step" "16 MiB + 1 MiB of zeros read, 4 MiB written"
}

# A run: connect with OPTS, find namespaces, the write cache, RAM, NULL and FILE I/O, optional
# keep-alive idle, disconnect.
# MIB: where on the FILE namespace the run's file step writes.
run() {
  local tag=$1 opts=$2 mib=$3 idle=${4:-0} cntlid s
  connect "connect.$tag" "transport=tcp,traddr=10.0.2.2,trsvcid=$TPORT,nqn=$NQN,hostnqn=$HOSTNQN,$opts" || { kmsg "connect.$tag"; return 1; }
  if check_ctrl "connect.$tag" "$NQN" "$TPORT"; then pass "connect.$tag" "$CTRL live, cntlid $(cat /sys/class/nvme/$CTRL/cntlid)"; fi
  kmsg "connect.$tag"
  if find_ns "ns.$tag"; then
    if [ "$tag" = plain ]; then nvme_cli nvme.idctrl; kmsg nvme.idctrl; fi
    cache "cache.$tag"; kmsg "cache.$tag"
    data "ram.$tag"; kmsg "ram.$tag"
    null_io "null.$tag"; kmsg "null.$tag"
    file_io "file.$tag" "$mib"; kmsg "file.$tag"
    [ "$tag" = plain ] && PLAIN_MD5=$FILE_MD5
  fi
  if [ "$idle" -gt 0 ]; then
    # Keep-alive: idle for longer than the KATO; the same association must still be live (a lost
    # keep-alive would have made the kernel reset and reconnect, or the target tear it down).
    cntlid=$(cat /sys/class/nvme/$CTRL/cntlid)
    say "idle for $idle s (keep_alive_tmo 5)"
    sleep "$idle"
    s=$(state "$CTRL")
    if [ "$s" != live ]; then fail "keepalive" "$CTRL state '$s' after $idle s idle"
    elif [ "$(cat /sys/class/nvme/$CTRL/cntlid)" != "$cntlid" ]; then fail "keepalive" "cntlid changed: the controller was re-created"
    elif dmesg | grep -qiE 'keep.?alive|error recovery|reconnect|resetting'; then fail "keepalive" "the kernel reset the controller: $(dmesg | grep -iE 'keep.?alive|error recovery|reconnect|resetting' | head -3)"
    elif ! dd if="$NULL" of=/dev/null bs=4k count=16 iflag=direct 2>/dev/null; then fail "keepalive" "I/O after the idle period failed"
    else pass "keepalive" "$CTRL still live with cntlid $cntlid after $idle s idle, I/O works"
    fi
    kmsg keepalive
  fi
  delete_ctrl "disconnect.$tag"
  kmsg "disconnect.$tag"
}

# --- discovery controller ------------------------------------------------------------------------
if connect discovery "transport=tcp,traddr=10.0.2.2,trsvcid=$DPORT,nqn=$DISC_NQN,hostnqn=$HOSTNQN"; then
  if check_ctrl discovery "$DISC_NQN" "$DPORT"; then
    pass discovery "$CTRL live: discovery controller on port $DPORT, cntlid $(cat /sys/class/nvme/$CTRL/cntlid)"
  fi
  delete_ctrl discovery.disconnect
fi
kmsg discovery

# --- the discovery log, read by nvme-cli through the kernel host (Get Log Page 0x70) --------------
mkdir -p /etc/nvme
echo "$HOSTNQN" >/etc/nvme/hostnqn
# discovery_log STEP [nvme discover options]: the log must list $NQN at trsvcid $TPORT over tcp.
discovery_log() {
  local step=$1; shift
  if ! nvme discover -t tcp -a 10.0.2.2 -s "$DPORT" -q "$HOSTNQN" "$@" >/tmp/disc.txt 2>&1; then
    sed "s/^/NVME $step: /" /tmp/disc.txt
    fail "$step" "nvme discover exited non-zero: $(tail -1 /tmp/disc.txt)"
    return 1
  fi
  sed "s/^/NVME $step: /" /tmp/disc.txt
  # Entries are blocks of "key: value" lines; the one for $NQN must say tcp and $TPORT.
  if ! awk -v nqn="$NQN" -v port="$TPORT" '
      /^=====Discovery Log Entry/ { if (sub_ok && tr_ok && port_ok) found = 1; sub_ok = tr_ok = port_ok = 0; next }
      /^subnqn:/ && $2 == nqn { sub_ok = 1 }
      /^trtype:/ && $2 == "tcp" { tr_ok = 1 }
      /^trsvcid:/ && $2 == port { port_ok = 1 }
      END { if (sub_ok && tr_ok && port_ok) found = 1; exit !found }' /tmp/disc.txt; then
    fail "$step" "no tcp entry for $NQN at trsvcid $TPORT in the discovery log"
    return 1
  fi
  pass "$step" "$(grep -m1 '^Discovery Log Number of Records' /tmp/disc.txt); entry for $NQN, trsvcid $TPORT"
}
discovery_log discovery.log
kmsg discovery.log
discovery_log discovery.log.digest --hdr-digest --data-digest
kmsg discovery.log.digest

# nvme_cli STEP: Identify Controller and Namespace through the kernel's admin passthrough (nvme-cli).
nvme_cli() {
  local step=$1
  if ! nvme id-ctrl "/dev/$CTRL" >/tmp/idctrl.txt 2>&1; then fail "$step" "nvme id-ctrl: $(tail -1 /tmp/idctrl.txt)"; return 1; fi
  if ! grep -qE "^subnqn +: $NQN\$" /tmp/idctrl.txt; then fail "$step" "id-ctrl subnqn: $(grep ^subnqn /tmp/idctrl.txt)"; return 1; fi
  # VWC 07h: a volatile write cache (the file namespace's), Flush to NSID FFFFFFFFh supported.
  if ! grep -qE "^vwc +: 0x7\$" /tmp/idctrl.txt; then fail "$step" "id-ctrl vwc: $(grep "^vwc " /tmp/idctrl.txt), want 0x7"; return 1; fi
  if ! nvme id-ns "$RAM" >/tmp/idns.txt 2>&1; then fail "$step" "nvme id-ns $RAM: $(tail -1 /tmp/idns.txt)"; return 1; fi
  if ! grep -qE "^nsze +: 0x20000\$" /tmp/idns.txt; then fail "$step" "id-ns $RAM nsze: $(grep ^nsze /tmp/idns.txt)"; return 1; fi
  pass "$step" "id-ctrl ($(grep -E '^(mn|fr|vwc) ' /tmp/idctrl.txt | tr -s ' ' | tr '\n' ' ')) and id-ns $RAM (nsze 0x20000)"
  # For the record only: the SMART / Health log (mandatory log page 0x02).
  if nvme smart-log "/dev/$CTRL" >/tmp/smart.txt 2>&1; then say "INFO smart-log: ok"
  else say "INFO smart-log failed: $(tail -1 /tmp/smart.txt)"; fi
}

# --- I/O runs ----------------------------------------------------------------------------------
KA="keep_alive_tmo=5,reconnect_delay=1,ctrl_loss_tmo=60"
PLAIN_MD5=""
run plain "$KA" 0 12
run digest "$KA,hdr_digest,data_digest" 4
run sqflow "$KA,disable_sqflow" 8

# --- reconnect: the target is killed (-9) and restarted on the same port ---------------------------
if connect connect.reconnect "transport=tcp,traddr=10.0.2.2,trsvcid=$TPORT,nqn=$NQN,hostnqn=$HOSTNQN,$KA" \
   && check_ctrl connect.reconnect "$NQN" "$TPORT" && find_ns ns.reconnect; then
  pass connect.reconnect "$CTRL live"
  dd if=/tmp/pattern of="$RAM" bs=1M count=1 oflag=direct conv=fsync 2>/dev/null
  # I/O in flight across the kill: a loop of 1 MiB reads from NULL until told to stop.
  rm -f /tmp/stop /tmp/bg.fail /tmp/bg.count
  (n=0; f=0
   while [ ! -f /tmp/stop ]; do
     if dd if="$NULL" of=/dev/null bs=64k count=16 iflag=direct 2>/dev/null; then n=$((n + 1)); else f=$((f + 1)); fi
   done
   echo "$n" >/tmp/bg.count; echo "$f" >/tmp/bg.fail) &
  bg=$!
  sleep 1
  kmsg connect.reconnect
  say "KILL-TARGET $CTRL"
  # Watch the state: it must leave live (the kernel sees the connection die), then come back.
  i=0; seen=""
  while [ $i -lt 300 ]; do
    s=$(state "$CTRL")
    case " $seen " in *" $s "*) ;; *) seen="$seen $s" ;; esac
    [ "$s" != live ] && break
    usleep 100000; i=$((i + 1))
  done
  if [ "$(state "$CTRL")" = live ]; then
    fail reconnect "$CTRL stayed live for 30 s after KILL-TARGET"
  else
    i=0
    while [ $i -lt 900 ]; do
      s=$(state "$CTRL")
      case " $seen " in *" $s "*) ;; *) seen="$seen $s" ;; esac
      [ "$s" = live ] && break
      [ "$s" = gone ] && break
      usleep 100000; i=$((i + 1))
    done
    if [ "$s" = live ]; then pass reconnect "$CTRL states:$seen; live again after $((i / 10)).$((i % 10)) s"
    else fail reconnect "$CTRL states:$seen; not live 90 s after the target went away"
    fi
  fi
  kmsg reconnect | tee /tmp/kmsg.reconnect
  if [ "$(state "$CTRL")" = live ]; then
    sleep 2
    touch /tmp/stop; wait $bg
    n=$(cat /tmp/bg.count 2>/dev/null); f=$(cat /tmp/bg.fail 2>/dev/null)
    if [ "${f:-1}" = 0 ] && [ "${n:-0}" -gt 0 ]; then pass io.reconnect "$n x 1 MiB reads from NULL across the kill and reconnect, no error"
    else fail io.reconnect "reads across the reconnect: ${n:-?} done, ${f:-?} failed"
    fi
    # RAM does not outlive its target: the restarted target's RAM namespace is another namespace,
    # with an identity of its own (NGUID, EUI-64, UUID). Linux compares them on a reconnect and
    # drops the old one rather than serve it as the new one; a rescan finds the new one, empty.
    changed=$({ cat /tmp/kmsg.reconnect; dmesg; } 2>/dev/null | grep -m1 'identifiers changed for nsid' \
      | sed 's/^KMSG [^ ]* //; s/^\[[^]]*\] //')
    if [ -z "$changed" ]; then
      fail ram.restarted "the restarted target's RAM namespace kept the old one's identity (no 'identifiers changed')"
    else
      old_ram=$RAM
      echo 1 >"/sys/class/nvme/$CTRL/rescan_controller" 2>/dev/null
      if find_ns ns.rescan; then
        got=$(dd if="$RAM" bs=1M count=1 iflag=direct 2>/dev/null | md5)
        if [ "$got" = "$ZERO1M" ]; then pass ram.restarted "$changed: $old_ram dropped; the new RAM namespace $RAM reads zeros after a rescan"
        else fail ram.restarted "the new RAM namespace $RAM reads md5 $got, not zeros"
        fi
      else
        fail ram.restarted "$changed, and a rescan found no RAM namespace"
      fi
    fi
    data ram.reconnect
    kmsg ram.reconnect
    got=$(dd if="$FILE" bs=1M count=3 iflag=direct 2>/dev/null | md5)
    if [ -z "$PLAIN_MD5" ]; then fail file.restarted "the plain run's file step did not write anything to compare"
    elif [ "$got" = "$PLAIN_MD5" ]; then pass file.restarted "the 3 MiB the plain run wrote before the kill read back intact from the new target (md5 $got)"
    else fail file.restarted "the 3 MiB the plain run wrote read md5 $got after the restart, written $PLAIN_MD5"
    fi
    kmsg file.restarted
    file_io file.reconnect 12
    kmsg file.reconnect
  else
    touch /tmp/stop; kill $bg 2>/dev/null
  fi
  delete_ctrl disconnect.reconnect
  kmsg disconnect.reconnect
else
  kmsg connect.reconnect
fi

say "DONE failed=$FAILED"
exit 0

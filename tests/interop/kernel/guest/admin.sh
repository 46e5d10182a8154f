#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Guest side of interop.kernel_admin (busybox ash): the nvme-cli commands a storage admin types,
# run twice with the same checks, first against the nvtcp target on the host (reached through QEMU's
# user-mode network), then against this guest's own nvmet (configfs, nvmet-tcp on 127.0.0.1:4420).
# Every step prints one line the host script reads:
#
#   NVTCP-GUEST [uptime] RESULT TARGET STEP VERDICT: detail
#
# TARGET is nvtcp or nvmet. VERDICT, for nvtcp: PASS, FAIL, or for a step named in NVTCP_PENDING
# (features the target does not have yet) PENDING when it fails and UNEXPECTED-PASS when it passes;
# for nvmet: PASS or NVMET-FAIL (the reference's own answer, never a failure of this test). A step
# that does not pass prints the nvme-cli output it judged, as "OUT TARGET.STEP: ..." lines.
#
# nvme_core is loaded with multipath=N: each controller (host A from connect-all with
# /etc/nvme/hostnqn, host B from `nvme connect -q -I`) gets its own /dev/nvmeXnY for the same
# namespace, so per-host commands (reservations) just name that host's device.
#
# Configuration (/etc/nvtcp-test.conf): NQN TPORT DPORT (the nvtcp target), HOSTNQN HOSTID HOSTNQN2
# HOSTID2, RAM_MIB FILE_MIB (namespace 1 = RAM, namespace 2 = file, on both targets), NVTCP_PENDING.
. /guest/lib.sh
. /etc/nvtcp-test.conf

NVMET_NQN=nqn.2026-11.io.nvtcp:guest-nvmet
KEY_A=41377   # 0xA1A1: host A's reservation key
KEY_B=45746   # 0xB2B2: host B's
SLOT=4096     # data steps address the RAM namespace in 4 KiB slots (LBA = slot * 4096 / block size)

# --- results -------------------------------------------------------------------------------------

T=""     # nvtcp | nvmet
W=""     # /tmp/$T: every nvme-cli output of the run, one file per command
LAST=""  # the last output file (printed when a step does not pass)
is_pending() { case " $NVTCP_PENDING " in *" $1 "*) return 0 ;; esac; return 1; }
ok() {
  if [ "$T" = nvtcp ] && is_pending "$1"; then say "RESULT $T $1 UNEXPECTED-PASS: $2"
  else say "RESULT $T $1 PASS: $2"; fi
}
bad() {
  if [ "$T" = nvmet ]; then say "RESULT $T $1 NVMET-FAIL: $2"
  elif is_pending "$1"; then say "RESULT $T $1 PENDING: $2"
  else say "RESULT $T $1 FAIL: $2"; FAILED=$((FAILED + 1)); fi
  [ -n "$LAST" ] && [ -f "$W/$LAST" ] && head -24 "$W/$LAST" | sed "s/^/OUT $T.$1: /"
}

# nv NAME ARGS...: nvme ARGS with stdout+stderr in $W/NAME (first line: the command); its status.
nv() {
  local n=$1; shift
  LAST=$n
  echo "\$ nvme $*" >"$W/$n"
  nvme "$@" >>"$W/$n" 2>&1
}
# lastline: what nvme-cli said last (for a JSON error object, its "error" text).
lastline() {
  if grep -q '"error":' "$W/$LAST"; then sed -n 's/^ *"error": *"\(.*\)",*$/\1/p' "$W/$LAST" | tail -1
  else tail -1 "$W/$LAST"; fi
}

# jv FILE KEY: the first value of "KEY":VALUE in nvme-cli's JSON (quotes and comma removed).
jv() { sed -n "s/^ *\"$2\": *\(.*\)$/\1/p" "$1" | head -1 | sed 's/,$//; s/^"//; s/"$//'; }
# jvi FILE KEY: the same, key matched without regard to case (keys differ between versions).
jvi() { grep -i "^ *\"$2\":" "$1" | head -1 | sed 's/^ *"[^"]*": *//; s/,$//; s/^"//; s/"$//'; }
# jrec FILE: each innermost JSON object on one line, "|key=value|key=value|".
jrec() {
  awk '/\{/ { rec = "" }
       /^ *"[^"]*":/ { l = $0; sub(/^ *"/, "", l); k = l; sub(/".*/, "", k); v = l; sub(/^[^"]*": */, "", v)
                       sub(/,$/, "", v); gsub(/^"|"$/, "", v); rec = rec "|" k "=" v }
       /\}/ { if (rec != "") print rec "|"; rec = "" }' "$1"
}
# hexnum VALUE: a number nvme-cli printed in hex, with or without 0x, as decimal.
hexnum() { local v=${1#0x}; printf '%d' "0x${v:-0}"; }
# scode FILE: the status nvme-cli reported, as SCT << 8 | SC (DNR and More masked off).
scode() {
  local h
  h=$(sed -n 's/.*(0x\([0-9a-fA-F]*\)).*/\1/p' "$1" | tail -1)
  [ -n "$h" ] || h=$(printf '%x' "$(sed -n 's/.*"status: \([0-9]*\)".*/\1/p' "$1" | tail -1)" 2>/dev/null)
  [ -n "$h" ] && echo $((0x$h & 0x7ff))
}
hex3() { printf '0x%03x' "$1"; }
md5() { md5sum <"$1" | cut -d' ' -f1; }
trim() { echo "$1" | sed 's/^ *//; s/ *$//'; }
bit() { [ $(((${1:-0} >> $2) & 1)) -eq 1 ]; }
# oncs_note BIT NAME: "" if Identify Controller ONCS has BIT, else why the step cannot pass (the
# command is still sent: what the target answers goes into the report).
oncs_note() { bit "$ONCS" "$1" || echo "ONCS $(printf 0x%x "$ONCS") has no bit $1 ($2); "; }

# --- devices -------------------------------------------------------------------------------------

# find_ctrl: guest/lib.sh.
# nsdev CTRL NSID: that controller's block device for the namespace (multipath=N: one per controller).
nsdev() {
  local d b
  for d in /sys/class/nvme/"$1"/"$1"n*; do
    [ -e "$d" ] || continue
    b=${d##*/}
    [ "$(cat "/sys/block/$b/nsid" 2>/dev/null)" = "$2" ] && echo "$b" && return 0
  done
  return 1
}
# wait_ns CTRL: until both namespaces' block devices exist (the kernel scans them asynchronously).
wait_ns() {
  local i=0
  while [ $i -lt 100 ]; do
    nsdev "$1" 1 >/dev/null && nsdev "$1" 2 >/dev/null && return 0
    usleep 100000; i=$((i + 1))
  done
  return 1
}
bs_of() { cat "/sys/block/$1/queue/logical_block_size"; }
# io NAME read|write|compare DEV SLOT FILE [BYTES]: one nvme-cli data command of BYTES (4 KiB) at the
# 4 KiB slot SLOT.
io() {
  local n=$1 op=$2 dev=$3 slot=$4 f=$5 size=${6:-4096} bs
  bs=$(bs_of "$dev")
  [ "$op" = read ] && rm -f "$f"
  nv "$n" "$op" "/dev/$dev" -s $((slot * SLOT / bs)) -c $((size / bs - 1)) -z "$size" -d "$f"
}
ctrl_count() { ls -d /sys/class/nvme/nvme* 2>/dev/null | wc -l; }

# --- the steps (globals: T W SUBNQN DADDR DPORT_T TADDR TPORT_T; CA CB RA FA RB FB once connected) ---

s_discover() {
  local s=discover rec
  nv discover discover -t tcp -a "$DADDR" -s "$DPORT_T" -o json || { bad $s "nvme discover exited non-zero: $(lastline)"; return; }
  jrec "$W/discover" >"$W/discover.rec"
  rec=$(grep -F "|subnqn=$SUBNQN|" "$W/discover.rec" | grep -F '|trtype=tcp|' | grep -F '|adrfam=ipv4|' \
        | grep -F '|subtype=nvme subsystem|' | grep -F "|traddr=$TADDR|" | grep -F "|trsvcid=$TPORT_T|")
  [ -n "$rec" ] || { bad $s "no record: subnqn $SUBNQN, tcp, ipv4, nvme subsystem, $TADDR:$TPORT_T"; return; }
  grep -qF '|subtype=current discovery subsystem|' "$W/discover.rec" \
    || { bad $s "no record for the current discovery subsystem"; return; }
  ok $s "$(grep -c . "$W/discover.rec") records via $DADDR:$DPORT_T; $SUBNQN at tcp $TADDR:$TPORT_T, plus the current discovery subsystem"
}

s_connect_all() {
  local s=connect-all n0 n1 st addr
  n0=$(ctrl_count)
  nv connectall connect-all -t tcp -a "$DADDR" -s "$DPORT_T" || { bad $s "nvme connect-all exited non-zero: $(lastline)"; return; }
  CA=$(find_ctrl "$HOSTNQN" "$SUBNQN")
  [ -n "$CA" ] && [ "$(echo "$CA" | wc -w)" -eq 1 ] || { bad $s "controllers of host A to $SUBNQN: '$CA' (want one)"; return; }
  n1=$(ctrl_count)
  [ "$n1" -eq $((n0 + 1)) ] || { bad $s "$((n1 - n0)) new controllers (want 1: the discovery controller must be gone)"; return; }
  st=$(cat "/sys/class/nvme/$CA/state"); addr=$(cat "/sys/class/nvme/$CA/address")
  [ "$st" = live ] && [ "$(cat "/sys/class/nvme/$CA/transport")" = tcp ] || { bad $s "$CA state $st"; return; }
  case ",$addr," in *",traddr=$TADDR,trsvcid=$TPORT_T,"*) ;; *) bad $s "$CA address '$addr'"; return ;; esac
  wait_ns "$CA" || { bad $s "$CA: namespaces 1 and 2 did not appear"; return; }
  # An admin types it twice: the second run connects nothing new.
  nv connectall2 connect-all -t tcp -a "$DADDR" -s "$DPORT_T"
  [ "$(ctrl_count)" -eq "$n1" ] || { bad $s "a second connect-all made $(($(ctrl_count) - n1)) more controllers"; return; }
  ok $s "$CA live, cntlid $(cat "/sys/class/nvme/$CA/cntlid"), $addr; a second connect-all adds nothing"
}

s_connect_host2() {
  local s=connect-host2
  nv connect2 connect -t tcp -a "$TADDR" -s "$TPORT_T" -n "$SUBNQN" -q "$HOSTNQN2" -I "$HOSTID2" \
    || { bad $s "nvme connect -q host B exited non-zero: $(lastline)"; return; }
  CB=$(find_ctrl "$HOSTNQN2" "$SUBNQN")
  [ -n "$CB" ] && [ "$(cat "/sys/class/nvme/$CB/state")" = live ] || { bad $s "no live controller for host B"; return; }
  [ "$(cat "/sys/class/nvme/$CB/hostid")" = "$HOSTID2" ] || { bad $s "$CB hostid $(cat "/sys/class/nvme/$CB/hostid")"; return; }
  [ "$(cat "/sys/class/nvme/$CB/cntlid")" != "$(cat "/sys/class/nvme/$CA/cntlid")" ] || { bad $s "host B's controller has host A's cntlid"; return; }
  wait_ns "$CB" || { bad $s "$CB: namespaces 1 and 2 did not appear"; return; }
  ok $s "$CB live, cntlid $(cat "/sys/class/nvme/$CB/cntlid") (host A: $CA, cntlid $(cat "/sys/class/nvme/$CA/cntlid"))"
}

s_list() {
  local s=list d c nsid bytes rec
  nv list list -o json || { bad $s "nvme list exited non-zero: $(lastline)"; return; }
  jrec "$W/list" >"$W/list.rec"
  for d in $RA $FA $RB $FB; do
    c=${d%n*}; nsid=$(cat "/sys/block/$d/nsid")
    bytes=$(( (nsid == 1 ? RAM_MIB : FILE_MIB) * 1048576 ))
    rec=$(grep -F "|DevicePath=/dev/$d|" "$W/list.rec")
    [ -n "$rec" ] || { bad $s "no entry for /dev/$d"; return; }
    for kv in "NameSpace=$nsid" "PhysicalSize=$bytes" "SectorSize=$(bs_of "$d")" \
              "ModelNumber=$(trim "$(cat "/sys/class/nvme/$c/model")")" \
              "SerialNumber=$(trim "$(cat "/sys/class/nvme/$c/serial")")" \
              "Firmware=$(trim "$(cat "/sys/class/nvme/$c/firmware_rev")")"; do
      case $rec in *"|$kv|"*) ;; *) bad $s "/dev/$d: want $kv in $rec"; return ;; esac
    done
  done
  ok $s "4 devices (2 hosts x 2 namespaces) with nsid, size, sector size, model, serial, firmware"
}

s_list_subsys() {
  local s=list-subsys h
  nv listsubsys list-subsys -o json || { bad $s "nvme list-subsys exited non-zero: $(lastline)"; return; }
  awk -F'"' '$2 == "HostNQN" { h = $4 } $2 == "HostID" { hi = $4 } $2 == "NQN" { n = $4 }
             $2 == "Name" && $4 ~ /^nvme[0-9]+$/ { p = $4 } $2 == "Transport" { t = $4 } $2 == "Address" { a = $4 }
             $2 == "State" { print "|host=" h "|hostid=" hi "|nqn=" n "|name=" p "|transport=" t "|address=" a "|state=" $4 "|" }' \
    "$W/listsubsys" >"$W/listsubsys.rec"
  for h in "$HOSTNQN $HOSTID $CA" "$HOSTNQN2 $HOSTID2 $CB"; do
    set -- $h
    grep -F "|host=$1|hostid=$2|nqn=$SUBNQN|name=$3|transport=tcp|address=traddr=$TADDR,trsvcid=$TPORT_T," "$W/listsubsys.rec" \
      | grep -qF '|state=live|' || { bad $s "no live tcp path $3 of host $1 to $SUBNQN"; return; }
  done
  ok $s "$SUBNQN: host A path $CA, host B path $CB, tcp $TADDR:$TPORT_T, live"
}

s_id_ctrl() {
  local s=id-ctrl f=$W/idctrl v
  [ "$IDCTRL_RC" -eq 0 ] || { LAST=idctrl; bad $s "nvme id-ctrl exited non-zero: $(lastline)"; return; }
  LAST=idctrl
  [ "$(jv "$f" subnqn)" = "$SUBNQN" ] || { bad $s "subnqn '$(jv "$f" subnqn)'"; return; }
  [ "$(jv "$f" cntlid)" = "$(cat "/sys/class/nvme/$CA/cntlid")" ] || { bad $s "cntlid $(jv "$f" cntlid), sysfs $(cat "/sys/class/nvme/$CA/cntlid")"; return; }
  for v in sn:serial mn:model fr:firmware_rev; do
    [ "$(trim "$(jv "$f" "${v%%:*}")")" = "$(trim "$(cat "/sys/class/nvme/$CA/${v#*:}")")" ] \
      || { bad $s "${v%%:*} '$(jv "$f" "${v%%:*}")' vs sysfs ${v#*:} '$(cat "/sys/class/nvme/$CA/${v#*:}")'"; return; }
  done
  bit "$(jv "$f" cmic)" 1 || { bad $s "CMIC $(jv "$f" cmic): bit 1 (more than one controller) clear, yet two hosts share it"; return; }
  [ "$(jv "$f" sqes)" = 102 ] && [ "$(jv "$f" cqes)" = 68 ] || { bad $s "SQES/CQES $(jv "$f" sqes)/$(jv "$f" cqes), fabrics need 0x66/0x44"; return; }
  [ "$(jv "$f" ioccsz)" -ge 4 ] && [ "$(jv "$f" iorcsz)" -ge 1 ] || { bad $s "IOCCSZ $(jv "$f" ioccsz) IORCSZ $(jv "$f" iorcsz)"; return; }
  [ "$(jv "$f" nn)" -ge 2 ] || { bad $s "NN $(jv "$f" nn)"; return; }
  [ $(($(jv "$f" ver) >> 16)) -ge 1 ] || { bad $s "VER $(jv "$f" ver)"; return; }
  [ "$(jv "$f" kas)" -ge 1 ] || { bad $s "KAS 0: fabrics controllers support keep-alive"; return; }
  bit "$(jv "$f" sgls)" 0 || { bad $s "SGLS $(jv "$f" sgls): no SGL support, fabrics need it"; return; }
  bit "$VWC" 0 || { bad $s "VWC $VWC: no volatile write cache reported, yet namespace 2 is a file on storage"; return; }
  ok $s "subnqn, cntlid $(jv "$f" cntlid), mn '$(trim "$(jv "$f" mn)")', fr '$(trim "$(jv "$f" fr)")', ver $(printf 0x%x "$(jv "$f" ver)"), cmic $(jv "$f" cmic), oncs $(printf 0x%x "$ONCS"), vwc $VWC, lpa $LPA, elpe $(jv "$f" elpe), nn $(jv "$f" nn)"
}

# idns NAME DEV: id-ns JSON in $W/NAME; sets NSZE and LBADS (the in-use format's data size, log2).
idns() {
  local flbas
  nv "$1" id-ns "/dev/$2" -o json || return 1
  NSZE=$(jv "$W/$1" nsze)
  flbas=$(($(jv "$W/$1" flbas) & 0xf))
  LBADS=$(sed -n 's/^ *"ds": *\([0-9]*\).*/\1/p' "$W/$1" | sed -n "$((flbas + 1))p")
}

s_id_ns() {
  local s=id-ns d nsid want f nguid
  for d in $RA $FA; do
    nsid=$(cat "/sys/block/$d/nsid"); want=$(( (nsid == 1 ? RAM_MIB : FILE_MIB) * 1048576 ))
    idns "idns$nsid" "$d" || { bad $s "nvme id-ns /dev/$d exited non-zero: $(lastline)"; return; }
    f=$W/idns$nsid
    [ "$(jv "$f" ncap)" = "$NSZE" ] && [ "$(jv "$f" nuse)" -le "$NSZE" ] || { bad $s "nsid $nsid: nsze $NSZE ncap $(jv "$f" ncap) nuse $(jv "$f" nuse)"; return; }
    [ $((1 << LBADS)) -eq "$(bs_of "$d")" ] || { bad $s "nsid $nsid: LBA data size 2^$LBADS, the kernel uses $(bs_of "$d")"; return; }
    [ $((NSZE << LBADS)) -eq "$want" ] || { bad $s "nsid $nsid: nsze $NSZE x 2^$LBADS = $((NSZE << LBADS)) bytes, want $want"; return; }
    bit "$(jv "$f" nmic)" 0 || { bad $s "nsid $nsid: NMIC $(jv "$f" nmic), yet two hosts' controllers share it"; return; }
  done
  # The same namespace through host B's controller.
  idns idnsB "$RB" || { bad $s "nvme id-ns /dev/$RB (host B) exited non-zero: $(lastline)"; return; }
  nguid=$(jv "$W/idns1" nguid)
  [ "$NSZE" = "$(jv "$W/idns1" nsze)" ] && [ "$(jv "$W/idnsB" nguid)" = "$nguid" ] && [ "$(jv "$W/idnsB" eui64)" = "$(jv "$W/idns1" eui64)" ] \
    || { bad $s "namespace 1 differs through host B: nsze $NSZE nguid $(jv "$W/idnsB" nguid)"; return; }
  ok $s "nsid 1: $(jv "$W/idns1" nsze) blocks of $(bs_of "$RA") B, nsid 2: $(jv "$W/idns2" nsze) of $(bs_of "$FA") B; nmic 1; same nsze/nguid/eui64 through host B; dlfeat $(jv "$W/idns1" dlfeat), rescap $(jv "$W/idns1" rescap)"
}

s_ns_descs() {
  local s=ns-descs f=$W/nsdescs types z32=00000000000000000000000000000000
  nv nsdescs ns-descs "/dev/$RA" -o json || { bad $s "nvme ns-descs exited non-zero: $(lastline)"; return; }
  types=$(grep -o '"Type":"[a-z0-9]*"' "$f" | cut -d'"' -f4 | tr '\n' ' ')
  case " $types" in *" eui64 "*|*" nguid "*|*" uuid "*) ;; *) bad $s "no EUI-64, NGUID or UUID descriptor: $types"; return ;; esac
  [ "$(jv "$f" csi)" = 0 ] || { bad $s "no CSI descriptor with the NVM command set (0): '$(jv "$f" csi)'"; return; }
  if [ "$(jv "$W/idns1" nguid)" != "$z32" ] && [ "$(jv "$f" nguid)" != "$(jv "$W/idns1" nguid)" ]; then
    bad $s "NGUID descriptor '$(jv "$f" nguid)' differs from id-ns nguid $(jv "$W/idns1" nguid)"; return
  fi
  if [ "$(jv "$W/idns1" eui64)" != 0000000000000000 ] && [ "$(jv "$f" eui64)" != "$(jv "$W/idns1" eui64)" ]; then
    bad $s "EUI-64 descriptor '$(jv "$f" eui64)' differs from id-ns eui64 $(jv "$W/idns1" eui64)"; return
  fi
  nv nsdescsB ns-descs "/dev/$RB" -o json || { bad $s "nvme ns-descs through host B exited non-zero: $(lastline)"; return; }
  sed 1d "$f" >"$f.a"; sed 1d "$W/nsdescsB" >"$f.b"
  cmp -s "$f.a" "$f.b" || { bad $s "host B sees other descriptors for namespace 1"; return; }
  ok $s "nsid 1: $types(uuid $(jv "$f" uuid)); identical through host B"
}

s_list_ns() {
  local s=list-ns got
  nv listns list-ns "/dev/$CA" -o json || { bad $s "nvme list-ns exited non-zero: $(lastline)"; return; }
  got=$(sed -n 's/^ *"nsid": *\([0-9]*\).*/\1/p' "$W/listns" | tr '\n' ' ')
  [ "$got" = "1 2 " ] || { bad $s "active namespaces '$got', want '1 2'"; return; }
  ok $s "active NSIDs: $got"
}

# smart NAME [NSID]: smart-log JSON into $W/NAME.
smart() { if [ -n "$2" ]; then nv "$1" smart-log "/dev/$CA" -n "$2" -o json; else nv "$1" smart-log "/dev/$CA" -o json; fi; }
# big_writes: 8 x 128 KiB nvme-cli writes (8 Write commands, 1 MiB) at 1 MiB into the RAM namespace.
big_writes() {
  local i
  dd if=/dev/urandom of=/tmp/w128k bs=128k count=1 2>/dev/null
  for i in 0 1 2 3 4 5 6 7; do io "bigw$i" write "$RA" $((256 + i * 32)) /tmp/w128k 131072 || return 1; done
}

s_smart_log() {
  local s=smart-log hw0 du0 hw1 du1 cw
  smart smart0 || { bad $s "nvme smart-log exited non-zero: $(lastline)"; return; }
  hw0=$(jv "$W/smart0" host_write_commands); du0=$(jv "$W/smart0" data_units_written)
  big_writes || { bad $s "nvme write of 128 KiB failed: $(lastline)"; return; }
  smart smart1 || { bad $s "nvme smart-log (second) exited non-zero: $(lastline)"; return; }
  hw1=$(jv "$W/smart1" host_write_commands); du1=$(jv "$W/smart1" data_units_written); cw=$(jv "$W/smart1" critical_warning)
  [ "$cw" = 0 ] || { bad $s "critical_warning $cw"; return; }
  [ $((hw1 - hw0)) -ge 8 ] || { bad $s "host_write_commands $hw0 -> $hw1 after 8 writes"; return; }
  [ $((du1 - du0)) -ge 2 ] || { bad $s "data_units_written $du0 -> $du1 after 1 MiB (2048 x 512 B = 2 units)"; return; }
  ok $s "controller-wide: host_write_commands $hw0 -> $hw1, data_units_written $du0 -> $du1 after 8 x 128 KiB; critical_warning 0"
}

s_smart_log_ns() {
  local s=smart-log-ns a0 a1 b0 b1 u0 u1
  bit "$LPA" 0 || { bad $s "LPA $LPA: bit 0 (SMART per namespace) clear"; return; }
  smart smartn1a 1 && smart smartn2a 2 || { bad $s "nvme smart-log -n exited non-zero: $(lastline)"; return; }
  a0=$(jv "$W/smartn1a" host_write_commands); u0=$(jv "$W/smartn1a" data_units_written); b0=$(jv "$W/smartn2a" host_write_commands)
  big_writes || { bad $s "nvme write of 128 KiB failed: $(lastline)"; return; }
  smart smartn1b 1 && smart smartn2b 2 || { bad $s "nvme smart-log -n (second) exited non-zero: $(lastline)"; return; }
  a1=$(jv "$W/smartn1b" host_write_commands); u1=$(jv "$W/smartn1b" data_units_written); b1=$(jv "$W/smartn2b" host_write_commands)
  [ $((a1 - a0)) -ge 8 ] && [ $((u1 - u0)) -ge 2 ] || { bad $s "nsid 1: host_write_commands $a0 -> $a1, data_units_written $u0 -> $u1 after 8 x 128 KiB to it"; return; }
  [ "$b1" = "$b0" ] || { bad $s "nsid 2: host_write_commands $b0 -> $b1, yet nothing was written to it"; return; }
  ok $s "-n 1: host_write_commands $a0 -> $a1, data_units_written $u0 -> $u1; -n 2 unchanged ($b0)"
}

s_error_log() {
  local s=error-log e0 e1 code sf n
  nv errlog0 error-log "/dev/$CA" -e 1 -o json || { bad $s "nvme error-log exited non-zero: $(lastline)"; return; }
  e0=$(jv "$W/errlog0" error_count)
  # A read of the first block past the end of namespace 1 must fail and be logged.
  nv readpast read "/dev/$RA" -s "$(jv "$W/idns1" nsze)" -c 0 -z "$(bs_of "$RA")" -d /tmp/readpast && { bad $s "a read past the end of namespace 1 succeeded"; return; }
  code=$(scode "$W/readpast")
  [ -n "$code" ] || { bad $s "no NVMe status for the read past the end: $(lastline)"; return; }
  nv errlog1 error-log "/dev/$CA" -e 1 -o json || { bad $s "nvme error-log (second) exited non-zero: $(lastline)"; return; }
  e1=$(jv "$W/errlog1" error_count); sf=$(jv "$W/errlog1" status_field); n=$(jv "$W/errlog1" nsid)
  [ "$e1" -gt "$e0" ] || { bad $s "error_count $e0 -> $e1 after a failed read"; return; }
  [ $((sf & 0x7ff)) -eq "$code" ] || { bad $s "newest entry status $(hex3 $((sf & 0x7ff))), the read got $(hex3 "$code")"; return; }
  [ "$n" = 1 ] && [ "$(jv "$W/errlog1" sqid)" -ge 1 ] || { bad $s "newest entry nsid $n sqid $(jv "$W/errlog1" sqid), want nsid 1 on an I/O queue"; return; }
  smart smarterr || { bad $s "nvme smart-log exited non-zero: $(lastline)"; return; }
  [ "$(jv "$W/smarterr" num_err_log_entries)" = "$e1" ] || { bad $s "SMART num_err_log_entries $(jv "$W/smarterr" num_err_log_entries), error log count $e1"; return; }
  ok $s "read past the end -> status $(hex3 "$code"); newest entry: error_count $e0 -> $e1, status $(hex3 $((sf & 0x7ff))), sqid $(jv "$W/errlog1" sqid), nsid 1, lba $(jv "$W/errlog1" lba); SMART num_err_log_entries $e1"
}

# effects SET OPCODE: the Commands Supported and Effects value (NVM command set) for an admin (acs)
# or I/O (io) opcode, 0 if not listed.
effects() {
  local v
  v=$(awk -v set="$1" -v op="$2" '/"command_set_identifier":/ { cs = $0; gsub(/[^0-9]/, "", cs) }
      cs == "0" && set == "acs" && $0 ~ "\"ACS_" op " \\(" { v = $0 }
      cs == "0" && set == "io" && $0 ~ "\"IOCS_" op " \\(" { v = $0 }
      END { sub(/.*: */, "", v); sub(/,$/, "", v); print v + 0 }' "$W/effects")
  echo "${v:-0}"
}

s_effects_log() {
  local s=effects-log op b ops
  bit "$LPA" 1 || { bad $s "LPA $LPA: bit 1 (Commands Supported and Effects log) clear"; return; }
  nv effects effects-log "/dev/$CA" -o json || { bad $s "nvme effects-log exited non-zero: $(lastline)"; return; }
  for op in 2 6 9 10 12 24; do bit "$(effects acs $op)" 0 || { bad $s "admin opcode $(printf %02xh $op) not CSUPP"; return; }; done
  for op in 0 1 2; do bit "$(effects io $op)" 0 || { bad $s "I/O opcode $(printf %02xh $op) not CSUPP"; return; }; done
  bit "$(effects io 1)" 1 || { bad $s "Write without LBCC"; return; }
  # ONCS and the effects log must agree on every optional command.
  for b in 0:5 2:9 3:8 5:13 5:14 5:17 5:21 7:12 8:25; do
    op=${b#*:}
    if bit "$ONCS" "${b%:*}"; then bit "$(effects io "$op")" 0 || { bad $s "ONCS bit ${b%:*} set, I/O opcode $(printf %02xh "$op") not CSUPP"; return; }
    else bit "$(effects io "$op")" 0 && { bad $s "I/O opcode $(printf %02xh "$op") CSUPP, ONCS bit ${b%:*} clear"; return; }; fi
  done
  ops=$(awk '/"command_set_identifier":/ { cs = $0; gsub(/[^0-9]/, "", cs) }
             cs == "0" && /"IOCS_[0-9]+ / { sub(/^ *"IOCS_/, ""); sub(/ .*/, ""); printf "%02Xh ", $0 }' "$W/effects")
  ok $s "admin 02h 06h 09h 0Ah 0Ch 18h CSUPP; NVM I/O opcodes ${ops}CSUPP, Write LBCC; agrees with ONCS $(printf 0x%x "$ONCS")"
}

s_supported_log_pages() {
  local s=supported-log-pages lids l
  nv slp supported-log-pages "/dev/$CA" -o json || { bad $s "nvme supported-log-pages exited non-zero: $(lastline)"; return; }
  lids=$(sed -n 's/^ *"lid_\(0x[0-9a-f]*\) *": *\([0-9]*\).*/\1:\2/p' "$W/slp" | while IFS=: read -r l v; do bit "$v" 0 && printf '%s ' "$l"; done)
  for l in 0x0 0x1 0x2 0x3; do case " $lids" in *" $l "*) ;; *) bad $s "LID $l not supported: $lids"; return ;; esac; done
  if bit "$LPA" 1; then case " $lids" in *" 0x5 "*) ;; *) bad $s "LPA bit 1 set, LID 05h not listed"; return ;; esac; fi
  if bit "$ONCS" 5; then case " $lids" in *" 0x80 "*) ;; *) bad $s "reservations (ONCS bit 5), LID 80h not listed"; return ;; esac; fi
  ok $s "LIDs $lids"
}

s_fw_log() {
  local s=fw-log afi slot rev fr
  nv fwlog fw-log "/dev/$CA" -o json || { bad $s "nvme fw-log exited non-zero: $(lastline)"; return; }
  afi=$(jv "$W/fwlog" "Active Firmware Slot (afi)"); slot=$((afi & 7))
  [ "$slot" -ge 1 ] || { bad $s "AFI $afi: no active slot (bits 2:0 must be 1-7)"; return; }
  rev=$(jv "$W/fwlog" "Firmware Rev Slot $slot"); fr=$(trim "$(cat "/sys/class/nvme/$CA/firmware_rev")")
  case $rev in *"($fr"*) ;; *) bad $s "slot $slot revision '$rev', id-ctrl fr '$fr'"; return ;; esac
  ok $s "active slot $slot, revision '$fr' as id-ctrl FR"
}

# feature FID CHANGEABLE NS_SPECIFIC [NSID] [CDW11]: Get Features with SEL 0-3. SEL 0 must succeed and
# its value pass the feature's own check; where ONCS bit 4 says the controller takes SEL, SEL 1-3 must
# succeed too, saved must read as the default unless the feature is saveable, and the capabilities
# must say changeable / namespace specific as the specification has the feature.
feature() {
  local fid=$1 chg=$2 nss=$3 nsid=$4 cdw11=$5 s sel v caps msg="" key args
  s=feature-$(printf %02Xh "$fid")
  args="-f $fid${nsid:+ -n $nsid}${cdw11:+ -c $cdw11}"
  for sel in 0 1 2 3; do
    case $sel in 0) key=Current ;; 1) key=Default ;; 2) key=Saved ;; 3) key="Supported capabilities" ;; esac
    if [ "$fid" = 129 ]; then
      # Host Identifier: nvme-cli's JSON shows only the first 8 of the 16 bytes; its plain output
      # dumps them all.
      # shellcheck disable=SC2086
      if nv "feat$fid.$sel" get-feature "/dev/$CA" $args -s $sel; then
        v=$(hexnum "$(sed -n 's/.* value: *\(0x\)\{0,1\}\([0-9a-fA-F]*\).*/\2/p' "$W/feat$fid.$sel" | head -1)")
      else v=""; fi
    else
      # shellcheck disable=SC2086
      if nv "feat$fid.$sel" get-feature "/dev/$CA" $args -s $sel -o json; then v=$(hexnum "$(jv "$W/feat$fid.$sel" "$key")")
      else v=""; fi
    fi
    eval "V$sel=\$v"
    if [ -z "$v" ]; then
      [ $sel -eq 0 ] || bit "$ONCS" 4 || continue
      LAST=feat$fid.$sel; bad "$s" "get-feature $args -s $sel (SEL $sel): $(lastline)"; return
    fi
  done
  LAST=feat$fid.0
  # The feature's own check of the current value.
  case $fid in
    2) [ $((V0 & 0x1f)) -le "$NPSS" ] || msg="power state $((V0 & 0x1f)) > NPSS $NPSS" ;;
    4) [ $((V0 & 0xffff)) -gt 0 ] || msg="over-temperature threshold 0 K" ;;
    5) bit "$V0" 16 && msg="DULBE set without being asked" ;;
    6) [ $((V0 & ~1)) -eq 0 ] || msg="reserved bits in $V0" ;;
    7) [ $(((V0 & 0xffff) + 1)) -ge $(($(cat "/sys/class/nvme/$CA/queue_count") - 1)) ] \
         && [ $(((V0 >> 16) + 1)) -ge $(($(cat "/sys/class/nvme/$CA/queue_count") - 1)) ] \
         || msg="NSQA/NCQA $(((V0 & 0xffff) + 1))/$(((V0 >> 16) + 1)) below the $(($(cat "/sys/class/nvme/$CA/queue_count") - 1)) I/O queues in use" ;;
    11) [ "$V0" -eq $((OAES & 0x80000b00)) ] || msg="$(printf 0x%x "$V0"), the kernel enables OAES & (NS attribute, FW activation, ANA, discovery) = $(printf 0x%x $((OAES & 0x80000b00)))" ;;
    15) [ "$V0" -eq $(($(cat "/sys/class/nvme/$CA/kato") * 1000)) ] || msg="KATO $V0 ms, the kernel connected with $(cat "/sys/class/nvme/$CA/kato") s" ;;
    129) v=$(sed -n 's/^0000: \(\([0-9a-f][0-9a-f] \)\{16\}\).*/\1/p' "$W/feat129.0" | tr -d ' ')
         [ "$v" = "$(echo "$HOSTID" | tr -d -)" ] || msg="host identifier '$v', host A connected with $HOSTID" ;;
    130) [ $((V0 & ~0xe)) -eq 0 ] || msg="reserved bits in the notification mask $(printf 0x%x "$V0")" ;;
    131) [ $((V0 & ~1)) -eq 0 ] || msg="reserved bits in $(printf 0x%x "$V0")" ;;
  esac
  [ -z "$msg" ] || { bad "$s" "$msg"; return; }
  if ! bit "$ONCS" 4; then
    ok "$s" "current $(printf 0x%x "$V0"); SEL 1-3 not checked (ONCS bit 4 clear: no Select field; they answered ${V1:-error}/${V2:-error}/${V3:-error})"
    return
  fi
  caps=$V3
  [ "$chg" = 1 ] && ! bit "$caps" 2 && { LAST=feat$fid.3; bad "$s" "capabilities $(printf 0x%x "$caps"): not changeable"; return; }
  [ "$nss" = 1 ] && ! bit "$caps" 1 && { LAST=feat$fid.3; bad "$s" "capabilities $(printf 0x%x "$caps"): not namespace specific"; return; }
  [ "$nss" = 0 ] && bit "$caps" 1 && { LAST=feat$fid.3; bad "$s" "capabilities $(printf 0x%x "$caps"): namespace specific"; return; }
  if ! bit "$caps" 0 && [ "$V2" != "$V1" ]; then LAST=feat$fid.2; bad "$s" "not saveable, yet saved $(printf 0x%x "$V2") != default $(printf 0x%x "$V1")"; return; fi
  ok "$s" "current $(printf 0x%x "$V0"), default $(printf 0x%x "$V1"), saved $(printf 0x%x "$V2"), capabilities $(printf 0x%x "$caps")"
}

s_features() {
  feature 2 1 0
  feature 4 1 0
  feature 5 1 0
  feature 6 1 0
  feature 7 0 0
  feature 8 1 0
  feature 10 1 0
  feature 11 1 0
  feature 15 1 0
  feature 22 1 0
  feature 129 0 0 "" 1
  feature 130 1 1 1
  # Reservation Persistence is changeable where persistence through power loss is (RESCAP bit 0).
  feature 131 "$(bit "$(jv "$W/idns1" rescap)" 0 && echo 1 || echo 0)" 1 1
}

s_set_feature_06h() {
  local s=set-feature-06h w0 v saved=""
  bit "$VWC" 0 || { bad $s "no volatile write cache (VWC $VWC)"; return; }
  nv vwc0 get-feature "/dev/$CA" -f 6 -o json || { bad $s "get-feature 06h: $(lastline)"; return; }
  w0=$(hexnum "$(jv "$W/vwc0" Current)")
  nv vwcoff set-feature "/dev/$CA" -f 6 -V 0 || { bad $s "set-feature 06h 0: $(lastline)"; return; }
  nv vwc1 get-feature "/dev/$CA" -f 6 -o json && v=$(hexnum "$(jv "$W/vwc1" Current)") || v=error
  [ "$v" = 0 ] || { bad $s "after set 0, current $v"; return; }
  # Write-through now: data written and read back on the file namespace.
  dd if=/dev/urandom of=/tmp/vwc.data bs=4k count=1 2>/dev/null
  io vwcw write "$FA" 3 /tmp/vwc.data && io vwcr read "$FA" 3 /tmp/vwc.back \
    || { bad $s "I/O with the cache off: $(lastline)"; return; }
  [ "$(md5 /tmp/vwc.back)" = "$(md5 /tmp/vwc.data)" ] || { bad $s "4 KiB written with the cache off read back different"; return; }
  if bit "$ONCS" 4 && [ -n "$V3_6" ] && ! bit "$V3_6" 0; then
    # Not saveable (SEL 3): Set Features with Save must fail with Feature Identifier Not Saveable.
    if nv vwcsave set-feature "/dev/$CA" -f 6 -V 1 -s; then bad $s "set-feature 06h --save succeeded on a feature that is not saveable"; return; fi
    [ "$(scode "$W/vwcsave")" = $((0x10d)) ] || { bad $s "set-feature --save: status $(hex3 "$(scode "$W/vwcsave")"), want 10Dh (Feature Identifier Not Saveable)"; return; }
    saved="; --save refused: Feature Identifier Not Saveable (10Dh)"
  fi
  nv vwcon set-feature "/dev/$CA" -f 6 -V 1 || { bad $s "set-feature 06h 1: $(lastline)"; return; }
  nv vwc2 get-feature "/dev/$CA" -f 6 -o json && v=$(hexnum "$(jv "$W/vwc2" Current)") || v=error
  [ "$v" = 1 ] || { bad $s "after set 1, current $v"; return; }
  [ "$w0" = 1 ] || nv vwcback set-feature "/dev/$CA" -f 6 -V "$w0"
  ok $s "WCE $w0 -> 0 (4 KiB written and read back on nsid 2) -> 1$saved"
}

s_write_read() {
  local s=write-read
  dd if=/dev/urandom of=/tmp/p0 bs=4k count=1 2>/dev/null
  io wr0 write "$RA" 0 /tmp/p0 || { bad $s "nvme write (host A, nsid 1): $(lastline)"; return; }
  io rd0 read "$RA" 0 /tmp/r0 || { bad $s "nvme read (host A): $(lastline)"; return; }
  [ "$(md5 /tmp/r0)" = "$(md5 /tmp/p0)" ] || { bad $s "4 KiB read back differs"; return; }
  io rd0b read "$RB" 0 /tmp/r0b || { bad $s "nvme read (host B): $(lastline)"; return; }
  [ "$(md5 /tmp/r0b)" = "$(md5 /tmp/p0)" ] || { bad $s "host B reads other data than host A wrote"; return; }
  io wr0f write "$FA" 0 /tmp/p0 && io rd0f read "$FA" 0 /tmp/r0f || { bad $s "nvme write/read on nsid 2: $(lastline)"; return; }
  [ "$(md5 /tmp/r0f)" = "$(md5 /tmp/p0)" ] || { bad $s "nsid 2: 4 KiB read back differs"; return; }
  ok $s "4 KiB on nsid 1 (read back by hosts A and B) and nsid 2, md5 $(md5 /tmp/p0)"
}

s_compare() {
  local s=compare c pre
  pre=$(oncs_note 0 Compare)
  dd if=/dev/urandom of=/tmp/c0 bs=4k count=1 2>/dev/null
  dd if=/dev/urandom of=/tmp/c1 bs=4k count=1 2>/dev/null
  io cmpw write "$RA" 1 /tmp/c0 || { bad $s "${pre}nvme write: $(lastline)"; return; }
  io cmpeq compare "$RA" 1 /tmp/c0 || { bad $s "${pre}compare with the data written: $(lastline)"; return; }
  io cmpne compare "$RA" 1 /tmp/c1 && { bad $s "${pre}compare with other data succeeded"; return; }
  c=$(scode "$W/cmpne")
  [ "$c" = $((0x285)) ] || { bad $s "${pre}compare with other data: status $(hex3 "${c:-0}"), want 285h (Compare Failure): $(lastline)"; return; }
  [ -z "$pre" ] || { bad $s "${pre}yet Compare works"; return; }
  ok $s "4 KiB equal: success; different: Compare Failure (285h)"
}

s_verify() {
  local s=verify c pre
  pre=$(oncs_note 7 Verify)
  nv verify verify "/dev/$RA" -s 0 -c $((4 * SLOT / $(bs_of "$RA") - 1)) || { bad $s "${pre}verify 16 KiB: $(lastline)"; return; }
  nv verifypast verify "/dev/$RA" -s "$(jv "$W/idns1" nsze)" -c 0 && { bad $s "${pre}verify past the end succeeded"; return; }
  c=$(scode "$W/verifypast")
  [ "$c" = $((0x80)) ] || { bad $s "${pre}verify past the end: status $(hex3 "${c:-0}"), want 080h (LBA Out of Range)"; return; }
  [ -z "$pre" ] || { bad $s "${pre}yet Verify works"; return; }
  ok $s "16 KiB: success; past the end: LBA Out of Range (080h)"
}

s_copy() {
  local s=copy bs nb msrc mssrl mcl pre
  pre=$(oncs_note 8 Copy)
  [ "$(jv "$W/idns1" mssrl)" -gt 0 ] && [ "$(jv "$W/idns1" mcl)" -gt 0 ] \
    || pre="${pre}id-ns MSSRL $(jv "$W/idns1" mssrl) MCL $(jv "$W/idns1" mcl) (Copy needs both non-zero); "
  bs=$(bs_of "$RA"); nb=$((SLOT / bs)); msrc=$(jv "$W/idns1" msrc)
  mssrl=$(jv "$W/idns1" mssrl); mcl=$(jv "$W/idns1" mcl)
  dd if=/dev/urandom of=/tmp/cp bs=4k count=2 2>/dev/null
  io cpw write "$RA" 16 /tmp/cp 8192 || { bad $s "nvme write: $(lastline)"; return; }
  if [ "$msrc" -ge 1 ] && [ "$mssrl" -ge "$nb" ] && [ "$mcl" -ge $((2 * nb)) ]; then
    # Two source ranges (slots 17 and 16, reversed) to one destination (slots 64-65).
    nv copy copy "/dev/$RA" -d $((64 * nb)) -s $((17 * nb)),$((16 * nb)) -b $((nb - 1)),$((nb - 1)) || { bad $s "${pre}copy of 2 ranges: $(lastline)"; return; }
    dd if=/tmp/cp bs=4k skip=1 count=1 of=/tmp/cp.want 2>/dev/null; dd if=/tmp/cp bs=4k count=1 >>/tmp/cp.want 2>/dev/null
  else
    # One range of 8 KiB (what a target that has not set the limits gets too: nvme-cli sends it).
    nv copy copy "/dev/$RA" -d $((64 * nb)) -s $((16 * nb)) -b $((2 * nb - 1)) || { bad $s "${pre}copy: $(lastline)"; return; }
    cp /tmp/cp /tmp/cp.want
  fi
  io cpr read "$RA" 64 /tmp/cp.back 8192 || { bad $s "nvme read: $(lastline)"; return; }
  [ "$(md5 /tmp/cp.back)" = "$(md5 /tmp/cp.want)" ] || { bad $s "${pre}the destination does not hold the source data"; return; }
  [ -z "$pre" ] || { bad $s "${pre}yet Copy works"; return; }
  ok $s "8 KiB copied to slot 64 (MSSRL $(jv "$W/idns1" mssrl), MCL $(jv "$W/idns1" mcl), MSRC $msrc), read back intact"
}

s_write_zeroes() {
  local s=write-zeroes pre
  pre=$(oncs_note 3 "Write Zeroes")
  dd if=/dev/urandom of=/tmp/wz bs=4k count=2 2>/dev/null
  dd if=/dev/zero of=/tmp/z4k bs=4k count=1 2>/dev/null
  io wzw write "$RA" 4 /tmp/wz 8192 || { bad $s "nvme write: $(lastline)"; return; }
  nv wz write-zeroes "/dev/$RA" -s $((4 * SLOT / $(bs_of "$RA"))) -c $((SLOT / $(bs_of "$RA") - 1)) || { bad $s "${pre}write-zeroes: $(lastline)"; return; }
  io wzr read "$RA" 4 /tmp/wz.back 8192 || { bad $s "nvme read: $(lastline)"; return; }
  dd if=/tmp/wz.back bs=4k count=1 of=/tmp/wz.0 2>/dev/null; dd if=/tmp/wz.back bs=4k skip=1 count=1 of=/tmp/wz.1 2>/dev/null
  dd if=/tmp/wz bs=4k skip=1 count=1 of=/tmp/wz.1want 2>/dev/null
  [ "$(md5 /tmp/wz.0)" = "$(md5 /tmp/z4k)" ] || { bad $s "the 4 KiB range does not read as zeros"; return; }
  [ "$(md5 /tmp/wz.1)" = "$(md5 /tmp/wz.1want)" ] || { bad $s "the next 4 KiB (not in the range) changed"; return; }
  # With Deallocate (DEAC) the range must read as zeros just the same.
  io wzdw write "$RA" 10 /tmp/wz || { bad $s "nvme write: $(lastline)"; return; }
  nv wzd write-zeroes "/dev/$RA" -s $((10 * SLOT / $(bs_of "$RA"))) -c $((SLOT / $(bs_of "$RA") - 1)) --deac \
    || { bad $s "write-zeroes --deac: $(lastline)"; return; }
  io wzdr read "$RA" 10 /tmp/wzd.back || { bad $s "nvme read: $(lastline)"; return; }
  [ "$(md5 /tmp/wzd.back)" = "$(md5 /tmp/z4k)" ] || { bad $s "the range zeroed with --deac does not read as zeros"; return; }
  nv wzpast write-zeroes "/dev/$RA" -s $(($(jv "$W/idns1" nsze) - 1)) -c 7 && { bad $s "write-zeroes across the end succeeded"; return; }
  [ "$(scode "$W/wzpast")" = $((0x80)) ] || { bad $s "write-zeroes across the end: status $(hex3 "$(scode "$W/wzpast")"), want 080h (LBA Out of Range)"; return; }
  [ -z "$pre" ] || { bad $s "${pre}yet Write Zeroes works"; return; }
  ok $s "4 KiB zeroed, the 4 KiB after it intact; with --deac: zeros; across the end: LBA Out of Range (080h)"
}

s_dsm() {
  local s=dsm d pre
  pre=$(oncs_note 2 "Dataset Management")
  dd if=/dev/urandom of=/tmp/dsm bs=4k count=1 2>/dev/null
  io dsmw write "$RA" 6 /tmp/dsm || { bad $s "nvme write: $(lastline)"; return; }
  nv dsm dsm "/dev/$RA" -s $((6 * SLOT / $(bs_of "$RA"))) -b $((SLOT / $(bs_of "$RA"))) -d || { bad $s "${pre}dsm --ad: $(lastline)"; return; }
  nv dsmpast dsm "/dev/$RA" -s $(($(jv "$W/idns1" nsze) - 4)) -b 8 -d && { bad $s "dsm of a range across the end succeeded"; return; }
  [ "$(scode "$W/dsmpast")" = $((0x80)) ] || { bad $s "dsm across the end: status $(hex3 "$(scode "$W/dsmpast")"), want 080h (LBA Out of Range)"; return; }
  [ -z "$pre" ] || { bad $s "${pre}yet Dataset Management works"; return; }
  d=$(jv "$W/idns1" dlfeat)
  if [ $((d & 7)) -eq 1 ]; then
    io dsmr read "$RA" 6 /tmp/dsm.back || { bad $s "nvme read: $(lastline)"; return; }
    [ "$(md5 /tmp/dsm.back)" = "$(md5 /tmp/z4k)" ] || { bad $s "DLFEAT says deallocated blocks read as zeros; the range does not"; return; }
    ok $s "4 KiB deallocated, reads as zeros (DLFEAT $d); across the end: LBA Out of Range (080h)"
  else
    ok $s "4 KiB deallocated (DLFEAT $d: contents after deallocation not promised); across the end: LBA Out of Range (080h)"
  fi
}

s_flush() {
  local s=flush
  # One namespace at a time: Linux (6.x) refuses passthrough commands whose NSID is not the block
  # device's own, so a Flush to FFFFFFFFh cannot be sent from here with two namespaces attached.
  nv flush flush "/dev/$FA" || { bad $s "flush of nsid 2 (the file, VWC $VWC): $(lastline)"; return; }
  nv flush1 flush "/dev/$RA" || { bad $s "flush of nsid 1 (RAM): $(lastline)"; return; }
  ok $s "nsid 2 (file, cache on) and nsid 1 (RAM): success"
}

# resv_report NAME DEV: Reservation Report (extended data structure: 128-bit host identifiers, as
# fabrics use) into $W/NAME and $W/NAME.rec; sets RTYPE REGCTL.
resv_report() {
  nv "$1" resv-report "/dev/$2" -e -o json || return 1
  RTYPE=$(jv "$W/$1" rtype); REGCTL=$(jv "$W/$1" regctl)
  jrec "$W/$1" | grep 'rkey=' >"$W/$1.rec"
}
hostid_hex() { echo "$1" | tr -d -; }
# rkey_entry NAME KEY: the registrant record of that key (rkey printed in decimal or hex).
rkey_entry() { grep -E "\|rkey=($2|$(printf '0x%x' "$2")|$(printf '0x%016x' "$2"))\|" "$W/$1.rec"; }

s_resv_register() {
  local s=resv-register pre
  pre=$(oncs_note 5 Reservations)
  [ "$(jv "$W/idns1" rescap)" != 0 ] || pre="${pre}id-ns RESCAP 0 on namespace 1; "
  nv regA resv-register "/dev/$RA" -k $KEY_A -r 0 || { bad $s "${pre}host A register key $KEY_A: $(lastline)"; return; }
  nv regB resv-register "/dev/$RB" -k $KEY_B -r 0 || { bad $s "${pre}host B register key $KEY_B: $(lastline)"; return; }
  [ -z "$pre" ] || { bad $s "${pre}yet Reservation Register works"; return; }
  ok $s "host A key $KEY_A, host B key $KEY_B registered on nsid 1 (RESCAP $(jv "$W/idns1" rescap))"
}

s_resv_acquire() {
  local s=resv-acquire c pre=""
  bit "$(jv "$W/idns1" rescap)" 1 || pre="RESCAP $(jv "$W/idns1" rescap) has no bit 1 (Write Exclusive); "
  nv acqA resv-acquire "/dev/$RA" -c $KEY_A -t 1 -a 0 || { bad $s "${pre}host A acquire Write Exclusive: $(lastline)"; return; }
  nv acqB resv-acquire "/dev/$RB" -c $KEY_B -t 1 -a 0 && { bad $s "host B acquired a reservation host A holds"; return; }
  c=$(scode "$W/acqB")
  [ "$c" = $((0x83)) ] || { bad $s "host B acquire while A holds it: status $(hex3 "${c:-0}"), want 083h (Reservation Conflict)"; return; }
  [ -z "$pre" ] || { bad $s "${pre}yet Write Exclusive works"; return; }
  ok $s "host A holds Write Exclusive; host B's acquire: Reservation Conflict (083h)"
}

s_resv_report() {
  local s=resv-report a b
  resv_report rptA "$RA" || { bad $s "resv-report (host A): $(lastline)"; return; }
  [ "$RTYPE" = 1 ] && [ "$REGCTL" = 2 ] || { bad $s "rtype $RTYPE regctl $REGCTL, want 1 (Write Exclusive) and 2 registrants"; return; }
  a=$(rkey_entry rptA $KEY_A); b=$(rkey_entry rptA $KEY_B)
  case $a in *"|rcsts=1|"*) ;; *) bad $s "host A's entry '$a': not the holder (rcsts bit 0)"; return ;; esac
  case $b in *"|rcsts=0|"*) ;; *) bad $s "host B's entry '$b': rcsts not 0"; return ;; esac
  case $a in *"|hostid=$(hostid_hex "$HOSTID")|"*) ;; *) bad $s "host A's entry '$a': hostid is not $HOSTID"; return ;; esac
  case $b in *"|hostid=$(hostid_hex "$HOSTID2")|"*) ;; *) bad $s "host B's entry '$b': hostid is not $HOSTID2"; return ;; esac
  resv_report rptB "$RB" || { bad $s "resv-report (host B): $(lastline)"; return; }
  [ "$RTYPE" = 1 ] && [ "$REGCTL" = 2 ] || { bad $s "host B's report: rtype $RTYPE regctl $REGCTL"; return; }
  ok $s "rtype 1, 2 registrants: key $KEY_A (host A, holder), key $KEY_B (host B), 128-bit host IDs; host B sees the same"
}

s_resv_conflict() {
  local s=resv-conflict c
  dd if=/dev/urandom of=/tmp/rv bs=4k count=1 2>/dev/null
  io rvwB write "$RB" 8 /tmp/rv && { bad $s "host B (not the holder) wrote under host A's Write Exclusive reservation"; return; }
  c=$(scode "$W/rvwB")
  [ "$c" = $((0x83)) ] || { bad $s "host B's write: status $(hex3 "${c:-0}"), want 083h (Reservation Conflict): $(lastline)"; return; }
  io rvrB read "$RB" 8 /tmp/rv.b || { bad $s "host B's read under Write Exclusive failed: $(lastline)"; return; }
  io rvwA write "$RA" 8 /tmp/rv || { bad $s "host A (the holder) could not write: $(lastline)"; return; }
  ok $s "host B write: Reservation Conflict (083h); host B read: success; host A write: success"
}

s_resv_release() {
  local s=resv-release
  nv relA resv-release "/dev/$RA" -c $KEY_A -t 1 -a 0 || { bad $s "host A release: $(lastline)"; return; }
  resv_report rptrel "$RA" || { bad $s "resv-report after release: $(lastline)"; return; }
  [ "$RTYPE" = 0 ] && [ "$REGCTL" = 2 ] || { bad $s "after release: rtype $RTYPE regctl $REGCTL, want 0 and 2 registrants"; return; }
  io rvwB2 write "$RB" 8 /tmp/rv || { bad $s "host B's write after the release failed: $(lastline)"; return; }
  ok $s "released; report: no reservation, 2 registrants; host B writes again"
}

s_resv_preempt() {
  local s=resv-preempt
  # Host A preempts host B's registration (no reservation held: B is just unregistered).
  nv preA resv-acquire "/dev/$RA" -c $KEY_A -p $KEY_B -t 1 -a 1 || { bad $s "host A preempt of key $KEY_B: $(lastline)"; return; }
  resv_report rptpre "$RA" || { bad $s "resv-report after preempt: $(lastline)"; return; }
  [ "$REGCTL" = 1 ] && [ -n "$(rkey_entry rptpre $KEY_A)" ] || { bad $s "after preempt: regctl $REGCTL, want host A alone"; return; }
  ok $s "host B's registration preempted; host A alone registered"
}

s_resv_notif_log() {
  local s=resv-notif-log t n
  nv notifB resv-notif-log "/dev/$CB" -o json || { bad $s "resv-notif-log (host B): $(lastline)"; return; }
  t=$(jvi "$W/notifB" rn_log_type); n=$(jvi "$W/notifB" nsid)
  [ "$t" = 1 ] && [ "$n" = 1 ] || { bad $s "host B's log page: type '$t' nsid '$n', want 1 (Registration Preempted) on nsid 1"; return; }
  [ "$(jvi "$W/notifB" count)" -ge 1 ] || { bad $s "log page count $(jvi "$W/notifB" count)"; return; }
  ok $s "host B: Registration Preempted on nsid 1, count $(jvi "$W/notifB" count)"
}

resv_cleanup() {
  nvme resv-release "/dev/$RA" -c $KEY_A -t 1 -a 0 >/dev/null 2>&1
  nvme resv-register "/dev/$RA" -c $KEY_A -r 1 >/dev/null 2>&1
  nvme resv-register "/dev/$RB" -c $KEY_B -r 1 >/dev/null 2>&1
}

s_disconnect_all() {
  local s=disconnect-all c
  nv disc disconnect-all || { bad $s "nvme disconnect-all: $(lastline)"; return; }
  for c in /sys/class/nvme/nvme*; do
    [ -e "$c/subsysnqn" ] && [ "$(cat "$c/subsysnqn")" = "$SUBNQN" ] && { bad $s "${c##*/} still connected"; return; }
  done
  ok $s "no controller left"
}

# suite TARGET: every step in order against SUBNQN (discovery at DADDR:DPORT_T, I/O at TADDR:TPORT_T).
suite() {
  T=$1; W=/tmp/$T; mkdir -p "$W"
  CA=""; CB=""
  say "=== $T: $SUBNQN, discovery $DADDR:$DPORT_T, I/O $TADDR:$TPORT_T"
  s_discover
  s_connect_all
  [ -n "$CA" ] || { say "RESULT $T connect-all ABORT: no controller, the remaining steps cannot run"; return; }
  s_connect_host2
  [ -n "$CB" ] || { say "RESULT $T connect-host2 ABORT: no controller for host B"; return; }
  RA=$(nsdev "$CA" 1); FA=$(nsdev "$CA" 2); RB=$(nsdev "$CB" 1); FB=$(nsdev "$CB" 2)
  say "$T: host A $CA (nsid 1 /dev/$RA, nsid 2 /dev/$FA), host B $CB (nsid 1 /dev/$RB, nsid 2 /dev/$FB)"
  if nv idctrl id-ctrl "/dev/$CA" -o json; then IDCTRL_RC=0; else IDCTRL_RC=1; fi
  ONCS=$(jv "$W/idctrl" oncs); VWC=$(jv "$W/idctrl" vwc); LPA=$(jv "$W/idctrl" lpa)
  OAES=$(jv "$W/idctrl" oaes); NPSS=$(jv "$W/idctrl" npss)
  : "${ONCS:=0}" "${VWC:=0}" "${LPA:=0}" "${OAES:=0}" "${NPSS:=0}"
  idns idns1 "$RA" >/dev/null 2>&1   # namespace 1's data for the steps before id-ns
  s_list; s_list_subsys; s_id_ctrl; s_id_ns; s_ns_descs; s_list_ns
  s_smart_log; s_smart_log_ns; s_error_log; s_effects_log; s_supported_log_pages; s_fw_log
  s_features
  V3_6=""; bit "$ONCS" 4 && V3_6=$(hexnum "$(jv "$W/feat6.3" "Supported capabilities")")
  s_set_feature_06h
  s_write_read; s_compare; s_verify; s_copy; s_write_zeroes; s_dsm; s_flush
  s_resv_register; s_resv_acquire; s_resv_report; s_resv_conflict; s_resv_release; s_resv_preempt; s_resv_notif_log
  resv_cleanup
  s_disconnect_all
  kmsg "$T"
}

# --- setup -------------------------------------------------------------------------------------

load_mod crc32c_generic || exit 1
load_mod nvme-core multipath=N || exit 1
load_mod nvme-tcp || exit 1
load_mod nvmet-tcp || exit 1
load_mod loop || exit 1
[ "$(cat /sys/module/nvme_core/parameters/multipath)" = N ] || say "WARN nvme_core multipath is $(cat /sys/module/nvme_core/parameters/multipath)"
mkdir -p /etc/nvme
echo "$HOSTNQN" >/etc/nvme/hostnqn
echo "$HOSTID" >/etc/nvme/hostid
say "nvme-cli: $(nvme version | tr '\n' ' ')"

# nvtcp: the target listens on the host's 127.0.0.1:TPORT and its discovery log says so; in here
# 127.0.0.1 is the guest's own loopback, so a busybox nc relay (one child per connection) carries
# 127.0.0.1:TPORT to 10.0.2.2:TPORT (QEMU's user-mode gateway = the host's 127.0.0.1). connect-all
# then dials exactly what the log advertises. Discovery itself goes to 10.0.2.2:DPORT directly.
nc -ll -p "$TPORT" -e nc 10.0.2.2 "$TPORT" >/dev/null 2>&1 &
RELAY=$!
i=0
while ! netstat -ltn 2>/dev/null | grep -q ":$TPORT "; do
  [ $i -lt 50 ] || { say "FAIL relay: nothing listens on $TPORT"; break; }
  usleep 100000; i=$((i + 1))
done
SUBNQN=$NQN DADDR=10.0.2.2 DPORT_T=$DPORT TADDR=127.0.0.1 TPORT_T=$TPORT
dmesg -c >/dev/null   # from here on, each suite's kernel messages go to the console as KMSG lines
suite nvtcp
kill "$RELAY" 2>/dev/null

# nvmet: namespace 1 = a loop device over a file in tmpfs (RAM, a block device with I/O statistics
# for SMART), namespace 2 = a file (buffered I/O: tmpfs has no O_DIRECT), tcp 127.0.0.1:4420.
truncate -s "${RAM_MIB}M" /tmp/nvmet-ram.img && truncate -s "${FILE_MIB}M" /tmp/nvmet-file.img
LOOP=$(losetup -f) && losetup "$LOOP" /tmp/nvmet-ram.img || { say "FAIL losetup"; exit 1; }
mount -t configfs none /sys/kernel/config 2>/dev/null
if ( set -e
     cd /sys/kernel/config/nvmet
     mkdir "subsystems/$NVMET_NQN"
     echo 1 >"subsystems/$NVMET_NQN/attr_allow_any_host"
     mkdir "subsystems/$NVMET_NQN/namespaces/1"
     echo -n "$LOOP" >"subsystems/$NVMET_NQN/namespaces/1/device_path"
     echo 1 >"subsystems/$NVMET_NQN/namespaces/1/enable"
     mkdir "subsystems/$NVMET_NQN/namespaces/2"
     echo -n /tmp/nvmet-file.img >"subsystems/$NVMET_NQN/namespaces/2/device_path"
     echo 1 >"subsystems/$NVMET_NQN/namespaces/2/buffered_io"
     echo 1 >"subsystems/$NVMET_NQN/namespaces/2/enable"
     mkdir ports/1
     echo tcp >ports/1/addr_trtype; echo ipv4 >ports/1/addr_adrfam
     echo 127.0.0.1 >ports/1/addr_traddr; echo 4420 >ports/1/addr_trsvcid
     ln -s "/sys/kernel/config/nvmet/subsystems/$NVMET_NQN" "ports/1/subsystems/$NVMET_NQN" ); then
  say "nvmet: $NVMET_NQN on tcp 127.0.0.1:4420 (nsid 1 $LOOP, nsid 2 /tmp/nvmet-file.img)"
  SUBNQN=$NVMET_NQN DADDR=127.0.0.1 DPORT_T=4420 TADDR=127.0.0.1 TPORT_T=4420
  suite nvmet
else
  say "RESULT nvmet setup ABORT: configuring nvmet through configfs failed"
fi
say "DONE failed=$FAILED"
exit 0

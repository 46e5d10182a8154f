#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# interop.kernel_host: the Linux kernel's NVMe/TCP host (nvme-tcp) against the nvtcp target.
#
#   kernel_host_test.sh path/to/nvtcp CACHE_DIR
#
# Runs `nvtcp target --ram 64M --null 1G --file WORK/ns.img,32M --listen 127.0.0.1:PORT
# --discovery-port PORT2 --nqn nqn.2026-11.io.nvtcp:fromkernel` here (namespaces 1 NULL, 2 RAM, 3 FILE;
# the guest tells them apart by size) and boots Debian's 6.1 kernel under QEMU (TCG, see common.sh)
# with guest/host.sh, which reaches the target as 10.0.2.2 (QEMU's user-mode gateway) and drives the
# kernel host by writing connect options to /dev/nvme-fabrics. WORK is a mktemp directory in /tmp, or
# next to the nvtcp binary if /tmp is tmpfs: the image must be on storage, where the target reports a
# volatile write cache (VWC 07h) for it, so the kernel sees a write-back device with FUA. busybox dd
# has no oflag=dsync, so this machine's GNU dd (with its loader and libc) is added to the initramfs as
# /opt/gnu-dd/dd for the O_DIRECT|O_DSYNC writes (without one, no FUA writes are issued or required).
# Guest steps, each printing PASS/FAIL on the console (this script requires every one of them to PASS):
#
#   discovery            connect to the discovery NQN on PORT2: controller live, then deleted
#   discovery.log[.digest]  `nvme discover` (Debian's nvme-cli in the guest) through the kernel host,
#                        digests off and on: the log lists the subsystem over tcp at PORT
#   nvme.idctrl          (plain run) `nvme id-ctrl` / `nvme id-ns` through the kernel's admin
#                        passthrough: subnqn, vwc 0x7, nsze of the RAM namespace (smart-log only
#                        reported)
#   plain                keep_alive_tmo=5,reconnect_delay=1,ctrl_loss_tmo=60, no digests
#   digest               + hdr_digest,data_digest (the target log must show both digests on)
#   sqflow               + disable_sqflow (Connect CATTR: the target may answer reads with a C2HData
#                          carrying SUCCESS instead of a CapsuleResp)
#       each run: connect (live, subsysnqn, tcp, address), namespaces by size (ns), the FILE
#       namespace's /sys/block/DEV/queue/write_cache is "write back" and queue/fua 1 (cache), dd with
#       O_DIRECT on the RAM namespace (8 MiB in 1 MiB writes = R2T/H2CData, 1 MiB in 4 KiB =
#       in-capsule) read back with equal md5, a never-written MiB reads zeros (ram), NULL namespace
#       reads zeros and takes writes (null), 3 MiB of fresh random data on the FILE namespace at
#       0/4/8 MiB (plain/digest/sqflow): 4 x 256 KiB and 256 x 4 KiB O_DIRECT|O_DSYNC writes (the
#       kernel sends each as a FUA write, and follows it with a Flush), 1 MiB of O_DIRECT writes then
#       fsync and `sync -d` (Flush), `blockdev --flushbufs`, read back with O_DIRECT with equal md5
#       (file; the guest prints offset and md5 for the image check below), delete_controller removes
#       the controller and its block devices
#   keepalive            (plain run) 12 s idle with KATO 5 s: same controller (cntlid), still live,
#                        no kernel reset, I/O works
#   reconnect            kill -9 the target while connected with 1 MiB reads in flight, restart it on
#                        the same port: the kernel's controller leaves live, reconnects (live again),
#                        the reads in flight all complete without error, the RAM namespace comes back
#                        as a new namespace (its identity is new: RAM does not outlive its target, and
#                        the kernel says "identifiers changed"), found by a rescan, reading zeros, and
#                        new data reads back intact (ns.rescan, ram.restarted, ram.reconnect);
#                        the FILE namespace still holds what the plain run wrote (file.restarted: the
#                        image is the same file, and a kill -9 loses nothing that reached it) and the
#                        file step runs again at 12 MiB (file.reconnect)
#
# Also: the kernel logs no nvme error outside the reconnect step (KMSG lines per step on the console),
# and the target logs no error. Both target instances log namespace 3 as a file on storage with the
# write cache reported. The exit line of the last instance (the first is killed with -9 and logs none)
# counts more than 0 Flush commands (the kernel sends them only to a device with a write cache) and at
# least as many FUA writes as the O_DSYNC writes the guest sent to it (260, file.reconnect). After the
# target stopped, every range the file steps wrote (FILEDATA offset/md5 lines) is in ns.img, intact.
#
# Measured on the 2-core dev machine (other jobs running): boot to the first guest step 10-16 s of
# wall time; the whole test 44-60 s with a warm cache (the keep-alive idle is 12 s of it, the kill and
# reconnect about 5 s, each file step 1.1-1.5 s); preparing the cache on the first run adds about
# 30-40 s.
#
# Runs as root (apt-get); otherwise, or if Debian's packages cannot be fetched, prints SKIP and exits
# 77. NVTCP_INTEROP_KEEP=1 keeps the console and target logs (kept on failure anyway).
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/common.sh"
kernel_test_args interop.kernel_host "Debian's kernel, busybox and QEMU" "$@"

START=$SECONDS
NQN=nqn.2026-11.io.nvtcp:fromkernel
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:5b3a6c1e-7f42-4d0a-9e8b-1c2d3e4f5a6b
WORK=$(mktemp -d /tmp/nvtcp-khost.XXXXXX)
# The file namespace's image lives in $WORK: on tmpfs the target would report no write cache (nothing
# there outlives the machine), so a tmpfs /tmp moves $WORK next to the nvtcp binary (the build tree).
case $(stat -f -c %T "$WORK") in
  tmpfs|ramfs)
    rmdir "$WORK"
    WORK=$(mktemp -d "$(dirname "$NVTCP")/nvtcp-khost.XXXXXX")
    case $(stat -f -c %T "$WORK") in tmpfs|ramfs) rm -rf "$WORK"; echo "FAIL: /tmp and $(dirname "$NVTCP") are both tmpfs: no place for a file namespace with a write cache"; exit 1 ;; esac ;;
esac
IMAGE=$WORK/ns.img
FILE_MIB=32
trap kernel_target_cleanup EXIT
trap 'exit 130' INT TERM

# start_target LOGNAME: the target on $PORT / $DPORT; 0 once it is serving (ready file written).
start_target() {
  local log=$WORK/$1.log
  rm -f "$WORK/ready"
  "$NVTCP" target --ram 64M --null 1G --file "$IMAGE,${FILE_MIB}M" --listen "127.0.0.1:$PORT" --discovery-port "$DPORT" --nqn "$NQN" \
    --ready-file "$WORK/ready" --log-level debug >"$log" 2>&1 &
  TARGET_PID=$!
  for _ in $(seq 100); do
    [[ -s $WORK/ready ]] && return 0
    kill -0 "$TARGET_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$TARGET_PID" 2>/dev/null && die "target did not become ready in 10 s (see $log)"
  wait "$TARGET_PID" || true
  TARGET_PID=""
  return 1
}

kernel_prepare "$CACHE"
echo "kernel: $KERNEL_PKG ($KERNEL_VERSION), $(qemu-system-x86_64 --version | head -1)"

for attempt in 1 2 3 4 5; do
  PORT=$(kfree_port)
  DPORT=$(kfree_port "$PORT")
  start_target target && break
  echo "target failed to start on $PORT/$DPORT (attempt $attempt): $(tail -1 "$WORK/target.log")"
done
[[ -n $TARGET_PID ]] || die "could not start the target"
echo "nvtcp target on 127.0.0.1:$PORT (discovery 127.0.0.1:$DPORT), pid $TARGET_PID"

# GNU dd for the guest: busybox dd has no oflag=dsync, and O_DIRECT|O_DSYNC writes to a block device
# are what makes the kernel send FUA writes. This machine's dd (Debian's coreutils), with its own
# loader and libraries, goes into a third initramfs archive as /opt/gnu-dd; without one that knows
# dsync the file steps only Flush and FUA writes are not required.
stage_gnu_dd() {
  local dd stage=$WORK/gnu-dd line lib ld=""
  dd=$(command -v dd) || return 1
  "$dd" --help 2>/dev/null | grep -qw dsync || return 1
  mkdir -p "$stage/opt/gnu-dd"
  cp -L "$dd" "$stage/opt/gnu-dd/dd.bin"
  while read -r line; do
    case $line in
      *" => "/*) lib=${line#* => }; lib=${lib% (*}; cp -L "$lib" "$stage/opt/gnu-dd/${line%% =>*}" ;;
      /*) ld=${line%% (*}; cp -L "$ld" "$stage/opt/gnu-dd/${ld##*/}" ;;
    esac
  done < <(ldd "$dd" 2>/dev/null)
  [[ -n $ld ]] || return 1
  printf '#!/bin/sh\nexec /opt/gnu-dd/%s --library-path /opt/gnu-dd /opt/gnu-dd/dd.bin "$@"\n' "${ld##*/}" >"$stage/opt/gnu-dd/dd"
  chmod 0755 "$stage/opt/gnu-dd/dd"
  ( cd "$stage" && find . | "$BUSYBOX" cpio -o -H newc >"$WORK/gnu-dd.cpio" 2>/dev/null ) || return 1
  rm -rf "$stage"
}
DSYNC_DD=""
if stage_gnu_dd; then
  DSYNC_DD=/opt/gnu-dd/dd
  echo "guest gets this machine's GNU dd ($(dd --version | head -1)) for O_DIRECT|O_DSYNC writes"
else
  echo "no GNU dd with oflag=dsync here: the guest's file steps issue no FUA writes"
fi

kernel_overlay "$WORK/initrd.cpio" "$KERNEL_TEST_DIR/guest/host.sh" "NQN=$NQN" "HOSTNQN=$HOSTNQN" \
  "TPORT=$PORT" "DPORT=$DPORT" "RAM_SECTORS=$((64 * 2048))" "NULL_SECTORS=$((1024 * 2048))" \
  "FILE_SECTORS=$((FILE_MIB * 2048))" "DSYNC_DD=$DSYNC_DD"
[[ -z $DSYNC_DD ]] || cat "$WORK/gnu-dd.cpio" >>"$WORK/initrd.cpio"
kernel_boot host "$WORK/initrd.cpio"
T0=$SECONDS
if ! kernel_wait_marker 'NVTCP-GUEST .* (PASS|FAIL) modules' 240; then
  echo "--- qemu:"; cat "$WORK/host.qemu.log"
  echo "--- console (last 60 lines):"; tail -60 "$CONSOLE"
  die "the guest did not reach its first step in 240 s"
fi
BOOT_S=$((SECONDS - T0))
echo "guest booted in $BOOT_S s"

# Follow the guest until it is done; kill and restart the target when it asks.
RESTART_S=""
if kernel_wait_marker 'NVTCP-GUEST .* (KILL-TARGET|RUN-EXIT)' 400 && grep -qa 'NVTCP-GUEST .* KILL-TARGET' "$CONSOLE"; then
  echo "guest asks for the target to be killed: kill -9 $TARGET_PID"
  kill -KILL "$TARGET_PID"
  wait "$TARGET_PID" 2>/dev/null || true
  TARGET_PID=""
  T1=$SECONDS
  sleep 2   # let the kernel notice and try a reconnect or two against nothing
  for attempt in $(seq 20); do
    start_target target2 && break
    echo "restart on port $PORT failed (attempt $attempt): $(tail -1 "$WORK/target2.log")"
    sleep 0.5
  done
  if [[ -n $TARGET_PID ]]; then
    RESTART_S=$((SECONDS - T1))
    echo "target restarted on 127.0.0.1:$PORT after $RESTART_S s, pid $TARGET_PID"
  else
    fail "could not restart the target on port $PORT (bind after kill -9)"
    tail -5 "$WORK/target2.log" | sed 's/^/    /'
  fi
fi
kernel_wait_marker 'NVTCP-GUEST .* RUN-EXIT' 400 || fail "the guest did not finish in time"
kernel_stop 60
stop_target

# --- verdicts ------------------------------------------------------------------------------------

tr -d '\r' <"$CONSOLE" >"$WORK/console.txt"
grep -a 'NVTCP-GUEST' "$WORK/console.txt" | sed 's/^/  /'
echo "the discovery log as nvme-cli printed it in the guest:"
grep -a '^NVME discovery.log: ' "$WORK/console.txt" | sed 's/^NVME discovery.log: /    /'
grep -qa 'NVTCP-GUEST .* RUN-EXIT 0' "$WORK/console.txt" || fail "the guest script did not exit cleanly"

declare -A STATUS=()
while read -r verdict step; do
  [[ -n ${STATUS[$step]:-} && ${STATUS[$step]} == FAIL ]] && continue
  STATUS[$step]=$verdict
done < <(sed -nE 's/^NVTCP-GUEST \[[0-9.]+\] (PASS|FAIL) ([a-z.]+).*/\1 \2/p' "$WORK/console.txt")

STEPS=(modules discovery discovery.disconnect discovery.log discovery.log.digest)
for t in plain digest sqflow; do
  STEPS+=("connect.$t" "ns.$t")
  [[ $t == plain ]] && STEPS+=(nvme.idctrl)
  STEPS+=("cache.$t" "ram.$t" "null.$t" "file.$t")
  [[ $t == plain ]] && STEPS+=(keepalive)
  STEPS+=("disconnect.$t")
done
STEPS+=(connect.reconnect ns.reconnect reconnect io.reconnect ns.rescan ram.restarted ram.reconnect file.restarted file.reconnect
        disconnect.reconnect)
for s in "${STEPS[@]}"; do
  case ${STATUS[$s]:-missing} in
    PASS) ;;
    FAIL) fail "guest step $s: $(grep -a "FAIL $s" "$WORK/console.txt" | head -1 | sed 's/^NVTCP-GUEST \[[0-9.]*\] //')" ;;
    *) fail "guest step $s did not run" ;;
  esac
done
for s in "${!STATUS[@]}"; do
  [[ " ${STEPS[*]} " == *" $s "* ]] || { [[ ${STATUS[$s]} == FAIL ]] && fail "guest step $s: FAIL"; }
done

# Kernel messages per step: errors are expected only around the kill.
grep -a '^KMSG ' "$WORK/console.txt" >"$WORK/kmsg.txt" || true
ERR_RE='error|fail|unexpected|invalid|timeout|timed out|termreq|digest|reset|reconnect|recovery|warning:|bug:|call trace|oops'
# (the message only: the step names contain "digest" and "reconnect" themselves)
awk -v re="$ERR_RE" '{ step = $2; sub(/:$/, "", step); msg = $0; sub(/^KMSG [^ ]+ /, "", msg)
  if (step != "reconnect" && tolower(msg) ~ re) print }' "$WORK/kmsg.txt" >"$WORK/kmsg.errors"
if [[ -s $WORK/kmsg.errors ]]; then
  fail "the guest kernel logged nvme errors outside the reconnect step:"
  sed 's/^/    /' "$WORK/kmsg.errors" | head -40
fi
grep -aiE 'WARNING:|BUG:|Call Trace|Oops' "$WORK/console.txt" >"$WORK/kmsg.oops" && {
  fail "the guest kernel warned or oopsed:"; sed 's/^/    /' "$WORK/kmsg.oops" | head -20; }

# The target's view: digests on for the digest run's queues, no errors from either instance.
cat "$WORK/target.log" "$WORK/target2.log" 2>/dev/null >"$WORK/targets.log"
DIGEST_CONNECTS=$(grep -c "host $HOSTNQN connected to $NQN .*header digest, data digest" "$WORK/targets.log" || true)
PLAIN_CONNECTS=$(grep "host $HOSTNQN connected to $NQN " "$WORK/targets.log" | grep -vc 'digest' || true)
DISC_CONNECTS=$(grep -c "host $HOSTNQN connected to nqn.2014-08.org.nvmexpress.discovery" "$WORK/targets.log" || true)
[[ $DIGEST_CONNECTS -ge 2 ]] || fail "target log: $DIGEST_CONNECTS queue connects with header+data digest (want the admin and I/O queues of the digest run)"
[[ $PLAIN_CONNECTS -ge 2 ]] || fail "target log: $PLAIN_CONNECTS queue connects without digests"
[[ $DISC_CONNECTS -ge 1 ]] || fail "target log: no discovery controller connect"
# This script stops the target with SIGINT (and SIGKILL for the reconnect step): a SIGTERM came from
# outside (another job on the machine killing nvtcp processes by name), which voids the run.
if grep -qa 'signal 15' "$WORK/targets.log"; then
  fail "the target got a SIGTERM from outside this test (something killed nvtcp processes by name); the steps after it are void"
fi
grep -aiE ' (error|fatal|critical)[: ]' "$WORK/targets.log" >"$WORK/target.errors" || true
if [[ -s $WORK/target.errors ]]; then
  fail "the target logged errors:"; sed 's/^/    /' "$WORK/target.errors" | head -20
fi
if grep -qa 'admin opcode' "$WORK/targets.log"; then
  echo "admin commands from the kernel that the target did not complete with success (not failures):"
  grep -a 'admin opcode' "$WORK/targets.log" | sed -E 's/^[0-9:.]+ nvtcp debug: [0-9.:]+: //' | sort | uniq -c | sed 's/^/    /'
fi
# The file namespace (nsid 3, after --null and --ram) as each target instance saw it: on storage, with
# the write cache the guest found in sysfs.
FILE_NS_RE="namespace 3: file $((FILE_MIB << 20)) bytes, 512-byte blocks; on storage: durable after Flush or FUA \\(volatile write cache reported, on\\)"
for log in "$WORK/target.log" "$WORK/target2.log"; do
  [[ -f $log ]] || continue
  grep -qaE "$FILE_NS_RE" "$log" \
    || fail "${log##*/}: the file namespace is not reported on storage with a write cache: $(grep -a 'namespace 3:' "$log" | head -1)"
done
# Flush and FUA: the exit line of the last instance (the first one was killed with -9 and wrote none).
# Flushes come from every fsync in the guest (the kernel sends them only because VWC is set); FUA
# writes from the O_DSYNC writes of the file steps that instance served (those after KILL-TARGET).
EXIT_LINE=$(grep -a 'target: [0-9]* I/O commands' "$WORK/targets.log" | tail -1 || true)
IOS=$(sed -nE 's/.*target: ([0-9]+) I\/O commands.*/\1/p' <<<"$EXIT_LINE")
FLUSHES=$(sed -nE 's/.*I\/O commands \(([0-9]+) Flush.*/\1/p' <<<"$EXIT_LINE")
FUAS=$(sed -nE 's/.* ([0-9]+) FUA writes\).*/\1/p' <<<"$EXIT_LINE")
DSYNC_WANT=$(awk '/NVTCP-GUEST .* KILL-TARGET/ { n = 0 }
  /NVTCP-GUEST .* FILEDATA / { for (i = 1; i <= NF; i++) if ($i ~ /^dsync_writes=/) { sub(/^dsync_writes=/, "", $i); n += $i } }
  END { print n + 0 }' "$WORK/console.txt")
if [[ -z $FLUSHES || -z $FUAS ]]; then
  fail "the target's exit line has no Flush/FUA counts: '${EXIT_LINE:-no exit line}'"
else
  [[ $FLUSHES -gt 0 ]] || fail "the target completed $FLUSHES Flush commands: the kernel's fsyncs sent none (no write cache seen?)"
  if [[ -n $DSYNC_DD && $FUAS -lt $DSYNC_WANT ]]; then
    fail "the target completed $FUAS FUA writes; the guest issued $DSYNC_WANT O_DIRECT|O_DSYNC writes to that instance (each must arrive as FUA)"
  fi
fi
# What the guest wrote to the file namespace is in the image, at the offset it wrote, after both
# instances are gone (the first by kill -9: the image keeps what reached the file).
IMAGE_OK=0; IMAGE_N=0
while read -r step off len want; do
  IMAGE_N=$((IMAGE_N + 1))
  got=$(dd if="$IMAGE" bs=1M skip=$((off >> 20)) count=$((len >> 20)) 2>/dev/null | md5sum | cut -d' ' -f1)
  if [[ $got == "$want" ]]; then IMAGE_OK=$((IMAGE_OK + 1))
  else fail "$IMAGE at $off (+$len bytes, written by $step): md5 $got, the guest wrote $want"
  fi
done < <(sed -nE 's/^NVTCP-GUEST \[[0-9.]+\] FILEDATA ([a-z.]+) offset=([0-9]+) bytes=([0-9]+) md5=([0-9a-f]+).*/\1 \2 \3 \4/p' "$WORK/console.txt")
for s in file.plain file.digest file.sqflow file.reconnect; do
  [[ ${STATUS[$s]:-} == PASS ]] && ! grep -qa "FILEDATA $s " "$WORK/console.txt" && fail "$s passed without a FILEDATA line"
done
[[ $(stat -c %s "$IMAGE" 2>/dev/null || echo 0) -eq $((FILE_MIB << 20)) ]] || fail "$IMAGE is $(stat -c %s "$IMAGE" 2>/dev/null) bytes, not $((FILE_MIB << 20))"

if grep -qaiE ' warn' "$WORK/targets.log"; then
  echo "target warnings (not failures):"; grep -aiE ' warn' "$WORK/targets.log" | head -20 | sed 's/^/    /'
fi

if [[ $FAILURES -gt 0 ]]; then
  echo "--- kernel messages per step:"
  sed 's/^/    /' "$WORK/kmsg.txt" | tail -80
  echo "--- target log (last 30 lines):"
  tail -30 "$WORK/targets.log" | sed 's/^/    /'
fi

echo
echo "interop.kernel_host results ($KERNEL_PKG, boot $BOOT_S s, target restart ${RESTART_S:-n/a} s):"
for s in "${STEPS[@]}"; do printf '  %-22s %s\n' "$s" "${STATUS[$s]:-missing}"; done
echo "  target: $DISC_CONNECTS discovery, $PLAIN_CONNECTS plain and $DIGEST_CONNECTS digest queue connects"
echo "  target (last instance): ${IOS:-?} I/O commands, ${FLUSHES:-?} Flush, ${FUAS:-?} FUA writes (guest's O_DSYNC writes to it: $DSYNC_WANT$([[ -n $DSYNC_DD ]] || echo ', no GNU dd here'))"
echo "  image: $IMAGE_OK of $IMAGE_N ranges the guest wrote found intact in ${IMAGE##*/} after the target stopped"
echo
if [[ $FAILURES -gt 0 ]]; then
  echo "interop.kernel_host: $FAILURES check(s) FAILED in $((SECONDS - START)) s"
  exit 1
fi
echo "interop.kernel_host: PASS in $((SECONDS - START)) s"

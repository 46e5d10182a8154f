#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# interop.kernel_admin: the nvme-cli commands a storage admin types, in a Debian 13 guest, against the
# nvtcp target and against the guest's own Linux nvmet, with the same checks on both.
#
#   kernel_admin_test.sh path/to/nvtcp CACHE_DIR
#
# The guest is Debian 13's (trixie) linux-image-amd64 (6.12) with trixie's nvme-cli 2.13 and its
# libraries in the initramfs (common.sh: kernel_prepare CACHE trixie; apt-get download through the
# private apt configuration, dpkg -x, /etc/apt untouched), booted under QEMU (TCG). The nvtcp target
# runs here: `nvtcp target --ram 32M --file WORK/ns.img,48M --listen 127.0.0.1:PORT --discovery-port
# DPORT` (namespace 1 RAM, namespace 2 a file on storage, so that a volatile write cache is reported).
# The guest reaches it as 10.0.2.2; the discovery log advertises 127.0.0.1:PORT, which a busybox nc
# relay inside the guest carries to 10.0.2.2:PORT, so connect-all dials what the log says. Then the
# guest configures its own nvmet (configfs, tcp 127.0.0.1:4420; namespace 1 a loop device over a
# tmpfs file, namespace 2 a file) and runs the same steps against it. nvme_core is loaded with
# multipath=N, so each of the two hosts (A: connect-all with /etc/nvme/hostnqn and hostid; B: nvme
# connect -q -I) has its own /dev/nvmeXnY for each namespace. guest/admin.sh has the steps; each
# checks the fields nvme-cli prints (-o json where it has it), not only its exit code:
#
#   discover, connect-all (twice: nothing new), connect-host2, list, list-subsys, id-ctrl, id-ns,
#   ns-descs, list-ns, smart-log (controller-wide counters move by the 8 writes made between two
#   reads), smart-log-ns (-n 1 moves, -n 2 does not), error-log (a read past the end is the newest
#   entry, SMART counts it), effects-log (and agrees with ONCS), supported-log-pages, fw-log,
#   feature-02h/04h/05h/06h/07h/08h/0Ah/0Bh/0Fh/16h/81h/82h/83h (get-feature with SEL 0-3: current
#   value checked per feature, e.g. 0Bh = what the kernel enabled, 0Fh = the kernel's KATO, 81h = the
#   host ID it connected with; where ONCS bit 4 allows SEL, saved = default for unsaveable features
#   and the capabilities say changeable / namespace specific as the spec has it), set-feature-06h
#   (cache off, I/O, --save refused with 10Dh, cache on), write-read (host B reads what host A
#   wrote), compare, verify (past the end: 080h), copy, write-zeroes, dsm, flush, resv-register,
#   resv-acquire (host B: 083h), resv-report (-e: holder, keys, 128-bit host IDs), resv-conflict
#   (host B's write: Reservation Conflict, its read works), resv-release, resv-preempt,
#   resv-notif-log (host B's log: Registration Preempted), disconnect-all.
#
# Verdicts: every step must PASS against nvtcp, except those in NVTCP_PENDING below (the target does
# not have them yet): they print PENDING when they fail and UNEXPECTED PASS when they pass, and fail
# nothing. nvmet's results are reported next to nvtcp's ("nvmet also fails: ..." where nvtcp does not
# pass either) and never fail the test. Also required: the guest ran both suites and exited cleanly,
# its kernel logged no WARNING/BUG/Oops, and the target logged no error.
#
# What Linux 6.12's nvmet answers (reported, not judged): no Supported Log Pages (Invalid Field), AFI 0
# in the firmware log, features 02h/04h/05h/08h/0Ah/16h/82h/83h refused, 06h not settable, SEL
# ignored (ONCS bit 4 clear), no Compare, Verify, Copy or reservations, and 006h (Internal Error)
# for Write Zeroes / Dataset Management across the end of its loop device.
#
# Measured on the 2-core dev machine (TCG, one core for QEMU, another engineer's build running, load
# average 3.7-4.5): boot to the first step 6-10 s of wall time, the nvtcp suite 16-21 s, the nvmet
# suite about 15 s, the whole test 32-44 s with a warm cache (ctest: 41 s); a cold cache adds the
# trixie kernel preparation (see common.sh).
#
# Runs as root (apt-get); otherwise, or if Debian's packages cannot be fetched, prints SKIP and exits
# 77. NVTCP_INTEROP_KEEP=1 keeps the console, the target log and the nvme-cli outputs (kept on
# failure anyway).
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/common.sh"
kernel_test_args interop.kernel_admin "Debian's kernel, busybox, nvme-cli and QEMU" "$@"

# Steps whose nvtcp side a future command adds before the target has it: they report PENDING /
# UNEXPECTED PASS against nvtcp instead of FAIL / PASS. Empty: every step must pass.
# Take a step out of this list once the target passes it.
NVTCP_PENDING=()

STEPS=(discover connect-all connect-host2 list list-subsys id-ctrl id-ns ns-descs list-ns smart-log smart-log-ns
       error-log effects-log supported-log-pages fw-log feature-02h feature-04h feature-05h feature-06h feature-07h
       feature-08h feature-0Ah feature-0Bh feature-0Fh feature-16h feature-81h feature-82h feature-83h
       set-feature-06h write-read compare verify copy write-zeroes dsm flush resv-register resv-acquire resv-report
       resv-conflict resv-release resv-preempt resv-notif-log disconnect-all)

START=$SECONDS
NQN=nqn.2026-11.io.nvtcp:admin
HOSTID_A=5b3a6c1e-7f42-4d0a-9e8b-1c2d3e4f5a6b
HOSTID_B=c0ffee00-1234-4abc-8def-0123456789ab
HOSTNQN_A=nqn.2014-08.org.nvmexpress:uuid:$HOSTID_A
HOSTNQN_B=nqn.2014-08.org.nvmexpress:uuid:$HOSTID_B
RAM_MIB=32
FILE_MIB=48
WORK=$(mktemp -d /tmp/nvtcp-kadmin.XXXXXX)
# The file namespace's image must be on storage (a tmpfs file gets no volatile write cache, and
# set-feature 06h needs one): a tmpfs /tmp moves WORK next to the nvtcp binary.
case $(stat -f -c %T "$WORK") in
  tmpfs|ramfs)
    rmdir "$WORK"
    WORK=$(mktemp -d "$(dirname "$NVTCP")/nvtcp-kadmin.XXXXXX")
    case $(stat -f -c %T "$WORK") in tmpfs|ramfs) rm -rf "$WORK"; echo "FAIL: /tmp and $(dirname "$NVTCP") are both tmpfs: no place for a file namespace with a write cache"; exit 1 ;; esac ;;
esac
trap kernel_target_cleanup EXIT
trap 'exit 130' INT TERM

kernel_prepare "$CACHE" trixie
echo "kernel: $KERNEL_PKG ($KERNEL_VERSION), $(qemu-system-x86_64 --version | head -1)"

for attempt in 1 2 3 4 5; do
  PORT=$(kfree_port)
  DPORT=$(kfree_port "$PORT")
  rm -f "$WORK/ready"
  "$NVTCP" target --ram "${RAM_MIB}M" --file "$WORK/ns.img,${FILE_MIB}M" --listen "127.0.0.1:$PORT" \
    --discovery-port "$DPORT" --nqn "$NQN" --ready-file "$WORK/ready" --log-level debug >"$WORK/target.log" 2>&1 &
  TARGET_PID=$!
  ktarget_ready && break
  echo "target failed to start on $PORT/$DPORT (attempt $attempt): $(tail -1 "$WORK/target.log")"
done
[[ -n $TARGET_PID ]] || die "could not start the target"
echo "nvtcp target on 127.0.0.1:$PORT (discovery 127.0.0.1:$DPORT), pid $TARGET_PID"
# The guest takes namespace 1 for RAM and 2 for the file with a write cache.
grep -q "$NQN namespace 1: ram" "$WORK/target.log" && grep -q "$NQN namespace 2: file .*volatile write cache reported" "$WORK/target.log" \
  || die "the target's namespaces are not 1 = ram, 2 = file with a volatile write cache: $(grep namespace "$WORK/target.log")"

kernel_overlay "$WORK/initrd.cpio" "$KERNEL_TEST_DIR/guest/admin.sh" "NQN=$NQN" "TPORT=$PORT" "DPORT=$DPORT" \
  "HOSTNQN=$HOSTNQN_A" "HOSTID=$HOSTID_A" "HOSTNQN2=$HOSTNQN_B" "HOSTID2=$HOSTID_B" \
  "RAM_MIB=$RAM_MIB" "FILE_MIB=$FILE_MIB" "NVTCP_PENDING='${NVTCP_PENDING[*]}'"
kernel_boot admin "$WORK/initrd.cpio"
T0=$SECONDS
if ! kernel_wait_marker 'NVTCP-GUEST .* (=== nvtcp|RUN-EXIT)' 240; then
  echo "--- qemu:"; cat "$WORK/admin.qemu.log"
  echo "--- console (last 60 lines):"; tail -60 "$CONSOLE"
  die "the guest did not reach its first step in 240 s"
fi
BOOT_S=$((SECONDS - T0))
kernel_wait_marker 'NVTCP-GUEST .* === nvmet' 300 || true
NVTCP_S=$((SECONDS - T0 - BOOT_S))
kernel_wait_marker 'NVTCP-GUEST .* RUN-EXIT' 300 || fail "the guest did not finish in time"
GUEST_S=$((SECONDS - T0))
kernel_stop 30
stop_target

# --- verdicts ------------------------------------------------------------------------------------

tr -d '\r' <"$CONSOLE" >"$WORK/console.txt"
grep -qa 'NVTCP-GUEST .* RUN-EXIT 0$' "$WORK/console.txt" || fail "the guest script did not exit cleanly"
grep -a 'NVTCP-GUEST .* ABORT' "$WORK/console.txt" | sed 's/^NVTCP-GUEST \[[0-9.]*\] RESULT /FAIL: /' && FAILURES=$((FAILURES + 1))

echo "guest: $(grep -a -m1 'NVTCP-GUEST .* nvme-cli: ' "$WORK/console.txt" | sed 's/.*nvme-cli: //')"
declare -A VERDICT=() DETAIL=()
while IFS= read -r line; do
  rest=${line#* RESULT }
  read -r target step verdict _ <<<"$rest"
  verdict=${verdict%:}
  VERDICT[$target.$step]=$verdict
  DETAIL[$target.$step]=${rest#*: }
done < <(grep -a 'NVTCP-GUEST .* RESULT ' "$WORK/console.txt")

pending() { [[ " ${NVTCP_PENDING[*]} " == *" $1 "* ]]; }
short() { local d=$1; [[ ${#d} -le 110 ]] || d="${d:0:107}..."; printf '%s' "$d"; }
UNEXPECTED=()
printf '\n%-20s | %-16s | %s\n' "command" "nvtcp" "nvmet ($KERNEL_VERSION)"
printf '%s\n' "---------------------+------------------+------------------------------------------------------------"
for s in "${STEPS[@]}"; do
  v=${VERDICT[nvtcp.$s]:-missing}; m=${VERDICT[nvmet.$s]:-missing}
  case $v in
    PASS) ;;
    PENDING) pending "$s" || fail "nvtcp $s reported PENDING but is not in NVTCP_PENDING" ;;
    UNEXPECTED-PASS) UNEXPECTED+=("$s"); v="UNEXPECTED PASS" ;;
    FAIL) fail "nvtcp $s: ${DETAIL[nvtcp.$s]}" ;;
    *) fail "nvtcp $s: did not run" ;;
  esac
  case $m in
    PASS) mcol=PASS ;;
    NVMET-FAIL) if [[ $v == PASS ]]; then mcol="nvmet fails: $(short "${DETAIL[nvmet.$s]}")"
                else mcol="nvmet also fails: $(short "${DETAIL[nvmet.$s]}")"; fi ;;
    *) mcol="did not run"; fail "nvmet $s: did not run (the reference suite is part of this test)" ;;
  esac
  printf '%-20s | %-16s | %s\n' "$s" "$v" "$mcol"
done
echo
echo "nvtcp details:"
for s in "${STEPS[@]}"; do printf '  %-20s %s\n' "$s" "$(short "${DETAIL[nvtcp.$s]:-}")"; done
if [[ ${#UNEXPECTED[@]} -gt 0 ]]; then
  echo
  echo "UNEXPECTED PASS (not a failure): ${UNEXPECTED[*]} now pass against nvtcp: take them out of NVTCP_PENDING."
fi

# The nvme-cli output of every nvtcp step that did not pass.
if grep -qa '^OUT nvtcp\.' "$WORK/console.txt"; then
  echo
  echo "nvme-cli output of the nvtcp steps that did not pass:"
  grep -a '^OUT nvtcp\.' "$WORK/console.txt" | sed 's/^OUT /  /' | head -150
fi

grep -aiE 'WARNING:|BUG:|Call Trace|Oops' "$WORK/console.txt" >"$WORK/kmsg.oops" && {
  fail "the guest kernel warned or oopsed:"; sed 's/^/    /' "$WORK/kmsg.oops" | head -20; }
if grep -qa 'signal 15' "$WORK/target.log"; then
  fail "the target got a SIGTERM from outside this test (something killed nvtcp processes by name)"
fi
grep -aiE ' (error|fatal|critical)[: ]' "$WORK/target.log" >"$WORK/target.errors" || true
if [[ -s $WORK/target.errors ]]; then
  fail "the target logged errors:"
  sed 's/^/    /' "$WORK/target.errors" | head -20
fi

echo
echo "boot to the first step $BOOT_S s, nvtcp suite $NVTCP_S s, guest in all $GUEST_S s, test $((SECONDS - START)) s"
if [[ $FAILURES -gt 0 ]]; then
  echo "interop.kernel_admin: $FAILURES check(s) FAILED"
  exit 1
fi
echo "interop.kernel_admin: PASS"

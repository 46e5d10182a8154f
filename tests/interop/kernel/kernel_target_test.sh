#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# interop.kernel_target: the nvtcp host against the Linux kernel's NVMe/TCP target (nvmet-tcp).
#
#   kernel_target_test.sh path/to/nvtcp CACHE_DIR
#
# Boots Debian's 6.1 kernel under QEMU (TCG, no KVM; see common.sh) with guest/target.sh: nvmet
# through configfs, subsystem nqn.2026-11.io.nvtcp:kernel (any host), namespace 1 = null_blk
# /dev/nullb0 (1 GiB), namespace 2 = brd /dev/ram0 (64 MiB), a TCP port on the guest's 0.0.0.0:4420
# (discovery there too). QEMU forwards a free 127.0.0.1 port to it. Then, from this machine:
#
#   discover     nvtcp discover -a 127.0.0.1 -s PORT, digests off and on: an entry for the subsystem
#                (trtype tcp, trsvcid 4420) and the current discovery subsystem
#   identify     nvtcp identify: subnqn, mn "Linux", ns 1 = 1 GiB, ns 2 = 64 MiB
#   perf         randread, randwrite, randrw (70:30) x 4 KiB, 128 KiB x digests off / --hdgst --ddgst,
#                QD 8, 1 s each, on ns 1: exit 0, no errors, I/Os done in the right directions
#                (the host fails the connection if the ICResp does not grant the digests it asked for)
#   verify       nvtcp perf --verify on ns 2 (RAM), 4 KiB and 128 KiB, digests off and on: every
#                block written reads back intact
#   multipath    nvtcp perf --verify on ns 2 over both of nvmet's ports (a second port, 4421, serves
#                the same subsystem) while the guest turns port 1's ANA group inaccessible and back,
#                then takes the subsystem off port 1 and puts it back: no I/O error, every block
#                reads back, both paths carry I/O, the host read the inaccessible state from
#                nvmet's ANA log, and the cut path reconnected by itself
#   dmesg        the guest's kernel log (dumped at shutdown) has "creating nvm controller" lines and
#                no nvmet error (digest error, unexpected PDU, keep-alive expiry, ...), no WARNING/BUG
#
# Measured on the 2-core dev machine (other jobs running): boot to READY 13-16 s of wall time (the
# guest's own clock says 7 s: firmware and kernel decompression under TCG take the rest); the whole
# test 41-56 s with a warm cache; preparing the cache on the first run adds about 30-40 s (70 MB of
# packages, dpkg -x, depmod).
#
# Runs as root (apt-get); otherwise, or if Debian's packages cannot be fetched, prints SKIP and exits
# 77. NVTCP_INTEROP_KEEP=1 keeps the console log and outputs (kept on failure anyway).
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/common.sh"
kernel_test_args interop.kernel_target "Debian's kernel, busybox and QEMU" "$@"

START=$SECONDS
NQN=nqn.2026-11.io.nvtcp:kernel
DISC_NQN=nqn.2014-08.org.nvmexpress.discovery
WORK=$(mktemp -d /tmp/nvtcp-ktarget.XXXXXX)
declare -a RESULTS=()

result() { RESULTS+=("$(printf '%-34s %s' "$1" "$2")"); }

cleanup() {
  local rc=$?
  set +e
  if [[ -n $QEMU_PID ]] && kill -0 "$QEMU_PID" 2>/dev/null; then
    (exec 3<>"/dev/tcp/127.0.0.1/$CTL_PORT" && echo abort >&3) 2>/dev/null
    kernel_stop 20
  fi
  if [[ ($rc -ne 0 && $rc -ne 77) || ${NVTCP_INTEROP_KEEP:-0} == 1 ]]; then
    echo "console log and outputs kept in $WORK"
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
CTL_PORT=0
trap cleanup EXIT
trap 'exit 130' INT TERM

kernel_prepare "$CACHE"
echo "kernel: $KERNEL_PKG ($KERNEL_VERSION), $(qemu-system-x86_64 --version | head -1)"

# --- boot --------------------------------------------------------------------------------------

for attempt in 1 2 3; do
  PORT=$(kfree_port)
  PORT2=$(kfree_port "$PORT")
  CTL_PORT=$(kfree_port "$PORT" "$PORT2")
  kernel_overlay "$WORK/initrd.cpio" "$KERNEL_TEST_DIR/guest/target.sh" "NQN=$NQN" "CTL_PORT=7000"
  kernel_boot target "$WORK/initrd.cpio" "$PORT:4420" "$PORT2:4421" "$CTL_PORT:7000"
  T0=$SECONDS
  if kernel_wait_marker 'NVTCP-GUEST .* (READY|RUN-EXIT)' 240; then break; fi
  if ! kill -0 "$QEMU_PID" 2>/dev/null && kernel_forward_busy target; then
    echo "QEMU could not forward port $PORT/$PORT2/$CTL_PORT (attempt $attempt); trying others"
    wait "$QEMU_PID" || true; QEMU_PID=""
    continue
  fi
  break
done
if ! grep -qa 'NVTCP-GUEST .* READY' "$CONSOLE"; then
  echo "--- qemu:"; cat "$WORK/target.qemu.log"
  echo "--- console (last 60 lines):"; tail -60 "$CONSOLE"
  die "the guest did not configure nvmet (no READY on the console in 240 s)"
fi
BOOT_S=$((SECONDS - T0))
echo "guest READY after $BOOT_S s: nvmet-tcp reachable at 127.0.0.1:$PORT"
grep -a 'NVTCP-GUEST' "$CONSOLE" | tr -d '\r' | sed 's/^/  /'

TRID="trtype:tcp adrfam:IPv4 traddr:127.0.0.1 trsvcid:$PORT subnqn:$NQN"

# run NAME cmd...: output to $WORK/NAME.out; returns the command's status.
run() {
  local name=$1; shift
  printf '$ %s\n' "$*" >"$WORK/$name.out"
  "$@" >>"$WORK/$name.out" 2>&1
}
jfield() { { grep -o "\"$2\":[-0-9.e+]*" "$1" || true; } | tail -1 | cut -d: -f2; }
show_tail() { sed 's/^/    /' "$WORK/$1.out" | tail -"${2:-8}"; }

# --- discover ----------------------------------------------------------------------------------

check_discover() {  # NAME [--hdgst --ddgst]
  local name=$1; shift
  local ok=1
  if ! run "$name" "$NVTCP" discover -a 127.0.0.1 -s "$PORT" "$@"; then
    fail "$name: nvtcp discover exited non-zero"; ok=0
  fi
  # Entries are blocks of "key: value" lines; look for the one with our subnqn.
  local entry
  entry=$(awk -v nqn="$NQN" '/^=====Discovery Log Entry/ { if (e ~ "subnqn: +" nqn "\n") print e; e = ""; next }
                             { e = e $0 "\n" } END { if (e ~ "subnqn: +" nqn "\n") print e }' "$WORK/$name.out")
  if [[ -z $entry ]]; then fail "$name: no discovery log entry for $NQN"; ok=0
  else
    grep -qE '^trtype: +tcp$' <<<"$entry" || { fail "$name: entry for $NQN: trtype is not tcp"; ok=0; }
    grep -qE '^trsvcid: +4420$' <<<"$entry" || { fail "$name: entry for $NQN: trsvcid is not 4420"; ok=0; }
    grep -qE '^subtype: +nvme subsystem$' <<<"$entry" || { fail "$name: entry for $NQN: subtype is not 'nvme subsystem'"; ok=0; }
  fi
  grep -qE "^subnqn: +$DISC_NQN$" "$WORK/$name.out" || { fail "$name: no entry for the discovery subsystem"; ok=0; }
  [[ $ok -eq 1 ]] || show_tail "$name" 30
  result "$name" "$([[ $ok -eq 1 ]] && echo pass || echo FAIL)"
}
echo "== discover"
check_discover discover
check_discover discover.digests --hdgst --ddgst

# --- identify ----------------------------------------------------------------------------------

echo "== identify"
ok=1
if ! run identify "$NVTCP" identify -r "$TRID"; then fail "identify: nvtcp identify exited non-zero"; ok=0; fi
grep -qE "^subnqn +: $NQN$" "$WORK/identify.out" || { fail "identify: subnqn is not $NQN"; ok=0; }
grep -qE '^mn +: Linux$' "$WORK/identify.out" || { fail "identify: model is not Linux (nvmet's default)"; ok=0; }
ns_bytes() { awk -v ns="Namespace $1" '$0 == ns { f = 1; next } /^Namespace/ { f = 0 }
  f && /^nsze/ { gsub(/[()]/, ""); print $(NF - 1); exit }' "$WORK/identify.out"; }
[[ $(ns_bytes 1) == 1073741824 ]] || { fail "identify: namespace 1 is '$(ns_bytes 1)' bytes, not 1 GiB (null_blk)"; ok=0; }
[[ $(ns_bytes 2) == 67108864 ]] || { fail "identify: namespace 2 is '$(ns_bytes 2)' bytes, not 64 MiB (brd)"; ok=0; }
[[ $ok -eq 1 ]] || show_tail identify 40
result identify "$([[ $ok -eq 1 ]] && echo pass || echo FAIL)"

# --- perf --------------------------------------------------------------------------------------

# check_perf NAME NS WORKLOAD SIZE VERIFY(0|1) DIGESTS(0|1)
check_perf() {
  local name=$1 ns=$2 w=$3 bs=$4 verify=$5 dg=$6 ok=1
  local secs=1
  [[ $verify -eq 1 ]] && secs=2
  local args=(perf -r "$TRID ns:$ns" -q 8 -o "$bs" -w "$w" -t "$secs" --json)
  [[ $w == randrw ]] && args+=(-M 70)
  [[ $verify -eq 1 ]] && args+=(--verify)
  [[ $dg -eq 1 ]] && args+=(--hdgst --ddgst)
  local rc=0
  run "$name" "$NVTCP" "${args[@]}" || rc=$?
  local f=$WORK/$name.out ios errors reads writes iops vf
  ios=$(jfield "$f" ios); errors=$(jfield "$f" errors); reads=$(jfield "$f" reads)
  writes=$(jfield "$f" writes); iops=$(jfield "$f" iops); vf=$(jfield "$f" verify_failures)
  [[ $rc -eq 0 ]] || { fail "$name: nvtcp perf exited with $rc"; ok=0; }
  if [[ -z $ios ]]; then fail "$name: no JSON result"; ok=0
  else
    [[ $ios -gt 0 ]] || { fail "$name: no I/O completed"; ok=0; }
    [[ $errors -eq 0 ]] || { fail "$name: $errors I/O errors"; ok=0; }
    case $w in
      randread) [[ $reads -gt 0 && $writes -eq 0 ]] || { fail "$name: reads $reads writes $writes"; ok=0; } ;;
      randwrite) [[ $writes -gt 0 && $reads -eq 0 ]] || { fail "$name: reads $reads writes $writes"; ok=0; } ;;
      randrw) [[ $reads -gt 0 && $writes -gt 0 ]] || { fail "$name: reads $reads writes $writes"; ok=0; } ;;
    esac
    if [[ $verify -eq 1 ]]; then
      [[ -n $vf && $vf -eq 0 ]] || { fail "$name: verify failures '$vf'"; ok=0; }
    fi
  fi
  [[ $ok -eq 1 ]] || show_tail "$name"
  local detail
  detail=$(printf '%-4s %7.0f IOPS  (%s reads, %s writes%s)' "$([[ $ok -eq 1 ]] && echo pass || echo FAIL)" \
           "${iops:-0}" "${reads:-?}" "${writes:-?}" "$([[ $verify -eq 1 ]] && echo ", verify failures ${vf:-?}")")
  result "$name" "$detail"
}

for dg in 0 1; do
  tag=$([[ $dg -eq 1 ]] && echo digests || echo plain)
  echo "== perf, $([[ $dg -eq 1 ]] && echo '--hdgst --ddgst' || echo 'digests off')"
  for bs in 4K 128K; do
    for w in randread randwrite randrw; do
      check_perf "perf.$tag.$w.$bs" 1 "$w" "$bs" 0 "$dg"
    done
  done
  for bs in 4K 128K; do
    check_perf "verify.$tag.ns2.$bs" 2 randrw "$bs" 1 "$dg"
  done
done

# --- multipath: both ports, ANA changed under the run ----------------------------------------------

echo "== multipath"
ctl() { (exec 3<>"/dev/tcp/127.0.0.1/$CTL_PORT" && echo "$*" >&3) 2>/dev/null; }
TRID2="trtype:tcp adrfam:IPv4 traddr:127.0.0.1 trsvcid:$PORT2 subnqn:$NQN"
ok=1
run multipath "$NVTCP" perf -r "$TRID ns:2" -r "$TRID2 ns:2" -q 8 -o 4K -w randrw -t 12 --verify --json \
  --reconnect-delay 0.5 &
mp_pid=$!
# The write half is the first 6 s: ANA changes there; the cut in the read-back half.
sleep 1.5; ctl "ana 1 inaccessible" || fail "multipath: could not reach the guest's control port"
sleep 2; ctl "ana 1 optimized" || fail "multipath: could not reach the guest's control port"
sleep 3.5; ctl "cut 1" || fail "multipath: could not reach the guest's control port"
sleep 2; ctl "restore 1" || fail "multipath: could not reach the guest's control port"
mp_rc=0
wait "$mp_pid" || mp_rc=$?
[[ $mp_rc -eq 0 ]] || { fail "multipath: nvtcp perf exited with $mp_rc"; ok=0; }
grep -qa 'NVTCP-GUEST .*ANA port 1 group 1: inaccessible' "$CONSOLE" || { fail "multipath: the guest did not change the ANA state"; ok=0; }
grep -q 'namespace 2 ANA state optimized -> inaccessible' "$WORK/multipath.out" ||
  { fail "multipath: the host did not read the inaccessible state from nvmet's ANA log"; ok=0; }
grep -qa 'NVTCP-GUEST .*port 1: subsystem removed' "$CONSOLE" || { fail "multipath: the guest did not cut port 1"; ok=0; }
grep -q 'reconnected as controller' "$WORK/multipath.out" ||
  { fail "multipath: the path cut on port 1 did not reconnect by itself"; ok=0; }
mp_summary=$(python3 - "$WORK/multipath.out" "$PORT" "$PORT2" <<'PY'
import json, sys
line = next(l for l in open(sys.argv[1]) if l.startswith("{"))
r = json.loads(line)
paths = {p["trsvcid"]: p["commands"] for p in r["paths"]}
a, b = paths[int(sys.argv[2])], paths[int(sys.argv[3])]
bad = []
if r["errors"]: bad.append(f"{r['errors']} I/O errors")
if r["verify_failures"] or r["verify_skipped"]: bad.append(f"verify failures {r['verify_failures']}, skipped {r['verify_skipped']}")
if not (a > 0 and b > 0): bad.append(f"a path carried no I/O: {paths}")
print(("FAIL " + "; ".join(bad)) if bad else f"{r['iops']:.0f} IOPS, commands {a} + {b}, {r['failovers']} failovers")
PY
) || { mp_summary="FAIL no JSON result"; }
[[ $mp_summary != FAIL* ]] || { fail "multipath: $mp_summary"; ok=0; }
[[ $ok -eq 1 ]] || show_tail multipath 20
result multipath "$([[ $ok -eq 1 ]] && echo pass || echo FAIL) ($mp_summary)"

# --- shutdown and the guest's kernel log ---------------------------------------------------------

(exec 3<>"/dev/tcp/127.0.0.1/$CTL_PORT" && echo 'done' >&3) 2>/dev/null || fail "could not reach the guest's control port"
kernel_stop 60
grep -qa 'NVTCP-GUEST .* RUN-EXIT 0' "$CONSOLE" || fail "the guest script did not finish cleanly"
kernel_dmesg >"$WORK/dmesg.txt"
[[ -s $WORK/dmesg.txt ]] || fail "no dmesg dump on the guest console"
ctrls=$(grep -c 'nvmet: creating nvm controller' "$WORK/dmesg.txt" || true)
dctrls=$(grep -c 'nvmet: creating discovery controller' "$WORK/dmesg.txt" || true)
[[ $ctrls -gt 0 ]] || fail "the guest's dmesg shows no 'creating nvm controller'"
[[ $dctrls -gt 0 ]] || fail "the guest's dmesg shows no 'creating discovery controller'"
# "nvmet_tcp: failed cmd ... opcode 1|2" is nvmet refusing a write or read at its start (ANA):
# what it logs for each command sent down the path made inaccessible (multipath, above), which the
# host then sends down the other; those are expected, and no more of them than failovers. So is
# "ctrl N fatal error occurred!" for the controllers of the port the subsystem was taken off.
# The command's address prints as "(____ptrval____)" until the guest's random pool is ready (%p
# hashing), which under load can be later than the multipath step.
refused_re='nvmet_tcp: failed cmd ([0-9a-f]+|\(____ptrval____\)) id [0-9]+ opcode [12], data_len'
grep -aiE 'nvmet.*(error|fail|unexpected|invalid|bad |expired|unsupported|unhandled|mismatch|terminat)|WARNING:|BUG:|Call Trace|Oops' \
  "$WORK/dmesg.txt" | grep -avE "$refused_re" |
  grep -avE 'nvmet: ctrl [0-9]+ fatal error occurred!' >"$WORK/dmesg.errors" || true
refused=$(grep -acE "$refused_re" "$WORK/dmesg.txt" || true)
failovers=$(grep -o '"failovers":[0-9]*' "$WORK/multipath.out" 2>/dev/null | cut -d: -f2)
[[ $refused -le ${failovers:-0} ]] ||
  fail "the guest refused $refused commands, more than the $failovers the host moved to another path"
if [[ -s $WORK/dmesg.errors ]]; then
  fail "the guest's kernel logged nvmet errors:"
  sed 's/^/    /' "$WORK/dmesg.errors" | head -40
fi
result "guest dmesg" "$([[ -s $WORK/dmesg.errors ]] && echo FAIL || echo pass) ($ctrls nvm + $dctrls discovery controllers created)"
if [[ $FAILURES -gt 0 ]]; then
  echo "--- the guest's nvmet lines:"
  grep -aE 'nvmet|nvme' "$WORK/dmesg.txt" | sed 's/^/    /' | tail -60
fi

echo
echo "interop.kernel_target results ($KERNEL_PKG, boot to READY $BOOT_S s):"
printf '  %s\n' "${RESULTS[@]}"
echo
if [[ $FAILURES -gt 0 ]]; then
  echo "interop.kernel_target: $FAILURES check(s) FAILED in $((SECONDS - START)) s"
  exit 1
fi
echo "interop.kernel_target: PASS in $((SECONDS - START)) s"

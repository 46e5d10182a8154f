#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# interop.kernel_auth: DH-HMAC-CHAP in-band authentication between Linux 6.12 (Debian 13's kernel and
# nvme-cli 2.13 in a QEMU guest) and nvtcp, both ways.
#
#   kernel_auth_test.sh path/to/nvtcp CACHE_DIR
#
# 1. Kernel host -> nvtcp target. The target runs here from a JSON configuration whose hosts carry
#    their keys in owner-only files and the hash and group the target chooses for them (as nvmet's
#    per-host dhchap_hash / dhchap_dhgroup): H1 SHA-256 + ffdhe2048, one way; H2 SHA-384 + ffdhe3072,
#    both ways; H3 SHA-512 + NULL group, both ways. guest/auth.sh connects each with nvme connect
#    --dhchap-secret [--dhchap-ctrl-secret], writes and reads back 1 MiB with O_DIRECT, disconnects;
#    a wrong host secret and a wrong controller secret are refused with no controller left; H1 then
#    connects again. Here: the target log names each host authenticated on the admin queue and on its
#    I/O queues with the hash and group configured, the wrong host secret failed, and no key appears.
# 2. nvtcp host -> kernel target. The guest's nvmet allows host HN only with its keys (hmac(sha384),
#    ffdhe4096, and a controller key) and HN2 with a host key only (hmac(sha512), ffdhe3072);
#    `nvtcp perf --verify` with --dhchap-secret and --dhchap-ctrl-secret writes and verifies through
#    it as HN (and again with --reauth-interval: the nvtcp host re-authenticates every queue while
#    the I/O goes on), and with --dhchap-secret alone as HN2; the wrong host secret and the wrong
#    controller secret each fail connect() with the reason.
#
# Keys: fixed test keys in DHHC-1 form (00: used as is; 01/02/03: transformed with SHA-256/384/512).
# Runs as root (apt-get); otherwise, or without Debian's packages, SKIP (77). NVTCP_INTEROP_KEEP=1
# keeps the console and logs (kept on failure anyway).
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/common.sh"
kernel_test_args interop.kernel_auth "Debian's kernel, busybox, nvme-cli and QEMU" "$@"

NQN=nqn.2026-11.io.nvtcp:auth
KNQN=nqn.2026-11.io.nvtcp:kernel-auth
H1=nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555501
H2=nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555502
H3=nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555503
HN=nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-5555555555ff
HN2=nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-5555555555fe
K1='DHHC-1:01:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:'
K2='DHHC-1:02:ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoOEhYaHiImKi4yNjo+QkZKTvGwQfg==:'
C2='DHHC-1:00:IzA9SldkcX6LmKWyv8zZ5vMADRonNEFOW2h1go+cqbaDNxFn:'
K3='DHHC-1:03:FSIvPElWY3B9ipeksb7L2OXy/wwZJjNATVpndIGOm6i1ws/c6fYDEB0qN0RRXmt4hZKfrLnG0+Dt+gcUIS47SPic9Bo=:'
C3='DHHC-1:01:KjdEUV5reIWSn6y5xtPg7foHFCEuO0hVYm98iZajsL396XVU:'
KN='DHHC-1:02:MT5LWGVyf4yZprPAzdrn9AEOGyg1Qk9caXaDkJ2qt8TR3uv4BRIfLDlGU2BteoeUw/DR1Q==:'
CN='DHHC-1:00:OEVSX2x5hpOgrbrH1OHu+wgVIi88SVZjcH2Kl6SxvsuCs4eM:'
KN2='DHHC-1:03:FSIvPElWY3B9ipeksb7L2OXy/wwZJjNATVpndIGOm6i1ws/c6fYDEB0qN0RRXmt4hZKfrLnG0+Dt+gcUIS47SPic9Bo=:'
WRONG='DHHC-1:01:P0xZZnOAjZqntMHO2+j1Ag8cKTZDUF1qd4SRnqu4xdIXzmsW:'

WORK=$(mktemp -d /tmp/nvtcp-kauth.XXXXXX)
trap kernel_target_cleanup EXIT
trap 'exit 130' INT TERM

kernel_prepare "$CACHE" trixie
echo "kernel: $KERNEL_PKG ($KERNEL_VERSION), $(qemu-system-x86_64 --version | head -1)"

(umask 077
 for k in K1 K2 C2 K3 C3 KN CN KN2 WRONG; do printf '%s\n' "${!k}" >"$WORK/$k.key"; done)

# --- the nvtcp target ---------------------------------------------------------------------------
for attempt in 1 2 3 4 5; do
  PORT=$(kfree_port)
  cat >"$WORK/target.json" <<JSON
{"listeners": [{"address": "127.0.0.1", "port": $PORT}], "discovery_port": 0,
 "subsystems": [{"nqn": "$NQN", "namespaces": [{"type": "ram", "size": "32M"}],
   "hosts": [{"nqn": "$H1", "dhchap_key": "@$WORK/K1.key", "dhchap_hash": "sha256", "dhchap_dhgroup": "ffdhe2048"},
             {"nqn": "$H2", "dhchap_key": "@$WORK/K2.key", "dhchap_ctrl_key": "@$WORK/C2.key",
              "dhchap_hash": "sha384", "dhchap_dhgroup": "ffdhe3072"},
             {"nqn": "$H3", "dhchap_key": "@$WORK/K3.key", "dhchap_ctrl_key": "@$WORK/C3.key",
              "dhchap_hash": "sha512", "dhchap_dhgroup": "null"}]}]}
JSON
  rm -f "$WORK/ready"
  "$NVTCP" target --config "$WORK/target.json" --ready-file "$WORK/ready" >"$WORK/target.log" 2>&1 &
  TARGET_PID=$!
  ktarget_ready && break
  echo "target failed to start on $PORT (attempt $attempt): $(tail -1 "$WORK/target.log")"
done
[[ -n $TARGET_PID ]] || die "could not start the target"
echo "nvtcp target on 127.0.0.1:$PORT, pid $TARGET_PID"

# --- the guest ----------------------------------------------------------------------------------
kernel_overlay "$WORK/initrd.cpio" "$KERNEL_TEST_DIR/guest/auth.sh" "NQN=$NQN" "TPORT=$PORT" "KNQN=$KNQN" \
  "H1=$H1" "H2=$H2" "H3=$H3" "HN=$HN" "HN2=$HN2" "KN2='$KN2'" "K1='$K1'" "K2='$K2'" "C2='$C2'" "K3='$K3'" "C3='$C3'" "KN='$KN'" \
  "CN='$CN'" "WRONG='$WRONG'" "CTL_PORT=7000"
kernel_boot_nvmet auth "$WORK/initrd.cpio" 'NVTCP-GUEST .* (NVMET-READY|RUN-EXIT)' 300 "$PORT" || true
GUEST_S=$((SECONDS - T0))

# --- nvtcp host -> the guest's nvmet ----------------------------------------------------------------
TRID="trtype:tcp traddr:127.0.0.1 trsvcid:$NPORT subnqn:$KNQN hostnqn:$HN ns:1"
if grep -qa 'NVTCP-GUEST .* NVMET-READY' "$CONSOLE"; then
  if "$NVTCP" perf -r "$TRID" -q 8 -o 4K -w randrw -t 2 --verify --dhchap-secret "@$WORK/KN.key" \
       --dhchap-ctrl-secret "@$WORK/CN.key" >"$WORK/host.ok.out" 2>&1; then
    echo "PASS nvtcp-host.sha384.ffdhe4096.bi: $(grep -m1 IOPS "$WORK/host.ok.out" | tr -s ' ')"
  else
    fail "nvtcp host with the right secrets: $(tail -3 "$WORK/host.ok.out")"
  fi
  # Re-authentication the nvtcp host starts, both ways, on the admin and the I/O queue, while the
  # verify I/O goes on: nvmet must take a new Negotiate on authenticated queues.
  if "$NVTCP" perf -r "$TRID" -q 8 -o 4K -w randrw -t 3 --verify --reauth-interval 0.8 --dhchap-secret "@$WORK/KN.key" \
       --dhchap-ctrl-secret "@$WORK/CN.key" >"$WORK/host.reauth.out" 2>&1 \
     && grep -q 're-authentication: [1-9][0-9]* transactions, 0 failed' "$WORK/host.reauth.out"; then
    echo "PASS nvtcp-host.reauth: $(grep -m1 're-authentication:' "$WORK/host.reauth.out" | tr -s ' ')"
  else
    fail "nvtcp host re-authenticating to nvmet: $(tail -3 "$WORK/host.reauth.out")"
  fi
  # One way, another hash and group: nvmet holds no controller key for HN2.
  if "$NVTCP" perf -r "${TRID/hostnqn:$HN/hostnqn:$HN2}" -q 8 -o 16K -w randrw -t 2 --verify \
       --dhchap-secret "@$WORK/KN2.key" >"$WORK/host.uni.out" 2>&1; then
    echo "PASS nvtcp-host.sha512.ffdhe3072: $(grep -m1 IOPS "$WORK/host.uni.out" | tr -s ' ')"
  else
    fail "nvtcp host, one way with SHA-512/ffdhe3072: $(tail -3 "$WORK/host.uni.out")"
  fi
  if "$NVTCP" identify -r "$TRID" --dhchap-secret "@$WORK/WRONG.key" >"$WORK/host.wrong.out" 2>&1; then
    fail "nvtcp host with a wrong host secret was let in"
  elif grep -q 'DH-HMAC-CHAP authentication with controller .* failed' "$WORK/host.wrong.out"; then
    echo "PASS nvtcp-host.wrong-host-secret: $(tail -1 "$WORK/host.wrong.out")"
  else
    fail "nvtcp host with a wrong host secret: $(tail -2 "$WORK/host.wrong.out")"
  fi
  if "$NVTCP" identify -r "$TRID" --dhchap-secret "@$WORK/KN.key" --dhchap-ctrl-secret "@$WORK/WRONG.key" \
       >"$WORK/host.wrongctrl.out" 2>&1; then
    fail "nvtcp host accepted a controller that does not hold the controller secret it was given"
  elif grep -q "controller's response does not match" "$WORK/host.wrongctrl.out"; then
    echo "PASS nvtcp-host.wrong-ctrl-secret: $(tail -1 "$WORK/host.wrongctrl.out")"
  else
    fail "nvtcp host with a wrong controller secret: $(tail -2 "$WORK/host.wrongctrl.out")"
  fi
  (exec 3<>"/dev/tcp/127.0.0.1/$CTL_PORT" && echo 'done' >&3) 2>/dev/null || fail "could not reach the guest's control port"
else
  fail "the guest did not get to configure nvmet in 300 s"
fi
kernel_wait_marker 'NVTCP-GUEST .* RUN-EXIT' 120 || fail "the guest did not finish in time"
kernel_stop 30
stop_target

# --- verdicts ------------------------------------------------------------------------------------
tr -d '\r' <"$CONSOLE" >"$WORK/console.txt"
grep -a 'NVTCP-GUEST .* \(PASS\|FAIL\) ' "$WORK/console.txt" | sed 's/^NVTCP-GUEST \[[0-9.]*\] //'
for s in h1.sha256.ffdhe2048 h2.sha384.ffdhe3072.bi h3.sha512.null.bi wrong-host-secret wrong-ctrl-secret \
         h1.after-refusals; do
  grep -qa "NVTCP-GUEST .* PASS $s:" "$WORK/console.txt" || fail "guest step $s did not pass"
done
grep -qa 'NVTCP-GUEST .* RUN-EXIT 0$' "$WORK/console.txt" || fail "the guest script did not exit cleanly"
# The target's view: each host authenticated on its admin and I/O queues with what it was given.
check_auth() {  # HOSTNQN HASH GROUP BI
  local line="host $1 authenticated on qid %s (DH-HMAC-CHAP, hmac($2), DH group $3$4)"
  # shellcheck disable=SC2059
  grep -qF "$(printf "$line" 0)" "$WORK/target.log" || fail "target log: $1 not authenticated on qid 0 with $2/$3"
  grep -q "host $1 authenticated on qid [1-9]" "$WORK/target.log" || fail "target log: no I/O queue of $1 authenticated"
}
check_auth "$H1" sha256 ffdhe2048 ""
check_auth "$H2" sha384 ffdhe3072 ", controller authenticated to the host too"
check_auth "$H3" sha512 null ", controller authenticated to the host too"
grep -q "host $H1 failed DH-HMAC-CHAP authentication on qid 0: the host's response does not match" "$WORK/target.log" \
  || fail "target log: the wrong host secret's failure is not logged"
grep -aiE 'WARNING:|BUG:|Call Trace|Oops' "$WORK/console.txt" && fail "the guest kernel warned or oopsed"
for k in K1 K2 C2 K3 C3 KN CN KN2 WRONG; do
  v=${!k}; b64=${v:10:24}
  if grep -qF -- "$b64" "$WORK/target.log" "$WORK"/host.*.out; then fail "key $k appears in a log"; fi
done
grep -aiE ' (error|fatal|critical)[: ]' "$WORK/target.log" && fail "the target logged errors"
echo "guest: $GUEST_S s to the nvmet step"
[[ $FAILURES -eq 0 ]] || die "$FAILURES check(s) failed"
echo "PASS: DH-HMAC-CHAP between Linux $KERNEL_VERSION and nvtcp, both ways"

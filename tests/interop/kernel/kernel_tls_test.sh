#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# interop.kernel_tls: NVMe/TCP over TLS 1.3 with a pre-shared key between Linux 6.12 (Debian 13's
# kernel with kTLS, tlshd from ktls-utils 1.0.0 and nvme-cli 2.13 in a QEMU guest) and nvtcp, both ways.
#
#   kernel_tls_test.sh path/to/nvtcp CACHE_DIR
#
# 1. Kernel host -> nvtcp target. The target runs here with a listener that requires TLS and a plain
#    one; hosts H1 (SHA-256 PSK), H2 (SHA-384 PSK) and H3 carry their PSKs in owner-only files.
#    guest/tls.sh puts H1's PSK into the kernel's .nvme keyring with `nvme check-tls-key --insert` and
#    connects with `nvme connect --tls` (then again with header and data digests), H2 gives its PSK
#    with `--tls-key`; each writes and reads back 1 MiB with O_DIRECT. `nvme discover --tls` reads the
#    discovery log over TLS (TLS 1.3 on one port, none on the other). H3 with a PSK the target does not
#    hold and H1 in the clear on the TLS port are refused; H1 then connects again. Here: every queue of
#    each host came up in TLS with the cipher its PSK's hash calls for, the refusals are logged with
#    their reason, and no key appears in a log.
# 2. nvtcp host -> kernel target. The guest's nvmet port requires TLS 1.3 (addr_tsas tls1.3) and holds
#    host HN's PSK (for the subsystem and for discovery) in .nvme; `nvtcp perf --verify --tls-key`
#    writes and verifies through it, with and without digests, and as HN2 with a SHA-384 PSK (bound
#    with SHA-256, --tls-sha256-binder, as tlshd 1.0 wants), `nvtcp discover --tls-key` reads its
#    discovery log over TLS, and a wrong PSK fails the connect with the reason.
#
# Runs as root (apt-get); otherwise, or without Debian's packages, SKIP (77). NVTCP_INTEROP_KEEP=1
# keeps the console and logs (kept on failure anyway).
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/common.sh"
kernel_test_args interop.kernel_tls "Debian's kernel, busybox, nvme-cli, tlshd and QEMU" "$@"

NQN=nqn.2026-12.io.nvtcp:tls
KNQN=nqn.2026-12.io.nvtcp:kernel-tls
H1=nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6
H2=nqn.2014-08.org.nvmexpress:uuid:21111111-2222-4333-8444-555555555502
H3=nqn.2014-08.org.nvmexpress:uuid:21111111-2222-4333-8444-555555555503
HN=nqn.2014-08.org.nvmexpress:uuid:21111111-2222-4333-8444-5555555555ff
HN2=nqn.2014-08.org.nvmexpress:uuid:21111111-2222-4333-8444-5555555555fe
# The specification's example PSK (libnvme's test vector), then keys of fixed bytes with their CRC.
P1='NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:'
P2='NVMeTLSkey-1:02:gIGCg4SFhoeIiYqLjI2Oj5CRkpOUlZaXmJmam5ydnp+goaKjpKWmp6ipqqusra6vkk6Jzw==:'
P3='NVMeTLSkey-1:01:QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl9YjiZe:'
PN='NVMeTLSkey-1:01:YGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn8x9qY5:'
PN2='NVMeTLSkey-1:02:oKGio6SlpqeoqaqrrK2ur7CxsrO0tba3uLm6u7y9vr/AwcLDxMXGx8jJysvMzc7PZqjjjw==:'
WRONG='NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:'

WORK=$(mktemp -d /tmp/nvtcp-ktls.XXXXXX)
trap kernel_target_cleanup EXIT
trap 'exit 130' INT TERM

kernel_prepare "$CACHE" trixie
echo "kernel: $KERNEL_PKG ($KERNEL_VERSION), $(qemu-system-x86_64 --version | head -1)"

(umask 077
 for k in P1 P2 P3 PN PN2 WRONG; do printf '%s\n' "${!k}" >"$WORK/$k.key"; done)

# --- the nvtcp target ---------------------------------------------------------------------------
for attempt in 1 2 3 4 5; do
  PORT=$(kfree_port)
  PPORT=$(kfree_port "$PORT")
  cat >"$WORK/target.json" <<JSON
{"listeners": [{"address": "127.0.0.1", "port": $PORT, "tls": "required"},
               {"address": "127.0.0.1", "port": $PPORT}], "discovery_port": 0,
 "subsystems": [{"nqn": "$NQN", "namespaces": [{"type": "ram", "size": "32M"}],
   "hosts": [{"nqn": "$H1", "psk": "@$WORK/P1.key"}, {"nqn": "$H2", "psk": "@$WORK/P2.key"},
             {"nqn": "$H3", "psk": "@$WORK/P3.key"}]}]}
JSON
  rm -f "$WORK/ready"
  NVTCP_LOG=debug "$NVTCP" target --config "$WORK/target.json" --ready-file "$WORK/ready" >"$WORK/target.log" 2>&1 &
  TARGET_PID=$!
  ktarget_ready && break
  echo "target failed to start on $PORT/$PPORT (attempt $attempt): $(tail -1 "$WORK/target.log")"
done
[[ -n $TARGET_PID ]] || die "could not start the target"
echo "nvtcp target on 127.0.0.1:$PORT (TLS required) and :$PPORT (plain), pid $TARGET_PID"

# --- the guest ----------------------------------------------------------------------------------
kernel_overlay "$WORK/initrd.cpio" "$KERNEL_TEST_DIR/guest/tls.sh" "NQN=$NQN" "TPORT=$PORT" "PPORT=$PPORT" \
  "KNQN=$KNQN" "H1=$H1" "H2=$H2" "H3=$H3" "HN=$HN" "HN2=$HN2" "P1='$P1'" "P2='$P2'" "PN='$PN'" "PN2='$PN2'" \
  "WRONG='$WRONG'" "CTL_PORT=7000"
kernel_boot_nvmet tls "$WORK/initrd.cpio" 'NVTCP-GUEST .* (NVMET-READY|RUN-EXIT)' 300 "$PORT" "$PPORT" || true
GUEST_S=$((SECONDS - T0))

# --- nvtcp host -> the guest's nvmet ----------------------------------------------------------------
TRID="trtype:tcp traddr:127.0.0.1 trsvcid:$NPORT subnqn:$KNQN hostnqn:$HN ns:1"
# nvme-cli 2.13 (libnvme 1.13) filled the guest's keyring with TLS PSKs derived the legacy libnvme
# way: given only the key, as a user gives it, the host finds that derivation by itself (its
# first handshake is refused, the second, derived the legacy way, is let in).
LEGACY=
if grep -qa 'NVTCP-GUEST .* NVMET-READY' "$CONSOLE"; then
  if "$NVTCP" perf -r "$TRID" -q 8 -o 4K -w randrw -t 2 --verify --tls-key "@$WORK/PN.key" >"$WORK/host.ok.out" 2>&1; then
    if grep -q "trying libnvme's legacy labels" "$WORK/host.ok.out"; then
      echo "PASS nvtcp-host.tls: $(grep -m1 IOPS "$WORK/host.ok.out" | tr -s ' '), the legacy derivation found"
    else
      fail "nvtcp host over TLS: it did not say which derivation it found: $(grep -i tls "$WORK/host.ok.out" | head -3)"
    fi
  else
    fail "nvtcp host over TLS with only --tls-key: $(tail -3 "$WORK/host.ok.out")"
  fi
  if "$NVTCP" perf -r "$TRID" -q 4 -o 64K -w randrw -t 2 --verify --hdgst --ddgst --tls-key "@$WORK/PN.key" $LEGACY \
       >"$WORK/host.digests.out" 2>&1; then
    echo "PASS nvtcp-host.tls.digests: $(grep -m1 IOPS "$WORK/host.digests.out" | tr -s ' ')"
  else
    fail "nvtcp host over TLS with digests: $(tail -3 "$WORK/host.digests.out")"
  fi
  if "$NVTCP" perf -r "${TRID/hostnqn:$HN/hostnqn:$HN2}" -q 8 -o 16K -w randrw -t 2 --verify --tls-key "@$WORK/PN2.key" \
       $LEGACY --tls-sha256-binder >"$WORK/host.sha384.out" 2>&1; then
    echo "PASS nvtcp-host.tls.sha384: $(grep -m1 IOPS "$WORK/host.sha384.out" | tr -s ' ')"
  else
    fail "nvtcp host over TLS with a SHA-384 PSK: $(tail -3 "$WORK/host.sha384.out")"
  fi
  if "$NVTCP" discover -a 127.0.0.1 -s "$NPORT" -q "$HN" --tls-key "@$WORK/PN.key" $LEGACY >"$WORK/host.discover.out" 2>&1; then
    if grep -q "$KNQN" "$WORK/host.discover.out" && grep -q 'sectype: tls' "$WORK/host.discover.out"; then
      echo "PASS nvtcp-host.discover.tls: $(grep -m1 'treq' "$WORK/host.discover.out" | tr -s ' ')"
    else
      fail "nvtcp discover over TLS: the log lacks $KNQN or TLS 1.3: $(cat "$WORK/host.discover.out")"
    fi
  else
    fail "nvtcp discover over TLS: $(tail -3 "$WORK/host.discover.out")"
  fi
  if "$NVTCP" identify -r "$TRID" --tls-key "@$WORK/WRONG.key" $LEGACY >"$WORK/host.wrong.out" 2>&1; then
    fail "nvtcp host with a wrong PSK was let in"
  elif grep -q 'TLS handshake with .* failed' "$WORK/host.wrong.out"; then
    echo "PASS nvtcp-host.wrong-psk: $(tail -1 "$WORK/host.wrong.out")"
  else
    fail "nvtcp host with a wrong PSK: $(tail -2 "$WORK/host.wrong.out")"
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
for s in tls.h1.sha256 tls.h1.digests tls.h2.sha384.cmdline discover.tls wrong-psk clear-on-tls-port psk-host-on-plain-port \
         tls.h1.after-refusals; do
  grep -qa "NVTCP-GUEST .* PASS $s:" "$WORK/console.txt" || fail "guest step $s did not pass"
done
grep -qa 'NVTCP-GUEST .* RUN-EXIT 0$' "$WORK/console.txt" || fail "the guest script did not exit cleanly"
# The target's view: every queue of each host in TLS with the cipher its PSK's hash calls for.
check_tls() {  # HOSTNQN CIPHER...
  local h=$1 c; shift
  grep -q "host $h connected to $NQN (controller [0-9]*, qid 0, .*, TLS " "$WORK/target.log" \
    || fail "target log: $h's admin queue not in TLS"
  grep -q "host $h connected to $NQN (controller [0-9]*, qid [1-9][0-9]*, .*, TLS " "$WORK/target.log" \
    || fail "target log: no I/O queue of $h in TLS"
  for c in "$@"; do grep -q "host $h connected to $NQN .*, TLS $c" "$WORK/target.log" && return 0; done
  fail "target log: $h's queues use none of $*"
}
check_tls "$H1" TLS_AES_128_GCM_SHA256
# tlshd 1.0 binds a SHA-384 PSK with SHA-256 (GnuTLS's default), so the session takes a SHA-256
# suite; a later tlshd binds with SHA-384 and gets TLS_AES_256_GCM_SHA384.
check_tls "$H2" TLS_AES_128_GCM_SHA256 TLS_CHACHA20_POLY1305_SHA256 TLS_AES_256_GCM_SHA384
echo "target: $(grep -o 'TLS established ([^)]*)' "$WORK/target.log" | sed 's/identity "[^"]*"//' | sort | uniq -c | tr -s ' ')"
grep -q "host $H1 connected to $NQN .*TLS .*header digest, data digest" "$WORK/target.log" \
  || fail "target log: no TLS queue of $H1 with both digests"
grep -q "the host's binder matches no key configured for it" "$WORK/target.log" \
  || fail "target log: the wrong PSK's refusal is not logged"
grep -q "ICReq in the clear" "$WORK/target.log" || fail "target log: the host in the clear on the TLS port is not named"
grep -aiE 'WARNING:|BUG:|Call Trace|Oops' "$WORK/console.txt" && fail "the guest kernel warned or oopsed"
for k in P1 P2 P3 PN PN2 WRONG; do
  v=${!k}; b64=${v:16:24}
  if grep -qF -- "$b64" "$WORK/target.log" "$WORK"/host.*.out; then fail "key $k appears in a log"; fi
done
grep -v ' debug: ' "$WORK/target.log" | grep -aiE ' (error|fatal|critical)[: ]' && fail "the target logged errors"
echo "guest: $GUEST_S s to the nvmet step"
[[ $FAILURES -eq 0 ]] || die "$FAILURES check(s) failed"
echo "PASS: NVMe/TCP over TLS 1.3 between Linux $KERNEL_VERSION and nvtcp, both ways"

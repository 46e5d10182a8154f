#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# interop.kernel_ktls: nvtcp with the kernel's TLS record layer (kTLS TX). This machine's kernel has no
# tls module, so nvtcp runs inside a QEMU guest on Debian 13's kernel 6.12 (tls.ko and its cipher
# modules, tlshd from ktls-utils 1.0.0, nvme-cli 2.13), on the guest's loopback (guest/ktls.sh):
# nvtcp's kTLS unit tests with kTLS required, the nvtcp host against the nvtcp target (with and
# without digests, and with --no-ktls on the host), the kernel host against the nvtcp target and the
# nvtcp host against the guest's nvmet, each with a verified write and read-back; the target's log
# must show every TLS queue with its records out sealed by the kernel.
#
#   kernel_ktls_test.sh path/to/nvtcp path/to/nvtcp_unit_tests CACHE_DIR
#
# Runs as root (apt-get); otherwise, or without Debian's packages, SKIP (77). NVTCP_INTEROP_KEEP=1
# keeps the console (kept on failure anyway).
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/common.sh"
kernel_test_args interop.kernel_ktls "Debian's kernel, busybox, nvme-cli, tlshd and QEMU" "$@"

NQN=nqn.2026-12.io.nvtcp:ktls
KNQN=nqn.2026-12.io.nvtcp:kernel-ktls
HK=nqn.2014-08.org.nvmexpress:uuid:31111111-2222-4333-8444-5555555555a1
H1=nqn.2014-08.org.nvmexpress:uuid:31111111-2222-4333-8444-5555555555a2
HN=nqn.2014-08.org.nvmexpress:uuid:31111111-2222-4333-8444-5555555555a3
# The specification's example PSK (libnvme's test vector) and one of fixed bytes with its CRC.
PK='NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:'
PN='NVMeTLSkey-1:01:YGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn8x9qY5:'

WORK=$(mktemp -d /tmp/nvtcp-kktls.XXXXXX)
cleanup() {
  kernel_stop 5 || true
  if [[ $FAILURES -eq 0 && -z ${NVTCP_INTEROP_KEEP:-} ]]; then rm -rf "$WORK"; else echo "kept: $WORK"; fi
}
trap cleanup EXIT

kernel_prepare "$CACHE" trixie
echo "kernel: $KERNEL_PKG ($KERNEL_VERSION), $(qemu-system-x86_64 --version | head -1)"
stage_host_binaries "$WORK/hostbin.cpio" "$NVTCP" "$UNIT" || die "staging nvtcp and its unit tests for the guest failed"
kernel_overlay "$WORK/initrd.cpio" "$KERNEL_TEST_DIR/guest/ktls.sh" "NQN=$NQN" "KNQN=$KNQN" "HK=$HK" "H1=$H1" \
  "HN=$HN" "PK='$PK'" "PN='$PN'"
cat "$WORK/hostbin.cpio" >>"$WORK/initrd.cpio"
echo "initramfs: $(($(stat -c %s "$WORK/initrd.cpio") >> 20)) MiB"

KERNEL_MEMORY=1024M kernel_boot ktls "$WORK/initrd.cpio"
T0=$SECONDS
if ! kernel_wait_marker 'NVTCP-GUEST .* BOOTED' 240; then
  echo "--- qemu:"; cat "$WORK/ktls.qemu.log"
  echo "--- console (last 40 lines):"; tail -40 "$CONSOLE"
  die "the guest did not boot in 240 s"
fi
kernel_wait_marker 'NVTCP-GUEST .* RUN-EXIT' 480 || fail "the guest did not finish in 480 s"
kernel_stop 30
echo "guest ran $((SECONDS - T0)) s"

tr -d '\r' <"$CONSOLE" >"$WORK/console.txt"
grep -a 'NVTCP-GUEST .* \(PASS\|FAIL\) \|TARGET: ' "$WORK/console.txt" | sed 's/^NVTCP-GUEST \[[0-9.]*\] //; s/^/  /'
for step in ktls.unit ktls.nvtcp-nvtcp ktls.nvtcp-nvtcp.digests ktls.nvtcp-nvtcp.off ktls.kernel-host \
            ktls.nvtcp-nvmet "ktls.target.$HK" "ktls.target.$H1"; do
  grep -qaF "PASS $step:" "$WORK/console.txt" || fail "guest step $step did not pass"
done
grep -qaE 'NVTCP-GUEST .* RUN-EXIT 0$' "$WORK/console.txt" || fail "the guest script did not exit 0"
grep -aiE 'WARNING:|BUG:|Call Trace|Oops' "$WORK/console.txt" && fail "the guest kernel warned or oopsed"
for k in PK PN; do
  v=${!k}; b64=${v:16:24}
  if grep -qaF -- "$b64" <(grep -av 'nvtcp-test.conf' "$WORK/console.txt" | grep -a 'TARGET: '); then fail "key $k appears in the target's log"; fi
done
if [[ $FAILURES -ne 0 ]]; then
  echo "--- console (last 80 lines):"; tail -80 "$WORK/console.txt"
  exit 1
fi
echo "PASS: interop.kernel_ktls (nvtcp with kTLS TX on Linux $KERNEL_VERSION)"

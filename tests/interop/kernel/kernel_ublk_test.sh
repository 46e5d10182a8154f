#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# interop.kernel_ublk: the offload engine's block device (`nvtcp engine --ublk`) under a kernel
# that has ublk: Debian 13's (trixie) linux-image-amd64, fetched through a private apt
# configuration (common.sh: trixie_apt_opts) and booted under QEMU (TCG). This machine's own
# kernel has no ublk_drv, so the whole chain runs inside the guest, on the guest's loopback:
#
#   nvtcp target (RAM namespace) <- NVMe/TCP <- nvtcp engine --ublk -> /dev/ublkb0 <- fio, mkfs.ext4, mount
#
# The guest's userland is busybox plus this machine's nvtcp, fio and mke2fs, each with its own
# loader and libraries (stage_host_binaries). Guest steps (guest/ublk.sh), each of which must PASS:
# ublk.device, ublk.fio.libaio, ublk.fio.uring (crc32c verify), ublk.mkfs, ublk.fs, ublk.readback,
# ublk.stop, ublk.readback.restart, ublk.multipath (two paths, one cut under fio verify). The
# kernel must log no ublk or ext4 error.
#
#   kernel_ublk_test.sh path/to/nvtcp CACHE_DIR
#
# Runs as root (apt-get); otherwise, or without the packages, prints SKIP and exits 77.
# NVTCP_INTEROP_KEEP=1 keeps the console log (kept on failure anyway).
set -euo pipefail

# shellcheck source=common.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/common.sh"
kernel_test_args interop.kernel_ublk "Debian's kernel, busybox and QEMU" "$@"

WORK=$(mktemp -d /tmp/nvtcp-kublk.XXXXXX)
cleanup() {
  kernel_stop 5 || true
  if [[ $FAILURES -eq 0 && -z ${NVTCP_INTEROP_KEEP:-} ]]; then rm -rf "$WORK"; else echo "kept: $WORK"; fi
}
trap cleanup EXIT

for tool in fio mke2fs; do
  command -v $tool >/dev/null || apt_quiet "$WORK/apt.log" -y install --no-install-recommends \
    "$([[ $tool == fio ]] && echo fio || echo e2fsprogs)" || true
  command -v $tool >/dev/null || { echo "SKIP: no $tool here for the guest"; exit 77; }
done

kernel_prepare "$CACHE" trixie
echo "kernel: $KERNEL_PKG ($KERNEL_VERSION), $(qemu-system-x86_64 --version | head -1)"

stage_host_binaries "$WORK/hostbin.cpio" "$NVTCP" "$(command -v fio)" "$(command -v mke2fs)" \
  || die "staging nvtcp, fio and mke2fs for the guest failed"
RAM_MIB=128
kernel_overlay "$WORK/initrd.cpio" "$KERNEL_TEST_DIR/guest/ublk.sh" "RAM_MIB=$RAM_MIB"
cat "$WORK/hostbin.cpio" >>"$WORK/initrd.cpio"
echo "initramfs: $(($(stat -c %s "$WORK/initrd.cpio") >> 20)) MiB"

KERNEL_MEMORY=1536M kernel_boot ublk "$WORK/initrd.cpio"
T0=$SECONDS
if ! kernel_wait_marker 'NVTCP-GUEST .* BOOTED' 240; then
  echo "--- qemu:"; cat "$WORK/ublk.qemu.log"
  echo "--- console (last 40 lines):"; tail -40 "$CONSOLE"
  die "the guest did not boot in 240 s"
fi
echo "guest booted in $((SECONDS - T0)) s"
kernel_wait_marker 'NVTCP-GUEST .* RUN-EXIT' 600 || fail "the guest did not finish in 600 s"
kernel_stop 30
echo "guest ran $((SECONDS - T0)) s"

tr -d '\r' <"$CONSOLE" >"$WORK/console.txt"
grep -a 'NVTCP-GUEST' "$WORK/console.txt" | sed 's/^/  /'
for step in ublk.device ublk.fio.libaio ublk.fio.uring ublk.mkfs ublk.fs ublk.readback ublk.stop \
            ublk.readback.restart ublk.multipath; do
  grep -qaE "NVTCP-GUEST .* PASS $step(:|$)" "$WORK/console.txt" || fail "guest step $step did not pass"
done
grep -qaE 'NVTCP-GUEST .* RUN-EXIT 0$' "$WORK/console.txt" || fail "the guest script did not exit 0"
if bad=$(grep -aE '^KMSG [^:]+: .*(ublk|EXT4-fs).*(error|fail|timeout|Cannot)' "$WORK/console.txt"); then
  fail "the kernel logged ublk/ext4 errors: $bad"
fi
if [[ $FAILURES -ne 0 ]]; then
  echo "--- console (last 80 lines):"; tail -80 "$WORK/console.txt"
  exit 1
fi
echo "PASS: interop.kernel_ublk"

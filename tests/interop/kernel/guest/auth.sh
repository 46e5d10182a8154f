#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Guest side of interop.kernel_auth (busybox ash): DH-HMAC-CHAP between this Linux 6.12 and nvtcp.
#   1. The kernel host (nvme-cli 2.13 `nvme connect --dhchap-secret [--dhchap-ctrl-secret]`) against
#      the nvtcp target on the host (10.0.2.2:$TPORT): three hosts, each with the hash and DH group
#      the target is configured to choose for it (H1 SHA-256/ffdhe2048 one way, H2 SHA-384/ffdhe3072
#      both ways, H3 SHA-512/NULL both ways); each connects, writes 1 MiB of random data to the RAM
#      namespace at its own offset with O_DIRECT, reads it back (md5 equal) and disconnects. A wrong
#      host secret and a wrong controller secret: the connect fails, no controller is left.
#   2. This kernel's nvmet (configfs, 0.0.0.0:4420, forwarded) with host $HN allowed only with its
#      DH-HMAC-CHAP keys (dhchap_key, dhchap_ctrl_key, dhchap_hash hmac(sha384), dhchap_dhgroup
#      ffdhe4096), and $HN2 with a host key only (hmac(sha512), ffdhe3072): prints NVMET-READY and waits for the host script (the nvtcp host) to say it is done
#      on $CTL_PORT.
# Each step prints "NVTCP-GUEST [t] PASS|FAIL STEP: detail" for the host script.
. /guest/lib.sh
. /etc/nvtcp-test.conf

load_mod crc32c_generic || exit 1
load_mod nvme-core multipath=N || exit 1
load_mod nvme-tcp || exit 1
load_mod nvmet-tcp || exit 1
load_mod brd rd_nr=1 rd_size=32768 || exit 1
say "nvme-cli: $(nvme version 2>&1 | head -1)"

say "=== kernel host -> nvtcp target"
connect_rw h1.sha256.ffdhe2048 "$H1" 0 --dhchap-secret="$K1"
connect_rw h2.sha384.ffdhe3072.bi "$H2" 2 --dhchap-secret="$K2" --dhchap-ctrl-secret="$C2"
connect_rw h3.sha512.null.bi "$H3" 4 --dhchap-secret="$K3" --dhchap-ctrl-secret="$C3"
connect_refused wrong-host-secret "$H1" --dhchap-secret="$WRONG"
connect_refused wrong-ctrl-secret "$H2" --dhchap-secret="$K2" --dhchap-ctrl-secret="$WRONG"
connect_rw h1.after-refusals "$H1" 6 --dhchap-secret="$K1"

say "=== nvmet for the nvtcp host"
mount -t configfs none /sys/kernel/config 2>/dev/null || grep -q configfs /proc/mounts || { say "FAIL mount configfs"; exit 1; }
set -e
cd /sys/kernel/config/nvmet
mkdir "hosts/$HN"
echo "$KN" >"hosts/$HN/dhchap_key"
echo "$CN" >"hosts/$HN/dhchap_ctrl_key"
echo 'hmac(sha384)' >"hosts/$HN/dhchap_hash"
echo ffdhe4096 >"hosts/$HN/dhchap_dhgroup"
mkdir "hosts/$HN2"
echo "$KN2" >"hosts/$HN2/dhchap_key"
echo 'hmac(sha512)' >"hosts/$HN2/dhchap_hash"
echo ffdhe3072 >"hosts/$HN2/dhchap_dhgroup"
nvmet_serve "$KNQN" 0.0.0.0 4420 "" "$HN" "$HN2"
set +e
say "NVMET-READY $KNQN host $HN hash $(cat "hosts/$HN/dhchap_hash") group $(cat "hosts/$HN/dhchap_dhgroup")"
cmd=$(nc -l -p "$CTL_PORT" </dev/null 2>/dev/null)
say "control: '$cmd'"
kmsg nvmet
[ "$FAILED" -eq 0 ]

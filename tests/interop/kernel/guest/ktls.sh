#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Guest side of interop.kernel_ktls (busybox ash): nvtcp itself runs in this Linux 6.12 guest, whose
# kernel has kTLS (tls.ko and its cipher modules), so nvtcp hands the sealing of the TLS records it
# sends to the kernel. Everything on the guest's loopback:
#   ktls.unit             nvtcp's kTLS unit tests with NVTCP_REQUIRE_KTLS=1: crypto_info bytes, TlsStreams
#                         over sockets with the kernel sealing either side or both (SHA-256 and SHA-384
#                         suites, zero-copy sizes), an OpenSSL peer reading kernel-sealed records and
#                         its KeyUpdate request ending such a session with the reason said
#   ktls.nvtcp-nvtcp      nvtcp perf --verify over TLS to the nvtcp target here: both sides' records out
#                         sealed by the kernel (their logs say "kTLS TX")
#   ktls.nvtcp-nvtcp.digests  the same with header and data digests
#   ktls.nvtcp-nvtcp.off  the host with --no-ktls: its records sealed by nvtcp, the target's by the kernel
#   ktls.kernel-host      the kernel host (nvme connect --tls, tlshd) to the nvtcp target: 1 MiB
#                         written and read back, the target's queues in kTLS TX
#   ktls.nvtcp-nvmet      nvtcp perf --verify over TLS to this kernel's nvmet (addr_tsas tls1.3)
# Each step prints "NVTCP-GUEST [t] PASS|FAIL STEP: detail" for the host script.
. /guest/lib.sh
. /etc/nvtcp-test.conf

load_mod crc32c_generic || exit 1
for m in tls gcm ghash-generic chacha20poly1305 chacha_generic poly1305_generic; do load_mod $m || exit 1; done
load_mod nvme-core multipath=N || exit 1
load_mod nvme-tcp || exit 1
load_mod nvmet-tcp || exit 1
load_mod brd rd_nr=1 rd_size=32768 || exit 1

(umask 077; printf '%s\n' "$PK" >/tmp/pk.key; printf '%s\n' "$PN" >/tmp/pn.key)

if NVTCP_REQUIRE_KTLS=1 /usr/bin/nvtcp_unit_tests --gtest_filter='KernelCryptoInfo.*:*KernelTls*' >/tmp/unit.out 2>&1; then
  pass ktls.unit "$(grep -c '^\[       OK' /tmp/unit.out) cases: $(grep '^\[       OK' /tmp/unit.out | sed 's/^\[       OK \] //; s/ (.*//' | tr '\n' ' ')"
else
  fail ktls.unit "$( (grep -E 'Failure|Expected|Which is|actual|FAILED' /tmp/unit.out || tail -5 /tmp/unit.out) | head -12 | tr '\n' ' ')"
fi
kmsg unit

# The nvtcp target, TLS required, with host $HK's PSK (and $H1's, for the kernel host).
cat >/tmp/target.json <<JSON
{"listeners": [{"address": "127.0.0.1", "port": 4420, "tls": "required"}], "discovery_port": 0,
 "subsystems": [{"nqn": "$NQN", "namespaces": [{"type": "ram", "size": "32M"}],
   "hosts": [{"nqn": "$HK", "psk": "@/tmp/pk.key"}, {"nqn": "$H1", "psk": "@/tmp/pk.key"}]}]}
JSON
NVTCP_LOG=debug /usr/bin/nvtcp target --config /tmp/target.json --ready-file /tmp/target.ready >/tmp/target.log 2>&1 &
TPID=$!
i=0
while [ ! -s /tmp/target.ready ] && [ $i -lt 300 ]; do usleep 100000; i=$((i + 1)); done
[ -s /tmp/target.ready ] || { fail target "did not start: $(tail -3 /tmp/target.log)"; exit 1; }

TRID="trtype:tcp traddr:127.0.0.1 trsvcid:4420 subnqn:$NQN hostnqn:$HK ns:1"
# perf_ktls STEP WANT_HOST_KTLS PERF_OPTIONS...: perf --verify over TLS to the nvtcp target; the host's
# log must say (or, WANT_HOST_KTLS=0, must not say) that the kernel sealed its records.
perf_ktls() {
  local s=$1 want=$2 n
  shift 2
  if ! NVTCP_LOG=debug /usr/bin/nvtcp perf -r "$TRID" -t 2 --verify --tls-key @/tmp/pk.key "$@" >/tmp/$s.out 2>&1; then
    fail "$s" "perf: $(grep -v debug: /tmp/$s.out | tail -3 | tr '\n' ' ')"; kmsg "$s"; return
  fi
  n=$(grep -c 'sealed by the kernel (kTLS TX' /tmp/$s.out)
  if [ "$want" = 1 ] && [ "$n" -eq 0 ]; then fail "$s" "the host's records were not sealed by the kernel: $(grep -i ktls /tmp/$s.out | head -3)"
  elif [ "$want" = 0 ] && [ "$n" -ne 0 ]; then fail "$s" "--no-ktls, yet $n queues handed their records to the kernel"
  else pass "$s" "$(grep -m1 IOPS /tmp/$s.out | tr -s ' '), $n host queues in kTLS TX"; fi
  kmsg "$s"
}
perf_ktls ktls.nvtcp-nvtcp 1 -q 8 -o 16K -w randrw
perf_ktls ktls.nvtcp-nvtcp.digests 1 -q 4 -o 128K -w randrw --hdgst --ddgst
perf_ktls ktls.nvtcp-nvtcp.off 0 -q 8 -o 4K -w randrw --no-ktls

# The kernel host: the PSK into .nvme for $H1, tlshd for the handshake.
mkdir -p /etc
printf '[debug]\nloglevel=1\ntls=0\nnl=0\n[authenticate]\nkeyrings=.nvme\n' >/etc/tlshd.conf
tlshd -s -c /etc/tlshd.conf >/tmp/tlshd.log 2>&1 &
TLSHD=$!
usleep 500000
if nvme check-tls-key --keydata="$PK" --hostnqn="$H1" --subsysnqn="$NQN" --insert >/tmp/h1.key.out 2>&1; then
  TADDR=127.0.0.1 TPORT=4420 connect_rw ktls.kernel-host "$H1" 0 --tls
else
  fail ktls.kernel-host "check-tls-key --insert: $(tail -1 /tmp/h1.key.out)"
fi

# This kernel's nvmet, TLS 1.3 required on 127.0.0.1:4421, host $HN with its PSK in .nvme.
nvme check-tls-key --keydata="$PN" --hostnqn="$HN" --subsysnqn="$KNQN" --insert >/tmp/hn.key.out 2>&1 \
  || fail ktls.nvtcp-nvmet "check-tls-key --insert: $(tail -1 /tmp/hn.key.out)"
mount -t configfs none /sys/kernel/config 2>/dev/null || grep -q configfs /proc/mounts || { fail configfs mount; exit 1; }
(cd /sys/kernel/config/nvmet && mkdir "hosts/$HN" && nvmet_serve "$KNQN" 127.0.0.1 4421 tls1.3 "$HN") ||
  fail ktls.nvtcp-nvmet "configuring nvmet failed"
# nvme-cli 2.13 fills the keyring with the legacy libnvme derivation; the nvtcp host finds it.
s=ktls.nvtcp-nvmet
if NVTCP_LOG=debug /usr/bin/nvtcp perf -r "trtype:tcp traddr:127.0.0.1 trsvcid:4421 subnqn:$KNQN hostnqn:$HN ns:1" \
     -q 8 -o 16K -w randrw -t 2 --verify --tls-key @/tmp/pn.key >/tmp/$s.out 2>&1; then
  n=$(grep -c 'sealed by the kernel (kTLS TX' /tmp/$s.out)
  if [ "$n" -gt 0 ]; then pass $s "$(grep -m1 IOPS /tmp/$s.out | tr -s ' '), $n host queues in kTLS TX"
  else fail $s "the host's records were not sealed by the kernel: $(grep -i ktls /tmp/$s.out | head -3)"; fi
else
  fail $s "perf: $(grep -v debug: /tmp/$s.out | tail -3 | tr '\n' ' ')"
fi
kmsg nvmet

kill $TLSHD 2>/dev/null
kill -INT $TPID
wait $TPID
say "target exit $?"
# The target's view: every queue of both hosts in TLS, its records out sealed by the kernel.
for h in "$HK" "$H1"; do
  total=$(grep -c "host $h connected to $NQN .*, TLS " /tmp/target.log)
  kernel=$(grep -c "host $h connected to $NQN .*, TLS [A-Z0-9_]* (kTLS TX)" /tmp/target.log)
  if [ "$total" -gt 0 ] && [ "$total" = "$kernel" ]; then pass "ktls.target.$h" "$kernel queues in TLS, all in kTLS TX"
  else fail "ktls.target.$h" "$kernel of $total TLS queues in kTLS TX"; fi
done
grep -i 'ktls' /tmp/target.log | grep -v ' debug: ' | sed 's/^/TARGET: /' | head -5
grep -E ' (warn|error)' /tmp/target.log | sed 's/^/TARGET: /' | head -20
[ "$FAILED" -eq 0 ]

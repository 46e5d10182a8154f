#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Guest side of interop.kernel_tls (busybox ash): NVMe/TCP over TLS 1.3 between this Linux 6.12
# (nvme-tcp, nvmet-tcp, kTLS, tlshd from ktls-utils for the handshakes, nvme-cli 2.13 for the keys)
# and nvtcp.
#   1. The kernel host against the nvtcp target on the host (10.0.2.2:$TPORT requires TLS, $PPORT is
#      plain): PSKs go into the kernel's .nvme keyring with `nvme check-tls-key --insert` (or straight
#      from `nvme connect --tls-key`); each connect writes 1 MiB of random data to the RAM namespace at
#      its own offset with O_DIRECT, reads it back (md5 equal) and disconnects. SHA-256 PSK, the same
#      with header and data digests, a SHA-384 PSK given on the command line, `nvme discover --tls`; a
#      wrong PSK, a connect in the clear to the TLS port and the PSK host in the clear on the plain
#      port are refused with no controller left; the
#      first host then connects again.
#   2. This kernel's nvmet (configfs, 0.0.0.0:4420 forwarded, addr_tsas tls1.3, TLS required) with
#      host $HN's PSK in the keyring for the subsystem and for discovery, and $HN2's SHA-384 PSK: prints NVMET-READY and waits
#      for the host script (the nvtcp host) to say it is done on $CTL_PORT.
# Each step prints "NVTCP-GUEST [t] PASS|FAIL STEP: detail" for the host script.
. /guest/lib.sh
. /etc/nvtcp-test.conf

DISC=nqn.2014-08.org.nvmexpress.discovery
load_mod crc32c_generic || exit 1
for m in tls gcm ghash-generic chacha20poly1305 chacha_generic poly1305_generic; do load_mod $m || exit 1; done
load_mod nvme-core multipath=N || exit 1
load_mod nvme-tcp || exit 1
load_mod nvmet-tcp || exit 1
load_mod brd rd_nr=1 rd_size=32768 || exit 1
say "nvme-cli: $(nvme version 2>&1 | head -1); $(tlshd -v 2>&1 | head -1)"
grep -q '\.nvme' /proc/keys || { fail keyring "no .nvme keyring in /proc/keys"; exit 1; }

# tlshd serves the kernel's handshake upcalls (host and target side); it must see the .nvme keyring.
mkdir -p /etc
printf '[debug]\nloglevel=1\ntls=0\nnl=0\n[authenticate]\nkeyrings=.nvme\n' >/etc/tlshd.conf
tlshd -s -c /etc/tlshd.conf >/tmp/tlshd.log 2>&1 &
TLSHD=$!
usleep 500000
kill -0 $TLSHD 2>/dev/null || { fail tlshd "tlshd exited: $(tail -3 /tmp/tlshd.log)"; exit 1; }

# insert_psk STEP HOSTNQN SUBNQN KEY: the PSK derived for that pair into .nvme (identity version 0,
# "NVMe0R0h <hostnqn> <subnqn>").
insert_psk() {
  if nvme check-tls-key --keydata="$4" --hostnqn="$2" --subsysnqn="$3" --insert >/tmp/$1.key.out 2>&1; then
    say "key for $2 -> $3: $(tail -1 /tmp/$1.key.out)"
  else
    fail "$1" "check-tls-key --insert: $(tail -1 /tmp/$1.key.out)"
  fi
}

say "=== kernel host -> nvtcp target"
insert_psk h1 "$H1" "$NQN" "$P1"
connect_rw tls.h1.sha256 "$H1" 0 --tls
connect_rw tls.h1.digests "$H1" 2 --tls --hdr-digest --data-digest
connect_rw tls.h2.sha384.cmdline "$H2" 4 --tls --tls-key="$P2"

insert_psk disc "$H1" "$DISC" "$P1"
if nvme discover -t tcp -a 10.0.2.2 -s "$TPORT" --hostnqn="$H1" --hostid="$(hostid_of "$H1")" --tls -o json \
     >/tmp/discover.out 2>&1; then
  tr -d ' \n' </tmp/discover.out >/tmp/discover.flat
  # The subsystem's records (one per line): a host with a PSK is offered the TLS port only.
  tr '{' '\n' </tmp/discover.flat | grep "\"subnqn\":\"$NQN\"" >/tmp/discover.subsys || true
  if grep -q '"sectype":"tls13"' /tmp/discover.subsys && ! grep -q "\"trsvcid\":\"$PPORT\"" /tmp/discover.subsys; then
    pass discover.tls "$(grep -o '"treq":"[^"]*"' /tmp/discover.subsys | sort -u | tr '\n' ' ')"
  else
    fail discover.tls "the log lacks the subsystem over TLS 1.3, or offers the PSK host the plain port: $(head -c 1500 /tmp/discover.flat)"
  fi
else
  fail discover.tls "nvme discover --tls failed: $(tail -2 /tmp/discover.out)"
fi
kmsg discover

insert_psk h3 "$H3" "$NQN" "$WRONG"
connect_refused wrong-psk "$H3" --tls
connect_refused clear-on-tls-port "$H1"
# A host with a PSK is refused in the clear on the plain port too: its NQN proves nothing there.
SAVED_TPORT=$TPORT
TPORT=$PPORT
connect_refused psk-host-on-plain-port "$H1"
TPORT=$SAVED_TPORT
connect_rw tls.h1.after-refusals "$H1" 6 --tls

say "=== nvmet for the nvtcp host"
insert_psk nvmet "$HN" "$KNQN" "$PN"
insert_psk nvmet.disc "$HN" "$DISC" "$PN"
insert_psk nvmet.sha384 "$HN2" "$KNQN" "$PN2"
mount -t configfs none /sys/kernel/config 2>/dev/null || grep -q configfs /proc/mounts || { say "FAIL mount configfs"; exit 1; }
set -e
cd /sys/kernel/config/nvmet
mkdir "hosts/$HN"
mkdir "hosts/$HN2"
nvmet_serve "$KNQN" 0.0.0.0 4420 tls1.3 "$HN" "$HN2"
set +e
say "NVMET-READY $KNQN host $HN tsas $(cat ports/1/addr_tsas) treq $(cat ports/1/addr_treq)"
cmd=$(nc -l -p "$CTL_PORT" </dev/null 2>/dev/null)
say "control: '$cmd'"
kmsg nvmet
cd /
kill $TLSHD 2>/dev/null
sed 's/^/TLSHD: /' /tmp/tlshd.log | tail -60
[ "$FAILED" -eq 0 ]

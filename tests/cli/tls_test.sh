#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# TLS from the command line: a target with a TLS listener and a plain one, the host's PSK in a key
# file (JSON "hosts" entry "psk"), and nvtcp perf, identify and discover giving theirs with
# --tls-key (@FILE). The right key carries verified I/O over TLS (digests on top too); the
# discovery log says which port requires TLS and gives the PSK host only that one; a wrong key, no
# key on the TLS port, the PSK host in the clear on the plain port and a key file others can read
# are each refused with a clear message; a host without a PSK uses the plain port; no key appears
# in any log or output; the target serves on.
set -euo pipefail
NVTCP=$1
. "$(dirname "$0")/lib/target.sh" tls
# The sectype of each discovery log entry for subsystem $NQN in discover's output $1, one a line.
sectypes_of_subsystem() {
  awk -v nqn="$NQN" '/^=====Discovery Log Entry/ { s = "" } /^subnqn:/ { s = $2 } /^sectype:/ { if (s == nqn) print $2 }' "$1"
}
free_port() { free_ports 1; }
NQN=nqn.2026-12.io.nvtcp:tls
HOST=nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6
PLAIN_HOST=nqn.2014-08.org.nvmexpress:uuid:0b1d2f5e-8d3c-4a49-9a1e-4f1f5a6b7c8d
# The specification's example PSK (libnvme's test vector) and another one.
PSK='NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:'
WRONG='NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:'
umask 077
echo "$PSK" >"$dir/host.psk"
echo "$WRONG" >"$dir/wrong.psk"
tls_port=$(free_port)
plain_port=$(free_port)
cat >"$dir/target.json" <<JSON
{"listeners": [{"address": "127.0.0.1", "port": $tls_port, "tls": "required"},
               {"address": "127.0.0.1", "port": $plain_port}], "discovery_port": 0,
 "subsystems": [{"nqn": "$NQN", "namespaces": [{"type": "ram", "size": "16M"}],
   "hosts": [{"nqn": "$HOST", "psk": "@$dir/host.psk"}, "$PLAIN_HOST"]}]}
JSON
start_target --config "$dir/target.json"
trid="trtype:tcp traddr:127.0.0.1 trsvcid:$tls_port subnqn:$NQN hostnqn:$HOST ns:1"

"$NVTCP" perf -r "$trid" -q 8 -o 16K -w randrw -t 1 -P 2 --verify --tls-key "@$dir/host.psk" >"$dir/perf.txt" 2>&1 \
  || fail "perf with the right key: $(tail -3 "$dir/perf.txt")"
[ "$(grep -c 'TLS TLS_AES_128_GCM_SHA256' "$dir/target.log")" -ge 3 ] || fail "not every queue in TLS"

"$NVTCP" perf -r "$trid" -q 4 -o 64K -w randrw -t 0.5 --verify --hdgst --ddgst --tls --tls-key "@$dir/host.psk" \
  >"$dir/digests.txt" 2>&1 || fail "perf with digests in TLS: $(tail -3 "$dir/digests.txt")"

"$NVTCP" identify -r "$trid" --tls-key "$PSK" >"$dir/identify.txt" 2>&1 \
  || fail "identify with an inline key: $(tail -3 "$dir/identify.txt")"
grep -q '^cntlid' "$dir/identify.txt" || fail "identify printed no controller"

"$NVTCP" discover -a 127.0.0.1 -s "$tls_port" -q "$HOST" --tls-key "@$dir/host.psk" >"$dir/discover.txt" 2>&1 \
  || fail "discover over TLS: $(tail -3 "$dir/discover.txt")"
grep -q 'sectype: tls' "$dir/discover.txt" || fail "the discovery log does not say TLS: $(cat "$dir/discover.txt")"
[ "$(sectypes_of_subsystem "$dir/discover.txt")" = tls ] \
  || fail "the PSK host is not offered the TLS port alone: $(cat "$dir/discover.txt")"
grep -q 'admitted over TLS only' "$dir/target.log" || fail "the target did not say at start how the PSK host is admitted"
"$NVTCP" discover -a 127.0.0.1 -s "$plain_port" -q "$PLAIN_HOST" >"$dir/discover-plain.txt" 2>&1 \
  || fail "discover in the clear: $(tail -3 "$dir/discover-plain.txt")"
[ "$(sectypes_of_subsystem "$dir/discover-plain.txt")" = none ] \
  || fail "the host without a PSK is not offered the plain port alone: $(cat "$dir/discover-plain.txt")"

refused_read wrong "with a wrong key" --tls-key "@$dir/wrong.psk"
grep -q 'TLS handshake with .* failed' "$dir/wrong.txt" || fail "wrong key: $(tail -2 "$dir/wrong.txt")"
grep -q "binder matches no key configured for it" "$dir/target.log" || fail "the target did not log the wrong key"

refused_read none "in the clear on the TLS port"
grep -q 'ICReq in the clear' "$dir/target.log" || fail "the target did not say why it closed a host in the clear"

key_file_mode_refused --tls-key "$dir/host.psk"

# The plain listener refuses the PSK host (its NQN is no secret) and serves one without a PSK.
plain_trid="${trid/trsvcid:$tls_port/trsvcid:$plain_port}"
if "$NVTCP" perf -r "$plain_trid" -q 4 -o 4K -w read -t 0.3 >"$dir/psk-plain.txt" 2>&1; then
  fail "the PSK host's NQN read the namespace in the clear"
fi
grep -q "has a TLS PSK on $NQN and came in the clear: refused" "$dir/target.log" \
  || fail "the target did not say why it refused the PSK host in the clear"
"$NVTCP" perf -r "${plain_trid/hostnqn:$HOST/hostnqn:$PLAIN_HOST}" -q 4 -o 4K -w read -t 0.3 >"$dir/plain.txt" 2>&1 \
  || fail "the plain listener: $(tail -2 "$dir/plain.txt")"

no_key_leaked "$PSK" "$WRONG"
kill -0 "$target_pid" || fail "the target exited"
stop_target
echo "PASS: TLS from the command line, digests on top, discovery says TLS, refusals clear, no key in any output"

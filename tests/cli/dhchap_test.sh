#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# DH-HMAC-CHAP from the command line: a target configured with a host's secrets in key files
# (JSON "hosts" entries), and nvtcp perf and identify giving theirs with --dhchap-secret and
# --dhchap-ctrl-secret (@FILE). The right secrets authenticate every queue, both ways, and
# the I/O verifies; a wrong secret, a missing one and a key file others can read are each
# refused with a clear message; no key appears in any log or output; the target serves on.
set -euo pipefail
NVTCP=$1
. "$(dirname "$0")/lib/target.sh" dhchap
NQN=nqn.2026-11.io.nvtcp:dhchap
HOST=nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6
# The specification's example secret (SHA-256 transform) and a 48-byte one (SHA-384).
HOST_KEY='DHHC-1:01:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:'
CTRL_KEY='DHHC-1:02:ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoOEhYaHiImKi4yNjo+QkZKTvGwQfg==:'
WRONG_KEY='DHHC-1:00:AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAl7OaH:'
umask 077
echo "$HOST_KEY" >"$dir/host.key"
echo "$CTRL_KEY" >"$dir/ctrl.key"
echo "$WRONG_KEY" >"$dir/wrong.key"
cat >"$dir/target.json" <<JSON
{"listeners": [{"address": "127.0.0.1", "port": 0}], "discovery_port": 0,
 "subsystems": [{"nqn": "$NQN", "namespaces": [{"type": "ram", "size": "16M"}],
   "hosts": [{"nqn": "$HOST", "dhchap_key": "@$dir/host.key", "dhchap_ctrl_key": "@$dir/ctrl.key"},
             "nqn.2026-11.io.nvtcp:keyless"]}]}
JSON
start_target --config "$dir/target.json"
trid="trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN hostnqn:$HOST ns:1"

"$NVTCP" perf -r "$trid" -q 8 -o 4K -w randrw -t 1 -P 2 --verify \
  --dhchap-secret "@$dir/host.key" --dhchap-ctrl-secret "@$dir/ctrl.key" >"$dir/perf.txt" 2>&1 \
  || fail "perf with the right secrets: $(tail -3 "$dir/perf.txt")"
grep -q 'authenticated on qid 0 (DH-HMAC-CHAP, hmac(sha256), DH group ffdhe2048, controller authenticated' \
  "$dir/target.log" || fail "no admin queue authentication in the target log"
[ "$(grep -c 'authenticated on qid [1-9]' "$dir/target.log")" -ge 2 ] || fail "the I/O queues did not authenticate"

# --reauth-interval: every queue runs DH-HMAC-CHAP again, both ways, while the verify I/O goes on.
"$NVTCP" perf -r "$trid" -q 8 -o 4K -w randrw -t 2 -P 2 --verify --reauth-interval 0.4 \
  --dhchap-secret "@$dir/host.key" --dhchap-ctrl-secret "@$dir/ctrl.key" >"$dir/reauth.txt" 2>&1 \
  || fail "perf --reauth-interval: $(tail -3 "$dir/reauth.txt")"
grep -q 're-authentication: [1-9][0-9]* transactions, 0 failed' "$dir/reauth.txt" \
  || fail "perf --reauth-interval ran none: $(grep re-auth "$dir/reauth.txt")"
grep -q 're-authenticated on qid 0 ' "$dir/target.log" || fail "the admin queue did not re-authenticate"
grep -q 're-authenticated on qid [1-9]' "$dir/target.log" || fail "no I/O queue re-authenticated"
echo "PASS: $(grep 're-authentication:' "$dir/reauth.txt" | tr -s ' ')"

"$NVTCP" identify -r "$trid" --dhchap-secret "$HOST_KEY" >"$dir/identify.txt" 2>&1 \
  || fail "identify with an inline secret: $(tail -3 "$dir/identify.txt")"
grep -q '^cntlid' "$dir/identify.txt" || fail "identify printed no controller"

refused_read wrong "with a wrong secret" --dhchap-secret "@$dir/wrong.key"
grep -q 'authentication failed' "$dir/wrong.txt" || fail "wrong secret: $(tail -2 "$dir/wrong.txt")"
grep -q 'failed DH-HMAC-CHAP authentication on qid 0' "$dir/target.log" || fail "the target did not log the failure"

refused_read none "without a secret"
grep -q 'requires DH-HMAC-CHAP authentication' "$dir/none.txt" || fail "no secret: $(tail -2 "$dir/none.txt")"

key_file_mode_refused --dhchap-secret "$dir/host.key"

# A host without keys on the same subsystem needs none.
"$NVTCP" perf -r "${trid/hostnqn:$HOST/hostnqn:nqn.2026-11.io.nvtcp:keyless}" -q 4 -o 4K -w read -t 0.3 \
  >"$dir/keyless.txt" 2>&1 || fail "a host without keys: $(tail -2 "$dir/keyless.txt")"

no_key_leaked "$HOST_KEY" "$CTRL_KEY" "$WRONG_KEY"
kill -0 "$target_pid" || fail "the target exited"
stop_target
echo "PASS: DH-HMAC-CHAP from the command line, both ways, refusals clear, no key in any output"

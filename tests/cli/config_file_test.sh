#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The target's configuration file is what it runs with: "discovery_port", "cores",
# "in_capsule_data" and "max_h2c_data" from the file hold unless the command line gives the
# option (the command line's defaults used to replace them silently). Checked from the log
# (no discovery service, the reactor count) and from Identify Controller (IOCCSZ); then the
# same file with --in-capsule and --cores on the command line, which win.
set -euo pipefail
NVTCP=$1
. "$(dirname "$0")/lib/target.sh" config-file
NQN=nqn.2026-12.io.nvtcp:config-file
HOST_A=nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-1111-4111-8111-000000000001
HOST_B=nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-2222-4222-8222-000000000002
cat >"$dir/target.json" <<JSON
{"listeners": [{"address": "127.0.0.1", "port": 0}], "discovery_port": 0, "cores": 2,
 "in_capsule_data": 4096, "max_h2c_data": 65536,
 "subsystems": [{"nqn": "$NQN", "namespaces": [{"type": "null", "size": "1G"},
   {"type": "null", "size": "1G", "visible_to": ["$HOST_A"]}]}]}
JSON
# start ARGS...: the target with the file and ARGS; sets target_pid and port.
start() { start_target --config "$dir/target.json" "$@"; }
stop() {
  kill -INT "$target_pid"
  wait "$target_pid" || true
  target_pid=
}
ioccsz() {
  "$NVTCP" identify -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN" >"$dir/identify.out" 2>&1 \
    || fail "identify: $(tail -2 "$dir/identify.out")"
  awk '/^ioccsz/ { print $3 }' "$dir/identify.out"
}

start
grep -q 'discovery service on' "$dir/target.log" && fail "\"discovery_port\": 0 in the file, yet a discovery port was opened"
got=$(ioccsz)
[[ $got == $(((64 + 4096) / 16)) ]] || fail "IOCCSZ $got: the file's in_capsule_data 4096 was not used"
# Namespace 2 is "visible_to" host A only: B cannot reach it.
ns2() { "$NVTCP" perf -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN hostnqn:$1 ns:2" -q 1 -o 4K -w randread -t 0.5; }
ns2 "$HOST_A" >"$dir/ns2a.log" 2>&1 || fail "host A, named in visible_to, has no I/O to namespace 2: $(tail -2 "$dir/ns2a.log")"
ns2 "$HOST_B" >"$dir/ns2b.log" 2>&1 && fail "host B reached namespace 2, visible to host A only"
stop
grep -q 'in 2 reactor thread(s)' "$dir/target.log" || fail "the file's \"cores\": 2 was not used: $(tail -1 "$dir/target.log")"
echo "PASS: the file's discovery_port, cores and in_capsule_data hold (IOCCSZ $got); a namespace visible_to one host"

start --in-capsule 16384 --cores 1
got=$(ioccsz)
[[ $got == $(((64 + 16384) / 16)) ]] || fail "IOCCSZ $got: --in-capsule 16384 did not win over the file"
stop
grep -q 'in 1 reactor thread(s)' "$dir/target.log" || fail "--cores 1 did not win over the file"
echo "PASS: options on the command line win over the file (IOCCSZ $got)"

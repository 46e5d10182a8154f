#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The target's JSON-RPC socket from the command line: `nvtcp rpc` lists, allows and removes a
# host (a host removed is refused at its next connect, nvtcp perf's connect here), makes and
# deletes a subsystem with a listener of its own, a client
# framed as SPDK's rpc.py frames requests (pretty-printed, no newline, several on one
# connection) is answered in order, and errors exit 1 with the server's message. SPDK's own
# rpc.py against the same socket is rpc_spdk_test.sh.
set -euo pipefail
NVTCP=$1
. "$(dirname "$0")/lib/target.sh" rpc
NQN=nqn.2026-12.io.nvtcp:rpc
HOST=nqn.2014-08.org.nvmexpress:uuid:0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5
SOCK=$dir/target.sock
start_target -l 127.0.0.1:0 --discovery-port 0 --nqn "$NQN" --null 1G --ana-reporting --rpc-socket "$SOCK"
[ "$(stat -c %a "$SOCK")" = 600 ] || fail "the socket is mode $(stat -c %a "$SOCK"), not 600"
rpc() { "$NVTCP" rpc -s "$SOCK" "$@"; }
trid="trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN hostnqn:$HOST ns:1"
connects() { "$NVTCP" perf -r "$trid" -q 1 -o 4K -w randread -t 1 >"$dir/perf.log" 2>&1; }

rpc nvmf_get_subsystems >"$dir/subs.json"
python3 - "$dir/subs.json" "$NQN" "$port" <<'PY' || fail "nvmf_get_subsystems: $(cat "$dir/subs.json")"
import json, sys
subs = json.load(open(sys.argv[1]))
assert subs[0]["subtype"] == "Discovery", subs[0]
s = subs[1]
assert s["nqn"] == sys.argv[2] and s["allow_any_host"] is True, s
assert s["listen_addresses"][0]["trsvcid"] == sys.argv[3], s["listen_addresses"]
assert [n["nsid"] for n in s["namespaces"]] == [1] and s["namespaces"][0]["bdev_name"] == "null0", s["namespaces"]
PY

# A namespace made live: a bdev, then a namespace of it that I/O reaches; removed, it is gone.
ns2="trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN ns:2"
rpc bdev_null_create --name Null9 --num-blocks 32768 --block-size 4096 >/dev/null
[ "$(rpc nvmf_subsystem_add_ns --nqn "$NQN" --namespace.bdev-name Null9 --namespace.nsid 2)" = 2 ] || fail "add_ns"
"$NVTCP" perf -r "$ns2" -q 4 -o 4K -w randread -t 1 >"$dir/perf2.log" 2>&1 || fail "no I/O to the added namespace: $(tail -2 "$dir/perf2.log")"
rpc nvmf_subsystem_remove_ns --nqn "$NQN" --nsid 2 >/dev/null
"$NVTCP" perf -r "$ns2" -q 4 -o 4K -w randread -t 1 >"$dir/perf2.log" 2>&1 && fail "I/O reached a removed namespace"
rpc bdev_null_delete --name Null9 >/dev/null

# ANA: a listener's group made inaccessible answers I/O with the ANA status; optimized again,
# I/O goes through; nvmf_subsystem_get_listeners shows the state.
ana() { rpc nvmf_subsystem_listener_set_ana_state --nqn "$NQN" --listen-address.trtype tcp \
          --listen-address.traddr 127.0.0.1 --listen-address.trsvcid "$port" --ana-state "$1" >/dev/null; }
ana inaccessible
rpc nvmf_subsystem_get_listeners --nqn "$NQN" | python3 -c 'import json,sys; l=json.load(sys.stdin); assert l[0]["ana_states"] == [{"ana_group": 1, "ana_state": "inaccessible"}], l' \
  || fail "nvmf_subsystem_get_listeners after set_ana_state"
"$NVTCP" perf -r "$trid" -q 1 -o 4K -w randread -t 1 >"$dir/perf-ana.log" 2>&1 && fail "I/O went through an inaccessible path"
grep -q "Asymmetric Access Inaccessible" "$dir/perf-ana.log" || fail "no ANA status: $(tail -3 "$dir/perf-ana.log")"
grep -q "group 1: optimized -> inaccessible" "$dir/target.log" || fail "the ANA transition was not logged"
ana optimized
connects || fail "no I/O once the path was optimized again: $(tail -2 "$dir/perf.log")"

# A subsystem made live, on a listener of its own (port 0: the target picks one): I/O through
# it; the listener taken away, the port closes; the subsystem deleted, its bdev is free again.
NQN2=nqn.2026-12.io.nvtcp:rpc-live
rpc nvmf_create_subsystem --nqn "$NQN2" --allow-any-host true --serial-number NVTCPLIVE1 >/dev/null
rpc bdev_malloc_create --name Live0 --num-blocks 8192 --block-size 512 >/dev/null
rpc nvmf_subsystem_add_ns --nqn "$NQN2" --namespace.bdev-name Live0 >/dev/null
rpc nvmf_subsystem_add_listener --nqn "$NQN2" --listen-address.trtype tcp --listen-address.traddr 127.0.0.1 \
  --listen-address.trsvcid 0 >/dev/null
port2=$(rpc nvmf_subsystem_get_listeners --nqn "$NQN2" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["address"]["trsvcid"])')
[ "$port2" != "$port" ] || fail "the new subsystem's listener is the first one"
live="trtype:tcp traddr:127.0.0.1 trsvcid:$port2 subnqn:$NQN2 ns:1"
"$NVTCP" perf -r "$live" -q 4 -o 4K -w randrw -t 1 --verify >"$dir/perf-live.log" 2>&1 \
  || fail "no verified I/O to the subsystem made live: $(tail -2 "$dir/perf-live.log")"
"$NVTCP" perf -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN2 ns:1" -q 1 -o 4K -w randread -t 1 \
  >"$dir/perf-live.log" 2>&1 && fail "the new subsystem was reachable through a listener not added to it"
rpc nvmf_subsystem_remove_listener --nqn "$NQN2" --listen-address.trtype tcp --listen-address.traddr 127.0.0.1 \
  --listen-address.trsvcid "$port2" >/dev/null
for _ in $(seq 100); do grep -q "stopped listening on 127.0.0.1:$port2" "$dir/target.log" && break; sleep 0.05; done
grep -q "stopped listening on 127.0.0.1:$port2" "$dir/target.log" || fail "the listener nobody uses was not closed"
rpc nvmf_delete_subsystem --nqn "$NQN2" >/dev/null
grep -q "subsystem $NQN2 deleted" "$dir/target.log" || fail "no log line for the deleted subsystem"
rpc bdev_malloc_delete --name Live0 >/dev/null
connects || fail "the first subsystem stopped serving: $(tail -2 "$dir/perf.log")"

# Only listed hosts: refused, listed: let in, removed: refused again.
rpc nvmf_subsystem_allow_any_host --nqn "$NQN" --allow-any-host false >/dev/null
connects && fail "a host that is not listed connected"
rpc nvmf_subsystem_add_host "{\"nqn\": \"$NQN\", \"host\": \"$HOST\"}" >/dev/null
connects || fail "a listed host could not connect: $(tail -2 "$dir/perf.log")"
rpc nvmf_subsystem_remove_host --nqn "$NQN" --host "$HOST" >/dev/null
connects && fail "a removed host connected"
grep -q "host '$HOST' is not allowed on $NQN" "$dir/target.log" || fail "no log line for the refused host"

# Errors: exit 1 with the server's code and message.
if rpc nvmf_subsystem_get_qpairs --nqn nqn.2026-12.io.nvtcp:none 2>"$dir/err"; then fail "a missing subsystem answered"; fi
grep -q "error -32602: Unable to find subsystem with NQN nqn.2026-12.io.nvtcp:none" "$dir/err" || fail "$(cat "$dir/err")"
if rpc no_such_method 2>"$dir/err"; then fail "an unknown method answered"; fi
grep -q "error -32601" "$dir/err" || fail "$(cat "$dir/err")"

# Framed as rpc.py frames it: pretty-printed requests, back to back, on one connection.
python3 - "$SOCK" <<'PY' || fail "rpc.py-style framing"
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
reqs = [{"jsonrpc": "2.0", "method": m, "id": i + 1} for i, m in
        enumerate(["rpc_get_methods", "nvmf_get_stats", "spdk_get_version"])]
s.sendall("".join(json.dumps(r, indent=2) for r in reqs).encode())
buf, answers, dec = "", [], json.JSONDecoder()
while len(answers) < 3:
    data = s.recv(4096)
    assert data, "closed early"
    buf += data.decode()
    while buf.strip():
        try:
            obj, end = dec.raw_decode(buf.lstrip())
        except ValueError:
            break
        answers.append(obj)
        buf = buf.lstrip()[end:]
assert [a["id"] for a in answers] == [1, 2, 3], answers
assert "nvmf_subsystem_add_host" in answers[0]["result"]
assert answers[1]["result"]["poll_groups"][0]["name"] == "nvmf_tgt_poll_group_0"
PY


# save_config, and the target started again from what it wrote has the same configuration (a
# bdev no namespace has, a namespace at NSID 5 with its identifiers, the one host allowed).
rpc bdev_malloc_create --name Spare --num-blocks 2048 --block-size 512 >/dev/null
rpc bdev_null_create --name Null5 --num-blocks 1024 --block-size 4096 >/dev/null
rpc nvmf_subsystem_add_ns --nqn "$NQN" --namespace.bdev-name Null5 --namespace.nsid 5 >/dev/null
rpc nvmf_subsystem_add_host --nqn "$NQN" --host "$HOST" >/dev/null
rpc nvmf_subsystem_allow_any_host --nqn "$NQN" --allow-any-host false >/dev/null
# Masking: namespace 6 is seen by $HOST only (no_auto_visible, then nvmf_ns_add_host); a host
# cannot be named for a namespace every host sees.
rpc bdev_null_create --name Null6 --num-blocks 1024 --block-size 4096 >/dev/null
rpc nvmf_subsystem_add_ns --nqn "$NQN" --namespace.bdev-name Null6 --namespace.nsid 6 --namespace.no-auto-visible true >/dev/null
rpc nvmf_ns_add_host --nqn "$NQN" --nsid 6 --host "$HOST" >/dev/null
refused=$("$NVTCP" rpc -s "$SOCK" nvmf_ns_add_host --nqn "$NQN" --nsid 5 --host "$HOST" 2>&1) &&
  fail "nvmf_ns_add_host on a namespace every host sees was taken"
grep -q "Invalid parameters" <<<"$refused" || fail "nvmf_ns_add_host's refusal is not SPDK's: $refused"
rpc nvmf_get_subsystems | python3 -c '
import json, sys
ns = {n["nsid"]: n for s in json.load(sys.stdin) if s["nqn"] == sys.argv[1] for n in s["namespaces"]}
assert ns[6]["no_auto_visible"] and ns[6]["hosts"] == [sys.argv[2]], ns[6]
assert not ns[5]["no_auto_visible"], ns[5]' "$NQN" "$HOST" || fail "nvmf_get_subsystems does not show the masking"
rpc save_config >"$dir/saved.json"
grep -q '"nvmf_ns_add_host"' "$dir/saved.json" || fail "save_config left out nvmf_ns_add_host"
stop_target
[ -e "$SOCK" ] && fail "the socket outlived the target"
start_target --config "$dir/saved.json" --rpc-socket "$SOCK"  # from its saved configuration
rpc save_config >"$dir/saved-again.json"
python3 -c 'import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); assert a == b, (a, b)' \
  "$dir/saved.json" "$dir/saved-again.json" || fail "the configuration changed across save and load"
"$NVTCP" perf -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN ns:5" -q 4 -o 4K -w randread -t 1 \
  >"$dir/perf5.log" 2>&1 && fail "a host not listed reached the reloaded subsystem"
"$NVTCP" perf -r "${trid% ns:1} ns:5" -q 4 -o 4K -w randread -t 1 >"$dir/perf5.log" 2>&1 \
  || fail "no I/O to namespace 5 after the reload: $(tail -2 "$dir/perf5.log")"
"$NVTCP" perf -r "${trid% ns:1} ns:6" -q 4 -o 4K -w randread -t 1 >"$dir/perf6.log" 2>&1 \
  || fail "the host named for namespace 6 has no I/O to it after the reload: $(tail -2 "$dir/perf6.log")"
# Keys never leave the target: a host saved with one does not load without it being given again.
rpc nvmf_subsystem_add_host --nqn "$NQN" --host "$HOST" --dhchap-key 'DHHC-1:01:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:' >/dev/null
rpc save_config >"$dir/saved-keys.json"
grep -q 'ia6zGodOr4SEG0Zzaw398' "$dir/saved-keys.json" && fail "save_config wrote a key"
stop_target
if "$NVTCP" target --config "$dir/saved-keys.json" --rpc-socket none >"$dir/keys.log" 2>&1; then
  fail "a configuration with a key left out loaded"
fi
grep -q "host $HOST: dhchap_key" "$dir/keys.log" || fail "no message naming the host whose key is missing: $(cat "$dir/keys.log")"

# An empty start: nothing to serve but a named socket, so the target waits to be configured, on
# no port (4420 and 8009 stay free for the next gateway); built over RPC, it serves.
"$NVTCP" target --rpc-socket none >"$dir/none.log" 2>&1 && fail "a target with nothing to serve and no socket started"
grep -q "nothing to serve" "$dir/none.log" || fail "no reason given: $(cat "$dir/none.log")"
start_target --rpc-socket "$SOCK"
[ "$port" = 0 ] || fail "an empty start listens on $port"
grep -q "no subsystem yet and no listener: waiting to be configured on $SOCK" "$dir/target.log" || fail "no log line for the empty start"
rpc nvmf_create_subsystem --nqn "$NQN" --allow-any-host true --min-cntlid 100 --max-cntlid 199 >/dev/null
rpc bdev_null_create --name Null1 --num-blocks 1024 --block-size 512 >/dev/null
rpc nvmf_subsystem_add_ns --nqn "$NQN" --namespace.bdev-name Null1 >/dev/null
rpc nvmf_subsystem_add_listener --nqn "$NQN" --listen-address.trtype tcp --listen-address.traddr 127.0.0.1 \
  --listen-address.trsvcid 0 >/dev/null
port=$(rpc nvmf_subsystem_get_listeners --nqn "$NQN" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["address"]["trsvcid"])')
"$NVTCP" identify -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN" >"$dir/identify.txt" 2>&1 \
  || fail "no controller in the subsystem made over RPC: $(tail -2 "$dir/identify.txt")"
grep -Eq "^ *cntlid *: *(0x0*64|100)\b" "$dir/identify.txt" || fail "the controller ID is not from min_cntlid: $(grep -i cntlid "$dir/identify.txt")"
# Ended as an orchestrator ends nvmf_tgt: the answer comes, then the target shuts down cleanly.
[ "$(rpc spdk_kill_instance --sig-name SIGTERM)" = true ] || fail "spdk_kill_instance did not answer"
wait "$target_pid" || fail "the target did not exit cleanly after spdk_kill_instance"
target_pid=
# SIGINT shuts down as cleanly; SIGKILL ends it at once (the answer still comes first).
for sig in SIGINT SIGKILL; do
  start_target --rpc-socket "$SOCK"
  [ "$(rpc spdk_kill_instance --sig-name "$sig")" = true ] || fail "spdk_kill_instance $sig did not answer"
  rc=0
  wait "$target_pid" || rc=$?
  target_pid=
  want=0
  [ "$sig" = SIGKILL ] && want=137
  [ "$rc" = "$want" ] || fail "after spdk_kill_instance $sig the target exited $rc, not $want"
  rm -f "$SOCK"  # a killed target leaves its socket behind
done
echo "PASS: JSON-RPC from nvtcp rpc and rpc.py framing; hosts and namespaces changed live; save_config loads back; an empty start configured over RPC"

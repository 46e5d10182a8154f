#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `nvtcp --log-format json target`: every line the target writes is one JSON object (time, level,
# message), and the events an operator's tools look for carry their own keys, each logged once:
# a host connecting (connect: host_nqn, address, subsystem, cntlid, qid) and going (disconnect,
# with the reason), an ANA transition set by RPC (ana_change: subsystem, listener, anagrpid, from,
# to), a TermReq the target sends to a host that broke the protocol (termreq: address,
# direction, fes, fei), and DH-HMAC-CHAP with a host given a key by RPC (auth: host_nqn, address,
# subsystem, qid, result, with the hash and group on success and the reason on failure). Parsed
# with Python's json module, as a log shipper would.
set -euo pipefail
NVTCP=$1
. "$(dirname "$0")/lib/target.sh" logjson
NQN=nqn.2026-12.io.nvtcp:logjson
HOST=nqn.2014-08.org.nvmexpress:uuid:5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d
SOCK=$dir/target.sock
nvtcp_opts=(--log-format json)
start_target -l 127.0.0.1:0 --discovery-port 0 --nqn "$NQN" --null 1G --ana-reporting --rpc-socket "$SOCK"
"$NVTCP" perf -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN hostnqn:$HOST ns:1" -q 1 -o 4K -w randread \
  -t 1 >"$dir/perf.log" 2>&1 || fail "perf: $(tail -2 "$dir/perf.log")"
# A host with a DH-HMAC-CHAP key: once with its key (authenticated), once with another (refused).
KEYED=nqn.2014-08.org.nvmexpress:uuid:6b5c4d3e-2f10-4b8a-9d7e-7f6e5d4c3b2a
HOST_KEY="DHHC-1:01:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:"
WRONG_KEY="DHHC-1:00:IzA9SldkcX6LmKWyv8zZ5vMADRonNEFOW2h1go+cqbaDNxFn:"
"$NVTCP" rpc -s "$SOCK" nvmf_subsystem_add_host --nqn "$NQN" --host "$KEYED" --dhchap-key "$HOST_KEY" >/dev/null \
  || fail "nvmf_subsystem_add_host with a key"
"$NVTCP" identify -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN hostnqn:$KEYED" \
  --dhchap-secret "$HOST_KEY" >"$dir/auth-ok.log" 2>&1 || fail "identify with the host's key: $(tail -2 "$dir/auth-ok.log")"
if "$NVTCP" identify -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN hostnqn:$KEYED" \
     --dhchap-secret "$WRONG_KEY" >"$dir/auth-bad.log" 2>&1; then
  fail "identify with a wrong key was let in"
fi
"$NVTCP" rpc -s "$SOCK" nvmf_subsystem_listener_set_ana_state --nqn "$NQN" --listen-address.trtype tcp \
  --listen-address.traddr 127.0.0.1 --listen-address.trsvcid "$port" --ana-state inaccessible >/dev/null
# A PDU of an unknown type (0x7f) where ICReq belongs: the target answers with a C2HTermReq.
python3 - "$port" <<'PY'
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(struct.pack("<BBBBI", 0x7F, 0, 8, 0, 8))
s.settimeout(5)
try:
    while s.recv(4096):
        pass
except OSError:
    pass
PY
for _ in $(seq 100); do grep -q '"event":"termreq"' "$dir/target.log" && break; sleep 0.05; done
stop_target
python3 - "$dir/target.log" "$NQN" "$HOST" "$port" "$KEYED" <<'PY' || fail "the JSON log"
import json, sys
path, nqn, host, port, keyed = sys.argv[1:]
lines = [l for l in open(path) if l.strip()]
records = []
for l in lines:
    r = json.loads(l)  # every line is one object
    assert {"time", "level", "message"} <= r.keys(), r
    assert r["time"].endswith("Z") and "T" in r["time"], r["time"]
    records.append(r)
events = lambda name: [r for r in records if r.get("event") == name]
connects = [r for r in events("connect") if r["subsystem"] == nqn and r["host_nqn"] == host]
assert {r["qid"] for r in connects} >= {"0", "1"}, connects
for r in connects:
    assert r["host_nqn"] == host and r["address"].startswith("127.0.0.1:"), r
cntlid = connects[0]["cntlid"]
gone = [r for r in events("disconnect") if r["subsystem"] == nqn and r["cntlid"] == cntlid]
assert len(gone) == 1 and gone[0]["host_nqn"] == host and gone[0]["reason"], gone
ana = events("ana_change")
assert len(ana) == 1, ana
assert ana[0]["listener"] == f"127.0.0.1:{port}" and ana[0]["from"] == "optimized" and ana[0]["to"] == "inaccessible", ana
term = events("termreq")
assert len(term) == 1 and term[0]["direction"] == "sent" and term[0]["address"].startswith("127.0.0.1:"), term
auth = [r for r in events("auth") if r["host_nqn"] == keyed]
ok = [r for r in auth if r["result"] == "success"]
bad = [r for r in auth if r["result"] == "failure"]
assert len(ok) == 1 and ok[0]["qid"] == "0" and ok[0]["subsystem"] == nqn and ok[0]["hash"] and ok[0]["dhgroup"], auth
assert len(bad) == 1 and bad[0]["reason"] and bad[0]["address"].startswith("127.0.0.1:"), auth
assert not [r for r in events("auth") if r["host_nqn"] == host], "a host without a key was asked to authenticate"
print(f"{len(records)} lines, events: connect {len(connects)}, disconnect {len(gone)}, ana_change 1, termreq 1, "
      f"auth {len(ok)} success + {len(bad)} failure")
PY
echo "PASS: --log-format json: every line an object; connect, disconnect, ana_change, termreq and auth events with their keys"

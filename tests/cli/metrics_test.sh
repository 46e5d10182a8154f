#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `nvtcp target --metrics-listen 127.0.0.1:0`: the port it took is logged, curl scrapes
# /metrics, and Prometheus' own text parser (python3-prometheus-client's
# text_string_to_metric_families) reads every family; after `nvtcp perf` wrote and read a known
# number of blocks, the namespace's counters, bytes and latency histogram moved by exactly that,
# and so did the listener's.
# Hostile clients (garbage, an oversized head, one that sends requests and never reads, one that
# says nothing) stop neither the target nor other scrapes, nor its I/O. Other paths are 404,
# other methods 405.
set -euo pipefail
NVTCP=$(readlink -f "$1")
. "$(dirname "$0")/lib/prometheus.sh"
. "$(dirname "$0")/lib/target.sh" metrics
hostile_pid=
exit_kills=(hostile_pid "${exit_kills[@]}")
NQN=nqn.2026-11.io.nvtcp:metrics
start_target -l 127.0.0.1:0 --discovery-port 0 --nqn "$NQN" --null 1G --ram 64M --rpc-socket none \
  --metrics-listen 127.0.0.1:0
mport=$(sed -n 's#.*Prometheus metrics on http://127\.0\.0\.1:\([0-9][0-9]*\)/metrics.*#\1#p' "$dir/target.log")
[ -n "$mport" ] && [ "$mport" != 0 ] || fail "the metrics port is not in the log"
URL=http://127.0.0.1:$mport/metrics

curl -fsS -D "$dir/headers" "$URL" >"$dir/before.txt" || fail "curl could not scrape $URL"
grep -qi '^Content-Type: text/plain; version=0.0.4' "$dir/headers" || fail "Content-Type: $(cat "$dir/headers")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$mport/")" = 404 ] || fail "/ is not 404"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL")" = 405 ] || fail "POST is not 405"

# Known I/O on namespace 2 (RAM, 512-byte blocks): 600 writes of 4 KiB, then 400 reads of 8 KiB.
trid="trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN ns:2"
"$NVTCP" perf -r "$trid" -q 8 -o 4K -w randwrite --number-ios 600 -t 60 >"$dir/perf-w.log" 2>&1 ||
  fail "perf (writes): $(tail -3 "$dir/perf-w.log")"
"$NVTCP" perf -r "$trid" -q 8 -o 8K -w randread --number-ios 400 -t 60 >"$dir/perf-r.log" 2>&1 ||
  fail "perf (reads): $(tail -3 "$dir/perf-r.log")"
grep -q '(0 reads, 600 writes, 0 errors)' "$dir/perf-w.log" || fail "perf wrote: $(grep -o '([^)]*errors)' "$dir/perf-w.log")"
grep -q '(400 reads, 0 writes, 0 errors)' "$dir/perf-r.log" || fail "perf read: $(grep -o '([^)]*errors)' "$dir/perf-r.log")"

# A command counts once the target's socket has taken its response: wait for the last to show
# (the listener's counters are bumped after the namespace's), then scrape once more, so that no
# command is caught between two of its counters.
for _ in $(seq 100); do
  curl -fsS "$URL" >"$dir/after.txt"
  grep -q "^nvtcp_listener_reads_total{subsystem=\"$NQN\",listener=\"127.0.0.1:$port\"} 400$" "$dir/after.txt" && break
  sleep 0.1
done
curl -fsS "$URL" >"$dir/after.txt"

"$PY" - "$dir/before.txt" "$dir/after.txt" "$NQN" "127.0.0.1:$port" <<'PY' || fail "the exposition does not hold"
import sys
from exposition import parse

before_f, before = parse(sys.argv[1])
after_f, after = parse(sys.argv[2])
nqn = sys.argv[3]
listener = (("listener", sys.argv[4]), ("subsystem", nqn))
names = {f.name for f in after_f}
for want in ("nvtcp_namespace_reads", "nvtcp_namespace_writes", "nvtcp_namespace_read_bytes",
             "nvtcp_namespace_write_bytes", "nvtcp_namespace_errors", "nvtcp_namespace_read_latency_seconds",
             "nvtcp_namespace_write_latency_seconds", "nvtcp_namespace_outstanding_commands",
             "nvtcp_subsystem_controllers", "nvtcp_subsystem_queues", "nvtcp_reactor_busy_seconds",
             "nvtcp_reactor_io_commands", "nvtcp_connections", "nvtcp_listener_reads", "nvtcp_listener_writes",
             "nvtcp_listener_read_bytes", "nvtcp_listener_write_bytes", "nvtcp_listener_errors",
             "nvtcp_listener_read_latency_seconds", "nvtcp_listener_write_latency_seconds",
             "nvtcp_listener_outstanding_commands"):
    assert want in names, f"no family {want} in {sorted(names)}"

ns2 = (("bdev", "ram0"), ("nsid", "2"), ("subsystem", nqn))
ns1 = (("bdev", "null0"), ("nsid", "1"), ("subsystem", nqn))
def get(samples, name, labels, **extra):
    key = (name, tuple(sorted(dict(labels, **extra).items())))
    assert key in samples, f"no sample {key}"
    return samples[key]
def moved(name, labels=ns2, **extra):
    return get(after, name, labels, **extra) - get(before, name, labels, **extra)

expect = {
    "nvtcp_namespace_writes_total": 600, "nvtcp_namespace_write_bytes_total": 600 * 4096,
    "nvtcp_namespace_reads_total": 400, "nvtcp_namespace_read_bytes_total": 400 * 8192,
    "nvtcp_namespace_read_latency_seconds_count": 400, "nvtcp_namespace_write_latency_seconds_count": 600,
}
for name, n in expect.items():
    assert moved(name) == n, f"{name} moved by {moved(name)}, not {n}"
for op in ("read", "write", "other"):
    assert moved("nvtcp_namespace_errors_total", op=op) == 0, op
assert moved("nvtcp_namespace_reads_total", ns1) == 0 and moved("nvtcp_namespace_writes_total", ns1) == 0
for kind, n in (("read", 400), ("write", 600)):
    name = f"nvtcp_namespace_{kind}_latency_seconds_bucket"
    buckets = sorted(((float(dict(l)["le"]), v) for (s, l), v in after.items()
                      if s == name and dict(l)["nsid"] == "2"), key=lambda b: b[0])
    assert buckets[-1][0] == float("inf") and buckets[-1][1] == n, buckets[-1]
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), f"{name} is not cumulative"
    assert get(after, f"nvtcp_namespace_{kind}_latency_seconds_sum", ns2) > 0
busy = sum(v for (s, l), v in after.items() if s == "nvtcp_reactor_busy_seconds_total")
assert busy > 0, "no busy time"
assert get(after, "nvtcp_subsystem_controllers", (("subsystem", nqn),)) == 0  # perf has left
# The same I/O, counted by the listener perf came in on.
for name, n in expect.items():
    name = name.replace("nvtcp_namespace_", "nvtcp_listener_")
    assert moved(name, listener) == n, f"{name} moved by {moved(name, listener)}, not {n}"
for op in ("read", "write", "other"):
    assert moved("nvtcp_listener_errors_total", listener, op=op) == 0, op
assert get(after, "nvtcp_listener_outstanding_commands", listener) == 0
print("exposition: %d families, counters moved by exactly the I/O done" % len(after_f))
PY

# Hostile clients, all at once, held open while others scrape and a host does I/O.
"$PY" - "$mport" >"$dir/hostile.log" 2>&1 <<'PY' &
import socket, sys, time
port = int(sys.argv[1])
def conn():
    s = socket.create_connection(("127.0.0.1", port))
    return s
g = conn(); g.sendall(b"\x16\x03\x01 garbage\r\n\r\n"); assert g.recv(100).startswith(b"HTTP/1.1 400"), "garbage"
o = conn(); o.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 65536)
assert o.recv(100).startswith(b"HTTP/1.1 431"), "oversized"
silent = conn()
half = conn(); half.sendall(b"GET /metr")
never = conn(); never.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096); never.settimeout(2)
try:
    never.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 5000)
except socket.timeout:
    pass
print("hostile clients in place", flush=True)
time.sleep(30)
PY
hostile_pid=$!
for _ in $(seq 100); do grep -q 'in place' "$dir/hostile.log" && break; sleep 0.1; done
grep -q 'in place' "$dir/hostile.log" || fail "hostile clients: $(cat "$dir/hostile.log")"
for _ in 1 2 3; do curl -fsS --max-time 10 "$URL" >/dev/null || fail "a scrape failed beside hostile clients"; done
"$NVTCP" perf -r "$trid" -q 4 -o 4K -w randread --number-ios 100 -t 30 >"$dir/perf-h.log" 2>&1 ||
  fail "no I/O beside hostile clients: $(tail -3 "$dir/perf-h.log")"
kill "$hostile_pid" 2>/dev/null || true
wait "$hostile_pid" 2>/dev/null || true
hostile_pid=
kill -0 "$target_pid" || fail "the target died"
scrape=$(curl -fsS "$URL") || fail "no scrape after the hostile clients"
grep -q '^nvtcp_connections ' <<<"$scrape" || fail "no nvtcp_connections in the scrape after the hostile clients"
echo "PASS: metrics scraped with curl, parsed by prometheus_client, exact after known I/O; hostile clients harmless"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `nvtcp engine --metrics-listen 127.0.0.1:0`: the offload engine's figures, scraped with curl
# and read by Prometheus' own text parser (python3-prometheus-client). After `nvtcp perf`
# through the engine did a known number of I/Os, the engine's forwarded and completed
# counters moved by exactly that, per core and per subsystem, and its read latency histogram
# holds them (cumulative buckets up to +Inf); its path is connected; an
# application attached shows while it is there and not after; a namespace added through the
# target's RPC is passed on to the application attached then (a notice counted), and the
# subsystem's namespace count follows.
set -euo pipefail
NVTCP=$(readlink -f "$1")
. "$(dirname "$0")/lib/prometheus.sh"
dir=$(mktemp -d /tmp/nvtcp-engine-metrics.XXXXXX)
target_pid=
engine_pid=
app_pid=
# stop PID NAME: SIGTERM, and 20 s to exit. One that hangs on the way out is a failure of its
# own: its threads' stacks are printed (gdb) before SIGKILL.
stop() {
  local pid=$1 name=$2
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }; sleep 0.1; done
  echo "FAIL: the $name (pid $pid) did not exit 20 s after SIGTERM; its threads:" >&2
  command -v gdb >/dev/null && gdb -p "$pid" -batch -ex 'thread apply all bt' 2>/dev/null | grep -E '^(Thread|#)' >&2
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  return 1
}
cleanup() {
  local rc=$? ok=1
  stop "$app_pid" application || ok=
  stop "$engine_pid" engine || ok=
  stop "$target_pid" target || ok=
  if [ -z "$ok" ]; then
    echo "--- engine log (last 20 lines):" >&2; tail -20 "$dir/engine.log" >&2 || true
    rc=1
  fi
  rm -rf "$dir"
  exit "$rc"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- engine log (last 20 lines):" >&2; tail -20 "$dir/engine.log" >&2 || true
  exit 1
}
NQN=nqn.2026-12.io.nvtcp:engine-metrics
SOCK=$dir/target.sock
"$NVTCP" target -l 127.0.0.1:0 --discovery-port 0 --nqn "$NQN" --null 1G --rpc-socket "$SOCK" \
  --ready-file "$dir/ready" >"$dir/target.log" 2>&1 &
target_pid=$!
for _ in $(seq 200); do [ -s "$dir/ready" ] && break; sleep 0.05; done
[ -s "$dir/ready" ] || fail "target did not start"
port=$(cat "$dir/ready")

ESOCK=$dir/engine.sock
"$NVTCP" engine --controller "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN" --socket "$ESOCK" \
  --metrics-listen 127.0.0.1:0 --ready-file "$dir/engine.ready" >"$dir/engine.log" 2>&1 &
engine_pid=$!
for _ in $(seq 200); do [ -s "$dir/engine.ready" ] && break; sleep 0.05; done
[ -s "$dir/engine.ready" ] || fail "engine did not start"
mport=$(sed -n 's#.*Prometheus metrics on http://127\.0\.0\.1:\([0-9][0-9]*\)/metrics.*#\1#p' "$dir/engine.log")
[ -n "$mport" ] && [ "$mport" != 0 ] || fail "the metrics port is not in the log"
URL=http://127.0.0.1:$mport/metrics
curl -fsS "$URL" >"$dir/before.txt" || fail "curl could not scrape $URL"
# scrape_until FILE PATTERN...: scrape into $dir/FILE until every pattern matches a line (the
# cores publish their counters as they go idle), for up to 10 s; the Python checks below say
# what was wrong if it never did.
scrape_until() {
  local out=$dir/$1 pattern ok
  shift
  for _ in $(seq 100); do
    curl -fsS "$URL" >"$out"
    ok=1
    for pattern in "$@"; do grep -q "$pattern" "$out" || { ok=; break; }; done
    [ -n "$ok" ] && return 0
    sleep 0.1
  done
}

etrid="trtype:engine traddr:$ESOCK subnqn:$NQN ns:1"
"$NVTCP" perf -r "$etrid" -q 8 -o 4K -w randread --number-ios 700 -t 60 >"$dir/perf.log" 2>&1 ||
  fail "perf through the engine: $(tail -3 "$dir/perf.log")"
grep -q '(700 reads, 0 writes, 0 errors)' "$dir/perf.log" || fail "perf did: $(grep -o '([^)]*errors)' "$dir/perf.log")"
scrape_until after.txt "^nvtcp_engine_remote_completions_total{subsystem=\"$NQN\"} 700$" \
  "^nvtcp_engine_remote_applications{subsystem=\"$NQN\"} 0$"

# An application that stays attached (perf for 30 s at queue depth 1) while a namespace is
# added through the target's RPC.
"$NVTCP" perf -r "$etrid" -q 1 -o 4K -w randread -t 30 >"$dir/perf-long.log" 2>&1 &
app_pid=$!
# Attached, and its I/O queue created (perf does that after the attach).
scrape_until attached.txt "^nvtcp_engine_remote_applications{subsystem=\"$NQN\"} 1$" \
  '^nvtcp_engine_core_queues{core="0",cpu="any"} [1-9]'
"$NVTCP" rpc -s "$SOCK" bdev_null_create --name Null7 --num-blocks 32768 --block-size 512 >/dev/null
[ "$("$NVTCP" rpc -s "$SOCK" nvmf_subsystem_add_ns --nqn "$NQN" --namespace.bdev-name Null7 --namespace.nsid 7)" = 7 ] ||
  fail "add_ns"
scrape_until notice.txt "^nvtcp_engine_remote_namespace_notices_total{subsystem=\"$NQN\"} 1$" \
  "^nvtcp_engine_remote_namespaces{subsystem=\"$NQN\"} 2$"
grep -q "engine: namespace 7 of $NQN changed; 1 application(s) notified" "$dir/engine.log" ||
  fail "the engine did not pass namespace 7 on to the application attached"

"$PY" - "$dir/before.txt" "$dir/after.txt" "$dir/attached.txt" "$dir/notice.txt" "$NQN" "$port" <<'PY' ||
import sys
from exposition import parse

_, before = parse(sys.argv[1], "nvtcp_engine_")
after_f, after = parse(sys.argv[2], "nvtcp_engine_")
_, attached = parse(sys.argv[3], "nvtcp_engine_")
_, notice = parse(sys.argv[4], "nvtcp_engine_")
nqn, port = sys.argv[5], sys.argv[6]
sub = (("subsystem", nqn),)
path = (("path", f"127.0.0.1:{port}"), ("subsystem", nqn))
core = (("core", "0"), ("cpu", "any"))
def get(samples, name, labels=()):
    key = (name, tuple(sorted(labels)))
    assert key in samples, f"no sample {key}"
    return samples[key]
def moved(name, labels):
    return get(after, name, labels) - get(before, name, labels)

# perf's own admin commands are answered by the engine or forwarded as admin: I/O is exact.
for name, labels in (("nvtcp_engine_remote_commands_forwarded_total", sub), ("nvtcp_engine_remote_completions_total", sub),
                     ("nvtcp_engine_core_commands_forwarded_total", core), ("nvtcp_engine_core_completions_total", core)):
    assert moved(name, labels) == 700, f"{name} moved by {moved(name, labels)}, not 700"
assert moved("nvtcp_engine_remote_reads_total", sub) == 700
assert moved("nvtcp_engine_remote_read_bytes_total", sub) == 700 * 4096
assert moved("nvtcp_engine_remote_writes_total", sub) == 0
assert get(after, "nvtcp_engine_remote_errors_total", sub + (("op", "read"),)) == 0
# The read latency histogram holds the 700 as well, its buckets cumulative up to +Inf.
lat = "nvtcp_engine_remote_read_latency_seconds"
assert moved(lat + "_count", sub) == 700, f"{lat} count moved by {moved(lat + '_count', sub)}"
assert get(after, lat + "_sum", sub) > 0, "700 reads in no time at all"
buckets = sorted(((float(dict(k[1])["le"]), v) for k, v in after.items()
                  if k[0] == lat + "_bucket" and dict(k[1])["subsystem"] == nqn))
assert len(buckets) == 20 and buckets[-1][0] == float("inf"), buckets
assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), f"buckets not cumulative: {buckets}"
assert buckets[-1][1] == get(after, lat + "_count", sub)
assert moved("nvtcp_engine_attaches_total", ()) == 1
assert get(after, "nvtcp_engine_applications") == 0 and get(after, "nvtcp_engine_remote_applications", sub) == 0
assert get(after, "nvtcp_engine_remote_in_flight_commands", sub) == 0
assert get(after, "nvtcp_engine_core_in_flight_commands", core) == 0
assert get(after, "nvtcp_engine_path_connected", path) == 1
assert get(after, "nvtcp_engine_path_resets_total", path) == 0
assert get(after, "nvtcp_engine_remote_namespaces", sub) == 1
assert get(after, "nvtcp_engine_core_busy_seconds_total", core) > 0, "no busy time"
# CPU time against busy (wall) time is no invariant: on a loaded machine a busy turn waits for
# the CPU. That the counter moves is what can be checked.
assert get(after, "nvtcp_engine_core_cpu_seconds_total", core) > 0, "no CPU time counted"
assert get(attached, "nvtcp_engine_applications") == 1 and get(attached, "nvtcp_engine_remote_applications", sub) == 1
assert get(attached, "nvtcp_engine_mapped_bytes") > 0
assert get(attached, "nvtcp_engine_core_queues", core) >= 1
assert get(notice, "nvtcp_engine_remote_namespace_notices_total", sub) == 1
assert get(notice, "nvtcp_engine_remote_namespaces", sub) == 2
print("engine exposition: %d families; I/O counted exactly; the notice counted" % len(after_f))
PY
  fail "the exposition does not hold"
kill "$app_pid" 2>/dev/null || true
wait "$app_pid" 2>/dev/null || true
app_pid=
kill -0 "$engine_pid" || fail "the engine died"
echo "PASS: the engine's metrics scraped with curl, parsed by prometheus_client, exact after known I/O"

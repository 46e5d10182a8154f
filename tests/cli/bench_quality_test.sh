#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# nvtcp bench says when a figure cannot be trusted, on streams this test spoils on purpose:
# - a stall: the target is stopped (SIGSTOP) for a second in the middle of a run, so I/O is
#   outstanding and nothing completes. The bench must find it in the run's timeline (nvtcp
#   perf's, and fio's IOPS logs when fio is here), keep the run aside with its evidence, run it
#   again, and say so in its output and in bench.json.
# - interference: a CPU hog on the initiator's CPU during a run. The bench must mark the run
#   with the share of the CPU that the hog took.
# - a receive window that keeps closing: a second target whose receive buffers are fixed at
#   64 KiB takes 128 KiB writes. The bench must mark the run 'W' with the kernel's count of
#   zero windows (a level, not a stall: the run is kept).
# Nothing here asserts a time or a rate: the stop is a second long inside a 3-s run, and the
# hog takes what the scheduler gives it.
set -euo pipefail
NVTCP=$1
dir=$(mktemp -d /tmp/nvtcp-bench-quality.XXXXXX)
target_pid= hog_pid= small_pid=
cleanup() {
  [ -n "$target_pid" ] && { kill -CONT "$target_pid"; kill "$target_pid"; } 2>/dev/null || true
  [ -n "$small_pid" ] && kill "$small_pid" 2>/dev/null || true
  [ -n "$hog_pid" ] && kill "$hog_pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; tail -n 20 "$dir"/*.out >&2 || true; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "SKIP: needs 2 CPUs (target on 0, initiator on 1)"; exit 77; }

NQN=nqn.2026-11.io.nvtcp:quality
taskset -c 0 "$NVTCP" target -l 127.0.0.1:0 --discovery-port 0 --nqn "$NQN" --null 1T \
  --ready-file "$dir/ready" --log-level info >"$dir/target.log" 2>&1 &
target_pid=$!
for _ in $(seq 200); do [ -s "$dir/ready" ] && break; sleep 0.05; done
[ -s "$dir/ready" ] || fail "target did not start"
trid="trtype:tcp traddr:127.0.0.1 trsvcid:$(cat "$dir/ready") subnqn:$NQN ns:1"

# Stops the target for a second once the run's queues are connected (count connects of I/O
# queues in the target's log beyond those already there) and its ramp is over.
stall_once() {
  local want=$1 before now
  before=$(grep -c 'qid [1-9]' "$dir/target.log" || true)
  for _ in $(seq 600); do
    now=$(grep -c 'qid [1-9]' "$dir/target.log" || true)
    [ $((now - before)) -ge "$want" ] && break
    sleep 0.02
  done
  sleep 0.6
  kill -STOP "$target_pid"
  sleep 1
  kill -CONT "$target_pid"
}

check_stall() {  # bench.json, initiator
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
[p] = doc["points"]
assert p["initiator"] == sys.argv[2], p["initiator"]
assert "error" not in p, p
assert doc["ramp_seconds"] == 0.3, doc["ramp_seconds"]
d = p["discarded"]
assert len(d) >= 1, f"the stopped run was not discarded: {p}"
first = d[0]
assert first["reason"].startswith("stalled"), first
q = first["quality"]
assert q["stalls"] and q["stalled_s"] >= 0.5, q            # a second stopped, less what the window edges take
assert any(x["length_s"] >= 0.5 for x in q["stalls"]), q
assert min(q["timeline_kiops_per_100ms"]) == 0, q          # the evidence shows the empty cells
assert p["runs"] == 1 and len(p["samples"]) == 1, p        # the run was done again and that one kept
print(f"{sys.argv[2]}: stall of {q['stalled_s']} s found, run discarded and redone; kept "
      f"{p['iops'] / 1e6:.3f} M IOPS")
PY
}

run_bench() {  # initiator, out dir, extra args...
  local init=$1 out=$2
  shift 2
  "$NVTCP" bench --target "$trid" --initiators "$init" --points 1 --repeat 1 --host-cpus 1 -O "$out" "$@" \
    >"$dir/$(basename "$out").out" 2>&1
}

# nvtcp perf: 32 queue pairs on one thread.
run_bench perf "$dir/perf" --runtime 3 --ramp 0.3 --max-reruns 2 &
bench_pid=$!
stall_once 32
wait "$bench_pid" || fail "bench (perf) failed"
grep -q "stalled: .* run again" "$dir/perf.out" || fail "no word of the stall in the progress lines"
grep -q "run(s) discarded: stalled" "$dir/perf.out" || fail "no note of the discarded run under the tables"
check_stall "$dir/perf/bench.json" perf

# fio with the nvtcp engine: its timeline comes from fio's own IOPS logs.
so="$(dirname "$NVTCP")/libnvtcp_fio.so"
# ldd's output read whole first: with pipefail, grep -q leaving early can make ldd die of SIGPIPE and
# the pipeline fail, which the ! turned into "no sanitizer" (fio then ran an ASan engine: CI).
so_libs=$([ -f "$so" ] && ldd "$so" 2>/dev/null || true)
if command -v fio >/dev/null && [ -f "$so" ] && ! grep -qE "lib(asan|tsan|ubsan)" <<<"$so_libs"; then
  run_bench fio "$dir/fio" --runtime 3 --ramp 0.3 --max-reruns 2 &
  bench_pid=$!
  stall_once 32
  wait "$bench_pid" || fail "bench (fio) failed"
  check_stall "$dir/fio/bench.json" fio
else
  echo "fio part not run: no fio, or a sanitizer build of the fio engine"
fi

# A hog on the initiator's CPU.
taskset -c 1 sh -c 'while :; do :; done' &
hog_pid=$!
run_bench perf "$dir/hog" --runtime 1 --ramp 0.2 || fail "bench with a hog failed"
kill "$hog_pid"
hog_pid=
/usr/bin/python3 - "$dir/hog/bench.json" <<'PY'
import json, sys
[p] = json.load(open(sys.argv[1]))["points"]
[s] = p["samples"]
q = s["quality"]
assert q["busy"] and q["others_cpu_pct"] >= 10, q
assert p["busy_runs"] == 1, p
print(f"hog: the run is marked, others took {q['others_cpu_pct']}% of the initiator's CPU")
PY
grep -q "runs beside other work" "$dir/hog.out" || fail "no note of the interference"

# A target whose receive buffers hold half a write.
taskset -c 0 "$NVTCP" target -l 127.0.0.1:0 --discovery-port 0 --nqn "$NQN" --null 1T --socket-buffer 64K \
  --ready-file "$dir/small-ready" >"$dir/small-target.log" 2>&1 &
small_pid=$!
for _ in $(seq 200); do [ -s "$dir/small-ready" ] && break; sleep 0.05; done
[ -s "$dir/small-ready" ] || fail "the small-buffer target did not start"
"$NVTCP" bench --target "trtype:tcp traddr:127.0.0.1 trsvcid:$(cat "$dir/small-ready") subnqn:$NQN ns:1" \
  --initiators perf --only randwrite:128KiB:32 --repeat 1 --host-cpus 1 --runtime 1 --ramp 0.2 -O "$dir/window" \
  >"$dir/window.out" 2>&1 || fail "bench against the small-buffer target failed"
/usr/bin/python3 - "$dir/window/bench.json" <<'PY'
import json, sys
[p] = json.load(open(sys.argv[1]))["points"]
assert (p["workload"], p["bs"], p["jobs"]) == ("randwrite", 131072, 32), p
[s] = p["samples"]
q = s["quality"]
assert q["window_closing"] and q["tcp"]["zero_windows"] > 0, q
assert not q["stalled"] and p["runs"] == 1, p   # kept, not rerun
print(f"window: the run is marked, {q['tcp']['zero_windows']} zero windows")
PY
grep -q "WINDOW: a receive window closed" "$dir/window.out" || fail "no word of the window in the progress line"
grep -q "runs with a receive window closing" "$dir/window.out" || fail "no note of the window under the tables"

# --only takes sizes as every nvtcp option does and refuses what is not a point.
for bad in "randwrite:4q:32 not a block size" "randwrite:0:32 not a block size" "randwrite:4k:0 not a number of jobs" \
  "randwrite:4k:3x not a number of jobs" "randwrite:4k:32:1 expected WORKLOAD" "randwrite:3k no point of the matrix"; do
  set -- $bad
  sel=$1
  shift
  rc=0
  "$NVTCP" bench --target "trtype:tcp traddr:127.0.0.1 trsvcid:$(cat "$dir/small-ready") subnqn:$NQN ns:1" \
    --initiators perf --only "$sel" -O "$dir/bad" >"$dir/bad.out" 2>&1 || rc=$?
  [ "$rc" = 2 ] || fail "--only $sel: exit $rc, not 2"
  grep -q "$*" "$dir/bad.out" || fail "--only $sel: no '$*' in: $(cat "$dir/bad.out")"
done
echo "bench quality: ok"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# nvtcp bench, smallest profile: the JSON has every figure for every point, the tables
# print, and the charts are real PNG files.
set -euo pipefail
NVTCP=$1
out=$(mktemp -d /tmp/nvtcp-bench-test.XXXXXX)
trap 'rm -rf "$out"' EXIT
# Both halves of the study when fio is here: perf (inline) and fio through the offload engine.
# (Not with a sanitizer build of the fio engine: fio would need the sanitizer preloaded.)
inits=perf
so="$(dirname "$NVTCP")/libnvtcp_fio.so"
# ldd's output read whole first: with pipefail, grep -q leaving early can make ldd die of SIGPIPE and
# the pipeline fail, which the ! turned into "no sanitizer" (fio then ran an ASan engine: CI).
so_libs=$([ -f "$so" ] && ldd "$so" 2>/dev/null || true)
if command -v fio >/dev/null && [ -f "$so" ] && ! grep -qE "lib(asan|tsan|ubsan)" <<<"$so_libs"; then
  inits=perf,fio,engine
fi
"$NVTCP" bench --quick --points 2 --runtime 1 --repeat 2 --initiators "$inits" -O "$out" | tee "$out/stdout.txt"
grep -q "Random read, 32 jobs" "$out/stdout.txt"
grep -q "4 KiB random read against jobs" "$out/stdout.txt"
# The jobs table shows the 32-job point that the block-size sweep measured.
jobs_table=$(sed -n '/4 KiB random read against jobs/,/^$/p' "$out/stdout.txt")
grep -qE "^ +32 \|" <<<"$jobs_table" || { echo "no 32-job row"; exit 1; }
/usr/bin/python3 - "$out/bench.json" "$inits" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
inits = sys.argv[2].split(",")
pts = doc["points"]
assert len(pts) == 2 * len(inits), pts
figs = {p["figure"] for p in pts}
assert figs == {"bs-randread", "jobs-randread"}, figs
# 4 KiB random read at 32 jobs is measured once and shown in both sweeps.
shared = [p for p in pts if p["jobs"] == 32 and p["bs"] == 4096 and p["workload"] == "randread"]
assert len(shared) == len(inits) and all(p["figures"] == ["bs-randread", "jobs-randread"] for p in shared), shared
assert doc["ramp_seconds"] == 0.3, doc["ramp_seconds"]  # the quick profile's ramp
assert doc["repeat"] == 2, doc["repeat"]
env = doc["environment"]
for k in ("cpu_model", "cpus_online", "kernel", "tcp_congestion_used", "nvtcp_version", "command"):
    assert env.get(k), (k, env)
for p in pts:
    assert p["runs"] == 2 and len(p["iops_runs"]) == 2, p
    assert p["iops_min"] <= p["iops"] <= p["iops_max"], p
    if p["initiator"] == "engine":
        assert p.get("engine_cpu_s_per_mio") and p["engine_cpu_s_per_mio"] > 0, p
    else:
        assert p.get("engine_cpu_s_per_mio") is None, p
    assert "error" not in p, p
    # Each kept run's evidence: what else ran on its CPUs, and its timeline with no stall
    # left unreported.
    assert len(p["samples"]) == 2, p
    for smp in p["samples"]:
        q = smp["quality"]
        assert q["others_cpu_pct"] >= 0 and q["steal_pct"] >= 0 and isinstance(q["busy"], bool), q
        assert q["timeline_kiops_per_100ms"], q
        assert bool(q["stalls"]) == (q["stalled_s"] > 0), q
        assert q["stalled"] == bool(q["stalls"] or q["tcp"]["timeouts"]), q
        assert q["stalled"] == bool(q["stall_reason"]), q
    assert p["stalled_runs"] == sum(1 for smp in p["samples"] if smp["quality"]["stalled"]), p
    assert isinstance(p["discarded"], list), p
    for k in ("initiator", "workload", "bs", "jobs", "iops", "gbps", "lat_avg_us", "lat_p99_us",
              "init_cpu_s_per_mio", "target_cpu_s_per_mio"):
        assert k in p, (k, p)
    assert p["iops"] > 0 and p["gbps"] > 0 and p["lat_avg_us"] > 0 and p["lat_p99_us"] >= p["lat_avg_us"] * 0.5
    assert abs(p["gbps"] - p["iops"] * p["bs"] * 8 / 1e9) < 1e-6 * max(1, p["gbps"])
    assert p["init_cpu_s_per_mio"] > 0 and p["target_cpu_s_per_mio"] > 0
    # The target's (and engine's) costs come from the busiest window of the run's length, and
    # what the target served in it is kept beside fio's or perf's own figure.
    assert p["served_iops"] > 0, p
    for smp in p["samples"]:
        w = smp["quality"]["role_window"]
        assert w["to_s"] - w["from_s"] >= doc["seconds_per_run"] and w["target_ios"] > 0 and w["target_cpu_s"] > 0, w
        assert (w["engine_ios"] > 0) == (p["initiator"] == "engine"), (w, p["initiator"])
        # What was served in each 20-ms sample of that window, and its longest span with none.
        assert w["served_kiops"] and any(k > 0 for k in w["served_kiops"]), w
        span = w["to_s"] - w["from_s"]
        assert 0 <= w["longest_idle_s"] <= span + 1e-9, w
        assert w["longest_idle_s"] == 0 or 0 in w["served_kiops"], w
    # Both halves: the application CPU's floor, fio's own work per I/O on its null ioengine.
    if "fio" in inits and "engine" in inits and p["initiator"] in ("fio", "engine"):
        fl = p["fio_floor_cpu_s_per_mio"]
        if p["bs"] == 4096:  # measured at 4 KiB only: fio's work per write grows with the block
            assert fl is not None and 0 < fl < p["init_cpu_s_per_mio"], p
        else:
            assert fl is None, p
    else:
        assert "fio_floor_cpu_s_per_mio" not in p, p
print("bench.json: ok (" + ", ".join(inits) + ")")
PY
if [ "$inits" = perf,fio,engine ]; then
  grep -q "Both halves" "$out/stdout.txt" || { echo "no side-by-side of the two halves"; exit 1; }
  # The projection with the study's own figures beside it, and its model checked on this machine.
  grep -qE "^ +randread +4K +32 \|.*\| +1\.93 +5\.37$" "$out/stdout.txt" || { echo "no study figures"; exit 1; }
  grep -q "The model checked on this machine" "$out/stdout.txt" || { echo "no check of the model"; exit 1; }
  # Each side-by-side row ends with the app ratio, fio's floor and the ratio above it.
  grep -qE "^ +randread +4K +32 \|.*\| +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$out/stdout.txt" ||
    { echo "no fio floor in the side-by-side"; exit 1; }
  grep -qE "^ +randread +4K +32 \| +[0-9.]+ +[0-9.]+ +[0-9.]+ \| +[0-9.]+ +[0-9.]+ +[0-9.]+ \| (application|target)" \
    "$out/stdout.txt" || { echo "no predicted and served figures"; exit 1; }
  # The fio jobs it ran are there to be run again elsewhere.
  n=$(ls "$out"/jobs/*.fio | wc -l)
  [ "$n" -eq 4 ] || { echo "expected 4 fio job files, found $n"; exit 1; }
  grep -q "^ioengine=external:" "$out"/jobs/bs-randread-randread-4k-32jobs-engine.fio
  grep -q "^filename=trtype=engine" "$out"/jobs/bs-randread-randread-4k-32jobs-engine.fio
  # fio reads a time without a unit as whole seconds: the quick profile's 0.3-s ramp must reach
  # it as 300ms, not as 0.3 (no ramp at all).
  grep -qx "ramp_time=300ms" "$out"/jobs/bs-randread-randread-4k-32jobs-engine.fio ||
    { echo "the job file's ramp is not the profile's 0.3 s:"; grep "^r" "$out"/jobs/*engine.fio; exit 1; }
fi
grep -qE "[0-9]\.[0-9]{3} M \([0-9.]+-[0-9.]+\)" "$out/stdout.txt" || { echo "no median with its range"; exit 1; }
# --compare: a run against itself is 1.00 everywhere.
"$NVTCP" bench --compare "$out/bench.json" "$out/bench.json" -O "$out/cmp" | tee "$out/compare.txt"
grep -qE "randread +4K +32 .* 1\.00 " "$out/compare.txt" || { echo "compare did not print ratios of 1.00"; exit 1; }
for png in "$out/bs-randread.png" "$out/jobs-randread.png"; do
  [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || { echo "not a PNG: $png"; exit 1; }
done
echo "charts: ok"

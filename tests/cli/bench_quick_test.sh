#!/usr/bin/env bash
# nvtcp bench, smallest profile: the JSON has every figure for every point, the tables
# print, and the charts are real PNG files.
set -euo pipefail
NVTCP=$1
out=$(mktemp -d /tmp/nvtcp-bench-test.XXXXXX)
trap 'rm -rf "$out"' EXIT
"$NVTCP" bench --quick --points 2 --runtime 1 --initiators perf -O "$out" | tee "$out/stdout.txt"
grep -q "Random read, 32 jobs" "$out/stdout.txt"
grep -q "4 KiB random read against jobs" "$out/stdout.txt"
/usr/bin/python3 - "$out/bench.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
pts = doc["points"]
assert len(pts) == 2, pts
figs = {p["figure"] for p in pts}
assert figs == {"bs-randread", "jobs-randread"}, figs
for p in pts:
    assert "error" not in p, p
    for k in ("initiator", "workload", "bs", "jobs", "iops", "gbps", "lat_avg_us", "lat_p99_us",
              "init_cpu_s_per_mio", "target_cpu_s_per_mio"):
        assert k in p, (k, p)
    assert p["iops"] > 0 and p["gbps"] > 0 and p["lat_avg_us"] > 0 and p["lat_p99_us"] >= p["lat_avg_us"] * 0.5
    assert abs(p["gbps"] - p["iops"] * p["bs"] * 8 / 1e9) < 1e-6 * max(1, p["gbps"])
    assert p["init_cpu_s_per_mio"] > 0 and p["target_cpu_s_per_mio"] > 0
print("bench.json: ok")
PY
for png in "$out/bs-randread.png" "$out/jobs-randread.png"; do
  [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || { echo "not a PNG: $png"; exit 1; }
done
echo "charts: ok"

#!/usr/bin/env python3
"""Tables and charts in the shape of the reference study, from nvtcp bench's JSON.

  nvtcp_bench_report.py bench.json OUT_DIR

Tables go to stdout; charts to OUT_DIR: bs-randread.png, bs-randwrite.png, bs-randrw.png
(grouped bars per block size, 32 jobs) and jobs-randread.png (4 KiB random read against jobs).
"""
import json
import os
import sys

TITLES = {
    "bs-randread": "Random read, {jobs} jobs",
    "bs-randwrite": "Random write, {jobs} jobs",
    "bs-randrw": "Random read/write 70:30, {jobs} jobs",
    "jobs-randread": "4 KiB random read against jobs",
}


def size_label(bs):
    return f"{bs // 1024}K" if bs >= 1024 else str(bs)


def main():
    src, out = sys.argv[1], sys.argv[2]
    doc = json.load(open(src))
    pts = [p for p in doc["points"] if "error" not in p]
    inits = []
    for p in doc["points"]:
        if p["initiator"] not in inits:
            inits.append(p["initiator"])
    figs = {}
    for p in pts:
        figs.setdefault(p["figure"], []).append(p)

    for fig in ["bs-randread", "bs-randwrite", "bs-randrw", "jobs-randread"]:
        rows = figs.get(fig)
        if not rows:
            continue
        key = "jobs" if fig.startswith("jobs") else "bs"
        jobs = rows[0]["jobs"]
        print()
        print(TITLES[fig].format(jobs=jobs) + f"  (M IOPS / Gb/s; CPU s per million I/Os: initiator, target)")
        head = f"{'jobs' if key == 'jobs' else 'block':>6}"
        for i in inits:
            head += f" | {i:^34}"
        print(head)
        print("-" * len(head))
        for k in sorted({r[key] for r in rows}):
            line = f"{k if key == 'jobs' else size_label(k):>6}"
            for i in inits:
                r = next((x for x in rows if x[key] == k and x["initiator"] == i), None)
                if r is None:
                    line += f" | {'-':^34}"
                else:
                    t = r.get("target_cpu_s_per_mio")
                    cell = (f"{r['iops'] / 1e6:6.3f} M {r['gbps']:7.2f} Gb/s "
                            f"{r['init_cpu_s_per_mio']:5.2f} {t if t is None else round(t, 2)}")
                    line += f" | {cell:^34}"
            print(line)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\n(charts skipped: python3-matplotlib is not installed)")
        return 0
    os.makedirs(out, exist_ok=True)
    written = []
    for fig, rows in figs.items():
        key = "jobs" if fig.startswith("jobs") else "bs"
        ks = sorted({r[key] for r in rows})
        width = 0.8 / max(len(inits), 1)
        f, ax = plt.subplots(figsize=(9, 4.8))
        for n, i in enumerate(inits):
            vals = []
            gbps = []
            for k in ks:
                r = next((x for x in rows if x[key] == k and x["initiator"] == i), None)
                vals.append(r["iops"] / 1e6 if r else 0)
                gbps.append(r["gbps"] if r else 0)
            xs = [x + (n - (len(inits) - 1) / 2) * width for x in range(len(ks))]
            bars = ax.bar(xs, vals, width, label=i)
            for b, g in zip(bars, gbps):
                if g:
                    ax.annotate(f"{g:.1f}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                                va="bottom", fontsize=7)
        ax.set_xticks(range(len(ks)))
        ax.set_xticklabels([str(k) if key == "jobs" else size_label(k) for k in ks])
        ax.set_xlabel("jobs" if key == "jobs" else "block size")
        ax.set_ylabel("M IOPS (labels: Gb/s)")
        ax.set_title(TITLES[fig].format(jobs=rows[0]["jobs"]) + f" - {doc['target']}", fontsize=9)
        ax.legend()
        ax.grid(axis="y", alpha=0.3)
        path = os.path.join(out, fig + ".png")
        f.tight_layout()
        f.savefig(path, dpi=110)
        plt.close(f)
        written.append(path)
    print("\ncharts: " + ", ".join(written))
    return 0


if __name__ == "__main__":
    sys.exit(main())

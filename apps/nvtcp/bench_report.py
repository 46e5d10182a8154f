#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tables and charts in the shape of the reference study, from nvtcp bench's JSON.

  nvtcp_bench_report.py bench.json OUT_DIR
  nvtcp_bench_report.py --compare A/bench.json B/bench.json OUT_DIR

Tables go to stdout; charts to OUT_DIR: bs-randread.png, bs-randwrite.png, bs-randrw.png
(grouped bars per block size, 32 jobs) and jobs-randread.png (4 KiB random read against jobs).
Each figure is the median of its runs, with the range of IOPS beside it and as error bars.
A figure that cannot be trusted says so: '!' when other processes (or the hypervisor) took a
share of the sample's CPUs while a run was measured, 'S' when a kept run still stalled (I/O
outstanding and nothing completed) after its reruns, 'r' when stalled runs were discarded and
run again, 'W' when a receive window closed thousands of times a second in a run (the run may
sit at a lower level than its siblings: a reader with more bytes in flight than its receive
buffer); the notes under the tables give the evidence, and the charts hatch those bars.
--compare prints B's figures as ratios to A's, point by point, and charts them (compare.png).
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


NAMES = {
    "perf": "nvtcp perf",
    "fio": "fio inline",      # fio with the nvtcp engine connecting NVMe/TCP itself: the software stack
    "engine": "fio via engine",  # fio through the offload engine: the card's half
    "kernel": "kernel",
    "spdk": "spdk",
}

# The study's servers: 16 cores on each side.
SERVER_CORES = 16


def name(i):
    return NAMES.get(i, i)


def size_label(bs):
    return f"{bs // 1024}K" if bs >= 1024 else str(bs)


def iops_cell(r):
    lo, hi = r.get("iops_min"), r.get("iops_max")
    rng = f" ({lo / 1e6:.2f}-{hi / 1e6:.2f})" if lo is not None and hi is not None and r.get("runs", 1) > 1 else ""
    m = marks(r)
    return f"{r['iops'] / 1e6:6.3f} M{rng}" + (f" {m}" if m else "")


def point_key(p):
    return (p["workload"], p["bs"], p["jobs"], p["initiator"])


def figures_of(p):
    """The study figures a point is shown in (4K random read at 32 jobs is in two, measured once)."""
    return p.get("figures") or [p["figure"]]


def marks(p):
    """'!' busy machine, 'S' a kept run stalled, 'r' stalled runs discarded and run again,
    'W' a run's receive window kept closing."""
    m = ""
    if p.get("busy_runs"):
        m += "!"
    if p.get("stalled_runs"):
        m += "S"
    if p.get("discarded"):
        m += "r"
    if any(s.get("quality", {}).get("window_closing") for s in p.get("samples", [])):
        m += "W"
    return m


def quality_notes(pts):
    """One line per point whose figure carries a mark: what was seen, run by run."""
    lines = []
    for p in pts:
        if not marks(p):
            continue
        what = []
        samples = p.get("samples", [])
        busy = [s["quality"] for s in samples if s["quality"].get("busy")]
        if busy:
            worst = max(busy, key=lambda q: q.get("others_cpu_pct", 0))
            what.append(f"{len(busy)} of {len(samples)} runs beside other work (others up to "
                        f"{worst.get('others_cpu_pct', 0):.0f}% of the CPUs, steal up to "
                        f"{max(q.get('steal_pct', 0) for q in busy):.0f}%)")
        stalled = [s for s in samples if s["quality"].get("stalled")]
        if stalled:
            what.append(f"{len(stalled)} kept run(s) still stalled after the reruns: " + ", ".join(
                f"{s['quality']['stall_reason']} at {s['iops'] / 1e6:.3f} M" for s in stalled))
        if p.get("discarded"):
            what.append(f"{len(p['discarded'])} run(s) discarded: " + ", ".join(
                f"{d['reason']} ({d['iops'] / 1e6:.3f} M IOPS, others {d['quality'].get('others_cpu_pct', 0):.0f}%)"
                for d in p["discarded"]))
        closing = [s for s in samples if s["quality"].get("window_closing")]
        if closing:
            what.append(f"{len(closing)} of {len(samples)} runs with a receive window closing: " + ", ".join(
                f"{s['quality']['tcp']['zero_windows']} zero windows at {s['iops'] / 1e6:.3f} M" for s in closing))
        lines.append(f"  [{marks(p)}] {p['workload']} {size_label(p['bs'])} {p['jobs']} jobs, {name(p['initiator'])}: "
                     + "; ".join(what))
    return lines


def pyplot():
    """matplotlib's pyplot drawing to files, or None (and a note) without python3-matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\n(charts skipped: python3-matplotlib is not installed)")
        return None
    return plt


def compare(a_path, b_path, out):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    amap = {point_key(p): p for p in a["points"] if "error" not in p}
    rows = []
    for p in b["points"]:
        if "error" in p or point_key(p) not in amap:
            continue
        q = amap[point_key(p)]
        cpu = (p["init_cpu_s_per_mio"] / q["init_cpu_s_per_mio"]) if q.get("init_cpu_s_per_mio") else None
        rows.append((p, q, p["iops"] / q["iops"] if q["iops"] else 0, cpu))
    print(f"B = {b_path}\nA = {a_path}\n(ratios B / A of the median IOPS and of the initiator's CPU per I/O; "
          f"A ran {a.get('repeat', 1)} time(s) per point, B {b.get('repeat', 1)})")
    head = f"{'figure':>14} {'workload':>10} {'bs':>6} {'jobs':>4} {'initiator':>12} | {'A M IOPS':>22} | {'B M IOPS':>22} | {'IOPS B/A':>8} {'CPU B/A':>8}"
    print(head)
    print("-" * len(head))
    for p, q, r, c in rows:
        print(f"{p['figure']:>14} {p['workload']:>10} {size_label(p['bs']):>6} {p['jobs']:>4} {name(p['initiator']):>12} | "
              f"{iops_cell(q):>22} | {iops_cell(p):>22} | {r:8.2f} {'-' if c is None else format(c, '8.2f')}")
    if not rows:
        print("(no point is in both runs)")
        return 1
    plt = pyplot()
    if plt is None:
        return 0
    os.makedirs(out, exist_ok=True)
    f, ax = plt.subplots(figsize=(max(6, 0.5 * len(rows)), 4.8))
    labels = [f"{p['workload']} {size_label(p['bs'])} j{p['jobs']} {name(p['initiator'])}" for p, _, _, _ in rows]
    ax.bar(range(len(rows)), [r for _, _, r, _ in rows])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("IOPS ratio B / A (median)")
    ax.set_title(f"{os.path.basename(os.path.dirname(os.path.abspath(b_path)))} / "
                 f"{os.path.basename(os.path.dirname(os.path.abspath(a_path)))}", fontsize=9)
    f.tight_layout()
    path = os.path.join(out, "compare.png")
    f.savefig(path, dpi=110)
    plt.close(f)
    print(f"\nchart: {path}")
    return 0


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--compare":
        return compare(sys.argv[2], sys.argv[3], sys.argv[4])
    src, out = sys.argv[1], sys.argv[2]
    doc = json.load(open(src))
    env = doc.get("environment", {})
    if env:
        print(f"\nmeasured on: {env.get('cpu_model', '?')}, {env.get('cpus_online', '?')} CPUs, "
              f"{env.get('kernel', '?')}, TCP congestion {env.get('tcp_congestion_used', '?')}, "
              f"nvtcp {env.get('nvtcp_version', '?')}, {env.get('fio_version', 'no fio')}; "
              f"{doc.get('repeat', 1)} run(s) per point, medians (IOPS range in brackets); each run measured "
              f"after {doc.get('ramp_seconds', 0)} s of load (connects and ramp in no figure)")
    pts = [p for p in doc["points"] if "error" not in p]
    inits = []
    for p in doc["points"]:
        if p["initiator"] not in inits:
            inits.append(p["initiator"])
    figs = {}
    for p in pts:
        for f in figures_of(p):
            figs.setdefault(f, []).append(p)

    for fig in ["bs-randread", "bs-randwrite", "bs-randrw", "jobs-randread"]:
        rows = figs.get(fig)
        if not rows:
            continue
        key = "jobs" if fig.startswith("jobs") else "bs"
        jobs = rows[0]["jobs"]
        print()
        print(TITLES[fig].format(jobs=jobs) + "  (M IOPS / Gb/s; CPU s per million I/Os: initiator, target)")
        head = f"{'jobs' if key == 'jobs' else 'block':>6}"
        for i in inits:
            head += f" | {name(i):^46}"
        print(head)
        print("-" * len(head))
        for k in sorted({r[key] for r in rows}):
            line = f"{k if key == 'jobs' else size_label(k):>6}"
            for i in inits:
                r = next((x for x in rows if x[key] == k and x["initiator"] == i), None)
                if r is None:
                    line += f" | {'-':^46}"
                else:
                    t = r.get("target_cpu_s_per_mio")
                    cell = (f"{iops_cell(r)} {r['gbps']:6.2f} Gb/s "
                            f"{r['init_cpu_s_per_mio']:5.2f} {t if t is None else round(t, 2)}")
                    line += f" | {cell:^46}"
            print(line)

    notes = quality_notes(pts)
    if notes:
        print()
        print("Figures that cannot be fully trusted (! other work on the CPUs, S stalled, r stalled runs redone, W receive window closing):")
        for n in notes:
            print(n)
    elif any("samples" in p for p in pts):
        print()
        print("Every run: no other work on its CPUs above the threshold and no stall.")

    cpu_split(pts, doc)
    per_host(pts)

    plt = pyplot()
    if plt is None:
        return 0
    os.makedirs(out, exist_ok=True)
    written = []
    for fig, rows in figs.items():
        key = "jobs" if fig.startswith("jobs") else "bs"
        ks = sorted({r[key] for r in rows})
        width = 0.8 / max(len(inits), 1)
        f, ax = plt.subplots(figsize=(9, 4.8))
        handles = []
        for n, i in enumerate(inits):
            vals = []
            gbps = []
            err_lo, err_hi = [], []
            for k in ks:
                r = next((x for x in rows if x[key] == k and x["initiator"] == i), None)
                v = r["iops"] / 1e6 if r else 0
                vals.append(v)
                gbps.append(r["gbps"] if r else 0)
                err_lo.append(v - r["iops_min"] / 1e6 if r and "iops_min" in r else 0)
                err_hi.append(r["iops_max"] / 1e6 - v if r and "iops_max" in r else 0)
            xs = [x + (n - (len(inits) - 1) / 2) * width for x in range(len(ks))]
            bars = ax.bar(xs, vals, width, label=name(i), yerr=[err_lo, err_hi], capsize=2)
            # The legend shows the initiator's colour, not the first bar's hatching.
            from matplotlib.patches import Patch
            handles.append(Patch(facecolor=bars.patches[0].get_facecolor(), label=name(i)))
            for b, g, k in zip(bars, gbps, ks):
                r = next((x for x in rows if x[key] == k and x["initiator"] == i), None)
                m = marks(r) if r else ""
                if m:  # a figure that cannot be fully trusted: hatched, with its mark
                    b.set_hatch("//")
                    b.set_edgecolor("black")
                if g:
                    ax.annotate(f"{g:.1f}" + (f" {m}" if m else ""), (b.get_x() + b.get_width() / 2, b.get_height()),
                                ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(ks)))
        ax.set_xticklabels([str(k) if key == "jobs" else size_label(k) for k in ks])
        ax.set_xlabel("jobs" if key == "jobs" else "block size")
        ax.set_ylabel("M IOPS, median (bars: range; labels: Gb/s)")
        if any(marks(r) for r in rows):
            ax.text(0.01, 0.99, "hatched: ! other work on the CPUs, S stalled, r stalled runs redone, W window closing",
                    transform=ax.transAxes, fontsize=7, va="top")
        ax.set_title(TITLES[fig].format(jobs=rows[0]["jobs"]) + f" - {doc['target']} - "
                     f"n={doc.get('repeat', 1)} runs per bar", fontsize=9)
        ax.legend(handles=handles)
        ax.grid(axis="y", alpha=0.3)
        path = os.path.join(out, fig + ".png")
        f.tight_layout()
        f.savefig(path, dpi=110)
        plt.close(f)
        written.append(path)
    print("\ncharts: " + ", ".join(written))
    return 0


def per_host(pts):
    """Remote initiator hosts (fio --client): each host's figures beside the total."""
    rows = [p for p in pts if p.get("hosts")]
    if not rows:
        return
    servers = [h["server"] for h in rows[0]["hosts"]]
    print()
    print("Per host (fio client/server): M IOPS, median (range); CPU s per million I/Os as each host's fio reports it")
    for n, s in enumerate(servers):
        print(f"  host {n + 1}: {s}")
    head = f"{'workload':>10} {'bs':>5} {'jobs':>4} {'initiator':>14} | {'total':>22}"
    for n in range(len(servers)):
        head += f" | {'host ' + str(n + 1):>28}"
    print(head)
    print("-" * len(head))
    for p in rows:
        line = (f"{p['workload']:>10} {size_label(p['bs']):>5} {p['jobs']:>4} {name(p['initiator']):>14} | "
                f"{iops_cell(p):>22}")
        for h in p["hosts"]:
            line += f" | {iops_cell(h) + ' ' + format(h['init_cpu_s_per_mio'], '.2f'):>28}"
        print(line)


# The study's own figures at its point (4 KiB, 32 jobs, 16-core servers): M IOPS of the software
# stack on a plain NIC and of the card that runs NVMe/TCP itself.
STUDY = {"randread": (1.93, 5.37), "randwrite": (3.4, 5.34), "randrw": (2.31, 5.35)}


def cpu_count(cpus):
    """Cores in a CPU list as the bench takes it ("0", "1-15", "0,2")."""
    n = 0
    for part in str(cpus or "").split(","):
        if "-" in part:
            lo, hi = part.split("-")
            n += int(hi) - int(lo) + 1
        elif part.strip():
            n += 1
    return n


def model_iops(roles, cores):
    """The IOPS the CPU model gives: each group of cores (roles that share cores add their
    costs) runs at most its cores' time over its CPU per I/O; the slowest group binds.
    roles: {role: (cpu_list, us_per_io)}; roles share cores when their CPU lists are the same
    (lists that overlap only in part count as apart: the bench's own placements never do).
    Returns (M IOPS, the binding role(s)) or None."""
    groups = {}
    for role, (cpus, cost) in roles.items():
        if cost is None or not cpus:
            return None
        g = groups.setdefault(cpus, [0.0, []])
        g[0] += cost
        g[1].append(role)
    lim = {" + ".join(rs): cores(c) / (cost * 1e-6) for c, (cost, rs) in groups.items() if cost}
    if not lim:
        return None
    r = min(lim, key=lim.get)
    return lim[r] / 1e6, r


def cpu_split(pts, doc=None):
    """Both halves of the study side by side: CPU per I/O by role, a projection, and the
    projection's model checked against what this machine measured."""
    doc = doc or {}
    pairs = []
    for e in pts:
        if e["initiator"] != "engine":
            continue
        f = next((x for x in pts if x["initiator"] == "fio" and x["figure"] == e["figure"] and x["bs"] == e["bs"]
                  and x["jobs"] == e["jobs"] and x["workload"] == e["workload"]), None)
        if f:
            pairs.append((f, e))
    if not pairs:
        return
    print()
    print("Both halves: the same fio job inline (fio connects NVMe/TCP itself) and through the offload engine")
    print("(CPU us per I/O: application, engine, target; app ratio = engine mode's application CPU / inline's;")
    print(" fio floor = fio's own CPU per I/O for the same job on its null ioengine (4 KiB points), which no initiator")
    print(" takes away;")
    print(" above floor = the app ratio counted above that floor: what the engine owes)")
    head = (f"{'workload':>10} {'bs':>5} {'jobs':>4} | {'inline: app':>11} {'target':>6} {'M IOPS':>7} | "
            f"{'engine: app':>11} {'engine':>6} {'target':>6} {'M IOPS':>7} | {'app ratio':>9} {'fio floor':>9} "
            f"{'above floor':>11}")
    print(head)
    print("-" * len(head))
    us = lambda v: "-" if v is None else f"{v:.2f}"  # s per million I/Os = us per I/O
    for f, e in pairs:
        ratio = e["init_cpu_s_per_mio"] / f["init_cpu_s_per_mio"] if f["init_cpu_s_per_mio"] else 0
        floor = f.get("fio_floor_cpu_s_per_mio")
        above = "-"
        if floor is not None and f["init_cpu_s_per_mio"] > floor:
            above = f"{max(e['init_cpu_s_per_mio'] - floor, 0) / (f['init_cpu_s_per_mio'] - floor):.2f}"
        print(f"{f['workload']:>10} {size_label(f['bs']):>5} {f['jobs']:>4} | {us(f['init_cpu_s_per_mio']):>11} "
              f"{us(f.get('target_cpu_s_per_mio')):>6} {f['iops'] / 1e6:7.3f} | {us(e['init_cpu_s_per_mio']):>11} "
              f"{us(e.get('engine_cpu_s_per_mio')):>6} {us(e.get('target_cpu_s_per_mio')):>6} "
              f"{e['iops'] / 1e6:7.3f} | {ratio:9.2f} {us(floor):>9} {above:>11}")
    print()
    print(f"Projection for the study's servers ({SERVER_CORES} cores each side), a MODEL, not a measurement: each")
    print("role's measured CPU per I/O, divided into its cores' time; the application gets all host cores inline,")
    print(f"and all host cores again with the engine on a card of its own ({SERVER_CORES} engine cores here).")
    print("Beside it, the study's own figures at its point (4 KiB, 32 jobs): software on a plain NIC, and the card.")
    print(f"{'workload':>10} {'bs':>5} {'jobs':>4} | {'inline M IOPS':>13} {'limited by':>11} | {'offload M IOPS':>14} "
          f"{'limited by':>11} | {'study: software':>15} {'card':>5}")
    one = lambda c: SERVER_CORES
    for f, e in pairs:
        i_iops, i_by = model_iops({"application": ("host", f["init_cpu_s_per_mio"]),
                                   "target": ("target", f.get("target_cpu_s_per_mio"))}, one) or (0, "-")
        o_iops, o_by = model_iops({"application": ("host", e["init_cpu_s_per_mio"]),
                                   "engine": ("card", e.get("engine_cpu_s_per_mio")),
                                   "target": ("target", e.get("target_cpu_s_per_mio"))}, one) or (0, "-")
        sw, card = STUDY.get(f["workload"], (None, None)) if (f["bs"], f["jobs"]) == (4096, 32) else (None, None)
        study = f"{sw:15.2f} {card:5.2f}" if sw else f"{'-':>15} {'-':>5}"
        print(f"{f['workload']:>10} {size_label(f['bs']):>5} {f['jobs']:>4} | {i_iops:13.2f} {i_by:>11} | "
              f"{o_iops:14.2f} {o_by:>11} | {study}")
    print("What it means for your servers: the study's card wins because it takes NVMe/TCP off the host's cores; the")
    print("offload column (that card done in software) beats inline only where inline is limited by the application's")
    print("cores, and by as much as the engine lowers the application's CPU per I/O (the app ratio above).")
    model_check(pairs, doc)


def model_check(pairs, doc):
    """The projection's model where this machine can test it: the same CPU costs predict the runs
    measured here, on the cores they ran on (roles that share cores add their costs)."""
    cpus = {"host": doc.get("host_cpus"), "target": doc.get("target_cpus"), "engine": doc.get("engine_cpus")}
    if not cpus["host"] or "embedded" not in str(doc.get("target", "")):
        return  # remote hosts or a target of its own: its cores are not this run's to count
    print()
    print(f"The model checked on this machine: the same costs predict the runs above on their own cores (target "
          f"{cpus['target']},")
    print(f"host {cpus['host']}, engine {cpus['engine']}; roles that share cores add their costs), against what the "
          f"target served")
    print("in the run's measured seconds. served / predicted is how busy the binding cores were: below 0.80 the run")
    print("waited for something a CPU model does not see (its queue depth, a stall, a closing window, the")
    print("scheduler), and the projection above overstates that point.")
    print(f"{'workload':>10} {'bs':>5} {'jobs':>4} | {'inline: predicted':>17} {'served':>7} {'ratio':>5} | "
          f"{'engine: predicted':>17} {'served':>7} {'ratio':>5} | binding cores")
    off, edges = [], []
    for f, e in pairs:
        cells, binds = [], []
        for r, roles in ((f, {"application": (cpus["host"], f["init_cpu_s_per_mio"]),
                              "target": (cpus["target"], f.get("target_cpu_s_per_mio"))}),
                         (e, {"application": (cpus["host"], e["init_cpu_s_per_mio"]),
                              "engine": (cpus["engine"], e.get("engine_cpu_s_per_mio")),
                              "target": (cpus["target"], e.get("target_cpu_s_per_mio"))})):
            served = r.get("served_iops") or r["iops"]
            if r.get("served_iops"):
                edges.append(r["iops"] / served)
            m = model_iops(roles, cpu_count)
            if not m:
                cells.append(f"{'-':>17} {served / 1e6:7.3f} {'-':>5}")
                binds.append("-")
                continue
            ratio = served / 1e6 / m[0]
            cells.append(f"{m[0]:17.3f} {served / 1e6:7.3f} {ratio:5.2f}")
            binds.append(m[1])
            if ratio < 0.8 or ratio > 1.2:
                off.append(ratio)
        print(f"{f['workload']:>10} {size_label(f['bs']):>5} {f['jobs']:>4} | {cells[0]} | {cells[1]} | "
              f"{binds[0]}; {binds[1]}")
    if off:
        print(f"{len(off)} of {2 * len(pairs)} runs are not within 20% of the model; see their marks and timelines above.")
    else:
        print("Every run is within 20% of the model.")
    if edges and max(edges) > 1.05:
        print(f"fio's own figures run up to {max(edges):.2f}x what the target served in its busiest window of the same "
              "length; the model")
        print("table uses what was served. fio measures each job over its own seconds, so jobs that start apart add")
        print("up rates of different seconds (the nvtcp ioengine starts its jobs together, before fio's clock).")


if __name__ == "__main__":
    sys.exit(main())

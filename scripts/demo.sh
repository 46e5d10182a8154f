#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make demo: the project's main job, the reference study in its quick profile. An embedded
# target with a NULL namespace on 127.0.0.1 (CPU 0), the initiators on CPU 1: nvtcp perf and
# fio connecting NVMe/TCP themselves (the study's software stack) and the same fio job through
# the offload engine (the study's card), each point run 3 times, interleaved. Prints the
# tables (medians with ranges, CPU per I/O by role, the two halves side by side) and where
# the charts and the fio job files are.
set -euo pipefail
BUILD=${1:-build}
OUT=${DEMO_OUT:-bench-out}
cpus=(--target-cpus 0 --host-cpus 0)
if [ "$(nproc)" -ge 2 ]; then cpus=(--target-cpus 0 --host-cpus 1); fi
"$BUILD/nvtcp" bench --quick "${cpus[@]}" -O "$OUT" ${DEMO_ARGS:-}
echo
echo "== the study, both halves: tables above; $OUT/bench.json (every run, the environment),"
echo "   $OUT/*.png (charts with error bars), $OUT/jobs/*.fio (the fio jobs, to run elsewhere)"

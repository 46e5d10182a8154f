#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Manual pages for nvtcp and each of its subcommands, made by help2man from the CLI's own --help
# (so they say what the binary does), gzipped as Debian installs them:
#
#   make-man-pages.sh NVTCP OUTDIR VERSION CHANGELOG
#
# writes OUTDIR/nvtcp.1.gz and OUTDIR/nvtcp-<subcommand>.1.gz. The pages' date is the changelog's
# last entry's (SOURCE_DATE_EPOCH), so the same source gives the same pages.
set -euo pipefail
nvtcp=$(readlink -f "${1:?usage: make-man-pages.sh NVTCP OUTDIR VERSION CHANGELOG}")
out=${2:?}
version=${3:?}
changelog=${4:?}
mkdir -p "$out/wrappers"
SOURCE_DATE_EPOCH=$(date -d "$(sed -n 's/^ -- .*>  //p' "$changelog" | head -1)" +%s)
export SOURCE_DATE_EPOCH

# page NAME SUBCOMMAND DESCRIPTION: help2man runs NAME --help; NAME is a wrapper that runs nvtcp
# SUBCOMMAND with argv[0] "nvtcp", so the usage line reads "nvtcp SUBCOMMAND".
page() {
  local name=$1 sub=$2 what=$3 w
  w=$out/wrappers/$name
  printf '#!/bin/bash\nexec -a nvtcp %q %s "$@"\n' "$nvtcp" "$sub" >"$w"
  chmod +x "$w"
  help2man --no-info --version-string="$version" --name="$what" --section=1 \
    --include="$out/see-also.h2m" --output="$out/$name.1" "$w"
  gzip -9nf "$out/$name.1"
}

subs=(target discover identify perf bench engine rpc)
{
  echo '[SEE ALSO]'
  for s in "${subs[@]}"; do printf '.BR nvtcp-%s (1),\n' "$s"; done
  echo '.BR nvme (1),'
  echo '.BR fio (1)'
} >"$out/see-also.h2m"

page nvtcp "" "userspace NVMe/TCP target, initiator and benchmark"
page nvtcp-target target "serve NVMe namespaces over NVMe/TCP"
page nvtcp-discover discover "print an NVMe/TCP discovery log"
page nvtcp-identify identify "print Identify Controller and Namespace fields"
page nvtcp-perf perf "measure IOPS, bandwidth and latency against an NVMe/TCP namespace"
page nvtcp-bench bench "reproduce the reference study's NVMe/TCP benchmark matrix"
page nvtcp-engine engine "offload engine: local applications' NVMe queues carried over NVMe/TCP"
page nvtcp-rpc rpc "call a running target's JSON-RPC control methods (SPDK's names)"

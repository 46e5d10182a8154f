#!/usr/bin/env bash
# make demo: a target with a NULL namespace on 127.0.0.1, then nvtcp perf against it.
# Target on core 0 and initiator on core 1 when the machine has two cores.
set -euo pipefail
BUILD=${1:-build}
NVTCP="$BUILD/nvtcp"
NQN=nqn.2026-11.io.nvtcp:demo
SECONDS_PER_RUN=${DEMO_SECONDS:-3}
ready=$(mktemp -u /tmp/nvtcp-demo-ready.XXXXXX)
pin_target=""; pin_host=""
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then pin_target="taskset -c 0"; pin_host="taskset -c 1"; fi

$pin_target "$NVTCP" target --null 1T --nqn "$NQN" --listen 127.0.0.1:0 --discovery-port 0 \
  --ready-file "$ready" --log-level warn &
tpid=$!
trap 'kill -TERM $tpid 2>/dev/null || true; wait $tpid 2>/dev/null || true; rm -f "$ready"' EXIT
for _ in $(seq 100); do [ -s "$ready" ] && break; sleep 0.05; done
[ -s "$ready" ] || { echo "demo: the target did not start" >&2; exit 1; }
port=$(cat "$ready")
TRID="trtype:tcp adrfam:IPv4 traddr:127.0.0.1 trsvcid:$port subnqn:$NQN ns:1"
echo "== target: NULL namespace (1 TiB), $TRID"
for w in randread randwrite randrw; do
  echo
  echo "== nvtcp perf -r '$TRID' -q 32 -o 4096 -w $w -t $SECONDS_PER_RUN"
  $pin_host "$NVTCP" perf -r "$TRID" -q 32 -o 4096 -w "$w" -M 70 -t "$SECONDS_PER_RUN"
done
echo
echo "== nvtcp perf -r '$TRID' -q 32 -o 128K -w randread -t $SECONDS_PER_RUN"
$pin_host "$NVTCP" perf -r "$TRID" -q 32 -o 128K -w randread -t "$SECONDS_PER_RUN"

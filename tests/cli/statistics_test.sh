#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `kill -USR1` makes the target log what it holds and carry on: connections, I/O so far, buffer
# bytes, its requests per state and their commands per state. Taken while nvtcp perf keeps 16 reads outstanding: the
# requests of the I/O queue are counted (at least its 16 entries, in whatever states they are),
# and the target keeps serving after the signal.
set -euo pipefail
NVTCP=$1
. "$(dirname "$0")/lib/target.sh" statistics
NQN=nqn.2026-11.io.nvtcp:statistics
start_target -l 127.0.0.1:0 --discovery-port 0 --nqn "$NQN" --ram 16M
trid="trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN ns:1"
"$NVTCP" perf -r "$trid" -q 16 -o 4K -w randread -t 4 --json >"$dir/perf.json" 2>"$dir/perf.log" &
perf_pid=$!
# Until the statistics show the I/O queue and a command that reached the device: its connection
# is up once perf has done some I/O. (The I/O count moves when a command starts, the device's
# entries when it is submitted: under load a line can fall between the two.)
for _ in $(seq 100); do
  sleep 0.1
  kill -USR1 "$target_pid"
  sleep 0.05
  line=$(grep 'target statistics' "$dir/target.log" | tail -1 || true)
  [[ $line =~ ([0-9]+)\ connections,\ ([0-9]+)\ I/O ]] && ((BASH_REMATCH[1] >= 2 && BASH_REMATCH[2] > 0)) &&
    [[ $line =~ entered\ since\ start:.*InDevice\ ([1-9][0-9]*) ]] && break
done
echo "$line"
[[ $line =~ ([0-9]+)\ connections ]] && ((BASH_REMATCH[1] >= 2)) || fail "no statistics line with both queues"
# Requests per transport state, and their commands per command-layer state: each set counts
# every request of every queue, so each adds up to at least the I/O queue's 16.
add_up() { local t=0 n; for n in $(grep -o '[A-Za-z]* [0-9]*' <<<"$1" | awk '{print $2}'); do t=$((t + n)); done; echo $t; }
per_state=${line#*requests: }
per_state=${per_state%%; commands: *}
total=$(add_up "$per_state")
((total >= 16)) || fail "the requests per state add up to $total, fewer than the I/O queue's 16"
per_command=${line#*; commands: }
per_command=${per_command%%; entered since start*}
commands=$(add_up "$per_command")
((commands == total)) || fail "the commands per state add up to $commands, the requests to $total"
# Every I/O went through the device: entries into InDevice count at least the I/O done.
[[ $line =~ entered\ since\ start:.*InDevice\ ([0-9]+) ]] && ((BASH_REMATCH[1] > 0)) \
  || fail "no device entries in the statistics: ${line#*entered since start: }"
wait "$perf_pid" || fail "perf failed after the signal: $(tail -3 "$dir/perf.log")"
kill -0 "$target_pid" || fail "the target exited on SIGUSR1"
stop_target
grep -q 'signal 15: shutting down' "$dir/target.log" || fail "no orderly shutdown"
echo "PASS: statistics on SIGUSR1 ($total requests counted), target kept serving"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# fio (Debian's) with the nvtcp ioengine against an nvtcp target started here on loopback.
#
#   fio_engine_test.sh CASE NVTCP_BINARY LIBNVTCP_FIO_SO
#
# CASE: randread randwrite randrw verify mdts_split reconnect big_batched trim_flush options bad_input jobs32 preload
#       engine engine_kill (through `nvtcp engine`, the offload engine)
# Exit 0 pass, 1 fail, 77 skip (no fio and no way to install it, or the engine was not built).
# The target serves nqn.2026-11.io.nvtcp:fio with a 1 GiB NULL namespace (ns 1) and a
# 256 MiB RAM namespace (ns 2); every fio run's exit status and JSON are checked.
set -uo pipefail

case_name=${1:?case} nvtcp=${2:?nvtcp binary} engine=${3:?engine .so}
NQN=nqn.2026-11.io.nvtcp:fio
FNQN='nqn.2026-11.io.nvtcp\:fio'   # fio splits file names at ':'; '\:' keeps it whole

skip() { echo "SKIP: $*"; exit 77; }
fail() {
  echo "FAIL [$case_name]: $*" >&2
  # This script signals its target only on exit; a signal before that came from elsewhere.
  if sig=$(grep -oE "signal [0-9]+: shutting down" "${work:-}/target.log" 2>/dev/null); then
    echo "NOTE: the target (pid $tpid) got '$sig' from outside this test, so the failure may not be" \
         "the engine's: is something on this machine killing nvtcp processes by name?" >&2
  fi
  if [ -s "${work:-}/target.log" ]; then
    echo "--- target log (last 30 lines)" >&2
    tail -30 "$work/target.log" >&2
  fi
  exit 1
}
note() { echo "[$case_name] $*"; }

[ -f "$engine" ] || skip "the fio engine $engine was not built (fio headers unavailable at configure time)"
[ -x "$nvtcp" ] || fail "no nvtcp binary at $nvtcp"
command -v fio >/dev/null || fail "fio is not installed: \`make deps\` installs it"

# An engine built with ASan/UBSan needs their runtimes loaded before fio's own libraries.
preload=$(ldd "$engine" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ {print $3}' | paste -sd: -)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}

work=$(mktemp -d /tmp/nvtcp-fio-test.XXXXXX)
tpid=""
epid=""
# stop PID: SIGINT, then SIGKILL if it is still there after 5 s.
stop() {
  [ -n "$1" ] && kill -0 "$1" 2>/dev/null || return 0
  kill -INT "$1" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$1" 2>/dev/null; then kill -KILL "$1" 2>/dev/null; fi
  wait "$1" 2>/dev/null
}
cleanup() {
  stop "$epid"
  stop "$tpid"
  rm -rf "$work"
}
trap cleanup EXIT

# jobs32 runs target and fio on two cores (0 and 1), as the study's 2-core profile does;
# the other cases leave placement to the scheduler (the machine may be shared, and nothing
# here is a timed assertion).
pin_target=() pin_fio=()
if [ "$case_name" = jobs32 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
  pin_target=(taskset -c 0,1) pin_fio=(taskset -c 0,1)
fi

# wait_ready WHAT PID READY_FILE LOG: up to 10 s for a process to write its ready file.
wait_ready() {
  for _ in $(seq 100); do
    [ -s "$3" ] && return 0
    kill -0 "$2" 2>/dev/null || { cat "$4" >&2; fail "the $1 exited at start"; }
    sleep 0.1
  done
  fail "the $1 did not become ready in 10 s"
}

start_target() {
  "${pin_target[@]}" "$nvtcp" target --null 1G --ram 256M --listen 127.0.0.1:0 --discovery-port 0 \
    --nqn "$NQN" --ready-file "$work/ready" >"$work/target.log" 2>&1 &
  tpid=$!
  wait_ready target "$tpid" "$work/ready" "$work/target.log"
  port=$(cat "$work/ready")
  note "target on 127.0.0.1:$port (pid $tpid)"
}

# The offload engine, connected to the target: applications attach on $work/engine.sock.
start_engine() {
  "$nvtcp" engine --controller "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN" \
    --socket "$work/engine.sock" --ready-file "$work/engine.ready" >"$work/engine.log" 2>&1 &
  epid=$!
  wait_ready engine "$epid" "$work/engine.ready" "$work/engine.log"
  note "engine on $work/engine.sock (pid $epid)"
}
# etrid NSID: a filename for fio through the engine
etrid() { echo "trtype=engine traddr=$work/engine.sock subnqn=$FNQN ns=$1"; }

# trid NSID [PORT [NQN]]: a filename for fio
trid() { echo "trtype=tcp adrfam=IPv4 traddr=127.0.0.1 trsvcid=${2:-$port} subnqn=${3:-$FNQN} ns=$1"; }

# run_fio NAME fio-args... : runs fio with the engine, JSON into $work/NAME.json, stderr into
# $work/NAME.err; returns fio's exit status. Engine options must follow --ioengine.
run_fio() {
  local name=$1
  shift
  local rc
  "${pin_fio[@]}" env LD_PRELOAD="$preload" fio --name="$name" --ioengine="external:$engine" "$@" \
    --output-format=json --output="$work/$name.json" 2>"$work/$name.err"
  rc=$?
  echo "$rc" >"$work/$name.rc"
  return $rc
}

# A signal (a crash) shows as an exit status of 128 + N, or as a core dump message.
check_no_crash() {
  local name=$1 rc
  rc=$(cat "$work/$name.rc")
  [ "$rc" -lt 128 ] || fail "$name: fio died of signal $((rc - 128)); stderr: $(cat "$work/$name.err")"
  ! grep -qiE "segmentation fault|core dumped|AddressSanitizer|runtime error:|terminate called" "$work/$name.err" ||
    fail "$name: crashed: $(cat "$work/$name.err")"
}

# expect_ok NAME DIRS: fio exited 0, and in the JSON every job has error 0, and each of the
# directions in DIRS (read, write, trim) has I/Os, IOPS > 0 and no short or dropped I/O.
expect_ok() {
  local name=$1 dirs=$2 rc
  rc=$(cat "$work/$name.rc")
  check_no_crash "$name"
  [ "$rc" -eq 0 ] || fail "$name: fio exited $rc: $(cat "$work/$name.err")"
  python3 - "$work/$name.json" "$dirs" "$name" <<'PY' || fail "$name: JSON check failed"
import json, sys
path, dirs, name = sys.argv[1], sys.argv[2].split(), sys.argv[3]
text = open(path).read()
doc = json.loads(text[text.index("{"):])     # fio may print warnings before the JSON
jobs = doc["jobs"]
assert jobs, "no jobs in the JSON"
total = {d: 0.0 for d in ("read", "write", "trim")}
for j in jobs:
    assert j["error"] == 0, f"job {j['jobname']} error {j['error']}"
    for d in dirs:
        s = j[d]
        assert s["total_ios"] > 0 and s["iops"] > 0, f"job {j['jobname']}: no {d} I/O ({s['total_ios']} ios)"
        assert s["short_ios"] == 0 and s["drop_ios"] == 0, f"job {j['jobname']}: short/dropped {d} I/O"
    for d in total:
        total[d] += j[d]["iops"]
summary = ", ".join(f"{d} {total[d]:.0f} IOPS" for d in dirs)
print(f"[{name}] {len(jobs)} job(s): {summary}")
PY
}

# expect_fail NAME PATTERN: fio exited non-zero without crashing, and stderr matches PATTERN.
expect_fail() {
  local name=$1 pattern=$2 rc
  rc=$(cat "$work/$name.rc")
  check_no_crash "$name"
  [ "$rc" -ne 0 ] || fail "$name: fio exited 0 but should have failed"
  grep -qE "$pattern" "$work/$name.err" || fail "$name: stderr lacks /$pattern/: $(cat "$work/$name.err")"
  note "$name: fails as it should (exit $rc): $(grep -m1 -E "$pattern" "$work/$name.err")"
}

perf_args=(--thread=1 --numjobs=4 --iodepth=16 --time_based --runtime=2 --bs=4k)

start_target
case "$case_name" in
  randread)
    run_fio randread "--filename=$(trid 1)" "${perf_args[@]}" --rw=randread
    expect_ok randread read
    ;;
  randwrite)
    run_fio randwrite "--filename=$(trid 1)" "${perf_args[@]}" --rw=randwrite
    expect_ok randwrite write
    ;;
  randrw)
    run_fio randrw "--filename=$(trid 1)" "${perf_args[@]}" --rw=randrw --rwmixread=70
    expect_ok randrw "read write"
    python3 - "$work/randrw.json" <<'PY' || fail "randrw: the read share is not about 70%"
import json, sys
t = open(sys.argv[1]).read(); d = json.loads(t[t.index("{"):])
r = sum(j["read"]["total_ios"] for j in d["jobs"]); w = sum(j["write"]["total_ios"] for j in d["jobs"])
share = r / (r + w)
print(f"[randrw] read share {share:.3f}")
assert 0.65 <= share <= 0.75, share
PY
    ;;
  verify)
    # fio's own crc32c verify on the RAM namespace: 4 jobs on their own 16 MiB each, random
    # 4 KiB writes then a read-back; then 128 KiB sequential with the batch options.
    run_fio verify4k "--filename=$(trid 2)" --thread=1 --numjobs=4 --iodepth=16 --rw=randwrite --bs=4k \
      --size=16M --offset_increment=16M --verify=crc32c --verify_fatal=1 --do_verify=1
    expect_ok verify4k "read write"
    run_fio verify128k "--filename=$(trid 2)" --thread=1 --numjobs=2 --iodepth=8 --rw=write --bs=128k \
      --size=32M --offset_increment=64M --offset=128M --verify=crc32c --verify_fatal=1 \
      --iodepth_batch_submit=4 --iodepth_batch_complete_min=2 --iodepth_batch_complete_max=8
    expect_ok verify128k "read write"
    # The check can fail: the NULL namespace drops writes and reads zeros, so verify must
    # catch it.
    run_fio verify_null "--filename=$(trid 1)" --thread=1 --iodepth=8 --rw=randwrite --bs=4k --size=4M \
      --verify=crc32c
    expect_fail verify_null "verify: bad magic header"
    ;;
  multipath)
    # One job over two paths (the filename's and paths=): a target with ANA reporting on two
    # listeners; while fio's crc32c verify runs, listener A's group turns inaccessible and back
    # through nvtcp rpc. No I/O error, every block verifies, and the target saw both paths.
    stop "$tpid"
    # Below the kernel's ephemeral range: a test beside this one cannot take them for a client
    # connection before the target binds them.
    read -r pa pb < <(python3 -c 'import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
held, ports = [], []
while len(ports) < 2:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", random.randint(10000, low - 1) if low > 10100 else 0))
    except OSError:
        continue
    held.append(s); ports.append(s.getsockname()[1])
print(*ports)')
    rm -f "$work/ready"
    "$nvtcp" target --ram 256M --listen "127.0.0.1:$pa" --listen "127.0.0.1:$pb" --discovery-port 0 --nqn "$NQN" \
      --ana-reporting --rpc-socket "$work/rpc.sock" --ready-file "$work/ready" >"$work/target.log" 2>&1 &
    tpid=$!
    wait_ready "two-listener target" "$tpid" "$work/ready" "$work/target.log"
    ana() { "$nvtcp" rpc -s "$work/rpc.sock" nvmf_subsystem_listener_set_ana_state --nqn "$NQN" \
              --listen-address.traddr 127.0.0.1 --listen-address.trsvcid "$pa" --ana-state "$1" >/dev/null; }
    (sleep 1; ana inaccessible; sleep 1; ana optimized) &
    flipper=$!
    run_fio multipath "--filename=$(trid 1 "$pa")" --paths="127.0.0.1:$pb" --path_policy=queue-depth --max_failovers=-1 \
      --thread=1 --iodepth=16 --rw=randwrite --bs=4k --size=64M --verify=crc32c --verify_fatal=1 --do_verify=1
    wait "$flipper" || fail "multipath: set_ana_state failed"
    expect_ok multipath "read write"
    grep -q "group 1: optimized -> inaccessible" "$work/target.log" || fail "multipath: the ANA state never changed"
    [ "$(grep -c "connected to $NQN (controller [0-9]*, qid 1" "$work/target.log")" -ge 2 ] ||
      fail "multipath: fio's job did not connect an I/O queue on both paths"
    run_fio multipath_bad "--filename=$(trid 1 "$pa")" --paths="127.0.0.1" --thread=1 --rw=read --bs=4k --size=1M
    expect_fail multipath_bad "is not ADDR:PORT"
    ;;
  mdts_split)
    # bs=1M against a target whose MDTS is 128 KiB (SPDK's default): the host library sends each
    # I/O as 8 commands and completes it once; fio's crc32c verify checks every byte came back.
    cat >"$work/mdts.json" <<JSON
{"listeners": [{"address": "127.0.0.1", "port": 0}], "discovery_port": 0, "mdts_bytes": 131072,
 "subsystems": [{"nqn": "$NQN", "namespaces": [{"type": "ram", "size": "128M"}]}]}
JSON
    rm -f "$work/mdts.ready"
    "$nvtcp" target --config "$work/mdts.json" --ready-file "$work/mdts.ready" >"$work/mdts-target.log" 2>&1 &
    mpid=$!
    wait_ready "MDTS 128 KiB target" "$mpid" "$work/mdts.ready" "$work/mdts-target.log"
    mport=$(cat "$work/mdts.ready")
    "$nvtcp" identify -r "trtype:tcp traddr:127.0.0.1 trsvcid:$mport subnqn:$NQN" >"$work/mdts.id" 2>&1 ||
      fail "mdts_split: identify failed: $(cat "$work/mdts.id")"
    grep -q "(131072 bytes)" "$work/mdts.id" || fail "mdts_split: the target's MDTS is not 128 KiB: $(grep mdts "$work/mdts.id")"
    run_fio mdts_verify "--filename=$(trid 1 "$mport")" --thread=1 --iodepth=8 --rw=randwrite --bs=1m --size=64M \
      --verify=crc32c --verify_fatal=1 --do_verify=1
    expect_ok mdts_verify "read write"
    run_fio mdts_mixed "--filename=$(trid 1 "$mport")" --thread=1 --numjobs=2 --iodepth=4 --time_based --runtime=2 \
      --rw=randrw --bsrange=4k-1m --norandommap
    expect_ok mdts_mixed "read write"
    kill -INT "$mpid"
    wait "$mpid" 2>/dev/null
    note "1 MiB I/O against MDTS 128 KiB: verified"
    ;;
  reconnect)
    # fio's crc32c verify on a file namespace while the target is killed (SIGKILL) and
    # started again on the same port during the write phase: with ctrl_loss_tmo the engine's
    # queues reconnect, send what was in flight again, and every block verifies.
    kill -KILL "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null; tpid=""
    truncate -s 64M "$work/ns.img"
    start_file_target() {
      rm -f "$work/ready"
      "$nvtcp" target --file "$work/ns.img" --listen "127.0.0.1:$1" --discovery-port 0 --nqn "$NQN" \
        --ready-file "$work/ready" >>"$work/target.log" 2>&1 &
      tpid=$!
      for _ in $(seq 100); do [ -s "$work/ready" ] && break; sleep 0.1; done
      [ -s "$work/ready" ] || fail "the file target did not start"
      port=$(cat "$work/ready")
    }
    start_file_target 0
    # Writes are paced (3 s for the 24 MiB) so that the crash lands in the write phase on any disk.
    run_fio reconnect "--filename=$(trid 1)" --thread=1 --iodepth=16 --rw=randwrite --bs=4k --size=24M \
      --rate_iops=1000000,2000 \
      --verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0 --ctrl_loss_tmo=30 \
      --reconnect_delay=1 &
    fio_pid=$!
    # Crash once the job's I/O queue is up and writing.
    for _ in $(seq 200); do grep -q "qid 1," "$work/target.log" && break; sleep 0.05; done
    sleep 0.5
    kill -KILL "$tpid"; wait "$tpid" 2>/dev/null
    sleep 0.5
    start_file_target "$port"
    wait "$fio_pid"
    grep -q "reconnected" "$work/reconnect.err" || fail "no reconnect in fio's log: $(cat "$work/reconnect.err")"
    expect_ok reconnect "read write"
    ;;
  big_batched)
    run_fio big "--filename=$(trid 1)" --thread=1 --numjobs=2 --iodepth=16 --time_based --runtime=2 --bs=128k \
      --rw=randrw --rwmixread=50 --iodepth_batch_submit=8 --iodepth_batch_complete_min=4 \
      --iodepth_batch_complete_max=16 --norandommap
    expect_ok big "read write"
    run_fio bigseq "--filename=$(trid 1)" --thread=1 --iodepth=32 --time_based --runtime=2 --bs=1m --rw=read \
      --iodepth_batch_submit=16 --iodepth_batch_complete_min=1 --iodepth_batch_complete_max=32
    expect_ok bigseq read
    ;;
  trim_flush)
    # trim -> Dataset Management (deallocate), fsync -> Flush; both on the RAM namespace.
    run_fio trim "--filename=$(trid 2)" --thread=1 --iodepth=8 --rw=randtrim --bs=64k --size=16M
    expect_ok trim trim
    run_fio fsync "--filename=$(trid 2)" --thread=1 --iodepth=8 --rw=randwrite --bs=4k --size=8M --fsync=4
    expect_ok fsync write
    python3 - "$work/fsync.json" <<'PY' || fail "fsync: no flushes were counted"
import json, sys
t = open(sys.argv[1]).read(); d = json.loads(t[t.index("{"):])
n = d["jobs"][0]["sync"]["lat_ns"]["N"]
print(f"[fsync] {n} flushes")
assert n >= 8192 // 4 - 1, n
PY
    ;;
  options)
    # Engine options: digests both ways, 4 queue pairs per job, a host NQN and keep-alive.
    run_fio options "--filename=$(trid 2)" --thread=1 --numjobs=2 --iodepth=16 --rw=randwrite --bs=8k --size=8M \
      --offset_increment=8M --verify=crc32c --verify_fatal=1 --hdgst=1 --ddgst=1 --qpairs=4 \
      --hostnqn=nqn.2014-08.org.nvmexpress:uuid:8d6a3a1e-4c1f-4d21-9a8e-0f7c2a9b1c11 --kato=10000
    expect_ok options "read write"
    host=nqn.2014-08.org.nvmexpress:uuid:8d6a3a1e-4c1f-4d21-9a8e-0f7c2a9b1c11
    n=$(grep -c "host $host connected to $NQN .*qid [1-9].*header digest, data digest" "$work/target.log")
    [ "$n" -eq 8 ] ||
      fail "options: expected 2 jobs x 4 I/O queue pairs with both digests from $host; the target saw $n"
    note "the target saw $n I/O queue pairs with header and data digests from $host"
    ;;
  bad_input)
    args=(--thread=1 --iodepth=4 --rw=randread --bs=4k --time_based --runtime=1)
    run_fio bad_filename "--filename=trtype=tcp traddr=127.0.0.1 trsvcid=$port bogus=1" "${args[@]}"
    expect_fail bad_filename "nvtcp: bad filename .*unknown transport ID key 'bogus'"
    run_fio bad_trtype "--filename=trtype=rdma traddr=127.0.0.1 trsvcid=$port subnqn=$FNQN" "${args[@]}"
    expect_fail bad_trtype "nvtcp: bad filename .*trtype 'rdma' is not supported"
    run_fio unsplit_nqn "--filename=$(trid 1 "$port" "$NQN")" "${args[@]}"
    expect_fail unsplit_nqn "fio split --filename at ':'"
    # A port nothing listens on: bind one, learn its number, close it.
    dead_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    run_fio unreachable "--filename=$(trid 1 "$dead_port")" "${args[@]}"
    expect_fail unreachable "nvtcp: cannot connect .*Connection refused"
    run_fio unknown_nqn "--filename=$(trid 1 "$port" 'nqn.2026-11.io.nvtcp\:nosuch')" "${args[@]}"
    expect_fail unknown_nqn "nvtcp: cannot connect .*no subsystem named 'nqn.2026-11.io.nvtcp:nosuch'"
    run_fio bad_ns "--filename=$(trid 9)" "${args[@]}"
    expect_fail bad_ns "nvtcp: namespace 9 .*not active"
    run_fio bs1000 "--filename=$(trid 1)" --thread=1 --iodepth=4 --rw=randread --bs=1000 --time_based --runtime=1
    expect_fail bs1000 "nvtcp: read block size 1000 is not a multiple of the namespace block size 512"
    run_fio no_thread "--filename=$(trid 1)" --thread=0 --iodepth=4 --rw=randread --bs=4k --time_based --runtime=1
    expect_fail no_thread "nvtcp: the nvtcp engine needs --thread=1"
    run_fio coalesce_tcp "--filename=$(trid 1)" --thread=1 --iodepth=4 --rw=randread --bs=4k --time_based \
      --runtime=1 --intr_coalesce=8
    expect_fail coalesce_tcp "nvtcp: intr_coalesce=8: only a controller of the offload engine"
    run_fio bad_send_buffer "--filename=$(trid 1)" "${args[@]}" --send_buffer=lots
    expect_fail bad_send_buffer "nvtcp: send_buffer=lots is not a size up to 1g"
    # The target keeps serving after all that.
    run_fio after "--filename=$(trid 1)" --thread=1 --iodepth=8 --rw=randread --bs=4k --time_based --runtime=1
    expect_ok after read
    ;;
  jobs32)
    # 32 jobs of depth 8 on 2 cores: 32 controllers, each with its own I/O queue pair.
    run_fio jobs32 "--filename=$(trid 1)" --thread=1 --numjobs=32 --iodepth=8 --rw=randread --bs=4k \
      --time_based --runtime=2
    expect_ok jobs32 read
    n=$(python3 -c 'import json,sys; t=open(sys.argv[1]).read(); print(len(json.loads(t[t.index("{"):])["jobs"]))' \
        "$work/jobs32.json")
    [ "$n" -eq 32 ] || fail "jobs32: $n jobs in the JSON, not 32"
    q=$(grep -c "connected to $NQN .*qid [1-9]" "$work/target.log")
    [ "$q" -ge 32 ] || fail "jobs32: the target saw $q I/O queue pairs, not 32"
    note "the target saw $q I/O queue pair connections"
    ;;
  engine)
    # The study's card half: 32 fio jobs hand their commands to the offload engine through
    # shared memory, fio's buffers in the engine's region; fio's crc32c verify reads back
    # every block written, each job on its own 4 MiB.
    start_engine
    run_fio engine32 "--filename=$(etrid 2)" --thread=1 --numjobs=32 --iodepth=8 --rw=randwrite --bs=4k \
      --size=4M --offset_increment=4M --verify=crc32c --verify_fatal=1 --do_verify=1
    expect_ok engine32 "read write"
    run_fio engine_read "--filename=$(etrid 1)" --thread=1 --numjobs=2 --iodepth=32 --rw=randread --bs=4k \
      --time_based --runtime=1
    expect_ok engine_read read
    # Interrupt coalescing asked of the engine's controller (Set Features 08h): every write
    # still verifies, however the wake-ups are grouped.
    run_fio engine_coalesced "--filename=$(etrid 2)" --thread=1 --numjobs=4 --iodepth=16 --rw=randwrite --bs=4k \
      --size=4M --offset=128M --offset_increment=4M --verify=crc32c --verify_fatal=1 --do_verify=1 \
      --intr_coalesce=8 --intr_coalesce_us=200
    expect_ok engine_coalesced "read write"
    kill -0 "$epid" 2>/dev/null || fail "the engine died"
    ;;
  engine_kill)
    # One fio process killed with SIGKILL mid-I/O leaves another's verify run passing, and
    # the engine frees the dead one's queues.
    start_engine
    run_fio survivor "--filename=$(etrid 2)" --thread=1 --numjobs=2 --iodepth=16 --rw=randwrite --bs=4k \
      --size=32M --offset_increment=32M --verify=crc32c --verify_fatal=1 --do_verify=1 --loops=20 &
    survivor=$!
    env LD_PRELOAD="$preload" fio --name=victim --ioengine="external:$engine" "--filename=$(etrid 2)" --thread=1 \
      --numjobs=2 --iodepth=32 --rw=randrw --bs=4k --offset=128M --size=64M --time_based --runtime=60 \
      --output="$work/victim.out" 2>"$work/victim.err" &
    victim=$!
    for _ in $(seq 100); do
      [ "$(grep -c "attached to" "$work/engine.log")" -ge 4 ] && break
      sleep 0.1
    done
    sleep 1
    kill -0 "$survivor" 2>/dev/null || fail "the survivor finished before the kill (make it run longer)"
    kill -KILL "$victim"
    wait "$victim" 2>/dev/null
    note "victim fio (pid $victim) killed with SIGKILL"
    wait "$survivor"
    expect_ok survivor "read write"
    kill -0 "$epid" 2>/dev/null || fail "the engine died"
    # Its lifeline or its doorbell pipe, whichever of its closed descriptors the engine saw first.
    grep -qE "pid $victim .*detached[;,] [1-9][0-9]* I/O queue" "$work/engine.log" ||
      fail "the engine did not see the victim go with its queues open: $(tail -5 "$work/engine.log")"
    note "$(grep -m1 -E "pid $victim .*detached; [1-9]" "$work/engine.log" | sed 's/^.*engine: //')"
    # Every application is gone: the engine holds no queue of the victim's any more.
    run_fio after_kill "--filename=$(etrid 2)" --thread=1 --iodepth=8 --rw=randread --bs=4k --time_based --runtime=1
    expect_ok after_kill read
    ;;
  dhchap)
    # A second target whose subsystem has a host with DH-HMAC-CHAP keys (key files, mode 0600):
    # jobs that give the secrets write and verify; a wrong one is refused with a clear message.
    host=nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6
    (umask 077
     echo 'DHHC-1:01:ia6zGodOr4SEG0Zzaw398rpY0wqipUWj4jWjUh4HWUz6aQ2n:' >"$work/host.key"
     echo 'DHHC-1:02:ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoOEhYaHiImKi4yNjo+QkZKTvGwQfg==:' >"$work/ctrl.key"
     echo 'DHHC-1:00:AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAl7OaH:' >"$work/wrong.key")
    cat >"$work/auth.json" <<JSON
{"listeners": [{"address": "127.0.0.1", "port": 0}], "discovery_port": 0,
 "subsystems": [{"nqn": "$NQN", "namespaces": [{"type": "ram", "size": "64M"}],
   "hosts": [{"nqn": "$host", "dhchap_key": "@$work/host.key", "dhchap_ctrl_key": "@$work/ctrl.key"}]}]}
JSON
    "$nvtcp" target --config "$work/auth.json" --ready-file "$work/auth.ready" >"$work/auth.log" 2>&1 &
    apid=$!
    wait_ready "target with keys" "$apid" "$work/auth.ready" "$work/auth.log"
    aport=$(cat "$work/auth.ready")
    run_fio dhchap "--filename=$(trid 1 "$aport")" --thread=1 --numjobs=2 --offset_increment=8m --iodepth=8 \
      --rw=randwrite --bs=4k \
      --size=8m --verify=crc32c --hostnqn="$host" --dhchap_secret="@$work/host.key" \
      --dhchap_ctrl_secret="@$work/ctrl.key"
    expect_ok dhchap write
    grep -q 'authenticated on qid 1' "$work/auth.log" || fail "dhchap: no I/O queue authenticated"
    run_fio dhchap_wrong "--filename=$(trid 1 "$aport")" --thread=1 --iodepth=1 --rw=randread --bs=4k \
      --time_based --runtime=1 --hostnqn="$host" --dhchap_secret="@$work/wrong.key"
    expect_fail dhchap_wrong "DH-HMAC-CHAP authentication .* failed"
    ! grep -q 'ia6zGodOr4SEG0' "$work"/*.err "$work/auth.log" || fail "dhchap: a key appears in a log"
    stop "$apid"
    ;;
  tls)
    # A target whose only listener requires TLS, with the host's PSK in a key file: jobs with tls_key
    # write and verify over TLS; a wrong key and no key are each refused with a clear message.
    host=nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6
    (umask 077
     echo 'NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:' >"$work/host.psk"
     echo 'NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:' >"$work/wrong.psk"
     echo 'NVMeTLSkey-1:02:gIGCg4SFhoeIiYqLjI2Oj5CRkpOUlZaXmJmam5ydnp+goaKjpKWmp6ipqqusra6vkk6Jzw==:' >"$work/host2.psk")
    host2=nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf7
    cat >"$work/tls.json" <<JSON
{"listeners": [{"address": "127.0.0.1", "port": 0, "tls": "required"}], "discovery_port": 0,
 "subsystems": [{"nqn": "$NQN", "namespaces": [{"type": "ram", "size": "64M"}],
   "hosts": [{"nqn": "$host", "psk": "@$work/host.psk"}, {"nqn": "$host2", "psk": "@$work/host2.psk"}]}]}
JSON
    "$nvtcp" target --config "$work/tls.json" --ready-file "$work/tls.ready" >"$work/tls.log" 2>&1 &
    spid=$!
    wait_ready "target with TLS" "$spid" "$work/tls.ready" "$work/tls.log"
    sport=$(cat "$work/tls.ready")
    run_fio tls "--filename=$(trid 1 "$sport")" --thread=1 --numjobs=2 --offset_increment=8m --iodepth=8 \
      --rw=randwrite --bs=16k --size=8m --verify=crc32c --hostnqn="$host" --tls=1 --tls_key="@$work/host.psk"
    expect_ok tls write
    grep -q 'qid 1, .*TLS TLS_AES_128_GCM_SHA256' "$work/tls.log" || fail "tls: no I/O queue in TLS"
    # A SHA-384 PSK derived the legacy way and bound with SHA-256, as for a Linux target: the
    # session takes a SHA-256 suite (with the specification's SHA-384 binder it would be AES-256).
    run_fio tls_compat "--filename=$(trid 1 "$sport")" --thread=1 --iodepth=4 --rw=randwrite --bs=16k --size=4m \
      --offset=32m --verify=crc32c --hostnqn="$host2" --tls_key="@$work/host2.psk" --tls_legacy_derivation=1 \
      --tls_sha256_binder=1
    expect_ok tls_compat write
    grep -q "host $host2 connected .*qid 1, .*TLS TLS_AES_128_GCM_SHA256" "$work/tls.log" \
      || fail "tls_compat: the SHA-384 PSK's session is not on a SHA-256 suite"
    run_fio tls_wrong "--filename=$(trid 1 "$sport")" --thread=1 --iodepth=1 --rw=randread --bs=4k \
      --time_based --runtime=1 --hostnqn="$host" --tls_key="@$work/wrong.psk"
    expect_fail tls_wrong "TLS handshake .* failed"
    run_fio tls_none "--filename=$(trid 1 "$sport")" --thread=1 --iodepth=1 --rw=randread --bs=4k \
      --time_based --runtime=1 --hostnqn="$host"
    expect_fail tls_none "."
    ! grep -q 'VRLbtnN9AQb2' "$work"/*.err "$work/tls.log" || fail "tls: a key appears in a log"
    stop "$spid"
    ;;
  preload)
    # SPDK's way: LD_PRELOAD the engine and name it (fio's symbols must be there, so the
    # preload goes on fio itself, not on a wrapper such as taskset).
    "${pin_fio[@]}" env LD_PRELOAD="${preload:+$preload:}$engine" fio --name=preload --ioengine=nvtcp \
      "--filename=$(trid 1)" --thread=1 --iodepth=16 --rw=randread --bs=4k --time_based --runtime=1 \
      --output-format=json --output="$work/preload.json" 2>"$work/preload.err"
    echo $? >"$work/preload.rc"
    expect_ok preload read
    ;;
  *)
    fail "unknown case '$case_name'"
    ;;
esac
kill -0 "$tpid" 2>/dev/null || { cat "$work/target.log" >&2; fail "the target died during the test"; }
note "PASS"
exit 0

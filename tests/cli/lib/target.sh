# SPDX-License-Identifier: Apache-2.0
# Sourced by the CLI tests that run `nvtcp target` in the background, with NVTCP set:
#   . "$(dirname "$0")/lib/target.sh" NAME
# gives a scratch directory $dir (/tmp/nvtcp-NAME.*) that goes on exit, with the target and any
# other process the test names in exit_kills killed first, so that a failing check leaves
# nothing running; fail(), which shows the end of the target's log; and the start and stop of
# a target, so that every test waits for it and judges its exit the same way.
dir=$(mktemp -d "/tmp/nvtcp-$1.XXXXXX")
target_pid=
# Names of the variables that hold a pid to kill on exit, in that order; a test adds its own
# (perf_pid, ...) in front. The target's signal is KILL where a test must not let it shut down.
exit_kills=(target_pid)
target_exit_signal=TERM
cleanup() {
  local v
  for v in "${exit_kills[@]}"; do
    local sig=TERM
    [ "$v" = target_pid ] && sig=$target_exit_signal
    [ -n "${!v:-}" ] && kill "-$sig" "${!v}" 2>/dev/null || true
  done
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- target log (last 20 lines):" >&2
  tail -20 "$dir/target.log" >&2 2>/dev/null || true
  exit 1
}
# wait_ready FILE WHAT: until FILE (a --ready-file) holds the port, for 10 s at the most.
wait_ready() {
  for _ in $(seq 200); do [ -s "$1" ] && return 0; sleep 0.05; done
  fail "$2 did not start"
}
# free_ports N: N loopback ports free now, for a target that must listen on ports named before
# it starts. Taken below the kernel's ephemeral range: a port the kernel hands out for bind(0)
# is also what any client connection of a test running beside this one may take before the
# target binds it ("Address already in use", seen in CI).
free_ports() {
  python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
held, ports = [], []
while len(ports) < n:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", random.randint(10000, low - 1) if low > 10100 else 0))
    except OSError:
        s.close()
        continue
    held.append(s)
    ports.append(s.getsockname()[1])
print(*ports)
PY
}
# Options given to nvtcp before `target` (--log-format json, ...).
nvtcp_opts=()
# start_target ARGS...: `nvtcp target ARGS` in the background, its output in $dir/target.log
# (appended to when target_log_append is set, so that a restarted target's log follows the
# last one's), until it is ready; sets target_pid and port.
target_log_append=
start_target() {
  rm -f "$dir/ready"
  if [ -n "$target_log_append" ]; then
    "$NVTCP" "${nvtcp_opts[@]}" target "$@" --ready-file "$dir/ready" >>"$dir/target.log" 2>&1 &
  else
    "$NVTCP" "${nvtcp_opts[@]}" target "$@" --ready-file "$dir/ready" >"$dir/target.log" 2>&1 &
  fi
  target_pid=$!
  wait_ready "$dir/ready" "the target"
  port=$(cat "$dir/ready")
}
# stop_target: SIGTERM; the target must exit cleanly (status 0).
stop_target() {
  kill -TERM "$target_pid"
  wait "$target_pid" || fail "the target did not exit cleanly"
  target_pid=
}
# refused_read NAME WHAT [ARGS...]: a short `nvtcp perf` read of $trid with ARGS must fail (its
# output in $dir/NAME.txt for the test to check why); "perf WHAT succeeded" fails the test.
refused_read() {
  local name=$1 what=$2
  shift 2
  if "$NVTCP" perf -r "$trid" -q 1 -o 4K -w read -t 0.2 "$@" >"$dir/$name.txt" 2>&1; then
    fail "perf $what succeeded"
  fi
}
# key_file_mode_refused OPTION FILE: perf refuses a key file (given as OPTION @FILE) that others
# can read, naming its mode; FILE is made private again after.
key_file_mode_refused() {
  chmod 644 "$2"
  refused_read mode "reading a key file others can read" "$1" "@$2"
  grep -q 'mode 0644' "$dir/mode.txt" || fail "key file mode: $(tail -2 "$dir/mode.txt")"
  chmod 600 "$2"
}
# no_key_leaked KEY...: no part of any KEY's secret (20 characters of its base64, past the
# "DHHC-1:xx:" or "NVMeTLSkey-1:xx:" prefix) appears in the tests' outputs or the target's log.
no_key_leaked() {
  local k b64
  for k in "$@"; do
    b64=${k#*:*:}
    b64=${b64:0:20}
    if grep -qF -- "$b64" "$dir"/*.txt "$dir/target.log"; then fail "a key appears in a log or output"; fi
  done
}

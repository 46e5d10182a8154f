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

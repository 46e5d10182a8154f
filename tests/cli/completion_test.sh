#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The bash completion the nvtcp package installs (packaging/bash-completion/nvtcp) completes the
# subcommands, each subcommand's options as its --help lists them, the top-level options, and file
# names after --config.
set -euo pipefail
NVTCP=$(readlink -f "$1")
SRC=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d /tmp/nvtcp-completion.XXXXXX)
target_pid=
trap '[ -n "$target_pid" ] && kill "$target_pid" 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
ln -s "$NVTCP" "$dir/nvtcp"
PATH=$dir:$PATH
# shellcheck source=/dev/null
source "$SRC/packaging/bash-completion/nvtcp"
[[ $(complete -p nvtcp) == *"-F _nvtcp"* ]] || fail "no completion registered for nvtcp"
comp() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _nvtcp; echo "${COMPREPLY[*]}"; }
got=$(comp nvtcp "")
for s in target discover identify perf bench engine rpc; do [[ " $got " == *" $s "* ]] || fail "no subcommand $s in: $got"; done
[[ $(comp nvtcp pe) == perf ]] || fail "'pe' completes to '$(comp nvtcp pe)', not perf"
got=$(comp nvtcp perf --tls)
for o in --tls --tls-key --tls-sha256-binder; do [[ " $got " == *" $o "* ]] || fail "perf: no $o in: $got"; done
[[ " $(comp nvtcp perf --reauth) " == *" --reauth-interval "* ]] || fail "perf: no --reauth-interval"
[[ " $(comp nvtcp target --max-conn) " == *" --max-connections "* ]] || fail "target: no --max-connections"
[[ " $(comp nvtcp target --metrics) " == *" --metrics-listen "* ]] || fail "target: no --metrics-listen"
got=$(comp nvtcp --log)
for o in --log-level --log-format; do [[ " $got " == *" $o "* ]] || fail "no $o at the top in: $got"; done
touch "$dir/target.json"
[[ " $(comp nvtcp target --config "$dir/tar") " == *" $dir/target.json "* ]] || fail "--config completes no file name"
# nvtcp rpc METHOD: the methods of the target on that socket.
"$NVTCP" target -l 127.0.0.1:0 --discovery-port 0 --null 1G --rpc-socket "$dir/t.sock" --ready-file "$dir/ready" \
  >"$dir/target.log" 2>&1 &
target_pid=$!
for _ in $(seq 200); do [ -s "$dir/ready" ] && break; sleep 0.05; done
got=$(comp nvtcp rpc -s "$dir/t.sock" nvmf_subsystem_get_q)
[[ $got == nvmf_subsystem_get_qpairs ]] || fail "rpc method completion gave '$got'"
echo "PASS: subcommands, options per subcommand, file names and RPC methods complete"

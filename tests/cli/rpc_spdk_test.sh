#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# SPDK's own rpc.py against the target's JSON-RPC socket: a target started empty is built by it
# as an orchestrator builds nvmf_tgt, and the calls an SPDK user scripts (hosts, bdevs,
# namespaces, ANA states, a subsystem with a listener of its own) do what they do on nvmf_tgt, and rpc.py's save_config is the one `nvtcp rpc save_config` writes. rpc.py is
# NVTCP_SPDK_RPC, or ../shared/spdk beside the source tree; without it the test skips (77): the
# project's tests do not need SPDK. Apart from rpc_test.sh so that the two run side by side.
set -euo pipefail
NVTCP=$1
here=$(cd "$(dirname "$0")" && pwd)
spdk_rpc=${NVTCP_SPDK_RPC:-$here/../../../shared/spdk/scripts/rpc.py}
if [ ! -f "$spdk_rpc" ]; then
  echo "SKIP: SPDK's rpc.py not found (set NVTCP_SPDK_RPC to its path)"
  exit 77
fi
. "$(dirname "$0")/lib/target.sh" rpc-spdk
NQN=nqn.2026-12.io.nvtcp:rpc
NQN2=nqn.2026-12.io.nvtcp:rpc-live
HOST=nqn.2014-08.org.nvmexpress:uuid:0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5
SOCK=$dir/target.sock
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
spdk() { python3 "$spdk_rpc" -s "$SOCK" "$@"; }

# An empty start, built by rpc.py as an orchestrator builds nvmf_tgt: the transport, a subsystem
# with ANA reporting and a controller ID range of its own, a bdev, its namespace, a listener.
start_target --rpc-socket "$SOCK"
spdk nvmf_create_transport -t TCP || fail "rpc.py nvmf_create_transport"
spdk nvmf_create_subsystem "$NQN" -s SPDK00000000000001 -r -i 1000 -I 1999 || fail "rpc.py nvmf_create_subsystem"
[ "$(spdk bdev_null_create Null0 1024 512)" = Null0 ] || fail "rpc.py bdev_null_create"
spdk nvmf_subsystem_add_ns "$NQN" Null0 || fail "rpc.py nvmf_subsystem_add_ns"
port=$(free_port)
spdk nvmf_subsystem_add_listener "$NQN" -t tcp -a 127.0.0.1 -s "$port" -f ipv4 || fail "rpc.py nvmf_subsystem_add_listener"
trid="trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN hostnqn:$HOST ns:1"
connects() { "$NVTCP" perf -r "$trid" -q 1 -o 4K -w randread -t 1 >"$dir/perf.log" 2>&1; }

# Hosts: only the one rpc.py lists, then any.
spdk nvmf_subsystem_add_host "$NQN" "$HOST" || fail "rpc.py nvmf_subsystem_add_host"
connects || fail "a host rpc.py added could not connect"
spdk nvmf_subsystem_get_controllers "$NQN" >"$dir/ctrls.json" || fail "rpc.py get_controllers"
spdk nvmf_subsystem_remove_host "$NQN" "$HOST" || fail "rpc.py nvmf_subsystem_remove_host"
spdk nvmf_subsystem_allow_any_host -e "$NQN" || fail "rpc.py allow_any_host"
spdk nvmf_get_subsystems "$NQN" | python3 -c 'import json,sys; s=json.load(sys.stdin)[0]; assert s["allow_any_host"] and not s["hosts"] and (s["min_cntlid"], s["max_cntlid"]) == (1000, 1999), s' \
  || fail "rpc.py nvmf_get_subsystems"
connects || fail "any host could not connect after rpc.py allowed it"

# A bdev and a namespace of it that verified I/O reaches; deleting the bdev takes the namespace.
[ "$(spdk bdev_malloc_create -b Malloc0 16 512)" = Malloc0 ] || fail "rpc.py bdev_malloc_create"
spdk nvmf_subsystem_add_ns -n 3 "$NQN" Malloc0 || fail "rpc.py nvmf_subsystem_add_ns"
"$NVTCP" perf -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN ns:3" -q 4 -o 4K -w randrw -t 1 --verify \
  >"$dir/perf3.log" 2>&1 || fail "no verified I/O to the namespace rpc.py added: $(tail -2 "$dir/perf3.log")"
spdk bdev_get_bdevs -b Malloc0 | python3 -c 'import json,sys; b=json.load(sys.stdin)[0]; assert b["claimed"] and b["num_blocks"] == 32768, b' \
  || fail "rpc.py bdev_get_bdevs"
spdk bdev_malloc_delete Malloc0 || fail "rpc.py bdev_malloc_delete (and its namespace)"

# ANA: one group, then every group.
spdk nvmf_subsystem_listener_set_ana_state "$NQN" -t tcp -a 127.0.0.1 -s "$port" -n non_optimized -g 1 \
  || fail "rpc.py nvmf_subsystem_listener_set_ana_state"
spdk nvmf_subsystem_get_listeners "$NQN" | python3 -c 'import json,sys; l=json.load(sys.stdin); assert l[0]["ana_states"][0]["ana_state"] == "non_optimized", l' \
  || fail "rpc.py nvmf_subsystem_get_listeners"
connects || fail "no I/O through a non-optimized path"
spdk nvmf_subsystem_listener_set_ana_state "$NQN" -t tcp -a 127.0.0.1 -s "$port" -n optimized || fail "rpc.py set_ana_state (all groups)"

# A subsystem and its listener from rpc.py (which names the port: a free one is found first).
port2=$(free_port)
spdk nvmf_create_subsystem "$NQN2" -a -s SPDK00000000000002 -m 4 -r || fail "rpc.py nvmf_create_subsystem"
[ "$(spdk bdev_null_create Null2 64 512)" = Null2 ] || fail "rpc.py bdev_null_create"
spdk nvmf_subsystem_add_ns "$NQN2" Null2 || fail "rpc.py nvmf_subsystem_add_ns (new subsystem)"
spdk nvmf_subsystem_add_listener "$NQN2" -t tcp -a 127.0.0.1 -s "$port2" -f ipv4 || fail "rpc.py nvmf_subsystem_add_listener"
"$NVTCP" perf -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port2 subnqn:$NQN2 ns:1" -q 4 -o 4K -w randread -t 1 \
  >"$dir/perf-spdk.log" 2>&1 || fail "no I/O through the listener rpc.py added: $(tail -2 "$dir/perf-spdk.log")"

# save_config through rpc.py is what nvtcp rpc writes (a second subsystem, a listener, a bdev).
"$NVTCP" rpc -s "$SOCK" save_config >"$dir/saved.json"
spdk save_config >"$dir/saved-by-rpc-py.json" || fail "rpc.py save_config"
python3 -c 'import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); assert a == b, (a, b)' \
  "$dir/saved.json" "$dir/saved-by-rpc-py.json" || fail "rpc.py's save_config differs from nvtcp rpc save_config"
grep -q "$NQN2" "$dir/saved.json" || fail "save_config left out the subsystem rpc.py made"

spdk nvmf_subsystem_remove_listener "$NQN2" -t tcp -a 127.0.0.1 -s "$port2" -f ipv4 || fail "rpc.py nvmf_subsystem_remove_listener"
spdk nvmf_delete_subsystem "$NQN2" || fail "rpc.py nvmf_delete_subsystem"
spdk bdev_null_delete Null2 || fail "rpc.py bdev_null_delete"
stop_target
echo "PASS: SPDK's rpc.py ($spdk_rpc) from an empty start: create_transport, create_subsystem (cntlid range), add_host, get_controllers, remove_host, allow_any_host, get_subsystems, bdev_malloc_create, add_ns, bdev_get_bdevs, bdev_malloc_delete, listener_set_ana_state, get_listeners, create_subsystem, add_listener, save_config, remove_listener, delete_subsystem"

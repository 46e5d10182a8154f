# SPDX-License-Identifier: Apache-2.0
# Two nvtcp gateways in front of one RBD pool, built over JSON-RPC from an empty start as
# ceph-nvmeof builds SPDK's: for the tests that fail a gateway over (tests/ceph/rbd_failover_test.sh,
# tests/interop/kernel/kernel_gateway_test.sh). Sourced; the caller sets
#   NVTCP        the nvtcp binary
#   GW_DIR       where each gateway's RPC socket (NAME.sock), ready file and log (NAME.log) go
#   GW_NQN       the subsystem both gateways serve
#   GW_MON_HOST  the cluster's monitors (ceph.conf's "mon host")
# and defines gw_fail MESSAGE, which does not return.

# gw_start NAME [ARGS...]: an nvtcp target with its RPC socket GW_DIR/NAME.sock (ARGS: --config
# FILE for a restart); sets pid_NAME.
gw_start() {
  local name=$1
  shift
  rm -f "$GW_DIR/$name.ready"
  "$NVTCP" target --rpc-socket "$GW_DIR/$name.sock" --ready-file "$GW_DIR/$name.ready" "$@" >>"$GW_DIR/$name.log" 2>&1 &
  printf -v "pid_$name" %s $!
  for _ in $(seq 400); do [ -s "$GW_DIR/$name.ready" ] && return 0; sleep 0.05; done
  gw_fail "gateway $name did not start"
}
# gw_rpc NAME METHOD ARGS...: one RPC to that gateway; its answer is dropped, a failure fails the test.
gw_rpc() {
  local name=$1
  shift
  "$NVTCP" rpc -s "$GW_DIR/$name.sock" "$@" >/dev/null || gw_fail "gateway $name: rpc $*"
}
# gw_ana NAME PORT STATE: ANA group 1's state through that gateway's listener on 127.0.0.1:PORT.
gw_ana() {
  gw_rpc "$1" nvmf_subsystem_listener_set_ana_state --nqn "$GW_NQN" --listen-address.trtype tcp \
    --listen-address.traddr 127.0.0.1 --listen-address.trsvcid "$2" --ana-state "$3" --anagrpid 1
}
# gw_build NAME PORT MIN_CNTLID MAX_CNTLID IMAGE...: the gateway as ceph-nvmeof builds one: the
# cluster registered (clients ping their watches every second: see cluster.sh), each image of pool
# rbd a bdev CephI and namespace I+1 in ANA group 1, a controller ID range of its own, a listener.
gw_build() {
  local name=$1 port=$2 min=$3 max=$4 i=0 img
  shift 4
  gw_rpc "$name" bdev_rbd_register_cluster "{\"name\": \"cluster_a\",
    \"config_param\": {\"mon_host\": \"$GW_MON_HOST\", \"auth_client_required\": \"none\",
      \"objecter_tick_interval\": \"1\"}}"
  gw_rpc "$name" nvmf_create_subsystem --nqn "$GW_NQN" --serial-number SPDK00000000000001 --allow-any-host true \
    --ana-reporting true --min-cntlid "$min" --max-cntlid "$max"
  for img in "$@"; do
    gw_rpc "$name" bdev_rbd_create --name "Ceph$i" --pool-name rbd --rbd-name "$img" --block-size 4096 \
      --cluster-name cluster_a
    i=$((i + 1))
    gw_rpc "$name" nvmf_subsystem_add_ns --nqn "$GW_NQN" --namespace.bdev-name "Ceph$((i - 1))" --namespace.nsid "$i" \
      --namespace.anagrpid 1
  done
  gw_rpc "$name" nvmf_subsystem_add_listener --nqn "$GW_NQN" --listen-address.trtype tcp \
    --listen-address.traddr 127.0.0.1 --listen-address.trsvcid "$port"
}

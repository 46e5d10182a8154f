# Helpers for the guest scripts (busybox ash), sourced by /init and /guest/run.sh.

# say TEXT: one console line, prefixed and stamped with the guest's uptime.
say() { echo "NVTCP-GUEST [$(cut -d' ' -f1 /proc/uptime)] $*"; }

# load_mod NAME [PARAMS...]: insmod NAME's dependencies, then NAME with PARAMS, in the order that
# /lib/modules/load.dep gives (computed on the host from the package's modules.dep). Modules already
# loaded are skipped; a built-in module has an empty list.
load_mod() {
  local name deps p m last
  name=$(echo "$1" | tr - _); shift
  if ! grep -q "^$name:" /lib/modules/load.dep; then say "FAIL load_mod: $name is not in load.dep"; return 1; fi
  deps=$(sed -n "s|^$name: *||p" /lib/modules/load.dep)
  last=""
  for p in $deps; do last=$p; done
  for p in $deps; do
    m=$(basename "$p" .ko | tr - _)
    [ -d "/sys/module/$m/sections" ] && continue
    if [ "$p" = "$last" ]; then
      insmod "/lib/modules/$p" "$@" || { say "FAIL insmod $p $*"; return 1; }
    else
      insmod "/lib/modules/$p" || { say "FAIL insmod $p"; return 1; }
    fi
  done
  return 0
}

FAILED=0
# pass NAME [DETAIL] / fail NAME [DETAIL]: the per-step markers the host script greps.
pass() { local s=$1; shift; say "PASS $s${*:+: $*}"; }
fail() { local s=$1; shift; say "FAIL $s${*:+: $*}"; FAILED=$((FAILED + 1)); }

# kmsg STEP: print and clear the kernel log since the last call, each line prefixed "KMSG STEP:".
kmsg() { dmesg -c 2>/dev/null | sed "s/^/KMSG $1: /"; }

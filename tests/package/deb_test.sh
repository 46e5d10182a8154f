#!/usr/bin/env bash
# The Debian package as an administrator meets it: `cpack -G DEB` builds nvtcp_<version>_<arch>.deb,
# apt installs it (dependencies from Debian) into a fresh Debian 12 root made by debootstrap, and
# the target starts there from the ExecStart line of the packaged nvtcp-target.service, reading
# the packaged /etc/nvtcp/target.json. A host outside the root identifies it and runs I/O, and
# Debian's fio inside the root loads the packaged fio engine against it.
#
#   deb_test.sh BUILD_DIR
#
# Needs root (chroot, mounts) and deb.debian.org (debootstrap, apt); exits 77 (skipped) without
# them. The fresh root is cached as a tarball in $NVTCP_DEBOOTSTRAP_CACHE (default
# /var/tmp/nvtcp-debootstrap) so that a second run does not download it again; each run
# unpacks a new copy. Mounts live in a private mount namespace: nothing outlives the test.
set -euo pipefail
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

if [ "${1:-}" = --in-root ]; then
  # Inside `unshare --mount`: /proc and /dev for the root, then everything that runs in it.
  root=$2 deb=$3 host_nvtcp=$4
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount --make-rslave "$root/dev"
  in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }

  step "apt installs $(basename "$deb") and its dependencies"
  cp "$deb" "$root/tmp/nvtcp.deb"
  in_root apt-get update -qq >/dev/null || fail "apt-get update in the root"
  in_root apt-get install -y -qq --no-install-recommends /tmp/nvtcp.deb >"$root/tmp/apt.log" 2>&1 ||
    { tail -20 "$root/tmp/apt.log"; fail "apt-get install of the package"; }
  # Outputs are captured before they are searched: `grep -q` in a pipe closes it early, and
  # under pipefail the writer's SIGPIPE would fail the check.
  status=$(in_root dpkg -s nvtcp)
  grep -q '^Status: install ok installed' <<<"$status" || fail "dpkg does not list nvtcp as installed"
  in_root nvtcp --version || fail "the installed nvtcp does not run"
  cache=$(in_root ldconfig -p)
  grep -q 'libnvtcp.so.0 ' <<<"$cache" || fail "libnvtcp.so.0 is not in the loader cache"
  conffiles=$(in_root dpkg-query --showformat='${Conffiles}\n' --show nvtcp)
  grep -q /etc/nvtcp/target.json <<<"$conffiles" || fail "/etc/nvtcp/target.json is not a conffile"

  unit=$root/usr/lib/systemd/system/nvtcp-target.service
  [ -f "$unit" ] || unit=$root/lib/systemd/system/nvtcp-target.service
  [ -f "$unit" ] || fail "no nvtcp-target.service in the package"
  exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
  [ -n "$exec_start" ] || fail "the unit has no ExecStart"
  # The administrator's one edit: any free port, so that this test never collides with
  # another target on the machine (the packaged file says 127.0.0.1:4420 and discovery on 8009).
  sed -i 's/"port": 4420/"port": 0/; s/"discovery_port": 8009/"discovery_port": 0/' "$root/etc/nvtcp/target.json"
  nqn=$(sed -n 's/.*"nqn": "\([^"]*\)".*/\1/p' "$root/etc/nvtcp/target.json" | head -1)

  step "the service's command: $exec_start"
  # chroot and env exec: $! is the target itself (a shell function would put a subshell there).
  # shellcheck disable=SC2086
  chroot "$root" env -i PATH=/usr/sbin:/usr/bin $exec_start --ready-file /tmp/ready >"$root/tmp/target.log" 2>&1 &
  target_pid=$!
  trap 'kill $target_pid 2>/dev/null || true' EXIT
  for _ in $(seq 200); do [ -s "$root/tmp/ready" ] && break; sleep 0.05; done
  [ -s "$root/tmp/ready" ] || { cat "$root/tmp/target.log"; fail "the target did not start"; }
  port=$(cat "$root/tmp/ready")
  trid="trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$nqn"

  step "a host outside the root: identify and perf"
  "$host_nvtcp" identify -r "$trid" >"$root/tmp/identify.txt" || fail "identify against the packaged target"
  grep -q "$nqn" "$root/tmp/identify.txt" || fail "identify does not show $nqn"
  "$host_nvtcp" perf -r "$trid ns:1" -q 16 -o 4096 -w randread -t 1 --json >"$root/tmp/perf.json" ||
    fail "perf against the packaged target"
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); ios=r.get("ios", r.get("total_ios", 0)); \
    print("perf:", ios, "I/Os"); sys.exit(0 if ios > 0 and r.get("errors", 0) == 0 else 1)' "$root/tmp/perf.json" ||
    fail "perf did no I/O or saw errors"

  step "Debian's fio in the root, with the packaged engine"
  in_root apt-get install -y -qq --no-install-recommends fio >>"$root/tmp/apt.log" 2>&1 ||
    { tail -20 "$root/tmp/apt.log"; fail "apt-get install fio"; }
  # fio splits --filename at ':', so the NQN's colons are escaped.
  ftrid="trtype=tcp adrfam=IPv4 traddr=127.0.0.1 trsvcid=$port subnqn=${nqn//:/\\:} ns=1"
  in_root fio --name=pkg --ioengine=external:/usr/lib/nvtcp/libnvtcp_fio.so --thread=1 --filename="$ftrid" \
    --rw=randrw --bs=4k --iodepth=8 --size=16M --io_size=8M --output-format=terse >"$root/tmp/fio.txt" \
    2>"$root/tmp/fio.err" || { cat "$root/tmp/fio.err"; fail "fio with the packaged engine"; }
  echo "fio: $(cut -d';' -f6-8 "$root/tmp/fio.txt") (read KiB; KiB/s; IOPS)"

  step "the target stops on SIGTERM, as systemctl stop sends it"
  kill -TERM "$target_pid"
  rc=0
  wait "$target_pid" || rc=$?
  trap - EXIT
  [ "$rc" -eq 0 ] || { tail -5 "$root/tmp/target.log"; fail "the target exited $rc on SIGTERM"; }
  echo "PASS: package installed with apt in a fresh Debian 12 root and served from its unit's ExecStart"
  exit 0
fi

BUILD=$(cd "$1" && pwd)
[ "$(id -u)" -eq 0 ] || skip "needs root (chroot and mounts)"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (make deps installs it)"
command -v unshare >/dev/null || skip "unshare (util-linux) is missing"
host_nvtcp=$BUILD/nvtcp

step "cpack -G DEB"
(cd "$BUILD" && cpack -G DEB >cpack.log 2>&1) || { cat "$BUILD/cpack.log"; fail "cpack"; }
deb=$(ls -t "$BUILD"/nvtcp_*.deb | head -1)
echo "$deb"
dpkg-deb -I "$deb" | sed -n 's/^ Depends: /depends: /p'
contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in ./usr/bin/nvtcp ./usr/include/nvtcp/host.hpp ./etc/nvtcp/target.json ./usr/lib/nvtcp/libnvtcp_fio.so; do
  grep -qx "$f" <<<"$contents" || fail "the package lacks $f"
done

cache=${NVTCP_DEBOOTSTRAP_CACHE:-/var/tmp/nvtcp-debootstrap}
tarball=$cache/bookworm-minbase.tar
dir=$(mktemp -d /var/tmp/nvtcp-deb-test.XXXXXX)
trap 'rm -rf --one-file-system "$dir"' EXIT
root=$dir/root
mkdir -p "$root" "$cache"
if [ -s "$tarball" ]; then
  step "a fresh Debian 12 root from $tarball"
  tar -C "$root" -xf "$tarball"
else
  step "debootstrap --variant=minbase bookworm (cached in $tarball for the next run)"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$dir/debootstrap.log" 2>&1 ||
    { tail -5 "$dir/debootstrap.log"; skip "debootstrap failed (no network to deb.debian.org?)"; }
  tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
unshare --mount --propagation private bash "$0" --in-root "$root" "$deb" "$host_nvtcp"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Debian packages as an administrator meets them: `cpack -G DEB` builds nvtcp, libnvtcp0 and
# libnvtcp-dev (_<version>_<arch>.deb). apt installs nvtcp alone (dependencies from Debian) into a
# fresh Debian 12 root made by debootstrap, and the target starts there from the ExecStart line of
# the packaged nvtcp-target.service, reading the packaged /etc/nvtcp/target.json. A host outside
# the root identifies it and runs I/O, and Debian's fio inside the root loads the packaged fio
# engine against it. Then apt adds libnvtcp0 and libnvtcp-dev: the library is in the loader's
# cache and the development files are where find_package and pkg-config look.
#
#   deb_test.sh BUILD_DIR [DEBS_DIR]
#
# DEBS_DIR holds the packages made already (tests/package/cpack_debs.sh, as ctest does through
# the fixture nvtcp_debs); without it the script runs cpack itself.
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
  root=$2 debs=$3 host_nvtcp=$4
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount --make-rslave "$root/dev"
  in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }

  mkdir -p "$root/tmp/debs"
  cp "$debs"/*.deb "$root/tmp/debs/"
  in_root apt-get update -qq >/dev/null || fail "apt-get update in the root"
  installed() { in_root dpkg-query --showformat='${Status}' --show "$1" 2>/dev/null || true; }
  # The root's path to package $1's file (the glob is expanded here, outside the root).
  deb_in_root() { local f; f=$(ls "$root"/tmp/debs/"$1"_*.deb); echo "/tmp/debs/$(basename "$f")"; }

  step "apt installs nvtcp alone, with its dependencies"
  in_root apt-get install -y -qq --no-install-recommends "$(deb_in_root nvtcp)" >"$root/tmp/apt.log" 2>&1 ||
    { tail -20 "$root/tmp/apt.log"; fail "apt-get install of the nvtcp package"; }
  [ "$(installed nvtcp)" = "install ok installed" ] || fail "dpkg does not list nvtcp as installed"
  [ "$(installed libnvtcp0)" != "install ok installed" ] || fail "nvtcp pulled in libnvtcp0: the binary links it statically"
  in_root nvtcp --version || fail "the installed nvtcp does not run"
  # Outputs are captured before they are searched: `grep -q` in a pipe closes it early, and
  # under pipefail the writer's SIGPIPE would fail the check.
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

  step "apt adds libnvtcp0 and libnvtcp-dev"
  in_root apt-get install -y -qq --no-install-recommends "$(deb_in_root libnvtcp0)" "$(deb_in_root libnvtcp-dev)" \
    >>"$root/tmp/apt.log" 2>&1 || { tail -20 "$root/tmp/apt.log"; fail "apt-get install of the library packages"; }
  for p in libnvtcp0 libnvtcp-dev; do
    [ "$(installed $p)" = "install ok installed" ] || fail "dpkg does not list $p as installed"
  done
  cache=$(in_root ldconfig -p)
  grep -q 'libnvtcp.so.0 ' <<<"$cache" || fail "libnvtcp.so.0 is not in the loader cache"
  dev_files=$(in_root dpkg -L libnvtcp-dev)
  for f in include/nvtcp/host.hpp libnvtcp.so libnvtcp.a cmake/nvtcp/nvtcpConfig.cmake pkgconfig/nvtcp.pc; do
    grep -q "/$f\$" <<<"$dev_files" || fail "libnvtcp-dev lacks $f"
  done
  [ "$(in_root readlink -f /usr/lib/libnvtcp.so)" = "$(in_root readlink -f /usr/lib/libnvtcp.so.0)" ] ||
    fail "libnvtcp.so does not lead to the installed libnvtcp.so.0"
  # What libnvtcp-dev's users need to build against it came with it from Debian.
  for p in libfmt-dev liburing-dev libisal-dev libssl-dev; do
    [ "$(installed $p)" = "install ok installed" ] || fail "libnvtcp-dev did not bring $p"
  done
  echo "PASS: packages installed with apt in a fresh Debian 12 root and served from the unit's ExecStart"
  exit 0
fi

BUILD=$(cd "$1" && pwd)
[ "$(id -u)" -eq 0 ] || skip "needs root (chroot and mounts)"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (make deps installs it)"
command -v unshare >/dev/null || skip "unshare (util-linux) is missing"
host_nvtcp=$BUILD/nvtcp

if [ -n "${2:-}" ]; then
  debs=$(cd "$2" && pwd)
  own_debs=
  step "the packages in $debs"
else
  step "cpack -G DEB"
  debs=$(mktemp -d /var/tmp/nvtcp-debs.XXXXXX)
  own_debs=$debs
  trap 'rm -rf "$own_debs"' EXIT
  (cd "$BUILD" && cpack -G DEB -B "$debs" >cpack.log 2>&1) || { cat "$BUILD/cpack.log"; rm -rf "$debs"; fail "cpack"; }
fi
# Which package holds what: a file in the wrong one breaks an install that has only some of them.
expect_in() {
  local deb contents f
  deb=$(ls "$debs"/"$1"_*.deb 2>/dev/null | head -1)
  [ -n "$deb" ] || fail "cpack made no $1 package"
  echo "$(basename "$deb"): $(dpkg-deb -f "$deb" Depends)"
  contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
  shift
  for f in "$@"; do grep -qx "./$f" <<<"$contents" || fail "$(basename "$deb") lacks /$f"; done
}
expect_in nvtcp usr/bin/nvtcp etc/nvtcp/target.json usr/lib/nvtcp/libnvtcp_fio.so \
  usr/lib/systemd/system/nvtcp-target.service
expect_in libnvtcp0 usr/lib/libnvtcp.so.0
expect_in libnvtcp-dev usr/include/nvtcp/host.hpp usr/lib/libnvtcp.so usr/lib/libnvtcp.a usr/lib/pkgconfig/nvtcp.pc \
  usr/lib/cmake/nvtcp/nvtcpConfig.cmake

cache=${NVTCP_DEBOOTSTRAP_CACHE:-/var/tmp/nvtcp-debootstrap}
tarball=$cache/bookworm-minbase.tar
dir=$(mktemp -d /var/tmp/nvtcp-deb-test.XXXXXX)
trap 'rm -rf --one-file-system "$dir" $own_debs' EXIT
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
unshare --mount --propagation private bash "$0" --in-root "$root" "$debs" "$host_nvtcp"

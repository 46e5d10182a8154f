# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Shared by kernel_target_test.sh and kernel_host_test.sh (sourced, never run): fetch Debian's kernel
# and busybox, build the guest's initramfs, boot it under QEMU (software emulation) and talk to it.
#
#   kernel_prepare CACHE_DIR [SUITE]  sets KERNEL_IMAGE, KERNEL_BASE_CPIO, KERNEL_PKG, BUSYBOX; SUITE is
#                                 bookworm (Debian 12's 6.1 kernel, the default) or trixie (Debian 13's
#                                 kernel, with ublk_drv and ext4 among the modules)
#   kernel_overlay OUT GUEST_SCRIPT CONF_LINES...  the per-run initramfs (base + init + script)
#   kernel_boot NAME INITRD FWD...  starts QEMU; FWD is HOSTPORT:GUESTPORT; sets QEMU_PID, CONSOLE
#   kernel_wait_marker REGEX TIMEOUT  waits for a console line (fails early if QEMU exits)
#   kernel_stop                       waits for the guest's poweroff, kills QEMU after a grace period
#
# Everything comes from Debian's packages at run time, nothing is vendored:
#   linux-image-6.1.0-N-amd64  `apt-get download` + `dpkg -x` (not installed). The newest 6.1 ABI the
#                              archive offers (override: NVTCP_KERNEL_PKG=linux-image-6.1.0-N-amd64).
#                              Its modules are uncompressed .ko; the package has no modules.dep (depmod
#                              runs at install), so busybox's depmod writes one into the unpacked tree and
#                              the load order of each module is read from it.
#   busybox-static             `apt-get download` + `dpkg -x`: the guest's userland, and `cpio -o -H newc`
#                              packs the initramfs.
#   qemu-system-x86            installed by `make deps` (qemu-system-x86_64 -accel tcg: there is no KVM here).
#   nvme-cli + its libraries   `apt-get download` of nvme-cli's dependency closure (library packages
#                              only) + `dpkg -x`; the guest gets nvme, the .so files the packages' own
#                              loader resolves for it, and that loader (for `nvme discover`, `id-ctrl`).
#   ktls-utils, keyutils       trixie only, the same way: tlshd (the kernel's TLS handshake agent) and
#                              keyctl, for NVMe/TCP with TLS.
#
# The cache (vmlinuz 8 MB, base.cpio 13 MB with busybox, nvme-cli and the modules) lives in the build
# tree and is keyed by the kernel package; the 400 MB unpacked package is deleted once it is built.
# Preparing from scratch took 19-31 s here (download 80 MB, dpkg -x, busybox depmod, cpio), (QEMU itself comes from `make deps`); with a warm cache, nothing (no apt at all).
#
# Guest side: /init (guest/init) mounts proc/sys/dev/tmp, loads e1000, brings up eth0 as
# 10.0.2.15 behind QEMU's user-mode network (gateway 10.0.2.2 = the host's 127.0.0.1), sources
# /etc/nvtcp-test.conf and runs /guest/run.sh, then dumps dmesg to the console between
# "=== dmesg begin ===" and "=== dmesg end ===" and powers off. guest/lib.sh has load_mod (insmod in
# modules.dep order), say, pass/fail (the step markers) and kmsg.

KERNEL_TEST_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Modules the guests may load (module names as in modules.dep, '-' or '_'); each resolves to its
# dependencies first. crc32c_generic serves the digests (crc32c-intel needs SSE4.2, which QEMU's default
# CPU model lacks); e1000 is QEMU's default NIC.
KERNEL_MODULES=(e1000 crc32c_generic configfs nvme-core nvme-fabrics nvme-tcp nvmet nvmet-tcp null_blk brd loop)

# The trixie guest adds the ublk driver and ext4 (for the offload engine's block device test) and kTLS.
# tls is the kernel's TLS record layer (kTLS) that tlshd hands the sockets to after the handshake;
# its ciphers are modules the guest cannot load on demand (no modprobe there): AES-GCM (AES itself
# is built in) and ChaCha20-Poly1305.
KERNEL_MODULES_TRIXIE=("${KERNEL_MODULES[@]}" ublk_drv ext4 tls gcm ghash-generic chacha20poly1305 chacha_generic
                       poly1305_generic)

# Bump when what the cache holds changes (a cache of another format is rebuilt).
KERNEL_CACHE_FORMAT=4

# Debian 13 (trixie) packages come through a private apt configuration: a sources list, package
# lists and a download cache under CACHE/apt-trixie, passed with -o; /etc/apt is never touched.
trixie_apt_opts() {
  local dir=$1/apt-trixie
  mkdir -p "$dir/lists/partial" "$dir/archives/partial"
  [[ -s $dir/sources.list ]] || echo "deb http://deb.debian.org/debian trixie main" >"$dir/sources.list"
  TRIXIE_APT=(-o "Dir::Etc::SourceList=$dir/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
              -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache::Archives=$dir/archives"
              -o "Dir::Cache::pkgcache=$dir/pkgcache.bin" -o "Dir::Cache::srcpkgcache=$dir/srcpkgcache.bin")
}

# The kernel package linux-image-amd64 points at in trixie (linux-image-6.12.N+deb13-amd64).
pick_trixie_kernel_pkg() {
  trixie_apt_opts "$1"
  if [[ -z $(ls "$1/apt-trixie/lists/" 2>/dev/null | grep -v partial) ]]; then
    apt_quiet "$1/apt.log" "${TRIXIE_APT[@]}" update || return 1
  fi
  local pkg
  pkg=$(apt-cache "${TRIXIE_APT[@]}" depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
  [[ -n $pkg ]] || return 1
  echo "$pkg"
}

klog() { printf '%s\n' "$*"; }

# Verdicts of a kernel test script: fail counts and goes on, die ends the test.
FAILURES=0
fail() { FAILURES=$((FAILURES + 1)); printf 'FAIL: %s\n' "$*"; }
die() { printf 'FAIL: %s\n' "$*"; exit 1; }

# The nvtcp target a script started in the background (TARGET_PID): SIGINT, and SIGKILL if it
# has not exited 5 s later.
TARGET_PID=""
stop_target() {
  [[ -n $TARGET_PID ]] || return 0
  if kill -0 "$TARGET_PID" 2>/dev/null; then
    kill -INT "$TARGET_PID"
    for _ in $(seq 50); do kill -0 "$TARGET_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$TARGET_PID" 2>/dev/null || true
  fi
  wait "$TARGET_PID" 2>/dev/null || true
  TARGET_PID=""
}

# ktarget_ready: once a script has started the nvtcp target in the background (TARGET_PID,
# --ready-file $WORK/ready): 0 when it is ready; 1 when it exited instead (reaped, TARGET_PID
# cleared: the caller tries other ports); dies when it did neither within 10 s.
ktarget_ready() {
  for _ in $(seq 100); do
    [[ -s $WORK/ready ]] && return 0
    kill -0 "$TARGET_PID" 2>/dev/null || break
    sleep 0.1
  done
  [[ -s $WORK/ready ]] && return 0
  kill -0 "$TARGET_PID" 2>/dev/null && die "target did not become ready in 10 s (see $WORK/target.log)"
  wait "$TARGET_PID" || true
  TARGET_PID=""
  return 1
}

# EXIT trap of a script that runs a target beside its guest: stops both, and keeps WORK (the
# console and target logs) when the test failed or NVTCP_INTEROP_KEEP=1.
kernel_target_cleanup() {
  local rc=$?
  set +e
  kernel_stop 0
  stop_target
  if [[ ($rc -ne 0 && $rc -ne 77) || ${NVTCP_INTEROP_KEEP:-0} == 1 ]]; then
    echo "console and target logs kept in $WORK"
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
kskip() { printf 'SKIP: %s\n' "$*"; exit 77; }

# apt_quiet LOG ARGS...: apt-get with a lock timeout, non-interactive; output to LOG.
apt_quiet() {
  local log=$1; shift
  env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=300 "$@" >>"$log" 2>&1
}

# apt_retry LOG ARGS...: try once; on failure `apt-get update` and try again.
apt_retry() {
  local log=$1; shift
  apt_quiet "$log" "$@" && return 0
  klog "  apt-get $* failed; running apt-get update and trying again"
  apt_quiet "$log" update || true
  apt_quiet "$log" "$@"
}

ensure_qemu() {
  command -v qemu-system-x86_64 >/dev/null && return 0
  die "qemu-system-x86_64 is missing: \`make deps\` installs it (package qemu-system-x86)"
}

# The newest linux-image-6.1.0-N-amd64 (signed image package) in the archive.
pick_kernel_pkg() {
  if [[ -n ${NVTCP_KERNEL_PKG:-} ]]; then echo "$NVTCP_KERNEL_PKG"; return 0; fi
  local pkgs
  pkgs=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' 2>/dev/null | awk '{ print $1 }')
  if [[ -z $pkgs ]]; then
    apt_quiet "$1/apt.log" update || true
    pkgs=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' 2>/dev/null | awk '{ print $1 }')
  fi
  [[ -n $pkgs ]] || return 1
  sort -V <<<"$pkgs" | tail -1
}

# kernel_prepare CACHE: fills CACHE (once per kernel package) and sets KERNEL_IMAGE, KERNEL_BASE_CPIO.
kernel_prepare() {
  local cache=$1 suite=${2:-bookworm}
  mkdir -p "$cache"
  cache=$(cd "$cache" && pwd)
  [[ $(id -u) -eq 0 ]] || kskip "needs root (apt-get download/install of Debian's kernel, busybox and QEMU)"
  command -v apt-get >/dev/null || kskip "no apt-get: cannot fetch Debian's kernel and busybox"
  ensure_qemu "$cache"
  # One preparer at a time (both tests share the cache).
  exec 9>"$cache/.lock"
  command -v flock >/dev/null && flock 9

  local pkg current=$cache/current
  local -a apt=() modules=("${KERNEL_MODULES[@]}")
  if [[ $suite == trixie ]]; then
    current=$cache/current-trixie
    trixie_apt_opts "$cache"
    apt=("${TRIXIE_APT[@]}")
    modules=("${KERNEL_MODULES_TRIXIE[@]}")
  fi
  if [[ -s $current && ( $suite == trixie || -z ${NVTCP_KERNEL_PKG:-} ) ]]; then
    pkg=$(cat "$current")   # keep using the cached kernel: no archive lookup when warm
  elif [[ $suite == trixie ]]; then
    pkg=$(pick_trixie_kernel_pkg "$cache") || kskip "no trixie linux-image-amd64 through the private apt configuration"
  else
    pkg=$(pick_kernel_pkg "$cache") || kskip "apt-cache finds no linux-image-6.1.0-*-amd64 package (apt-get update failed?)"
  fi
  local dir=$cache/$pkg
  if [[ ! -f $dir/stamp || $(awk '{ print $3 }' "$dir/stamp") != "$KERNEL_CACHE_FORMAT" ]]; then
    klog "preparing $pkg + busybox-static in $dir (once; about 30 s)"
    local t0=$SECONDS
    rm -rf "$dir"; mkdir -p "$dir/debs"
    ( cd "$dir/debs" && apt_retry "$cache/apt.log" "${apt[@]}" download "$pkg" ) \
      || { tail -5 "$cache/apt.log"; kskip "apt-get download $pkg failed (no archive access?)"; }
    ( cd "$dir/debs" && apt_retry "$cache/apt.log" download busybox-static ) \
      || { tail -5 "$cache/apt.log"; kskip "apt-get download busybox-static failed (no archive access?)"; }
    # nvme-cli (and in trixie tlshd and keyctl, for TLS) and the libraries they need (their dependency
    # closure, libraries only).
    local clipkgs
    local -a tools=(nvme-cli) programs=(usr/sbin/nvme)
    [[ $suite == trixie ]] && { tools+=(ktls-utils keyutils); programs+=(usr/sbin/tlshd usr/bin/keyctl); }
    clipkgs=$(apt-cache "${apt[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
                --no-replaces --no-enhances "${tools[@]}" 2>/dev/null \
              | grep -E '^(nvme-cli|ktls-utils|keyutils|zlib1g|lib[a-z0-9.+-]+)$' | grep -v perl | sort -u) || true
    [[ $clipkgs == *nvme-cli* ]] || kskip "apt-cache knows no nvme-cli"
    mkdir -p "$dir/debs/cli"
    # shellcheck disable=SC2086
    ( cd "$dir/debs/cli" && apt_retry "$cache/apt.log" "${apt[@]}" download $clipkgs ) \
      || { tail -5 "$cache/apt.log"; kskip "apt-get download nvme-cli and its libraries failed"; }
    local root=$dir/unpacked
    mkdir -p "$root"
    dpkg -x "$dir"/debs/linux-image-*.deb "$root" || kfail_prepare "dpkg -x of $pkg failed"
    dpkg -x "$dir"/debs/busybox-static_*.deb "$root/bb" || kfail_prepare "dpkg -x of busybox-static failed"
    local bb=$root/bb/bin/busybox
    [[ -x $bb ]] || kfail_prepare "busybox-static has no bin/busybox"
    # trixie's package has its files under usr/ (lib is a symlink on an installed system).
    [[ -d $root/lib/modules || ! -d $root/usr/lib/modules ]] || ln -s usr/lib "$root/lib"
    local kver; kver=$(ls "$root/lib/modules/")
    [[ -n $kver && -d $root/lib/modules/$kver/kernel ]] || kfail_prepare "no lib/modules/VERSION/kernel in $pkg"
    local moddir=$root/lib/modules/$kver
    # Compressed modules (.ko.xz, trixie) are unpacked first: busybox's depmod and insmod take
    # plain .ko files.
    if [[ -n $(find "$moddir/kernel" -name '*.ko.xz' -print -quit) ]]; then
      command -v xz >/dev/null || kfail_prepare "the modules are xz-compressed and there is no xz here"
      find "$moddir/kernel" -name '*.ko.xz' -print0 | xargs -0 -P 2 -n 64 xz -d || kfail_prepare "xz -d of the modules failed"
    fi
    if [[ ! -s $moddir/modules.dep ]]; then
      "$bb" depmod -b "$root" "$kver" || kfail_prepare "busybox depmod failed"
    fi
    [[ -s $moddir/modules.dep ]] || kfail_prepare "no modules.dep after depmod"

    # Stage the initramfs: busybox, the modules, and load.dep ("name: path..." in load order).
    local stage=$dir/stage
    mkdir -p "$stage/bin" "$stage/lib/modules" "$stage/etc"
    cp "$bb" "$stage/bin/busybox"
    ln -s busybox "$stage/bin/sh"
    local -a saved_modules=("${KERNEL_MODULES[@]}")
    KERNEL_MODULES=("${modules[@]}")
    resolve_modules "$moddir" "$stage/lib/modules" || kfail_prepare "module resolution failed"
    KERNEL_MODULES=("${saved_modules[@]}")
    stage_debian_programs "$dir/debs/cli" "$root/cli" "$stage" "${programs[@]}" \
      || kfail_prepare "staging ${programs[*]} failed"
    echo "$kver" >"$stage/etc/kernel-version"
    cp "$root/boot/vmlinuz-$kver" "$dir/vmlinuz" 2>/dev/null || cp "$root/usr/lib/linux-image-$kver/vmlinuz" "$dir/vmlinuz" 2>/dev/null \
      || kfail_prepare "no vmlinuz in $pkg"
    cp "$bb" "$dir/busybox"
    ( cd "$stage" && find . | "$bb" cpio -o -H newc >"$dir/base.cpio" 2>/dev/null ) || kfail_prepare "cpio failed"
    rm -rf "$root" "$stage" "$dir/debs"
    echo "$pkg $kver $KERNEL_CACHE_FORMAT" >"$dir/stamp"
    klog "prepared $pkg ($kver) in $((SECONDS - t0)) s: vmlinuz $(stat -c %s "$dir/vmlinuz") B, base.cpio $(stat -c %s "$dir/base.cpio") B"
  fi
  echo "$pkg" >"$current"
  flock -u 9 2>/dev/null || true
  exec 9>&-
  KERNEL_PKG=$pkg
  KERNEL_VERSION=$(awk '{ print $2 }' "$dir/stamp")
  KERNEL_IMAGE=$dir/vmlinuz
  KERNEL_BASE_CPIO=$dir/base.cpio
  BUSYBOX=$dir/busybox
}

# stage_debian_programs DEBDIR ROOT STAGE PROGRAM...: unpack the packages in DEBDIR into ROOT and put
# each PROGRAM (a path in the packages, e.g. usr/sbin/nvme) plus exactly the shared objects that the
# packages' own loader resolves for it into STAGE/usr/lib/guest-userland, with a wrapper at the
# PROGRAM's path in STAGE that runs it through that loader (the guest has no ld.so.cache).
stage_debian_programs() {
  local debs=$1 root=$2 stage=$3 f line lib prog name
  shift 3
  local dir=/usr/lib/guest-userland
  mkdir -p "$root" "$stage$dir"
  for f in "$debs"/*.deb; do dpkg -x "$f" "$root" || return 1; done
  local ld=$root/lib64/ld-linux-x86-64.so.2 libpath=$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu
  [[ -e $ld ]] || ld=$root/usr/lib64/ld-linux-x86-64.so.2  # merged /usr (trixie)
  [[ -e $ld ]] || { echo "no loader in the packages"; return 1; }
  cp -L "$ld" "$stage$dir/ld-linux-x86-64.so.2"
  for prog in "$@"; do
    name=${prog##*/}
    [[ -x $root/$prog ]] || { echo "no $prog in the packages"; return 1; }
    cp -L "$root/$prog" "$stage$dir/$name"
    "$ld" --library-path "$libpath" --list "$root/$prog" >"$root/ldd.txt" || { cat "$root/ldd.txt"; return 1; }
    if grep -q 'not found' "$root/ldd.txt"; then grep 'not found' "$root/ldd.txt"; return 1; fi
    while read -r line; do
      [[ $line == *" => "* ]] || continue
      lib=${line#* => }; lib=${lib% (*}
      [[ $lib == */ld-linux-x86-64.so.2 ]] && continue
      cp -L "$lib" "$stage$dir/${line%% =>*}"
    done <"$root/ldd.txt"
    mkdir -p "$stage/${prog%/*}"
    printf '#!/bin/sh\nexec %s/ld-linux-x86-64.so.2 --library-path %s %s/%s "$@"\n' "$dir" "$dir" "$dir" "$name" \
      >"$stage/$prog"
    chmod 0755 "$stage/$prog"
  done
}

kfail_prepare() { printf 'FAIL: preparing the kernel: %s\n' "$*"; exit 1; }

# stage_host_binaries OUT_CPIO BINARY...: a newc archive with each of this machine's BINARYs, the
# shared objects its loader resolves for it and that loader under /opt/host, plus a wrapper
# /usr/bin/NAME that runs it through the loader (the guest has no ld.so.cache). The guest's kernel
# may be newer than this machine's; its userland is then this machine's own.
stage_host_binaries() {
  local out=$1; shift
  local stage; stage=$(mktemp -d "${out%/*}/hostbin.XXXXXX")
  mkdir -p "$stage/opt/host/bin" "$stage/opt/host/lib" "$stage/usr/bin"
  local bin name line lib ld=""
  for bin in "$@"; do
    name=${bin##*/}
    cp -L "$bin" "$stage/opt/host/bin/$name" || return 1
    while read -r line; do
      case $line in
        *" => "/*) lib=${line#* => }; lib=${lib% (*}; cp -Ln "$lib" "$stage/opt/host/lib/${line%% =>*}" ;;
        /*) ld=${line%% (*}; cp -Ln "$ld" "$stage/opt/host/lib/${ld##*/}" ;;
        *"not found"*) echo "$bin: $line"; return 1 ;;
      esac
    done < <(ldd "$bin" 2>/dev/null)
    printf '#!/bin/sh\nexec /opt/host/lib/%s --library-path /opt/host/lib /opt/host/bin/%s "$@"\n' "${ld##*/}" "$name" \
      >"$stage/usr/bin/$name"
    chmod 0755 "$stage/usr/bin/$name"
  done
  ( cd "$stage" && find . | "$BUSYBOX" cpio -o -H newc >"$out" 2>/dev/null ) || return 1
  rm -rf "$stage"
}

# resolve_modules MODDIR OUTDIR: copies KERNEL_MODULES and their dependencies (from MODDIR/modules.dep)
# to OUTDIR/<path> and writes OUTDIR/load.dep with one line per module: "name: dep... module" in load
# order (dependencies first). A module built into the kernel (modules.builtin) gets an empty list.
resolve_modules() {
  local moddir=$1 out=$2 line path deps name
  declare -A DEP=() PATHOF=()
  while IFS= read -r line; do
    path=${line%%:*}; deps=${line#*:}
    path=${path#/lib/modules/*/}
    name=${path##*/}; name=${name%.ko*}; name=${name//-/_}
    PATHOF[$name]=$path
    DEP[$name]=$deps
  done <"$moddir/modules.dep"
  declare -A BUILTIN=()
  if [[ -f $moddir/modules.builtin ]]; then
    while IFS= read -r path; do name=${path##*/}; name=${name%.ko*}; BUILTIN[${name//-/_}]=1; done <"$moddir/modules.builtin"
  fi
  local -a ORDER
  declare -A SEEN
  visit() {  # depth-first: every dependency's own dependencies first
    local n=$1 d dn
    [[ -n ${SEEN[$n]:-} ]] && return 0
    SEEN[$n]=1
    for d in ${DEP[$n]}; do
      d=${d#/lib/modules/*/}; dn=${d##*/}; dn=${dn%.ko*}; dn=${dn//-/_}
      visit "$dn" || return 1
    done
    ORDER+=("${PATHOF[$n]}")
  }
  : >"$out/load.dep"
  local m n p
  for m in "${KERNEL_MODULES[@]}"; do
    n=${m//-/_}
    if [[ -z ${PATHOF[$n]:-} ]]; then
      [[ -n ${BUILTIN[$n]:-} ]] || { echo "module $m is neither in modules.dep nor built in"; return 1; }
      echo "$n:" >>"$out/load.dep"
      continue
    fi
    ORDER=(); SEEN=()
    visit "$n" || return 1
    echo "$n: ${ORDER[*]}" >>"$out/load.dep"
    for p in "${ORDER[@]}"; do
      [[ $p == *.ko ]] || { echo "module $p is compressed; this script expects uncompressed .ko"; return 1; }
      mkdir -p "$out/$(dirname "$p")"
      cp "$moddir/$p" "$out/$p"
    done
  done
}

# kernel_overlay OUT GUEST_SCRIPT [CONF_LINE...]: OUT = base.cpio + a second newc archive holding
# /init, /guest/lib.sh, /guest/run.sh (GUEST_SCRIPT) and /etc/nvtcp-test.conf (CONF_LINEs). The kernel
# unpacks concatenated archives in order.
kernel_overlay() {
  local out=$1 script=$2; shift 2
  local stage; stage=$(mktemp -d "${out%/*}/overlay.XXXXXX")
  mkdir -p "$stage/guest" "$stage/etc"
  install -m 0755 "$KERNEL_TEST_DIR/guest/init" "$stage/init"
  install -m 0644 "$KERNEL_TEST_DIR/guest/lib.sh" "$stage/guest/lib.sh"
  install -m 0755 "$script" "$stage/guest/run.sh"
  printf '%s\n' "$@" >"$stage/etc/nvtcp-test.conf"
  ( cd "$stage" && find . | "$BUSYBOX" cpio -o -H newc >"$stage.cpio" 2>/dev/null )
  cat "$KERNEL_BASE_CPIO" "$stage.cpio" >"$out"
  rm -rf "$stage" "$stage.cpio"
}

kport_in_use() {
  if command -v ss >/dev/null; then
    [[ -n $(ss -Htan "( sport = :$1 or dport = :$1 )") ]]
  else
    local hexport; hexport=$(printf ':%04X' "$1")
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v p="$hexport" \
      'NR > 1 && (substr($2, length($2) - 4) == p || substr($3, length($3) - 4) == p) { f = 1 } END { exit !f }'
  fi
}
# kfree_port [EXCLUDED...]: a free TCP port in 20000-40000.
kfree_port() {
  local p
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 20001))
    [[ $# -gt 0 && " $* " == *" $p "* ]] && continue
    kport_in_use "$p" || { echo "$p"; return 0; }
  done
  echo "no free port in 20000-40000" >&2
  return 1
}

# kernel_test_args NAME NEEDS NVTCP [UNIT_TESTS] CACHE_DIR: a test's arguments, checked. Sets NVTCP,
# UNIT (given three) and CACHE (NVTCP_KERNEL_CACHE overrides the last: one cache for build/ and
# build-asan/, say). NEEDS is what apt-get fetches for it: without root, SKIP and exit 77.
kernel_test_args() {
  local name=$1 needs=$2
  shift 2
  if [[ $# -ne 2 && $# -ne 3 ]]; then
    echo "usage: $(basename "$0") path/to/nvtcp [path/to/nvtcp_unit_tests] CACHE_DIR" >&2
    exit 2
  fi
  NVTCP=$(readlink -f "$1")
  [[ -x $NVTCP ]] || { echo "FAIL: $NVTCP is not an executable" >&2; exit 1; }
  if [[ $# -eq 3 ]]; then
    UNIT=$(readlink -f "$2")
    [[ -x $UNIT ]] || { echo "FAIL: $UNIT is not an executable" >&2; exit 1; }
  fi
  CACHE=${NVTCP_KERNEL_CACHE:-${!#}}
  if [[ $(id -u) -ne 0 ]]; then
    echo "SKIP: $name needs root (apt-get of $needs)"
    exit 77
  fi
}

QEMU_PID=""
CONSOLE=""
# kernel_boot NAME INITRD [HOSTPORT:GUESTPORT...]: boots the guest with its console in
# $WORK/NAME.console.log. QEMU forwards 127.0.0.1:HOSTPORT to the guest's GUESTPORT; the guest reaches
# the host's 127.0.0.1 as 10.0.2.2. Sets QEMU_PID, CONSOLE and BOOT_T0.
kernel_boot() {
  local name=$1 initrd=$2; shift 2
  local net="user,id=n0,net=10.0.2.0/24" f
  for f in "$@"; do net+=",hostfwd=tcp:127.0.0.1:${f%%:*}-:${f#*:}"; done
  CONSOLE=$WORK/$name.console.log
  : >"$CONSOLE"
  # -smp 1: one TCG thread, so the nvtcp side keeps the other core. panic=-1 + -no-reboot: a guest
  # panic ends QEMU at once. quiet: the boot log over the emulated UART costs seconds.
  qemu-system-x86_64 -accel tcg -m "${KERNEL_MEMORY:-512M}" -smp 1 -nodefaults -no-user-config -display none -no-reboot \
    -kernel "$KERNEL_IMAGE" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 quiet loglevel=4" \
    -serial "file:$CONSOLE" -netdev "$net" -device e1000,netdev=n0 \
    >"$WORK/$name.qemu.log" 2>&1 &
  QEMU_PID=$!
}

# kernel_wait_marker REGEX TIMEOUT: 0 once a console line matches REGEX; 1 on timeout or QEMU exit.
kernel_wait_marker() {
  local re=$1 deadline=$((SECONDS + $2))
  while :; do
    grep -qaE -- "$re" "$CONSOLE" 2>/dev/null && return 0
    if ! kill -0 "$QEMU_PID" 2>/dev/null; then
      grep -qaE -- "$re" "$CONSOLE" 2>/dev/null && return 0
      return 1
    fi
    [[ $SECONDS -lt $deadline ]] || return 1
    sleep 0.2
  done
}

# kernel_boot_nvmet NAME INITRD MARKER TIMEOUT [EXCLUDED_PORT...]: boots a guest that serves nvmet
# on its port 4420 and takes a word on its control port 7000, forwarded from NPORT and CTL_PORT
# (free ports, not among EXCLUDED_PORT); picks others when QEMU cannot bind them (3 tries). Waits up
# to TIMEOUT s for a console line matching MARKER; sets NPORT, CTL_PORT and T0 (when it booted).
kernel_boot_nvmet() {
  local name=$1 initrd=$2 marker=$3 timeout=$4 attempt
  shift 4
  for attempt in 1 2 3; do
    NPORT=$(kfree_port "$@")
    CTL_PORT=$(kfree_port "$@" "$NPORT")
    kernel_boot "$name" "$initrd" "$NPORT:4420" "$CTL_PORT:7000"
    T0=$SECONDS
    kernel_wait_marker "$marker" "$timeout" && return 0
    if ! kill -0 "$QEMU_PID" 2>/dev/null && kernel_forward_busy "$name"; then
      echo "QEMU could not forward port $NPORT/$CTL_PORT (attempt $attempt); trying others"
      wait "$QEMU_PID" || true; QEMU_PID=""
      continue
    fi
    return 1
  done
  return 1
}

# kernel_stop [GRACE]: waits up to GRACE s (default 60) for QEMU to exit (the guest powers off), then
# kills it.
kernel_stop() {
  local grace=${1:-60}
  [[ -n $QEMU_PID ]] || return 0
  for _ in $(seq $((grace * 5))); do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$QEMU_PID" 2>/dev/null; then
    klog "QEMU still running after ${grace} s: killing it"
    kill -TERM "$QEMU_PID" 2>/dev/null
    sleep 1
    kill -KILL "$QEMU_PID" 2>/dev/null
  fi
  wait "$QEMU_PID" 2>/dev/null || true
  QEMU_PID=""
}

# kernel_dmesg: the guest's dmesg dump from the console (empty if the guest did not get that far).
# kernel_boot_with_dd_fio NAME GUEST_SCRIPT CONF_LINE...: boots the guest (kernel_boot NAME) with
# GUEST_SCRIPT and its configuration (kernel_overlay), and this machine's GNU dd (busybox dd has
# no iflag/oflag=direct) and fio with their loader and libraries. 1 GiB of guest memory: fio's
# libraries (its Ceph and Gluster engines among them) unpack into it.
kernel_boot_with_dd_fio() {
  local name=$1 script=$2
  shift 2
  kernel_overlay "$WORK/initrd.cpio" "$script" "$@"
  stage_host_binaries "$WORK/hostbin.cpio" "$(command -v dd)" "$(command -v fio)" || die "could not stage dd and fio for the guest"
  cat "$WORK/hostbin.cpio" >>"$WORK/initrd.cpio"
  KERNEL_MEMORY=1024M kernel_boot "$name" "$WORK/initrd.cpio"
}

# kernel_serve_requests HANDLER: carries out the guest's "NVTCP-GUEST [..] REQUEST SEQ ACTION ARGS..."
# console lines in order, each with HANDLER ACTION ARGS..., until the guest asks "done" or its
# script ends. The guest never waits for an answer: what it checks is the kernel's own view.
kernel_serve_requests() {
  local handler=$1 seq=0 line
  local -a req
  while :; do
    seq=$((seq + 1))
    kernel_wait_marker "NVTCP-GUEST .* (REQUEST $seq |RUN-EXIT)" 300 || die "the guest stopped asking (request $seq) in time"
    line=$(grep -a -m1 "NVTCP-GUEST .* REQUEST $seq " "$CONSOLE" | tr -d '\r') || return 0
    read -r -a req <<<"${line#* REQUEST $seq }"
    echo "guest request $seq: ${req[*]}"
    [[ ${req[0]} == done ]] && return 0
    "$handler" "${req[@]}"
  done
}

# kernel_check_steps STEP...: each named guest step printed PASS in $WORK/console.txt (one that
# printed FAIL, or nothing, fails the test with the guest's line), and no other step printed FAIL.
kernel_check_steps() {
  local s verdict step
  local -A status=()
  while read -r verdict step; do status[$step]=$verdict; done \
    < <(sed -nE 's/^NVTCP-GUEST \[[0-9.]+\] (PASS|FAIL) ([a-z0-9.-]+).*/\1 \2/p' "$WORK/console.txt")
  for s in "$@"; do
    case ${status[$s]:-missing} in
      PASS) ;;
      FAIL) fail "guest step $s: $(grep -a "FAIL $s" "$WORK/console.txt" | head -1 | sed 's/^NVTCP-GUEST \[[0-9.]*\] //')" ;;
      *) fail "guest step $s did not run" ;;
    esac
  done
  for s in "${!status[@]}"; do
    if [[ ${status[$s]} == FAIL && " $* " != *" $s "* ]]; then fail "guest step $s: FAIL"; fi
  done
  return 0
}
kernel_dmesg() {
  sed -n '/^=== dmesg begin ===/,/^=== dmesg end ===/p' "$CONSOLE" | tr -d '\r'
}

# kernel_forward_busy: true if QEMU could not bind a forwarded port (then pick others and retry).
kernel_forward_busy() {
  grep -qaiE 'could not set up host forwarding|address already in use' "$WORK/$1.qemu.log" 2>/dev/null
}

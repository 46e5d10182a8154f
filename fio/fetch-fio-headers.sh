#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fetches the source of Debian's fio package (the same version as the installed fio) and runs
# its ./configure, so the nvtcp ioengine can be compiled against fio's own headers and the
# config-host.h they need. fio itself is not built and its sources never enter the repo.
#
#   fetch-fio-headers.sh CACHE_DIR     ->  prints CACHE_DIR/fio-src on success
#
# The tree is cached in CACHE_DIR: a second run with the same fio version does nothing.
# The deb-src entry is temporary and private to this script: apt reads it (and writes its
# index) under a scratch directory given with -o Dir::Etc::SourceList / Dir::State::Lists,
# so /etc/apt and /var/lib/apt/lists are never touched and nothing is left behind.
# Installs fio (and dpkg-dev, for dpkg-source) when they are missing and we are root.
set -euo pipefail

die() { echo "fetch-fio-headers: $*" >&2; exit 1; }
note() { echo "fetch-fio-headers: $*" >&2; }

[ $# -eq 1 ] || die "usage: $0 CACHE_DIR"
cache=$1
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
tree=$cache/fio-src

is_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }
root=0; [ "$(id -u)" -eq 0 ] && root=1
export DEBIAN_FRONTEND=noninteractive

if ! is_installed fio; then
  [ $root -eq 1 ] || die "fio is not installed and we are not root (apt-get install fio)"
  note "installing fio (apt-get install fio)"
  apt-get install -y -qq --no-install-recommends fio >&2 ||
    { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends fio >&2; } ||
    die "apt-get install fio failed"
fi
want=$(dpkg-query -W -f='${Version}' fio)

if [ -f "$tree/config-host.h" ] && [ "$(cat "$tree/.nvtcp-fio-version" 2>/dev/null)" = "$want" ]; then
  echo "$tree"
  exit 0
fi

command -v cc >/dev/null || die "no C compiler (cc) for fio's ./configure"
if ! command -v dpkg-source >/dev/null; then
  [ $root -eq 1 ] || die "dpkg-source (dpkg-dev) is missing and we are not root"
  note "installing dpkg-dev (for dpkg-source)"
  apt-get install -y -qq --no-install-recommends dpkg-dev >&2 || die "apt-get install dpkg-dev failed"
fi

codename=bookworm
if [ -r /etc/os-release ]; then
  c=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$c" ] && codename=$c
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || die "$keyring is missing (debian-archive-keyring)"

work=$(mktemp -d "$cache/fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/src"
cat >"$work/sources.list" <<SRC
deb-src [signed-by=$keyring] http://deb.debian.org/debian $codename main
deb-src [signed-by=$keyring] http://deb.debian.org/debian $codename-updates main
deb-src [signed-by=$keyring] http://deb.debian.org/debian-security $codename-security main
SRC
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=$work/none"
          -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
          -o "APT::Get::List-Cleanup=0" -o "Acquire::Retries=1" -o "Acquire::http::Timeout=30"
          -o "Debug::NoLocking=1")
[ $root -eq 1 ] && apt_opts+=(-o "APT::Sandbox::User=root")

note "fetching Debian's fio $want source package ($codename)"
apt-get "${apt_opts[@]}" update -qq --error-on=any >&2 ||
  die "could not download the deb-src index from deb.debian.org (no network?)"
(cd "$work/src" && apt-get "${apt_opts[@]}" source -qq --only-source "fio=$want" >&2) ||
  die "apt-get source fio=$want failed"
src=$(find "$work/src" -mindepth 1 -maxdepth 1 -type d -name 'fio-*' | head -1)
[ -n "$src" ] && [ -f "$src/ioengines.h" ] || die "apt-get source left no fio tree"

note "running fio's ./configure --disable-native"
(cd "$src" && ./configure --disable-native >"$work/configure.log" 2>&1) ||
  { tail -20 "$work/configure.log" >&2; die "fio's ./configure failed"; }
[ -f "$src/config-host.h" ] || die "fio's ./configure wrote no config-host.h"
echo "$want" >"$src/.nvtcp-fio-version"

rm -rf "$tree"
mv "$src" "$tree"
echo "$tree"

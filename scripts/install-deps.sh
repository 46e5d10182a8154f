#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make deps`: installs the Debian 12 packages nvtcp builds, tests and packages with, and
# fetches the headers of the installed fio for the fio engine (into .deps/fio-src). This is the
# only step that installs or downloads anything; configuring and building never do.
# Idempotent: apt-get runs only when something is missing, and the fio headers are fetched
# again only when the installed fio changes, so a warm machine pays nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(build-essential cmake pkg-config liburing-dev libisal-dev libssl-dev libcli11-dev libfmt-dev
      nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev
      python3 python3-matplotlib procps util-linux fio dpkg-dev debootstrap
      tshark qemu-system-x86
      file       # CPack's Debian generator runs file(1) on what it packages (make package)
      lintian    # package.lintian: the Debian packages pass Debian's checks
      help2man   # the manual pages, made from nvtcp's --help
      iproute2   # ip netns, veth and ss: the multi-host and veth tests, bench/run --topology veth
      xz-utils   # the kernel interop tests unpack Debian's xz-compressed kernel modules
      universal-ctags  # layering.code_size reads class and function sizes from src/ with it
      curl python3-prometheus-client  # cli.metrics scrapes the target and parses it as Prometheus does
      librbd-dev                       # the RBD backend (librbd, librados)
      ceph-mon ceph-osd ceph-common)   # ceph.*: a one-node cluster the tests start (tests/ceph/cluster.sh)
missing=()
for p in "${PKGS[@]}" "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  # tshark asks whether to make dumpcap setuid; the tests capture as root and need no such thing.
  echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections 2>/dev/null || true
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Without network the engine is skipped (configure says so) and everything else builds.
if ! bash fio/fetch-fio-headers.sh .deps >/dev/null; then
  echo "install-deps: fio's headers could not be fetched; the fio engine will be skipped" >&2
fi

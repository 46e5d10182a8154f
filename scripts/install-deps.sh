#!/usr/bin/env bash
# Installs the Debian 12 packages nvtcp builds and tests with. Idempotent: apt-get runs
# only when something is missing, so a warm machine pays nothing.
set -euo pipefail
PKGS=(build-essential cmake pkg-config liburing-dev libisal-dev libcli11-dev libfmt-dev
      nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev
      python3 python3-matplotlib procps util-linux fio dpkg-dev)
missing=()
for p in "${PKGS[@]}" "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

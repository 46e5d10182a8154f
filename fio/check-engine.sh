#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build-time check that the installed fio loads the engine: the same FIO_IOOPS_VERSION and
# every fio symbol the engine uses present (it is linked with -z now).
#   check-engine.sh ENGINE.so IOOPS_VERSION
set -uo pipefail
lib=$1 want=$2
if ! command -v fio >/dev/null; then
  echo "nvtcp fio engine: fio is not installed, cannot check that it loads $lib" >&2
  exit 0
fi
# An engine built with -fsanitize=address needs the ASan runtime loaded first.
preload=$(ldd "$lib" 2>/dev/null | awk '/lib(asan|ubsan)\.so/ {print $3}' | paste -sd: -)
out=$(LD_PRELOAD=$preload ASAN_OPTIONS=detect_leaks=0 fio --enghelp="$lib" 2>&1)
rc=$?
if [ $rc -ne 0 ] || grep -q "bad ioops version" <<<"$out"; then
  echo "nvtcp fio engine: $(fio --version) does not load $lib (built for FIO_IOOPS_VERSION $want):" >&2
  echo "$out" >&2
  echo "Re-run cmake so fio's headers are fetched again for the installed fio." >&2
  exit 1
fi
exit 0

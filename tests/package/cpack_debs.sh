#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `cpack -G DEB` once for the tests that look into the Debian packages: package.deb and
# package.lintian take the three .deb files from OUT_DIR (the CTest fixture nvtcp_debs) instead
# of each packing the same build again, which took half a minute of CPU each time.
#
#   cpack_debs.sh BUILD_DIR OUT_DIR      (OUT_DIR is emptied first)
set -euo pipefail
BUILD=$(cd "${1:?usage: cpack_debs.sh BUILD_DIR OUT_DIR}" && pwd)
out=${2:?usage: cpack_debs.sh BUILD_DIR OUT_DIR}
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v cpack >/dev/null || fail "no cpack"
rm -rf "$out"
mkdir -p "$out"
(cd "$BUILD" && cpack -G DEB -B "$out/cpack" >"$out/cpack.log" 2>&1) || { cat "$out/cpack.log"; fail "cpack"; }
# The packages only: cpack's staging tree (_CPack_Packages) is as large as the install.
mv "$out"/cpack/*.deb "$out"/
rm -rf "$out/cpack"
ls "$out"/*.deb

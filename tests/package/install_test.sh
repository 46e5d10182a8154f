#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A user's view of an installed nvtcp: `cmake --install` into a fresh prefix, then
#  - the installed tree holds the public headers only, and libnvtcp.so.0 exports only the
#    public API (the names declared in include/nvtcp);
#  - examples/write_read builds against it with find_package(nvtcp) (shared and static) and
#    with pkg-config, and each build writes and reads back through the installed nvtcp target;
#  - a parent project that add_subdirectory()s the source tree builds and runs the example too.
#
#   install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$(cd "$1" && pwd)
BUILD=$(cd "$2" && pwd)
dir=$(mktemp -d /tmp/nvtcp-install-test.XXXXXX)
target_pid=
cleanup() {
  [ -n "$target_pid" ] && kill "$target_pid" 2>/dev/null && wait "$target_pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

prefix=$dir/prefix
step "cmake --install into $prefix"
cmake --install "$BUILD" --prefix "$prefix" >"$dir/install.log" || { cat "$dir/install.log"; fail "install failed"; }
libdir=$(dirname "$(find "$prefix" -name 'libnvtcp.so.0' | head -1)")
[ -n "$libdir" ] || fail "no libnvtcp.so.0 installed"
for f in "$prefix/bin/nvtcp" "$libdir/libnvtcp.a" "$libdir/libnvtcp.so" "$libdir/cmake/nvtcp/nvtcpConfig.cmake" \
         "$libdir/pkgconfig/nvtcp.pc" "$prefix/include/nvtcp/host.hpp" "$prefix/etc/nvtcp/target.json" \
         "$prefix/lib/systemd/system/nvtcp-target.service" "$prefix/share/nvtcp/nvtcp_bench_report.py"; do
  [ -e "$f" ] || fail "not installed: $f"
done
grep -qx "ExecStart=$prefix/bin/nvtcp target --config $prefix/etc/nvtcp/target.json" \
  "$prefix/lib/systemd/system/nvtcp-target.service" || fail "the unit does not run the nvtcp installed with it"
soname=$(readelf -d "$libdir/libnvtcp.so.0" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libnvtcp.so.0 ] || fail "SONAME is '$soname', not libnvtcp.so.0"

step "the installed headers are the public ones, and include nothing private"
extra=$(cd "$prefix/include" && find . -type f | grep -v '^\./nvtcp/[a-z_]*\.hpp$' || true)
[ -z "$extra" ] || fail "unexpected files under include/: $extra"
if grep -h '#include "' "$prefix"/include/nvtcp/*.hpp | grep -v '"nvtcp/'; then
  fail "a public header includes a private one"
fi

step "libnvtcp.so.0 exports the public API only"
nm -D --defined-only -C "$libdir/libnvtcp.so.0" | awk '$2 ~ /^[TDBRVWiu]$/ {$1=""; $2=""; print substr($0, 3)}' \
  | grep -v '^NVTCP_0$' >"$dir/exports.txt"
public='^(nvtcp::host::(QueuePair|Controller|TransportId)::|nvtcp::host::(MultipathController|MultipathQueuePair)::[a-z_~]|nvtcp::host::(parse_poll_mode|apply_recovery_seconds|set_data_path_options|data_path_options|default_hostnqn|parse_path_policy|path_policy_name)|nvtcp::nvme::status_name|nvtcp::(parse_size|log_level|set_log_level|parse_log_level|set_log_sink)\()'
if grep -Ev "$public" "$dir/exports.txt" | grep -v '^$' >"$dir/private.txt"; then
  echo "exported beyond the public API:"; head -20 "$dir/private.txt"; fail "libnvtcp exports private symbols"
fi
grep -q 'nvtcp::host::Controller::connect' "$dir/exports.txt" || fail "Controller::connect is not exported"
if grep -q 'Controller::State' "$dir/exports.txt"; then fail "Controller::State is exported"; fi
if grep -Eq 'Multipath(QueuePair::Impl|Controller::Shared)' "$dir/exports.txt"; then fail "multipath internals are exported"; fi
echo "$(wc -l <"$dir/exports.txt") symbols, all public"

step "a RAM namespace served by the installed nvtcp"
NQN=nqn.2026-11.io.nvtcp:install-test
"$prefix/bin/nvtcp" target -l 127.0.0.1:0 --discovery-port 0 --nqn "$NQN" --ram 16M --ready-file "$dir/ready" \
  >"$dir/target.log" 2>&1 &
target_pid=$!
for _ in $(seq 200); do [ -s "$dir/ready" ] && break; sleep 0.05; done
[ -s "$dir/ready" ] || { cat "$dir/target.log"; fail "target did not start"; }
trid="trtype:tcp traddr:127.0.0.1 trsvcid:$(cat "$dir/ready") subnqn:$NQN ns:1"

run_example() {  # $1: label, $2: binary, then environment assignments
  local label=$1 bin=$2
  shift 2
  env "$@" "$bin" "$trid" >"$dir/$label.out" 2>&1 || { cat "$dir/$label.out"; fail "$label: write_read failed"; }
  grep -q "identical" "$dir/$label.out" || { cat "$dir/$label.out"; fail "$label: no read-back"; }
  echo "$label: $(tail -1 "$dir/$label.out")"
}

step "examples with find_package(nvtcp)"
cmake -S "$SRC/examples" -B "$dir/ex-cmake" -DCMAKE_PREFIX_PATH="$prefix" >"$dir/ex-cmake.log" 2>&1 &&
  cmake --build "$dir/ex-cmake" -j 2 >>"$dir/ex-cmake.log" 2>&1 || { cat "$dir/ex-cmake.log"; fail "cmake example build"; }
run_example find_package "$dir/ex-cmake/write_read"
run_example find_package_static "$dir/ex-cmake/write_read_static"
# (ldd's output is captured first: grep -q would close the pipe early, and pipefail fail the check.)
static_libs=$(ldd "$dir/ex-cmake/write_read_static")
shared_libs=$(ldd "$dir/ex-cmake/write_read")
if grep -q libnvtcp <<<"$static_libs"; then fail "the static example loads libnvtcp.so"; fi
grep -q "$libdir/libnvtcp.so.0" <<<"$shared_libs" || fail "the shared example does not use the installed libnvtcp"

step "example with pkg-config"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046
g++ -O1 -o "$dir/write_read_pc" "$SRC/examples/write_read.cpp" $(pkg-config --cflags --libs nvtcp) \
  2>"$dir/pc.log" || { cat "$dir/pc.log"; fail "pkg-config example build"; }
run_example pkg_config "$dir/write_read_pc" LD_LIBRARY_PATH="$libdir"
# shellcheck disable=SC2046
g++ -O1 -o "$dir/write_read_pc_static" "$SRC/examples/write_read.cpp" \
  $(pkg-config --cflags nvtcp) "$libdir/libnvtcp.a" $(pkg-config --static --libs-only-l nvtcp | sed 's/-lnvtcp//') \
  2>"$dir/pcs.log" || { cat "$dir/pcs.log"; fail "pkg-config static example build"; }
run_example pkg_config_static "$dir/write_read_pc_static"

step "add_subdirectory(nvtcp) in a parent project"
mkdir -p "$dir/parent"
cat >"$dir/parent/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.25)
project(parent LANGUAGES CXX)
# The parent's own choices must survive nvtcp's directory: no global flags leak back.
add_subdirectory("$SRC" nvtcp)
add_executable(write_read "$SRC/examples/write_read.cpp")
target_link_libraries(write_read PRIVATE nvtcp::nvtcp)
get_property(opts DIRECTORY PROPERTY COMPILE_OPTIONS)
if(opts)
  message(FATAL_ERROR "nvtcp changed the parent's compile options: \${opts}")
endif()
if(TARGET nvtcp_unit_tests OR TARGET nvtcp_fio)
  message(FATAL_ERROR "nvtcp built its tests or fio engine inside a parent project")
endif()
CM
cmake -S "$dir/parent" -B "$dir/parent/build" >"$dir/parent.log" 2>&1 &&
  cmake --build "$dir/parent/build" -j 2 --target write_read >>"$dir/parent.log" 2>&1 ||
  { tail -40 "$dir/parent.log"; fail "add_subdirectory build"; }
run_example add_subdirectory "$dir/parent/build/write_read"

echo "PASS: installed tree, exports, find_package (shared, static), pkg-config (shared, static), add_subdirectory"

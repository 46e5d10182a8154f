#!/usr/bin/env bash
# The three Debian packages pass Debian 12's lintian without an error: `cpack -G DEB` builds nvtcp,
# libnvtcp0 and libnvtcp-dev; each carries the project's licence (Apache-2.0) as a machine-readable
# copyright file and the Debian changelog in /usr/share/doc/<package>, stripped binaries, and
# libnvtcp0 the ldconfig trigger; nvtcp a manual page for itself and for each subcommand its --help
# lists (with their options), and its bash completion. Warnings are printed, not failed on.
#
#   lintian_test.sh BUILD_DIR [DEBS_DIR]
#
# DEBS_DIR holds the packages made already (tests/package/cpack_debs.sh, as ctest does through
# the fixture nvtcp_debs); without it the script runs cpack itself.
#
# Exits 77 (skipped) without lintian (scripts/install-deps.sh installs it).
set -euo pipefail
BUILD=$(cd "${1:?usage: lintian_test.sh BUILD_DIR}" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v lintian >/dev/null || skip "no lintian (apt-get install lintian)"
command -v cpack >/dev/null || skip "no cpack"

work=$(mktemp -d /var/tmp/nvtcp-lintian.XXXXXX)
trap 'rm -rf "$work"' EXIT
if [ -n "${2:-}" ]; then
  debs=$(cd "$2" && pwd)
else
  debs=$work
  (cd "$BUILD" && cpack -G DEB -B "$debs" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack"; }
fi
for pkg in nvtcp libnvtcp0 libnvtcp-dev; do
  deb=$(ls "$debs"/"$pkg"_*.deb 2>/dev/null | head -1)
  [ -n "$deb" ] || fail "cpack made no $pkg package"
  contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
  for f in copyright changelog.Debian.gz; do
    grep -qx "./usr/share/doc/$pkg/$f" <<<"$contents" || fail "$(basename "$deb") lacks /usr/share/doc/$pkg/$f"
  done
  # Read whole, then searched: grep -q stopping at the first match would leave tar writing into a
  # closed pipe, and pipefail would count its SIGPIPE as the file lacking the line.
  copyright=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO "./usr/share/doc/$pkg/copyright")
  grep -q '^License: Apache-2.0$' <<<"$copyright" || fail "$pkg's copyright file does not name Apache-2.0"
done
deb=$(ls "$debs"/nvtcp_*.deb)
contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
grep -qx './usr/share/bash-completion/completions/nvtcp' <<<"$contents" || fail "nvtcp lacks its bash completion"
if command -v help2man >/dev/null; then
  subs=$("$BUILD/nvtcp" --help | sed -n '/^Subcommands:/,$p' | awk 'NR > 1 && NF { print $1 }')
  for page in nvtcp $(sed 's/^/nvtcp-/' <<<"$subs"); do
    f=./usr/share/man/man1/$page.1.gz
    grep -qx "$f" <<<"$contents" || fail "nvtcp lacks the manual page $page(1)"
    text=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO "$f" | zcat)
    grep -q "^\.TH ${page^^} \"1\"" <<<"$text" || fail "$page(1) has no title line"
    # Matched in the shell: `tr | grep -q` under pipefail fails when grep exits at its match
    # before tr has written the rest (tr then dies of SIGPIPE), which happened in CI.
    [[ ${text//\\/} == *--help* ]] || fail "$page(1) lists no options"
  done
  echo "manual pages: $(echo nvtcp $(sed 's/^/nvtcp-/' <<<"$subs") | tr '\n' ' ')"
else
  echo "no help2man here: the manual pages are not checked"
fi
lintian --tag-display-limit 0 "$debs"/*.deb >"$work/lintian.txt" 2>&1 || true
grep -v 'root privileges' "$work/lintian.txt" | sed 's/^/  /' || true
errors=$(grep -c '^E: ' "$work/lintian.txt" || true)
[ "$errors" -eq 0 ] || fail "lintian reports $errors error(s)"
echo "PASS: lintian $(lintian --version | awk '{print $2}'): no errors, $(grep -c '^W: ' "$work/lintian.txt" || true) warning(s) on $(ls "$debs"/*.deb | xargs -n1 basename | tr '\n' ' ')"

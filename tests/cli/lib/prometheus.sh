# SPDX-License-Identifier: Apache-2.0
# Sourced by the CLI tests that scrape /metrics: sets PY to a python3 that has Prometheus' own
# text parser (python3-prometheus-client), or skips the test (exit 77) when that or curl is
# missing. Debian's /usr/bin/python3 first: a python3 earlier on PATH may lack the package.
PY=
for p in /usr/bin/python3 python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import prometheus_client.parser' 2>/dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ] || ! command -v curl >/dev/null; then
  echo "SKIP: needs curl and python3-prometheus-client (make deps installs both)"
  exit 77
fi
# The checks of exposition.py, for the tests' own Python: `from exposition import parse`.
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)${PYTHONPATH:+:$PYTHONPATH}"

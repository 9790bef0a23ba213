#!/usr/bin/env bash
# The Python package's check (bin/test runs it): its wheel is built with pip and setuptools' standard backend
# (scripts/release/python-wheel.sh: offline from the wheels of setuptools and wheel in /usr/share/python-wheels,
# Debian's python3-setuptools-whl and python3-wheel-whl, which .ci/run installs), installed with
# `pip install --no-index WHEEL` into a fresh venv and imported from there (the reference engine, engram_host/reference,
# is not in it: the tests take it from python/); then its tests run against real daemon
# processes (the Java daemon, built by mvn, and conformance/protocol_peer.py). Counts go to the JSON file given
# (default target/python-tests.json) for bin/test's summary line.
# Usage: scripts/ci/python-test.sh [COUNTS_JSON]
set -euo pipefail
cd "$(dirname "$0")/../.."
counts=${1:-target/python-tests.json}
mkdir -p "$(dirname "$counts")"
python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "the Python package needs Python 3.10+")'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
wheel=$(scripts/release/python-wheel.sh "$tmp/wheel")
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q --disable-pip-version-check --no-index "$wheel"
(cd "$tmp" && "$tmp/venv/bin/python" -m engram_host --version \
    && "$tmp/venv/bin/python" -c 'import engram_host, engram_host.client, engram_host.engines, importlib.util as u
assert "/venv/" in engram_host.__file__, engram_host.__file__
assert u.find_spec("engram_host.reference") is None, "the wheel carries engram_host/reference (pyproject.toml excludes it)"')
echo "python-test: $(basename "$wheel") built with setuptools, installed offline into a fresh venv with pip install --no-index"
# the daemons and CLI runs the tests start: C1 only, as the Java tests' children (TestJvm): short-lived JVMs on few
# cores spend less on compiling (an operator's ENGRAM_HOST_JVM_OPTS, when set, is kept)
ENGRAM_HOST_JVM_OPTS=${ENGRAM_HOST_JVM_OPTS:--XX:TieredStopAtLevel=1} python3 python/tests/run_all.py "$counts"

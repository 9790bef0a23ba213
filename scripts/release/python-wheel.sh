#!/usr/bin/env bash
# Builds the Python package's wheel (python/: setuptools' backend, pyproject.toml) into OUTDIR and prints its path.
# It builds from a copy of what git tracks in python/ (or would: untracked but not ignored), so no build output lands
# in the tree, with pip in a fresh venv. Offline when WHEELHOUSE (default /usr/share/python-wheels, Debian's
# python3-setuptools-whl and python3-wheel-whl) holds wheels of setuptools and wheel; otherwise pip fetches them from
# its index. The venv is made with $PYTHON, else python3; but with Debian's wheels of /usr/share/python-wheels,
# which Debian patched for its own interpreter (their setuptools fails in another Python's venv), with /usr/bin/python3.
# Usage: scripts/release/python-wheel.sh OUTDIR      (needs python3 3.10+ with venv)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
[ $# = 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
out=$1
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git ls-files -co --exclude-standard -- python | while IFS= read -r f; do
  [ -f "$f" ] && mkdir -p "$work/src/$(dirname "$f")" && cp -p "$f" "$work/src/$f"
done
wheelhouse=${WHEELHOUSE:-/usr/share/python-wheels}
offline=()
python=${PYTHON:-python3}
if ls "$wheelhouse"/setuptools-*.whl >/dev/null 2>&1 && ls "$wheelhouse"/wheel-*.whl >/dev/null 2>&1; then
  offline=(--no-index --find-links "$wheelhouse")
  if [ -z "${PYTHON:-}" ] && [ "$wheelhouse" = /usr/share/python-wheels ] && [ -x /usr/bin/python3 ]; then
    python=/usr/bin/python3
  fi
fi
"$python" -m venv "$work/venv"
if ! "$work/venv/bin/pip" wheel -q --disable-pip-version-check --no-deps "${offline[@]}" -w "$work/wheel" \
    "$work/src/python" > "$work/pip.log" 2>&1; then
  cat "$work/pip.log" >&2
  echo "python-wheel: pip could not build the wheel: it needs setuptools and wheel, from its index or offline from" \
       "wheels in $wheelhouse (Debian: apt-get install python3-setuptools-whl python3-wheel-whl; or set WHEELHOUSE)" >&2
  exit 1
fi
wheel=$(ls "$work"/wheel/engram_host-*-py3-none-any.whl)
cp "$wheel" "$out/"
echo "$out/$(basename "$wheel")"

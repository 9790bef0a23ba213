#!/usr/bin/env bash
# Checks deploy/engines/{vllm,sglang}.patch against each engine's source at the commit the patch names: the
# patched files are taken at that commit, `git apply --check` and `git apply` run in a scratch work tree, each
# patched file must compile (python3 -m py_compile), and the patch must change at most 60 lines. Prints a record
# (bench/engines-patch-check.md keeps one) and exits non-zero on any failure. Needs git and python3; no network.
#
# Where an engine's source comes from, per engine (ENGINE is vllm or sglang):
#   --ENGINE-git GIT_DIR   a clone or bare mirror that has the commit: the patched files are `git archive`d from it
#   --ENGINE-src DIR       a directory laid out as the repository at that commit (at least the patched files)
# An engine given neither is reported "not checked". Example:
#   scripts/engines/check-patches.sh --vllm-git ~/src/vllm/.git --sglang-src /tmp/engines-src/sglang
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
declare -A GIT SRC
while [ $# -gt 0 ]; do
    case "$1" in
        --vllm-git|--sglang-git) e=${1#--}; GIT[${e%-git}]=$2; shift 2 ;;
        --vllm-src|--sglang-src) e=${1#--}; SRC[${e%-src}]=$2; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "check-patches.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

MAX_LINES=60
WORK=$(mktemp -d "${TMPDIR:-/tmp}/engram-engines.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FAILED=0
echo "engram-host engine patches: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "git: $(git --version | cut -d' ' -f3), python3: $(python3 -c 'import sys; print(sys.version.split()[0])')"

for engine in vllm sglang; do
    patch="$ROOT/deploy/engines/$engine.patch"
    echo
    echo "== $engine: deploy/engines/$engine.patch"
    commit=$(grep -m1 -oE 'at [0-9a-f]{40}' "$patch" | cut -c4-)
    files=$(grep -E '^\+\+\+ b/' "$patch" | cut -c7-)
    changed=$(grep -cE '^[+-]([^+-]|$)' "$patch")
    echo "commit: $commit"
    echo "files: $(echo $files)"
    echo "changed lines: $changed (at most $MAX_LINES)"
    if [ "$changed" -gt "$MAX_LINES" ]; then echo "FAIL: more than $MAX_LINES changed lines"; FAILED=1; fi
    tree="$WORK/$engine"
    mkdir -p "$tree"
    if [ -n "${GIT[$engine]:-}" ]; then
        echo "source: git archive $commit from ${GIT[$engine]}"
        if ! git --git-dir="${GIT[$engine]}" archive "$commit" $files | tar -x -C "$tree"; then
            echo "FAIL: cannot take the files at $commit"; FAILED=1; continue
        fi
    elif [ -n "${SRC[$engine]:-}" ]; then
        echo "source: the files of ${SRC[$engine]}"
        for f in $files; do
            mkdir -p "$tree/$(dirname "$f")"
            cp "${SRC[$engine]}/$f" "$tree/$f" || { echo "FAIL: no $f in ${SRC[$engine]}"; FAILED=1; continue 2; }
        done
    else
        echo "not checked: give --$engine-git or --$engine-src"
        continue
    fi
    for f in $files; do
        # The blob id is the one `git rev-parse $commit:$f` prints in a clone, whatever the files came from.
        echo "before: $f blob $(git hash-object "$tree/$f") sha256 $(sha256sum < "$tree/$f" | cut -d' ' -f1) $(wc -c < "$tree/$f") bytes"
    done
    git -C "$tree" init -q
    if git -C "$tree" apply --check -v "$patch" 2>&1 | sed 's/^/  /'; [ "${PIPESTATUS[0]}" = 0 ]; then
        echo "git apply --check: ok"
    else
        echo "FAIL: git apply --check"; FAILED=1; continue
    fi
    git -C "$tree" apply "$patch" || { echo "FAIL: git apply"; FAILED=1; continue; }
    for f in $files; do
        if python3 -m py_compile "$tree/$f"; then
            echo "py_compile $f: ok (patched: sha256 $(sha256sum < "$tree/$f" | cut -d' ' -f1))"
        else
            echo "FAIL: py_compile $f"; FAILED=1
        fi
    done
done

echo
[ "$FAILED" = 0 ] && echo "result: ok" || echo "result: FAILED"
exit "$FAILED"

#!/usr/bin/env bash
# Checks the engine patches of deploy/engines/ against the engines' source: each patch's header names, per file
# it changes, the blob id of the version it was written against ("Target: PATH blob SHA1"), and, when pinned,
# the commit ("at SHA1"). The files are taken from a source tree or a clone, their blob ids must be the named
# ones, `git apply --check` and `git apply` run in a scratch work tree, each patched file must compile
# (python3 -m py_compile), and the patch must change at most 60 lines. Prints a record
# (bench/engines-patch-check.md keeps one) and exits non-zero on any failure. Needs git and python3; no network.
#
# Usage: scripts/engines/check-patches.sh [--src-root DIR] [--vllm-git GIT_DIR] [--sglang-git GIT_DIR] [PATCH...]
#   PATCH...               the patches to check (default: every deploy/engines/*.patch); the engine is the
#                          name's first word: vllm*.patch or sglang*.patch
#   --src-root DIR         DIR/NAME (NAME: the patch's file name without .patch) laid out as the repository,
#                          holding at least the patched files, e.g. /work/engines-src/vllm-0130d488
#   --ENGINE-git GIT_DIR   a clone or bare mirror of the engine (ENGINE: vllm or sglang): the files are taken at
#                          the patch's commit (git archive), or, for a patch that names none, by their blob ids
#                          (git cat-file); --src-root wins where both have the patch's files
# A patch with neither source is reported "not checked". Example:
#   scripts/engines/check-patches.sh --src-root /work/engines-src --vllm-git ~/src/vllm/.git
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
declare -A GIT
SRC_ROOT=
PATCHES=()
while [ $# -gt 0 ]; do
    case "$1" in
        --src-root) SRC_ROOT=$2; shift 2 ;;
        --vllm-git|--sglang-git) e=${1#--}; GIT[${e%-git}]=$2; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        -*) echo "check-patches.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
        *) PATCHES+=("$1"); shift ;;
    esac
done
[ ${#PATCHES[@]} -gt 0 ] || PATCHES=("$ROOT"/deploy/engines/*.patch)

MAX_LINES=60
WORK=$(mktemp -d "${TMPDIR:-/tmp}/engram-engines.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FAILED=0
echo "engram-host engine patches: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "git: $(git --version | cut -d' ' -f3), python3: $(python3 -c 'import sys; print(sys.version.split()[0])')"

fail() { echo "FAIL: $*"; FAILED=1; }

for patch in "${PATCHES[@]}"; do
    [ -f "$patch" ] && patch=$(cd "$(dirname "$patch")" && pwd)/$(basename "$patch")  # git -C needs it absolute
    name=$(basename "$patch" .patch)
    engine=${name%%-*}
    echo
    echo "== $name: $patch"
    if [ ! -f "$patch" ]; then fail "no such patch"; continue; fi
    case "$engine" in vllm|sglang) ;; *) fail "the file name must start with vllm or sglang"; continue ;; esac
    header=$(sed -n '/^diff --git /q;p' "$patch")
    commit=$(echo "$header" | grep -m1 -oE 'at [0-9a-f]{40}' | cut -c4-)
    files=$(grep -E '^\+\+\+ b/' "$patch" | cut -c7-)
    changed=$(grep -cE '^[+-]([^+-]|$)' "$patch")
    echo "commit: ${commit:-none named (files pinned by blob id)}"
    echo "files: $(echo $files)"
    echo "changed lines: $changed (at most $MAX_LINES)"
    [ "$changed" -le "$MAX_LINES" ] || fail "more than $MAX_LINES changed lines"
    declare -A WANT=()
    missing=0
    for f in $files; do
        WANT[$f]=$(echo "$header" | awk -v f="$f" '$1 == "Target:" && $2 == f && $3 == "blob" { print $4 }')
        [ -n "${WANT[$f]}" ] || { fail "the header names no \"Target: $f blob SHA1\""; missing=1; }
    done
    [ "$missing" = 0 ] || { unset WANT; continue; }
    tree="$WORK/$name"
    mkdir -p "$tree"
    src=
    if [ -n "$SRC_ROOT" ] && [ -d "$SRC_ROOT/$name" ]; then
        src="the files of $SRC_ROOT/$name"
        for f in $files; do
            mkdir -p "$tree/$(dirname "$f")"
            cp "$SRC_ROOT/$name/$f" "$tree/$f" || { fail "no $f in $SRC_ROOT/$name"; src=; break; }
        done
    elif [ -n "${GIT[$engine]:-}" ] && [ -n "$commit" ]; then
        src="git archive $commit from ${GIT[$engine]}"
        git --git-dir="${GIT[$engine]}" archive "$commit" $files | tar -x -C "$tree" || { fail "cannot take the files at $commit"; src=; }
    elif [ -n "${GIT[$engine]:-}" ]; then
        src="git cat-file of the named blobs from ${GIT[$engine]}"
        for f in $files; do
            mkdir -p "$tree/$(dirname "$f")"
            git --git-dir="${GIT[$engine]}" cat-file blob "${WANT[$f]}" > "$tree/$f" || { fail "no blob ${WANT[$f]} ($f) in ${GIT[$engine]}"; src=; break; }
        done
    else
        echo "not checked: give --src-root (with $name/ in it) or --$engine-git"
        unset WANT; continue
    fi
    [ -n "$src" ] || { unset WANT; continue; }
    echo "source: $src"
    for f in $files; do
        # The blob id is the one `git rev-parse COMMIT:PATH` prints in a clone, whatever the files came from.
        got=$(git hash-object "$tree/$f")
        echo "before: $f blob $got sha256 $(sha256sum < "$tree/$f" | cut -d' ' -f1) $(wc -c < "$tree/$f") bytes"
        [ "$got" = "${WANT[$f]}" ] || fail "$f is blob $got, the patch was written against ${WANT[$f]}"
    done
    unset WANT
    git -C "$tree" init -q
    if git -C "$tree" apply --check -v "$patch" 2>&1 | sed 's/^/  /'; [ "${PIPESTATUS[0]}" = 0 ]; then
        echo "git apply --check: ok"
    else
        fail "git apply --check"; continue
    fi
    git -C "$tree" apply "$patch" || { fail "git apply"; continue; }
    for f in $files; do
        if python3 -m py_compile "$tree/$f"; then
            echo "py_compile $f: ok (patched: sha256 $(sha256sum < "$tree/$f" | cut -d' ' -f1))"
        else
            fail "py_compile $f"
        fi
    done
done

echo
[ "$FAILED" = 0 ] && echo "result: ok" || echo "result: FAILED"
exit "$FAILED"

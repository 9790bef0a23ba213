#!/usr/bin/env bash
# A benchmark suite (default: every CPU benchmark, JMH settings from each benchmark's annotations): NAME.json (JMH's
# results) and NAME.meta.json into bench/tmp/results/<date>-<host>/ (not tracked; --out DIR puts them elsewhere),
# then their report on stdout (scripts/bench/bench-report.py). It writes no tracked file unless asked: with
# --record the run is also recorded as bench/results/<commit>/NAME.json, and docs/benchmarks.md, its plots and
# bench/report.md are regenerated. On a CUDA machine: scripts/bench/bench-run.sh --suite gpu. Any JMH option or
# benchmark regexp passes through.
# Usage: scripts/bench/bench-run.sh [--record [--label MACHINE]] [--suite cpu|gpu|all] [--out DIR] [--name NAME]
#                                   [JMH options...] [regexp...]
#   SKIP_BUILD=1 reuses jmh/target/benchmarks.jar; NO_REPORT=1 prints no report; PYTHON runs the report (python3).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
record=()
args=()
suite=cpu
name=
out="bench/tmp/results/$(date +%F)-$(hostname | tr -c 'A-Za-z0-9._\n-' _)"
while [ $# -gt 0 ]; do
    case "$1" in
        --record) record+=(--record) ;;
        --label) record+=(--label "${2:?--label needs a value}"); shift ;;
        *)
            case "$1" in
                --suite) suite=${2:-} ;;
                --name) name=${2:-} ;;
                --out) out=${2:-} ;;
            esac
            args+=("$1") ;;
    esac
    shift
done
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    mvn -B -o -q -pl jmh -am package -DskipTests
fi
JAVA=${JAVA:-java}
# the default --out first: one given on the command line comes later and wins
"$JAVA" -jar jmh/target/benchmarks.jar --out "$out" "${args[@]}"
meta="$out/${name:-$suite}.meta.json"
[ -f "$meta" ] || exit 0  # -h, -l and -lp print and run nothing
if [ ${#record[@]} -gt 0 ]; then
    "${PYTHON:-python3}" scripts/bench/bench-report.py "${record[@]}" "$meta"
elif [ "${NO_REPORT:-0}" != 1 ]; then
    "${PYTHON:-python3}" scripts/bench/bench-report.py "$meta"
fi

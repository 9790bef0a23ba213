#!/usr/bin/env bash
# The full benchmark suite (default: every CPU benchmark, JMH settings from each benchmark's
# annotations) into bench/results/<date>-<host>/<suite>.json with <suite>.meta.json beside it, then
# docs/benchmarks.md regenerated from every run under bench/results. On a CUDA machine:
# scripts/bench/bench-run.sh --suite gpu. Any JMH option or benchmark regexp passes through.
# Usage: scripts/bench/bench-run.sh [--suite cpu|gpu|all] [--out DIR] [JMH options...] [regexp...]
#   SKIP_BUILD=1 reuses jmh/target/benchmarks.jar; NO_REPORT=1 leaves docs/benchmarks.md alone.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    mvn -B -o -q -pl jmh -am package -DskipTests
fi
JAVA=${JAVA:-java}
"$JAVA" -jar jmh/target/benchmarks.jar "$@"
if [ "${NO_REPORT:-0}" != 1 ]; then
    python3 scripts/bench/bench-report.py -o docs/benchmarks.md
    echo "docs/benchmarks.md regenerated"
fi

#!/usr/bin/env bash
# CPU-only smoke pass of every benchmark: one fork (C1 only), one 0.3 s warmup and two 0.3 s measurements, the
# smallest parameters. It checks that the benchmarks build and run (CI); its numbers are not judged.
# About a minute on 2 cores. Results go to bench/tmp/smoke/ (not committed).
# Usage: scripts/bench/bench-smoke.sh [BenchMain/JMH options...]     SKIP_BUILD=1 reuses jmh/target/benchmarks.jar
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    mvn -B -o -q -pl jmh -am package -DskipTests
fi
JAVA=${JAVA:-java}
exec "$JAVA" -jar jmh/target/benchmarks.jar --suite smoke --out "${OUT:-bench/tmp/smoke}" "$@"

#!/usr/bin/env bash
# Runs on the GPU machine, from the bundle scripts/gpu/bench-gpu-bundle.sh built: the jmh module's gpu-tagged
# tests (every GPU benchmark's setup, measured methods and teardown called directly, their results checked,
# nothing leaked) with the JUnit console launcher. Output: $OUT/bench-junit.txt and bench-junit.xml.
# Usage: OUT=/some/dir bash bench-gpu-test.sh
set -uo pipefail
B=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$B/out}
WORK=${WORK:-/tmp/engram-bench}
mkdir -p "$OUT" "$WORK/tmp"
rm -rf "$WORK/reports"
[ -x "$WORK/jre/bin/java" ] || tar -C "$WORK" -xzf "$B/jre.tar.gz"
export ENGRAM_ATTACH=${ENGRAM_ATTACH:-$B/engram-attach}
export ENGRAM_ATTACH_LIB=${ENGRAM_ATTACH_LIB:-$B/libengram-attach-bench.so}
FLAGS=$(cat "$B/jvm.options")
CONSOLE=$(ls "$B"/lib-test/junit-platform-console-standalone-*.jar)
# shellcheck disable=SC2086
timeout "${TEST_TIMEOUT:-400}" "$WORK/jre/bin/java" $FLAGS "-Djava.io.tmpdir=$WORK/tmp" "-Dengram.python.path=$B/python" \
    -cp "$B/benchmarks.jar:$B/test-classes/jmh:$CONSOLE" org.junit.platform.console.ConsoleLauncher execute \
    --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests --include-tag=gpu \
    --scan-classpath="$B/test-classes/jmh" --reports-dir="$WORK/reports" > "$OUT/bench-junit.txt" 2>&1
rc=$?
cp "$WORK"/reports/TEST-junit-jupiter.xml "$OUT/bench-junit.xml" 2>/dev/null
tail -30 "$OUT/bench-junit.txt"
exit $rc

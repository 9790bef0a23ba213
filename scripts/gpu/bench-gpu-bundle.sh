#!/usr/bin/env bash
# Builds what a GPU machine without Java needs to run the GPU benchmarks (AttachBench):
#   benchmarks.jar   jmh/target/benchmarks.jar (every benchmark, BenchMain as main class)
#   jre.tar.gz       a jlink runtime with the modules the jar uses (jdeps), --compress=2
#   COMMIT           the commit the jar was built from (-dirty with uncommitted changes)
#   engram-attach    the C client (native/c): RestartBench's C client, AttachBench's round trip
#   libengram-attach-bench.so   its attach code as a library: AttachBench's C baseline, called in the JMH process
#   python/          the Python client (python/engram_host, python/pyproject.toml): RestartBench's Python peer
#                    (bench-gpu.sh names it with -Dengram.python.path; PyTorch comes from the machine's python3)
#   bench-gpu.sh     what to run there; bench-gpu-pass.sh runs the full GPU pass in parts
#   test-classes/, lib-test/, bench-gpu-test.sh   the jmh module's gpu-tagged tests and the JUnit console
# Usage: scripts/gpu/bench-gpu-bundle.sh [OUTPUT_DIR]   (default bench/tmp/gpu-bundle; must stay under 64 MiB; OUTPUT_DIR
# new, empty or a bundle of these scripts, which it replaces: scripts/lib/own-dir.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${1:-$ROOT/bench/tmp/gpu-bundle}
cd "$ROOT"
mvn -B -o -q -pl jmh -am package -DskipTests
mvn -B -o -q dependency:copy -Dartifact=org.junit.platform:junit-platform-console-standalone:1.14.1 \
    -DoutputDirectory=jmh/target/lib-test
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
make -s -C native engram-attach engram-attach-bench-lib
cp jmh/target/benchmarks.jar scripts/gpu/bench-gpu.sh scripts/gpu/bench-gpu-pass.sh scripts/gpu/bench-gpu-test.sh \
    native/build/engram-attach native/build/libengram-attach-bench.so "$STAGE/"
mkdir -p "$STAGE/test-classes"
cp -r jmh/target/test-classes "$STAGE/test-classes/jmh"
cp -r jmh/target/lib-test "$STAGE/lib-test"
mkdir -p "$STAGE/python"
cp -r python/engram_host python/pyproject.toml "$STAGE/python/"
find "$STAGE/python" -name __pycache__ -prune -exec rm -rf {} +
cp native/target/classes/io/engramhost/os/jvm.options "$STAGE/jvm.options"
MODULES=$(jdeps --ignore-missing-deps --print-module-deps --multi-release 17 jmh/target/benchmarks.jar)
# Chronicle needs java.naming at run time; jdk.unsupported for sun.misc.Unsafe (found by jdeps too);
# java.xml and java.logging for the JUnit console launcher and its XML report.
MODULES="$MODULES,java.naming,jdk.unsupported,java.management,java.xml,java.logging"
jlink --add-modules "$MODULES" --compress=2 --no-header-files --no-man-pages --strip-debug --output "$STAGE/jre"
tar -C "$STAGE" -czf "$STAGE/jre.tar.gz" jre
rm -rf "$STAGE/jre"
COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || COMMIT="$COMMIT-dirty"
echo "$COMMIT" > "$STAGE/COMMIT"
. "$ROOT/scripts/lib/own-dir.sh"
own_dir "$DEST" bench-gpu-bundle   # a bundle of an earlier run is replaced; a directory of other files is refused
rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
cp -r "$STAGE" "$DEST"
mark_dir "$DEST"
SIZE=$(du -sm "$DEST" | cut -f1)
echo "bundle at $DEST: ${SIZE} MiB, modules $MODULES, commit $COMMIT"
if [ "$SIZE" -ge 64 ]; then
    echo "bundle is ${SIZE} MiB: over the 64 MiB the device tool carries" >&2
    exit 1
fi

#!/usr/bin/env bash
# Runs on the GPU machine, from the bundle that scripts/gpu/gpu-bundle.sh built: the gpu-tagged tests
# (JUnit console launcher). The attach benchmarks, Java against C, are JMH's (scripts/gpu/bench-gpu-bundle.sh).
# Results go to $OUT:
#   env.txt            date, kernel, driver, GPU
#   junit-console.txt  the launcher's tree and summary (also the tests' stdout: timings, child logs)
#   junit-jupiter.xml  the XML report
#   python-gpu.txt     the Python package's GPU tests (python/tests/gpu, unittest) against daemon processes
#   summary.txt        the exit codes
# Usage: OUT=/some/dir bash gpu-test.sh            (PARTS=java, PARTS=python: one of the two; default both;
#        JAVA_TESTS=CLASS[,CLASS...]: only those gpu-tagged test classes;
#        PY_PATTERN=test_engines_gpu.py: only the python/tests/gpu files matching it, default test*.py)
#        ENGRAM_GPU_BACKENDS=memfd,cuda-vmm ...    the Python tests' backends (default all three)
set -uo pipefail

B=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$B/out}
WORK=${WORK:-/tmp/engram-gpu}
mkdir -p "$OUT" "$WORK/tmp"
rm -rf "$WORK/reports"

tar -C "$WORK" -xzf "$B/jre.tar.gz"
JAVA="$WORK/jre/bin/java"
read -r -a FLAGS < "$B/jvm.options" || true
FLAGS+=("-Djava.io.tmpdir=$WORK/tmp")
CP=$(ls "$B"/lib/*.jar | tr '\n' ':')"$B/test-classes/native:$B/test-classes/cudavmm:$B/test-classes/engram-host"
CONSOLE=$(ls "$B"/lib-test/junit-platform-console-standalone-*.jar)

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "uname -r: $(uname -r)"
    echo "bundle commit: $(cat "$B/COMMIT" 2>/dev/null)"
    nvidia-smi --query-gpu=name,driver_version,pci.bus_id,memory.total --format=csv
    nvidia-smi | grep -i "CUDA Version"
    grep -E "MemTotal|MemAvailable" /proc/meminfo
    echo "numa nodes: $(ls -d /sys/devices/system/node/node* 2>/dev/null | wc -l)"
    nproc
    "$JAVA" -version 2>&1
} > "$OUT/env.txt" 2>&1

PARTS=${PARTS:-java,python}
TESTS=skipped
if [[ ",$PARTS," == *",java,"* ]]; then
echo "== gpu tests"
SELECT=(--scan-classpath="$B/test-classes/native" --scan-classpath="$B/test-classes/cudavmm"
    --scan-classpath="$B/test-classes/engram-host")
if [ -n "${JAVA_TESTS:-}" ]; then  # e.g. JAVA_TESTS=io.engramhost.cli.TakeoverGpuTest: those classes only
    SELECT=()
    for c in ${JAVA_TESTS//,/ }; do SELECT+=(--select-class="$c"); done
fi
timeout ${TEST_TIMEOUT:-300} "$JAVA" "${FLAGS[@]}" -cp "$CP:$CONSOLE" org.junit.platform.console.ConsoleLauncher execute \
    --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests --include-tag=gpu "${SELECT[@]}" \
    --reports-dir="$WORK/reports" > "$OUT/junit-console.txt" 2>&1
TESTS=$?
cp "$WORK"/reports/TEST-junit-jupiter.xml "$OUT/junit-jupiter.xml" 2>/dev/null
tail -25 "$OUT/junit-console.txt"
fi

PY=skipped
if [[ ",$PARTS," == *",python,"* ]]; then
echo "== python gpu tests"
python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)' >> "$OUT/env.txt" 2>&1
PYTHONPATH="$B/python" WORK="$WORK" ENGRAM_HOST_LAUNCHER="$B/engram-host" TMPDIR="$WORK/tmp" timeout ${PY_TEST_TIMEOUT:-420} \
    python3 -m unittest discover -v -s "$B/python/tests/gpu" -t "$B/python/tests" -p "${PY_PATTERN:-test*.py}" \
    > "$OUT/python-gpu.txt" 2>&1
PY=$?
tail -25 "$OUT/python-gpu.txt"
fi

printf 'tests=%s python=%s\n' "$TESTS" "$PY" | tee "$OUT/summary.txt"
[ "$TESTS" = 0 ] || [ "$TESTS" = skipped ] || exit 1
[ "$PY" = 0 ] || [ "$PY" = skipped ]

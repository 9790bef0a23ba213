#!/usr/bin/env bash
# Runs on a GPU machine, from the bundle scripts/gpu/bench-gpu-bundle.sh built: the GPU suite (AttachBench,
# GpuGatherBench, RestartBench) with the bundled runtime, C client (ENGRAM_ATTACH), C attach library
# (ENGRAM_ATTACH_LIB) and Python client (-Dengram.python.path=$B/python, run by python3 on PATH or
# $ENGRAM_HOST_PYTHON). Results: $OUT/gpu.json and $OUT/gpu.meta.json (copy them back and record them:
# scripts/bench/bench-report.py --record --label H200 DIR); bench-gpu-pass.sh runs the whole pass in
# parts. Extra arguments go to BenchMain/JMH, e.g. -p tableMiB=1024,4096,16384,32768. HUGEPAGES=N first
# reserves N 2 MiB pages (root only) for the hugetlb path; without them that benchmark fails naming the sysctl.
# SUITE=cpu runs CPU benchmarks there instead (name them, e.g. HandshakeBench).
# Usage: OUT=/some/dir [HUGEPAGES=N] [SUITE=gpu|cpu] bash bench-gpu.sh [options...]
set -euo pipefail
B=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$B/out}
WORK=${WORK:-/tmp/engram-bench}
mkdir -p "$OUT" "$WORK/tmp"
tar -C "$WORK" -xzf "$B/jre.tar.gz"
if [ -n "${HUGEPAGES:-}" ]; then
    # repeated while the pool grows (where memory appears as it is used), up to 120 s, 10 s without growth
    t0=$SECONDS still=$SECONDS last=-1
    while :; do
        echo "$HUGEPAGES" > /proc/sys/vm/nr_hugepages
        got=$(cat /proc/sys/vm/nr_hugepages)
        [ "$got" -ge "$HUGEPAGES" ] && break
        [ "$got" -gt "$last" ] && still=$SECONDS
        last=$got
        { [ $(( SECONDS - t0 )) -ge 120 ] || [ $(( SECONDS - still )) -ge 10 ]; } && break
        sleep 1
    done
    echo "nr_hugepages: $(cat /proc/sys/vm/nr_hugepages) (asked $HUGEPAGES)"
fi
export ENGRAM_ATTACH=${ENGRAM_ATTACH:-$B/engram-attach}
export ENGRAM_ATTACH_LIB=${ENGRAM_ATTACH_LIB:-$B/libengram-attach-bench.so}
export ENGRAM_GIT_COMMIT=${ENGRAM_GIT_COMMIT:-$(cat "$B/COMMIT" 2>/dev/null || echo unknown)}
cd "$WORK"
exec "$WORK/jre/bin/java" "-Djava.io.tmpdir=$WORK/tmp" "-Dengram.python.path=$B/python" -jar "$B/benchmarks.jar" --suite "${SUITE:-gpu}" --out "$OUT" "$@"

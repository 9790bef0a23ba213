#!/usr/bin/env bash
# Issue 14's cold-start benchmarks on the GPU machine, from the repository root, with the bench bundle
# (scripts/gpu/bench-gpu-bundle.sh, carried as bench/tmp/gpu-bundle). Generates one checkpoint in the V4.1 layout
# (4 layers x ROWS rows x 264 B) for every fork (ENGRAM_BENCH_CHECKPOINT), then one JMH run:
#   CACHE=warm (default): ColdStartBench readIntoRegions (every backend), preadIntoAnonymous and memcpy, and
#                         DaemonRestartBench.reload (every backend): the read phase and process start to ready
#   CACHE=cold:           ColdStartBench readIntoRegions (every backend), preadIntoAnonymous, directRead, ddDirect
# Huge pages for memfd-hugetlb are reserved first and given back at the end. Results in OUT_DIRECTORY/NAME.
# BACKENDS, THREADS (comma lists) and BENCHES (one JMH regex) narrow the run; SHOTS (default 3) measured shots;
# JMH's own log goes to OUT_DIRECTORY/NAME.log.
# Usage: [ROWS=32537631] [CACHE=warm|cold] [NAME=coldstart] bash scripts/gpu/gpu-coldstart-bench.sh OUT_DIRECTORY [JMH args]
set -uo pipefail
OUT=${1:?usage: gpu-coldstart-bench.sh OUT_DIRECTORY [JMH args]}; shift
B=$(pwd)/bench/tmp/gpu-bundle
W=/tmp/engram-coldstart
ROWS=${ROWS:-32537631}
CACHE=${CACHE:-warm}
NAME=${NAME:-coldstart-$CACHE}
mkdir -p "$W/tmp" "$OUT"
[ -x "$W/jre/bin/java" ] || tar -C "$W" -xzf "$B/jre.tar.gz"
J=$W/jre/bin/java
CK=/var/tmp/engram-coldstart-ck-$ROWS
if [ ! -f "$CK/model.safetensors" ]; then
    rm -rf /var/tmp/engram-coldstart-ck-*  # another size's checkpoint: the disk holds one
    "$J" -Djava.io.tmpdir="$W/tmp" -cp "$B/benchmarks.jar" io.engramhost.cli.Main \
        generate --out "$CK" --rows "$ROWS" --dim 256 --layers 0,1,2,3 --single-file 2>&1 | tail -1 | tee "$OUT/$NAME-generate.txt"
fi
SIZE=$(stat -c %s "$CK/model.safetensors")
echo $(( SIZE / (2 << 20) + 256 )) > /proc/sys/vm/nr_hugepages
echo "nr_hugepages $(cat /proc/sys/vm/nr_hugepages); $(free -g | sed -n 2p)" | tee "$OUT/$NAME-memory.txt"
export ENGRAM_BENCH_CHECKPOINT=$CK/model.safetensors ENGRAM_GIT_COMMIT=$(cat "$B/COMMIT" 2>/dev/null || echo unknown)
if [ -n "${BENCHES:-}" ]; then
    INCLUDES=("$BENCHES")
elif [ "$CACHE" = warm ]; then
    INCLUDES=('ColdStartBench\.(readIntoRegions|preadIntoAnonymous|memcpy)$' 'DaemonRestartBench\.reload$')
else
    INCLUDES=('ColdStartBench\.(readIntoRegions|preadIntoAnonymous|directRead|ddDirect)$')
fi
"$J" -Djava.io.tmpdir="$W/tmp" -jar "$B/benchmarks.jar" --suite cpu --out "$OUT/$NAME" "${INCLUDES[@]}" \
    -p "backend=${BACKENDS:-memfd,memfd-hugetlb,cuda-vmm}" -p "threads=${THREADS:-16}" -p cache="$CACHE" \
    -wi 1 -i "${SHOTS:-3}" "$@" > "$OUT/$NAME.log" 2>&1
rc=$?
grep -E "^(Benchmark|ColdStart|DaemonRestart|# Benchmark|# Param)|Error|error|Exception|\) +[0-9]" "$OUT/$NAME.log" | tail -60
# JMH refuses some arguments (an option given twice) before it prints anything the filter keeps
[ -f "$OUT/$NAME/cpu.json" ] || { echo "gpu-coldstart-bench: no results (exit $rc); the end of $OUT/$NAME.log:"; tail -20 "$OUT/$NAME.log"; rc=1; }
echo 0 > /proc/sys/vm/nr_hugepages
exit $rc

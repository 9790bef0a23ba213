#!/usr/bin/env bash
# The full GPU pass, run on the GPU machine from the bundle (scripts/bench-gpu-bundle.sh), in parts that
# each fit one 10-minute command there. Each part is one BenchMain run writing NAME.json, NAME.meta.json
# and NAME.log into $OUT; copy them to bench/results/<date>-<machine>/ and run scripts/bench-report.py.
#   smoke     every GPU benchmark once on small tables (about 2 min): do the paths work at all?
#   attach    AttachBench (Java and its C baseline) at 1, 4 and 16 GiB   (about 4 min)
#   attach32  AttachBench at 32 GiB                                     (about 5 min)
#   gather    GpuGatherBench: random rows vs a sequential read, 3 backends (about 3 min)
#   gather16  GpuGatherBench on 16 GiB tables, 264-byte rows               (about 2 min)
#   restart   RestartBench: process start to tables usable, Java vs C, 16 GiB (about 3 min)
#   handshake the CPU handshake benchmarks (HandshakeBench, HandshakePartsBench) on this machine (about 3 min)
#   busy      BusyDaemonBench: an import with 1,000 idle, slowloris or polling peers, against none (about 2 min)
#   coldload  CheckpointLoader against pread, from the page cache and cold, on this machine (about 2 min;
#             the checkpoint goes to $ENGRAM_BENCH_DIR, which must not be tmpfs)
# Huge pages for the hugetlb paths are reserved first (HUGEPAGES, default 17408 = 34 GiB; root only).
# Usage: OUT=/some/dir bash bench-gpu-pass.sh PART [PART...]
set -uo pipefail
B=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$B/out}
export HUGEPAGES=${HUGEPAGES:-17408}
mkdir -p "$OUT"
status=0
for part in "$@"; do
    case "$part" in
        smoke) args=(--name gpu-smoke -f 1 -wi 0 -i 1 -p tableMiB=64 -p gatherRows=65536 -p rowBytes=264) ;;
        attach) args=(--name attach -p tableMiB=1024,4096,16384 AttachBench) ;;
        attach32) args=(--name attach-32g -p tableMiB=32768 AttachBench) ;;
        gather) args=(--name gather GpuGatherBench) ;;
        gather16) args=(--name gather-16g -p tableMiB=16384 -p rowBytes=264 GpuGatherBench) ;;
        restart) args=(--name restart RestartBench) ;;
        handshake) args=(--name cpu-handshake HandshakeBench HandshakePartsBench) ;;
        busy) args=(--name cpu-busy BusyDaemonBench) ;;
        coldload) args=(--name cpu-coldcache -p cache=warm,cold -p threads=1,2,4
                        'ColdLoadBench\.(loaderIntoMemfd|preadIntoAnonymous)$') ;;
        *) echo "bench-gpu-pass: unknown part '$part' (smoke, attach, attach32, gather, gather16, restart, handshake, busy, coldload)" >&2; exit 2 ;;
    esac
    suite=gpu
    case "$part" in handshake|coldload|busy) suite=cpu ;; esac
    name=${args[1]}
    echo "== $part: bench-gpu.sh ${args[*]}  ($(date -u +%H:%M:%S))"
    SUITE=$suite OUT="$OUT" bash "$B/bench-gpu.sh" "${args[@]}" > "$OUT/$name.log" 2>&1
    rc=$?
    echo "   exit $rc ($(date -u +%H:%M:%S)); failures: $(grep -c '<failure>' "$OUT/$name.log")"
    grep -A3 '<failure>' "$OUT/$name.log" | head -20
    [ "$rc" = 0 ] || status=1
done
exit $status

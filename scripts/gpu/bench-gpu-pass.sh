#!/usr/bin/env bash
# The full GPU pass, run on the GPU machine from the bundle (scripts/gpu/bench-gpu-bundle.sh), in parts that
# each fit one 10-minute command there. Each part is one BenchMain run writing NAME.json, NAME.meta.json
# and NAME.log into $OUT; copy $OUT back and record it: scripts/bench/bench-report.py --record --label H200 OUT.
#   smoke     every GPU benchmark once on small tables (about 2 min): do the paths work at all?
#   attach    AttachBench (Java and its C baseline) at 1, 4 and 16 GiB   (about 4 min)
#   attach32  AttachBench at 32 GiB                                     (about 5 min)
#   attachbig AttachBench at TABLE_MIB (default 65536; issue 15: 65536, 102400, 131072 and 193536 = 189 GiB on the
#             two-GPU machine), one backend per command, BACKEND cuda-vmm (default), memfd-hugetlb or memfd: the Java
#             attach and its in-process C baseline (cuda-vmm adds the socket round trip); huge pages are reserved
#             only for memfd-hugetlb (the tables' size plus 512 MiB) and given back to 0 otherwise, so that one
#             backend's table and another's reserve never have to fit together. FORKS (default 3) forks per method:
#             at 100 GiB a fork's median moves by about 8% (bench/notes.md section 13), more than the 1.1x target
#             can take from one fork. Each fork makes its table anew: about 37 s a fork at 100 GiB on the H200,
#             so 189 GiB fits a 10-minute command with FORKS=2
#   gather    GpuGatherBench on 2 GiB tables: random rows vs a sequential read, our 3 views and the 2 engine-pinned
#             baselines (cuMemHostAlloc; anonymous memory + cuMemHostRegister), 64/264/1024-byte rows (about 3 min)
#   gather16  GpuGatherBench on 16 GiB tables, 264-byte rows, every method    (about 2 min)
#   pinned    the gathers only (3 views, 2 engine baselines) on 2 and 16 GiB tables, 64/264/1024-byte rows: issue 14's
#             target, each view >= 0.98 of each baseline's rows/s (30 forks, about 5 min)
#   pinned40  the same on 40 GiB tables (15 forks of about 25 s, about 6-7 min); reserves 20736 huge pages (40.5 GiB).
#             ROW_BYTES (e.g. 64,264 then 1024) narrows pinned and pinned40 if a part must fit a shorter command
#   pinned2g  the gathers on 2 GiB tables, 64 and 1024-byte rows, 3 forks each (about 3 min): at 2 GiB each method's
#             forks spread by about 4%, more than pinned's one fork can tell from a gap (bench/notes.md section 12)
#   restart   RestartBench: process start to tables usable, Java, C and Python (with import torch alone), 16 GiB,
#             the three backends (about 6 min); BACKEND and TABLE_MIB narrow it, e.g. BACKEND=cuda-vmm TABLE_MIB=40960
#   restart-py16, restart-py40   RestartBench's benchmarks (javaClient, javaClientWithoutAppCds, cClient,
#             pythonClient, pythonImportTorch, pythonAfterTorch; RESTART_BENCHES narrows them, a JMH regex) on one
#             backend, BACKEND (default cuda-vmm; run once per backend), at 16 and 40 GiB: 1 warmup and 5 measured shots
#             each (about 3 and 4 min); files restart-py16-BACKEND.*. Python after import torch is
#             pythonAfterTorch, compared with cClient
#   handshake the CPU handshake benchmarks (HandshakeBench, HandshakePartsBench) on this machine (about 3 min)
#   busy      BusyDaemonBench: an import with 1,000 idle, slowloris or polling peers, against none (about 2 min)
#   coldload  CheckpointLoader against pread, from the page cache and cold, on this machine (about 2 min;
#             the checkpoint goes to $ENGRAM_BENCH_DIR, which must not be tmpfs)
# Huge pages for the hugetlb paths are reserved first (HUGEPAGES, default 17408 = 34 GiB; root only; pinned40, and
# restart-py40 on memfd-hugetlb, take at least 20736 = 40.5 GiB).
# Usage: OUT=/some/dir [BACKEND=cuda-vmm|memfd-hugetlb|memfd] bash bench-gpu-pass.sh PART [PART...]
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
        attachbig)
            case "${BACKEND:-cuda-vmm}" in
                cuda-vmm) sel='AttachBench\.(vmmGpu|cLibVmmGpu|cRoundTrip)$' ;;
                memfd-hugetlb) sel='AttachBench\.(memfdHugetlbRegister|cLibMemfdHugetlbRegister)$' ;;
                memfd) sel='AttachBench\.(memfdRegister|cLibMemfdRegister)$' ;;
                *) echo "bench-gpu-pass: attachbig: BACKEND is cuda-vmm, memfd-hugetlb or memfd" >&2; exit 2 ;;
            esac
            args=(--name "attach-big-${BACKEND:-cuda-vmm}-${TABLE_MIB:-65536}" -f "${FORKS:-3}" -p "tableMiB=${TABLE_MIB:-65536}"
                  "$sel") ;;
        gather) args=(--name gather -p tableMiB=2048 GpuGatherBench) ;;
        gather16) args=(--name gather-16g -p tableMiB=16384 -p rowBytes=264 GpuGatherBench) ;;
        pinned|pinned40)
            mib=2048,16384 name=gather-pinned
            [ "$part" = pinned40 ] && mib=40960 name=gather-pinned-40g
            args=(--name "$name${ROW_BYTES:+-r${ROW_BYTES//,/_}}" -p "tableMiB=$mib" -p "rowBytes=${ROW_BYTES:-64,264,1024}"
                  'GpuGatherBench\.gather') ;;
        pinned2g) args=(--name gather-2g-forks -f 3 -p tableMiB=2048 -p rowBytes=64,1024 'GpuGatherBench\.gather') ;;
        restart) args=(--name "restart${BACKEND:+-$BACKEND}${TABLE_MIB:+-$TABLE_MIB}"
                       -p "backend=${BACKEND:-memfd,memfd-hugetlb,cuda-vmm}" -p "tableMiB=${TABLE_MIB:-16384}"
                       RestartBench) ;;
        restart-py16) args=(--name "restart-py16-${BACKEND:-cuda-vmm}" -wi 1 -i 5 -p "backend=${BACKEND:-cuda-vmm}"
                            -p tableMiB=16384 "${RESTART_BENCHES:-RestartBench}") ;;
        restart-py40) args=(--name "restart-py40-${BACKEND:-cuda-vmm}" -wi 1 -i 5 -p "backend=${BACKEND:-cuda-vmm}"
                            -p tableMiB=40960 "${RESTART_BENCHES:-RestartBench}") ;;
        handshake) args=(--name cpu-handshake HandshakeBench HandshakePartsBench) ;;
        busy) args=(--name cpu-busy BusyDaemonBench) ;;
        coldload) args=(--name cpu-coldcache -p cache=warm,cold -p threads=1,2,4
                        'ColdLoadBench\.(loaderIntoMemfd|preadIntoAnonymous)$') ;;
        *) echo "bench-gpu-pass: unknown part '$part' (smoke, attach, attach32, attachbig, gather, gather16, pinned, pinned40, pinned2g, restart, restart-py16, restart-py40, handshake, busy, coldload)" >&2; exit 2 ;;
    esac
    suite=gpu
    case "$part" in handshake|coldload|busy) suite=cpu ;; esac
    pages=$HUGEPAGES
    if [ "$part" = attachbig ]; then
        pages=0
        [ "${BACKEND:-cuda-vmm}" = memfd-hugetlb ] && pages=$(( ${TABLE_MIB:-65536} / 2 + 256 ))
    fi
    if { [ "$part" = restart-py40 ] && [ "${BACKEND:-cuda-vmm}" = memfd-hugetlb ] || [ "$part" = pinned40 ]; } \
        && [ "$pages" -lt 20736 ]; then
        pages=20736 # the 40 GiB table (20480 pages) and some room
    fi
    name=${args[1]}
    echo "== $part: bench-gpu.sh ${args[*]}  ($(date -u +%H:%M:%S))"
    HUGEPAGES=$pages SUITE=$suite OUT="$OUT" bash "$B/bench-gpu.sh" "${args[@]}" > "$OUT/$name.log" 2>&1
    rc=$?
    echo "   exit $rc ($(date -u +%H:%M:%S)); failures: $(grep -c '<failure>' "$OUT/$name.log")"
    grep -A3 '<failure>' "$OUT/$name.log" | head -20
    [ "$rc" = 0 ] || status=1
done
exit $status

#!/usr/bin/env bash
# Issue 29 on the H200: a new daemon seeds GIB GiB from a serving one on the same machine (loopback), from the
# release tarball (scripts/release/dist.sh; no Java on the machine), one device call, under 9 minutes. From the
# repository root, with dist/ carried:
#   [GIB=39] [SEEDS=2] [IMPORTS=5] [TRANSPORT_GIB=8] [PROBE_GIB=8] [COLD=1] [VMM=1] bash scripts/gpu/gpu-seed-run.sh OUT_DIR
#   GIB=4 ...     a quick pass (about 2 minutes); GIB=1 without a GPU is the dry run (no engine GPU views, no cuda-vmm,
#                 no probe)
#   ENGINE_TABLES=name[,name...]  the engine imports only these tables (`engram-attach --table` each; checked against
#                 A's STATUS first); the summary names them and their GiB, and ms/GiB is over their bytes
#   B_FLAGS="..."  extra flags appended to every `serve` of daemon B (default none), echoed in the summary
#   DRIFT_S=N     (default 0: off) the loop engine alone N seconds before the seed from each exporter of DRIFT_ON
#                 (default cuda-vmm; a space-separated list) in EXPORTERS: the median import per 5-second window
#   WORK_DIR=DIR  instead of /var/tmp/engram-seed (the model, the unpacked release and the logs): a new or empty
#                 directory, or one these scripts made (scripts/lib/own-dir.sh's mark): it removes what it made there
#   A_CPUS=LIST B_CPUS=LIST  (taskset -c) A and its engine on one set of CPUs, B on another, as if B were another
#                 node as far as the CPUs go (memory and its bandwidth stay shared); echoed in the summary
#   B_DROP_CACHE=1  the page cache dropped before each B (B's node would not hold the checkpoint's pages); each B's
#                 summary line says the memory free at its start and what the kernel reclaimed while it loaded
#   EX_SEEDS=N    (default 1) seeds from each exporter of EXPORTERS, each between an idle window before and after
#   SINK_ROUNDS=N [SINK_S=8]  after the seeds from each exporter of EXPORTERS: N rounds of the engine alone (IDLE_S s)
#                 then the engine while scripts/bench/seed-sink.py (a requester on THREADS streams that keeps no byte,
#                 standing for a peer on another node) asks A for every table's ranges for SINK_S s, and the engine
#                 alone once more at the end; per round during/before and during/after, and all sink windows' imports
#                 against all idle windows' (one second of sink first, so a cuda-vmm exporter's CPU view is made
#                 before any window)
#   PREFAULT_GIB=N  (default 0: off) before anything else, bench/experiments/touch_probe.c writes one byte in every
#                 page of N GiB of fresh memory, two rounds, each unmapped after: a VM whose host backs guest memory
#                 only when first touched (Firecracker) gives it slowly the first time; the second round says whether
#                 the memory stays backed once the guest has freed it. Every figure after it then runs on memory
#                 the guest has touched before, as on a node that has run for a while
# What it does, each step's figures in summary.txt:
#   1. `generate --model` a model directory of GIB GiB of Engram tables (V4.1's layout: layers 1 and 14, 264 bytes a
#      row) and its digest record (`inspect --write-digests`), into /var/tmp/engram-seed (kept for a later call on a
#      warm machine; one size at a time)
#   2. daemon A: `serve --backend memfd --seed-listen 127.0.0.1:7070` loading the model from the page cache (its
#      STATUS load.read_gib_s: the fill path's rate from memory, the first stage alone)
#   3. the transport alone on loopback: scripts/bench/tcp-rate.py, sendfile from the largest shard (page cache) over
#      16 streams (B's --threads), TRANSPORT_GIB GiB, once into a reused buffer and once into fresh memfd pages
#   4. an engine of A's, idle: IMPORTS fresh-process imports (and 2 more after each seed) by the C client (`engram-attach --register --device 0`:
#      mmap and cuMemHostRegister of every table, as an engine's GPU view of memfd tables; the CPU view only without a
#      GPU), its total_ms (handshake, manifest, attach; the CUDA context excluded). IMPORT hands out every table of
#      the daemon (tables share regions), so an import is of all GIB GiB; ms/GiB is given beside it.
#      ENGINE_TABLES: the engine attaches only those tables' regions (the other fds closed unmapped); the summary says
#      "import of TABLE (0.59 GiB), X GiB of regions mapped" and gives ms/GiB over the tables' bytes.
#      ENGINE=loop instead: one C client process importing back to back (`--repeat`; mmap only, `--device 0` for
#      cuda-vmm's VA mapping), IDLE_S seconds (default 8) idle and 3 s after each seed: hundreds of samples, the
#      daemon's own share of an import (handshake, manifest, fds) without the engine's pinning
#   5. daemon B (memfd): `serve --seed-from 127.0.0.1:7070`, SEEDS times, while the engine keeps importing from A:
#      B's seed rate (origin.seeded bytes over seconds), time to ready, 0 bytes from the disk (B_FLAGS on every B's
#      serve); A's engine's median
#      import during the seed (imports whose midpoint falls in B's load) against idle (the issue: within 10%);
#      once, a client's sha256-tree-v1 check of every table B serves (`import --verify-content` the record)
#   6. with a GPU (VMM=1): the probe's multi-process cuMemCreate(HOST_NUMA) rate (bench/experiments/coldstart_probe.c
#      vmm-procs, PROBE_GIB GiB, built here with gcc), then B as `--backend cuda-vmm` seeding from A, the engine
#      importing from A again: B's creation rate (load.create_gib_s) against the probe's (the issue: at least 0.9).
#      A stays memfd: `--seed-listen` with cuda-vmm is refused in this build (docs/seeding.md)
#      VMM_STAGING="0 20G" [VMM_SEEDS=2]: B as cuda-vmm once per --seed-staging size (0: none) and round, interleaved;
#      VMM_REGION_MAX="2G 0": and once per --region-max value (default: no flag, the daemon's own);
#      with EXPORTERS=cuda-vmm, A's own cuda-vmm load from the page cache is the cuda-vmm fill path's stage alone
#      PROBE_EACH=1: the probe in one process alone right before each cuda-vmm B as well, and each B's creation
#      against the probe just before it (the driver's rate moved by up to 19% between two probes of one call)
#      PROBE_AFTER=1: the probe once more after B's cuda-vmm seeds; creation is set against both probes' best and
#      their one-process rates
#   6b. EXPORTERS="cuda-vmm memfd-hugetlb": A again as each of those backends' exporter, B (memfd) seeding from it once
#      while the engine imports from A, and a client's check of every table B serves against the record. Per exporter:
#      with DRIFT_S (and the exporter in DRIFT_ON), first the loop engine alone DRIFT_S seconds, the median import per
#      5 s window (do repeated imports drift? an earlier cuda-vmm run went 321 -> 433 ms over 17); then the engine
#      idle before the seed (IDLE_S s with ENGINE=loop, else IMPORTS imports), during it, and idle after it (B
#      stopped): "idle before X ms (n), during Y (n), idle after Z (n)" with during/before and during/after. A
#      cuda-vmm exporter makes a CPU view of its regions at the first seed request and keeps it, so a slowdown that
#      stays after the seed comes from the view, not from the seeding load. EXPORTERS=memfd works without a GPU.
#   7. COLD=1 and time left: A and B stopped, the page cache dropped, a plain load of the model from the cold disk
#      (time to ready against B's seeded one and A's from the page cache)
# OUT_DIR gets at most 5 files: env.txt, summary.txt, checks.txt (PASS/FAIL of what must hold: every seed from the
# peer, nothing from the disk, digests verified), version.txt and files.tar.gz (every log, STATUS and import line).
set -uo pipefail
OUT=${1:?usage: gpu-seed-run.sh OUT_DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/scripts/lib/own-dir.sh"
own_dir "$OUT" gpu-seed-run   # checks.txt and summary.txt are appended to: an earlier run's lines would count
rm -f "$OUT"/checks.txt "$OUT"/summary.txt "$OUT"/env.txt "$OUT"/version.txt "$OUT"/files.tar.gz
GIB=${GIB:-39}
SEEDS=${SEEDS:-2}
IMPORTS=${IMPORTS:-5}
ENGINE=${ENGINE:-fresh}   # fresh: a C client process per import (--register on a GPU); loop: see engine_loop
IDLE_S=${IDLE_S:-8}
TRANSPORT_GIB=${TRANSPORT_GIB:-8}
[ "$TRANSPORT_GIB" -gt "$GIB" ] && TRANSPORT_GIB=$GIB
PROBE_GIB=${PROBE_GIB:-8}
THREADS=${THREADS:-16}
BUDGET_S=${BUDGET_S:-500}   # the optional parts are skipped past this (the call's limit is 600 s)
ENGINE_TABLES=${ENGINE_TABLES:-}   # name[,name...]: the engine imports only these (engram-attach --table each)
TABLE_ARGS=()
IFS=, read -ra _names <<< "$ENGINE_TABLES"
for _n in "${_names[@]}"; do [ -n "$_n" ] && TABLE_ARGS+=(--table "$_n"); done
DRIFT_S=${DRIFT_S:-0}      # > 0: the loop engine alone this long before each seed from an exporter of DRIFT_ON
DRIFT_ON=${DRIFT_ON:-cuda-vmm}
B_FLAGS=${B_FLAGS:-}       # appended to every `serve` of daemon B
EX_SEEDS=${EX_SEEDS:-1}    # seeds from each exporter of EXPORTERS, each between two idle windows
PIN_A=(); [ -n "${A_CPUS:-}" ] && PIN_A=(taskset -c "$A_CPUS")   # A and its engine on these CPUs
PIN_B=(); [ -n "${B_CPUS:-}" ] && PIN_B=(taskset -c "$B_CPUS")   # B on these (another node's CPUs, as it were)
if [ -n "${A_CPUS:-}${B_CPUS:-}" ] && ! command -v taskset > /dev/null; then
    echo "gpu-seed-run: A_CPUS and B_CPUS need taskset (util-linux), which this machine lacks; leave them unset" >&2; exit 2
fi
read -ra B_EXTRA <<< "$B_FLAGS"
W=${WORK_DIR:-/var/tmp/engram-seed}   # another for a second run on a shared machine (the ports stay 7070, 7071)
R=$W/run
# it removes its own run/, model-* and unpacked release under W: only in a directory it made (or an empty one)
own_dir "$W" gpu-seed-run
rm -rf "$R"
mkdir -p "$R"
PASS=0; FAIL=0
ok() { echo "PASS $*" | tee -a "$OUT/checks.txt"; PASS=$((PASS + 1)); }
bad() { echo "FAIL $*" | tee -a "$OUT/checks.txt"; FAIL=$((FAIL + 1)); }
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
now() { date -u +%H:%M:%S; }
ms() { echo $(( $(date +%s%N) / 1000000 )); }
GPU=0; command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && GPU=1

if [ ! -x "$W/engram-host/bin/engram-host" ]; then
    TARBALL=$(ls ${TARBALL:-$ROOT/dist/engram-host-*-linux-x86_64.tar.gz} 2>/dev/null | head -1)
    [ -f "$TARBALL" ] || { echo "gpu-seed-run: no release tarball (scripts/release/dist.sh makes it; TARBALL=...)" >&2; exit 2; }
    rm -rf "$W/engram-host" "$W"/engram-host-*/
    tar -xzf "$TARBALL" -C "$W" && mv "$W"/engram-host-*/ "$W/engram-host"
fi
EH=$W/engram-host/bin/engram-host
CA=$W/engram-host/bin/engram-attach
RATE=$ROOT/scripts/bench/tcp-rate.py
if [ ${#TABLE_ARGS[@]} -gt 0 ] && ! "$CA" --help 2>/dev/null | grep -q -- '--table NAME'; then
    echo "gpu-seed-run: ENGINE_TABLES needs an engram-attach with --table; $CA has none: an older release kept in $W/engram-host (remove it, or make the bundle again)" >&2
    exit 2
fi
export PYTHONPATH=$W/engram-host/python
"$EH" --version > "$OUT/version.txt" 2>&1
{
    echo "== $(date -u)"; uname -a; nproc; free -g; df -h /var/tmp | tail -1
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    for n in /sys/devices/system/node/node*; do echo "$(basename "$n") cpus $(cat "$n/cpulist")"; done
    cat "$W/engram-host/BUILD" 2>/dev/null
    grep -m1 'model name' /proc/cpuinfo; echo "sha_ni: $(grep -m1 -c -w sha_ni /proc/cpuinfo) (1: the CPU has the SHA extensions)"
    J=$(find "$W/engram-host" "${WORK:-/tmp/engram-gpu}" -path '*/bin/java' -type f 2>/dev/null | head -1)
    [ -n "$J" ] && "$J" -XX:+PrintFlagsFinal -version 2>/dev/null | grep -E ' (UseSHA|UseSHA256Intrinsics) '
} > "$OUT/env.txt" 2>&1
say "== issue 29 seed run, GIB=$GIB SEEDS=$SEEDS IMPORTS=$IMPORTS ENGINE=$ENGINE, $(now); $(head -1 "$OUT/version.txt"); GPU: $GPU; $(nproc) cores"
say "CPUs: A and its engine ${A_CPUS:-any}, B ${B_CPUS:-any}"
say "engine tables: ${ENGINE_TABLES:-all}; B_FLAGS: ${B_FLAGS:-none}; EXPORTERS: ${EXPORTERS:-none}; DRIFT_S=$DRIFT_S (before seeds from ${DRIFT_ON})"

if [ "${PREFAULT_GIB:-0}" -gt 0 ]; then   # 0. the guest's memory touched once (see PREFAULT_GIB above)
    if gcc -O2 -pthread -o "$W/touch_probe" "$ROOT/bench/experiments/touch_probe.c" 2> "$R/touch-build.txt"; then
        "$W/touch_probe" "$PREFAULT_GIB" 8 2 > "$R/prefault.txt" 2>&1
        say "prefault ($PREFAULT_GIB GiB, 8 threads, 2 rounds): $(grep '^round' "$R/prefault.txt" | awk '{printf "%s GiB/s; ", $(NF-1)}')$(grep -m1 'before' "$R/prefault.txt" | sed 's/^ *before: //') at the start"
    else
        say "prefault: not run ($(head -1 "$R/touch-build.txt"))"
    fi
fi

PIDS=()
STAGE_FLAGS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    touch "$R/stop"
    tar -czf "$OUT/files.tar.gz" -C "$W" run 2>/dev/null
}
trap cleanup EXIT

# 1. the model and its digest record
M=$W/model-$GIB
ROWS=$(( GIB * 1024 * 1024 * 1024 / (2 * 264) ))
avail_gib() { df --output=avail -B1G "$W" | tail -1 | tr -d ' '; }
if [ ! -f "$M/engram-digests.json" ]; then
    rm -rf "$W"/model-*
    [ "$(avail_gib)" -ge $(( GIB + 2 )) ] || { bad "generate: $(avail_gib) GiB free in $W, $GIB + 2 needed"; exit 1; }
    t0=$(ms)
    "$EH" generate --model --out "$M" --rows "$ROWS" > "$R/generate.log" 2>&1 || { cat "$R/generate.log"; bad "generate"; exit 1; }
    t1=$(ms)
    "$EH" inspect --write-digests --threads "$THREADS" "$M" > "$R/digests.log" 2>&1 || { tail -3 "$R/digests.log"; bad "inspect --write-digests"; exit 1; }
    say "generated $GIB GiB in $(( t1 - t0 )) ms, digest record in $(( $(ms) - t1 )) ms: $(tail -1 "$R/generate.log" | cut -c1-160)"
    t0=$(ms); sync; say "written back to the disk in $(( $(ms) - t0 )) ms (no writeback under the measurements)"
fi
RECORD=$M/engram-digests.json
SHARD=$(ls -S "$M"/*.safetensors | head -1)
t0=$(ms); cat "$M"/*.safetensors > /dev/null; say "page cache warmed ($(du -sh "$M" | cut -f1)) in $(( $(ms) - t0 )) ms"
head -c 32 /dev/urandom > "$W/seed.key"; chmod 600 "$W/seed.key"

field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@" 2>/dev/null || echo "?"; }
wait_ready() { # SOCKET PID SECONDS
    local i
    for i in $(seq $(( $3 * 10 ))); do
        "$EH" status --ready --socket "$1" > /dev/null 2>&1 && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
stop_daemon() { # SOCKET PID
    "$EH" stop --socket "$1" > /dev/null 2>&1 || kill "$2" 2>/dev/null
    wait "$2" 2>/dev/null
}
ATTACH=(--json "${TABLE_ARGS[@]}")
[ $GPU = 1 ] && ATTACH=(--device 0 --register --json "${TABLE_ARGS[@]}")
engine() { # OUT_FILE: one engine import from A (a fresh C client process): "start_ns end_ns rc json"
    local t0 t1 line rc
    t0=$(date +%s%N)
    line=$("${PIN_A[@]}" "$CA" --socket "$W/a.sock" "${ATTACH[@]}" 2>> "$R/engine.err")
    rc=$?
    t1=$(date +%s%N)
    [ -n "$line" ] || line='{}'
    echo "$t0 $t1 $rc $line" >> "$1"
}
# ENGINE=loop: one C client process importing over and over (`--repeat`, back to back; mmap only, `--device 0` for
# cuda-vmm), each line stamped as it arrives (its start: the arrival less total_ms): many samples per seed
LOOP_ATTACH=(--json "${TABLE_ARGS[@]}")
[ $GPU = 1 ] && LOOP_ATTACH=(--device 0 --json "${TABLE_ARGS[@]}")
stamp() { # "start_ns end_ns 0 json" per line of the C client's
    local line t1
    while IFS= read -r line; do
        t1=$(( ${EPOCHREALTIME/./} * 1000 ))
        [[ $line =~ \"total_ms\":([0-9]+)\.([0-9]{3}) ]] || continue
        echo "$(( t1 - (10#${BASH_REMATCH[1]}${BASH_REMATCH[2]}) * 1000 )) $t1 0 $line"
    done
}
engine_loop() { # OUT_FILE: imports one after another until $R/stop exists
    if [ "$ENGINE" = loop ]; then
        "${PIN_A[@]}" "$CA" --socket "$W/a.sock" "${LOOP_ATTACH[@]}" --repeat 1000000 2>> "$R/engine.err" > >(stamp >> "$1") &
        local c=$!
        while [ ! -e "$R/stop" ] && kill -0 $c 2>/dev/null; do sleep 0.05; done
        kill $c 2>/dev/null; wait $c 2>/dev/null
        sleep 0.2   # the last lines stamped
        return 0
    fi
    while [ ! -e "$R/stop" ]; do engine "$1"; done
}
idle() { # SECONDS COUNT [FILE]: the engine alone: COUNT fresh imports, or with ENGINE=loop SECONDS of them
    local f=${3:-$R/engine-idle.txt}
    if [ "$ENGINE" = loop ]; then
        rm -f "$R/stop"; (sleep "$1"; touch "$R/stop") & local t=$!
        engine_loop "$f"; wait $t; rm -f "$R/stop"
    else
        for _ in $(seq "$2"); do engine "$f"; done
    fi
}

# 2. daemon A
"${PIN_A[@]}" "$EH" serve --checkpoint "$M" --backend memfd --socket "$W/a.sock" --numa none --threads "$THREADS" \
    --seed-listen 127.0.0.1:7070 --seed-key "$W/seed.key" > "$R/a.log" 2>&1 &
A=$!; PIDS+=("$A")
wait_ready "$W/a.sock" "$A" 420 || { bad "A ready"; tail -5 "$R/a.log"; exit 1; }
"$EH" status --socket "$W/a.sock" --json > "$R/a.json"
say "A (memfd, from the page cache): $(field "$R/a.json" '"ready_s %.3f, read_s %.3f, read_gib_s %.3f, create_s %.3f, verify_seal_s %.3f" % (d["ready_s"], d["load"]["read_s"], d["load"]["read_gib_s"], d["load"]["create_s"], d["load"]["verify_seal_s"])')"
BYTES=$(field "$R/a.json" 'd["bytes"]')
if [ -n "$ENGINE_TABLES" ]; then  # every name one A serves, else no engine import could succeed
    missing=$(python3 -c 'import json, sys; have = {t["name"] for t in json.load(open(sys.argv[1]))["tables"]}; print(" ".join(n for n in sys.argv[2].split(",") if n and n not in have))' "$R/a.json" "$ENGINE_TABLES" 2>&1)
    [ -z "$missing" ] || { bad "ENGINE_TABLES: A serves no table named $missing (\`engram-host status\` lists them; leave ENGINE_TABLES unset for all)"; exit 1; }
    say "engine tables: $(python3 -c 'import json, sys; t = {t["name"]: t["bytes"] for t in json.load(open(sys.argv[1]))["tables"]}; print(", ".join(f"{n} ({t[n] / 2**30:.2f} GiB)" for n in sys.argv[2].split(",") if n))' "$R/a.json" "$ENGINE_TABLES")"
fi

# 3. the transport alone
transport() { # LABEL [memfd]
    python3 "$RATE" recv 127.0.0.1:7071 "$THREADS" ${2:-} > "$R/transport-$1.txt" 2>&1 &
    local r=$!
    for _ in $(seq 100); do grep -q listening "$R/transport-$1.txt" 2>/dev/null && break; sleep 0.05; done
    python3 "$RATE" send 127.0.0.1:7071 "$THREADS" "$SHARD" $(( TRANSPORT_GIB << 30 )) 2>> "$R/transport-$1.txt"
    wait $r
    say "transport alone, loopback, $THREADS streams, $TRANSPORT_GIB GiB, $1: $(tail -1 "$R/transport-$1.txt")"
}
transport buffer
transport memfd memfd

# 4. the engine, idle
rm -f "$R/stop"
idle "$IDLE_S" "$IMPORTS"

# 5. B seeds (memfd), the engine importing from A meanwhile
cpu_s() { # PID: its CPU seconds so far (user + system), or 0 once it is gone
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$1/stat" 2>/dev/null || echo 0
}
busy_ticks() { awk '/^cpu /{ print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
reclaim_pages() { # "ALL DIRECT": pages the kernel reclaimed so far (pgsteal_*), and those by direct reclaim
    awk '/^pgsteal_(kswapd|direct|khugepaged|proactive) / {a += $2} /^pgsteal_direct / {d += $2} END {print a + 0, d + 0}' /proc/vmstat
}
seed_b() { # LABEL BACKEND: B seeds from A while the engine imports from A; B's STATUS in $R/b-LABEL.json
    local label=$1 backend=$2
    rm -f "$R/stop" "$W/b.sock"
    engine_loop "$R/engine-$label.txt" &
    local loop=$!
    sleep 0.5   # the engine's first import under way before B starts
    # B_DROP_CACHE=1: the page cache dropped before B starts. On a fleet B's node reads only the checkpoint's
    # headers, so its page cache does not hold the tables; on loopback it holds what A and the stages read, and an
    # allocation of B's that needs that memory reclaims it first (the memory line below counts it)
    [ "${B_DROP_CACHE:-0}" = 1 ] && { sync; echo 1 > /proc/sys/vm/drop_caches; }
    local mem0 vm0
    mem0=$(awk '/^MemFree:/ {f = $2} /^Cached:/ {c = $2} /^Shmem:/ {s = $2} END {printf "%.1f %.1f", f / 2^20, (c - s) / 2^20}' /proc/meminfo)   # page cache: Cached less Shmem (memfd tables)
    vm0=$(reclaim_pages)
    local t0
    t0=$(date +%s%N)
    local a_cpu0 busy0
    a_cpu0=$(cpu_s "$A"); busy0=$(busy_ticks)
    "${PIN_B[@]}" "$EH" serve --checkpoint "$M" --backend "$backend" --socket "$W/b.sock" --numa none --threads "$THREADS" \
        --seed-from 127.0.0.1:7070 --seed-key "$W/seed.key" "${STAGE_FLAGS[@]}" "${B_EXTRA[@]}" > "$R/b-$label.log" 2>&1 &
    B=$!; PIDS+=("$B")
    if ! wait_ready "$W/b.sock" "$B" 420; then
        touch "$R/stop"; wait $loop
        bad "$label: B ready"; tail -5 "$R/b-$label.log"; return 1
    fi
    touch "$R/stop"
    # where the CPU went while B loaded: B's own, A's (the exporter's sends) and the machine's
    local busy1 b_cpu a_cpu
    busy1=$(busy_ticks); b_cpu=$(cpu_s "$B"); a_cpu=$(cpu_s "$A")
    "$EH" status --socket "$W/b.sock" --json > "$R/b-$label.json"
    echo "$t0" > "$R/b-$label.start"
    wait $loop
    local got
    got=$(field "$R/b-$label.json" '"%s %s %s" % (d["origin"]["how"], d["origin"]["checkpoint_bytes_read"], d["origin"]["seeded"]["bytes"] == d["bytes"])')
    [ "$got" = "seed 0 True" ] && ok "$label: B seeded every byte from A, 0 bytes from the disk" \
        || bad "$label: B's origin: $(field "$R/b-$label.json" 'd["origin"]')"
    say "B $label: $(field "$R/b-$label.json" '"seed %.3f GiB/s (%d bytes in %.3f s), ready_s %.3f (%.3f from the process start), create_s %.3f (%.2f GiB/s), verify_seal_s %.3f" % (d["origin"]["seeded"]["bytes"] / d["origin"]["seeded"]["seconds"] / 2**30, d["origin"]["seeded"]["bytes"], d["origin"]["seeded"]["seconds"], d["ready_s"], d["process_ready_s"], d["load"]["create_s"], d["load"]["create_gib_s"], d["load"]["verify_seal_s"])')"
    say "  memory at B's start: $(echo "$mem0" | awk '{printf "%s GiB free, %s GiB page cache", $1, $2}')$([ "${B_DROP_CACHE:-0}" = 1 ] && echo " (dropped first)"); reclaimed while B loaded: $(echo "$vm0 $(reclaim_pages)" | awk '{printf "%.1f GiB, %.1f GiB of it by direct reclaim (in an allocating thread)", ($3 - $1) * 4096 / 2^30, ($4 - $2) * 4096 / 2^30}')"
    say "  CPU while B loaded: B $b_cpu s, A $(awk -v a="$a_cpu" -v b="$a_cpu0" 'BEGIN { printf "%.2f", a - b }') s, the machine $(echo "$busy0 $busy1" | awk -v n="$(nproc)" '{ printf "%.0f%% busy of %d cores", 100 * ($3 - $1) / ($4 - $2), n }')"
}
# a client's check of every table B serves, against the record
verify_b() { # LABEL
    local t0 v cv cn ct
    t0=$(ms)
    local dev=(); [ "$(field "$R/b-$1.json" 'd["backend"]')" = cuda-vmm ] && dev=(--gpu --device 0 --cpu-view)
    if "$EH" import --socket "$W/b.sock" "${dev[@]}" --verify-content "$RECORD" --verify-threads "$THREADS" --json \
        > "$R/b-verify-$1.json" 2> "$R/b-verify-$1.err"; then
        v=$(field "$R/b-verify-$1.json" '"%d %d %d" % (d["content_check"]["verified"], d["content_check"]["not_checked"], len(d["tables"]))')
        read -r cv cn ct <<< "$v"
        [ "$cv" = "$ct" ] && [ "$cn" = 0 ] && ok "$1: a client verified all $ct of B's tables' sha256-tree-v1 against the record ($(( $(ms) - t0 )) ms)" \
            || bad "$1: B's content check: verified $cv, not checked $cn, of $ct"
    else
        bad "$1: import --verify-content on B: $(tail -2 "$R/b-verify-$1.err")"
    fi
}
for i in $(seq "$SEEDS"); do
    seed_b "memfd-$i" memfd || continue
    [ "$i" = 1 ] && verify_b "memfd-$i"
    stop_daemon "$W/b.sock" "$B"
    idle 3 2   # idle again, after each seed: the baseline's drift
done

# 6. cuda-vmm: the probe, then B as cuda-vmm
if [ $GPU = 1 ] && [ "${VMM:-1}" = 1 ]; then
    if [ "$(avail_gib)" -lt $(( PROBE_GIB + 1 )) ]; then
        say "probe: not run ($(avail_gib) GiB free in $W, $PROBE_GIB + 1 needed for its file)"
    elif [ $SECONDS -lt $(( BUDGET_S - 120 )) ] && gcc -O2 -pthread -o "$W/probe" "$ROOT/bench/experiments/coldstart_probe.c" -ldl 2> "$R/probe-build.txt"; then
        "$W/probe" "$W/probe.bin" "$PROBE_GIB" "$THREADS" 4 vmm-procs > "$R/probe.txt" 2>&1
        rm -f "$W/probe.bin"
        say "probe (cuMemCreate HOST_NUMA, $PROBE_GIB GiB): $(grep 'create' "$R/probe.txt" | awk '{printf "%s procs %s GiB/s; ", $3, $(NF-1)}')"
    else
        say "probe: not run ($( [ -s "$R/probe-build.txt" ] && head -1 "$R/probe-build.txt" || echo "time: $SECONDS s used"))"
    fi
    # VMM_STAGING="0 20G": B once per value and round (VMM_SEEDS rounds, interleaved), --seed-staging of that size
    # VMM_REGION_MAX="2G 0": and once per --region-max value (default: the daemon's own, no flag)
    for i in $(seq "${VMM_SEEDS:-1}"); do
        for st in ${VMM_STAGING:-0}; do
          for rm in ${VMM_REGION_MAX:-default}; do
            lab=cuda-vmm; [ "$st" != 0 ] && lab=cuda-vmm-staging-$st
            [ "$rm" != default ] && lab=$lab-rm$rm
            [ "${VMM_SEEDS:-1}" -gt 1 ] && lab=$lab-$i
            if [ $SECONDS -ge $(( BUDGET_S - 60 )) ]; then say "B $lab: not run ($SECONDS s used of $BUDGET_S)"; continue; fi
            STAGE_FLAGS=(); [ "$st" != 0 ] && STAGE_FLAGS=(--seed-staging "$st")
            [ "$rm" != default ] && STAGE_FLAGS+=(--region-max "$rm")
            if [ "${PROBE_EACH:-0}" = 1 ] && [ -x "$W/probe" ]; then   # the driver's rate right before this B
                "$W/probe" "$W/probe-each.bin" "$PROBE_GIB" 1 4 vmm-procs > "$R/probe-before-$lab.txt" 2>&1
                say "probe right before B $lab: $(grep 'create' "$R/probe-before-$lab.txt" | awk '{printf "%s GiB/s", $(NF-1)}')"
            fi
            seed_b "$lab" cuda-vmm || continue
            [ "$i" = 1 ] && { [ "$st" != 0 ] || [ "$rm" != default ]; } && verify_b "$lab"
            say "  B $lab: $(field "$R/b-$lab.json" '"%d regions for %d tables" % (d["regions"], len(d["tables"]))')"
            stop_daemon "$W/b.sock" "$B"
          done
        done
    done
    STAGE_FLAGS=()
    rm -f "$W/probe-each.bin"
    # PROBE_AFTER=1: the probe again, after the cuda-vmm seeds: the driver's rate on both sides of B's creations (the
    # machine's rate moves within a call; a first-touched guest memory is slower)
    if [ "${PROBE_AFTER:-0}" = 1 ] && [ -x "$W/probe" ] && [ $SECONDS -lt $(( BUDGET_S - 90 )) ]; then
        "$W/probe" "$W/probe.bin" "$PROBE_GIB" "$THREADS" 4 vmm-procs > "$R/probe-after.txt" 2>&1
        rm -f "$W/probe.bin"
        say "probe after the cuda-vmm seeds: $(grep 'create' "$R/probe-after.txt" | awk '{printf "%s procs %s GiB/s; ", $3, $(NF-1)}')"
    fi
else
    say "cuda-vmm and the probe: not run (GPU $GPU, VMM ${VMM:-1})"
fi
stop_daemon "$W/a.sock" "$A"

# 6b. EXPORTERS (e.g. "cuda-vmm memfd-hugetlb"): A again, as that backend's exporter, and B (memfd) seeds from it
# once while the engine imports from A; a client checks every table B serves against the record
for ex in ${EXPORTERS:-}; do
    if [ $SECONDS -gt $(( BUDGET_S - 60 )) ]; then say "A as $ex: not run ($SECONDS s used of $BUDGET_S)"; continue; fi
    [ "$ex" = cuda-vmm ] && [ $GPU = 0 ] && { say "A as cuda-vmm: not run (no GPU)"; continue; }
    if [ "$ex" = memfd-hugetlb ]; then
        HUGE0=$(cat /proc/sys/vm/nr_hugepages); echo $(( HUGE0 + GIB * 512 + 64 )) > /proc/sys/vm/nr_hugepages
    fi
    t0=$(ms); cat "$M"/*.safetensors > /dev/null   # the page cache again (the seeds before may have pushed it out)
    say "page cache warmed again for A as $ex in $(( $(ms) - t0 )) ms"
    "${PIN_A[@]}" "$EH" serve --checkpoint "$M" --backend "$ex" --socket "$W/a.sock" --numa none --threads "$THREADS" \
        --seed-listen 127.0.0.1:7070 --seed-key "$W/seed.key" > "$R/a-$ex.log" 2>&1 &
    A=$!; PIDS+=("$A")
    if wait_ready "$W/a.sock" "$A" 300; then
        "$EH" status --socket "$W/a.sock" --json > "$R/a-$ex.json"
        say "A as $ex: $(field "$R/a-$ex.json" '"ready_s %.3f, read_gib_s %.3f, create_s %.3f" % (d["ready_s"], d["load"]["read_gib_s"], d["load"]["create_s"])')"
        if [ "$DRIFT_S" -gt 0 ] && [[ " $DRIFT_ON " == *" $ex "* ]]; then  # repeated imports alone: do they drift?
            ENGINE=loop idle "$DRIFT_S" 0 "$R/engine-drift-$ex.txt"
        fi
        for k in $(seq "$EX_SEEDS"); do   # EX_SEEDS rounds of: idle, a seed, idle
            sfx=""; [ "$EX_SEEDS" -gt 1 ] && sfx=-$k
            if [ $SECONDS -gt $(( BUDGET_S - 45 )) ]; then say "B from-$ex$sfx: not run ($SECONDS s used of $BUDGET_S)"; continue; fi
            idle "$IDLE_S" "$IMPORTS" "$R/engine-idle-$ex$sfx.txt"   # this exporter's engine alone: its own baseline
            seed_b "from-$ex$sfx" memfd && { [ "$k" = 1 ] && verify_b "from-$ex$sfx"; stop_daemon "$W/b.sock" "$B"; }
            # and after the seed, B stopped: a slowdown that persists comes from what the seed left behind in A (a
            # cuda-vmm exporter makes a CPU view of its regions at the first seed request and keeps it), not the load
            idle "$IDLE_S" "$IMPORTS" "$R/engine-idle-after-$ex$sfx.txt"
        done
        if [ "${SINK_ROUNDS:-0}" -gt 0 ]; then   # the exporter's engine while a sink, not a second daemon, seeds
            python3 "$ROOT/scripts/bench/seed-sink.py" 127.0.0.1:7070 "$W/seed.key" "$THREADS" 1 > "$R/sink-warm-$ex.json" 2>&1
            for k in $(seq "$SINK_ROUNDS"); do
                if [ $SECONDS -gt $(( BUDGET_S - 30 )) ]; then say "sink round $k from $ex: not run ($SECONDS s used of $BUDGET_S)"; k=$(( k - 1 )); break; fi
                idle "$IDLE_S" "$IMPORTS" "$R/engine-sinkidle-$ex-$k.txt"
                rm -f "$R/stop"
                engine_loop "$R/engine-sink-$ex-$k.txt" &
                loop=$!
                sleep 0.5
                echo "$(date +%s%N)" > "$R/sink-$ex-$k.start"
                python3 "$ROOT/scripts/bench/seed-sink.py" 127.0.0.1:7070 "$W/seed.key" "$THREADS" "${SINK_S:-8}" \
                    > "$R/sink-$ex-$k.json" 2> "$R/sink-$ex-$k.err" || bad "sink round $k from $ex: $(tail -1 "$R/sink-$ex-$k.err")"
                echo "$(date +%s%N)" > "$R/sink-$ex-$k.end"
                touch "$R/stop"; wait $loop
                say "sink round $k from $ex: $(cat "$R/sink-$ex-$k.json")"
            done
            idle "$IDLE_S" "$IMPORTS" "$R/engine-sinkidle-$ex-$(( k + 1 )).txt"
        fi
        grep -E "seed: (a CPU view|peer .*failed)" "$R/a-$ex.log" | head -3 | while read -r l; do say "  A: ${l#*engram-host: }"; done
    else
        bad "A as $ex: ready"; tail -3 "$R/a-$ex.log"
    fi
    stop_daemon "$W/a.sock" "$A"
    [ "$ex" = memfd-hugetlb ] && echo "$HUGE0" > /proc/sys/vm/nr_hugepages
done

# 7. a load from the cold disk
if [ "${COLD:-1}" = 1 ] && [ $(( SECONDS + GIB * 3 / 2 + 20 )) -lt "$BUDGET_S" ]; then
    sync; echo 3 > /proc/sys/vm/drop_caches
    "$EH" serve --checkpoint "$M" --backend memfd --socket "$W/c.sock" --numa none --threads "$THREADS" > "$R/cold.log" 2>&1 &
    C=$!; PIDS+=("$C")
    if wait_ready "$W/c.sock" "$C" 300; then
        "$EH" status --socket "$W/c.sock" --json > "$R/cold.json"
        say "cold-disk load (memfd): $(field "$R/cold.json" '"ready_s %.3f (%.3f from the process start), read_gib_s %.3f" % (d["ready_s"], d["process_ready_s"], d["load"]["read_gib_s"])')"
    else
        bad "cold-disk load: ready"
    fi
    stop_daemon "$W/c.sock" "$C"
else
    say "cold-disk load: not run (COLD ${COLD:-1}, $SECONDS s used of $BUDGET_S)"
fi

ENGINE=$ENGINE ENGINE_TABLES=$ENGINE_TABLES python3 - "$R" "$BYTES" "$GPU" <<'PY' | tee -a "$OUT/summary.txt"
import glob, json, os, re, statistics, sys
R, total, gpu = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
def med(v): return statistics.median(v) if v else float("nan")
def imports(p):
    out = []
    for line in open(p) if os.path.exists(p) else []:
        t0, t1, rc, js = line.split(" ", 3)
        try:
            d = json.loads(js)
        except Exception:
            d = {}
        out.append((int(t0), int(t1), int(rc), d.get("total_ms"), d.get("attach_ms"), d.get("attached_bytes")))
    return out
def ok(p): return [x for x in imports(p) if x[2] == 0 and x[3] is not None]
a = load(f"{R}/a.json")
names = [n for n in os.environ.get("ENGINE_TABLES", "").split(",") if n]
sizes = {t["name"]: t["bytes"] for t in a["tables"]} if a else {}
# ms/GiB over what the engine imports: every table, or ENGINE_TABLES' (their bytes, from A's STATUS)
gib = (sum(sizes.get(n, 0) for n in names) if names else total) / 2**30
idle = ok(f"{R}/engine-idle.txt")
mi = med([x[3] for x in idle])
loop = os.environ.get("ENGINE") == "loop"
how = ("one process, back to back (--repeat), mmap only" if loop else
       "a process each, " + ("mmap + cuMemHostRegister" if gpu else "mmap only: no GPU"))
mapped = med([x[5] for x in idle if x[5] is not None]) / 2**30
what = (", ".join(f"{n} ({sizes.get(n, float('nan')) / 2**30:.2f} GiB)" for n in names) +
        f", {mapped:.2f} GiB of regions mapped" if names else f"all A's {gib:.1f} GiB")
print(f"== engine (C client, {how}) import{'s' if len(names) != 1 else ''} of {what}")
def few(v): return ", ".join(f"{x[3]:.1f}" for x in v) if len(v) <= 20 else \
    f"p10 {statistics.quantiles([x[3] for x in v], n=10)[0]:.2f}, p90 {statistics.quantiles([x[3] for x in v], n=10)[-1]:.2f}"
print(f"idle: median total_ms {mi:.2f} ({mi / gib:.3f} ms/GiB), attach_ms {med([x[4] for x in idle]):.2f}; n={len(idle)} "
      f"[{few(idle)}]")
fill = a["load"]["read_gib_s"] if a else float("nan")
tr = {}
for k in ("buffer", "memfd"):
    try:
        tr[k] = json.loads(open(f"{R}/transport-{k}.txt").read().strip().splitlines()[-1])["gib_s"]
    except Exception:
        tr[k] = float("nan")
def probe(path):  # {processes: GiB/s} of one probe run's creation lines
    out = {}
    for l in (open(path) if os.path.exists(path) else []):
        if "create" in l and "GiB/s" in l:
            out[int(l.split()[2])] = float(l.split()[-2])
    return out
pb, pa = probe(f"{R}/probe.txt"), probe(f"{R}/probe-after.txt")
rates = list(pb.values()) + list(pa.values())
one = [r[1] for r in (pb, pa) if 1 in r]   # the one-process rate, before (and after): the daemon is one process
av = load(f"{R}/a-cuda-vmm.json")
vfill = av["load"]["read_gib_s"] if av else float("nan")
ex_rounds = {}
for p in sorted(glob.glob(f"{R}/b-*.json")):
    label = os.path.basename(p)[2:-5]
    if label == "verify" or label.startswith("verify-"):
        continue
    b = load(p)
    start = int(open(f"{R}/b-{label}.start").read())
    end = start + b["process_ready_s"] * 1e9
    begin = end - b["ready_s"] * 1e9
    during = [x for x in imports(f"{R}/engine-{label}.txt") if x[2] == 0 and x[3] is not None and begin <= (x[0] + x[1]) / 2 <= end]
    md = med([x[3] for x in during])
    if label.startswith("from-") and os.path.exists(f"{R}/engine-idle-{label[5:]}.txt"):  # A was that exporter
        base = ok(f"{R}/engine-idle-{label[5:]}.txt")
    else:
        base = idle
    mi = med([x[3] for x in base])
    s = b["origin"]["seeded"]
    rate = s["bytes"] / s["seconds"] / 2**30 if s.get("seconds") else float("nan")
    slow = min(fill, tr["buffer"])
    if b["backend"] == "cuda-vmm":  # its own fill path from memory (A as cuda-vmm) and cuMemCreate are stages too
        slow = min([slow] + ([vfill] if vfill == vfill else []) + ([max(rates)] if rates else []))
    print(f"B {label}: seed {rate:.3f} GiB/s, ready_s {b['ready_s']:.3f}; seed / A's fill from memory ({fill:.3f}) {rate / fill:.2f},"
          f" seed / transport alone ({tr['buffer']:.3f}) {rate / tr['buffer']:.2f}, seed / transport into memfd ({tr['memfd']:.3f})"
          f" {rate / tr['memfd']:.2f}; against the slowest stage alone ({slow:.3f}): {rate / slow:.2f} (target 0.9)")
    if b["backend"] == "cuda-vmm":
        print(f"  cuda-vmm creation: create_s {b['load']['create_s']:.3f}, {b['load']['create_gib_s']:.2f} GiB/s"
              + (f" ({b['load']['create_gib_s'] / max(rates):.2f} of the probe's {max(rates):.2f})" if rates else "")
              + f"; staged {s.get('staged_bytes', 0) / 2**30:.2f} GiB; seed / A-as-cuda-vmm's fill from memory"
              f" ({vfill:.3f}) {rate / vfill:.2f}; seed / the probe {rate / max(rates) if rates else float('nan'):.2f}")
    print(f"  A's engine during B's load: median total_ms {md:.2f} (n={len(during)}) against idle {mi:.2f} (n={len(base)}, [{few(base)}]): "
          f"{100 * (md - mi) / mi:+.1f}% (the issue: within 10%) [{few(during)}]")
    if label.startswith("from-") and os.path.exists(f"{R}/engine-idle-after-{label[5:]}.txt"):
        after = ok(f"{R}/engine-idle-after-{label[5:]}.txt")
        ma = med([x[3] for x in after])
        print(f"  A as {label[5:]}: idle before {mi:.2f} ms (n={len(base)}), during {md:.2f} (n={len(during)}), idle after"
              f" {ma:.2f} (n={len(after)}); during/before {md / mi:.2f}, during/after {md / ma:.2f}"
              f" (a slowdown that stays after the seed is not the seeding load's)")
        ex_rounds.setdefault(re.sub(r"-[0-9]+$", "", label[5:]) if os.environ.get("EX_SEEDS", "1") != "1" else label[5:],
                             []).append((md / mi, md / ma))
    if a:
        print(f"  time to ready: B seeded {b['ready_s']:.3f} s against A's load from the page cache {a['ready_s']:.3f} s")
for ex, v in ex_rounds.items():  # EX_SEEDS: each round's during/before and during/after, and their medians
    if len(v) > 1:
        print(f"A as {ex}, {len(v)} seeds: during/before {', '.join(f'{x[0]:.2f}' for x in v)} (median {med([x[0] for x in v]):.2f}),"
              f" during/after {', '.join(f'{x[1]:.2f}' for x in v)} (median {med([x[1] for x in v]):.2f}) (the issue: within 10%)")
for p in sorted(glob.glob(f"{R}/sink-*-1.start")):  # SINK_ROUNDS: the engine while a sink seeds, against idle
    ex = os.path.basename(p)[5:-8]
    rows, all_during, all_idle = [], [], []
    for k in range(1, 1000):
        if not os.path.exists(f"{R}/sink-{ex}-{k}.end"):
            break
        t0, t1 = int(open(f"{R}/sink-{ex}-{k}.start").read()), int(open(f"{R}/sink-{ex}-{k}.end").read())
        during = [x[3] for x in ok(f"{R}/engine-sink-{ex}-{k}.txt") if t0 <= (x[0] + x[1]) / 2 <= t1]
        before = [x[3] for x in ok(f"{R}/engine-sinkidle-{ex}-{k}.txt")]
        after = [x[3] for x in ok(f"{R}/engine-sinkidle-{ex}-{k + 1}.txt")]
        try:
            gs = json.loads(open(f"{R}/sink-{ex}-{k}.json").read())["gib_s"]
        except Exception:
            gs = float("nan")
        rows.append((med(during), med(before), med(after), len(during), gs))
        all_during += during
        all_idle += (before if k == 1 else []) + after   # each idle window once (round k's after is k+1's before)
    if rows:
        print(f"A as {ex}, the engine while a sink seeds ({len(rows)} rounds; each: during ms (n), the sink's GiB/s,"
              f" during/before, during/after): " + "; ".join(f"{d:.2f} ({n}), {g:.2f} GiB/s, {d / b:.2f}, {d / a:.2f}"
                                                        for d, b, a, n, g in rows))
        print(f"  every sink window's imports against every idle window's: median {med(all_during):.2f} ms"
              f" (n={len(all_during)}) against {med(all_idle):.2f} (n={len(all_idle)}): {med(all_during) / med(all_idle):.3f}"
              f"; per round during/before median {med([d / b for d, b, _, _, _ in rows]):.2f} (the issue: within 10%)")
for p in sorted(glob.glob(f"{R}/engine-drift-*.txt")):  # DRIFT_S: the loop engine alone before a seed
    v = ok(p)
    if not v:
        print(f"drift, A as {os.path.basename(p)[13:-4]}: no import succeeded")
        continue
    t0 = v[0][0]
    windows = {}
    for x in v:
        windows.setdefault((x[0] - t0) // 5_000_000_000, []).append(x[3])
    span = v[-1][1] - t0   # the last window counts only when whole (a few imports in a part window mislead)
    w = [(k, med(windows[k]), len(windows[k])) for k in sorted(windows) if (k + 1) * 5_000_000_000 <= span] \
        or [(k, med(windows[k]), len(windows[k])) for k in sorted(windows)]
    print(f"drift, A as {os.path.basename(p)[13:-4]}, the loop engine alone {(v[-1][1] - t0) / 1e9:.0f} s, {len(v)} imports:"
          f" median import per 5 s window {', '.join(f'{m:.2f} (n={n})' for _, m, n in w)} ms;"
          f" last window / first {w[-1][1] / w[0][1]:.2f}")
for p in sorted(glob.glob(f"{R}/probe-before-*.txt")):  # PROBE_EACH: each B's creation against the probe just before it
    lab = os.path.basename(p)[13:-4]
    bv, pr = load(f"{R}/b-{lab}.json"), probe(p).get(1)
    if bv and pr:
        print(f"cuda-vmm {lab}: B's creation {bv['load']['create_gib_s']:.2f} GiB/s against the probe just before it"
              f" {pr:.2f} GiB/s (one process): {bv['load']['create_gib_s'] / pr:.2f} (target 0.9)")
        sd = bv["origin"]["seeded"]
        if sd["seconds"] > 0:   # the seed as a whole, first region created to last table verified
            g = sd["bytes"] / sd["seconds"] / 2**30
            print(f"cuda-vmm {lab}: the seed as a whole {g:.2f} GiB/s ({sd['bytes'] / 2**30:.1f} GiB in"
                  f" {sd['seconds']:.2f} s; {bv['regions']} regions) against the probe just before it: {g / pr:.2f}"
                  f" (target 0.9); ready_s {bv['ready_s']:.2f}")
c = load(f"{R}/cold.json")
if c:
    print(f"cold-disk load: ready_s {c['ready_s']:.3f}, read_gib_s {c['load']['read_gib_s']:.3f}")
if rates:
    for p in sorted(glob.glob(f"{R}/b-cuda-vmm*.json")):
        bv = load(p)
        cr = bv["load"]["create_gib_s"]
        print(f"cuda-vmm {os.path.basename(p)[2:-5]}: B's creation {cr:.2f} GiB/s against the probe's cuMemCreate {max(rates):.2f} GiB/s (best of 1-8 processes"
              f"{', before and after' if pa else ''}): {cr / max(rates):.2f} (target 0.9)"
              + (f"; against its one-process rate {' and '.join(f'{x:.2f}' for x in one)} GiB/s (before{' and after' if len(one) > 1 else ''}):"
                 f" {' and '.join(f'{cr / x:.2f}' for x in one)}" if one else ""))
PY
say "checks: $PASS passed, $FAIL failed ($(now), $SECONDS s)"
[ "$FAIL" = 0 ]

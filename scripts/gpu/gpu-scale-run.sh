#!/usr/bin/env bash
# Issue 15 on the two-GPU H200 (nvidia-h200-x2), as an operator runs it: the release tarball (scripts/release/dist.sh), no
# Java on the machine, one part per device call (each under 9 minutes). Run from the repository root:
#   TARBALL=dist/engram-host-*-linux-x86_64.tar.gz [GIB=100] PART=... bash scripts/gpu/gpu-scale-run.sh OUT_DIR
# Parts:
#   env      the machine: GPUs and their NUMA nodes (sysfs, nvidia-smi topo), NUMA nodes, MemTotal now; how many
#            2 MiB huge pages can be reserved of the GIB GiB asked (then given back)
#   serve    for each of BACKENDS (default: memfd memfd-hugetlb cuda-vmm): a V4.1-layout checkpoint of GIB GiB
#            (4 layers x 264-byte rows: layers.L.engram.embed.weight and .scale for L in 0..3 and a config.json
#            naming them, which serve selects by; generated once into /var/tmp, kept for later calls),
#            `serve --threads 16`,
#            its STATUS load phases, the daemon's anonymous memory once ready and after the imports, then IMPORTS
#            (default 3) fresh-process imports with a GPU view, Java CLI and C client interleaved; attach ms/GiB of each
#   engines  one daemon with `--gpus 0,1 --device-tensors DEVICE_TENSORS` (default layers.0.engram.embed.*: layer 0's
#            tables; backend ENGINE_BACKEND, default cuda-vmm) on ENGINE_GIB GiB (default 8): two engine processes at
#            once, one per GPU, each importing every
#            table with a GPU view and verifying every table through it with a GPU kernel (`import --gpu --device N
#            --verify`), first two Python engines (python -m engram_host, with --cpu-view: the GPU compares its view
#            with the CPU's; a device tensor's bytes are copied back and digested in pure Python, about 60 MB/s, hence
#            the smaller checkpoint), then two Java ones
#   anon     the daemon's anonymous memory at 1 GiB and at GIB GiB (memfd), for its growth
# Memory that appears only as it is used: when MemTotal is below what the tables need plus 16 GiB, serve gets
# `--memory-budget` of that (MEMORY_BUDGET overrides, e.g. 200G; MEMORY_BUDGET=none never passes it).
# Without a GPU (nvidia-smi absent) the imports are CPU views and `engines` is skipped: a dry run of the script.
# Every step's output goes to OUT_DIR; summary.txt has the figures, checks.txt one PASS/FAIL line per check.
set -uo pipefail
OUT=${1:?usage: gpu-scale-run.sh OUT_DIR}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
GIB=${GIB:-100}
PART=${PART:-serve}
IMPORTS=${IMPORTS:-3}
W=/var/tmp/engram-scale
mkdir -p "$W"
PASS=0; FAIL=0
ok() { echo "PASS $*" | tee -a "$OUT/checks.txt"; PASS=$((PASS + 1)); }
bad() { echo "FAIL $*" | tee -a "$OUT/checks.txt"; FAIL=$((FAIL + 1)); }
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
now() { date -u +%H:%M:%S; }
mem_gib() { awk -v k="$1:" '$1 == k {printf "%.1f", $2 / 1048576}' /proc/meminfo; }
GPU=0; command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && GPU=1

# The release, unpacked once per machine (a warm machine keeps it)
if [ ! -x "$W/engram-host/bin/engram-host" ]; then
    TARBALL=$(ls ${TARBALL:-$ROOT/dist/engram-host-*-linux-x86_64.tar.gz} 2>/dev/null | head -1)
    [ -f "$TARBALL" ] || { echo "gpu-scale-run: no release tarball (scripts/release/dist.sh makes it; TARBALL=...)" >&2; exit 2; }
    rm -rf "$W/engram-host" "$W"/engram-host-*/
    tar -xzf "$TARBALL" -C "$W" && mv "$W"/engram-host-*/ "$W/engram-host"
fi
EH=$W/engram-host/bin/engram-host
CA=$W/engram-host/bin/engram-attach
export PYTHONPATH=$W/engram-host/python
"$EH" --version > "$OUT/version.txt" 2>&1
say "== $PART, GIB=$GIB, $(now); $(head -1 "$OUT/version.txt"); MemTotal $(mem_gib MemTotal) GiB, MemFree $(mem_gib MemFree) GiB; GPU: $GPU"

wait_ready() { # SOCKET SECONDS DAEMON_PID: status --ready until it exits 0, or the daemon is gone
    local i
    for i in $(seq $(( $2 * 5 ))); do
        "$EH" status --ready --socket "$1" >/dev/null 2>&1 && return 0
        kill -0 "$3" 2>/dev/null || return 1
        sleep 0.2
    done
    return 1
}
anon_mib() { # PID: the process's anonymous memory (RssAnon), MiB
    awk '$1 == "RssAnon:" {printf "%.1f", $2 / 1024}' "/proc/$1/status" 2>/dev/null
}
checkpoint() { # GIB: the V4.1-layout checkpoint's directory, generated if absent (one size kept at a time)
    local gib=$1 rows ck
    rows=$(( gib * 1024 * 1024 * 1024 / (4 * 264) ))
    ck=$W/ck-$gib
    # one of an older generate (no config.json: the tables were engram.layers.N.embedding.*) is written again
    if [ ! -f "$ck/model.safetensors" ] || [ ! -f "$ck/config.json" ]; then
        rm -rf "$ck"  # generate writes only into a new or empty directory
        # the disk may hold only one large checkpoint: drop the others when this one would not fit beside them
        [ "$(df --output=avail -B1G "$W" | tail -1)" -lt $(( gib + 4 )) ] && rm -rf "$W"/ck-*
        local t0=$SECONDS
        "$EH" generate --out "$ck" --rows "$rows" --dim 256 --layers 0,1,2,3 --single-file > "$OUT/generate-$gib.log" 2>&1 \
            || { tail -3 "$OUT/generate-$gib.log" >&2; return 1; }
        say "generated $gib GiB ($rows rows x 4 layers) in $(( SECONDS - t0 )) s: $(tail -1 "$OUT/generate-$gib.log")" >&2
    fi
    echo "$ck"
}
budget_args() { # GIB: --memory-budget when MemTotal is below what GIB GiB of tables need plus 16 GiB
    local need=$(( $1 + 16 )) total
    total=$(awk '$1 == "MemTotal:" {print int($2 / 1048576)}' /proc/meminfo)
    case "${MEMORY_BUDGET:-auto}" in
        none) ;;
        auto) [ "$total" -lt "$need" ] && echo "--memory-budget ${need}G" ;;
        *) echo "--memory-budget $MEMORY_BUDGET" ;;
    esac
}
reserve_huge() { # PAGES: reserve (never fewer than were reserved before this run), print what the kernel gave
    # Where memory appears as it is used (the two-GPU machine: MemTotal 31 GiB at the start), one write gets what
    # is there now; the pool's own allocation is a use, so the write is repeated while the pool still grows
    # (HUGE_WAIT_S, default 120 s; stops after 10 s without growth)
    local n=$1 got last=-1 t0=$SECONDS still=$SECONDS
    [ "$n" -lt "$HUGE0" ] && n=$HUGE0
    while :; do
        echo "$n" > /proc/sys/vm/nr_hugepages 2>/dev/null
        got=$(cat /proc/sys/vm/nr_hugepages)
        [ "$got" -ge "$n" ] && break
        [ "$got" -gt "$last" ] && still=$SECONDS
        last=$got
        [ $(( SECONDS - t0 )) -ge "${HUGE_WAIT_S:-120}" ] || [ $(( SECONDS - still )) -ge 10 ] && break
        sleep 1
    done
    echo "$got"
}
serve() { # BACKEND CHECKPOINT SOCKET LOG [extra serve args]: starts the daemon in the background, sets D
    local b=$1 ck=$2 s=$3 log=$4
    shift 4
    # shellcheck disable=SC2046
    "$EH" serve --checkpoint "$ck" --backend "$b" --socket "$s" --threads 16 $(budget_args "$GIB") "$@" > "$log" 2>&1 &
    D=$!
}
# huge pages reserved before this run are given back as they were, not set to 0
HUGE0=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo 0)
trap 'pkill -f "$W/engram-host/" 2>/dev/null; echo "$HUGE0" > /proc/sys/vm/nr_hugepages 2>/dev/null' EXIT

case "$PART" in
env)
    {
        echo "== GPUs"; nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv,noheader 2>&1
        for d in /sys/bus/pci/devices/*; do
            [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] && [ "$(cat "$d/class" 2>/dev/null | cut -c1-6)" = 0x0302 ] \
                && echo "$(basename "$d") numa_node $(cat "$d/numa_node")"
        done
        echo "== nvidia-smi topo -m"; nvidia-smi topo -m 2>&1
        echo "== NUMA nodes"; for n in /sys/devices/system/node/node*; do echo "$(basename "$n") cpus $(cat "$n/cpulist") $(grep MemTotal "$n/meminfo" | awk '{print $4, $5}')"; done
        echo "== engram-host topology"; "$EH" topology 2>&1
        echo "== meminfo"; grep -E 'MemTotal|MemFree|MemAvailable|HugePages_Total|Hugepagesize' /proc/meminfo
        nproc; df -h /var/tmp | tail -1
    } > "$OUT/env.txt" 2>&1
    cat "$OUT/env.txt"
    want=$(( GIB * 512 + 256 ))
    t0=$SECONDS; got=$(reserve_huge "$want")
    say "huge pages: asked $want (GIB $GIB + 512 MiB), the kernel reserved $got ($(( got / 512 )) GiB) in $(( SECONDS - t0 )) s; MemTotal now $(mem_gib MemTotal) GiB"
    [ "$got" -ge "$want" ] && ok "$want huge pages reserved" || bad "only $got of $want huge pages reserved"
    reserve_huge "$HUGE0" > /dev/null
    ;;
serve)
    CK=$(checkpoint "$GIB") || { bad "generate $GIB GiB"; exit 1; }
    SIZE=$(stat -c %s "$CK/model.safetensors")
    for B in ${BACKENDS:-memfd memfd-hugetlb cuda-vmm}; do
        L=$OUT/$B; mkdir -p "$L"; S=$W/$B.sock
        if [ "$B" = memfd-hugetlb ]; then
            want=$(( SIZE / (2 << 20) + 256 )); got=$(reserve_huge "$want")
            [ "$got" -ge "$want" ] || { bad "$B: only $got of $want huge pages"; reserve_huge "$HUGE0" > /dev/null; continue; }
        fi
        t0=$(date +%s%N)
        serve "$B" "$CK" "$S" "$L/serve.log"
        if ! wait_ready "$S" 420 "$D"; then
            bad "$B: ready within 420 s"; tail -5 "$L/serve.log"; kill "$D" 2>/dev/null; wait "$D" 2>/dev/null
            reserve_huge "$HUGE0" > /dev/null; continue
        fi
        t1=$(date +%s%N)
        ok "$B: $GIB GiB served, ready $(( (t1 - t0) / 1000000 )) ms after the start $(budget_args "$GIB")"
        "$EH" status --socket "$S" --json > "$L/status.json" 2>&1
        a0=$(anon_mib "$D")
        say "$B: daemon RssAnon once ready: $a0 MiB; $(grep -h 'loaded:' "$L/serve.log" | tail -1 | cut -c1-240)"
        for i in $(seq "$IMPORTS"); do
            if [ $GPU = 1 ]; then
                "$EH" import --socket "$S" --gpu --device 0 --json > "$L/java-$i.json" 2> "$L/java-$i.err" || bad "$B: Java import $i"
                # --register: the C client registers memfd mappings with CUDA as Java's --gpu does
                "$CA" --socket "$S" --device 0 --register --json > "$L/c-$i.json" 2> "$L/c-$i.err" || bad "$B: C import $i"
            else
                "$EH" import --socket "$S" --json > "$L/java-$i.json" 2> "$L/java-$i.err" || bad "$B: Java import $i"
                "$CA" --socket "$S" --json > "$L/c-$i.json" 2> "$L/c-$i.err" || bad "$B: C import $i"
            fi
        done
        a1=$(anon_mib "$D")
        say "$B: daemon RssAnon after $IMPORTS + $IMPORTS imports: $a1 MiB"
        awk -v a="$a1" 'BEGIN {exit !(a <= 256)}' && ok "$B: daemon anonymous memory $a1 MiB <= 256 MiB at $GIB GiB" \
            || bad "$B: daemon anonymous memory $a1 MiB > 256 MiB at $GIB GiB"
        python3 - "$L" "$IMPORTS" "$B" <<'PY' | tee -a "$OUT/summary.txt"
import json, statistics, sys
d, n, b = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def one(p):
    try:
        return json.loads(open(p).read().strip().splitlines()[-1])
    except Exception:
        return None
java, c = [one(f"{d}/java-{i}.json") for i in range(1, n + 1)], [one(f"{d}/c-{i}.json") for i in range(1, n + 1)]
java, c = [j for j in java if j], [x for x in c if x]
gib = c[0]["bytes"] / 2**30 if c else float("nan")
ja = [j["timings"]["attach_ms"] for j in java]
ca = [x["attach_ms"] for x in c]
if ja and ca:
    mj, mc = statistics.median(ja), statistics.median(ca)
    print(f"{b}: attach, {gib:.1f} GiB of regions, medians of {len(ja)}/{len(ca)}: Java {mj:.1f} ms ({mj / gib:.2f} ms/GiB), "
          f"C {mc:.1f} ms ({mc / gib:.2f} ms/GiB), Java/C {mj / mc:.3f}; Java total {statistics.median([j['timings']['total_ms'] for j in java]):.1f} ms")
else:
    print(f"{b}: attach: no complete Java/C pair ({len(ja)} Java, {len(ca)} C)")
PY
        "$EH" stop --socket "$S" >> "$L/serve.log" 2>&1
        wait "$D" 2>/dev/null
        [ "$B" = memfd-hugetlb ] && reserve_huge "$HUGE0" > /dev/null
    done
    ;;
engines)
    [ $GPU = 1 ] || { say "engines: no GPU here, skipped"; exit 0; }
    NG=$(nvidia-smi -L | wc -l)
    # ENGINE_GPUS: the GPU of each engine (default "0 1"); "0 0" rehearses the part on a one-GPU machine
    read -r -a EG <<< "${ENGINE_GPUS:-0 1}"
    for g in "${EG[@]}"; do [ "$g" -lt "$NG" ] || { bad "engines: GPU $g asked, this machine has $NG"; exit 1; }; done
    GPUS=$(printf '%s\n' "${EG[@]}" | sort -un | paste -sd,)
    GIB=${ENGINE_GIB:-8}
    say "engines: $GIB GiB, engines on GPUs ${EG[*]}"
    CK=$(checkpoint "$GIB") || { bad "generate $GIB GiB"; exit 1; }
    B=${ENGINE_BACKEND:-cuda-vmm}; L=$OUT/engines; mkdir -p "$L"; S=$W/engines.sock
    if [ "$B" = memfd-hugetlb ]; then reserve_huge $(( GIB * 512 + 256 )) > /dev/null; fi
    serve "$B" "$CK" "$S" "$L/serve.log" --gpus "$GPUS" --device-tensors "${DEVICE_TENSORS:-layers.0.engram.embed.*}"
    wait_ready "$S" 420 "$D" || { bad "engines: daemon ready"; tail -5 "$L/serve.log"; exit 1; }
    "$EH" status --socket "$S" --json > "$L/status.json"
    for kind in python java; do
        pids=()
        for k in "${!EG[@]}"; do
            g=${EG[$k]} f=$L/$kind-$k-gpu${EG[$k]}
            if [ $kind = python ]; then
                python3 -m engram_host import --socket "$S" --gpu --cpu-view --device $g --verify --json --hold-ms 3000 \
                    > "$f.json" 2> "$f.err" &
            else
                "$EH" import --socket "$S" --gpu --device $g --verify --json > "$f.json" 2> "$f.err" &
            fi
            pids+=($!)
        done
        for k in "${!EG[@]}"; do
            g=${EG[$k]} f=$L/$kind-$k-gpu${EG[$k]}
            if wait "${pids[$k]}"; then :; else bad "engines: $kind engine $k on GPU $g exited non-zero: $(tail -2 "$f.err")"; fi
            python3 - "$f.json" "$g" <<'PY' >> "$OUT/summary.txt" 2>&1 \
                && ok "engines: $kind engine $k on GPU $g: every table verified by a GPU kernel, device tensors on GPU $g" \
                || bad "engines: $kind engine $k on GPU $g: $(tail -1 "$OUT/summary.txt")"
import json, sys
doc = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
g = sys.argv[2]
rows = doc["tables"]
unverified = [r["name"] for r in rows if not r.get("gpu_verify", {}).get("verified", "gpu_verify" in r)]
device = [r for r in rows if r.get("backend") == "device" or "device" in r and r.get("device") not in (None, "")]
wrong = [r["name"] for r in device if str(r.get("device")) not in (g, f"cuda:{g}")]
print(f"GPU {g}: {len(rows)} tables, {len(rows) - len(unverified)} verified on the GPU, {len(device)} device tensors"
      f" ({', '.join(sorted(set(str(r.get('device')) for r in device)))})")
sys.exit(1 if unverified or wrong or not device or not rows else 0)
PY
        done
    done
    "$EH" status --socket "$S" --json > "$L/status-after.json"
    "$EH" stop --socket "$S" >> "$L/serve.log" 2>&1
    wait "$D" 2>/dev/null
    ;;
anon)
    for gib in 1 "$GIB"; do
        CK=$(checkpoint "$gib") || { bad "generate $gib GiB"; continue; }
        S=$W/anon.sock
        serve memfd "$CK" "$S" "$OUT/anon-$gib.log"
        wait_ready "$S" 420 "$D" || { bad "anon: $gib GiB ready"; kill "$D"; wait "$D" 2>/dev/null; continue; }
        sleep 2
        say "anon: memfd, $gib GiB of tables: daemon RssAnon $(anon_mib "$D") MiB, VmRSS $(awk '$1 == "VmRSS:" {printf "%.1f", $2 / 1024}' /proc/$D/status) MiB"
        "$EH" stop --socket "$S" >> "$OUT/anon-$gib.log" 2>&1
        wait "$D" 2>/dev/null
    done
    ;;
*) echo "gpu-scale-run: PART is env, serve, engines or anon, not '$PART'" >&2; exit 2 ;;
esac
say "checks: $PASS passed, $FAIL failed ($(now))"
[ "$FAIL" = 0 ]

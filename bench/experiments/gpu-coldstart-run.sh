#!/usr/bin/env bash
# Issue 14's operator-level cold start on the GPU machine, from the gpu bundle (scripts/gpu/gpu-bundle.sh, carried as
# .bundle): a generated checkpoint in the V4.1 layout (4 layers x ROWS rows x 264 B; 40 M rows = 39.3 GiB), and
# per backend (BACKENDS, default all three): `serve --threads 16` from a cold page cache, then from a warm one,
# each timed from the process's start to its "ready" line, with STATUS's `load` phases; then the Java CLI's
# `import --gpu` wall time, 3 times. Optionally first the probe of bench/experiments/coldstart_probe.c (PROBE_GIB > 0).
# Run from the repository root on the GPU machine, as root (it drops the page cache and reserves huge pages):
#   [PROBE_GIB=16] [ROWS=40000000] [BACKENDS="memfd memfd-hugetlb cuda-vmm"] bash bench/experiments/gpu-coldstart-run.sh OUT
set -uo pipefail
OUT=${1:?usage: gpu-coldstart-run.sh OUT_DIR}
mkdir -p "$OUT"
B=$(pwd)/.bundle
export WORK=/tmp/engram-gpu
mkdir -p "$WORK" && [ -x "$WORK/jre/bin/java" ] || tar -xzf "$B/jre.tar.gz" -C "$WORK"
EH="$B/engram-host"
CK=/var/tmp/engram-ck
RUN=$WORK/run
ROWS=${ROWS:-40000000}
THREADS=${THREADS:-16}
mkdir -p "$RUN"
{ nproc; free -g; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; uname -r; cat "$B/COMMIT";
  lsblk -o NAME,SIZE,ROTA,TYPE,MOUNTPOINT; df -h /var/tmp; } > "$OUT/env.txt" 2>&1

if [ "${PROBE_GIB:-0}" -gt 0 ]; then
    echo $(( PROBE_GIB * 512 + 64 )) > /proc/sys/vm/nr_hugepages
    gcc -O2 -pthread -o "$WORK/probe" bench/experiments/coldstart_probe.c -ldl 2>"$OUT/probe-build.txt" \
        || cp "$B/coldstart_probe" "$WORK/probe"
    "$WORK/probe" /var/tmp/probe.bin "$PROBE_GIB" "$THREADS" 4 cuda cold > "$OUT/probe.txt" 2>&1
    rm -f /var/tmp/probe.bin
    echo 0 > /proc/sys/vm/nr_hugepages
fi

[ -f "$CK/model.safetensors" ] || "$EH" generate --out "$CK" --rows "$ROWS" --dim 256 --layers 0,1,2,3 --single-file \
    > "$OUT/generate.txt" 2>&1
GIB=$(( $(stat -c %s "$CK/model.safetensors") >> 30 ))

serve_once() { # BACKEND LABEL: start serve, time to its ready line, keep STATUS, stop
    local backend=$1 label=$2 sock=$RUN/e.sock start line
    start=$(date +%s%N)
    "$EH" serve --checkpoint "$CK" --socket "$sock" --numa none --threads "$THREADS" --backend "$backend" \
        > "$OUT/serve-$backend-$label.txt" 2>&1 &
    local pid=$!
    for _ in $(seq 1200); do
        if grep -q "ready:" "$OUT/serve-$backend-$label.txt"; then break; fi
        if ! kill -0 $pid 2>/dev/null; then break; fi
        sleep 0.05
    done
    local end=$(date +%s%N)
    echo "$backend $label start-to-ready-line $(( (end - start) / 1000000 )) ms (polled every 50 ms)" | tee -a "$OUT/summary.txt"
    "$EH" status --socket "$sock" --json > "$OUT/status-$backend-$label.json" 2>&1
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], 'load', json.dumps(d.get('load')), 'origin', json.dumps(d.get('origin',{}).get('how')))" \
        "$OUT/status-$backend-$label.json" "$backend" "$label" | tee -a "$OUT/summary.txt"
    if [ "$label" = warm ]; then
        for i in 1 2 3; do
            local t0=$(date +%s%N)
            "$EH" import --socket "$sock" --gpu --device 0 > "$OUT/import-$backend-$i.txt" 2>&1
            local rc=$? t1=$(date +%s%N)
            echo "$backend import --gpu wall $(( (t1 - t0) / 1000000 )) ms rc $rc" | tee -a "$OUT/summary.txt"
        done
    fi
    "$EH" stop --socket "$sock" >/dev/null 2>&1 || kill $pid
    wait $pid
}

for backend in ${BACKENDS:-memfd memfd-hugetlb cuda-vmm}; do
    if [ "$backend" = memfd-hugetlb ]; then echo $(( GIB * 512 + 1024 )) > /proc/sys/vm/nr_hugepages; fi
    sync; echo 3 > /proc/sys/vm/drop_caches
    serve_once "$backend" cold
    serve_once "$backend" warm
    echo 0 > /proc/sys/vm/nr_hugepages
done
echo "done" | tee -a "$OUT/summary.txt"

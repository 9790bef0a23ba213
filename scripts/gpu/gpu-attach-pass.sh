#!/usr/bin/env bash
# Issue 26 section 4 on the GPU machine, from the gpu bundle (scripts/gpu/gpu-bundle.sh; carry [".bundle"]):
# scripts/gpu/gpu-async-attach.py against a daemon of each backend serving a GIB GiB model, TRIALS trials each.
# Run from the repository root:  OUT=DIR [GIB=4] [TRIALS=3] [BACKENDS="memfd memfd-hugetlb cuda-vmm"]
#   bash scripts/gpu/gpu-attach-pass.sh
# Results in $OUT: attach-BACKEND.json (the script's summary and trials), attach.txt (what was run, the medians).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:?OUT=DIR}
GIB=${GIB:-4}
TRIALS=${TRIALS:-3}
BACKENDS=${BACKENDS:-memfd memfd-hugetlb cuda-vmm}
export WORK=${WORK:-/tmp/engram-gpu}
B=$ROOT/.bundle
EH=$B/engram-host
mkdir -p "$OUT" "$WORK"
[ -x "$WORK/jre/bin/java" ] || tar -C "$WORK" -xzf "$B/jre.tar.gz" || exit 2
export PYTHONPATH=$B/python
say() { echo "$*" | tee -a "$OUT/attach.txt"; }
M=/var/tmp/engram-attach-model-$GIB
ROWS=$(( GIB * 1024 * 1024 * 1024 / (2 * 264) ))
if [ ! -f "$M/config.json" ]; then
    "$EH" generate --model --out "$M" --rows "$ROWS" > "$OUT/generate.log" 2>&1 || { tail -3 "$OUT/generate.log"; exit 1; }
fi
cat "$M"/*.safetensors > /dev/null
HUGE0=$(cat /proc/sys/vm/nr_hugepages)
echo $(( GIB * 512 + 256 )) > /proc/sys/vm/nr_hugepages
trap 'echo "$HUGE0" > /proc/sys/vm/nr_hugepages' EXIT
rc=0
for be in $BACKENDS; do
    S=$WORK/attach-$be.sock
    "$EH" serve --checkpoint "$M" --backend "$be" --socket "$S" --threads 16 > "$OUT/serve-$be.log" 2>&1 &
    D=$!
    ok=1
    for _ in $(seq 1200); do
        st=$("$EH" status --socket "$S" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null)
        [ "$st" = ready ] && { ok=0; break; }
        [ "$st" = failed ] && break
        kill -0 "$D" 2>/dev/null || break
        sleep 0.1
    done
    if [ $ok != 0 ]; then say "$be: the daemon did not become ready: $(tail -1 "$OUT/serve-$be.log")"; rc=1; kill "$D"; wait "$D"; continue; fi
    t0=$SECONDS
    python3 "$ROOT/scripts/gpu/gpu-async-attach.py" --socket "$S" --device 0 --trials "$TRIALS" \
        --out "$OUT/attach-$be.json" > "$OUT/attach-$be.log" 2>&1
    r=$?
    say "$be: gpu-async-attach.py exit $r in $(( SECONDS - t0 )) s; $(tail -12 "$OUT/attach-$be.log" | tr '\n' ' ')"
    [ $r = 0 ] || rc=1
    "$EH" stop --socket "$S" >> "$OUT/serve-$be.log" 2>&1
    wait "$D"
done
exit $rc

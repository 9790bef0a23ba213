#!/usr/bin/env bash
# What a digest record costs a memfd load, on a machine with the memory for it (the GPU machine: 128 GiB), in one
# command. Three arms, their order rotated each round so that none always follows another:
#   none    no digest record next to the checkpoint
#   record  a version 2 record (engram-host inspect --write-digests): the load compares each table's engram digest v1
#   v1      a version 1 record (sha256-tree-v1 only): read at start, gives no content identity, checks nothing
# Before every load the page cache holds the model (cat) and the previous daemon has exited, so each load starts
# from the same state. Per load: STATUS's ready_s, process_ready_s and every load stage (create_s, read_s,
# verify_seal_s...); the summary gives each arm's medians and the difference against none. JFR=1 also records one
# load of each arm with Java Flight Recorder (the runtime needs jdk.jfr: the gpu bundle's has it).
#   EH=.../engram-host [GIB=39] [ROUNDS=5] [BACKEND=memfd] [JFR=0] bash scripts/gpu/gpu-record-cost.sh OUT_DIR
# OUT_DIR/summary.txt, loads.jsonl (one STATUS a load), serve-*.log, and with JFR=1 load-ARM.jfr.
set -uo pipefail
OUT=${1:?usage: gpu-record-cost.sh OUT_DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/scripts/lib/own-dir.sh"
own_dir "$OUT" gpu-record-cost
mkdir -p "$OUT"
EH=${EH:?EH=the engram-host launcher}
GIB=${GIB:-39}; ROUNDS=${ROUNDS:-5}; BACKEND=${BACKEND:-memfd}
W=${WORK_DIR:-/var/tmp/engram-record-cost}
mkdir -p "$W"
M=$W/model-$GIB
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
if [ ! -f "$M/config.json" ]; then
    rm -rf "$W"/model-*
    t0=$SECONDS
    "$EH" generate --model --out "$M" --rows $(( GIB * 1024 * 1024 * 1024 / (2 * 264) )) > "$OUT/generate.log" 2>&1 \
        || { tail -3 "$OUT/generate.log"; exit 1; }
    say "generated $GIB GiB in $(( SECONDS - t0 )) s"
fi
REC=$M/engram-digests.json
if [ ! -f "$W/v2.json" ]; then
    rm -f "$REC"
    "$EH" inspect --write-digests --threads 16 "$M" > "$OUT/write-digests.log" 2>&1 || { tail -3 "$OUT/write-digests.log"; exit 1; }
    cp "$REC" "$W/v2.json"
    python3 - "$W/v2.json" "$W/v1.json" <<'PY'
import json, sys
v2 = json.load(open(sys.argv[1]))
v1 = {"format": "engram-content-digests", "version": 1, "algorithm": "sha256-tree-v1",
      "chunk_bytes": v2["chunk_bytes"], "tables": {n: d["sha256-tree-v1"] for n, d in v2["tables"].items()}}
open(sys.argv[2], "w").write(json.dumps(v1, separators=(",", ":"), sort_keys=True) + "\n")
PY
fi
arm_on() { case $1 in none) rm -f "$REC" ;; record) cp "$W/v2.json" "$REC" ;; v1) cp "$W/v1.json" "$REC" ;; esac; }
S=$W/d.sock
ARMS=(none record v1)
JFR_DONE=" "
for round in $(seq "$ROUNDS"); do
    for k in 0 1 2; do
        arm=${ARMS[$(( (k + round) % 3 ))]}
        arm_on "$arm"
        cat "$M"/*.safetensors > /dev/null
        jopts=""
        if [ "${JFR:-0}" = 1 ] && [[ "$JFR_DONE" != *" $arm "* ]]; then
            jopts="-XX:StartFlightRecording=filename=$OUT/load-$arm.jfr,settings=profile,dumponexit=true"
            JFR_DONE="$JFR_DONE$arm "
        fi
        JAVA_TOOL_OPTIONS="$jopts" "$EH" serve --checkpoint "$M" --backend "$BACKEND" --socket "$S" --threads 16 \
            > "$OUT/serve-$arm-$round.log" 2>&1 &
        D=$!
        st=""
        for i in $(seq 1200); do
            st=$("$EH" status --socket "$S" --json 2>/dev/null) && [ "$(echo "$st" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')" = ready ] && break
            kill -0 $D 2>/dev/null || break
            st=""; sleep 0.1
        done
        if [ -z "$st" ]; then say "FAIL $arm round $round: not ready: $(tail -2 "$OUT/serve-$arm-$round.log")"; kill $D; wait $D; continue; fi
        echo "$st" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({"arm": sys.argv[1], "round": int(sys.argv[2]), "status": d}))' "$arm" "$round" >> "$OUT/loads.jsonl"
        "$EH" stop --socket "$S" >> "$OUT/serve-$arm-$round.log" 2>&1
        wait $D
    done
done
rm -f "$REC"
python3 - "$OUT/loads.jsonl" <<'PY' | tee -a "$OUT/summary.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = ["ready_s", "process_ready_s"] + sorted({k for r in rows for k, v in r["status"].get("load", {}).items()
                                                if isinstance(v, (int, float)) and k.endswith("_s")})
def val(r, k):
    s = r["status"]
    return s.get(k) if k in s else s.get("load", {}).get(k)
print("arm     n  " + "  ".join(f"{k:>16}" for k in keys))
med = {}
for arm in ("none", "record", "v1"):
    rs = [r for r in rows if r["arm"] == arm]
    med[arm] = {k: statistics.median([val(r, k) for r in rs if val(r, k) is not None] or [float("nan")]) for k in keys}
    print(f"{arm:7} {len(rs):2}  " + "  ".join(f"{med[arm][k]:16.3f}" for k in keys))
    print(f"  each ready_s: {[round(val(r, 'ready_s'), 3) for r in rs]}; content_identity {sorted({r['status'].get('content_identity') for r in rs})}")
for arm in ("record", "v1"):
    a, b = med["none"]["ready_s"], med[arm]["ready_s"]
    print(f"{arm} against none: ready_s {b:.3f} s against {a:.3f} s, {100 * (b - a) / a:+.1f}%")
PY

#!/usr/bin/env bash
# Runs on the GPU machine, from the bundle (scripts/gpu-bundle.sh): the restart path, cross-process,
# on one table of at least $GIB GiB. A cuda-vmm daemon serves it; then, alternating, the C client of
# the wire protocol (engram-attach, raw driver calls) and fresh Java client processes
# (`engram-host import --gpu`) attach it with a GPU view only, $REPEAT times each. Results in $OUT:
#   attach-daemon.log, attach-c.jsonl, attach-java.jsonl, attach-wall.txt (each client process, start to exit),
#   attach-summary.json (medians and the ratio).
# Usage: OUT=/some/dir GIB=16 REPEAT=5 bash gpu-attach-compare.sh
set -uo pipefail
B=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$B/out}
GIB=${GIB:-16}
REPEAT=${REPEAT:-5}
WORK=${WORK:-/tmp/engram-gpu}
mkdir -p "$OUT" "$WORK/tmp" "$WORK/run"
[ -x "$WORK/jre/bin/java" ] || tar -C "$WORK" -xzf "$B/jre.tar.gz"
JAVA="$WORK/jre/bin/java"
read -r -a FLAGS < "$B/jvm.options"
FLAGS+=("-Djava.io.tmpdir=$WORK/tmp")
CP=$(ls "$B"/lib/*.jar | tr '\n' ':')
cli() { "$JAVA" "${FLAGS[@]}" -cp "$CP" io.engramhost.cli.Main "$@"; }
SOCK="$WORK/run/attach.sock"
rm -f "$SOCK" "$SOCK.ready"
ROWS=$(( (GIB << 30) / 256 + 1 ))

echo "== generating one ${GIB} GiB table ($ROWS rows x 256)"
rm -rf "$WORK/big"
cli generate --out "$WORK/big" --rows "$ROWS" --layers 1 --single-file || exit 1
echo "== cuda-vmm daemon"
cli serve --checkpoint "$WORK/big" --backend cuda-vmm --socket "$SOCK" --threads "$(nproc)" > "$OUT/attach-daemon.log" 2>&1 &
DAEMON=$!
for _ in $(seq 600); do [ -f "$SOCK.ready" ] && break; kill -0 $DAEMON 2>/dev/null || break; sleep 0.5; done
[ -f "$SOCK.ready" ] || { echo "daemon not ready"; tail -5 "$OUT/attach-daemon.log"; exit 1; }
tail -3 "$OUT/attach-daemon.log"
: > "$OUT/attach-c.jsonl"; : > "$OUT/attach-java.jsonl"
: > "$OUT/attach-wall.txt"
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
for i in $(seq "$REPEAT"); do
  t0=$(now_ms)
  "$B/engram-attach" --socket "$SOCK" --device 0 --json >> "$OUT/attach-c.jsonl" 2>>"$OUT/attach-c.err"
  t1=$(now_ms)
  cli import --socket "$SOCK" --gpu --device 0 --json >> "$OUT/attach-java.jsonl" 2>>"$OUT/attach-java.err"
  t2=$(now_ms)
  echo "c $((t1 - t0)) java $((t2 - t1))" >> "$OUT/attach-wall.txt"
done
cli stop --socket "$SOCK"
wait $DAEMON
echo "daemon exit: $?"
python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
c = [json.loads(l) for l in open(out + "/attach-c.jsonl") if l.strip().startswith("{")]
j = [json.loads(l) for l in open(out + "/attach-java.jsonl") if l.strip().startswith("{")]
def cms(r):
    return r["import_ms"] + r["reserve_map_ms"] + r["gpu_access_ms"]
def jms(r):
    t = r["timings"]
    return t["vmm_import_ms"] + t["vmm_map_ms"] + t["vmm_gpu_access_ms"]
gib = sum(t["bytes"] for t in j[0]["tables"]) / 2**30
s = {"gib": gib, "c_attach_ms": [cms(r) for r in c], "java_attach_ms": [jms(r) for r in j],
     "java_import_total_ms": [r["timings"]["total_ms"] for r in j]}
s["c_median_ms_per_gib"] = statistics.median(s["c_attach_ms"]) / gib
s["java_median_ms_per_gib"] = statistics.median(s["java_attach_ms"]) / gib
s["ratio_java_to_c"] = s["java_median_ms_per_gib"] / s["c_median_ms_per_gib"]
wall = [l.split() for l in open(out + "/attach-wall.txt") if l.strip()]
s["process_wall_ms_c"] = [int(w[1]) for w in wall]
s["process_wall_ms_java"] = [int(w[3]) for w in wall]
s["restart_median_ms"] = {"c": statistics.median(s["process_wall_ms_c"]), "java": statistics.median(s["process_wall_ms_java"])}
json.dump(s, open(out + "/attach-summary.json", "w"), indent=1)
print(json.dumps(s, indent=1))
PY

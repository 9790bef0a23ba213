#!/usr/bin/env bash
# Exporter A/B: two exporters serve MODEL on loopback, one from BASE_APP, one from NEW_APP, both up for the whole
# run; RUNS times, interleaved, requester B (REQ_APP) seeds every table from each (run 0 a warm-up, not counted). Prints each run's seed GiB/s, seed s and ready_s, then medians.
#   exp-ab.sh MODEL BASE_APP NEW_APP REQ_APP RUNS
set -euo pipefail
model=$1 base=$2 new=$3 req=$4 runs=$5
bin=/work/wt-seed/bin/engram-host
work=$(mktemp -d)
trap 'for f in "$work"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done; rm -rf "$work"' EXIT
head -c 32 /dev/urandom > "$work/key"; chmod 600 "$work/key"
port=$((20000 + RANDOM % 20000))
wait_ready() { for _ in $(seq 1200); do [ -f "$1.ready" ] && return 0; sleep 0.1; done; echo "not ready: $1" >&2; return 1; }
field() { "$bin" status --socket "$1" --json | python3 -c "import json,sys; d=json.load(sys.stdin); print($2)"; }
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
for which in base new; do   # both exporters stay up: a long-lived exporter's JIT is warm after run 0
  app=$base; p=$port; [ "$which" = new ] && app=$new && p=$((port + 1))
  ENGRAM_HOST_APP="$app" "$bin" serve --checkpoint "$model" --socket "$work/a-$which.sock" --numa none \
    --seed-listen 127.0.0.1:$p --seed-key "$work/key" > "$work/a-$which.log" 2>&1 &
  echo $! > "$work/a-$which.pid"; wait_ready "$work/a-$which.sock"
done
for i in $(seq 0 "$runs"); do
  for which in base new; do
    p=$port; [ "$which" = new ] && p=$((port + 1))
    ENGRAM_HOST_APP="$req" "$bin" serve --checkpoint "$model" --socket "$work/b.sock" --numa none \
      --seed-from 127.0.0.1:$p --seed-key "$work/key" > "$work/b.log" 2>&1 &
    echo $! > "$work/b.pid"; wait_ready "$work/b.sock"
    r=$(field "$work/b.sock" "d['origin']['checkpoint_bytes_read'], d['origin']['seeded']['gib_s'], d['origin']['seeded']['seconds'], d['ready_s']")
    echo "run $i exporter $which: disk bytes, seed GiB/s, seed s, ready_s: $r"
    [ "$i" -gt 0 ] && echo "$which $r" >> "$work/rows"
    kill "$(cat "$work/b.pid")"; wait "$(cat "$work/b.pid")" 2>/dev/null || true
    rm -f "$work"/b.pid "$work"/b.sock*
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work/rows" <<'PY'
import statistics, sys
rows = [l.replace(',', ' ').split() for l in open(sys.argv[1])]
for which in ("base", "new"):
    r = [x for x in rows if x[0] == which]
    print("exporter %s: median seed %.3f GiB/s, seed %.2f s, ready %.2f s (%d runs; all GiB/s: %s)" % (which,
          statistics.median(float(x[2]) for x in r), statistics.median(float(x[3]) for x in r),
          statistics.median(float(x[4]) for x in r), len(r), " ".join(x[2] for x in r)))
PY

#!/usr/bin/env bash
# Two builds A/B on a loopback seed, interleaved (bench/seed-runs.md, bench/seed-netty.md). SIDE=requester (the
# default): daemon A (this checkout's build) loads MODEL and exports it (--seed-listen); then, RUNS times, daemon B
# seeds every table from A once with the app directory BASE and once with NEW (ENGRAM_HOST_APP; a copy of
# engram-host/cli/target/app from each commit). SIDE=exporter: two exporters, one from BASE and one from NEW, both up
# for the whole run (a long-lived exporter's JIT is warm after run 0); RUNS times, daemon B (this checkout's build)
# seeds every table from each in turn. Run 0 is a warm-up. Prints each run's seed rate (origin.seeded.gib_s),
# seconds from the first range to the last (origin.seeded.seconds) and time to ready (ready_s), then the medians of
# each build.
#
#   scripts/bench/seed-ab.sh MODEL_DIR BASE_APP NEW_APP [RUNS] [B_ARGS...]   (MODEL_DIR with a digest record)
#   A_ARGS="..." adds serve flags to the exporters (e.g. the --seed-tls-* files; B_ARGS are B's).
#   SIDE=exporter scripts/bench/seed-ab.sh ...   the builds compared as exporters
set -euo pipefail
model=${1:?usage: seed-ab.sh MODEL_DIR BASE_APP NEW_APP [RUNS] [B_ARGS...]}
base=${2:?BASE_APP}
new=${3:?NEW_APP}
runs=${4:-5}
shift $(($# < 4 ? $# : 4))
here=$(cd "$(dirname "$0")/../.." && pwd)
bin="$here/bin/engram-host"
work=$(mktemp -d)
trap 'for f in "$work"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done; rm -rf "$work"' EXIT
head -c 32 /dev/urandom > "$work/key"
chmod 600 "$work/key"
port=$((20000 + RANDOM % 20000))

wait_ready() { # socket
  for _ in $(seq 1200); do [ -f "$1.ready" ] && return 0; sleep 0.1; done
  echo "not ready: $1" >&2; return 1
}
field() { # socket python-expression-on-d
  "$bin" status --socket "$1" --json | python3 -c "import json,sys; d=json.load(sys.stdin); print($2)"
}

echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
side=${SIDE:-requester}
case $side in requester|exporter) ;; *) echo "seed-ab.sh: SIDE is requester or exporter, not '$side'" >&2; exit 2;; esac
app_of() { if [ "$1" = new ]; then echo "$new"; else echo "$base"; fi; }
port_of() { if [ "$side" = exporter ] && [ "$1" = new ]; then echo $((port + 1)); else echo $port; fi; }
exporters=a; [ "$side" = exporter ] && exporters="base new"
for e in $exporters; do
  app=; [ "$side" = exporter ] && app=$(app_of "$e")
  env ${app:+ENGRAM_HOST_APP="$app"} "$bin" serve --checkpoint "$model" --socket "$work/a-$e.sock" \
    --numa none --seed-listen 127.0.0.1:$(port_of "$e") --seed-key "$work/key" ${A_ARGS:-} > "$work/a-$e.log" 2>&1 &
  echo $! > "$work/a-$e.pid"
  wait_ready "$work/a-$e.sock"
done
for i in $(seq 0 "$runs"); do   # run 0 warms A's memory and the page cache of both apps' jars; not counted
  for which in base new; do
    app=; [ "$side" = requester ] && app=$(app_of "$which")
    env ${app:+ENGRAM_HOST_APP="$app"} "$bin" serve --checkpoint "$model" --socket "$work/b.sock" \
      --numa none --seed-from 127.0.0.1:$(port_of "$which") --seed-key "$work/key" "$@" > "$work/b.log" 2>&1 &
    echo $! > "$work/b.pid"
    wait_ready "$work/b.sock"
    r=$(field "$work/b.sock" "d['origin']['checkpoint_bytes_read'], d['origin']['seeded']['gib_s'], d['origin']['seeded']['seconds'], d['ready_s']")
    echo "run $i $side $which: disk bytes, seed GiB/s, seed s, ready_s: $r"
    [ "$i" -gt 0 ] && echo "$which $r" >> "$work/rows"
    kill "$(cat "$work/b.pid")"; wait "$(cat "$work/b.pid")" 2>/dev/null || true
    rm -f "$work"/b.pid "$work"/b.sock*
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work/rows" "$side" <<'PY'
import statistics, sys
rows = [l.replace(',', ' ').split() for l in open(sys.argv[1])]
for which in ("base", "new"):
    r = [x for x in rows if x[0] == which]
    print("%s %s: median seed %.3f GiB/s, seed %.2f s, ready %.2f s (%d runs)" % (sys.argv[2], which,
          statistics.median(float(x[2]) for x in r), statistics.median(float(x[3]) for x in r),
          statistics.median(float(x[4]) for x in r), len(r)))
PY

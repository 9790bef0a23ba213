#!/usr/bin/env bash
# Two builds' memfd loads of one checkpoint, alternately (bench/load-pipeline.md): RUNS times, `serve --numa none`
# of BASE_BIN then of NEW_BIN (each a checkout's bin/engram-host, after its package) until ready, then the load's
# times from `status --json` (ready_s, load.create_s, load.read_s, load.verify_seal_s), then the medians of each.
# Run 0 of each is a warm-up (the page cache, the jars), not counted.
#
#   scripts/bench/load-pipeline.sh CHECKPOINT_DIR BASE_BIN NEW_BIN [RUNS]
#   (a checkpoint of ~2 GiB: bin/engram-host generate --model --out DIR --rows 4000000)
#   SERVE_ARGS="--backend cuda-vmm" adds serve flags to both builds' daemons (memfd-hugetlb needs vm.nr_hugepages)
#   NEW_FIRST=1 starts each pair with the new build (an order effect shows as a difference that changes sign)
set -euo pipefail
model=${1:?usage: load-pipeline.sh CHECKPOINT_DIR BASE_BIN NEW_BIN [RUNS]}
base=${2:?BASE_BIN}
new=${3:?NEW_BIN}
runs=${4:-3}
work=$(mktemp -d)
trap '[ -f "$work/d.pid" ] && kill "$(cat "$work/d.pid")" 2>/dev/null; rm -rf "$work"' EXIT

order="base new"
[ "${NEW_FIRST:-0}" = 1 ] && order="new base"
echo "serve flags added: ${SERVE_ARGS:-none}; each pair: $order; load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 0 "$runs"); do
  for which in $order; do
    bin=$base
    [ "$which" = new ] && bin=$new
    # shellcheck disable=SC2086  # SERVE_ARGS is a list of flags
    "$bin" serve --checkpoint "$model" --socket "$work/d.sock" --numa none ${SERVE_ARGS:-} > "$work/d.log" 2>&1 &
    echo $! > "$work/d.pid"
    for _ in $(seq 1200); do [ -f "$work/d.sock.ready" ] && break; sleep 0.1; done
    [ -f "$work/d.sock.ready" ] || { cat "$work/d.log"; echo "not ready: $which" >&2; exit 1; }
    r=$("$bin" status --socket "$work/d.sock" --json | python3 -c "import json,sys; d=json.load(sys.stdin); l=d['load']
print(d['ready_s'], l['create_s'], l['read_s'], l['verify_seal_s'])")
    echo "run $i $which: ready_s create_s read_s verify_seal_s: $r"
    [ "$i" -gt 0 ] && echo "$which $r" >> "$work/rows"
    kill "$(cat "$work/d.pid")"; wait "$(cat "$work/d.pid")" 2>/dev/null || true
    rm -f "$work/d.pid"
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work/rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for which in ("base", "new"):
    r = [x for x in rows if x[0] == which]
    m = [statistics.median(float(x[k]) for x in r) for k in (1, 2, 3, 4)]
    print("%s: median ready %.3f s, create %.4f s, read %.3f s, verify+seal %.3f s (%d runs)" % ((which,) + tuple(m)
          + (len(r),)))
PY

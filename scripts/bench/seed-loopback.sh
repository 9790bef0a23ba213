#!/usr/bin/env bash
# Seeding on loopback (bench/seed-runs.md; docs/seeding.md, "What it costs"): daemon A loads MODEL from the disk
# (the page cache after the first run) and exports it (--seed-listen); daemon B then fills every table from A, once with Netty's epoll
# transport on A (sendfile from the memfds) and once with its NIO transport (-Dio.netty.transport.noNative=true,
# FileChannel.transferTo), RUNS times each, interleaved. Prints, per run, A's own load from the page cache (the
# fill path's rate from memory: read_gib_s) and B's seed rate (origin.seeded.gib_s, verified bytes over the time
# from the first range to the last), and B's time to ready.
#
#   scripts/bench/seed-loopback.sh MODEL_DIR [RUNS]     (MODEL_DIR with a digest record: inspect --write-digests)
set -euo pipefail
model=${1:?usage: seed-loopback.sh MODEL_DIR [RUNS]}
runs=${2:-3}
here=$(cd "$(dirname "$0")/../.." && pwd)
bin="$here/bin/engram-host"
work=$(mktemp -d)
trap 'for f in "$work"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done; rm -rf "$work"' EXIT
head -c 32 /dev/urandom > "$work/key"
chmod 600 "$work/key"
port=$((20000 + RANDOM % 20000))

wait_ready() { # socket
  for _ in $(seq 600); do [ -f "$1.ready" ] && return 0; sleep 0.1; done
  echo "not ready: $1" >&2; return 1
}
field() { # socket python-expression-on-d
  "$bin" status --socket "$1" --json | python3 -c "import json,sys; d=json.load(sys.stdin); print($2)"
}

for i in $(seq "$runs"); do
  for transport in epoll nio; do
    opts=""
    [ "$transport" = nio ] && opts="-Dio.netty.transport.noNative=true"
    ENGRAM_HOST_JVM_OPTS="$opts" "$bin" serve --checkpoint "$model" --socket "$work/a.sock" --numa none \
      --seed-listen 127.0.0.1:$port --seed-key "$work/key" > "$work/a.log" 2>&1 &
    echo $! > "$work/a.pid"
    wait_ready "$work/a.sock"
    grep -q "($transport)" "$work/a.log" || { echo "A is not on $transport:"; cat "$work/a.log"; exit 1; }
    a_read=$(field "$work/a.sock" "d['load']['read_gib_s']")
    "$bin" serve --checkpoint "$model" --socket "$work/b.sock" --numa none --seed-from 127.0.0.1:$port \
      --seed-key "$work/key" > "$work/b.log" 2>&1 &
    echo $! > "$work/b.pid"
    wait_ready "$work/b.sock"
    b=$(field "$work/b.sock" "d['origin']['how'], d['origin']['checkpoint_bytes_read'], d['origin']['seeded']['bytes'], d['origin']['seeded']['gib_s'], d['ready_s']")
    echo "run $i $transport: A read from the page cache ${a_read} GiB/s; B how, disk bytes, seeded bytes, seed GiB/s, ready_s: $b"
    kill "$(cat "$work/b.pid")" "$(cat "$work/a.pid")"; wait 2>/dev/null || true
    rm -f "$work"/*.pid
  done
done

#!/usr/bin/env bash
# conformance/seed_peer.py, a seeding requester written from docs/seeding.md alone, against a real exporter of each
# backend given, on a GPU machine (a cuda-vmm exporter sends from a CPU view of its regions, which needs CUDA):
# every table fetched and checked against the digest record, then each hostile case, then the fetch again, and the
# exporter's fd count before and after. From the repository root, with the gpu bundle (.bundle) or a release:
#   [EH=PATH/engram-host] [MINUTE=1] bash scripts/gpu/gpu-seed-peer.sh OUT_DIR [BACKEND ...]   (default: cuda-vmm memfd;
#   MINUTE=1 adds the cases idle and no-read, the exporter's two 60 s limits, a minute per backend)
# OUT_DIR gets results.txt (a PASS or FAIL line per case and backend) and the daemons' logs. Exit 1 on any FAIL.
set -uo pipefail
OUT=${1:?usage: gpu-seed-peer.sh OUT_DIR [BACKEND ...]}
shift
BACKENDS=("$@")
[ ${#BACKENDS[@]} -gt 0 ] || BACKENDS=(cuda-vmm memfd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
EH=${EH:-$ROOT/.bundle/engram-host}
PEER=$ROOT/conformance/seed_peer.py
[ -x "$EH" ] || { echo "gpu-seed-peer: no engram-host at $EH (scripts/gpu/gpu-bundle.sh makes .bundle; or EH=...)" >&2; exit 2; }
. "$ROOT/scripts/lib/own-dir.sh"
own_dir "$OUT" gpu-seed-peer   # results.txt is appended to: an earlier run's lines would count
rm -f "$OUT"/results.txt "$OUT"/daemon-*.log "$OUT"/generate.log
W=$(mktemp -d /tmp/engram-seed-peer.XXXXXX)
D=""
trap '[ -z "$D" ] || kill "$D" 2>/dev/null; rm -rf "$W"' EXIT
# the gpu bundle's launcher runs the bundle's runtime, unpacked once into $WORK/jre (as gpu-test.sh does)
if [ "$EH" = "$ROOT/.bundle/engram-host" ] && [ ! -x "${WORK:-/tmp/engram-gpu}/jre/bin/java" ]; then
    mkdir -p "${WORK:-/tmp/engram-gpu}" && tar -C "${WORK:-/tmp/engram-gpu}" -xzf "$ROOT/.bundle/jre.tar.gz"
fi
"$EH" generate --out "$W/ckpt" --rows 280000 --layers 1,14 > "$OUT/generate.log" 2>&1 || { cat "$OUT/generate.log"; exit 1; }
"$EH" inspect --write-digests "$W/ckpt" >> "$OUT/generate.log" 2>&1 || { tail -3 "$OUT/generate.log"; exit 1; }
head -c 32 /dev/urandom > "$W/key"; chmod 600 "$W/key"
PORT=7171
for b in "${BACKENDS[@]}"; do
    "$EH" serve --checkpoint "$W/ckpt" --backend "$b" --socket "$W/$b.sock" --numa none --threads 4 \
        --seed-listen 127.0.0.1:$PORT --seed-key "$W/key" > "$OUT/daemon-$b.log" 2>&1 &
    D=$!
    for _ in $(seq 600); do "$EH" status --ready --socket "$W/$b.sock" > /dev/null 2>&1 && break; sleep 0.1; done
    if ! "$EH" status --ready --socket "$W/$b.sock" > /dev/null 2>&1; then
        echo "FAIL $b: the exporter was not ready: $(tail -2 "$OUT/daemon-$b.log")" | tee -a "$OUT/results.txt"
        kill $D 2>/dev/null; wait $D 2>/dev/null; continue
    fi
    python3 "$PEER" 127.0.0.1:$PORT "$W/key" fetch "$W/ckpt/engram-digests.json" | sed "s/^/$b: /" | tee -a "$OUT/results.txt"
    before=$(ls /proc/$D/fd | wc -l)
    if [ "${MINUTE:-0}" = 1 ]; then   # the two 60 s limits, both at once (a minute)
        python3 "$PEER" 127.0.0.1:$PORT "$W/key" idle > "$W/idle.txt" 2>&1 &
        p1=$!
        python3 "$PEER" 127.0.0.1:$PORT "$W/key" no-read > "$W/no-read.txt" 2>&1 &
        wait $p1 $!
        sed "s/^/$b: /" "$W/idle.txt" "$W/no-read.txt" | tee -a "$OUT/results.txt"
    fi
    for c in wrong-proof other-key oversized reserved bad-magic bad-version early-range bad-ranges ahead silent busy fetch; do
        extra=(); [ $c = fetch ] && extra=("$W/ckpt/engram-digests.json")
        python3 "$PEER" 127.0.0.1:$PORT "$W/key" $c "${extra[@]}" | sed "s/^/$b: /" | tee -a "$OUT/results.txt"
    done
    sleep 1
    after=$(ls /proc/$D/fd | wc -l)
    if [ "$after" -le "$before" ]; then
        echo "PASS $b: the exporter holds $after fds after the cases, $before before" | tee -a "$OUT/results.txt"
    else
        echo "FAIL $b: the exporter holds $after fds after the cases, $before before" | tee -a "$OUT/results.txt"
    fi
    "$EH" stop --socket "$W/$b.sock" > /dev/null 2>&1 || kill $D
    wait $D 2>/dev/null
done
fails=$(grep -c 'FAIL' "$OUT/results.txt")
echo "gpu-seed-peer: $(grep -c 'PASS' "$OUT/results.txt") passed, $fails failed"
[ "$fails" = 0 ]

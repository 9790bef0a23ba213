#!/usr/bin/env bash
# Tables over runs of cuda-vmm regions (serve --region-max; docs/protocol.md, "A table over several regions") read by
# the C client and the Java CLI on a GPU machine: a cuda-vmm daemon with --region-max 64M serves a model whose two
# weights (about 244 MiB each) lie in runs of four regions; engram-attach with --cpu-view checks every table's engram
# digest v1 and sha256-tree-v1 through its mapping (all tables, then one weight alone with --table: its run's four
# regions attached, the others closed), and `engram-host import --verify-content` does the same in Java. From the
# repository root, with the gpu bundle (.bundle):
#   [EH=PATH/engram-host] [ATTACH=PATH/engram-attach] bash scripts/gpu/gpu-runs-check.sh OUT_DIR
# OUT_DIR gets results.txt (a PASS or FAIL line per check) and the outputs. Exit 1 on any FAIL.
set -uo pipefail
OUT=${1:?usage: gpu-runs-check.sh OUT_DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
EH=${EH:-$ROOT/.bundle/engram-host}
ATTACH=${ATTACH:-$ROOT/.bundle/engram-attach}
[ -x "$EH" ] && [ -x "$ATTACH" ] || { echo "gpu-runs-check: no engram-host or engram-attach in .bundle (scripts/gpu/gpu-bundle.sh; or EH=, ATTACH=)" >&2; exit 2; }
. "$ROOT/scripts/lib/own-dir.sh"
own_dir "$OUT" gpu-runs-check
rm -f "$OUT"/results.txt "$OUT"/*.json "$OUT"/*.log "$OUT"/*.err
W=$(mktemp -d /tmp/engram-runs-check.XXXXXX)
D=""
trap '[ -z "$D" ] || kill "$D" 2>/dev/null; rm -rf "$W"' EXIT
if [ "$EH" = "$ROOT/.bundle/engram-host" ] && [ ! -x "${WORK:-/tmp/engram-gpu}/jre/bin/java" ]; then
    mkdir -p "${WORK:-/tmp/engram-gpu}" && tar -C "${WORK:-/tmp/engram-gpu}" -xzf "$ROOT/.bundle/jre.tar.gz"
fi
FAIL=0
ok() { echo "PASS $*" | tee -a "$OUT/results.txt"; }
bad() { echo "FAIL $*" | tee -a "$OUT/results.txt"; FAIL=1; }
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@" 2>/dev/null || echo "?"; }
"$EH" generate --out "$W/ckpt" --rows 1000000 --layers 1,14 > "$OUT/generate.log" 2>&1 || { cat "$OUT/generate.log"; exit 1; }
"$EH" inspect --write-digests "$W/ckpt" >> "$OUT/generate.log" 2>&1 || { tail -3 "$OUT/generate.log"; exit 1; }
RECORD=$W/ckpt/engram-digests.json
"$EH" serve --checkpoint "$W/ckpt" --backend cuda-vmm --region-max 64M --socket "$W/d.sock" --numa none --threads 4 \
    > "$OUT/daemon.log" 2>&1 &
D=$!
for _ in $(seq 600); do "$EH" status --ready --socket "$W/d.sock" > /dev/null 2>&1 && break; sleep 0.1; done
"$EH" status --socket "$W/d.sock" --json > "$OUT/status.json" || { bad "the daemon is not ready: $(tail -2 "$OUT/daemon.log")"; exit 1; }
[ "$(field "$OUT/status.json" 'd["regions"]')" = 9 ] && ok "the daemon serves 4 tables in 9 regions (two runs of 4, the scales packed)" \
    || bad "regions: $(field "$OUT/status.json" 'd["regions"]')"
if "$ATTACH" --socket "$W/d.sock" --device 0 --cpu-view --verify --verify-content "$RECORD" --json > "$OUT/attach-all.json" 2> "$OUT/attach-all.err"; then
    [ "$(field "$OUT/attach-all.json" '"%d %d %d" % (d["regions"], d["attached_regions"], d["verified_tables"])')" = "9 9 4" ] \
        && ok "engram-attach: all 9 regions attached, every table's engram digest v1 and sha256-tree-v1 through the CPU view" \
        || bad "engram-attach all: $(cat "$OUT/attach-all.json")"
else
    bad "engram-attach all: $(tail -2 "$OUT/attach-all.err")"
fi
if "$ATTACH" --socket "$W/d.sock" --device 0 --cpu-view --verify --verify-content "$RECORD" --table layers.14.engram.embed.weight \
    --json > "$OUT/attach-one.json" 2> "$OUT/attach-one.err"; then
    [ "$(field "$OUT/attach-one.json" '"%d %d %d" % (d["attached_regions"], d["attached_tables"], d["verified_tables"])')" = "4 1 1" ] \
        && ok "engram-attach --table layers.14.engram.embed.weight: its run's 4 regions attached, the table checked" \
        || bad "engram-attach --table: $(cat "$OUT/attach-one.json")"
else
    bad "engram-attach --table: $(tail -2 "$OUT/attach-one.err")"
fi
if "$EH" import --socket "$W/d.sock" --gpu --device 0 --cpu-view --verify-content "$RECORD" --json > "$OUT/import.json" 2> "$OUT/import.err"; then
    [ "$(field "$OUT/import.json" '"%d %d" % (d["content_check"]["verified"], len(d["tables"]))')" = "4 4" ] \
        && ok "engram-host import (Java): every table's sha256-tree-v1 through the CPU view" \
        || bad "engram-host import: $(field "$OUT/import.json" 'd["content_check"]')"
else
    bad "engram-host import: $(tail -2 "$OUT/import.err")"
fi
exit $FAIL

#!/usr/bin/env bash
# Issue 26 section 3 on the H200: an engine that really restarts. The reference engine (python -m
# engram_host.reference, this checkout's python/) against daemons of the release tarball (scripts/release/dist.sh;
# no Java on the machine), in one device call. Run from the repository root (the device tool: carry ["dist"]):
#   OUT=DIR [GIB=39] [N=5] [STEPS="generate expect finite engram self cold"] [BACKENDS="memfd memfd-hugetlb cuda-vmm"]
#   [CHECK_FULL=cuda-vmm] [COLD_N=1] [BUDGET_S=560] bash scripts/gpu/gpu-engine-restart.sh
# A quick first pass: GIB=1 N=2. At GIB=39 the steps take two calls (the model and the expected outputs stay in
# /var/tmp/engram-model for the second while the machine is warm; it generates them again when it is not):
#   STEPS="generate expect finite engram"   then   STEPS="generate expect self cold"
# What each step does, and the outputs ($OUT/summary.txt, summary.json, results.jsonl, checks.txt, log.txt, the
# engines' stderr and the daemons' logs): scripts/gpu/gpu-engine-restart.py's header; docs/reference.md.
set -uo pipefail
OUT=${OUT:-${1:-/tmp/engine-restart}}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=${WORK_DIR:-/var/tmp/engram-model}
mkdir -p "$W"
TARBALL=$(ls ${TARBALL:-$ROOT/dist/engram-host-*-linux-x86_64.tar.gz} 2>/dev/null | head -1)
if [ -n "${ENGRAM_HOST_LAUNCHER:-}" ]; then
    EH=$ENGRAM_HOST_LAUNCHER  # a checkout's bin/engram-host, for a dry run where Java is installed
else
    [ -f "$TARBALL" ] || { echo "gpu-engine-restart: no release tarball (scripts/release/dist.sh makes it; TARBALL=...)" >&2; exit 2; }
    rm -rf "$W/eh-26" && mkdir -p "$W/eh-26" && tar -xzf "$TARBALL" -C "$W/eh-26" || exit 2
    EH=$(ls -d "$W"/eh-26/engram-host-*/)bin/engram-host
fi
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
python3 -c 'import torch' 2>/dev/null || echo "gpu-engine-restart: PyTorch is not importable: the GPU steps will fail in one line each" >&2
exec python3 "$ROOT/scripts/gpu/gpu-engine-restart.py" --eh "$EH" --work "$W" --out "$OUT"

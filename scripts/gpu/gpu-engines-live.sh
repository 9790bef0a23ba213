#!/usr/bin/env bash
# The engine patches' classes run for real on the GPU machine: vLLM's patched ParallelEngramEmbedding and SGLang's
# patched EngramEmbedding, from the engines' own source files with deploy/engines/vllm.patch and sglang.patch
# applied, in 2 rank processes joined by a torch.distributed gloo group, against live `engram-host serve`
# daemons (memfd, memfd-hugetlb where huge pages are reserved, cuda-vmm) on a tiny DeepSeek-V4.1-shaped model.
# The engines' runtime (distributed groups, config, platform, kernels they import) is stand-ins written in
# gpu-engines-live.py; the engines' servers are not installed and do not run. What each step checks: that
# file's header. Run from the repository root:
#   ENGINES_SRC=DIR OUT=DIR [ENGRAM_HOST_LAUNCHER=.../engram-host] [ROWS=100003] [BACKENDS=memfd,memfd-hugetlb,cuda-vmm]
#   [STEPS=served,fallback,together] [TIMEOUT_S=180] [DRY=1] bash scripts/gpu/gpu-engines-live.sh
# Every group of 2 rank processes imports torch (and compiles vLLM's Triton lookup once a process): where a
# command may run only minutes, split the run, e.g. STEPS=served BACKENDS=memfd, then the rest (each OUT new).
# ENGINES_SRC holds the engines' files laid out as their repositories (git-ignored when carried in the checkout):
#   ENGINES_SRC/vllm/vllm/models/deepseek_v41/common/engram.py, ENGINES_SRC/vllm/vllm/config/engram.py,
#   ENGINES_SRC/sglang/python/sglang/srt/layers/engram.py
# (the blob ids deploy/engines/*.patch name; bench/engines-patch-check.md says where they came from).
# ENGRAM_HOST_LAUNCHER: the daemon's launcher (the gpu bundle's engram-host, scripts/gpu/gpu-bundle.sh); default
# this checkout's bin/engram-host. DRY=1: no GPU, no torch (the sources, vLLM's host-memory check, the page-cache
# measurement; the rest SKIPs). Needs python3 with torch (CUDA), safetensors and numpy; triton where it imports.
# Outputs in $OUT: checks.txt (PASS/FAIL/SKIP lines), summary.json, log.txt, ranks-*/ (each rank's log, spec and
# result), patched/ (the patched files). Exit status 0 when nothing FAILed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
: "${ENGINES_SRC:?set ENGINES_SRC to the directory holding vllm/ and sglang/ (see this header)}"
OUT=${OUT:-/tmp/engines-live}
export ENGRAM_HOST_LAUNCHER=${ENGRAM_HOST_LAUNCHER:-$ROOT/bin/engram-host}
[ -x "$ENGRAM_HOST_LAUNCHER" ] || { echo "gpu-engines-live: $ENGRAM_HOST_LAUNCHER is not executable (set ENGRAM_HOST_LAUNCHER)" >&2; exit 2; }
mkdir -p "$OUT"
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
ARGS=(--engines-src "$ENGINES_SRC" --out "$OUT/run" --rows "${ROWS:-100003}"
      --backends "${BACKENDS:-memfd,memfd-hugetlb,cuda-vmm}" --timeout "${TIMEOUT_S:-180}"
      --steps "${STEPS:-served,fallback,together}")
[ "${DRY:-0}" = 1 ] && ARGS+=(--dry)
python3 "$ROOT/scripts/gpu/gpu-engines-live.py" "${ARGS[@]}" 2>&1 | tee "$OUT/log.txt"
exit "${PIPESTATUS[0]}"

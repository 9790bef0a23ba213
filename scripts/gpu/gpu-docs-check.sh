#!/usr/bin/env bash
# On the H200, from the release tarball (scripts/release/dist.sh) as a user would: docs/python.md's python blocks as
# written, against a cuda-vmm daemon serving a `generate --model` directory at the doc's MODEL_DIR (the engine
# example's lookup compared with the files' bytes dequantised); the README's quick start as written (the daemon started
# in the background just before its Python block, which waits for it); then
# python/tests/gpu/test_torch_daemon.py with the release's launcher. Run from the repository root:
#   OUT=DIR bash scripts/gpu/gpu-docs-check.sh       (the device tool sets OUT; carry dist)
set -u
OUT=${OUT:-/tmp/docs-check}; mkdir -p "$OUT"
W=/tmp/eh; rm -rf $W; mkdir -p $W; tar -xzf dist/engram-host-*-linux-x86_64.tar.gz -C $W && mv $W/engram-host-*/ $W/eh
EH=$W/eh/bin/engram-host
export ENGRAM_PY=$W/eh/python
python3 -c 'import torch; print(torch.__version__, torch.cuda.device_count())'
rm -rf /models/deepseek-v4.1
$EH generate --model --out /models/deepseek-v4.1 --rows 100000 || exit 1
export ENGRAM_HOST_SOCKET=$W/d.sock
$EH serve --checkpoint /models/deepseek-v4.1 --backend cuda-vmm --numa none --socket $ENGRAM_HOST_SOCKET > $OUT/serve.log 2>&1 &
D=$!
for i in $(seq 100); do $EH status --ready --socket $ENGRAM_HOST_SOCKET >/dev/null 2>&1 && break; sleep 0.3; done
python3 scripts/gpu/gpu-docs-check.py 2>&1 | tee $OUT/docs.txt
$EH stop --socket $ENGRAM_HOST_SOCKET; wait $D; tail -3 $OUT/serve.log
# README's quick start, its commands as written (bin/engram-host is the release's launcher here; its pip install is
# of the release's wheel, into the python3 that holds PyTorch)
sed -n '/^## Quick start/,/^EOF$/p' README.md | sed -n '/^```$/,$p' | sed '1d' > $W/quick.sh
sed -i "s#^bin/engram-host #$EH #; s#^pip install .*#python3 -m pip install -q --no-index --force-reinstall $W/eh/python/engram_host-*.whl#; s#--backend memfd &#--backend memfd --socket $ENGRAM_HOST_SOCKET > $OUT/serve-readme.log 2>\&1 \&#" $W/quick.sh
# no wait inserted before the Python block: its connect(..., wait=60) waits for the daemon started just before
cat $W/quick.sh
bash $W/quick.sh 2>&1 | tee $OUT/readme.txt
$EH stop --socket $ENGRAM_HOST_SOCKET
cd python/tests && PYTHONPATH=$ENGRAM_PY ENGRAM_HOST_LAUNCHER=$EH ENGRAM_GPU_ROWS=200000 ENGRAM_GPU_BACKENDS=memfd,cuda-vmm \
  timeout 300 python3 -m unittest -v gpu.test_torch_daemon 2>&1 | tail -40 | tee $OUT/gpu-tests.txt

#!/usr/bin/env bash
# Device call: the load pipeline's A/B (bench/load-pipeline.md) on memfd, memfd-hugetlb and cuda-vmm:
# base = a0aaadc's jars (lib-base/) on the bundle's dependencies, new = the bundle's own build.
set -uo pipefail
B=$PWD/.bundle
export WORK=/tmp/engram-gpu
mkdir -p "$WORK" && tar -C "$WORK" -xzf "$B/jre.tar.gz"
mkdir -p /tmp/base/lib
cp "$B/jvm.options" "$B/daemon.jvm.options" "$B/engram-host" /tmp/base/
for j in "$B"/lib/*.jar; do case $(basename "$j") in engram-*) ;; *) ln -sf "$j" /tmp/base/lib/ ;; esac; done
cp "$B"/lib-base/*.jar /tmp/base/lib/
echo "new commit: $(cat "$B/COMMIT")  base commit: a0aaadc"
nvidia-smi -L; nproc; free -g | head -2; uname -r
"$B/engram-host" --version; /tmp/base/engram-host --version
M=/tmp/model
rm -rf "$M"
t0=$(date +%s.%N)
"$B/engram-host" generate --model --out "$M" --rows "${ROWS:-12000000}" > "$OUT/generate.log" 2>&1 || { cat "$OUT/generate.log"; exit 1; }
echo "generated $(du -sh $M | cut -f1) in $(python3 -c "print(round($(date +%s.%N)-$t0,1))") s"
HUGE0=$(cat /proc/sys/vm/nr_hugepages)
echo "${HUGEPAGES:-3600}" > /proc/sys/vm/nr_hugepages; echo "nr_hugepages: $(cat /proc/sys/vm/nr_hugepages)"
for be in ${BACKENDS:-memfd memfd-hugetlb cuda-vmm}; do
  echo "=== backend $be"
  if [ "${SWAP:-0}" = 1 ]; then  # the new build first in each pair: the script's "base" rows are the new build's
    echo "SWAP=1: the rows named base are the new build's, those named new a0aaadc's"
    SERVE_ARGS="--backend $be" bash scripts/bench/load-pipeline.sh "$M" "$B/engram-host" /tmp/base/engram-host "${RUNS:-4}" 2>&1 | tee "$OUT/load-$be.log"
  else
    SERVE_ARGS="--backend $be" bash scripts/bench/load-pipeline.sh "$M" /tmp/base/engram-host "$B/engram-host" "${RUNS:-4}" 2>&1 | tee "$OUT/load-$be.log"
  fi
done
echo "$HUGE0" > /proc/sys/vm/nr_hugepages

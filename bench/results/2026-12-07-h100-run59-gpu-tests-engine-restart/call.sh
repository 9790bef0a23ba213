#!/usr/bin/env bash
# session 19 call 1: every gpu-tagged test (Java, Python), then the engine restart table with self n=3 and the cold arm
set -u
R=$(pwd); B=$R/.bundle; S=$OUT/steps.txt; T0=$SECONDS
mkdir -p $OUT/gt $OUT/er
echo 1024 > /proc/sys/vm/nr_hugepages
OUT=$OUT/gt TEST_TIMEOUT=150 PY_TEST_TIMEOUT=330 bash $B/gpu-test.sh > $OUT/gpu-test.log 2>&1; echo "gpu-test rc=$? at $((SECONDS-T0))s" >> $S
left=$(( 585 - (SECONDS-T0) ))
ENGRAM_HOST_LAUNCHER=$B/engram-host WORK=/tmp/engram-gpu OUT=$OUT/er GIB=16 N=3 COLD_N=2 STEPS="generate expect engram self cold" \
  BACKENDS="cuda-vmm memfd-hugetlb memfd" BUDGET_S=$((left-8)) timeout $((left-3)) bash scripts/gpu/gpu-engine-restart.sh > $OUT/er.log 2>&1
echo "engine-restart rc=$? at $((SECONDS-T0))s" >> $S
cat $S; tail -30 $OUT/gt/summary.txt $OUT/er/summary.txt 2>/dev/null
cd $OUT && rm -f er/*.npy er/*.pt 2>/dev/null; du -sh * ; tar -cJf r.tar.xz --exclude=r.tar.xz gt er steps.txt gpu-test.log er.log && find . -mindepth 1 -maxdepth 1 ! -name r.tar.xz -exec rm -rf {} + ; ls -la

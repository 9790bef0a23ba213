#!/usr/bin/env bash
# session 20's last call (not run: no machine): cuda-vmm's load A/B with the new build first in each pair (run 61 had
# a0aaadc first; NEW_FIRST=1 of scripts/bench/load-pipeline.sh, through this folder's call.sh copied to
# .bundle/load-ab.sh), then the gpu-tagged tests (Java, then Python) on the final code as long as the call lasts
set -u
B=$PWD/.bundle; S=$OUT/steps.txt; T0=$SECONDS
mkdir -p $OUT/gt $OUT/ab
OUT=$OUT/ab NEW_FIRST=1 RUNS=7 BACKENDS=cuda-vmm timeout 150 bash $B/load-ab.sh > $OUT/ab.log 2>&1
echo "load-ab rc=$? at $((SECONDS-T0))s" >> $S
grep -v "^run " $OUT/ab.log | tail -5
echo 1024 > /proc/sys/vm/nr_hugepages
OUT=$OUT/gt TEST_TIMEOUT=150 PY_TEST_TIMEOUT=${PYT:-150} bash $B/gpu-test.sh > $OUT/gpu-test.log 2>&1; echo "gpu-test rc=$? at $((SECONDS-T0))s" >> $S
grep -E "tests (successful|failed|skipped)" $OUT/gt/junit-console.txt; tail -4 $OUT/gt/python-gpu.txt; cat $S

#!/usr/bin/env bash
# session 19 call 2: the digest record's check cost at 39 GiB, 5 rounds of the three arms
set -u
R=$(pwd); B=$R/.bundle; T0=$SECONDS
mkdir -p /tmp/engram-gpu; [ -x /tmp/engram-gpu/jre/bin/java ] || tar -C /tmp/engram-gpu -xzf $B/jre.tar.gz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt; nproc >> $OUT/env.txt; free -g >> $OUT/env.txt
mkdir -p $OUT/rc
EH=$B/engram-host GIB=39 ROUNDS=${ROUNDS:-5} timeout ${LIMIT:-560} bash scripts/gpu/gpu-record-cost.sh $OUT/rc > $OUT/rc.log 2>&1
echo "record-cost rc=$? at $((SECONDS-T0))s" | tee $OUT/steps.txt
cat $OUT/rc/summary.txt
cd $OUT && tar -cJf r.tar.xz --exclude=r.tar.xz rc rc.log steps.txt env.txt && rm -rf rc rc.log && ls -la

#!/usr/bin/env bash
# The two-node run in one command (docs/numa.md, "Two nodes, emulated"): prepares target/numa-vm/ on this machine,
# boots the two-node guest of scripts/numa/numa-vm.sh and runs scripts/numa/numa-guest-checks.sh in it.
#
#   scripts/numa/numa-two-node.sh [--quick|--ci]  (--quick: the policies, the refusals and the hugetlb pools; --ci: the
#                                            policies and the numa module's tests, the subset bin/test runs)
#
# Prepared here, where it is fast, and read by the guest over 9p: the build (mvn package of numa and the CLI when
# engram-host/cli/target/app, the CLI's test jar or numa's test classes are missing; SKIP_BUILD=1 skips it, and
# the script stops, exit 125, when they are missing then), synthetic checkpoints of 50.4 and 201 MiB with
# their digests sidecars (inspect --write-digests), CDS archives of a daemon and a client run (-XX:ArchiveClassesAtExit; a JVM
# under TCG spends most of its start loading classes), and the numa tests' class path with JUnit's console launcher.
# Results: target/numa-vm/out/results.txt (and every log beside it); totals in target/numa-vm/out/totals
# ("passed failed skipped"). Exit status: the guest checks' (0 when none failed), 124 on timeout, 125 when the guest
# could not run.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
QUICK=()
[ "${1:-}" = --quick ] && QUICK=(--quick)
[ "${1:-}" = --ci ] && QUICK=(--ci)
DATA=target/numa-vm
OUTDIR=$DATA/out
t0=$(date +%s)
say() { echo "numa-two-node: $* ($(($(date +%s) - t0)) s)"; }
MVN=(mvn -B -ntp -q)

# built: the CLI's app, its test jar (the guest's daemons start through bin/engram-host-test, whose hooks read
# ENGRAM_HOST_TEST_GPU_NUMA_NODES) and the numa tests' classes; the guest sees the checkout read-only, so all of it
# is built here, before the guest boots
built() {
  ls engram-host/cli/target/app/lib/engram-cli-*.jar engram-host/cli/target/engram-cli-*-tests.jar >/dev/null 2>&1 \
    && [ -d numa/target/test-classes ]
}
if [ "${SKIP_BUILD:-0}" != 1 ] && ! built; then
  say "building numa and the CLI"
  "${MVN[@]}" -pl numa,engram-host/cli -am package -DskipTests
fi
built || { say "not built: engram-host/cli/target/app, its test jar or numa/target/test-classes is missing" \
  "(mvn -B -ntp -DskipTests package builds them; bin/test's mvn verify does too)"; exit 125; }
mkdir -p "$DATA"
if [ ! -f "$DATA/ckpt/engram-digests.json" ]; then
  rm -rf "$DATA/ckpt"
  bin/engram-host generate --out "$DATA/ckpt" --rows 100000 --layers 1,14 >/dev/null
  bin/engram-host inspect --write-digests "$DATA/ckpt" >/dev/null
fi
if [ ! -f "$DATA/ckpt-big/engram-digests.json" ]; then
  rm -rf "$DATA/ckpt-big"
  bin/engram-host generate --out "$DATA/ckpt-big" --rows 400000 --layers 1,14 --seed 7 >/dev/null
  bin/engram-host inspect --write-digests "$DATA/ckpt-big" >/dev/null
fi
# CDS archives, dumped again when any jar is newer
newest=$(ls -t engram-host/cli/target/app/lib/*.jar | head -1)
if [ ! -f "$DATA/daemon.jsa" ] || [ ! -f "$DATA/client.jsa" ] || [ "$newest" -nt "$DATA/client.jsa" ]; then
  say "dumping CDS archives"
  rm -f "$DATA"/*.jsa
  sock=$(mktemp -u /tmp/numa-cds.XXXXXX.sock)
  log=$(mktemp)
  ENGRAM_HOST_JVM_OPTS="-XX:ArchiveClassesAtExit=$DATA/daemon.jsa" bin/engram-host serve --checkpoint "$DATA/ckpt" \
    --socket "$sock" --numa interleave --threads 2 > "$log" 2>&1 &
  dpid=$!
  for _ in $(seq 1 200); do grep -q ' ready: ' "$log" && break; sleep 0.1; done
  ENGRAM_HOST_JVM_OPTS="-XX:ArchiveClassesAtExit=$DATA/client.jsa" bin/engram-host import --socket "$sock" \
    --expect-checkpoint "$DATA/ckpt" --verify-content "$DATA/ckpt/engram-digests.json" --json > /dev/null
  bin/engram-host status --socket "$sock" --json > /dev/null
  kill -TERM "$dpid"; wait "$dpid" || true
  rm -f "$log" "$sock" "$sock.lock"
fi
if [ "${QUICK[*]}" != --quick ] && { [ ! -f "$DATA/numa-test.cp" ] || [ numa/pom.xml -nt "$DATA/numa-test.cp" ]; }; then
  "${MVN[@]}" -f numa/pom.xml dependency:build-classpath -Dmdep.includeScope=test -Dmdep.outputFile="$ROOT/$DATA/numa-test.cp"
  "${MVN[@]}" -f numa/pom.xml dependency:copy -Dartifact=org.junit.platform:junit-platform-console-standalone:1.14.1 \
    -DoutputDirectory="$ROOT/$DATA"
  mv "$DATA/junit-platform-console-standalone-1.14.1.jar" "$DATA/junit-console.jar"
fi
rm -rf "$OUTDIR" && mkdir -p "$OUTDIR"
say "booting the two-node guest"
set +e
NUMA_VM_OUT="$OUTDIR" scripts/numa/numa-vm.sh bash scripts/numa/numa-guest-checks.sh "${QUICK[@]}"
rc=$?
set -e
say "done, exit $rc; results in $OUTDIR/results.txt"
exit $rc

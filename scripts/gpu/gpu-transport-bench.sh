#!/usr/bin/env bash
# Seeding's transport candidates on the H200 machine (no Java there): SeedTransportBench (jmh), Netty's epoll
# transport with sendfile from a memfd against gRPC-java server-streaming 1 MiB and 4 MiB messages, loopback, both
# in one JMH run (bench/transport-candidates.md). Java is the release tarball's jlink runtime (runtime/bin/java:
# java.base, java.logging, java.management, ... — what JMH needs), the benchmarks jar carried beside it. From the
# repository root, with dist/engram-host-*-linux-x86_64.tar.gz and jmh/target/benchmarks.jar carried:
#   [TOTAL_MIB=4096] [STREAMS=2,16] [DEST=buffer,memfd] [JMH="-f 1 -wi 2 -i 5"] bash scripts/gpu/gpu-transport-bench.sh OUT_DIR
# OUT_DIR gets env.txt (machine, load average before and after, the runtime's modules), run.log (JMH's output),
# transport.json and transport.meta.json (JMH's results and BenchMain's metadata) and summary.md (GiB/s per variant:
# median, min, max, and each gRPC variant's median against Netty's; scripts/bench/transport-summary.py).
# Defaults: 12 variants (3 transports x 2 stream counts x 2 destinations), 7 transfers of 4 GiB each, one fork each.
# JAVA=/path/to/bin/java uses that instead of the tarball's runtime.
set -euo pipefail
OUT=${1:?usage: gpu-transport-bench.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
TOTAL_MIB=${TOTAL_MIB:-4096}
STREAMS=${STREAMS:-2,16}
DEST=${DEST:-buffer,memfd}
JMH=${JMH:--f 1 -wi 2 -i 5}
JAR=$ROOT/jmh/target/benchmarks.jar
[ -f "$JAR" ] || { echo "gpu-transport-bench: $JAR is missing (mvn -B -o -DskipTests package; carry it)" >&2; exit 1; }
W=${WORK:-/var/tmp/engram-transport}
if [ -z "${JAVA:-}" ]; then
  TARBALL=$(ls ${TARBALL:-$ROOT/dist/engram-host-*-linux-x86_64.tar.gz} 2>/dev/null | head -1)
  [ -n "$TARBALL" ] || { echo "gpu-transport-bench: no dist/engram-host-*-linux-x86_64.tar.gz (scripts/release/dist.sh; carry dist/)" >&2; exit 1; }
  . "$ROOT/scripts/lib/own-dir.sh"
  own_dir "$W" gpu-transport-bench
  rm -rf "$W"/engram-host-*/
  tar -xzf "$TARBALL" -C "$W"
  JAVA=$(ls "$W"/engram-host-*/runtime/bin/java)
fi
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname) $(uname -r) nproc $(nproc)"
  grep -m1 'model name' /proc/cpuinfo || true
  free -g | sed -n 2p
  echo "load before: $(cat /proc/loadavg)"
  echo "java: $JAVA"
  "$JAVA" -version 2>&1
  echo "modules: $("$JAVA" --list-modules | sed 's/@.*//' | paste -sd' ')"
  echo "jar: $(stat -c %s "$JAR") bytes"
  echo "args: -p totalMiB=$TOTAL_MIB -p streams=$STREAMS -p dest=$DEST $JMH"
} > "$OUT/env.txt"
# shellcheck disable=SC2086
"$JAVA" -Djava.io.tmpdir="$W/tmp" -jar "$JAR" SeedTransportBench -p totalMiB="$TOTAL_MIB" -p streams="$STREAMS" \
  -p dest="$DEST" $JMH --out "$OUT" --name transport 2>&1 | tee "$OUT/run.log" | grep -E '^(# Benchmark|# Parameters|Iteration)' || true
rc=${PIPESTATUS[0]}
echo "load after: $(cat /proc/loadavg)" >> "$OUT/env.txt"
if [ -s "$OUT/transport.json" ] && command -v python3 >/dev/null 2>&1; then
  python3 "$ROOT/scripts/bench/transport-summary.py" "$OUT/transport.json" | tee "$OUT/summary.md"
fi
exit "$rc"

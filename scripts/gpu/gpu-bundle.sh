#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, everything the GPU machine needs to run the gpu-tagged tests
# without Java, Maven or network there (the benchmarks have their own bundle: scripts/gpu/bench-gpu-bundle.sh):
#   jre.tar.gz      jlink runtime (scripts/release/jlink-runtime.sh: the modules of the jars, plus java.xml for the
#                   XML reports and jdk.jfr for profiles (JFR=1 of gpu-record-cost.sh)), --compress=2
#   lib/            the project's jars (all modules but jmh) and their runtime dependencies
#   lib-test/       junit-platform-console-standalone 1.14.1 (JUnit 5.14.1)
#   test-classes/   native/, cudavmm/ and engram-host/ test classes (the gpu tests, ImportChild); engram-host/
#                   holds the test classes of every engram-host/* module (protocol, checkpoint, client, daemon, cli)
#   engram-attach   the C client of the wire protocol (native/c)
#   engram_kernels.ptx, cuda/, Makefile   the kernels (also inside the native jar) and their source
#   jvm.options     the JVM flags of the parent pom (engram.jvm.flags); daemon.jvm.options, serve's own
#   engram-host     a launcher of the CLI on the bundle's runtime (the Python GPU tests start daemons with it)
#   python/         the Python package and its tests (python/tests/gpu runs there, with PyTorch)
#   gpu-test.sh     what to run there
# Usage: scripts/gpu/gpu-bundle.sh [OUTPUT_DIR]   (default /work/main/.bundle; must stay under 64 MiB; OUTPUT_DIR new, empty
# or a bundle of these scripts, which it replaces: scripts/lib/own-dir.sh)
# MVN_ONLINE=1 lets Maven fetch the console launcher once if ~/.m2 lacks it.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${1:-/work/main/.bundle}
MVN=(mvn -B -q)
[ "${MVN_ONLINE:-0}" = 1 ] || MVN+=(-o)
CONSOLE=org.junit.platform:junit-platform-console-standalone:1.14.1

cd "$ROOT"
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT

echo "== building jars and test classes"
"${MVN[@]}" -pl engram-host/cli -am -DskipTests package dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$STAGE/lib"
"${MVN[@]}" dependency:copy -Dartifact="$CONSOLE" -DoutputDirectory="$STAGE/lib-test"

echo "== jar files"
# the project's version, as the root pom names it (each jar is engram-<module>-<version>.jar)
VERSION=$(python3 -c 'import sys, xml.etree.ElementTree as E
print(E.parse(sys.argv[1]).getroot().findtext("{http://maven.apache.org/POM/4.0.0}version"))' pom.xml)
for m in native numa memfd-backend cudavmm-backend engram-host/protocol engram-host/checkpoint engram-host/client \
        engram-host/daemon; do
    cp "$m"/target/engram-*-"$VERSION".jar "$STAGE/lib/"
    rm -f "$STAGE"/lib/*-tests.jar   # test classes travel as test-classes/
done
cp engram-host/cli/target/app/lib/engram-cli-"$VERSION".jar "$STAGE/lib/"
mkdir -p "$STAGE/test-classes"
cp -r native/target/test-classes "$STAGE/test-classes/native"
cp -r cudavmm-backend/target/test-classes "$STAGE/test-classes/cudavmm"
mkdir -p "$STAGE/test-classes/engram-host"
for m in protocol checkpoint client daemon cli; do
    [ ! -d engram-host/$m/target/test-classes ] || cp -r engram-host/$m/target/test-classes/. "$STAGE/test-classes/engram-host/"
done
cp native/target/classes/io/engramhost/os/jvm.options "$STAGE/jvm.options"
cp engram-host/cli/target/app/daemon.jvm.options "$STAGE/daemon.jvm.options"
mkdir -p "$STAGE/python"
cp -r python/engram_host python/tests python/pyproject.toml "$STAGE/python/"
find "$STAGE/python" -name __pycache__ -prune -exec rm -rf {} +
cat > "$STAGE/engram-host" <<'LAUNCHER'
#!/usr/bin/env bash
# The CLI on the bundle's runtime (unpacked by gpu-test.sh into $WORK/jre), with the build's JVM flags.
set -euo pipefail
B=$(cd "$(dirname "$0")" && pwd)
JAVA="${WORK:-/tmp/engram-gpu}/jre/bin/java"
read -r -a flags < "$B/jvm.options" || true
if [ "${1:-}" = serve ]; then read -r -a d < "$B/daemon.jvm.options" || true; flags+=("${d[@]}"); fi
exec "$JAVA" "${flags[@]}" -cp "$B/lib/*" io.engramhost.cli.Main "$@"
LAUNCHER
chmod +x "$STAGE/engram-host"

echo "== C client and kernels"
make -s -C native engram-attach
cp native/build/engram-attach "$STAGE/"
cp native/src/main/ptx/io/engramhost/cuda/engram_kernels.ptx "$STAGE/"
mkdir -p "$STAGE/cuda" && cp native/cuda/*.cu "$STAGE/cuda/" && cp native/Makefile "$STAGE/"

echo "== jlink runtime"
scripts/release/jlink-runtime.sh --add java.xml,jdk.jfr --compress 2 "$STAGE/jre" "$STAGE"/lib/*.jar
tar -C "$STAGE" -czf "$STAGE/jre.tar.gz" jre
rm -rf "$STAGE/jre"

cp scripts/gpu/gpu-test.sh "$STAGE/"
git rev-parse HEAD > "$STAGE/COMMIT" 2>/dev/null || true

. "$ROOT/scripts/lib/own-dir.sh"
own_dir "$DEST" gpu-bundle   # a bundle of an earlier run is replaced; a directory of other files is refused
rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
cp -r "$STAGE" "$DEST"
mark_dir "$DEST"
chmod -R a+rX "$DEST"
SIZE=$(du -sm "$DEST" | cut -f1)
echo "== bundle at $DEST: ${SIZE} MiB"
if [ "$SIZE" -ge 64 ]; then
    echo "bundle is ${SIZE} MiB: over the 64 MiB the device tool carries" >&2
    exit 1
fi

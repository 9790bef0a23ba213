#!/usr/bin/env bash
# Runs the unit tests of native, numa and memfd-backend on an arm64 (aarch64) JVM under qemu-user, on this
# x86-64 machine: the aarch64 syscall numbers, struct layouts and page-size handling, executed for real.
# Not part of CI (it takes several minutes). Record what it says in bench/arm64-runs.md.
#
#   1. installs qemu-user-static (Debian) if missing and registers its aarch64 binfmt handler, so that the
#      arm64 JVM can start child JVMs and jspawnhelper (needs root; mounts binfmt_misc if needed);
#   2. unpacks Debian's openjdk-17-jre-headless:arm64 with libc6, libgcc-s1, libstdc++6 and zlib1g into a
#      sysroot (ARM64_ROOT, default /var/tmp/engram-arm64-root) that qemu reads through QEMU_LD_PREFIX;
#      the host's own (amd64) packages are left as they are;
#   3. builds the modules (mvn -o unless MVN_ONLINE=1), fetches the JUnit console launcher, and copies each
#      module's classes, test classes and test class path to target/arm64-qemu/<module>/ (a snapshot, so a
#      build running meanwhile in the same tree cannot change what is tested);
#   4. runs each module's tests on the arm64 java with the console launcher, gpu tag excluded; the tree of
#      results (with every skip's reason) goes to target/arm64-qemu/<module>.log, the XML reports beside it.
#
# Usage: scripts/ci/arm64-qemu-test.sh [module ...]     (default: native numa memfd-backend)
# Exit status: 0 when no test failed in any module.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SYSROOT=${ARM64_ROOT:-/var/tmp/engram-arm64-root}
MODULES=("$@")
[ ${#MODULES[@]} -gt 0 ] || MODULES=(native numa memfd-backend)
PACKAGES=(openjdk-17-jre-headless:arm64 libc6:arm64 libgcc-s1:arm64 libstdc++6:arm64 zlib1g:arm64)
CONSOLE=org.junit.platform:junit-platform-console-standalone:1.14.1
# What qemu-user cannot emulate, left out by name (each is named in the output). A test that meets ENOSYS
# from qemu (mbind, move_pages) or a refused seccomp filter skips itself with the reason.
#  - hugetlb mappings: qemu-user places every guest mapping itself, MAP_FIXED at 4 KiB alignment, so the
#    kernel refuses a 2 MiB hugetlb mapping with EINVAL before the reservation check gives ENOMEM.
QEMU_CANNOT=("io.engramhost.memfd.MemfdRegionTest#shouldSayHugePagesAreMissingWhenNoneAreReserved")
MVN=(mvn -B -q -ntp)
[ "${MVN_ONLINE:-0}" = 1 ] || MVN+=(-o)
OUT="$ROOT/target/arm64-qemu"

[ "$(id -u)" = 0 ] || { echo "run as root: it installs qemu and registers a binfmt handler" >&2; exit 2; }
export DEBIAN_FRONTEND=noninteractive

echo "== qemu-user"
if ! command -v qemu-aarch64-static >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq qemu-user-static >/dev/null
fi
qemu-aarch64-static --version | head -1
BINFMT=/proc/sys/fs/binfmt_misc
[ -e "$BINFMT/register" ] || mount -t binfmt_misc binfmt_misc "$BINFMT"
if [ ! -e "$BINFMT/qemu-aarch64" ]; then
    cat /usr/lib/binfmt.d/qemu-aarch64.conf > "$BINFMT/register"
fi
grep -q enabled "$BINFMT/qemu-aarch64"

echo "== arm64 JVM in $SYSROOT"
JAVA="$SYSROOT/usr/lib/jvm/java-17-openjdk-arm64/bin/java"
if [ ! -x "$JAVA" ]; then
    dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
    apt-get update -qq
    DEBS=$(mktemp -d)
    (cd "$DEBS" && chmod 777 . && apt-get download -qq "${PACKAGES[@]}")
    rm -rf "$SYSROOT" && mkdir -p "$SYSROOT"
    for d in "$DEBS"/*.deb; do dpkg -x "$d" "$SYSROOT"; done
    rm -rf "$DEBS"
fi
export QEMU_LD_PREFIX="$SYSROOT"
"$JAVA" -XshowSettings:properties -version 2>&1 | grep -E "^ +(os.arch|java.runtime.version) = "

echo "== build and test class paths (Maven's output: $OUT/mvn.log)"
cd "$ROOT"
mkdir -p "$OUT" && : > "$OUT/mvn.log"
mvnq() { "${MVN[@]}" "$@" >> "$OUT/mvn.log" 2>&1 || { tail -40 "$OUT/mvn.log" >&2; exit 1; }; }
MODLIST=$(IFS=,; echo "${MODULES[*]}")
mvnq -DskipTests install -pl "$MODLIST" -am
mvnq dependency:copy -Dartifact="$CONSOLE" -DoutputDirectory="$OUT"
LAUNCHER="$OUT/junit-platform-console-standalone-1.14.1.jar"
FLAGS=$(cat native/target/classes/io/engramhost/os/jvm.options)

failed=0
for m in "${MODULES[@]}"; do
    STAGE="$OUT/$m"
    rm -rf "$STAGE" && mkdir -p "$STAGE/lib" "$STAGE/tmp" "$STAGE/reports"
    cp -r "$m/target/classes" "$STAGE/classes"
    cp -r "$m/target/test-classes" "$STAGE/test-classes"
    mvnq -f "$m/pom.xml" dependency:build-classpath -Dmdep.includeScope=test -Dmdep.outputFile="$STAGE/cp.txt"
    CP="$STAGE/test-classes:$STAGE/classes"
    for jar in $(tr ':' ' ' < "$STAGE/cp.txt"); do
        cp "$jar" "$STAGE/lib/"
        CP="$CP:$STAGE/lib/$(basename "$jar")"
    done
    EXCLUDE=()
    for t in "${QEMU_CANNOT[@]}"; do
        EXCLUDE+=(--exclude-methodname "^${t//./\\.}.*")
        if [ -f "$STAGE/test-classes/$(echo "${t%%#*}" | tr . /).class" ]; then
            echo "   left out (qemu-user cannot emulate it): $t"
        fi
    done
    echo "== $m on $(uname -m) under qemu-aarch64 (started $(date -u +%H:%M:%S))"
    set +e
    # From the module's folder, as surefire runs them. FLAGS is a list of JVM options.
    # shellcheck disable=SC2086
    (cd "$m" && "$JAVA" $FLAGS -Djava.io.tmpdir="$STAGE/tmp" -cp "$LAUNCHER:$CP" \
        org.junit.platform.console.ConsoleLauncher execute --scan-class-path "$STAGE/test-classes" \
        --exclude-tag gpu "${EXCLUDE[@]}" --reports-dir "$STAGE/reports" --details=tree --disable-banner \
        --disable-ansi-colors) > "$OUT/$m.log" 2>&1
    rc=$?
    set -e
    sed -n '/^Test run finished/,$p' "$OUT/$m.log"
    grep -E "(↷|✘|■).*" "$OUT/$m.log" | sed 's/^/   /' || true
    [ $rc = 0 ] || { failed=1; echo "   $m: FAILED (exit $rc), see $OUT/$m.log"; }
done
exit $failed

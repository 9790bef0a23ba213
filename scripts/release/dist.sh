#!/usr/bin/env bash
# Builds the release tarball dist/engram-host-<version>-linux-x86_64.tar.gz from what `mvn package` built
# (engram-host/cli/target/app); `mvn -B -Pdist package` runs it after the build. Unpacked anywhere, it runs with no
# Java on the machine and no network:
#   bin/engram-host         the launcher (the repository's own: it finds app/ and runtime/ next to bin/)
#   bin/engram-attach       the C client of the wire protocol (make -C native engram-attach)
#   runtime/                a jlink runtime of the modules the jars need (scripts/release/jlink-runtime.sh)
#   app/lib/*.jar           the CLI, daemon and client jars and their dependencies
#   client/*.jar            a Java engine's class path: engram-client and its runtime dependencies only
#   app/classpath           the jars in the order the launcher puts them on the class path
#   app/jvm.options, app/daemon.jvm.options   the JVM flags (parent pom: engram.jvm.flags, engram.daemon.jvm.flags)
#   app/jni/x86_64-Linux/libjffi-*.so   jffi's stub library, which the launcher names (jffi.boot.library.path) so that
#                           jffi does not unpack a copy into java.io.tmpdir on every start
#   app/engram-host.jsa     an AppCDS archive of the classes the commands load, dumped here by the bundled runtime
#   share/bash-completion/completions/engram-host, share/zsh/engram-host-completion.zsh   Picocli's completion
#   LICENSE                 engram-host's own licence (Apache-2.0)
#   licenses/               THIRD-PARTY.txt and the licence texts of every bundled jar (scripts/release/third-party.py)
#   README.md, docs/, deploy/ and python/ (when the repository has them), BUILD (version, commit, modules)
#   python/engram_host-<version>-py3-none-any.whl   the Python package's wheel (scripts/release/python-wheel.sh):
#                           pip install --no-index it into any venv, no build and no network
# Usage: scripts/release/dist.sh     (x86-64 only; needs jlink and jdeps of a JDK 17, make, cc, python3 with venv, and
#        setuptools and wheel for pip: from its index, or offline Debian's python3-setuptools-whl and python3-wheel-whl)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
APP=engram-host/cli/target/app
DEPS=engram-host/cli/target/app-dependencies.txt
t0=$(date +%s)
if [ ! -f "$APP/jvm.options" ] || [ ! -f "$DEPS" ] || ! ls "$APP"/lib/engram-cli-*.jar >/dev/null 2>&1 \
    || ! ls "$APP"/jni/x86_64-Linux/libjffi-*.so >/dev/null 2>&1; then
  echo "dist: $APP is not built: run mvn -B -DskipTests package (or mvn -B -Pdist package)" >&2
  exit 1
fi
if [ "$(uname -m)" != x86_64 ]; then
  echo "dist: the release tarball is x86-64 only (docs/arm64.md)" >&2
  exit 1
fi
cli_jar=$(ls "$APP"/lib/engram-cli-*.jar)
VERSION=$(basename "$cli_jar" .jar)
VERSION=${VERSION#engram-cli-}
NAME=engram-host-$VERSION
WORK=target/dist
STAGE=$WORK/$NAME
OUT=dist/$NAME-linux-x86_64.tar.gz
rm -rf "$WORK"
mkdir -p "$STAGE/bin" "$STAGE/app/lib" dist

echo "== app: jars and JVM flags ($(($(date +%s) - t0)) s)"
cp -p "$APP"/lib/*.jar "$STAGE/app/lib/"
cp "$APP/jvm.options" "$APP/daemon.jvm.options" "$STAGE/app/"
mkdir -p "$STAGE/app/jni"
cp -r "$APP/jni/x86_64-Linux" "$STAGE/app/jni/"
(cd "$STAGE/app/lib" && ls -1 -- *.jar | LC_ALL=C sort) > "$STAGE/app/classpath"
cp bin/engram-host "$STAGE/bin/"

echo "== client: the engine's jars ($(($(date +%s) - t0)) s)"
# What a Java engine puts on its class path: engram-client and its runtime dependencies, nothing of the daemon or
# the CLI (the cli pom's client-classpath execution; PlainClasspathClientTest runs a plain JVM on the same list).
CLIENT_CP=engram-host/cli/target/client-classpath.txt
if [ ! -s "$CLIENT_CP" ]; then
  echo "dist: $CLIENT_CP is missing: run mvn -B -DskipTests package" >&2
  exit 1
fi
mkdir -p "$STAGE/client"
{ tr ':' '\n' < "$CLIENT_CP"; echo; } | while read -r jar; do [ -z "$jar" ] || cp -p "$jar" "$STAGE/client/"; done
ls "$STAGE"/client/engram-client-*.jar >/dev/null

echo "== runtime ($(($(date +%s) - t0)) s)"
scripts/release/jlink-runtime.sh "$STAGE/runtime" "$STAGE"/app/lib/*.jar
MODULES=$(sed -n 's/^MODULES="\(.*\)"$/\1/p' "$STAGE/runtime/release" | tr ' ' ,)
JAVA="$STAGE/runtime/bin/java"
read -r -a FLAGS < "$APP/jvm.options" || true

echo "== C client ($(($(date +%s) - t0)) s)"
make -s -C native engram-attach
cp native/build/engram-attach "$STAGE/bin/"

echo "== shell completion ($(($(date +%s) - t0)) s)"
mkdir -p "$STAGE/share/bash-completion/completions" "$STAGE/share/zsh"
"$JAVA" "${FLAGS[@]}" -cp "$STAGE/app/lib/*" picocli.AutoComplete --force -n engram-host \
  -o "$STAGE/share/bash-completion/completions/engram-host" io.engramhost.cli.Main
# Picocli's script serves zsh too, through bashcompinit (it loads that itself): source it from ~/.zshrc.
cp "$STAGE/share/bash-completion/completions/engram-host" "$STAGE/share/zsh/engram-host-completion.zsh"

echo "== licences ($(($(date +%s) - t0)) s)"
python3 scripts/release/third-party.py "$DEPS" "$STAGE/app/lib" "$STAGE/licenses"

echo "== docs ($(($(date +%s) - t0)) s)"
cp LICENSE README.md "$STAGE/"
cp -r docs "$STAGE/docs"
for d in deploy python; do
  if [ -d "$d" ]; then
    mkdir -p "$STAGE/$d"
    # what git tracks (or would: untracked but not ignored), so no caches or build outputs travel
    git ls-files -co --exclude-standard -- "$d" | while IFS= read -r f; do
      [ -f "$f" ] && mkdir -p "$STAGE/$(dirname "$f")" && cp -p "$f" "$STAGE/$f"
    done
  fi
done
echo "== the Python package's wheel ($(($(date +%s) - t0)) s)"
mkdir -p "$STAGE/python"
echo "   $(basename "$(scripts/release/python-wheel.sh "$STAGE/python")")"
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
BUILT=$(python3 -c 'import sys, zipfile, glob; print(zipfile.ZipFile(glob.glob(sys.argv[1])[0]).read("io/engramhost/util/git-commit.txt").decode().strip())' \
  "$APP/lib/engram-native-*.jar" 2>/dev/null || echo unknown)
if [ "$BUILT" != "$COMMIT" ]; then
  # --version reports the jar's commit: a tarball of an app built at another commit says so
  echo "dist: warning: $APP was built at commit $BUILT, HEAD is $COMMIT (rebuild: mvn -B -DskipTests package);" \
       "BUILD records both" >&2
  COMMIT="$COMMIT (app built at $BUILT)"
fi
printf 'version %s\ncommit %s\nbuilt %s\nruntime %s (%s)\n' "$VERSION" "$COMMIT" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "$(sed -n 's/^JAVA_VERSION="\(.*\)"$/\1/p' "$STAGE/runtime/release")" "$MODULES" > "$STAGE/BUILD"

echo "== AppCDS archive ($(($(date +%s) - t0)) s)"
# The classes the commands load: --help (every command's class is loaded for it), and a small daemon with status,
# import (and import --gpu) and verify against it, each run through the staged launcher with its own class list;
# two at a time.
lists=$(mktemp -d)
trap 'rm -rf "$lists"; [ -z "${daemon_pid:-}" ] || kill "$daemon_pid" 2>/dev/null || true' EXIT
classlist() {
  local name=$1
  shift
  ENGRAM_HOST_JVM_OPTS="-XX:DumpLoadedClassList=$lists/$name.lst" "$STAGE/bin/engram-host" "$@"
}
sock="$lists/run/cds.sock"
classlist help --help >/dev/null &
other=$!
classlist generate generate --out "$lists/ckpt" --rows 2000 --layers 1 >/dev/null
wait "$other"
classlist serve serve --checkpoint "$lists/ckpt" --socket "$sock" --numa none > "$lists/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 600); do [ -f "$sock.ready" ] && break; kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
[ -f "$sock.ready" ] || { echo "dist: the class-list daemon did not start:" >&2; cat "$lists/daemon.log" >&2; exit 1; }
classlist ready status --ready --socket "$sock" >/dev/null &
other=$!
classlist import import --socket "$sock" --digest sha256 --json >/dev/null
wait "$other"
classlist status status --socket "$sock" >/dev/null &
other=$!
classlist verify verify --socket "$sock" --checkpoint "$lists/ckpt" >/dev/null
wait "$other"
# The GPU import as far as this machine goes: without a GPU it stops at the driver (exit 1), its classes listed so far.
classlist import-gpu import --socket "$sock" --json --gpu >/dev/null 2>&1 || true
"$STAGE/bin/engram-host" stop --socket "$sock" >/dev/null
wait "$daemon_pid" || true
daemon_pid=""
# Every class of engram-host's own jars as well: the commands' paths this machine cannot run (a GPU's: CUDA, the
# cuda-vmm attach) are archived too, though their JDK and library classes only where a run above loaded them.
for jar in "$STAGE"/app/lib/engram-*.jar; do
  jar tf "$jar" | sed -n 's/\.class$//p' | grep -v -e '^module-info$' -e '/package-info$'
done > "$lists/engram-classes.txt"
# Every line once (a line per class; @lambda lines too); the dump skips what it cannot archive and says so.
cat "$lists"/*.lst "$lists/engram-classes.txt" | awk '!seen[$0]++' > "$lists/all.classlist"
classpath=""
while IFS= read -r jar; do classpath="${classpath:+$classpath:}/proc/self/fd/87/$jar"; done < "$STAGE/app/classpath"
(
  exec 87<"$STAGE/app/lib"  # the fd number bin/engram-host uses
  "$JAVA" -Xshare:dump -XX:SharedClassListFile="$lists/all.classlist" \
    -XX:SharedArchiveFile="$STAGE/app/engram-host.jsa" "${FLAGS[@]}" -cp "$classpath" > "$lists/dump.log" 2>&1
) || { echo "dist: the AppCDS dump failed:" >&2; tail -20 "$lists/dump.log" >&2; exit 1; }
echo "   $(wc -l < "$lists/all.classlist") classes listed, archive $(du -m "$STAGE/app/engram-host.jsa" | cut -f1) MiB"
# The archive must map (-Xshare:on fails otherwise), for the daemon's flags too.
ENGRAM_HOST_JVM_OPTS=-Xshare:on "$STAGE/bin/engram-host" --version
ENGRAM_HOST_JVM_OPTS="-Xshare:on $(cat "$APP/daemon.jvm.options")" "$STAGE/bin/engram-host" serve --help >/dev/null

echo "== tarball ($(($(date +%s) - t0)) s)"
chmod -R a+rX,go-w "$STAGE"
# mtimes kept: the JVM checks the jars' against the archive's record of them
tar --sort=name --owner=0 --group=0 --numeric-owner -C "$WORK" -czf "$OUT" "$NAME"
size=$(stat -c %s "$OUT")
echo "dist: $OUT: $((size / 1048576)) MiB ($size bytes), $(($(date +%s) - t0)) s"
if [ "$size" -ge $((100 * 1048576)) ]; then
  echo "dist: $OUT is over 100 MiB" >&2
  exit 1
fi

#!/usr/bin/env bash
# CI check of the release tarball: builds it from what `mvn verify` (or `mvn package`) already built
# (scripts/release/dist.sh; a `mvn -DskipTests package` first only when nothing is built), unpacks it into a temporary
# directory and runs it there with no Java reachable: `env -i` (no JAVA_HOME) and a PATH of a few tools, java not
# among them. Checks:
#   - `command -v java` fails in that environment;
#   - LICENSE (the project's, Apache-2.0) is at the top, the same text as the repository's, and
#     licenses/THIRD-PARTY.txt beside it;
#   - `bin/engram-host --version` names the version, the commit and the protocol versions, with the AppCDS archive
#     mapped (-Xshare:on fails otherwise);
#   - `--help` of every command exits 0 and lists its options;
#   - the bash completion completes commands and --backend's values;
#   - jffi loads its stub library from app/jni, not from a copy unpacked into the temporary directory;
#   - `bin/engram-attach --self-test-sha256` runs;
#   - a Java engine compiled against client/*.jar alone imports from a daemon of the tarball, with no JVM flag;
#   - the Python package's wheel (python/*.whl) installs with `pip install --no-index` into a fresh venv, and from there
#     imports from the same daemon, every table's digest checked against the digest record;
#   - `bin/engram-host demo` ends with "demo ok".
# Usage: scripts/ci/dist-check.sh [TARBALL]   (default: build it; prints its duration at the end)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
t0=$(date +%s)
step() { echo "== $* ($(($(date +%s) - t0)) s)"; }
fail() { echo "dist-check: FAILED: $*" >&2; exit 1; }

if [ $# -ge 1 ]; then
  tarball=$1
else
  if ! ls engram-host/cli/target/app/lib/engram-cli-*.jar >/dev/null 2>&1 \
      || [ ! -f engram-host/cli/target/app-dependencies.txt ]; then
    step "nothing built: mvn -DskipTests package"
    mvn -B -ntp -q -DskipTests package
  fi
  step "building the tarball"
  scripts/release/dist.sh
  tarball=$(ls -t dist/engram-host-*-linux-x86_64.tar.gz | head -1)
fi
[ -f "$tarball" ] || fail "no tarball at $tarball"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
step "unpacking $tarball"
mkdir -p "$tmp/unpacked"
tar -xzf "$tarball" -C "$tmp/unpacked"
home=$(ls -d "$tmp"/unpacked/engram-host-*)
[ -x "$home/bin/engram-host" ] && [ -x "$home/runtime/bin/java" ] || fail "bin/engram-host or runtime/bin/java missing"

step "licences"
cmp -s "$home/LICENSE" LICENSE || fail "the tarball's LICENSE is missing or differs from the repository's"
grep -q 'Apache License' "$home/LICENSE" && grep -q 'Version 2.0, January 2004' "$home/LICENSE" \
  || fail "LICENSE is not the Apache License 2.0"
[ -s "$home/licenses/THIRD-PARTY.txt" ] || fail "licenses/THIRD-PARTY.txt missing"

# A PATH without java: links to the few tools the launcher and these checks use.
mkdir -p "$tmp/path"
for tool in bash sh env dirname readlink ls cat grep sed awk head tail wc sort tr mktemp rm mkdir; do
  src=$(command -v "$tool") || fail "$tool not found here"
  ln -s "$src" "$tmp/path/$tool"
done
nojava() { env -i PATH="$tmp/path" TMPDIR="$tmp" "$@"; }
if nojava bash -c 'command -v java' >/dev/null 2>&1; then
  fail "java is reachable in the check's environment"
fi
engram() { nojava "$home/bin/engram-host" "$@"; }

step "--version (AppCDS archive required)"
version=$(nojava ENGRAM_HOST_JVM_OPTS=-Xshare:on "$home/bin/engram-host" --version) || fail "--version with -Xshare:on"
echo "   $version"
[[ "$version" =~ ^engram-host\ [0-9]+\.[0-9]+\.[0-9]+[^\ ]*\ \(commit\ ([0-9a-f]{7,40}|unknown),\ protocol\ [0-9]+-[0-9]+\)$ ]] \
  || fail "--version printed: $version"

step "through a symlink"
ln -s "$home/bin/engram-host" "$tmp/path/engram-host"
[ "$(nojava engram-host --version)" = "$version" ] || fail "bin/engram-host through a symlink on PATH"

step "--help of every command"
help=$(engram --help) || fail "--help"
commands=$(printf '%s\n' "$help" | awk '/^Commands:/ {on=1; next} on && /^  [a-z]/ {print $1}')
[ -n "$commands" ] || fail "--help lists no commands: $help"
# two at a time (2 cores)
printf '%s\n' $commands | grep -vx help | xargs -P 2 -I{} sh -c \
  'env -i PATH="$1" TMPDIR="$2" "$3/bin/engram-host" {} --help > "$2/help-{}.txt" 2>&1; echo $? > "$2/help-{}.rc"' \
  sh "$tmp/path" "$tmp" "$home"
for c in $commands; do
  [ "$c" = help ] && continue
  out="$tmp/help-$c.txt"
  [ "$(cat "$tmp/help-$c.rc")" = 0 ] || fail "$c --help exited $(cat "$tmp/help-$c.rc"): $(cat "$out")"
  head -1 "$out" | grep -q "^Usage: engram-host $c" || fail "$c --help: $(head -3 "$out")"
  options=$(grep -cE '^ +(-[A-Za-z], )?--[a-z]' "$out" || true)
  grep -q -- '--help' "$out" && grep -q -- '--version' "$out" && [ "$options" -ge 2 ] \
    || fail "$c --help lists no options: $(cat "$out")"
  echo "   $c: $options options"
done
engram help verify | head -1 | grep -q "^Usage: engram-host verify" || fail "help verify"

step "completion"
completion="$home/share/bash-completion/completions/engram-host"
[ -f "$home/share/zsh/engram-host-completion.zsh" ] || fail "no zsh completion"
complete_words() {  # the candidates bash offers for the words given, the last one being completed
  nojava bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
    _complete_engram-host 2>/dev/null; printf "%s\n" "${COMPREPLY[@]}"' sh "$completion" "$@"
}
complete_words engram-host ver | grep -qx verify || fail "completion of 'engram-host ver': $(complete_words engram-host ver)"
backends=$(complete_words engram-host serve --backend "" | sort | tr '\n' ' ')
[[ "$backends" == *cuda-vmm*memfd* ]] || fail "completion of serve --backend: $backends"
echo "   serve --backend: $backends"

step "jffi's stub library from app/jni"
# With jffi.extract.dir set, jffi unpacks nowhere else: this fails unless the launcher's jffi.boot.library.path
# (app/jni) is where the library is loaded from.
topology=$(nojava ENGRAM_HOST_JVM_OPTS=-Djffi.extract.dir=/nonexistent "$home/bin/engram-host" topology 2>&1) \
  || fail "topology: $topology"
if printf '%s\n' "$topology" | grep -q jffi; then
  fail "jffi was not loaded from app/jni: $topology"
fi

step "engram-attach"
nojava "$home/bin/engram-attach" --self-test-sha256 > "$tmp/attach.txt" 2>&1 || fail "engram-attach: $(cat "$tmp/attach.txt")"

step "a Java engine on client/ alone, no JVM flag"
# The README's second way to the client jars: compiled here (the JDK's javac) against client/*.jar only, and run by
# the tarball's runtime with those jars and no flag, against a daemon started from the tarball.
command -v javac >/dev/null || fail "javac not found (the check compiles a Java engine)"
ls "$home"/client/engram-client-*.jar >/dev/null 2>&1 || fail "client/ holds no engram-client jar"
if ls "$home"/client/ | grep -E '^(engram-daemon|engram-cli|picocli|netty|prometheus|chronicle|slf4j)-' >/dev/null; then
  fail "client/ holds more than the client: $(ls "$home"/client | tr '\n' ' ')"
fi
mkdir -p "$tmp/engine"
javac -d "$tmp/engine" -cp "$home/client/*" scripts/ci/dist-engine/Engine.java || fail "the engine does not compile against client/"
engram generate --model --out "$tmp/model" --rows 2000 > "$tmp/generate.txt" 2>&1 || fail "generate: $(cat "$tmp/generate.txt")"
engram inspect --write-digests "$tmp/model" > "$tmp/digests.txt" 2>&1 || fail "inspect --write-digests: $(cat "$tmp/digests.txt")"
env -i PATH="$tmp/path" TMPDIR="$tmp" "$home/bin/engram-host" serve --checkpoint "$tmp/model" --socket "$tmp/run/e.sock" \
  > "$tmp/serve.txt" 2>&1 &
serve_pid=$!
trap 'kill $serve_pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 1 600); do
  [ -f "$tmp/run/e.sock.ready" ] && break
  kill -0 $serve_pid 2>/dev/null || break
  sleep 0.1
done
engine_out=$(nojava "$home/runtime/bin/java" -cp "$home/client/*:$tmp/engine" Engine "$tmp/run/e.sock" "$tmp/model" 2>&1) \
  || { kill $serve_pid 2>/dev/null; fail "the engine: $engine_out; daemon: $(cat "$tmp/serve.txt")"; }
step "the Python package from its wheel, in a fresh venv"
wheels=("$home"/python/engram_host-*-py3-none-any.whl)
[ ${#wheels[@]} = 1 ] && [ -f "${wheels[0]}" ] || { kill $serve_pid; fail "python/ holds no one engram_host wheel: ${wheels[*]}"; }
python3 -m venv "$tmp/pyvenv" || { kill $serve_pid; fail "python3 -m venv failed (python3-venv missing?)"; }
"$tmp/pyvenv/bin/pip" install -q --disable-pip-version-check --no-index "${wheels[0]}" > "$tmp/pip.txt" 2>&1 \
  || { kill $serve_pid; fail "pip install --no-index $(basename "${wheels[0]}"): $(cat "$tmp/pip.txt")"; }
python_out=$(cd "$tmp" && env -i PATH="$tmp/path" TMPDIR="$tmp" "$tmp/pyvenv/bin/python" -c '
import sys, engram_host
assert "/pyvenv/" in engram_host.__file__, engram_host.__file__
with engram_host.connect(sys.argv[1], expect=sys.argv[2], wait=30) as tables:
    report = tables.verify_content([sys.argv[2]])
    ok = [n for n, (status, _) in report.tables.items() if status == "verified"]
    assert len(ok) == len(tables.tables) > 0, report.tables
    print(f"python: {len(ok)} tables imported from the wheel installed in a venv, every content digest verified")
' "$tmp/run/e.sock" "$tmp/model" 2>&1) || { kill $serve_pid; fail "the Python client from the wheel: $python_out"; }
echo "   $python_out"
kill $serve_pid; wait $serve_pid 2>/dev/null || true
[[ "$engine_out" == "engine: "*" tables imported, every digest matches" ]] || fail "the engine printed: $engine_out (one line expected: the record gives both sides content identity)"
echo "   $engine_out"
step "demo"
if ! engram demo > "$tmp/demo.txt" 2>&1; then
  cat "$tmp/demo.txt" >&2
  fail "demo exited non-zero"
fi
last=$(tail -1 "$tmp/demo.txt")
[[ "$last" == *"demo ok"* ]] || { cat "$tmp/demo.txt" >&2; fail "demo's last line: $last"; }
echo "   $last"

echo "dist-check: ok: $(basename "$tarball") ($(($(stat -c %s "$tarball") / 1048576)) MiB) in $(($(date +%s) - t0)) s"

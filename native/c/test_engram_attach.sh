#!/usr/bin/env bash
# Checks engram-attach (native/c: engram_attach.h and its units) against the real daemon and a scripted one, no GPU
# needed:
#   1. builds it (make -C native engram-attach), runs its --self-test-sha256 (SHA-256 and sha256-tree-v1 vectors),
#      checks its protocol constants against docs/protocol-spec.json (native/c/check_spec.py, both ways: every
#      constant the spec's, every limit a client holds one of them), its run_end against the "find" cases of
#      conformance/region-runs.json (native/c/check_region_runs.py), checks that it links only libc and, unless
#      --no-package or --peer-only, builds the daemon (mvn -B -o -DskipTests package); builds its attach code as
#      AttachBench's library (engram-attach-bench-lib)
#      and checks that it exports only the engram_bench_* calls and links only libc (libcuda is dlopen'd; the
#      library's calls are exercised by the jmh module's AttachBenchTest);
#   2. generates a checkpoint, starts `engram-host serve` (memfd, --numa none), waits for its ready file;
#   3. runs `engram-attach --json --verify --repeat 2` (and once with --ready-line) and checks: exit 0, one line per
#      repetition, protocol version 2, the daemon's uid, bytes = the sizes of the daemon's memfds (read from
#      /proc/<pid>/fd), regions = their number, tables and table_bytes = the checkpoint's (engram-host inspect),
#      fingerprint = the ready file's, every table's digest verified through the mapping (so every memfd passed
#      the seal check), and the daemon saw a BYE for each lease; then `--verify-content` against the version 2
#      digest record of `engram-host inspect --write-digests` (every table "ok", its engram-digest-v1 the
#      manifest's) and the same digests as a version 1 record, and refusals (exit 1, the table and both digests
#      named) of a record with one sha256-tree-v1 or engram-digest-v1 altered, one lacking a table, and malformed
#      ones of either version (one line: the file, the field, the fix);
#   4. stops the daemon (engram-host stop) and checks it exited 0; then --table against a daemon serving a checkpoint
#      of three regions (two 64 MiB weights alone, the scales packed): one table, two, every table, the client's
#      memfd mappings and fds read from /proc/PID while it blocks writing its --ready-line into a full pipe, and its
#      attached_* fields; --verify and --verify-content of the named tables alone; the text output's selected line;
#      an unknown name (one line, exit 1); 300 repetitions under ulimit -n 8 (a leaked fd a repetition fails by the
#      third), and with one fd too few for an import a failure (the limit binds);
#   5. with python3 >= 3.9, runs every case of conformance/cases.json (native/c/peer_cases.py: the scripted daemon
#      conformance/protocol_peer.py, docs/protocol.md versions 2 and 1, whose cases the Java and Python clients run
#      too): MANIFESTs of 520 fds (two 0xFD fillers), in PARTs, in version 1; NOT_READY retried; refusals before
#      HELLO; the daemon's uid (SO_PEERCRED, WELCOME); memfd seals; every MANIFEST check; every error code; and
#      malformed answers, each of which must fail (exit 1) with a named cause. Then what engram-attach alone has:
#      --verify; --table (2 of 520 regions attached; an unknown name; the flag's limit (64), a name twice, an empty
#      name); the socket path's template and defaults. The cases that need another uid run processes under
#      `setpriv --reuid=65534` and need root; without it they are skipped, and said so.
# Usage: native/c/test_engram_attach.sh [--no-package] [--peer-only]     Exit 0 when every check passed.
#   --peer-only   step 1 (engram-attach only) and step 5: no Maven, no real daemon.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
package=1 real=1
for a in "$@"; do
    case "$a" in
        --no-package) package=0 ;;
        --peer-only) package=0 real=0 ;;
        *) echo "usage: $0 [--no-package] [--peer-only]" >&2; exit 2 ;;
    esac
done
t_start=$(date +%s.%N)

fail() { echo "test_engram_attach: FAIL: $*" >&2; exit 1; }
field() { grep -o "\"$1\":[^,}]*" <<<"$2" | head -1 | cut -d: -f2 | tr -d '"'; }

tmp="$(mktemp -d /tmp/engram-attach-test.XXXXXX)"
other=""  # a directory of uid 65534 for the peer and client that run as that user
sock="$tmp/d.sock"
daemon=""
cleanup() {
    if [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null; then
        bin/engram-host stop --socket "$sock" >/dev/null 2>&1 || kill "$daemon" 2>/dev/null || true
        wait "$daemon" 2>/dev/null || true
    fi
    rm -rf "$tmp"
    [ -z "$other" ] || rm -rf "$other"
}
trap cleanup EXIT

make -s -C native engram-attach
attach="${ENGRAM_ATTACH:-$root/native/build/engram-attach}"  # another build (a sanitizer's) with ENGRAM_ATTACH
# Its own SHA-256 (FIPS 180-4 vectors) and sha256-tree-v1 (docs/checkpoints.md's vectors), and libc alone.
selftest="$("$attach" --self-test-sha256)" || { echo "$selftest"; fail "engram-attach --self-test-sha256 exited non-zero"; }
[ "$(grep -c ' ok$' <<<"$selftest")" = 9 ] || { echo "$selftest"; fail "--self-test-sha256: expected 9 vectors ok"; }
echo "test_engram_attach: $(tail -1 <<<"$selftest")"
if [ -z "${ENGRAM_ATTACH:-}" ] && command -v ldd >/dev/null; then  # a sanitizer build links its runtime too
    extra="$(ldd "$attach" | grep -vE 'linux-vdso|ld-linux|libc\.so|libdl\.so' || true)"
    [ -z "$extra" ] || fail "engram-attach links more than libc: $extra"
fi
# Its protocol constants against docs/protocol-spec.json, both ways (a test-only program prints them).
make -s -C native engram-attach-spec
python3 native/c/check_spec.py native/build/engram-attach-spec native/c/*.[ch] \
    || fail "engram-attach's constants differ from docs/protocol-spec.json (above)"
# Its run_end (the arithmetic of region runs) over conformance/region-runs.json's "find" cases (a test-only program).
make -s -C native engram-attach-runs
python3 native/c/check_region_runs.py native/build/engram-attach-runs \
    || fail "engram-attach's run_end differs from conformance/region-runs.json (above)"
make -s -C native engram-attach-bench-lib
lib="$root/native/build/libengram-attach-bench.so"
exports="$(nm -D --defined-only "$lib" | awk '{print $3}' | sort | tr '\n' ' ')"
[ "$exports" = "engram_bench_attach engram_bench_context engram_bench_error engram_bench_release " ] \
    || fail "libengram-attach-bench.so exports '$exports', not the four engram_bench_* calls alone"
if command -v ldd >/dev/null; then
    extra="$(ldd "$lib" | grep -vE 'linux-vdso|ld-linux|libc\.so|libdl\.so' || true)"
    [ -z "$extra" ] || fail "libengram-attach-bench.so links more than libc: $extra"
fi
echo "test_engram_attach: libengram-attach-bench.so exports the engram_bench_* calls alone and links libc alone"
if [ "$package" = 1 ]; then
    mvn -B -o -q -DskipTests package >"$tmp/mvn.log" 2>&1 || { tail -40 "$tmp/mvn.log"; fail "mvn package failed"; }
fi

# --- the real daemon ------------------------------------------------------------------------------------------
if [ "$real" = 1 ]; then
    bin/engram-host generate --out "$tmp/ck" --rows 20000 >/dev/null
    bin/engram-host serve --checkpoint "$tmp/ck" --socket "$sock" --numa none >"$tmp/serve.log" 2>&1 &
    daemon=$!
    for _ in $(seq 300); do
        [ -f "$sock.ready" ] && break
        kill -0 "$daemon" 2>/dev/null || { cat "$tmp/serve.log"; fail "the daemon exited before it was ready"; }
        sleep 0.1
    done
    [ -f "$sock.ready" ] || { cat "$tmp/serve.log"; fail "the daemon was not ready after 30 s"; }

    out="$("$attach" --socket "$sock" --json --verify --repeat 2)" || fail "engram-attach exited $? (stdout: $out)"
    echo "$out"
    [ "$(wc -l <<<"$out")" = 2 ] || fail "expected 2 JSON lines (--repeat 2), got: $out"
    ready="$("$attach" --socket "$sock" --json --ready-line)" || fail "engram-attach --ready-line exited $?"
    [ "$(head -1 <<<"$ready")" = "attached 1" ] && grep -q '^{"rep":1,' <<<"$(sed -n 2p <<<"$ready")" \
        || fail "--ready-line: expected 'attached 1' and then the JSON line, got: $ready"

    # Ground truth from outside the protocol: the daemon's memfds, the checkpoint, the ready file.
    memfd_bytes=0 memfds=0
    for f in /proc/"$daemon"/fd/*; do
        case "$(readlink "$f" 2>/dev/null)" in
            /memfd:engram.*) memfd_bytes=$((memfd_bytes + $(stat -L -c %s "$f"))); memfds=$((memfds + 1)) ;;
        esac
    done
    [ "$memfds" -gt 0 ] || fail "found no memfd:engram.* among the daemon's fds (/proc/$daemon/fd)"
    inspect="$(bin/engram-host inspect --json "$tmp/ck")"
    ck_bytes="$(grep -o '"bytes":[0-9]*' <<<"$inspect" | tail -1 | cut -d: -f2)"
    ck_tables="$(grep -o '"dtype":' <<<"$inspect" | wc -l)"
    ready_fp="$(sed -n 's/^fingerprint=//p' "$sock.ready")"
    daemon_uid="$(stat -c %u "/proc/$daemon")"
    while read -r line; do
        rep="$(field rep "$line")"
        check() { [ "$(field "$1" "$line")" = "$2" ] || fail "rep $rep: $1 is $(field "$1" "$line"), expected $2 ($3)"; }
        check protocol 2 "the daemon speaks version 2"
        check daemon_uid "$daemon_uid" "the daemon process's uid (/proc)"
        check bytes "$memfd_bytes" "sum of the daemon's memfd sizes"
        check regions "$memfds" "the daemon's memfds"
        check table_bytes "$ck_bytes" "the checkpoint's bytes, engram-host inspect"
        check tables "$ck_tables" "the checkpoint's tensors"
        check verified_tables "$ck_tables" "every table's digest checked through the mapping"
        check fingerprint "$ready_fp" "the ready file"
        check backend memfd "--backend default"
    done <<<"$out"
    grep -q "lease 1 of pid .* released" "$tmp/serve.log" && grep -q "lease 2 of pid .* released" "$tmp/serve.log" \
        || { cat "$tmp/serve.log"; fail "the daemon did not log both leases as released by BYE"; }

    # --verify-content against the digest record of `engram-host inspect --write-digests` (docs/checkpoints.md, "The
    # digest record, version 2"): each table's sha256-tree-v1 against its mapped bytes, its engram-digest-v1 against
    # the manifest's digest; then the same digests as a version 1 record, which is still read.
    bin/engram-host inspect --write-digests "$tmp/ck" >/dev/null
    sidecar="$tmp/ck/engram-digests.json"
    [ -f "$sidecar" ] || fail "inspect --write-digests wrote no $sidecar"
    grep -q '^{"format":"engram-content-digests","version":2,"chunk_bytes":16777216,"tables":{' "$sidecar" \
        || fail "inspect --write-digests wrote no version 2 record: $(head -c 200 "$sidecar")"
    content="$("$attach" --socket "$sock" --json --verify-content "$sidecar")" || fail "--verify-content exited $? ($content)"
    [ "$(grep -o '"content":"ok"' <<<"$content" | wc -l)" = "$ck_tables" ] \
        || fail "--verify-content: expected $ck_tables tables \"content\":\"ok\": $content"
    grep -q '"content_check":{"algorithm":"sha256-tree-v1","sidecar":"[^"]*","record_version":2,"ok":'"$ck_tables"',"mismatch":0,"missing":0,"not_checked":0,"engram_ok":'"$ck_tables"',"engram_mismatch":0,' \
        <<<"$content" || fail "--verify-content: unexpected content_check: $content"
    # The first table: "tables":{"NAME":{"engram-digest-v1":"E","sha256-tree-v1":"S"}
    entry="$(grep -o '"tables":{"[^"]*":{"engram-digest-v1":"[0-9a-f]*","sha256-tree-v1":"[0-9a-f]*"}' "$sidecar")"
    name="$(cut -d'"' -f4 <<<"$entry")" eng="$(cut -d'"' -f8 <<<"$entry")" good="$(cut -d'"' -f12 <<<"$entry")"
    [ "${#eng}" = 16 ] && [ "${#good}" = 64 ] || fail "could not read the first table of $sidecar: $entry"
    grep -q "{\"name\":\"$name\",\"content\":\"ok\",\"digest\":\"$good\",\"engram_digest\":\"ok\"}" <<<"$content" \
        || fail "--verify-content: table $name's digest is not the record's $good: $content"
    content_case() {  # content_case NAME SIDECAR PATTERN: engram-attach --verify-content must exit 1 and say PATTERN
        local rc=0 out
        out="$("$attach" --socket "$sock" --json --verify-content "$2" 2>&1)" || rc=$?
        [ "$rc" = 1 ] || fail "--verify-content, $1: exited $rc, expected 1: $out"
        grep -qE -- "$3" <<<"$out" || fail "--verify-content, $1: output does not match /$3/: $out"
        refusals=$((refusals + 1))
    }
    refusals=0 again="write it again with engram-host inspect --write-digests"
    bad="$([ "${good:0:1}" = 0 ] && echo 1 || echo 0)${good:1}" ebad="$([ "${eng:0:1}" = 0 ] && echo 1 || echo 0)${eng:1}"
    sed "s/$good/$bad/" "$sidecar" >"$tmp/altered.json"
    content_case altered "$tmp/altered.json" "^engram-attach: content check \(sha256-tree-v1\) failed: table '$name': the mapped bytes have digest $good but $tmp/altered.json says $bad$"
    content_case altered-json "$tmp/altered.json" "\{\"name\":\"$name\",\"content\":\"mismatch\",\"digest\":\"$good\",\"engram_digest\":\"ok\"\}"
    sed "s/\"$eng\"/\"$ebad\"/" "$sidecar" >"$tmp/engram.json"
    content_case engram "$tmp/engram.json" "^engram-attach: content check \(engram-digest-v1\) failed: table '$name': the manifest says engram-digest-v1 $eng but $tmp/engram.json says $ebad: the daemon serves other bytes than the record describes; give the record of the checkpoint it serves, or $again CHECKPOINT$"
    sed "s/\"${name//./\\.}\":{[^}]*},//" "$sidecar" >"$tmp/missing.json"
    ! grep -q "$name" "$tmp/missing.json" || fail "could not remove $name from the record"
    content_case missing "$tmp/missing.json" "^engram-attach: content check \(sha256-tree-v1\) failed: table '$name' has no trusted digest in $tmp/missing.json \(the mapped bytes have digest $good\)$"
    # Malformed version 2 records: refused before connecting, in one line naming the file, the field and the fix.
    sed "s/{\"engram-digest-v1\":\"$eng\",/{/" "$sidecar" >"$tmp/no-key.json"
    content_case v2-missing-key "$tmp/no-key.json" "^engram-attach: $tmp/no-key.json: table '$name': no 'engram-digest-v1' \(expected engram-digest-v1, sha256-tree-v1\); $again CHECKPOINT$"
    sed "s/\"$good\"}/\"$good\",\"xxh64\":\"$eng\"}/" "$sidecar" >"$tmp/extra-key.json"
    content_case v2-extra-key "$tmp/extra-key.json" "^engram-attach: $tmp/extra-key.json: table '$name': unexpected field 'xxh64' \(expected engram-digest-v1, sha256-tree-v1\); $again CHECKPOINT$"
    upper="${good^^}"
    sed "s/$good/$upper/" "$sidecar" >"$tmp/upper.json"
    content_case v2-upper-hex "$tmp/upper.json" "^engram-attach: $tmp/upper.json: table '$name': sha256-tree-v1 is the string \"${upper:0:40}\.\.\.\", not 64 lower-case hex digits; $again CHECKPOINT$"
    sed "s/\"$eng\"/\"${eng:1}\"/" "$sidecar" >"$tmp/ck.safetensors.engram-digests.json"  # the fix names its checkpoint
    content_case v2-length "$tmp/ck.safetensors.engram-digests.json" "^engram-attach: $tmp/ck.safetensors.engram-digests.json: table '$name': engram-digest-v1 is the string \"${eng:1}\", not 16 lower-case hex digits; $again $tmp/ck.safetensors$"
    mkdir "$tmp/v3"
    sed 's/"version":2,/"version":3,/' "$sidecar" >"$tmp/v3/engram-digests.json"
    content_case version-3 "$tmp/v3/engram-digests.json" "^engram-attach: $tmp/v3/engram-digests.json: 'version' is the number 3, this build reads only 1 and 2; use a build that reads it, or $again $tmp/v3$"
    sed 's/"version":2,/"version":2,"algorithm":"sha256-tree-v1",/' "$sidecar" >"$tmp/v2-algorithm.json"
    content_case v2-algorithm "$tmp/v2-algorithm.json" "^engram-attach: $tmp/v2-algorithm.json: unexpected field 'algorithm' \(expected format, version, chunk_bytes, tables\); $again CHECKPOINT$"
    head -c 100 "$sidecar" >"$tmp/truncated.json"
    content_case truncated "$tmp/truncated.json" "^engram-attach: $tmp/truncated.json: not a digest sidecar: JSON at byte [0-9]+: (unterminated string|expected)"
    content_case no-file "$tmp/none.json" "^engram-attach: --verify-content $tmp/none.json: cannot open: ENOENT"
    # Version 1 (what earlier builds wrote): the tree digests alone, still read.
    sed -e 's/"version":2,/"version":1,"algorithm":"sha256-tree-v1",/' \
        -e 's/{"engram-digest-v1":"[0-9a-f]*","sha256-tree-v1":\("[0-9a-f]*"\)}/\1/g' "$sidecar" >"$tmp/v1.json"
    grep -q "^{\"format\":\"engram-content-digests\",\"version\":1,\"algorithm\":\"sha256-tree-v1\",\"chunk_bytes\":16777216,\"tables\":{\"$name\":\"$good\"," "$tmp/v1.json" \
        || fail "could not write a version 1 record: $(head -c 200 "$tmp/v1.json")"
    v1="$("$attach" --socket "$sock" --json --verify-content "$tmp/v1.json")" || fail "--verify-content, version 1, exited $? ($v1)"
    grep -q '"record_version":1,"ok":'"$ck_tables"',"mismatch":0,"missing":0,"not_checked":0,"engram_ok":0,"engram_mismatch":0,' <<<"$v1" \
        && grep -q "{\"name\":\"$name\",\"content\":\"ok\",\"digest\":\"$good\"}" <<<"$v1" \
        || fail "--verify-content, version 1: unexpected content_check: $v1"
    sed 's/"sha256-tree-v1"/"xxh64"/' "$tmp/v1.json" >"$tmp/algorithm.json"
    content_case v1-algorithm "$tmp/algorithm.json" "^engram-attach: $tmp/algorithm.json: 'algorithm' is the string \"xxh64\", this build reads only \"sha256-tree-v1\"; use a build that reads it, or $again CHECKPOINT$"
    sed "s/$good/$upper/" "$tmp/v1.json" >"$tmp/v1-upper.json"
    content_case v1-upper-hex "$tmp/v1-upper.json" "^engram-attach: $tmp/v1-upper.json: table '$name': digest is the string \"${upper:0:40}\.\.\.\", not 64 lower-case hex digits; $again CHECKPOINT$"
    rate="$(grep -o '"gb_per_s":[0-9.]*' <<<"$content" | cut -d: -f2)"

    err="$("$attach" --socket "$tmp/none.sock" 2>&1)" && fail "a missing socket exited 0"
    grep -q "^engram-attach: no daemon listens on $tmp/none.sock: connect failed: ENOENT (No such file or directory): start one (engram-host serve), or name the running one's socket with --socket or ENGRAM_HOST_SOCKET$" <<<"$err" \
        || fail "missing socket: unexpected message (the fix named?): $err"

    bin/engram-host stop --socket "$sock" >/dev/null
    wait "$daemon" || fail "the daemon exited $? after stop"
    daemon=""
    echo "test_engram_attach: real daemon: ok ($memfds regions, $memfd_bytes bytes, $ck_tables tables; content check" \
        "sha256-tree-v1 and engram-digest-v1 ok, version 1 ok, $refusals refusals, $rate GB/s on 1 thread)"

    # --table: a checkpoint whose two weight tables are 64 MiB each, so that each has a region of its own (tables of
    # 64 MiB or more lie alone, smaller ones are packed: RegionPlan), and both scales share the third.
    bin/engram-host generate --out "$tmp/ck3" --rows 262144 >/dev/null
    sock="$tmp/t.sock"
    bin/engram-host serve --checkpoint "$tmp/ck3" --socket "$sock" --numa none >"$tmp/serve3.log" 2>&1 &
    daemon=$!
    # --wait-ms covers a daemon still starting: an engram-attach started with serve, before its socket is bound
    [ -e "$sock" ] && fail "the socket exists before the daemon started"
    "$attach" --socket "$sock" --json --wait-ms 60000 >"$tmp/early.json" 2>&1 &
    early=$!
    for _ in $(seq 300); do
        [ -f "$sock.ready" ] && break
        kill -0 "$daemon" 2>/dev/null || { cat "$tmp/serve3.log"; fail "the --table daemon exited before it was ready"; }
        sleep 0.1
    done
    [ -f "$sock.ready" ] || { cat "$tmp/serve3.log"; fail "the --table daemon was not ready after 30 s"; }
    wait "$early" || fail "engram-attach --wait-ms started before the daemon: $(cat "$tmp/early.json")"
    grep -q '"tables":4,' "$tmp/early.json" || fail "engram-attach --wait-ms started before the daemon: $(cat "$tmp/early.json")"
    region_sizes="$(for f in /proc/"$daemon"/fd/*; do
        case "$(readlink "$f" 2>/dev/null)" in /memfd:engram.*) stat -L -c %s "$f" ;; esac; done | sort -n | tr '\n' ' ')"
    read -r small big1 big2 rest <<<"$region_sizes"
    [ -z "$rest" ] && [ -n "$big2" ] && [ "$small" -ge $((2 * 262144 * 8)) ] && [ "$small" -lt $((64 << 20)) ] \
        && [ "$big1" -ge $((64 << 20)) ] \
        || fail "--table: expected 3 memfds of the daemon, two of 64 MiB or more (the weights alone), one smaller (the scales packed), got '$region_sizes'"
    total3=$((small + big1 + big2)) w1=layers.1.engram.embed.weight s14=layers.14.engram.embed.scale
    tbytes() { bin/engram-host inspect --json "$tmp/ck3" | python3 -c 'import json, sys; print(next(t["bytes"] for t in json.load(sys.stdin)["tensors"] if t["name"] == sys.argv[1]))' "$1"; }
    w1_bytes="$(tbytes "$w1")" s14_bytes="$(tbytes "$s14")"
    # held NAME EXPECTED_TABLE_ARGS...: engram-attach --ready-line with stdout a full one-page pipe, so that it blocks
    # writing "attached 1" with every region it attaches mapped; prints what /proc/PID shows then (its mappings of the
    # daemon's memfds: count and bytes; its fds that are memfds; all its fds), then its JSON line.
    held() {
        python3 - "$attach" --socket "$sock" --json --ready-line "$@" <<'PY'
import fcntl, os, subprocess, sys, time
r, w = os.pipe()
fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: one page, then filled, so the client's first write blocks
os.set_blocking(w, False)
try:
    while True:
        os.write(w, b'x' * 4096)
except BlockingIOError:
    pass
os.set_blocking(w, True)
p = subprocess.Popen(sys.argv[1:], stdout=w)
os.close(w)
for _ in range(2000):
    try:
        call = open(f'/proc/{p.pid}/syscall').read().split()
    except OSError:
        call = []
    if call[:2] == ['1', '0x1']:  # write(1, ...): the ready line, after every region was attached
        break
    if p.poll() is not None:
        sys.exit(f'engram-attach exited {p.returncode} before its ready line')
    time.sleep(0.01)
else:
    sys.exit('engram-attach did not block writing its ready line within 20 s')
maps = [l.split() for l in open(f'/proc/{p.pid}/maps')]
mem = [m for m in maps if len(m) > 5 and m[5].startswith('/memfd:engram.')]
size = sum(int(m[0].split('-')[1], 16) - int(m[0].split('-')[0], 16) for m in mem)
links = [os.readlink(f'/proc/{p.pid}/fd/{f}') for f in os.listdir(f'/proc/{p.pid}/fd')]
print(len(mem), size, sum(l.startswith('/memfd:engram.') for l in links), len(links))
out = b''
while True:
    chunk = os.read(r, 65536)
    if not chunk:
        break
    out += chunk
sys.stdout.write(out.decode().lstrip('x'))
sys.exit(p.wait())
PY
    }
    # One table alone: only its region is mapped, and the client holds only that region's fd.
    got="$(held --table "$w1" --verify)" || fail "--table $w1: exited $? ($got)"
    line="$(tail -1 <<<"$got")" big="$(field attached_bytes "$(tail -1 <<<"$got")")"
    [ "$big" = "$big1" ] || [ "$big" = "$big2" ] || fail "--table $w1: attached_bytes $big is not one of the weights' regions ($big1, $big2): $line"
    [ "$(head -1 <<<"$got")" = "1 $big 1 5" ] \
        || fail "--table $w1: expected 1 mapping of the daemon's memfds ($big bytes), 1 memfd fd and 5 fds (stdio, the socket, the region) while attached, /proc says: $(head -1 <<<"$got")"
    check() { [ "$(field "$1" "$line")" = "$2" ] || fail "--table: $1 is $(field "$1" "$line"), expected $2 ($3): $line"; }
    check regions 3 "the whole MANIFEST is still received" ; check tables 4 "the whole MANIFEST"
    check bytes "$total3" "every region's size"
    check attached_regions 1 "$w1's region alone"; check attached_bytes "$big" "its region's size"
    check attached_tables 1 "one table named"; check attached_table_bytes "$w1_bytes" "$w1's bytes (inspect)"
    check verified_tables 1 "--verify: the named table alone"
    grep -q "\"selected_tables\":\[\"$w1\"\]" <<<"$line" || fail "--table: no selected_tables [\"$w1\"]: $line"
    # Two tables in two regions; the small one's region is shared with a table not named, which is not verified.
    got="$(held --table "$s14" --table "$w1" --verify)" || fail "--table $s14 --table $w1: exited $? ($got)"
    [ "$(head -1 <<<"$got")" = "2 $((big + small)) 2 6" ] \
        || fail "--table $s14 --table $w1: expected 2 mappings ($((big + small)) bytes), 2 memfd fds, 6 fds; /proc says: $(head -1 <<<"$got")"
    line="$(tail -1 <<<"$got")"
    check attached_regions 2 "two regions"; check attached_bytes "$((big + small))" "their sizes"
    check attached_tables 2 "two named"; check attached_table_bytes "$((w1_bytes + s14_bytes))" "their bytes (inspect)"
    check verified_tables 2 "the named tables alone"
    grep -q "\"selected_tables\":\[\"$s14\",\"$w1\"\]" <<<"$line" || fail "--table: selected_tables not [$s14, $w1]: $line"
    # Without --table, the same held client maps all three.
    got="$(held)" || fail "held, every table: exited $? ($got)"
    [ "$(head -1 <<<"$got")" = "3 $total3 3 7" ] || fail "every table: expected 3 mappings ($total3 bytes), 3 memfd fds, 7 fds; /proc says: $(head -1 <<<"$got")"
    check_line="$(tail -1 <<<"$got")"
    [ "$(field attached_bytes "$check_line")" = "$total3" ] && ! grep -q selected_tables <<<"$check_line" \
        || fail "every table: attached_bytes not $total3, or selected_tables present: $check_line"
    # --verify-content over the named table alone: the record's other tables are neither checked nor missing.
    bin/engram-host inspect --write-digests "$tmp/ck3" >/dev/null
    content="$("$attach" --socket "$sock" --json --table "$s14" --verify-content "$tmp/ck3/engram-digests.json")" \
        || fail "--table --verify-content exited $? ($content)"
    grep -q '"record_version":2,"ok":1,"mismatch":0,"missing":0,"not_checked":0,"engram_ok":1,"engram_mismatch":0,"bytes":'"$s14_bytes"',.*"tables":\[{"name":"'"$s14"'","content":"ok",[^]]*}\]}' <<<"$content" \
        || fail "--table --verify-content: expected one table, $s14, ok: $content"
    # The text output says what was selected and attached.
    text="$("$attach" --socket "$sock" --table "$w1")" || fail "--table, text output: exited $?"
    grep -q "^  selected       1 of 4 tables ($w1), $w1_bytes bytes; attached 1 of 3 regions, $big bytes (0.06[23] GiB); the other 2 region fds closed unmapped$" <<<"$text" \
        || fail "--table, text output: no 'selected' line as expected: $text"
    # A name the daemon does not serve: one line naming it and how to list the tables, exit 1.
    rc=0 err="$("$attach" --socket "$sock" --table "$w1" --table layers.2.engram.embed.weight 2>&1)" || rc=$?
    [ "$rc" = 1 ] && [ "$(wc -l <<<"$err")" = 1 ] && grep -q "^engram-attach: --table 'layers.2.engram.embed.weight': the daemon on $sock serves no table of that name (it serves 4); list its tables with \`engram-host status --socket $sock\`, or run engram-attach without --table to attach them all$" <<<"$err" \
        || fail "--table with an unknown name: expected exit 1 and one line naming it, got $rc: $err"
    # No fd leaks: 300 repetitions under an fd limit that leaves room for 1 more than one import holds (stdio, the
    # socket, the 3 region fds that arrive): a leak of one fd a repetition fails by the third. The limit binds: with
    # one fd fewer than an import needs, the same run fails.
    out="$(ulimit -n 8 && "$attach" --socket "$sock" --json --table "$w1" --repeat 300)" \
        || fail "--table --repeat 300 under ulimit -n 8: exited $? (a leaked fd?): $(tail -c 300 <<<"$out")"
    [ "$(grep -c '"attached_regions":1,' <<<"$out")" = 300 ] || fail "--table --repeat 300: expected 300 lines with attached_regions 1"
    out="$(ulimit -n 8 && "$attach" --socket "$sock" --json --repeat 300)" || fail "--repeat 300 under ulimit -n 8, every table: exited $?"
    rc=0 err="$(ulimit -n 6 && "$attach" --socket "$sock" --json --table "$w1" 2>&1)" || rc=$?
    [ "$rc" = 1 ] || fail "under ulimit -n 6 (one fd fewer than an import needs) expected a failure, got $rc: $err"
    bin/engram-host stop --socket "$sock" >/dev/null
    wait "$daemon" || fail "the --table daemon exited $? after stop"
    daemon=""
    echo "test_engram_attach: --table against the real daemon: ok (one table, two, every table: mappings and fds from /proc;" \
        "--verify-content of one; an unknown name; 300 repetitions under ulimit -n 8 without a leak)"
else
    echo "test_engram_attach: SKIP real daemon (--peer-only)"
fi

# --- the protocol peer ----------------------------------------------------------------------------------------
if ! python3 -c 'import sys, socket; sys.exit(0 if hasattr(socket, "send_fds") else 1)' 2>/dev/null; then
    echo "test_engram_attach: SKIP protocol peer cases: python3 >= 3.9 (socket.send_fds) not found"
    echo "test_engram_attach: PASS in $(awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
    exit 0
fi
python="$(python3 -c 'import sys; print(sys.executable)')"  # not a shim (pyenv's costs half a second a start)
page="$(getconf PAGESIZE)"
nobody=65534
cases=0 skipped=0
# What the next peer() call uses; reset after each call:
#   psock        the peer's socket;  socket_args  how engram-attach is told of it (empty: it resolves the path itself)
#   peer_as      a prefix for the peer (setpriv ...);  client_as  a prefix for engram-attach (setpriv ..., env ...)
reset_peer() { psock="$tmp/peer.sock"; socket_args=(--socket "$psock"); peer_as=(); client_as=(); py="$python"; }
reset_peer
as_nobody=(setpriv --reuid=$nobody --regid=$nobody --clear-groups)
peer() {  # peer CASE EXPECTED_RC PATTERN [engram-attach options]
    local case=$1 want=$2 pattern=$3 rc=0 prc=0 pout
    shift 3
    rm -f "$psock"
    "${peer_as[@]}" "$py" conformance/protocol_peer.py "$psock" "$case" >"$tmp/peer.out" 2>&1 &
    local pp=$!
    for _ in $(seq 250); do [ -S "$psock" ] && break; sleep 0.02; done
    [ -S "$psock" ] || { kill "$pp" 2>/dev/null || true; fail "peer $case: no socket at $psock: $(cat "$tmp/peer.out")"; }
    local t0=$EPOCHREALTIME
    pout="$("${client_as[@]}" "$attach" "${socket_args[@]}" --json "$@" 2>&1)" || rc=$?
    [ -z "${TEST_VERBOSE:-}" ] || echo "peer $case: $rc in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }') s: ${pout:0:200}"
    wait "$pp" || prc=$?
    [ "$rc" = "$want" ] || fail "peer $case: engram-attach exited $rc, expected $want: $pout"
    [ "$prc" = 0 ] || fail "peer $case: the peer failed: $(cat "$tmp/peer.out")"
    grep -qE -- "$pattern" <<<"$pout" || fail "peer $case: output does not match /$pattern/: $pout"
    cases=$((cases + 1))
    reset_peer
}
alone() {  # alone NAME EXPECTED_RC PATTERN COMMAND...: engram-attach without a peer (socket path resolution)
    local name=$1 want=$2 pattern=$3 rc=0 out
    shift 3
    out="$("$@" 2>&1)" || rc=$?
    [ "$rc" = "$want" ] || fail "$name: exited $rc, expected $want: $out"
    grep -qE -- "$pattern" <<<"$out" || fail "$name: output does not match /$pattern/: $out"
    cases=$((cases + 1))
}

# Every case of conformance/cases.json, which the Java and Python clients run too: fds, fillers, parts, NOT_READY
# retried, refusals before HELLO, the daemon's uid (SO_PEERCRED, WELCOME), memfd seals, every MANIFEST check, every
# error code and malformed answers. The cases of another uid need root and setpriv; without them they are skipped,
# and said so.
"$python" native/c/peer_cases.py "$attach" || exit 1
# What only engram-attach has: --verify, --table (only the named tables' regions are attached, after the whole
# MANIFEST is checked; conformance/cases.json's select-* cases show the checks of the tables not named), the socket
# path's template and defaults.
peer batch-2 1 "table 't0': the mapped bytes digest to [0-9a-f]{16} but the manifest says 0{16}" --verify
peer batch-520 0 "\"regions\":520,.*\"bytes\":$((520 * page)),.*\"attached_regions\":2,\"attached_vmm_regions\":0,\"attached_bytes\":$((2 * page)),\"attached_tables\":2,\"attached_table_bytes\":$((2 * page)),\"selected_tables\":\[\"t7\",\"t300\"\]" \
    --table t7 --table t300
peer batch-2 1 "^engram-attach: --table 'nope': the daemon on $psock serves no table of that name \(it serves 2\); list its tables with .engram-host status --socket $psock., or run engram-attach without --table to attach them all$" \
    --table t0 --table nope
alone table-limit 1 '^engram-attach: --table: at most 64 tables may be named; name fewer, or leave out --table to attach every table$' \
    "$attach" --socket "$tmp/none.sock" $(for i in $(seq 65); do echo "--table t$i"; done)
alone table-64 1 "^engram-attach: no daemon listens on $tmp/none.sock" \
    "$attach" --socket "$tmp/none.sock" $(for i in $(seq 64); do echo "--table t$i"; done)
alone table-twice 1 "^engram-attach: --table 't1' is given twice; name each table once$" "$attach" --table t1 --table t2 --table t1
alone table-empty 1 '^engram-attach: --table needs a table.s name, not an empty string' "$attach" --table ''
alone table-bench-peer 1 '^engram-attach: --bench-peer and --table exclude each other$' "$attach" --bench-peer "$tmp/x" --table t1
# The socket path: a template from ENGRAM_HOST_SOCKET or --socket, {instance} and {device} filled in.
psock="$tmp/alpha-gpu3.sock" socket_args=() client_as=(env ENGRAM_HOST_SOCKET="$tmp/{instance}-gpu{device}.sock")
peer batch-2 0 '"regions":2,.*"device":3,' --instance alpha --device 3
psock="$tmp/beta.sock" socket_args=(--socket "$tmp/{instance}.sock") client_as=(env ENGRAM_HOST_SOCKET=/nowhere/x.sock)
peer batch-2 0 '"regions":2,' --instance beta
alone device-uuid 1 'socket template .*\{device_uuid\}.* \(from ENGRAM_HOST_SOCKET\) uses \{device_uuid\}' \
    env ENGRAM_HOST_SOCKET="$tmp/{device_uuid}.sock" "$attach"
alone bad-instance 1 "--instance 'a/b' may hold only letters, digits" "$attach" --instance a/b
alone bad-placeholder 1 'unknown placeholder \{gpu\}' "$attach" --socket "$tmp/{gpu}.sock"
alone relative 1 "socket path 'x.sock' \(from --socket\) must be absolute" "$attach" --socket x.sock
alone too-long 1 'bytes long, more than 107' "$attach" --socket "/$(printf 'x%.0s' $(seq 110))"
if [ "$(id -u)" = 0 ] && [ ! -e /run/engram-host/default.sock ]; then
    alone default-root 1 '^engram-attach: no daemon listens on /run/engram-host/default.sock:' \
        env -u ENGRAM_HOST_SOCKET XDG_RUNTIME_DIR=/ignored/for/root "$attach"
fi

# Another uid: a non-root user's default socket path (XDG_RUNTIME_DIR, else /tmp/engram-host-<euid>/).
py_nobody=""
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    for c in "$(command -v python3)" "$(python3 -c 'import sys; print(sys.executable)')" /usr/bin/python3 /usr/local/bin/python3; do
        if [ -x "$c" ] && "${as_nobody[@]}" "$c" -c 'import sys, socket; sys.exit(0 if hasattr(socket, "send_fds") else 1)' 2>/dev/null; then
            py_nobody="$c"
            break
        fi
    done
fi
if [ -z "$py_nobody" ]; then
    echo "test_engram_attach: SKIP the socket path cases of another uid: they need root, setpriv and a python3 >= 3.9 that uid $nobody can run"
    skipped=6
else
    other="$(mktemp -d /tmp/engram-attach-uid.XXXXXX)"
    chown "$nobody:$nobody" "$other"
    # As that user: XDG_RUNTIME_DIR/engram-host/{instance}.sock when it is absolute, else /tmp/engram-host-<euid>/.
    "${as_nobody[@]}" mkdir -p "$other/xdg/engram-host"
    psock="$other/xdg/engram-host/default.sock" socket_args=() peer_as=("${as_nobody[@]}") py="$py_nobody"
    client_as=("${as_nobody[@]}" env -u ENGRAM_HOST_SOCKET XDG_RUNTIME_DIR="$other/xdg/")
    peer batch-2 0 "\"daemon_uid\":$nobody,.*\"regions\":2,"
    psock="$other/xdg/engram-host/eu-1.sock" socket_args=() peer_as=("${as_nobody[@]}") py="$py_nobody"
    client_as=("${as_nobody[@]}" env -u ENGRAM_HOST_SOCKET XDG_RUNTIME_DIR="$other/xdg")
    peer batch-2 0 '"regions":2,' --instance eu-1
    if [ ! -e "/tmp/engram-host-$nobody/default.sock" ]; then
        alone default-no-xdg 1 "^engram-attach: no daemon listens on /tmp/engram-host-$nobody/default.sock:" \
            "${as_nobody[@]}" env -u ENGRAM_HOST_SOCKET -u XDG_RUNTIME_DIR "$attach"
        alone default-relative-xdg 1 "^engram-attach: no daemon listens on /tmp/engram-host-$nobody/default.sock:" \
            "${as_nobody[@]}" env -u ENGRAM_HOST_SOCKET XDG_RUNTIME_DIR=run/user "$attach"
        alone default-brace-xdg 1 "^engram-attach: no daemon listens on /tmp/engram-host-$nobody/default.sock:" \
            "${as_nobody[@]}" env -u ENGRAM_HOST_SOCKET XDG_RUNTIME_DIR='/run/{user}' "$attach"
        alone blank-sources 1 "^engram-attach: no daemon listens on /tmp/engram-host-$nobody/default.sock:" \
            "${as_nobody[@]}" env -u XDG_RUNTIME_DIR ENGRAM_HOST_SOCKET=' ' "$attach" --socket '' --instance ''
    else
        skipped=$((skipped + 4))
    fi
fi
echo "test_engram_attach: engram-attach's own peer cases (--verify, --table, the socket path): ok ($cases cases$([ "$skipped" = 0 ] || echo ", $skipped skipped"))"
echo "test_engram_attach: PASS in $(awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"

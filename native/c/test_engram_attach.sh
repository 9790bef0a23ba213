#!/usr/bin/env bash
# Checks engram-attach (native/c/engram_attach.c) against the real daemon, no GPU needed:
#   1. builds it (make -C native engram-attach) and, unless --no-package, the daemon (mvn -B -o -DskipTests package);
#   2. generates a checkpoint, starts `engram-host serve` (memfd, --numa none), waits for its ready file;
#   3. runs `engram-attach --json --verify --repeat 2` (and once with --ready-line) and checks: exit 0, one line per repetition,
#      bytes = the sizes of the daemon's memfds (read from /proc/<pid>/fd), regions = their number,
#      tables and table_bytes = the checkpoint's (engram-host inspect), fingerprint = the ready file's,
#      every table's digest verified through the mapping, and the daemon saw a BYE for each lease;
#   4. stops the daemon (engram-host stop) and checks it exited 0;
#   5. with python3 >= 3.9, runs native/c/protocol_peer.py cases: a MANIFEST of 520 fds (two 0xFD
#      fillers), NOT_READY retried, and malformed answers that must fail with a named cause.
# Usage: native/c/test_engram_attach.sh [--no-package]     Exit 0 when every check passed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
package=1
[ "${1:-}" = "--no-package" ] && package=0
t_start=$(date +%s.%N)

fail() { echo "test_engram_attach: FAIL: $*" >&2; exit 1; }
field() { grep -o "\"$1\":[^,}]*" <<<"$2" | head -1 | cut -d: -f2 | tr -d '"'; }

tmp="$(mktemp -d /tmp/engram-attach-test.XXXXXX)"
sock="$tmp/d.sock"
daemon=""
cleanup() {
    if [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null; then
        bin/engram-host stop --socket "$sock" >/dev/null 2>&1 || kill "$daemon" 2>/dev/null || true
        wait "$daemon" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

make -s -C native engram-attach
attach="$root/native/build/engram-attach"
if [ "$package" = 1 ]; then
    mvn -B -o -q -DskipTests package >"$tmp/mvn.log" 2>&1 || { tail -40 "$tmp/mvn.log"; fail "mvn package failed"; }
fi

# --- the real daemon ------------------------------------------------------------------------------------------
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
while read -r line; do
    rep="$(field rep "$line")"
    check() { [ "$(field "$1" "$line")" = "$2" ] || fail "rep $rep: $1 is $(field "$1" "$line"), expected $2 ($3)"; }
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

err="$("$attach" --socket "$tmp/none.sock" 2>&1)" && fail "a missing socket exited 0"
grep -q "^engram-attach: no daemon listens on $tmp/none.sock" <<<"$err" || fail "missing socket: unexpected message: $err"

bin/engram-host stop --socket "$sock" >/dev/null
wait "$daemon" || fail "the daemon exited $? after stop"
daemon=""
echo "test_engram_attach: real daemon: ok ($memfds regions, $memfd_bytes bytes, $ck_tables tables)"

# --- the protocol peer ----------------------------------------------------------------------------------------
if ! python3 -c 'import sys, socket; sys.exit(0 if hasattr(socket, "send_fds") else 1)' 2>/dev/null; then
    echo "test_engram_attach: SKIP protocol peer cases: python3 >= 3.9 (socket.send_fds) not found"
else
    peer() {  # peer CASE EXPECTED_RC PATTERN [engram-attach options]
        local case=$1 want=$2 pattern=$3 psock="$tmp/peer.sock" rc=0 prc=0 pout
        shift 3
        rm -f "$psock"
        python3 native/c/protocol_peer.py "$psock" "$case" >"$tmp/peer.out" 2>&1 &
        local pp=$!
        for _ in $(seq 200); do [ -S "$psock" ] && break; sleep 0.02; done
        pout="$("$attach" --socket "$psock" --json "$@" 2>&1)" || rc=$?
        wait "$pp" || prc=$?
        [ "$rc" = "$want" ] || fail "peer $case: engram-attach exited $rc, expected $want: $pout"
        [ "$prc" = 0 ] || fail "peer $case: the peer failed: $(cat "$tmp/peer.out")"
        grep -qE "$pattern" <<<"$pout" || fail "peer $case: output does not match /$pattern/: $pout"
    }
    peer batch-520 0 '"regions":520,.*"bytes":2129920,'
    peer batch-254 0 '"regions":254,'
    peer batch-2 1 "table 't0': the mapped bytes digest to [0-9a-f]{16} but the manifest says 0{16}" --verify
    peer not-ready 0 '"regions":2,' --wait-ms 5000
    peer not-ready 1 'ERROR NOT_READY \(3, retryable\): still loading'
    peer bad-filler 1 'MANIFEST: filler 1 is 0x00, not 0xFD'
    peer empty-filler 1 'filler 1 carried no fds \(253 of 300'
    peer eof 1 'closed the connection while sending MANIFEST'
    peer count-mismatch 1 'lists 3 regions but the message carried 2 fds'
    peer outside-region 1 "table 't': \[100, 100 \+ 4000\) is outside region 0 of 4096 bytes"
    peer wrong-bytes 1 "bytes is 100 but F16 x shape needs 200"
    peer wrong-size 1 'manifest says a memfd of 8192 bytes but fd [0-9]+ is a file of 4096 bytes'
    peer trailing 1 '1 trailing bytes after the frame'
    peer bad-magic 1 'bad magic 0x12345678'
    peer bad-version 1 'the daemon chose version 2'
    peer mismatch 1 'ERROR FINGERPRINT_MISMATCH \(4\): fingerprint mismatch'
    echo "test_engram_attach: protocol peer: ok (16 cases)"
fi
echo "test_engram_attach: PASS in $(awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"

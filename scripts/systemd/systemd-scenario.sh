#!/usr/bin/env bash
# engram-host under a real systemd as PID 1 (issue #28, section 1; the record: bench/systemd-runs.md).
#
#   scripts/systemd/systemd-scenario.sh [OUT]      (root; about 6 minutes on 2 cores under TCG)
#
# On the host: takes the newest dist/engram-host-*.tar.gz (scripts/release/dist.sh builds one when there is none),
# generates two small models into OUT/models (a: 20000 rows, b: 24000 rows, so b's fingerprint differs), then boots
# scripts/systemd/systemd-vm.sh with this script. OUT defaults to /var/tmp/engram-systemd-run and is kept.
# In the guest (ENGRAM_SYSTEMD_VM=1): installs the tarball and deploy/systemd as docs/first-deploy.md tells an operator,
# starts a client holding a lease and one importing in a loop (scripts/systemd/systemd-clients.py), then does each
# action and records it: OUT/actions.jsonl (one line an action: its times, the daemon's origin from STATUS, the
# PIDs, the fd store's size as PID 1 holds it), OUT/<n>-<action>.txt (systemctl status, the journal of that action,
# STATUS= as systemctl show saw it), OUT/hold.jsonl and OUT/import.jsonl (the clients), OUT/journal.txt.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

if [ "${ENGRAM_SYSTEMD_VM:-}" != 1 ]; then
  set -e
  . "$ROOT/scripts/systemd/scenario-host.sh"
  prepare_out "${1:-/var/tmp/engram-systemd-run}"
  tarball=$TARBALL eh=$EH
  "$eh" generate --model --out "$OUT/models/a" --rows 20000 >/dev/null
  "$eh" generate --model --out "$OUT/models/b" --rows 24000 >/dev/null
  echo "systemd-scenario: $(basename "$tarball"), models in $OUT/models; booting the guest" >&2
  rm -rf "$SCENARIO_WORK"   # exec below ends this shell before its EXIT trap
  SYSD_VM_OUT="$OUT" exec scripts/systemd/systemd-vm.sh bash "$ROOT/scripts/systemd/systemd-scenario.sh"
fi

# ---------------------------------------------------------------------------------------------------------- guest --
OUT=$ENGRAM_SYSTEMD_VM_OUT
U=engram-host
CLIENTS="$ROOT/scripts/systemd/systemd-clients.py"
now() { date +%s.%N; }
dt() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b - a}'; }
log() { echo "scenario: $*"; }
mainpid() { systemctl show -p MainPID --value $U; }
# the fd store as PID 1 holds it: its memfds and sockets (systemd 252 has no property that counts them)
store() { local m s; m=$(ls -l /proc/1/fd 2>/dev/null | grep -c 'memfd:'); s=$(ls -l /proc/1/fd | grep -c socket:); echo "$m $s"; }
status_json() { timeout 90 python3 "$CLIENTS" status "$SOCK" 2>&1 | tail -1; }
origin() { status_json | python3 -c 'import json,sys
try:
    d=json.loads(sys.stdin.read()); o=d["origin"]; print(json.dumps({"how":o.get("how"),"checkpoint_bytes_read":o.get("checkpoint_bytes_read"),"pid":d["pid"],"regions":d.get("regions"),"fingerprint":str(d.get("fingerprint"))[:16]}))
except Exception as e: print(json.dumps({"error":str(e)}))'; }
# wait_ready OLD: until a main pid other than OLD is active/running (READY=1 seen); prints the time it took
wait_ready() {
  local old=$1 t=$(now) p
  for _ in $(seq 1 600); do
    p=$(mainpid)
    if [ "$p" != 0 ] && [ "$p" != "$old" ] && [ "$(systemctl show -p ActiveState --value $U)" = active ] \
       && [ "$(systemctl show -p SubState --value $U)" = running ]; then return 0; fi
    sleep 0.2
  done
  return 1
}
N=0
record() {  # record NAME T_START T_READY NOTE
  local name=$1 t0=$2 t1=$3 note=$4 f
  N=$((N + 1)); f="$OUT/$N-$name.txt"
  { echo "== systemctl status"; systemctl status $U --no-pager -l 2>&1
    echo "== journal of the action"; journalctl -u $U -o short-monotonic --no-pager --since "@${t0%.*}" 2>&1
    [ -f "$OUT/.statustext" ] && { echo "== StatusText= seen while it ran (systemctl show, every 0.2 s)"; uniq "$OUT/.statustext"; rm -f "$OUT/.statustext"; }
  } > "$f"
  local st; st=$(store)
  printf '{"n":%d,"action":"%s","t0":%s,"t_ready":%s,"seconds":%s,"status_origin":%s,"main_pid":%s,"n_restarts":"%s","pid1_store_memfds":%s,"pid1_sockets":%s,"note":"%s"}\n' \
    "$N" "$name" "$t0" "$t1" "$(dt "$t0" "$t1")" "$(origin)" "$(mainpid)" "$(systemctl show -p NRestarts --value $U)" \
    ${st% *} ${st#* } "$note" >> "$OUT/actions.jsonl"
  log "$name: $(dt "$t0" "$t1") s; $(tail -1 "$OUT/actions.jsonl")"
}
watch_status() { while :; do echo "$(date +%s.%N | cut -c1-14) $(systemctl show -p StatusText --value $U)" >> "$OUT/.statustext"; sleep 0.2; done; }

log "PID 1: $(cat /proc/1/comm), $(systemctl --version | head -1), kernel $(uname -r), virt $(systemd-detect-virt)"
log "$(apt-cache policy systemd 2>/dev/null | sed -n 's/^ *Candidate: /candidate: /p')"
# --- install, as docs/first-deploy.md "Under systemd" says ----------------------------------------------------------
tarball=$(ls "$OUT"/engram-host-*-linux-x86_64.tar.gz | head -1)
dir=$(basename "$tarball" -linux-x86_64.tar.gz)
set -e
tar -xzf "$tarball" -C /opt && ln -sfn "$dir" /opt/engram-host
install -D -m 0644 /opt/engram-host/deploy/systemd/engram-host.env /etc/engram-host/engram-host.env
mkdir -p /var/lib/engram-host && cp -r "$OUT/models/a" /var/lib/engram-host/model
sed -i 's|^ENGRAM_HOST_CHECKPOINT=.*|ENGRAM_HOST_CHECKPOINT=/var/lib/engram-host/model|' /etc/engram-host/engram-host.env
install -m 0644 /opt/engram-host/deploy/systemd/engram-host.service /etc/systemd/system/
cp -r /opt/engram-host/deploy/systemd/engram-host.service.d /etc/systemd/system/
systemctl daemon-reload
set +e
systemd-analyze verify /etc/systemd/system/engram-host.service > "$OUT/0-verify.txt" 2>&1
log "systemd-analyze verify: $(tr '\n' ' ' < "$OUT/0-verify.txt")"

# --- 1. start ------------------------------------------------------------------------------------------------------
watch_status & W=$!
t0=$(now); systemctl enable --now $U > "$OUT/.enable" 2>&1; rc=$?; t1=$(now)
kill $W; wait $W 2>/dev/null
SOCK=$(ls /run/engram-host/*.sock | head -1)
record start "$t0" "$t1" "systemctl enable --now exit $rc, socket $SOCK"
t0=$(now); timeout 120 /opt/engram-host/bin/engram-host status --json --socket "$SOCK" > "$OUT/1-status-cli.json" 2>&1
log "engram-host status --json (a JVM): $(dt "$t0" "$(now)") s"

# --- the clients -------------------------------------------------------------------------------------------------------
python3 "$CLIENTS" hold "$SOCK" > "$OUT/hold.jsonl" 2>&1 & H=$!
python3 "$CLIENTS" import "$SOCK" > "$OUT/import.jsonl" 2>&1 & I=$!
for _ in $(seq 1 100); do grep -q '"ok": true' "$OUT/import.jsonl" 2>/dev/null && grep -q lease "$OUT/hold.jsonl" && break; sleep 0.3; done
sleep 2

# --- 2. restart -------------------------------------------------------------------------------------------------------
old=$(mainpid); t0=$(now); systemctl restart $U; rc=$?; t1=$(now)
record restart "$t0" "$t1" "systemctl restart exit $rc (returns after READY=1), old pid $old"
sleep 3

# --- 3. kill -9 of the main pid ----------------------------------------------------------------------------------------
old=$(mainpid); t0=$(now); kill -9 "$old"; wait_ready "$old"; t1=$(now)
record kill9 "$t0" "$t1" "SIGKILL to $old; Restart=on-failure, RestartSec=1s"
sleep 3

# --- 4. a stalled poll loop (SIGSTOP) with WatchdogSec= ------------------------------------------------------------------
mkdir -p /etc/systemd/system/$U.service.d
printf '[Service]\nWatchdogSec=20s\n' > /etc/systemd/system/$U.service.d/watchdog.conf
systemctl daemon-reload
old=$(mainpid); t0=$(now); systemctl restart $U; t1=$(now)
record restart-with-watchdog "$t0" "$t1" "WatchdogSec=20s in a drop-in; WATCHDOG_USEC=$(tr '\0' '\n' < /proc/$(mainpid)/environ | sed -n 's/^WATCHDOG_USEC=//p')"
sleep 5
old=$(mainpid); t0=$(now); kill -STOP "$old"; wait_ready "$old"; t1=$(now)
record watchdog "$t0" "$t1" "SIGSTOP to $old, WatchdogSec=20s"
rm /etc/systemd/system/$U.service.d/watchdog.conf; systemctl daemon-reload
sleep 3

# --- 5. a changed checkpoint, then a restart ----------------------------------------------------------------------------
rm -rf /var/lib/engram-host/model && cp -r "$OUT/models/b" /var/lib/engram-host/model
old=$(mainpid); t0=$(now); systemctl restart $U; rc=$?; t1=$(now)
record changed-checkpoint "$t0" "$t1" "model b (24000 rows) in place of a; systemctl restart exit $rc"
sleep 3

# --- 6. stop, then start ---------------------------------------------------------------------------------------------------
t0=$(now); systemctl stop $U; t1=$(now)
st=$(store); log "after stop: PID 1 holds ${st% *} memfds; socket file: $(ls /run/engram-host 2>&1 | tr '\n' ' ')"
N=$((N + 1)); { systemctl status $U --no-pager -l; journalctl -u $U -o short-monotonic --no-pager --since "@${t0%.*}"; } > "$OUT/$N-stop.txt" 2>&1
printf '{"n":%d,"action":"stop","t0":%s,"seconds":%s,"pid1_store_memfds":%s,"pid1_sockets":%s}\n' "$N" "$t0" "$(dt "$t0" "$t1")" ${st% *} ${st#* } >> "$OUT/actions.jsonl"
sleep 2
t0=$(now); systemctl start $U; rc=$?; t1=$(now)
SOCK=$(ls /run/engram-host/*.sock | head -1)
record start-after-stop "$t0" "$t1" "systemctl start exit $rc"
sleep 5

kill $H $I 2>/dev/null; wait $H $I 2>/dev/null
journalctl -u $U -o short-monotonic --no-pager > "$OUT/journal.txt" 2>&1
journalctl -b -o short-monotonic --no-pager -p warning > "$OUT/journal-warnings.txt" 2>&1
log "done: $(wc -l < "$OUT/actions.jsonl") actions, $(grep -c '"ok": true' "$OUT/import.jsonl") imports ok, $(grep -c '"ok": false' "$OUT/import.jsonl") failed"
exit 0

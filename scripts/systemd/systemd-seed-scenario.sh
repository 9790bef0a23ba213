#!/usr/bin/env bash
# The seed drop-in (deploy/systemd/seed/) under a real systemd as PID 1: two units in one guest seed from each other
# over loopback TCP (the record: bench/systemd-runs.md, "Seed run").
#
#   scripts/systemd/systemd-seed-scenario.sh [OUT]      (root; 15-25 minutes on 2 busy cores under TCG)
#
# On the host: takes the newest dist/engram-host-*.tar.gz (scripts/release/dist.sh builds one when there is none),
# generates a small model (20000 rows) with a digest record (`inspect --write-digests`) into OUT/models/a, then boots
# scripts/systemd/systemd-vm.sh with this script (SYSD_VM_MB 3072 and SYSD_VM_CPUS 2 unless set). OUT defaults to
# /var/tmp/engram-systemd-seed-run and is kept.
# In the guest (ENGRAM_SYSTEMD_VM=1), node A is the shipped engram-host.service with seed.conf, exporting on
# 127.0.0.1:7070; node B stands for the neighbour: a copy of the unit as engram-host-b.service whose environment
# files, RuntimeDirectory (its socket and ready file) and checkpoint copy are its own (its fd store is its unit's),
# with the same drop-in, seeding from "127.0.0.1:7070,127.0.0.2:7071" and exporting on 127.0.0.2:7071, and the same
# key file. Each action goes to OUT/actions.jsonl (times, STATUS's origin of the unit acted on, main pids) and
# OUT/<n>-<action>.txt (systemctl status, the journal of the action, StatusText= while it ran); OUT/journal-*.txt.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

if [ "${ENGRAM_SYSTEMD_VM:-}" != 1 ]; then
  set -e
  . "$ROOT/scripts/systemd/scenario-host.sh"
  prepare_out "${1:-/var/tmp/engram-systemd-seed-run}"
  tarball=$TARBALL eh=$EH
  "$eh" generate --model --out "$OUT/models/a" --rows 20000 >/dev/null
  "$eh" inspect --write-digests "$OUT/models/a" > "$OUT/models/write-digests.txt"
  echo "systemd-seed-scenario: $(basename "$tarball"), model and digest record in $OUT/models/a; booting the guest" >&2
  rm -rf "$SCENARIO_WORK"   # exec below ends this shell before its EXIT trap
  SYSD_VM_MB=${SYSD_VM_MB:-3072} SYSD_VM_CPUS=${SYSD_VM_CPUS:-2} SYSD_VM_TIMEOUT=${SYSD_VM_TIMEOUT:-1800} \
    SYSD_VM_OUT="$OUT" exec scripts/systemd/systemd-vm.sh bash "$ROOT/scripts/systemd/systemd-seed-scenario.sh"
fi

# ---------------------------------------------------------------------------------------------------------- guest --
OUT=$ENGRAM_SYSTEMD_VM_OUT
A=engram-host B=engram-host-b
SOCK_A=/run/engram-host/default.sock SOCK_B=/run/engram-host-b/default.sock
CLIENTS="$ROOT/scripts/systemd/systemd-clients.py"
export PYTHONPATH="$ROOT/python"
now() { date +%s.%N; }
dt() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b - a}'; }
log() { echo "seed-scenario: $*"; }
prop() { systemctl show -p "$2" --value "$1"; }
sock_of() { [ "$1" = $A ] && echo $SOCK_A || echo $SOCK_B; }
origin() {  # origin UNIT: STATUS's origin, one JSON object
  local s; s=$(timeout 60 python3 "$CLIENTS" status "$(sock_of "$1")" 2>&1 | tail -1)
  python3 -c 'import json,sys
try:
    d=json.loads(sys.argv[1]); o=d["origin"]; s=o.get("seeded") or {}
    print(json.dumps({"how":o.get("how"),"checkpoint_bytes_read":o.get("checkpoint_bytes_read"),"seeded_bytes":s.get("bytes"),"peers_refused":s.get("peers_refused"),"sources":s.get("sources"),"pid":d["pid"],"fingerprint":str(d.get("fingerprint"))[:16]}))
except Exception as e: print(json.dumps({"error":str(e),"answer":sys.argv[1][:300]}))' "$s"
}
metrics() { python3 -c 'import sys,urllib.request
try: print(urllib.request.urlopen("http://127.0.0.1:"+sys.argv[1]+"/metrics",timeout=30).read().decode())
except Exception as e: print("no metrics:", e)' "$1" | grep '^engram_host_seed' ; }
watch_status() { while :; do echo "$(date +%s.%N | cut -c1-14) $1: $(prop "$1" StatusText)" >> "$OUT/.statustext"; sleep 0.2; done; }
N=0
record() {  # record NAME UNIT T_START T_END NOTE
  local name=$1 u=$2 t0=$3 t1=$4 note=$5 f
  N=$((N + 1)); f="$OUT/$N-$name.txt"
  { echo "== systemctl status $u"; systemctl status "$u" --no-pager -l 2>&1
    for x in $A $B; do echo "== journal of $x during the action"; journalctl -u $x -o short-monotonic --no-pager --since "@${t0%.*}" 2>&1; done
    [ -f "$OUT/.statustext" ] && { echo "== StatusText= seen while it ran (systemctl show, every 0.2 s)"; uniq "$OUT/.statustext"; rm -f "$OUT/.statustext"; }
  } > "$f"
  local o='null'; [ "$(prop "$u" ActiveState)" = active ] && o=$(origin "$u")
  local seedlines; seedlines=$(journalctl -u "$u" -o cat --no-pager --since "@${t0%.*}" 2>/dev/null | grep -o 'seed: .*' | python3 -c 'import json,sys; print(json.dumps([l.rstrip() for l in sys.stdin]))')
  printf '{"n":%d,"action":"%s","unit":"%s","t0":%s,"t_end":%s,"seconds":%s,"status_origin":%s,"active":"%s","result":"%s","main_pid_a":%s,"main_pid_b":%s,"n_restarts":"%s","pid1_memfds":%s,"seed_lines":%s,"note":"%s"}\n' \
    "$N" "$name" "$u" "$t0" "$t1" "$(dt "$t0" "$t1")" "$o" "$(prop "$u" ActiveState)" "$(prop "$u" Result)" \
    "$(prop $A MainPID)" "$(prop $B MainPID)" "$(prop "$u" NRestarts)" "$(ls -l /proc/1/fd 2>/dev/null | grep -c 'memfd:')" \
    "$seedlines" "$note" >> "$OUT/actions.jsonl"
  log "$name: $(dt "$t0" "$t1") s; $(tail -1 "$OUT/actions.jsonl")"
}
act() {  # act NAME UNIT NOTE COMMAND...: runs COMMAND with StatusText= of UNIT watched, then records it
  local name=$1 u=$2 note=$3; shift 3
  watch_status "$u" & local w=$!
  local t0; t0=$(now); "$@" > "$OUT/.cmd-out" 2>&1; local rc=$?; local t1; t1=$(now)
  kill $w; wait $w 2>/dev/null
  record "$name" "$u" "$t0" "$t1" "$note; $* exit $rc$( [ -s "$OUT/.cmd-out" ] && echo ": $(tr '\n"' ' ' < "$OUT/.cmd-out" | cut -c1-200)")"
}
content_check() {  # content_check NAME: a client's check of B's tables against the digest record
  local t0; t0=$(now)
  timeout 300 python3 -m engram_host import --socket $SOCK_B --wait-ms 60000 --json \
    --verify-content /var/lib/engram-host-b/model/engram-digests.json > "$OUT/$1-content-check.json" 2>&1
  local rc=$?
  log "content check ($1): exit $rc in $(dt "$t0" "$(now)") s: $(python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); c=d["content_check"]; print(json.dumps({"daemon_pid":d["daemon_pid"],"fingerprint":str(d["fingerprint"])[:16],"verified":c["verified"],"not_checked":c["not_checked"],"bytes":c["bytes"],"trusted":c["trusted"]}))' "$OUT/$1-content-check.json" 2>&1 | tail -1)" \
    | tee -a "$OUT/content-checks.txt"
}

log "PID 1: $(cat /proc/1/comm), $(systemctl --version | head -1), kernel $(uname -r), virt $(systemd-detect-virt), $(nproc) CPUs"
log "lo: $(ip -br addr show lo 2>&1 | tr -s ' ')"
# --- node A: install as docs/first-deploy.md ("Under systemd") and docs/fleet.md ("Seeding from neighbours") say ----
tarball=$(ls "$OUT"/engram-host-*-linux-x86_64.tar.gz | head -1)
dir=$(basename "$tarball" -linux-x86_64.tar.gz)
set -e
tar -xzf "$tarball" -C /opt && ln -sfn "$dir" /opt/engram-host
D=/opt/engram-host/deploy/systemd
install -D -m 0644 $D/engram-host.env /etc/engram-host/engram-host.env
mkdir -p /var/lib/engram-host && cp -r "$OUT/models/a" /var/lib/engram-host/model
sed -i -e 's|^ENGRAM_HOST_CHECKPOINT=.*|ENGRAM_HOST_CHECKPOINT=/var/lib/engram-host/model|' \
       -e 's|^ENGRAM_HOST_FLAGS=.*|& --metrics-port 9464|' /etc/engram-host/engram-host.env
install -m 0644 $D/engram-host.service /etc/systemd/system/
cp -r $D/engram-host.service.d /etc/systemd/system/
cp $D/seed/seed.conf /etc/systemd/system/engram-host.service.d/seed.conf
cp $D/seed/seed.env /etc/engram-host/seed.env
sed -i 's|^ENGRAM_HOST_SEED_FLAGS=.*|ENGRAM_HOST_SEED_FLAGS=--seed-listen 127.0.0.1:7070 --seed-key /etc/engram-host/seed.key|' /etc/engram-host/seed.env
head -c 32 /dev/urandom > /etc/engram-host/seed.key && chmod 600 /etc/engram-host/seed.key
# --- node B: the same unit, drop-in and key; its own environment files, socket directory and checkpoint copy ----------
mkdir -p /etc/engram-host-b /var/lib/engram-host-b && cp -r "$OUT/models/a" /var/lib/engram-host-b/model
sed -e 's|^ENGRAM_HOST_CHECKPOINT=.*|ENGRAM_HOST_CHECKPOINT=/var/lib/engram-host-b/model|' \
    -e 's|^ENGRAM_HOST_FLAGS=.*|& --metrics-port 9465|' $D/engram-host.env > /etc/engram-host-b/engram-host.env
sed -e 's|/etc/engram-host/engram-host.env|/etc/engram-host-b/engram-host.env|' -e 's|/run/engram-host|/run/engram-host-b|g' \
    -e 's|^RuntimeDirectory=engram-host$|RuntimeDirectory=engram-host-b|' $D/engram-host.service > /etc/systemd/system/$B.service
mkdir -p /etc/systemd/system/$B.service.d
cp -r $D/engram-host.service.d/. /etc/systemd/system/$B.service.d/
sed -e 's|/etc/engram-host/seed.env|/etc/engram-host-b/seed.env|' -e 's|/run/engram-host|/run/engram-host-b|g' \
    $D/seed/seed.conf > /etc/systemd/system/$B.service.d/seed.conf
sed 's|^ENGRAM_HOST_SEED_FLAGS=.*|ENGRAM_HOST_SEED_FLAGS=--seed-from 127.0.0.1:7070,127.0.0.2:7071 --seed-listen 127.0.0.2:7071 --seed-key /etc/engram-host/seed.key|' \
    $D/seed/seed.env > /etc/engram-host-b/seed.env
systemctl daemon-reload
set +e
{ for u in $A $B; do echo "== diff of $u against the shipped unit"; diff $D/engram-host.service /etc/systemd/system/$u.service
    echo "== $u's drop-ins"; ls -l /etc/systemd/system/$u.service.d; diff $D/seed/seed.conf /etc/systemd/system/$u.service.d/seed.conf; done
  echo "== seed.env of A"; grep -v '^#' /etc/engram-host/seed.env; echo "== seed.env of B"; grep -v '^#' /etc/engram-host-b/seed.env
  ls -l /etc/engram-host/seed.key
  echo "== ExecStart"; systemctl show -p ExecStart $A $B
  echo "== ordering"; systemctl show -p Wants -p After $A $B; echo "== what network-online.target waits for"; systemctl show -p Wants -p WantedBy -p After network-online.target
} > "$OUT/0-install.txt" 2>&1
systemd-analyze verify /etc/systemd/system/$A.service /etc/systemd/system/$B.service > "$OUT/0-verify.txt" 2>&1
log "systemd-analyze verify: $(tr '\n' ' ' < "$OUT/0-verify.txt")"

# --- 1. enable --now A, then B: B seeds from A ------------------------------------------------------------------------------
act start-a $A "A exports on 127.0.0.1:7070" systemctl enable --now $A
act start-b-seeds $B "B: --seed-from 127.0.0.1:7070,127.0.0.2:7071 --seed-listen 127.0.0.2:7071" systemctl enable --now $B
if ! tail -1 "$OUT/actions.jsonl" | grep -q '"how": "seed"'; then
  # Seed run 1: A's first handshake under TCG took longer than the 5 s a peer waits for CHALLENGE (JCA, Netty's first
  # connection: about 0.2-0.45 s on the host). A scenario client sends A one HELLO and reads its CHALLENGE (no key,
  # no PROOF: A counts it refused), then B loads again from A, whose handshake code has run once.
  act stop-b-for-warm-up $B "B loaded from the disk: A's first handshake was too slow" systemctl stop $B
  python3 -c 'import os,socket,struct,sys,time
s=socket.create_connection(("127.0.0.1",7070),timeout=120); t=time.time()
p=struct.pack("<IHH",0x44534745,1,0)+os.urandom(48); s.sendall(struct.pack("<BBHI",1,0,0,len(p))+p)
h=b""
while len(h)<8+84:
    b=s.recv(8+84-len(h))
    if not b: break
    h+=b
print("warm-up: A answered type %d, %d bytes, %.2f s after HELLO" % (h[0] if h else -1, len(h), time.time()-t)); s.close()' 2>&1 | tee "$OUT/warm-up.txt"
  act start-b-seeds-warm $B "A's handshake warmed by one HELLO" systemctl start $B
fi
content_check 1
metrics 9464 > "$OUT/1-metrics-a.txt" 2>&1; metrics 9465 > "$OUT/1-metrics-b.txt" 2>&1
{ echo "== network-online.target"; systemctl show -p ActiveState -p ActiveEnterTimestampMonotonic network-online.target
  for u in $A $B; do echo "== $u"; systemctl show -p ExecMainStartTimestampMonotonic -p ActiveEnterTimestampMonotonic $u; done
  systemd-analyze critical-chain $B.service --no-pager; } > "$OUT/1-network-online.txt" 2>&1
sleep 2

# --- 2. restart B: the fd store, no seed, no read ---------------------------------------------------------------------------
act restart-b $B "old pid $(prop $B MainPID)" systemctl restart $B
sleep 2

# --- 3. B with another key against A: A refuses, B loads from the disk --------------------------------------------------------
metrics 9464 > "$OUT/3-metrics-a-before.txt" 2>&1
act stop-b-for-key $B "" systemctl stop $B
head -c 32 /dev/urandom > /etc/engram-host-b/other.key && chmod 600 /etc/engram-host-b/other.key
sed -i 's|--seed-key /etc/engram-host/seed.key|--seed-key /etc/engram-host-b/other.key|' /etc/engram-host-b/seed.env
act start-b-wrong-key $B "B holds another 32-byte key (0600)" systemctl start $B
metrics 9464 > "$OUT/3-metrics-a-after.txt" 2>&1; metrics 9465 > "$OUT/3-metrics-b-after.txt" 2>&1

# --- 4. the shared key back: B seeds again ---------------------------------------------------------------------------------
act stop-b-for-key-back $B "" systemctl stop $B
sed -i 's|--seed-key /etc/engram-host-b/other.key|--seed-key /etc/engram-host/seed.key|' /etc/engram-host-b/seed.env
act start-b-key-back $B "the shared key again" systemctl start $B
content_check 4

# --- 5. stop A, then stop B and start B: no peer answers, B loads from the disk ------------------------------------------------
act stop-a $A "" systemctl stop $A
act stop-b $B "" systemctl stop $B
sleep 1
act start-b-no-peer $B "A stopped" systemctl start $B
sleep 2

# --- 6. B without a key: the daemon refuses its flags (exit 2), RestartPreventExitStatus=2 ----------------------------------------
act stop-b-for-nokey $B "" systemctl stop $B
sed -i 's| --seed-key /etc/engram-host/seed.key||' /etc/engram-host-b/seed.env
# (timeout: with Restart=on-failure a start job may wait through the restarts)
act start-b-no-key $B "--seed-from without --seed-key" timeout 120 systemctl start $B
t0=$(now); sleep 20
record b-no-key-after-20s $B "$t0" "$(now)" "20 s later: restarted or not"
systemctl stop $B; systemctl reset-failed $B 2>/dev/null
for u in $A $B; do journalctl -u $u -o short-monotonic --no-pager > "$OUT/journal-$u.txt" 2>&1; done
journalctl -b -o short-monotonic --no-pager -p warning > "$OUT/journal-warnings.txt" 2>&1
log "done: $(wc -l < "$OUT/actions.jsonl") actions"
exit 0

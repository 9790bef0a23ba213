#!/usr/bin/env bash
# Seeding across two network namespaces made here (issue 29; bench/seed-runs.md, docs/seeding.md "What it costs"), as
# root: `ip netns add` two namespaces joined by a veth pair (10.231.0.1/30 and .2/30; neither end in this machine's
# own namespace), daemon A in the first (`serve --seed-listen 10.231.0.1:7070`, loading MODEL from the page
# cache), daemon B in the second (`serve --seed-listen 10.231.0.2:7070 --seed-from eh-seed-peers:7070`, a name
# that B's namespace resolves to both daemons' addresses, as a headless service's does), both on sockets in a
# directory of this machine (a Unix socket's path is not in a network namespace, so the clients here reach both).
#
#   scripts/bench/seed-netns.sh --ci                  bin/test's step: a generated 96 MiB model, one seed, the checks
#   scripts/bench/seed-netns.sh MODEL_DIR [RUNS]      the measurement: RUNS (default 3) runs of everything below
#
# Every seed is checked, and any check that fails fails the script (exit 1):
#   - B's STATUS: ready, origin.how seed, origin.checkpoint_bytes_read 0, every byte seeded, from the one peer A
#     (its address in the other namespace), no peer refused; B's own address in the name's list skipped, as its log
#     says;
#   - a client's digest check of every table B serves: `engram-host import --verify-content RECORD` (each table's
#     sha256-tree-v1 over the mapped bytes against the digest record: all verified, none unchecked), and with --ci
#     also `engram-host verify --checkpoint MODEL_DIR` (byte for byte against the files);
#   - the namespaces: readlink /proc/PID/ns/net of A and of B (their pids as STATUS gives them) differ from each
#     other and from this shell's; A's namespace holds only lo and one end of the veth, B's route to A is the other
#     end, and neither end is in this machine's namespace; A's metrics (read inside A's namespace) count as sent the
#     bytes B counts as seeded.
# The measurement adds, per run, in this order (each the median of RUNS in the summary, beside the ratios):
#   1. A's own load from the page cache (STATUS load.read_gib_s: read and digested; the fill path from memory, as is
#      B's own load from the page cache in 4);
#   2. the transport alone between the namespaces: scripts/bench/tcp-rate.py, sendfile from a shard of MODEL_DIR in
#      the page cache to a receiver in B's namespace, as many streams as B's --threads (THREADS, default nproc); once
#      into a reused buffer (the transport) and once into fresh memfd pages (the transport and the page faults);
#      and where iperf3 is installed, iperf3 -Z (sendfile) with as many streams, for a second opinion;
#   3. the seed, unshaped, then with A's veth shaped (tc tbf) to each rate of RATES (default "4gbit 2gbit 1gbit"), each
#      beside the transport alone through the same shaping;
#   4. B loading MODEL_DIR itself (no --seed-from): from the page cache, then after `echo 3 > drop_caches` (cold).
# Output: OUT (default a new directory under /tmp, named at the start) holds each daemon's log and STATUS, runs.tsv
# (one line per measurement; a seed's line ends with its wall time from the start of B, ms, and the 1-minute load
# average after it) and summary.txt (the medians and ratios), which is also printed. The seed's rate is
# origin.seeded's bytes over its seconds (from the first range to the last).
# Environment: THREADS (both daemons' --threads), RATES (the shaped rates), B_FLAGS (appended to B's seeding serve:
# "--backend cuda-vmm" on a GPU machine, whose tables the content check then reads through a CPU view), LOADS
# (default "warm cold": B's own loads after each run; "" for none).
# Needs: root, ip (iproute2), tc, python3. The namespaces, the veth and the daemons are removed on every exit.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${ENGRAM_HOST_BIN:-$here/bin/engram-host}
rate_py=$here/scripts/bench/tcp-rate.py
ci=0
if [ "${1:-}" = --ci ]; then
  ci=1
  model=""
  runs=1
else
  model=${1:?usage: seed-netns.sh --ci | seed-netns.sh MODEL_DIR [RUNS]}
  runs=${2:-3}
fi
threads=${THREADS:-$(nproc)}
rates=${RATES:-4gbit 2gbit 1gbit}
read -ra b_flags <<< "${B_FLAGS:-}"   # appended to B's seeding serve (e.g. "--backend cuda-vmm" on a GPU machine)
loads=${LOADS-warm cold}              # B's own loads after each run ("" for none)
[ "$(id -u)" = 0 ] || { echo "seed-netns: needs root (ip netns add)" >&2; exit 2; }
command -v ip >/dev/null && command -v tc >/dev/null \
  || { echo "seed-netns: needs ip and tc (apt-get install iproute2)" >&2; exit 2; }

ns_a=eh-seed-a-$$ ns_b=eh-seed-b-$$ veth_a=eha$$ veth_b=ehb$$
ip_a=10.231.0.1 ip_b=10.231.0.2 port=7070 metrics=9464
if [ $ci = 1 ]; then
  out=${OUT:-$here/target/seed-netns}
  . "$here/scripts/lib/own-dir.sh"
  own_dir "$out" seed-netns   # its own results of an earlier run are replaced; a directory of other files is refused
  find "$out" -mindepth 1 ! -name .engram-own-dir -delete
else
  out=${OUT:-$(mktemp -d /tmp/seed-netns.XXXXXX)}
fi
mkdir -p "$out"
work=$(mktemp -d /tmp/seed-netns-work.XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  ip netns del "$ns_a" 2>/dev/null || true   # the veth goes with its namespace
  ip netns del "$ns_b" 2>/dev/null || true
  rm -rf "/etc/netns/$ns_b"; rmdir /etc/netns 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fails=0
ok() { echo "PASS $*" >> "$out/checks.txt"; [ $ci = 1 ] && echo "seed-netns: PASS $*" || true; }
bad() { echo "FAIL $*" | tee -a "$out/checks.txt" >&2; fails=$((fails + 1)); }
say() { echo "$*" | tee -a "$out/summary.txt"; }
row() { printf '%s\n' "$*" >> "$out/runs.tsv"; }

# the namespaces and the link between them
ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add "$veth_a" type veth peer name "$veth_b"
ip link set "$veth_a" netns "$ns_a"
ip link set "$veth_b" netns "$ns_b"
ip -n "$ns_a" addr add $ip_a/30 dev "$veth_a"
ip -n "$ns_b" addr add $ip_b/30 dev "$veth_b"
for n in "$ns_a" "$ns_b"; do ip -n "$n" link set lo up; done
ip -n "$ns_a" link set "$veth_a" up
ip -n "$ns_b" link set "$veth_b" up
# a name for the peers, as a headless service gives one: in B's namespace (ip netns exec bind-mounts
# /etc/netns/NAME/hosts over /etc/hosts) it resolves to A's address and to B's own
peers=eh-seed-peers
mkdir -p "/etc/netns/$ns_b"
printf '127.0.0.1 localhost\n%s %s\n%s %s\n' $ip_a $peers $ip_b $peers > "/etc/netns/$ns_b/hosts"

if [ $ci = 1 ]; then
  model=$work/model   # 2 layers x 190,650 rows x 264 bytes: 96 MiB of tables
  "$bin" generate --model --out "$model" --rows 190650 > "$out/generate.log"
  "$bin" inspect --write-digests "$model" > "$out/digests.log"
fi
record=$model/engram-digests.json
[ -f "$record" ] || { echo "seed-netns: $model has no digest record (engram-host inspect --write-digests $model)" >&2; exit 2; }
shard=$(ls -S "$model"/*.safetensors | head -1)   # the transport's source: the largest file, in the page cache
cat "$model"/*.safetensors > /dev/null
head -c 32 /dev/urandom > "$work/key"
chmod 600 "$work/key"

field() { # JSON_FILE PYTHON_EXPRESSION_ON_d: prints "?" (and says why on stderr) where the document lacks it
  python3 -c '
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    print(eval(sys.argv[2]))
except Exception as e:
    print("?")
    print(f"seed-netns: {sys.argv[1]}: {e!r}", file=sys.stderr)' "$1" "$2"
}
start() { # NAME NAMESPACE serve-args...: starts a daemon in NAMESPACE on $work/NAME.sock, sets started
  local name=$1 ns=$2
  shift 2
  rm -f "$work/$name.sock"
  ip netns exec "$ns" "$bin" serve --checkpoint "$model" --socket "$work/$name.sock" --numa none \
    --threads "$threads" "$@" > "$out/$name.log" 2>&1 &
  started=$!
  pids+=("$started")
}
wait_ready() { # NAME PID
  local i
  for i in $(seq 1200); do
    "$bin" status --ready --socket "$work/$1.sock" > /dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || { echo "seed-netns: daemon $1 exited:" >&2; tail -5 "$out/$1.log" >&2; return 1; }
    sleep 0.1
  done
  echo "seed-netns: daemon $1 not ready in 120 s" >&2
  return 1
}
stop() { # NAME PID
  "$bin" stop --socket "$work/$1.sock" > /dev/null 2>&1 || kill "$2" 2>/dev/null || true
  wait "$2" 2>/dev/null || true
}
transport() { # LABEL [memfd]: the transport alone from A's namespace to B's; prints GiB/s
  local label=$1 into=${2:-}
  ip netns exec "$ns_b" python3 "$rate_py" recv $ip_b:7071 "$threads" $into > "$work/recv.txt" &
  local r=$!
  for _ in $(seq 100); do grep -q listening "$work/recv.txt" 2>/dev/null && break; sleep 0.05; done
  ip netns exec "$ns_a" python3 "$rate_py" send $ip_b:7071 "$threads" "$shard" "$table_bytes"
  wait $r
  tail -1 "$work/recv.txt" | python3 -c 'import json,sys; print(json.load(sys.stdin)["gib_s"])'
}
iperf() { # the transport alone once more, by iperf3 (-Z: sendfile), where it is installed; prints GiB/s
  ip netns exec "$ns_b" iperf3 -s -1 -B $ip_b -p 7072 > /dev/null 2>&1 &
  local r=$! j
  sleep 0.3
  j=$(ip netns exec "$ns_a" iperf3 -c $ip_b -p 7072 -P "$threads" -Z -n "$table_bytes" -J 2>/dev/null || true)
  wait $r 2>/dev/null || true
  python3 -c 'import json,sys; print(round(json.loads(sys.argv[1])["end"]["sum_received"]["bits_per_second"] / 8 / 2**30, 4))' "$j" 2>/dev/null || echo "?"
}
shape() { # RATE|none: A's egress (the tables' direction)
  ip netns exec "$ns_a" tc qdisc del dev "$veth_a" root 2>/dev/null || true
  [ "$1" = none ] || ip netns exec "$ns_a" tc qdisc add dev "$veth_a" root tbf rate "$1" burst 1mb latency 50ms
}
gbit() { # tc rate -> GiB/s of payload-and-headers at that line rate
  python3 -c 'import re,sys; m=re.fullmatch(r"([0-9.]+)(k|m|g)bit", sys.argv[1]); print(float(m[1]) * {"k": 1e3, "m": 1e6, "g": 1e9}[m[2]] / 8 / 2**30)' "$1"
}

check_seed() { # LABEL PID_A PID_B: the checks of one seed (above)
  local label=$1 pa=$2 pb=$3 s=$out/b-seed-$1.json v=$out/b-verify-$1.json
  "$bin" status --socket "$work/b.sock" --json > "$s"
  local got
  got=$(field "$s" '"%s|%s|%s|%s|%s|%s|%s" % (d["state"], d["origin"]["how"], d["origin"]["checkpoint_bytes_read"], d["origin"]["seeded"]["bytes"] == d["bytes"], ",".join("%s=%d" % (x["peer"], x["bytes"]) for x in d["origin"]["seeded"]["sources"]), d["origin"]["seeded"]["peers_refused"], d["pid"])')
  local want_src
  want_src="$ip_a:$port=$(field "$s" 'd["bytes"]')"
  IFS='|' read -r st how disk all src refused spid <<< "$got"
  if [ "$st $how $disk $all $src $refused" = "ready seed 0 True $want_src 0" ]; then
    ok "$label: B ready, how=seed, checkpoint_bytes_read 0, every byte from $ip_a:$port"
  else
    bad "$label: B's origin: state $st, how $how, checkpoint_bytes_read $disk, all seeded $all, sources $src, refused $refused"
  fi
  [ "$spid" = "$pb" ] && ok "$label: STATUS's pid is B's ($pb)" || bad "$label: STATUS's pid $spid, B was started as $pb"
  grep -q "seed: peer $ip_b:$port is this daemon's own --seed-listen address; skipping it" "$out/b.log" \
    && ok "$label: --seed-from $peers:$port stood for both its addresses; B skipped its own ($ip_b:$port)" \
    || bad "$label: B's log does not say it skipped its own address $ip_b:$port of $peers"
  cp "$out/b.log" "$out/b-seed-$label.log"
  local dev=(); [ "$(field "$s" 'd["backend"]')" = cuda-vmm ] && dev=(--gpu --device 0 --cpu-view)
  if "$bin" import --socket "$work/b.sock" "${dev[@]}" --verify-content "$record" --json > "$v" 2> "$out/b-verify-$label.err"; then
    local c
    c=$(field "$v" '"%d %d %d" % (d["content_check"]["verified"], d["content_check"]["not_checked"], len(d["tables"]))')
    read -r cv cn ct <<< "$c"
    [ "$cv" = "$ct" ] && [ "$cn" = 0 ] && ok "$label: a client verified all $ct tables' sha256-tree-v1 against the record" \
      || bad "$label: a client's content check: verified $cv, not checked $cn, of $ct tables"
  else
    bad "$label: import --verify-content: $(tail -2 "$out/b-verify-$label.err")"
  fi
  local na nb nr
  na=$(readlink "/proc/$pa/ns/net") nb=$(readlink "/proc/$pb/ns/net") nr=$(readlink /proc/self/ns/net)
  if [ -n "$na" ] && [ -n "$nb" ] && [ "$na" != "$nb" ] && [ "$na" != "$nr" ] && [ "$nb" != "$nr" ]; then
    ok "$label: A in $na, B in $nb, this shell in $nr"
  else
    bad "$label: network namespaces not separate: A '$na', B '$nb', this shell '$nr'"
  fi
  # A's counter of bytes sent (read inside A's namespace; A's loopback), since the seed before on this A
  local sent
  sent=$(ip netns exec "$ns_a" python3 -c 'import sys,urllib.request; t=urllib.request.urlopen(sys.argv[1], timeout=5).read().decode(); print(int(sum(float(l.split()[-1]) for l in t.splitlines() if l.startswith("engram_host_seed_sent_bytes_total"))))' "http://127.0.0.1:$metrics/metrics" 2>&1 || true)
  local seeded
  seeded=$(field "$s" 'd["origin"]["seeded"]["bytes"]')
  if [ "$sent" -eq "$seeded" ] 2>/dev/null || [ "$((sent - a_sent))" -eq "$seeded" ] 2>/dev/null; then
    ok "$label: A's engram_host_seed_sent_bytes_total grew by B's seeded bytes ($seeded)"
  else
    bad "$label: A's engram_host_seed_sent_bytes_total '$sent' (was $a_sent), B seeded $seeded"
  fi
  a_sent=$sent
  if [ $ci = 1 ]; then
    "$bin" verify --checkpoint "$model" --socket "$work/b.sock" > "$out/verify.txt" 2>&1 \
      && ok "$label: engram-host verify: B's tables equal the checkpoint's files byte for byte" \
      || bad "$label: engram-host verify: $(tail -2 "$out/verify.txt")"
  fi
}

a_status() { "$bin" status --socket "$work/a.sock" --json > "$out/a-$1.json"; }

seed_once() { # LABEL RATE|none: B seeds from A (running) with A's link shaped to RATE; checks; records; stops B
  local label=$1 rate=$2
  shape "$rate"
  local t0
  t0=$(date +%s%N)
  start b "$ns_b" --seed-listen $ip_b:$port --seed-from $peers:$port --seed-key "$work/key" "${b_flags[@]}"
  local pb=$started
  wait_ready b "$pb" || { bad "$label: B not ready"; return 0; }
  local wall=$(( ($(date +%s%N) - t0) / 1000000 ))
  check_seed "$label" "$pa" "$pb"
  local s=$out/b-seed-$label.json
  # the rate from bytes and seconds (STATUS's gib_s is rounded to 2 decimals); the load average beside it
  row "seed	$label	$rate	$(field "$s" '"%.4f\t%.3f\t%.3f" % (d["origin"]["seeded"]["bytes"] / d["origin"]["seeded"]["seconds"] / 2**30, d["ready_s"], d["process_ready_s"])')	$wall	$(cut -d' ' -f1 /proc/loadavg)"
  stop b "$pb"
}

load_once() { # LABEL warm|cold: B loads the model itself
  local label=$1 how=$2
  shape none
  if [ "$how" = cold ]; then sync; echo 3 > /proc/sys/vm/drop_caches; else cat "$model"/*.safetensors > /dev/null; fi
  start b "$ns_b"
  local pb=$started
  wait_ready b "$pb" || { bad "$label: B's own load not ready"; return 0; }
  "$bin" status --socket "$work/b.sock" --json > "$out/b-$label.json"
  local s=$out/b-$label.json
  [ "$(field "$s" 'd["origin"]["how"], d["origin"]["checkpoint_bytes_read"] == d["bytes"]')" = "('load', True)" ] \
    && ok "$label: B read every byte from the disk" || bad "$label: B's origin $(field "$s" 'd["origin"]')"
  row "load	$label	$how	$(field "$s" '"%.4f\t%.3f\t%.3f" % (d["load"]["read_gib_s"], d["ready_s"], d["process_ready_s"])')"
  stop b "$pb"
}

t_all=$SECONDS
echo "seed-netns: namespaces $ns_a ($ip_a) and $ns_b ($ip_b), veth $veth_a-$veth_b; model $model; $threads threads; out $out" \
  | tee "$out/summary.txt"
[ $ci = 1 ] || { echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"; \
  echo "$(ip netns exec "$ns_a" ip -o link show "$veth_a" | sed 's/\\.*//')"; } | tee -a "$out/summary.txt"
for i in $(seq "$runs"); do
  shape none
  cat "$model"/*.safetensors > /dev/null
  a_sent=0
  start a "$ns_a" --seed-listen $ip_a:$port --seed-key "$work/key" --metrics-port $metrics
  pa=$started
  wait_ready a "$pa" || { bad "run $i: A not ready"; break; }
  a_status "run$i"
  table_bytes=$(field "$out/a-run$i.json" 'd["bytes"]')
  row "fill	run$i	a_page_cache	$(field "$out/a-run$i.json" '"%.4f\t%.3f" % (d["load"]["read_gib_s"], d["ready_s"])')"
  if [ $i = 1 ]; then
    # the path: A's namespace holds only lo and its end of the veth, B reaches A's address through its own end, and
    # this machine's namespace holds neither end (its route to A's address, if any, is its own default route: a
    # connection from here can even be accepted, by whatever that route leads to, as on the Firecracker VM)
    links_a=$(ip -n "$ns_a" -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | sort | paste -sd' ')
    via_b=$(ip -n "$ns_b" route get $ip_a | head -1)
    if [ "$links_a" = "$veth_a lo" ] && [[ "$via_b" == *"dev $veth_b "* ]] && ! ip link show "$veth_a" > /dev/null 2>&1 \
      && ! ip link show "$veth_b" > /dev/null 2>&1; then
      ok "A's namespace has only lo and $veth_a; B's route to A: '$via_b'; neither end is in this machine's namespace"
    else
      bad "the path: A's links '$links_a', B's route to A '$via_b', or a veth end in this machine's namespace"
    fi
  fi
  if [ $ci = 1 ]; then
    seed_once "ci" none
    # a requester written from docs/seeding.md's wire format alone (scripts/bench/seed-sink.py), from B's namespace:
    # A must answer it as it answers the daemon, and a requester holding another key must see A's proof fail
    if ip netns exec "$ns_b" python3 "$here/scripts/bench/seed-sink.py" $ip_a:$port "$work/key" 2 1 > "$out/sink.json" 2>&1 \
        && [ "$(field "$out/sink.json" 'd["bytes"] > 0 and d["ranges"] > 0')" = True ]; then
      ok "ci: seed-sink.py (the wire format as docs/seeding.md gives it) took $(field "$out/sink.json" 'd["ranges"]') ranges from A"
    else
      bad "ci: seed-sink.py against A: $(tail -1 "$out/sink.json")"
    fi
    head -c 32 /dev/urandom > "$work/other.key"
    if ! ip netns exec "$ns_b" python3 "$here/scripts/bench/seed-sink.py" $ip_a:$port "$work/other.key" 1 1 > "$out/sink-other.txt" 2>&1 \
        && grep -q "proof is wrong" "$out/sink-other.txt"; then
      ok "ci: a requester with another key finds A's proof wrong"
    else
      bad "ci: seed-sink.py with another key: $(tail -1 "$out/sink-other.txt")"
    fi
  else
    for r in none $rates; do
      label=run$i-$r
      if [ "$r" = none ]; then
        row "transport	$label	none	$(transport "$label")"
        row "transport_memfd	$label	none	$(transport "$label" memfd)"
        if command -v iperf3 > /dev/null; then row "transport_iperf3	$label	none	$(iperf)"; fi
      fi
      seed_once "$label" "$r"
      [ "$r" = none ] || { shape "$r"; row "transport	$label	$r	$(transport "$label")"; }
    done
  fi
  shape none
  stop a "$pa"
  if [ $ci = 0 ]; then
    for how in $loads; do load_once "run$i-$how" "$how"; done
  fi
done

if [ $ci = 0 ]; then
  python3 - "$out/runs.tsv" "$rates" <<'PY' | tee -a "$out/summary.txt"
import collections, statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
rates = sys.argv[2].split()
def med(v): return statistics.median(v) if v else float("nan")
def gibs(rate):
    import re
    m = re.fullmatch(r"([0-9.]+)(k|m|g)bit", rate)
    return float(m[1]) * {"k": 1e3, "m": 1e6, "g": 1e9}[m[2]] / 8 / 2**30
fill_a = [float(r[3]) for r in rows if r[0] == "fill"]
tr = collections.defaultdict(list); trm = []; tri = []; seed = collections.defaultdict(list); ready = collections.defaultdict(list)
pready = collections.defaultdict(list); load = collections.defaultdict(list)
for r in rows:
    if r[0] == "transport": tr[r[2]].append(float(r[3]))
    if r[0] == "transport_memfd": trm.append(float(r[3]))
    if r[0] == "transport_iperf3" and r[3] != "?": tri.append(float(r[3]))
    if r[0] == "seed": seed[r[2]].append(float(r[3])); ready[r[2]].append(float(r[4])); pready[r[2]].append(float(r[5]))
    if r[0] == "load": load[r[2]].append((float(r[3]), float(r[4]), float(r[5])))
def fmt(v): return ", ".join(f"{x:.3f}" for x in v)
fill_b = [x[0] for x in load["warm"]]
fill = fill_b or fill_a  # the fill path from memory: B's own load from the page cache (A's beside it)
n = len(fill_a)
print(f"== medians of {n} runs (each value in brackets)")
print(f"fill path from memory, B's own load from the page cache (read_gib_s): {med(fill_b):.3f} GiB/s [{fmt(fill_b)}];"
      f" A's: {med(fill_a):.3f} GiB/s [{fmt(fill_a)}]")
print(f"transport alone between the namespaces (unshaped, into a buffer): {med(tr['none']):.3f} GiB/s [{fmt(tr['none'])}]")
if tri:
    print(f"transport alone by iperf3 -Z (unshaped): {med(tri):.3f} GiB/s [{fmt(tri)}]")
print(f"transport and page faults (unshaped, into fresh memfd pages): {med(trm):.3f} GiB/s [{fmt(trm)}]")
s = med(seed["none"])
slowest = min(med(fill), med(tr["none"]))
print(f"seed, unshaped (origin.seeded.gib_s): {s:.3f} GiB/s [{fmt(seed['none'])}]; ready_s {med(ready['none']):.3f} [{fmt(ready['none'])}],"
      f" from the process's start {med(pready['none']):.3f} s")
print(f"  seed / slowest stage alone ({'fill' if med(fill) <= med(tr['none']) else 'transport'}, {slowest:.3f} GiB/s): {s / slowest:.2f}"
      f" (the issue's target: 0.9); seed / B's fill {s / med(fill):.2f}, seed / A's fill {s / med(fill_a):.2f},"
      f" seed / transport {s / med(tr['none']):.2f}, seed / transport-and-faults {s / med(trm):.2f}")
for rate in rates:
    line = gibs(rate)
    sv = med(seed[rate]); tv = med(tr[rate])
    print(f"shaped to {rate} ({line:.4f} GiB/s on the wire): seed {sv:.4f} GiB/s [{fmt(seed[rate])}], ready_s {med(ready[rate]):.3f};"
          f" transport alone through it {tv:.4f} [{fmt(tr[rate])}]; seed / shaped rate {sv / line:.2f}, seed / transport {sv / tv:.2f}")
la = [float(r[7]) for r in rows if r[0] == "seed" and len(r) > 7]
if la:
    print(f"1-minute load average after each seed: {min(la):.2f} to {max(la):.2f} (median {med(la):.2f})")
for how in ("warm", "cold"):
    v = load[how]
    if v:
        print(f"B's own load, {'from the page cache' if how == 'warm' else 'cold disk (drop_caches)'}: ready_s {med([x[1] for x in v]):.3f}"
              f" [{fmt([x[1] for x in v])}], from the process's start {med([x[2] for x in v]):.3f} s, read_gib_s {med([x[0] for x in v]):.3f}")
w = med([x[1] for x in load["warm"]]); c = med([x[1] for x in load["cold"]])
if load["warm"] and load["cold"]:
    print(f"time to ready, seed (unshaped) against the load: {med(ready['none']):.3f} s against {w:.3f} s from the page cache"
          f" ({med(ready['none']) / w:.2f}x) and {c:.3f} s from a cold disk ({med(ready['none']) / c:.2f}x)")
PY
fi
say "checks: $(grep -c '^PASS' "$out/checks.txt" || true) passed, $fails failed; $((SECONDS - t_all)) s"
[ "$fails" = 0 ]

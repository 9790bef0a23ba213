#!/usr/bin/env bash
# The two-node checks, run INSIDE the guest of scripts/numa/numa-vm.sh (ENGRAM_NUMA_VM=1) by scripts/numa/numa-two-node.sh,
# which prepares target/numa-vm/ first (checkpoint, digests sidecar, CDS archives, the numa tests' class path).
# Real daemon and client processes, the guest's real sysfs and syscalls; docs/numa.md, "Two nodes, emulated".
#
#   scripts/numa/numa-guest-checks.sh [--quick|--ci]
#
# Each check prints PASS/FAIL/SKIP and a line of what it saw; results.txt and every log go to $ENGRAM_NUMA_VM_OUT.
# --quick: the placement policies, the refusals, the checks without CAP_SYS_NICE and under a seccomp filter that
# denies mbind (EPERM); without it also the numa module's tests (JUnit console launcher), preferred:1 with room on
# node 1 and --numa none under the filter;
# --ci: the placement policies, without CAP_SYS_NICE, --numa 1 under the filter, then the numa module's tests (bin/test's
# subset, within its budget on 2 TCG cores).
# Exit status: 0 when no check failed.
set -uo pipefail
[ "${ENGRAM_NUMA_VM:-}" = 1 ] || { echo "numa-guest-checks: runs inside scripts/numa/numa-vm.sh's guest (ENGRAM_NUMA_VM=1)" >&2; exit 2; }
QUICK=0
CI=0
[ "${1:-}" = --quick ] && QUICK=1
[ "${1:-}" = --ci ] && { QUICK=1; CI=1; }
OUT=$ENGRAM_NUMA_VM_OUT
DATA=target/numa-vm
CK=$DATA/ckpt
SIDECAR=$CK/engram-digests.json
BIG=$DATA/ckpt-big   # 201 MiB: more than node 1 has free once the hog below is there
RES=$OUT/results.txt
: > "$RES"
T0=$(date +%s)
# rec PASS|FAIL|SKIP NAME WHAT: one line of results.txt (checks run in parallel append to it; the totals count it)
rec() { echo "$1 $2: $3" | tee -a "$RES"; }
el() { echo "$(($(date +%s) - T0)) s"; }
# The guest's JVMs: C1 only (TCG makes C2's compile time dearer than what it saves), CDS archives dumped on the host
CLIENT_OPTS="-XX:TieredStopAtLevel=1 -Xshare:auto"
DAEMON_OPTS="-XX:TieredStopAtLevel=1 -Xshare:auto"
[ -f "$DATA/client.jsa" ] && CLIENT_OPTS+=" -XX:SharedArchiveFile=$DATA/client.jsa"
[ -f "$DATA/daemon.jsa" ] && DAEMON_OPTS+=" -XX:SharedArchiveFile=$DATA/daemon.jsa"
eh() { ENGRAM_HOST_JVM_OPTS="$CLIENT_OPTS" bin/engram-host "$@"; }

node_free_mib() { awk '/MemFree/ {print int($4 / 1024)}' "/sys/devices/system/node/node$1/meminfo"; }
echo "== guest: $(uname -r), nodes $(cat /sys/devices/system/node/online), CPUs node0 $(cat /sys/devices/system/node/node0/cpulist) node1 $(cat /sys/devices/system/node/node1/cpulist), free node0 $(node_free_mib 0) MiB node1 $(node_free_mib 1) MiB ($(el))" | tee -a "$RES"

# serve NAME [serve options...]: starts a daemon on its own socket; returns when it is ready (0) or has exited (1)
DPID=
serve() {
  local name=$1; shift
  SOCK=/run/numa-$name.sock
  # shellcheck disable=SC2086
  ENGRAM_HOST_JVM_OPTS="$DAEMON_OPTS" ${PIN:-} bin/engram-host-test serve --checkpoint "$CK" --socket "$SOCK" --threads 2 \
    --hello-timeout-ms 120000 --request-timeout-ms 120000 "$@" > "$OUT/$name.daemon.log" 2>&1 &
  DPID=$!
  for _ in $(seq 1 1200); do
    grep -q ' ready: ' "$OUT/$name.daemon.log" && return 0
    kill -0 "$DPID" 2>/dev/null || { wait "$DPID"; DRC=$?; DPID=; return 1; }
    sleep 0.25
  done
  return 1
}
stop_daemon() { [ -z "$DPID" ] || { kill -TERM "$DPID"; wait "$DPID"; }; DPID=; }
trap 'stop_daemon' EXIT

# histogram NAME EXPECT: the placement of status --json against EXPECT (node0, node1, half, spill)
histogram() {
  python3 - "$OUT/$1.status.json" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); s = s.get("status", s); want = sys.argv[2]
p = s.get("placement", {}); n0 = p.get("node0_pages", 0); n1 = p.get("node1_pages", 0); tot = n0 + n1
line = f"node0={n0} node1={n1} pages ({100 * n0 / max(tot, 1):.1f}% / {100 * n1 / max(tot, 1):.1f}%)"
if "unverified" in p: line += f", unverified: {p['unverified']}"
ok = tot > 0 and "unverified" not in p and {
    "node0": n1 == 0, "node1": n0 == 0, "half": abs(n0 - n1) <= max(2, tot // 50), "spill": n0 > 0 and n1 > 0,
}[want]
# a bound load runs its threads on the node's CPUs, and STATUS says which (load_threads); others run anywhere
lt = s.get("load_threads", {})
line += f"; load threads: {lt}"
if want in ("node0", "node1"):
    ok = ok and lt.get("node") == int(want[-1]) and lt.get("cpus") not in (None, "any")
print(line); sys.exit(0 if ok else 1)
PY
}

# policy NAME EXPECT [serve options...]: a daemon; a client process that imports the tables, checks every table's
# SHA-256 (sha256-tree-v1 against the sidecar) and asks STATUS; the placement histogram of STATUS against EXPECT.
# The client is scripts/numa/numa-client.py (the Python package), or with CLIENT=java the Java CLI's import (and STATUS
# through the Python package).
policy() {
  local name=$1 expect=$2; shift 2
  if ! serve "$name" "$@"; then
    rec FAIL "$name" "the daemon did not become ready: $(tail -n 2 "$OUT/$name.daemon.log" | tr '\n' ' ')"; stop_daemon; return
  fi
  local imp st=0 sha
  if [ "${CLIENT:-python}" = java ]; then
    eh import --socket "$SOCK" --expect-checkpoint "$CK" --verify-content "$SIDECAR" --json > "$OUT/$name.import.json" \
      2> "$OUT/$name.client.err"; imp=$?
    # STATUS through the Python package: the Java import above is the Java client's check; a second JVM for STATUS
    # would cost tens of seconds under TCG
    PYTHONPATH=python python3 -c 'import json, sys; from engram_host import client
json.dump(client.status(sys.argv[1], timeout=120.0), open(sys.argv[2], "w"), indent=1)' "$SOCK" "$OUT/$name.status.json" \
      2>> "$OUT/$name.client.err"; st=$?
    sha=$(python3 -c 'import json,sys; print("Java import: %d tables sha256-verified" % json.load(open(sys.argv[1]))["content_check"]["verified"])' "$OUT/$name.import.json" 2>/dev/null)
  else
    python3 scripts/numa/numa-client.py "$SOCK" "$CK" "$SIDECAR" "$OUT/$name.status.json" 2> "$OUT/$name.client.err"; imp=$?
    sha=$(python3 -c 'import json,sys; print("Python import: %d tables sha256-verified" % json.load(open(sys.argv[1]))["content_check"]["verified"])' "$OUT/$name.status.json" 2>/dev/null)
  fi
  stop_daemon
  local h hrc
  h=$(histogram "$name" "$expect"); hrc=$?
  if [ $imp = 0 ] && [ $st = 0 ] && [ $hrc = 0 ]; then
    rec PASS "$name" "$h; $sha ($(el))"
  else
    rec FAIL "$name" "$h (want $expect); client exit $imp/$st ($sha; $(tail -n 1 "$OUT/$name.client.err"))"
  fi
}

# refused NAME PATTERN [serve options...]: serve must exit non-zero before taking its socket, saying PATTERN
refused() {
  local name=$1 pattern=$2; shift 2
  if serve "$name" "$@"; then
    stop_daemon; rec FAIL "$name" "the daemon started; expected a refusal matching: $pattern"; return
  fi
  local msg; msg=$(grep -v '^\s*$' "$OUT/$name.daemon.log" | tail -1)
  if [ -e "$SOCK" ]; then
    rec FAIL "$name" "refused, but the socket $SOCK was created: $msg"
  elif grep -qE "$pattern" "$OUT/$name.daemon.log"; then
    rec PASS "$name" "refused before the socket: $msg"
  else
    rec FAIL "$name" "exit ${DRC:-?}, message does not match '$pattern': $msg"
  fi
}

# the numa module's tests (JUnit console launcher) on the guest's topology: TwoNodeTest runs only here
numa_tests() {
  echo "== the numa module's tests on the guest's topology ($(el))"
  CP=$(cat "$DATA/numa-test.cp")
  # shellcheck disable=SC2086
  java $(cat native/target/classes/io/engramhost/os/jvm.options) -XX:TieredStopAtLevel=1 \
    -cp "numa/target/test-classes:numa/target/classes:$CP:$DATA/junit-console.jar" \
    org.junit.platform.console.ConsoleLauncher execute --scan-class-path numa/target/test-classes --exclude-tag gpu \
    --reports-dir "$OUT/numa-tests" --details=summary --disable-banner --disable-ansi-colors > "$OUT/numa-tests.log" 2>&1
  rc=$?
  summary=$(grep -E "tests (successful|failed|skipped)" "$OUT/numa-tests.log" | tr -s ' ' | tr '\n' ',' | sed 's/,$//')
  if [ $rc = 0 ]; then rec PASS numa-tests "$summary ($(el))"; else rec FAIL numa-tests "$summary; see numa-tests.log"; fi
}
[ $QUICK = 1 ] || numa_tests

# Without CAP_SYS_NICE: setpriv drops it from the bounding and inheritable sets. What the kernel does is recorded as
# measured (docs/numa.md): mbind(MPOL_BIND) with no flags needs no capability.
nosysnice_checks() {
  SETPRIV=(setpriv --inh-caps=-sys_nice --bounding-set=-sys_nice)
  if "${SETPRIV[@]}" grep -q '^CapEff:' /proc/self/status; then
    eff=$("${SETPRIV[@]}" awk '/^CapEff/ {print $2}' /proc/self/status)
    if (( (16#$eff >> 23) & 1 )); then
      rec FAIL nosysnice "setpriv left CAP_SYS_NICE in CapEff=$eff"
    else
      nosysnice() {
        local p=$1 n=nosysnice-$1 h hrc msg
        ENGRAM_HOST_JVM_OPTS="$DAEMON_OPTS" "${SETPRIV[@]}" bin/engram-host serve --checkpoint "$CK" --socket /run/$n.sock \
          --threads 2 --numa "$p" > "$OUT/$n.daemon.log" 2>&1 &
        DPID=$!
        for _ in $(seq 1 1200); do grep -q ' ready: ' "$OUT/$n.daemon.log" && break; kill -0 $DPID 2>/dev/null || break; sleep 0.25; done
        if grep -q ' ready: ' "$OUT/$n.daemon.log"; then
          python3 scripts/numa/numa-client.py /run/$n.sock "$CK" "$SIDECAR" "$OUT/$n.status.json" 2> "$OUT/$n.client.err"
          stop_daemon
          h=$(histogram "$n" "$([ $p = 1 ] && echo node1 || echo spill)"); hrc=$?
          [ $p = none ] && hrc=0
          if [ $hrc = 0 ]; then rec PASS "$n" "CapEff=$eff: --numa $p serves; $h"; else rec FAIL "$n" "--numa $p: $h"; fi
        else
          wait $DPID; DPID=
          msg=$(grep -v '^\s*$' "$OUT/$n.daemon.log" | tail -1)
          if [ $p = 1 ] && echo "$msg" | grep -q "EPERM.*--numa none avoids it"; then rec PASS "$n" "refused: $msg"
          else rec FAIL "$n" "--numa $p did not start: $msg"; fi
        fi
      }
      nosysnice 1 &
      [ $QUICK = 1 ] || nosysnice none &
      wait
    fi
  else
    rec SKIP nosysnice "setpriv cannot drop CAP_SYS_NICE here"
  fi

}

# Under a seccomp filter that fails mbind, set_mempolicy and get_mempolicy with EPERM (scripts/numa/seccomp-deny.py), as a
# container runtime's default profile does without CAP_SYS_NICE: --numa 1 must fail with the documented message,
# --numa none must serve.
seccomp_check() {
  local p=$1 n=seccomp-$1 h msg
  ENGRAM_HOST_JVM_OPTS="$DAEMON_OPTS" python3 scripts/numa/seccomp-deny.py -- bin/engram-host serve --checkpoint "$CK" \
    --socket /run/$n.sock --threads 2 --numa "$p" > "$OUT/$n.daemon.log" 2>&1 &
  DPID=$!
  for _ in $(seq 1 1200); do grep -q ' ready: ' "$OUT/$n.daemon.log" && break; kill -0 $DPID 2>/dev/null || break; sleep 0.25; done
  if grep -q ' ready: ' "$OUT/$n.daemon.log"; then
    python3 scripts/numa/numa-client.py /run/$n.sock "$CK" "$SIDECAR" "$OUT/$n.status.json" 2> "$OUT/$n.client.err"
    local crc=$?
    stop_daemon
    h=$(histogram "$n" spill)
    if [ $p = none ] && [ $crc = 0 ]; then rec PASS "$n" "mbind denied by seccomp: --numa none serves; $h"
    else rec FAIL "$n" "--numa $p served under the filter (client rc $crc): $h"; fi
  else
    wait $DPID; DPID=
    msg=$(grep 'engram-host serve:' "$OUT/$n.daemon.log" | tail -1)
    if [ $p = 1 ] && echo "$msg" | grep -q "mbind(.*) failed: EPERM .*seccomp profile forbids mbind.*--numa none avoids it"; then
      rec PASS "$n" "refused under the filter: $msg"
    else rec FAIL "$n" "--numa $p did not start: $(grep -v '^\s*$' "$OUT/$n.daemon.log" | tail -1)"; fi
  fi
}

echo "== a daemon per policy, a client importing and checking SHA-256, status's placement histogram ($(el))"
# Two at a time: a JVM under TCG spends tens of seconds starting, on one vCPU; the guest has two. With --ci a wave
# starts four JVMs and then three (bind1's are its daemon and the Java import; the refused start under seccomp beside
# the first two, the checks without CAP_SYS_NICE beside the second two)
policy bind0 node0 --numa 0 &
CLIENT=java policy bind1 node1 --numa 1 &
seccomp_check 1 &
wait
policy interleave half --numa interleave &
ENGRAM_HOST_TEST_GPU_NUMA_NODES=1 policy auto-gpu-node1 node1 --numa auto &
nosysnice_checks &
wait
[ $CI = 1 ] || seccomp_check none
if grep -q "TEST ONLY (ENGRAM_HOST_TEST_GPU_NUMA_NODES=1)" "$OUT/auto-gpu-node1.daemon.log" \
    && grep -q "numa bind:1" "$OUT/auto-gpu-node1.daemon.log"; then
  rec PASS auto-resolves "auto with a GPU on node 1 resolved to bind:1, TEST ONLY said once on stderr"
else
  rec FAIL auto-resolves "$(grep -m1 'checkpoint valid' "$OUT/auto-gpu-node1.daemon.log")"
fi
# --ci: the numa module's tests after the daemons, alone (their budget and placement tests read the nodes' free memory)
[ $CI = 0 ] || numa_tests
# preferred:1 with room on node 1, the daemon on node 0's CPUs (so that first touch alone would put pages on node 0)
[ $QUICK = 1 ] || PIN="taskset -c $(cat /sys/devices/system/node/node0/cpulist)" policy preferred1 node1 --numa preferred:1

if [ $CI = 0 ]; then
echo "== node 1 nearly full: preferred:1 spills, bind 1 is refused ($(el))"
# A hog: a tmpfs bound to node 1, filled until node 1's low watermark (/proc/zoneinfo; tens of MiB in this guest)
# plus 10 MiB (and the load threads' buffers, below) is free (caches dropped first): what the budget counts on node 1 is then less than the 201 MiB table,
# while the machine has room. Below the min watermark the kernel would start killing.
sync; echo 3 > /proc/sys/vm/drop_caches
table_mib=$(du -m --apparent-size -c "$BIG"/*.safetensors | tail -n 1 | cut -f1)
low_mib=$(awk '/^Node 1,/ {n1 = 1; next} /^Node/ {n1 = 0} n1 && $1 == "low" {s += $2} END {print int(s * 4 / 1024) + 1}' /proc/zoneinfo)
# The checkpoint is out of the page cache here, so the loader reads it with O_DIRECT through a 16 MiB bounce buffer
# per thread, allocated on the node its threads run on (node 1 for preferred:1): leave room for those too.
hog_mib=$(( $(node_free_mib 1) - low_mib - 10 - 2 * 17 ))
mkdir -p /run/hog && mount -t tmpfs -o "size=${hog_mib}m,mpol=bind:1" tmpfs /run/hog
dd if=/dev/zero of=/run/hog/fill bs=1M count="$hog_mib" status=none 2>/dev/null
echo "   hog: ${hog_mib} MiB on node 1 (its low watermark ${low_mib} MiB); free now node0 $(node_free_mib 0) MiB, node1 $(node_free_mib 1) MiB, table ${table_mib} MiB" | tee -a "$RES"
# The daemons on node 0's CPUs, so that their own memory (heap, page cache of the checkpoint) comes from node 0.
PIN="taskset -c $(cat /sys/devices/system/node/node0/cpulist)"
CK=$BIG PIN=$PIN refused bind1-too-big "need .* on NUMA node 1 but only .* is usable \(MemFree .* - low watermark .*--numa interleave spreads the tables over them" \
  --numa 1
# A page goes to the preferred node only while it is above its low watermark: about 10 MiB of the 201 MiB fit there.
CK=$BIG SIDECAR=$BIG/engram-digests.json PIN=$PIN policy preferred1-spill spill --numa preferred:1
if grep -q "WARN.*preferred node 1 has only .* usable (.* - low watermark .*), the rest will come from other nodes" "$OUT/preferred1-spill.daemon.log"; then
  rec PASS preferred1-warning "$(grep -m1 -o 'WARN.*' "$OUT/preferred1-spill.daemon.log"); node 1 free after: $(node_free_mib 1) MiB"
else
  rec FAIL preferred1-warning "no spill-over warning in preferred1-spill.daemon.log"
fi
rm -f /run/hog/fill; umount /run/hog

echo "== memfd-hugetlb with per-node pools: node 0 has enough 2 MiB pages, node 1 has 4 ($(el))"
need=$(( ($(du -m --apparent-size -c "$CK"/*.safetensors | tail -n 1 | cut -f1) + 2) / 2 + 4 ))
echo "$need" > /sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages
echo 4 > /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages
got0=$(cat /sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages)
got1=$(cat /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages)
echo "   pools: node0 $got0, node1 $got1, system $(cat /proc/sys/vm/nr_hugepages) (wanted node0 $need)" | tee -a "$RES"
refused hugetlb-bind1-short "huge pages on NUMA node 1 but only 4 are free \(node 1 has 4 reserved\).*node1/hugepages" \
  --backend memfd-hugetlb --numa 1 &
policy hugetlb-bind0 node0 --backend memfd-hugetlb --numa 0 &
wait
echo 0 > /sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages
echo 0 > /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages
fi  # CI = 0

pass=$(grep -c '^PASS ' "$RES"); fail=$(grep -c '^FAIL ' "$RES"); skip=$(grep -c '^SKIP ' "$RES")
echo "numa-guest-checks: $pass passed, $fail failed, $skip skipped in $(el)" | tee -a "$RES"
echo "$pass $fail $skip" > "$OUT/totals"
[ $fail = 0 ]

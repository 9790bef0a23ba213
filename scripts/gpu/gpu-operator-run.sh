#!/usr/bin/env bash
# What an operator does on a GPU node with no Java, from the release tarball (issue 13), and a live takeover
# under a GPU client's lease for every backend (issue 12). Run on the GPU machine from the repository root:
#   TARBALL=dist/engram-host-*.tar.gz GIB=4 bash scripts/gpu/gpu-operator-run.sh OUT_DIR
# For each backend (memfd, memfd-hugetlb, cuda-vmm):
#   serve --metrics-port; status --ready; import --gpu --verify while /metrics is scraped; verify --checkpoint;
#   a Python engine (PyTorch) holds a lease with GPU tensors; serve --takeover; the old daemon exits 0; the
#   engine's on_daemon_gone has not fired and its tensors still checksum the same on the GPU; import --gpu --verify
#   against the successor; status shows origin.checkpoint_bytes_read = 0.
# Then the CLI's start time with and without the AppCDS archive (status, 15 runs each; medians).
# Every step's output goes to OUT_DIR; the last line says how many checks passed.
set -uo pipefail
OUT=${1:?usage: gpu-operator-run.sh OUT_DIR}
mkdir -p "$OUT"
TARBALL=$(ls ${TARBALL:-dist/engram-host-*-linux-x86_64.tar.gz} | head -1)
GIB=${GIB:-4}
W=$(mktemp -d /tmp/engram-op.XXXXXX)
PASS=0; FAIL=0
ok() { echo "PASS $*" | tee -a "$OUT/checks.txt"; PASS=$((PASS + 1)); }
bad() { echo "FAIL $*" | tee -a "$OUT/checks.txt"; FAIL=$((FAIL + 1)); }
check() { local what=$1; shift; if "$@" >>"$OUT/steps.log" 2>&1; then ok "$what"; else bad "$what"; fi; }
wait_ready() { # SOCKET SECONDS: status --ready until it exits 0
  local i; for i in $(seq $(( $2 * 5 ))); do "$EH" status --ready --socket "$1" && return 0; sleep 0.2; done; return 1; }
cleanup() { pkill -f "$W/engram-host" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT

unset JAVA_HOME
export PATH=$(echo "$PATH" | tr ':' '\n' | grep -v -i java | paste -sd:)
if command -v java >/dev/null; then bad "no java on PATH ($(command -v java))"; else ok "no java on PATH, no JAVA_HOME"; fi
tar -xzf "$TARBALL" -C "$W" && mv "$W"/engram-host-* "$W/engram-host" || { bad "unpack $TARBALL"; exit 1; }
EH="$W/engram-host/bin/engram-host"
"$EH" --version | tee "$OUT/version.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

ROWS=$(( GIB * 1024 * 1024 * 1024 / 2 / 264 ))
/usr/bin/time -f "generate %e s" "$EH" generate --out "$W/ckpt" --rows "$ROWS" --layers 1,14 > "$OUT/generate.log" 2>&1
cat "$OUT/generate.log" | tail -2
HUGE=$(( (GIB * 1024 + 2048) / 2 ))
echo "$HUGE" > /proc/sys/vm/nr_hugepages; echo "nr_hugepages $(cat /proc/sys/vm/nr_hugepages)" | tee -a "$OUT/steps.log"

export PYTHONPATH="$W/engram-host/python"
HOLDER='
import sys, time, json, engram_host, torch
sock = sys.argv[1]
t = engram_host.connect(sock, device=0)
gone = []
t.on_daemon_gone(gone.append)
views = {n: tb.to_torch() for n, tb in t.tables.items()}
def sums():  # a sum of every byte, on the GPU, 64 MiB at a time
    return {n: sum(int(c.to(torch.int32).sum().item()) for c in v.view(torch.uint8).reshape(-1).split(1 << 26))
            for n, v in views.items()}
before = sums()
print("holding", len(views), flush=True)
sys.stdin.readline()
after = sums()
print(json.dumps({"gone": gone, "same": before == after, "tables": len(views)}), flush=True)
t.close()
'

for B in ${BACKENDS:-memfd memfd-hugetlb cuda-vmm}; do
  S="$W/$B.sock"; L="$OUT/$B"
  mkdir -p "$L"
  "$EH" serve --checkpoint "$W/ckpt" --backend "$B" --socket "$S" --threads 16 --metrics-port 9464 > "$L/serve-a.log" 2>&1 &
  A=$!
  check "$B: status --ready within 300 s" wait_ready "$S" 300
  ( for i in $(seq 40); do echo "# scrape $i"; curl -s http://127.0.0.1:9464/metrics; sleep 0.05; done > "$L/metrics.txt" ) &
  SCR=$!
  check "$B: import --gpu --verify" "$EH" import --socket "$S" --gpu --device 0 --verify --json
  wait $SCR
  if [ "$(grep -c '^engram_host_leases' "$L/metrics.txt")" = 40 ] && grep -q 'engram_host_import_duration_seconds_bucket' "$L/metrics.txt"; then
    ok "$B: /metrics scraped 40 times during the import"; else bad "$B: /metrics scrape"; fi
  check "$B: verify --checkpoint" "$EH" verify --checkpoint "$W/ckpt" --socket "$S"
  coproc HOLD { python3 -c "$HOLDER" "$S" 2> "$L/holder.err"; }
  read -r -t 120 line <&"${HOLD[0]}"; echo "holder: $line" | tee -a "$OUT/steps.log"
  T0=$(date +%s%N)
  "$EH" serve --checkpoint "$W/ckpt" --backend "$B" --socket "$S" --threads 16 --metrics-port 9464 --takeover --verify-digests > "$L/serve-b.log" 2>&1 &
  BPID=$!
  for i in $(seq 600); do kill -0 $A 2>/dev/null || break; kill -0 $BPID 2>/dev/null || break; sleep 0.1; done
  if kill -0 $A 2>/dev/null; then RC=running; tail -5 "$L/serve-b.log"; else wait $A; RC=$?; fi
  T1=$(date +%s%N)
  [ "$RC" = 0 ] && ok "$B: the predecessor exited 0 after the takeover ($(( (T1 - T0) / 1000000 )) ms from starting the successor)" || bad "$B: predecessor exit $RC"
  check "$B: the successor is ready" wait_ready "$S" 60
  echo go >&"${HOLD[1]}"
  read -r -t 120 result <&"${HOLD[0]}"; echo "holder: $result" | tee -a "$OUT/steps.log"
  echo "$result" | python3 -c 'import json,sys; r=json.load(sys.stdin); sys.exit(0 if r["gone"]==[] and r["same"] else 1)' \
    && ok "$B: the engine's lease survived (on_daemon_gone silent, GPU sums unchanged)" || bad "$B: engine lease: $result"
  check "$B: import --gpu --verify from the successor" "$EH" import --socket "$S" --gpu --device 0 --verify --json
  "$EH" status --socket "$S" --json > "$L/status-b.json"
  python3 -c 'import json,sys; o=json.load(open(sys.argv[1]))["origin"]; print(o); sys.exit(0 if o["how"]=="takeover" and o["checkpoint_bytes_read"]==0 else 1)' "$L/status-b.json" \
    >> "$OUT/steps.log" 2>&1 && ok "$B: status origin: takeover, 0 checkpoint bytes read" || bad "$B: status origin"
  grep -h "took over\|handed over" "$L"/serve-*.log | tee -a "$OUT/steps.log"
  if [ "$B" = memfd ]; then
    for mode in 1 0; do
      for i in $(seq 15); do
        s=$(date +%s%N); ENGRAM_HOST_CDS=$mode "$EH" status --socket "$S" | head -1 > /dev/null; e=$(date +%s%N)
        echo $(( (e - s) / 1000000 ))
      done | sort -n | tee "$OUT/cli-start-cds$mode.txt" | sed -n 8p | xargs echo "status, AppCDS=$mode, median ms:" | tee -a "$OUT/steps.log"
    done
  fi
  "$EH" stop --socket "$S" >> "$OUT/steps.log" 2>&1
  kill $A 2>/dev/null; wait $A $BPID 2>/dev/null
done
echo 0 > /proc/sys/vm/nr_hugepages
echo "checks: $PASS passed, $FAIL failed" | tee -a "$OUT/checks.txt"

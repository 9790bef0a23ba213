#!/usr/bin/env bash
# Issue #28, section 2: two containers that share only the socket directory, under Debian's rootful podman, inside
# the QEMU guest of scripts/containers/podman-vm.sh (podman does not run on these machines themselves). Not in CI.
#
#   scripts/containers/podman-scenario.sh [STEP...]      # on the host: prepares, then boots the guest and runs STEPs
#
# STEPs (default: memfd memfd-hugetlb kube): memfd, memfd-hugetlb (daemon container + engine containers, below),
# kube (podman kube play of deploy/kubernetes/'s DaemonSet template as a Pod, and engine-example.yaml).
# Environment: PODMAN_SCENARIO_MODEL small (126 MiB of tables, default) or big (1.0 GiB); PODMAN_VM_* (podman-vm.sh).
#
# On the host (needs root and Debian's archive): debootstrap --variant=minbase bookworm twice (plain, and with
# python3), cached as tars in /var/cache/engram-containers; a model directory with a digest record
# (engram-host generate --model, inspect --write-digests) there too; the release tarball must exist (scripts/release/dist.sh).
# In the guest: podman import of both tars, podman build of the two images (no registry), then the STEPs. Every
# result line starts with "scenario:"; bench/container-runs.md records runs.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
C=/var/cache/engram-containers
MODEL_KIND=${PODMAN_SCENARIO_MODEL:-small}
MODEL=$C/model-$MODEL_KIND
say() { echo "scenario: $*"; }
die() { echo "scenario: FAIL: $*"; exit 1; }
STEPS=("$@"); [ ${#STEPS[@]} -gt 0 ] || STEPS=(memfd memfd-hugetlb kube)

if [ "${PODMAN_VM:-0}" != 1 ]; then
  # ---- on the host ----------------------------------------------------------------------------------------------
  [ "$(id -u)" = 0 ] || { echo "podman-scenario.sh: run as root (apt-get, debootstrap, the guest's rootful podman)" >&2; exit 2; }
  need=()
  for p in podman crun conmon catatonit uidmap debootstrap netavark containernetworking-plugins qemu-system-x86 busybox-static bpftool; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    echo "podman-scenario.sh: installing ${need[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${need[@]}" >/dev/null
  fi
  mkdir -p "$C" /var/lib/containers
  for v in base py; do
    [ -f "$C/bookworm-minbase-$v.tar" ] && continue
    inc=; [ $v = py ] && inc=--include=python3
    rm -rf "$C/root-$v"; mkdir -p "$C/debs"
    debootstrap --variant=minbase $inc --cache-dir="$C/debs" bookworm "$C/root-$v" http://deb.debian.org/debian > "$C/deb-$v.log" 2>&1
    tar -C "$C/root-$v" -cf "$C/bookworm-minbase-$v.tar.new" . && mv "$C/bookworm-minbase-$v.tar.new" "$C/bookworm-minbase-$v.tar"
    rm -rf "$C/root-$v"
  done
  if [ ! -f "$MODEL/engram-digests.json" ]; then
    rows=250000; [ "$MODEL_KIND" = big ] && rows=2100000
    rm -rf "$MODEL"
    "$ROOT/bin/engram-host" generate --model --out "$MODEL" --rows "$rows" >/dev/null
    "$ROOT/bin/engram-host" inspect --write-digests "$MODEL" | tail -1
  fi
  for b in memfd memfd-hugetlb; do   # the fingerprint serve will have (it names the backend): what engine1 expects
    [ -s "$MODEL.fingerprint-$b" ] || "$ROOT/bin/engram-host" inspect --backend $b "$MODEL" \
      | sed -n 's/.*fingerprint \([0-9a-f]\{64\}\).*/\1/p' > "$MODEL.fingerprint-$b"
  done
  ls "$ROOT"/dist/engram-host-*-linux-x86_64.tar.gz >/dev/null 2>&1 || { echo "no release tarball: scripts/release/dist.sh" >&2; exit 2; }
  exec "$ROOT/scripts/containers/podman-vm.sh" env PODMAN_SCENARIO_MODEL="$MODEL_KIND" "$ROOT/scripts/containers/podman-scenario.sh" "${STEPS[@]}"
fi

# ---- in the guest -------------------------------------------------------------------------------------------------
T0=$(date +%s)
el() { echo "$(( $(date +%s) - T0 )) s"; }
cat > /tmp/containers.conf <<'EOF'
[containers]
# the guest's root may set rlimits, but none are wanted beyond the image's defaults
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
[network]
network_config_dir = "/run/containers/networks"
EOF
export CONTAINERS_CONF=/tmp/containers.conf
echo "+memory +pids +cpu +hugetlb" > /sys/fs/cgroup/cgroup.subtree_control
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd   # the guest's devtmpfs has none; bash's <(...) needs it
# netavark's iptables rules (iptables-nft): each match and target is a module of its own, which the guest cannot
# autoload (the host has no /lib/modules of this kernel); xt_mark, xt_nat, xt_tcpudp and xt_multiport were the last missing
for m in overlay veth bridge br_netfilter nf_tables nft_compat nft_chain_nat nf_nat xt_MASQUERADE xt_comment xt_conntrack xt_addrtype xt_mark xt_nat xt_tcpudp xt_multiport; do
  modprobe -d "$PODMAN_VM_KCACHE" "$m" 2>/dev/null || echo "scenario: (modprobe $m failed)"
done
say "guest: $(uname -r), $(nproc) CPU, $(awk '/MemTotal/{print int($2/1024)" MiB"}' /proc/meminfo); $(podman --version); $(crun --version | head -1)"
podman info --format 'podman: cgroups {{.Host.CgroupsVersion}}, manager {{.Host.CgroupManager}}, storage {{.Store.GraphDriverName}} at {{.Store.GraphRoot}}, runtime {{.Host.OCIRuntime.Name}}, network {{.Host.NetworkBackend}}' | sed 's/^/scenario: /'

# ---- images: no registry ------------------------------------------------------------------------------------------
TARBALL=$(ls "$ROOT"/dist/engram-host-*-linux-x86_64.tar.gz | sort -V | tail -1)
VER=$(basename "$TARBALL" -linux-x86_64.tar.gz)
podman import -q "$C/bookworm-minbase-base.tar" localhost/engram-base:bookworm >/dev/null
podman import -q "$C/bookworm-minbase-py.tar" localhost/engram-py:bookworm >/dev/null
say "imported the two debootstrapped roots ($(el))"
ctx=/tmp/ctx-daemon; mkdir -p $ctx
cp "$TARBALL" $ctx/
cp "$ROOT/scripts/containers/daemon-entry.sh" $ctx/
cat > $ctx/Containerfile <<EOF
FROM localhost/engram-base:bookworm
ADD $(basename "$TARBALL") /opt/
RUN ln -s /opt/$VER /opt/engram-host
COPY daemon-entry.sh /usr/local/bin/daemon-entry.sh
EOF
podman build -q --network none -t localhost/engram-host:test $ctx >/dev/null
ctx=/tmp/ctx-engine; mkdir -p $ctx
cp -r "$ROOT/python" $ctx/python; cp "$ROOT/scripts/containers/engine-hold.py" $ctx/
cp "$MODEL/engram-digests.json" $ctx/
cat > $ctx/Containerfile <<'EOF'
FROM localhost/engram-py:bookworm
COPY python /opt/engram-host/python
COPY engine-hold.py /opt/engine-hold.py
# the trusted digest record, so that the engine needs nothing but the socket directory
COPY engram-digests.json /opt/trusted/engram-digests.json
ENV PYTHONPATH=/opt/engram-host/python
EOF
podman build -q --network none -t localhost/engram-engine:test $ctx >/dev/null
podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | sed 's/^/scenario: image /'
say "built the two images ($(el))"

has_log() {  # CONTAINER REGEX (not `podman logs | grep -q`: with pipefail, grep -q's early exit fails the pipe)
  podman logs "$1" > /tmp/has_log 2>&1 || true; grep -qE "$2" /tmp/has_log
}
wait_log() {  # CONTAINER REGEX SECONDS
  local i
  for ((i = 0; i < $3; i++)); do
    has_log "$1" "$2" && return 0
    podman container exists "$1" && [ "$(podman inspect -f '{{.State.Running}}' "$1")" = true ] || { podman logs "$1" 2>&1 | tail -20; return 1; }
    sleep 1
  done
  podman logs "$1" 2>&1 | tail -20; return 1
}
NS="cgroup ipc mnt net pid time user uts"
nsline() {  # CONTAINER: its main process's namespaces (every /proc/PID/ns/* but the *_for_children), from the guest
  local p n; p=$(podman inspect -f '{{.State.Pid}}' "$1")
  printf '%s (pid %s in the guest):' "$1" "$p"
  for n in $NS; do printf ' %s' "$(readlink /proc/$p/ns/$n)"; done; echo
}
nsof() { local p n; p=$(podman inspect -f '{{.State.Pid}}' "$1"); for n in $NS; do echo "$n $(readlink /proc/$p/ns/$n)"; done; }
ns_apart() {  # A B: fails unless A's and B's main processes share no pid, ipc, mnt, net, uts or cgroup namespace
  local n same=; join <(nsof "$1") <(nsof "$2") > /tmp/ns_join
  while read -r n a b; do
    case $n in pid|ipc|mnt|net|uts|cgroup) [ "$a" != "$b" ] || same+=" $n" ;; esac
  done < /tmp/ns_join
  [ -z "$same" ] || die "$1 and $2 share the namespaces$same"
  say "namespaces apart: $1 and $2 share none of pid ipc mnt net uts cgroup (user, time: the guest's, as podman's rootful default)"
}

run_backend() {
  local B=$1 SOCK=/run/engram-host/default.sock FP
  FP=$(cat "$MODEL.fingerprint-$B")
  say "== backend $B, model $MODEL_KIND ($(el))"
  if [ "$B" = memfd-hugetlb ]; then
    echo 600 > /proc/sys/vm/nr_hugepages   # 1.17 GiB of 2 MiB pages; the big model's tables round up to 1.0 GiB
    [ "$MODEL_KIND" = big ] || echo 100 > /proc/sys/vm/nr_hugepages
    say "hugepages: $(grep -E 'HugePages_(Total|Free)' /proc/meminfo | tr -s ' ' | tr '\n' ' ')"
  fi
  podman volume rm -f engram-socket >/dev/null 2>&1 || true
  podman volume create engram-socket >/dev/null
  # the daemon's container: its own PID, IPC, mount and network namespaces (podman's defaults; --network none: only lo)
  podman run -d --name engram-daemon --network none --read-only --tmpfs /tmp:size=64m \
    --cap-drop ALL --cap-add SYS_NICE --cap-add IPC_LOCK \
    -v engram-socket:/run/engram-host -v "$MODEL":/checkpoint:ro \
    localhost/engram-host:test /usr/local/bin/daemon-entry.sh --checkpoint /checkpoint --backend "$B" --numa none \
      --allow-uid 1000 --socket $SOCK >/dev/null
  wait_log engram-daemon 'engram-host: ready:' 600 || die "$B: the daemon did not get ready"
  podman logs engram-daemon 2>&1 | grep -E 'ready:|digest' | sed 's/^/scenario: daemon: /'
  say "daemon ready ($(el))"
  # the first engine: uid 1000, 64 MiB /dev/shm, the socket directory read-only and nothing else shared
  podman run -d --name engine1 --network none --user 1000:1000 --shm-size 64m --cap-drop ALL \
    -v engram-socket:/run/engram-host:ro -e ENGRAM_HOST_SOCKET=$SOCK \
    localhost/engram-engine:test python3 /opt/engine-hold.py --expect "$FP" --trusted /opt/trusted/engram-digests.json >/dev/null
  wait_log engine1 '"what": "first"' 900 || die "$B: engine1 did not check its tables"
  podman logs engine1 | sed 's/^/scenario: engine1: /'
  say "namespaces: the guest's init (pid 1):$(for n in $NS; do printf ' %s' "$(readlink /proc/1/ns/$n)"; done)"
  say "namespaces: $(nsline engram-daemon)"
  say "namespaces: $(nsline engine1)"
  ns_apart engram-daemon engine1
  has_log engine1 '"daemon_pid_peercred": 0[,}]' || die "$B: engine1 sees the daemon's pid as other than 0 (SO_PEERCRED)"
  say "engine1 sees the daemon's pid as 0 (SO_PEERCRED: not in its pid namespace)"
  say "daemon's /dev/shm: $(podman exec engram-daemon df -m /dev/shm | tail -1)"
  # a second engine while the first holds; this one also gets the model directory, read-only, to expect it by path
  podman run --name engine2 --network none --user 1000:1000 --shm-size 64m --cap-drop ALL \
    -v engram-socket:/run/engram-host:ro -v "$MODEL":/model:ro -e ENGRAM_HOST_SOCKET=$SOCK \
    localhost/engram-engine:test python3 /opt/engine-hold.py --expect /model --trusted /model/engram-digests.json --once \
    | sed 's/^/scenario: engine2: /'
  [ "$(podman inspect -f '{{.State.ExitCode}}' engine2)" = 0 ] || die "$B: engine2 failed"
  podman rm engine2 >/dev/null
  say "engine2 imported and checked while engine1 holds ($(el))"
  # a takeover inside the daemon's container, then the old daemon is gone
  # (started by the container's PID 1 on SIGUSR1; a first try with podman exec -d is in bench/container-runs.md)
  podman kill -s USR1 engram-daemon >/dev/null
  wait_log engram-daemon 'handed over to pid' 300 || die "$B: no takeover"
  sleep 2
  podman logs engram-daemon 2>&1 | grep -E 'takeover|handed over|ready:|adopt|took over' | tail -n +2 | sed 's/^/scenario: daemon: /' || true
  podman kill -s USR1 engine1 >/dev/null
  wait_log engine1 '"what": "again"' 900 || die "$B: engine1 did not check again after the takeover"
  # the container, stopped: its PID 1 passes SIGTERM to the serving daemon (the successor)
  podman stop -t 120 engram-daemon >/dev/null
  say "daemon container stopped, exit $(podman inspect -f '{{.State.ExitCode}}' engram-daemon) ($(el))"
  podman logs engram-daemon 2>&1 | tail -3 | sed 's/^/scenario: daemon: /'
  wait_log engine1 '"event": "gone"' 60 || die "$B: engine1 never saw the daemon go"
  sleep 1; podman kill -s USR1 engine1 >/dev/null
  for i in $(seq 900); do [ "$(podman logs engine1 | grep -c '"what": "again"' || true)" -ge 2 ] && break; sleep 1; done
  podman stop -t 30 engine1 >/dev/null
  podman logs engine1 | tail -n +2 | sed 's/^/scenario: engine1: /'
  [ "$(podman inspect -f '{{.State.ExitCode}}' engine1)" = 0 ] || die "$B: engine1 exit $(podman inspect -f '{{.State.ExitCode}}' engine1)"
  ! has_log engine1 '"event": "error"' || die "$B: engine1 reported an error"
  podman rm -f engine1 engram-daemon >/dev/null
  [ "$B" != memfd-hugetlb ] || echo 0 > /proc/sys/vm/nr_hugepages
  say "PASS $B ($(el))"
}

# podman 4.3.1 with the cgroupfs manager on cgroup v2 gives every pod's cgroup (/libpod_parent/POD_ID) a cgroup_device
# BPF program that allows no device at all, so crun's mknod of /dev/null in any container of the pod fails with EPERM
# ("crun: mknod `/dev/null`: Operation not permitted"; bench/container-runs.md, run 7). Each container's own cgroup
# gets crun's program with the usual allow list, and a pod of the systemd manager has no pod-level program: detaching
# the pod-level one restores that. Needs a pod created with --start=false.
pod_devices_open() {  # POD
  local cg p
  cg=/sys/fs/cgroup$(podman pod inspect "$1" -f '{{.CgroupPath}}')
  for p in $(bpftool cgroup show "$cg" 2>/dev/null | awk '$2 ~ /device/ {print $1}'); do
    say "kube: pod $1's cgroup ${cg#/sys/fs/cgroup} has cgroup_device program $p: $(bpftool prog dump xlated id "$p" | tr -s ' \n' ' ' | cut -c1-300)"
    bpftool cgroup detach "$cg" device id "$p" || bpftool cgroup detach "$cg" cgroup_device id "$p" || die "kube: cannot detach program $p"
    say "kube: detached it"
  done
}

play() {  # NAME POD_YAML [ARGS...]: kube play --start=false, the pod's device program detached, pod start
  local name=$1 y=$2; shift 2
  podman kube play --start=false "$@" "$y" > /tmp/kube/play-$name.log 2>&1 || { sed "s/^/scenario: kube play $name: /" /tmp/kube/play-$name.log; return 1; }
  if podman pod start "$name" > /tmp/kube/start0-$name.log 2>&1; then
    say "kube: $name started with the pod's device program in place"
  else   # shown once per pod: what podman 4.3.1 does here without the work-around
    sed "s/^/scenario: pod start $name, as played: /" /tmp/kube/start0-$name.log
    pod_devices_open "$name"
    podman pod start "$name" > /tmp/kube/start-$name.log 2>&1 || { sed "s/^/scenario: pod start $name: /" /tmp/kube/start-$name.log; return 1; }
  fi
  say "kube: $name started ($(el))"
}

hc() {  # CONTAINER: podman healthcheck run, by hand (no systemd timers in the guest); prints the exit code and output
  local rc=0 out t=$(date +%s.%N); out=$(podman healthcheck run "$1" 2>&1) || rc=$?
  say "kube: podman healthcheck run $1: exit $rc, '$(echo "$out" | tr '\n' ' ' | cut -c1-200)' in $(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}') s ($(el))"
  [ $rc = 0 ] || say "kube: its last result: $(podman inspect "$1" -f '{{json .State.Healthcheck}}' 2>&1 | python3 -c 'import json,sys
try:
    h=json.load(sys.stdin); l=(h.get("Log") or [{}])[-1]; print(h.get("Status"), "streak", h.get("FailingStreak"), "exit", l.get("ExitCode"), repr((l.get("Output") or "")[-300:]))
except Exception as e: print("?", e)')"
  return $rc
}

run_kube() {
  say "== podman kube play ($(el))"
  local k=/tmp/kube; mkdir -p $k
  # the DaemonSet's pod template as a Pod (podman 4.3 plays no DaemonSet) and engine-example.yaml; what changes is
  # the images and the checkpoint's hostPath (scripts/ci/deploy-check.sh validates the same two files)
  "$ROOT/scripts/containers/kube-pods.sh" $k "$MODEL" | sed 's/^/scenario: /'
  local net=() d=engram-host-engram-host e=engram-engine-example-engine
  # podman's default network (netavark, a bridge and iptables rules: the modules above), else --network none
  if ! play engram-host $k/daemon-pod.yaml --configmap "$ROOT/deploy/kubernetes/configmap.yaml"; then
    podman kube down $k/daemon-pod.yaml >/dev/null 2>&1 || true
    net=(--network none)
    play engram-host $k/daemon-pod.yaml "${net[@]}" --configmap "$ROOT/deploy/kubernetes/configmap.yaml" || die "kube play of the daemon's pod"
  fi
  podman ps -a --pod --format '{{.Names}} {{.PodName}} {{.Status}}' | sed 's/^/scenario: ps: /'
  # podman 4.3.1 maps the livenessProbe to the container's healthcheck; its inspect has no StartupHealthCheck (later
  # podmans map startupProbe to one), and readinessProbe has no counterpart
  podman inspect $d --format 'healthcheck: {{json .Config.Healthcheck}}' 2>&1 | sed 's/^/scenario: /' || true
  podman inspect $d --format 'user {{.Config.User}}, read-only root {{.HostConfig.ReadonlyRootfs}}, caps add {{json .HostConfig.CapAdd}} drop {{json .HostConfig.CapDrop}}, memory limit {{.HostConfig.Memory}}, seccomp {{json .HostConfig.SecurityOpt}}, network {{.HostConfig.NetworkMode}}' 2>&1 | sed 's/^/scenario: daemon container: /' || true
  podman pod inspect engram-host --format 'pod: network {{json .InfraConfig.Networks}}, shared {{json .SharedNamespaces}}' 2>&1 | sed 's/^/scenario: /' || true
  say "namespaces: $(nsline $d)" || true
  say "kube: the probe while the daemon loads (expected to fail: not ready yet)"
  hc $d || true
  wait_log $d 'engram-host: ready:' 600 || die "kube: the daemon did not get ready"
  has_log $d 'engram-host: ready:' && grep -E 'ready:' /tmp/has_log | sed 's/^/scenario: daemon: /'
  say "kube daemon ready ($(el)); the probes, run by hand (no systemd timers in the guest):"
  if ! hc $d; then   # under TCG the probe's JVM may take longer than the probe's timeoutSeconds (15 s)
    local t=$(date +%s.%N) rc=0
    podman exec $d /opt/engram-host/bin/engram-host status --ready --socket /run/engram-host/default.sock --timeout-ms 10000 > /tmp/kube/probe.log 2>&1 || rc=$?
    say "kube: the liveness probe's command by podman exec, with no time limit: exit $rc in $(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}') s: $(tr '\n' ' ' < /tmp/kube/probe.log | cut -c1-200)"
    [ $rc = 0 ] || die "kube: the daemon's probe command failed once ready"
  fi
  say "kube: health $(podman inspect $d -f '{{.State.Healthcheck.Status}} (failing streak {{.State.Healthcheck.FailingStreak}})' 2>&1)"
  ls -ld /run/engram-host /run/engram-host/* 2>&1 | sed 's/^/scenario: node: /' || true
  play engram-engine-example $k/engine.yaml "${net[@]}" || die "kube play of engine-example.yaml"
  say "namespaces: engine-example's pod (its infra container, whose net, ipc and uts the engine shares): $(nsline "$(podman pod inspect engram-engine-example -f '{{.InfraContainerID}}')" | cut -d' ' -f2-)" || true
  say "namespaces: the daemon's pod's infra container: $(nsline "$(podman pod inspect engram-host -f '{{.InfraContainerID}}')" | cut -d' ' -f2-)" || true
  local i
  for i in $(seq 600); do [ "$(podman inspect -f '{{.State.Running}}' $e 2>/dev/null)" = false ] && break; sleep 1; done
  podman logs $e 2>&1 | cut -c1-1500 | sed 's/^/scenario: engine-example: /' || true
  local erc; erc=$(podman inspect -f '{{.State.ExitCode}}' $e)
  say "engine-example exit $erc, user $(podman inspect -f '{{.Config.User}}' $e)"
  hc $d || say "kube: (the healthcheck after the engine's import failed; see above for the probe's time under TCG)"
  podman kube down $k/engine.yaml >/dev/null 2>&1 || true
  podman kube down $k/daemon-pod.yaml 2>&1 | tail -1 | sed 's/^/scenario: kube down: /' || true
  [ "$erc" = 0 ] || die "kube: engine-example exit $erc"
  say "PASS kube ($(el))"
}

for s in "${STEPS[@]}"; do
  case $s in memfd|memfd-hugetlb) run_backend "$s" ;; kube) run_kube ;; *) die "unknown step $s" ;; esac
done
say "all done: ${STEPS[*]} ($(el))"

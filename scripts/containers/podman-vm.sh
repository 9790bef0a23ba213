#!/usr/bin/env bash
# Runs COMMAND inside a QEMU guest made for rootful podman, from the repository root, and returns its exit code
# (bench/container-runs.md; issue #28, section 2). Not in CI: a run takes many minutes under TCG.
#
#   scripts/containers/podman-vm.sh COMMAND [ARGS...]
#   scripts/containers/podman-vm.sh scripts/containers/podman-scenario.sh      # the whole scenario
#
# Why a guest: podman does not run on the development machine itself (crun cannot set rlimits there, and its cgroups
# are hybrid: ../shared/reference/containers-and-systemd.md). The guest is scripts/numa/numa-vm.sh's (Debian's
# kernel from its cache, NUMA_VM_CACHE, default /var/cache/engram-numa-vm; the host's root over 9p, read-only; a
# busybox initramfs), without the emulated NUMA nodes, and with more memory: PODMAN_VM_MB (default 6144) on
# PODMAN_VM_CPUS vCPUs (default 1). What the three guests share (the tools, the kernel's cache, the initramfs, the
# 9p shares) is scripts/lib/qemu-guest.sh.
# The guest's /init additionally mounts the guest's own cgroup v2 hierarchy at /sys/fs/cgroup, gives podman a tmpfs
# at /var/lib/containers (its graphroot; PODMAN_VM_STORAGE_MB, default 2048), and enters the host's root with
# switch_root (not chroot, under which crun's exec ran outside the container's root: bench/container-runs.md).
#
# Environment: PODMAN_VM_OUT      a host folder for outputs (default: a temporary one, removed on exit)
#              PODMAN_VM_TIMEOUT  seconds before the guest is killed (default 3000; exit 124 then)
#              PODMAN_VM_ACCEL    tcg (default: KVM aborts on these machines, numa-vm.sh says how) or kvm
# The command sees PODMAN_VM=1 and PODMAN_VM_OUT. Exit status: the command's; 124 on timeout; 125 when the guest
# could not be booted or gave no exit code.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: scripts/containers/podman-vm.sh COMMAND [ARGS...]" >&2; exit 2; }
CACHE=${NUMA_VM_CACHE:-/var/cache/engram-numa-vm}
MYCACHE=/var/cache/engram-containers
MB=${PODMAN_VM_MB:-6144}
CPUS=${PODMAN_VM_CPUS:-1}
TIMEOUT=${PODMAN_VM_TIMEOUT:-3000}
STORAGE_MB=${PODMAN_VM_STORAGE_MB:-2048}
ACCEL=${PODMAN_VM_ACCEL:-tcg}
say() { echo "podman-vm: $*" >&2; }
die() { say "$*"; exit 125; }
. "$ROOT/scripts/lib/qemu-guest.sh"   # qg_need_tools, qg_kernel, qg_initrd, qg_9p_args (shared with the other guests)

qg_need_tools
qg_kernel "$CACHE"   # numa-vm.sh's cache: downloaded there once when missing
KVER=$QG_KVER KERNEL=$QG_KERNEL
command -v podman >/dev/null || die "podman is not installed on the host (apt-get install podman crun ...): the guest runs the host's"
mkdir -p "$MYCACHE"

MODS=(virtio_pci 9pnet_virtio 9p)
INITRD="$MYCACHE/initrd-$KVER.cpio.gz"
INIT_SRC=$(cat <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
echo 1 > /proc/sys/kernel/printk
for m in $(cat /modules.order); do insmod "/lib/modules/$m" || echo "init: insmod $m failed"; done
arg() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
o9p="trans=virtio,version=9p2000.L,msize=524288"
mkdir -p /host
mount -t 9p -o $o9p,ro,cache=loose hostroot /host || { echo "init: no 9p root"; poweroff -f; }
mkdir -p /dev/shm /dev/hugepages /dev/pts /dev/mqueue
for d in proc sys dev; do mount --bind /$d /host/$d; done
mount -t cgroup2 none /host/sys/fs/cgroup || echo "init: no cgroup2"
mount -t devpts -o newinstance,ptmxmode=0666 devpts /host/dev/pts 2>/dev/null || true
for d in tmp run var/tmp dev/shm; do mount -t tmpfs -o mode=1777 tmpfs /host/$d; done
mount -t hugetlbfs none /host/dev/hugepages 2>/dev/null || true
mount -t tmpfs -o size=$(arg podman_vm_storage_mb)m,mode=0700 tmpfs /host/var/lib/containers || echo "init: no /var/lib/containers"
repo=$(arg podman_vm_repo)
mount -t 9p -o $o9p,ro,cache=loose repo "/host$repo" 2>/dev/null || { mkdir -p "/host$repo" && mount -t 9p -o $o9p,ro,cache=loose repo "/host$repo"; } || { echo "init: no repository share"; poweroff -f; }
out=$(arg podman_vm_out)
mkdir -p "/host$out"
mount -t 9p -o $o9p out "/host$out" || { echo "init: no out share"; poweroff -f; }
echo "$(cut -d' ' -f1 /proc/uptime)" > "/host$out/.booted"
# switch_root, not chroot: a chroot leaves the initramfs as the root of every mount namespace, and then crun's exec
# (podman exec, healthchecks) lands there instead of in the container's root (bench/container-runs.md, run 8)
exec switch_root /host /bin/sh -c '(cd "$(cat "$1/.cwd")" && exec /bin/bash "$1/.cmd") </dev/console >/dev/console 2>&1
echo $? > "$1/.rc"; sync; umount "$1"; /bin/busybox poweroff -f' sh "$out"
INIT
)
qg_initrd "$INITRD" "$INIT_SRC" "${MODS[@]}"
[ -d /var/lib/containers ] || mkdir -p /var/lib/containers   # the guest mounts its tmpfs there

KEEP_OUT=1
if [ -n "${PODMAN_VM_OUT:-}" ]; then
  OUT=$(mkdir -p "$PODMAN_VM_OUT" && cd "$PODMAN_VM_OUT" && pwd)
else
  OUT=$(mktemp -d /tmp/podman-vm-out.XXXXXX); KEEP_OUT=0
fi
rm -f "$OUT/.rc" "$OUT/.booted"
QPID=
cleanup() {
  [ -z "$QPID" ] || { kill "$QPID" 2>/dev/null || true; wait "$QPID" 2>/dev/null || true; }
  rm -f "$OUT/.cmd" "$OUT/.cwd" "$OUT/.rc" "$OUT/.booted"
  [ "$KEEP_OUT" = 1 ] || rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
{
  echo "export PODMAN_VM=1 PODMAN_VM_KCACHE=$(printf %q "$CACHE/k") PODMAN_VM_OUT=$(printf %q "$OUT") HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  echo "export LANG=C.UTF-8 TERM=dumb"
  printf 'exec'; printf ' %q' "$@"; echo
} > "$OUT/.cmd"
echo "$ROOT" > "$OUT/.cwd"

APPEND="console=ttyS0 panic=-1 printk.time=1 mitigations=off tsc=reliable podman_vm_out=$OUT podman_vm_repo=$ROOT"
APPEND+=" podman_vm_storage_mb=$STORAGE_MB"
say "guest: $KVER, $ACCEL, $MB MiB, $CPUS vCPU(s), podman storage tmpfs $STORAGE_MB MiB; $(qemu-system-x86_64 --version | head -1)"
t0=$(date +%s)
: > "$OUT/console.log"
qg_9p_args "$ROOT" "$OUT"
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 -accel "$ACCEL" -cpu max -M q35 -m "${MB}M" -smp "$CPUS" \
  -kernel "$KERNEL" -initrd "$INITRD" -append "$APPEND" "${QG_9P[@]}" "${QG_QEMU_TAIL[@]}" \
  </dev/null >>"$OUT/console.log" 2>"$OUT/qemu.err" &
QPID=$!
# what follows the kernel's "Run /init" but the kernel's own lines
tail -s 0.5 -n +1 -f --pid="$QPID" "$OUT/console.log" | awk '{ sub(/\r$/, "") } /\] Run \/init as init process$/ { s = 1; next }
  s && !/^\[ *[0-9]+\.[0-9]+\] / { print; fflush() }' &
set +e; wait "$QPID"; qrc=$?; set -e; QPID=
wait || true
cat "$OUT/qemu.err" >&2
say "guest ran $(( $(date +%s) - t0 )) s under $ACCEL (userspace at $(cat "$OUT/.booted" 2>/dev/null || echo '?') s of guest uptime)"
[ "$qrc" = 124 ] && { say "timed out after $TIMEOUT s"; exit 124; }
[ -f "$OUT/.rc" ] || { tail -n 5 "$OUT/console.log" | sed 's/^/  console: /' >&2; die "the guest gave no exit code (qemu exit $qrc)"; }
exit "$(cat "$OUT/.rc")"

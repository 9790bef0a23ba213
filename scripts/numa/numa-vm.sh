#!/usr/bin/env bash
# Runs COMMAND inside a QEMU guest with two emulated NUMA nodes, from the repository root, and returns its exit code
# and output (docs/numa.md, "Two nodes, emulated").
#
#   scripts/numa/numa-vm.sh COMMAND [ARGS...]
#
# The guest: Debian's kernel (linux-image-amd64's, unpacked into a cache folder; the host's /boot is not touched),
# two NUMA nodes made of memory-backend-ram objects (NUMA_VM_NODE0_MB, NUMA_VM_NODE1_MB; default 1536 and 1024), one
# CPU each (NUMA_VM_CPUS_PER_NODE, default 1), SLIT distance 20 between them. The host's root filesystem is shared
# into the guest read-only over virtio-9p, so the guest runs the host's JDK and this checkout's jars; /tmp, /run and
# /var/tmp are tmpfs in the guest, the checkout itself is shared read-only again at its own path (so a checkout under
# /tmp, as CI's may be, is seen), and OUT (below) is shared read-write. /dev/kvm is used when it opens, else TCG.
#
# A minimal init (busybox from busybox-static, in an initramfs built here with cpio) loads the virtio and 9p modules,
# mounts the host root on /host, chroots into it, runs COMMAND with ENGRAM_NUMA_VM=1 and ENGRAM_NUMA_VM_OUT=OUT in the
# environment, writes its exit code to OUT, and powers the guest off.
#
# Installs with apt-get what is missing: qemu-system-x86, busybox-static (root needed for that; nothing is installed
# when all is present). The kernel package is downloaded once into NUMA_VM_CACHE (default /var/cache/engram-numa-vm).
# Every process and temporary file it starts is removed on exit (trap); OUT is kept when NUMA_VM_OUT names it.
#
# Environment: NUMA_VM_OUT     a host folder for the command's outputs (default: a temporary one, removed on exit);
#              NUMA_VM_TIMEOUT seconds before the guest is killed (default 900; exit 124 then);
#              NUMA_VM_VERBOSE=1 shows the kernel's boot log.
# Exit status: the command's; 124 on timeout; 125 when the guest could not be booted or gave no exit code.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: scripts/numa/numa-vm.sh COMMAND [ARGS...]" >&2; exit 2; }
CACHE=${NUMA_VM_CACHE:-/var/cache/engram-numa-vm}
NODE0_MB=${NUMA_VM_NODE0_MB:-1536}
NODE1_MB=${NUMA_VM_NODE1_MB:-1024}
CPN=${NUMA_VM_CPUS_PER_NODE:-1}
TIMEOUT=${NUMA_VM_TIMEOUT:-900}
say() { echo "numa-vm: $*" >&2; }
die() { say "$*"; exit 125; }

# --- what it needs --------------------------------------------------------------------------------------------------
need=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || need+=(busybox-static)
command -v cpio >/dev/null 2>&1 || need+=(cpio)
command -v depmod >/dev/null 2>&1 || need+=(kmod)
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing ${need[*]}; install them (apt-get install ${need[*]}) or run as root"
  say "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq -o DPkg::Lock::Timeout=300 >/dev/null
  apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${need[@]}" >/dev/null
fi

# Debian's kernel: the package linux-image-amd64 depends on, unpacked (not installed) into the cache, once.
mkdir -p "$CACHE"
KDIR=$(ls -d "$CACHE"/k/lib/modules/*-amd64 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$KDIR" ]; then
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -1)
  if [ -z "$pkg" ]; then
    apt-get update -qq -o DPkg::Lock::Timeout=300 >/dev/null
    pkg=$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -1)
  fi
  [ -n "$pkg" ] || die "cannot tell which kernel package linux-image-amd64 depends on"
  say "downloading $pkg into $CACHE"
  dl=$(mktemp -d "$CACHE/dl.XXXXXX")
  (cd "$dl" && chmod 777 . && apt-get download -qq "$pkg")
  rm -rf "$CACHE/k.new" && dpkg -x "$dl"/*.deb "$CACHE/k.new" && rm -rf "$dl" "$CACHE/k" && mv "$CACHE/k.new" "$CACHE/k"
  KDIR=$(ls -d "$CACHE"/k/lib/modules/*-amd64 | sort -V | tail -1)
fi
KVER=$(basename "$KDIR")
KERNEL="$CACHE/k/boot/vmlinuz-$KVER"
[ -f "$KDIR/modules.dep" ] || depmod -b "$CACHE/k" "$KVER"

# --- the initramfs: busybox, the modules 9p over virtio needs, and /init --------------------------------------------
MODS=(virtio_pci 9pnet_virtio 9p)
INITRD="$CACHE/initrd-$KVER.cpio.gz"
INIT_SRC=$(cat <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do insmod "/lib/modules/$m" || echo "init: insmod $m failed"; done
mkdir -p /host
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose hostroot /host || { echo "init: no 9p root"; poweroff -f; }
mkdir -p /dev/shm /dev/hugepages
for d in proc sys dev; do mount --bind /$d /host/$d; done
for d in tmp run var/tmp dev/shm; do mount -t tmpfs -o mode=1777 tmpfs /host/$d; done
mount -t hugetlbfs none /host/dev/hugepages 2>/dev/null || true
repo=$(sed -n 's/.*numa_vm_repo=\([^ ]*\).*/\1/p' /proc/cmdline)
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose repo "/host$repo" 2>/dev/null \
  || { mkdir -p "/host$repo" && mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose repo "/host$repo"; } \
  || { echo "init: no repository share"; poweroff -f; }
out=$(sed -n 's/.*numa_vm_out=\([^ ]*\).*/\1/p' /proc/cmdline)
mkdir -p "/host$out"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 out "/host$out" || { echo "init: no out share"; poweroff -f; }
echo "$(cut -d' ' -f1 /proc/uptime)" > "/host$out/.booted"
chroot /host /bin/sh -c 'cd "$(cat "$1/.cwd")" && exec /bin/bash "$1/.cmd"' sh "$out" </dev/console >/dev/console 2>&1
echo $? > "/host$out/.rc"
sync; umount "/host$out"
poweroff -f
INIT
)
stamp=$(printf '%s\n%s\n' "$INIT_SRC" "${MODS[*]}" | sha256sum | cut -c1-12)
if [ ! -f "$INITRD" ] || [ "$(cat "$INITRD.stamp" 2>/dev/null)" != "$stamp" ]; then
  ird=$(mktemp -d)
  mkdir -p "$ird"/{bin,proc,sys,dev,lib/modules}
  cp /bin/busybox "$ird/bin/busybox"
  printf '%s\n' "$INIT_SRC" > "$ird/init" && chmod 755 "$ird/init"
  # each module after what it depends on (modules.dep lists dependencies; modprobe --show-depends orders them)
  : > "$ird/modules.order"
  for m in "${MODS[@]}"; do
    modprobe -d "$CACHE/k" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}' | while read -r ko; do
      b=$(basename "$ko")
      grep -qx "$b" "$ird/modules.order" || { cp "$ko" "$ird/lib/modules/$b"; echo "$b" >> "$ird/modules.order"; }
    done
  done
  (cd "$ird" && find . | cpio -o -H newc --quiet | gzip -1) > "$INITRD.new" && mv "$INITRD.new" "$INITRD"
  echo "$stamp" > "$INITRD.stamp"
  rm -rf "$ird"
fi

# --- the run -------------------------------------------------------------------------------------------------------
KEEP_OUT=1
if [ -n "${NUMA_VM_OUT:-}" ]; then
  OUT=$(mkdir -p "$NUMA_VM_OUT" && cd "$NUMA_VM_OUT" && pwd)
else
  OUT=$(mktemp -d /tmp/numa-vm-out.XXXXXX); KEEP_OUT=0
fi
rm -f "$OUT/.rc" "$OUT/.booted"
QPID=
cleanup() {
  [ -z "$QPID" ] || kill "$QPID" 2>/dev/null || true
  [ -z "$QPID" ] || wait "$QPID" 2>/dev/null || true
  rm -f "$OUT/.cmd" "$OUT/.cwd" "$OUT/.rc" "$OUT/.booted"
  [ "$KEEP_OUT" = 1 ] || rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
{
  echo "export ENGRAM_NUMA_VM=1 ENGRAM_NUMA_VM_OUT=$(printf %q "$OUT") HOME=/tmp PATH=$(printf %q "$PATH")"
  echo "export LANG=C.UTF-8 TERM=dumb"
  printf 'exec'; printf ' %q' "$@"; echo
} > "$OUT/.cmd"
echo "$ROOT" > "$OUT/.cwd"

# KVM when /dev/kvm opens, else TCG (qemu tries the -accel options in order: KVM that fails falls back); -cpu max
# suits both
accel=tcg
ACCEL=(-accel tcg)
if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then accel=kvm; ACCEL=(-accel kvm -accel tcg); fi
ncpu=$((2 * CPN)); last0=$((CPN - 1))
QEMU=(qemu-system-x86_64 "${ACCEL[@]}" -cpu max -M q35 -m "$((NODE0_MB + NODE1_MB))M" -smp "$ncpu"
  -object "memory-backend-ram,id=m0,size=${NODE0_MB}M" -object "memory-backend-ram,id=m1,size=${NODE1_MB}M"
  -numa "node,nodeid=0,cpus=0-$last0,memdev=m0" -numa "node,nodeid=1,cpus=$CPN-$((ncpu - 1)),memdev=m1"
  -numa dist,src=0,dst=1,val=20
  -kernel "$KERNEL" -initrd "$INITRD"
  -fsdev "local,id=root,path=/,security_model=none,readonly=on,multidevs=remap"
  -device virtio-9p-pci,fsdev=root,mount_tag=hostroot
  -fsdev "local,id=repo,path=$ROOT,security_model=none,readonly=on,multidevs=remap"
  -device virtio-9p-pci,fsdev=repo,mount_tag=repo
  -fsdev "local,id=out,path=$OUT,security_model=none,multidevs=remap"
  -device virtio-9p-pci,fsdev=out,mount_tag=out
  -nodefaults -no-user-config -display none -serial stdio -no-reboot -net none)
quiet="quiet loglevel=1"
[ "${NUMA_VM_VERBOSE:-0}" = 1 ] && quiet=""
APPEND="console=ttyS0 panic=-1 $quiet mitigations=off tsc=reliable numa_vm_out=$OUT numa_vm_repo=$ROOT"
say "guest: $KVER, $accel, node0 ${NODE0_MB} MiB + node1 ${NODE1_MB} MiB, $ncpu CPUs; $(qemu-system-x86_64 --version | head -1)"
t0=$(date +%s.%N)
timeout -k 5 "$TIMEOUT" "${QEMU[@]}" -append "$APPEND" </dev/null > >(sed -u 's/\r$//' | grep --line-buffered -v '\] reboot: Power down$') &
QPID=$!
set +e
wait "$QPID"; qrc=$?
set -e
QPID=
t1=$(date +%s.%N)
booted=$(cat "$OUT/.booted" 2>/dev/null || echo "?")
say "guest ran $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}') s (userspace reached at $booted s of guest uptime)"
[ "$qrc" = 124 ] && { say "timed out after $TIMEOUT s"; exit 124; }
[ -f "$OUT/.rc" ] || die "the guest gave no exit code (qemu exit $qrc)"
exit "$(cat "$OUT/.rc")"

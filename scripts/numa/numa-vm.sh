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
# /tmp, as CI's may be, is seen), and OUT (below) is shared read-write. KVM when /dev/kvm opens, else TCG; a KVM
# guest that dies or stays silent before userspace is booted again with TCG (below, "The accelerator").
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
#              NUMA_VM_TIMEOUT seconds before the guest is killed, a KVM attempt that fell back to TCG included
#                              (default 900; exit 124 then);
#              NUMA_VM_VERBOSE=1 shows the kernel's boot log (it is in OUT/console.log in any case);
#              NUMA_VM_ACCEL   kvm or tcg (default: kvm when /dev/kvm opens, else tcg);
#              NUMA_VM_KVM_WAIT_S seconds a KVM guest has to print the kernel's first line (default 8);
#              NUMA_VM_CPU     qemu's -cpu model (default max).
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
. "$ROOT/scripts/lib/qemu-guest.sh"   # qg_need_tools, qg_kernel, qg_initrd, qg_9p_args (shared with the other guests)

# --- what it needs --------------------------------------------------------------------------------------------------
qg_need_tools

# Debian's kernel: the package linux-image-amd64 depends on, unpacked (not installed) into the cache, once.
qg_kernel "$CACHE"
KVER=$QG_KVER KERNEL=$QG_KERNEL

# --- the initramfs: busybox, the modules 9p over virtio needs, and /init --------------------------------------------
MODS=(virtio_pci 9pnet_virtio 9p)
INITRD="$CACHE/initrd-$KVER.cpio.gz"
INIT_SRC=$(cat <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
# the kernel's boot log was the sign of life numa-vm.sh watches for; from here on only its emergencies reach the console
grep -q 'numa_vm_verbose=1' /proc/cmdline || echo 1 > /proc/sys/kernel/printk
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
qg_initrd "$INITRD" "$INIT_SRC" "${MODS[@]}"

# --- the run -------------------------------------------------------------------------------------------------------
KEEP_OUT=1
if [ -n "${NUMA_VM_OUT:-}" ]; then
  OUT=$(mkdir -p "$NUMA_VM_OUT" && cd "$NUMA_VM_OUT" && pwd)
else
  OUT=$(mktemp -d /tmp/numa-vm-out.XXXXXX); KEEP_OUT=0
fi
rm -f "$OUT/.rc" "$OUT/.booted"
QPID= FPID= CON=
cleanup() {
  if [ -n "$QPID" ]; then
    kill "$(cat "$CON/qemu.pid" 2>/dev/null)" 2>/dev/null || true
    wait "$QPID" 2>/dev/null || true   # the console's tail below ends with it
  fi
  [ -z "$FPID" ] || wait "$FPID" 2>/dev/null || true
  [ -z "$CON" ] || rm -rf "$CON"
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

# The accelerator: KVM when /dev/kvm opens, else TCG (NUMA_VM_ACCEL picks one); -cpu max suits both. That /dev/kvm
# opens does not mean KVM works: in a VM without working nested virtualisation qemu aborts at once under it ("failed
# to set MSR 0x10a to 0x69", then an assertion in kvm_buf_set_msrs, exit 134; -cpu host the same), or, with a CPU
# model that hides that MSR (-cpu max,-arch-capabilities, as on other machines of that kind with -cpu max), the guest
# never runs the kernel: SeaBIOS boots the ROM, the kernel's real-mode setup prints "Probing EDD", and then nothing
# (300 s without kernel output in the CI runs of issue #28). So the KVM guest is watched: when qemu exits before
# userspace (non-zero, or without a line of the kernel's log), or the console has no line of the kernel's log after
# NUMA_VM_KVM_WAIT_S seconds (8), qemu is killed and the guest booted again with TCG, within what is left of
# NUMA_VM_TIMEOUT, saying so in one line (the KVM attempt's stderr and console: OUT/qemu-kvm.err,
# OUT/console-kvm.log). Measured on a 2-core VM: the kernel's first line comes after 3.5-7.3 s of TCG (load average
# 2-3), most of it the kernel's decompression, which KVM runs at the host's speed.
accel=${NUMA_VM_ACCEL:-}
if [ -z "$accel" ]; then
  accel=tcg
  if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then accel=kvm; fi
fi
case $accel in kvm|tcg) ;; *) die "NUMA_VM_ACCEL=$accel: kvm or tcg" ;; esac
KVM_WAIT=${NUMA_VM_KVM_WAIT_S:-8}
ncpu=$((2 * CPN)); last0=$((CPN - 1))
qg_9p_args "$ROOT" "$OUT"
QEMU=(qemu-system-x86_64 -cpu "${NUMA_VM_CPU:-max}" -M q35 -m "$((NODE0_MB + NODE1_MB))M" -smp "$ncpu"
  -object "memory-backend-ram,id=m0,size=${NODE0_MB}M" -object "memory-backend-ram,id=m1,size=${NODE1_MB}M"
  -numa "node,nodeid=0,cpus=0-$last0,memdev=m0" -numa "node,nodeid=1,cpus=$CPN-$((ncpu - 1)),memdev=m1"
  -numa dist,src=0,dst=1,val=20
  -kernel "$KERNEL" -initrd "$INITRD" "${QG_9P[@]}" "${QG_QEMU_TAIL[@]}")
# The guest's console is OUT/console.log (the kernel's boot log there is the sign of life watched above), shown here
# as it grows, the kernel's lines with NUMA_VM_VERBOSE=1 only; /init lowers the console's log level (but with
# NUMA_VM_VERBOSE=1), so that the kernel's later messages do not cut into COMMAND's output.
verbose=0
[ "${NUMA_VM_VERBOSE:-0}" = 1 ] && verbose=1
APPEND="earlyprintk=ttyS0,115200 console=ttyS0 panic=-1 printk.time=1 mitigations=off tsc=reliable numa_vm_verbose=$verbose numa_vm_out=$OUT numa_vm_repo=$ROOT"
say "guest: $KVER, $accel, node0 ${NODE0_MB} MiB + node1 ${NODE1_MB} MiB, $ncpu CPUs; $(qemu-system-x86_64 --version | head -1)"
CON=$(mktemp -d /tmp/numa-vm-con.XXXXXX)

# boot ACCEL SECONDS WATCH: runs the guest under ACCEL for at most SECONDS (TERM, then KILL 5 s later); with WATCH=1
# it is killed when the console stays silent for KVM_WAIT seconds. Sets qrc (qemu's exit status; 124 when past
# SECONDS), silent (1 when killed for silence) and first (seconds to the kernel's first line on the console, to 0.2 s;
# what comes before it, from the kernel's real-mode setup code, is no sign: a KVM guest that hangs prints "Probing EDD").
SPOKE='^\[ *[0-9]+\.[0-9]+\] '   # a line of the kernel's log (printk.time=1)
boot() {
  local acc=$1 limit=$2 watch=$3 start now killed_at= t
  t=$(date +%s.%N)
  rm -f "$OUT/.rc" "$OUT/.booted" "$CON/qemu.pid" "$CON/qemu.err"
  : > "$OUT/console.log"
  # in a subshell that waits for it, so that an abort is reported in qemu.err, not on this script's stderr
  ( "${QEMU[@]}" -accel "$acc" -append "$APPEND" </dev/null >>"$OUT/console.log" & echo $! > "$CON/qemu.pid"; wait $! ) \
    2>"$CON/qemu.err" &
  QPID=$!
  # shown: with NUMA_VM_VERBOSE=1 all of it but the kernel's "Power down", else what follows the kernel's "Run /init"
  # but the kernel's lines (the last lines of the console are shown when the guest gives no exit code)
  tail -s 0.2 -n +1 -f --pid="$QPID" "$OUT/console.log" | awk -v all=$verbose '{ sub(/\r$/, "") }
    /\] reboot: Power down$/ { next } all { print; fflush(); next } /\] Run \/init as init process$/ { shown = 1; next }
    shown && !/^\[ *[0-9]+\.[0-9]+\] / { print; fflush() }' &
  FPID=$!
  start=$(date +%s); qrc=; silent=0; first=
  while kill -0 "$QPID" 2>/dev/null; do
    now=$(date +%s)
    [ -n "$first" ] || ! grep -qE "$SPOKE" "$OUT/console.log" || first=$(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}')
    if [ -n "$killed_at" ]; then
      [ $((now - killed_at)) -lt 5 ] || kill -KILL "$(cat "$CON/qemu.pid")" 2>/dev/null || true
    elif [ "$watch" = 1 ] && [ -z "$first" ] && [ $((now - start)) -ge "$KVM_WAIT" ]; then
      silent=1; killed_at=$now; kill -TERM "$(cat "$CON/qemu.pid")" 2>/dev/null || true
    elif [ $((now - start)) -ge "$limit" ]; then
      qrc=124; killed_at=$now; kill -TERM "$(cat "$CON/qemu.pid")" 2>/dev/null || true
    fi
    sleep 0.2
  done
  [ -n "$first" ] || ! grep -qE "$SPOKE" "$OUT/console.log" || first="?"   # qemu was gone within 0.2 s
  set +e
  wait "$QPID"; local rc=$?
  wait "$FPID"
  set -e
  QPID=; FPID=
  qrc=${qrc:-$rc}
}

t0=$(date +%s.%N)
why=
deadline=$(( $(date +%s) + TIMEOUT ))
if [ "$accel" = kvm ]; then
  boot kvm "$TIMEOUT" 1
  if [ $silent = 1 ]; then
    why="no kernel output on its console in $KVM_WAIT s"
  elif [ ! -f "$OUT/.booted" ] && [ "$qrc" != 124 ] && { [ "$qrc" != 0 ] || [ -z "$first" ]; }; then
    why="qemu exit $qrc before userspace: $(grep -v '^\s*$' "$CON/qemu.err" | head -1 | sed 's/^qemu-system-x86_64: //')"
  fi
  if [ -n "$why" ]; then
    cp "$CON/qemu.err" "$OUT/qemu-kvm.err"; cp "$OUT/console.log" "$OUT/console-kvm.log"
    say "KVM did not boot the guest ($why); booting it again with TCG"
    accel=tcg
    boot tcg "$(( deadline - $(date +%s) ))" 0
  fi
else
  boot tcg "$TIMEOUT" 0
fi
cat "$CON/qemu.err" >&2
t1=$(date +%s.%N)
booted=$(cat "$OUT/.booted" 2>/dev/null || echo "?")
ran=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}')
echo "the guest ran $ran s under $accel${why:+ after KVM failed}" > "$OUT/guest-ran"   # for bin/test's summary
say "guest ran $ran s under $accel (the kernel's first line after ${first:-?} s, userspace at $booted s of guest uptime)"
[ "$qrc" = 124 ] && { say "timed out after $TIMEOUT s"; exit 124; }
if [ ! -f "$OUT/.rc" ]; then
  [ $verbose = 1 ] || tail -n 5 "$OUT/console.log" | sed 's/\r$//; s/^/  console: /' >&2
  die "the guest gave no exit code (qemu exit $qrc)"
fi
exit "$(cat "$OUT/.rc")"

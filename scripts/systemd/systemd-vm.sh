#!/usr/bin/env bash
# Boots a QEMU guest whose PID 1 is the host's (Debian's) systemd and runs COMMAND in it as a oneshot unit, from the
# repository root; returns COMMAND's exit code (bench/systemd-runs.md, issue #28).
#
#   scripts/systemd/systemd-vm.sh COMMAND [ARGS...]
#
# The guest: Debian's kernel from numa-vm.sh's cache (NUMA_VM_CACHE, default /var/cache/engram-numa-vm; downloaded
# there as numa-vm.sh does when missing), SYSD_VM_MB of memory (default 2048) and SYSD_VM_CPUS CPUs (default 1), one
# NUMA node. The host's root is shared read-only over virtio-9p and a busybox initramfs (built here, cached next to
# numa-vm.sh's) puts an overlay over it whose upper layer is a tmpfs: the guest can write anywhere (/etc, /opt, /var)
# and nothing reaches the host. /tmp is a tmpfs of its own; the checkout is shared read-only again at its own path,
# OUT read-write; the kernel's modules from the cache are bound at /lib/modules/<version> so that systemd's
# modprobe finds them. The init then runs `switch_root` into the overlay with systemd as init (the kernel's
# init=, default /lib/systemd/systemd), booting engram-vm.target: sysinit.target and engram-vm-command.service,
# which runs COMMAND (cwd the checkout, ENGRAM_SYSTEMD_VM=1, ENGRAM_SYSTEMD_VM_OUT=OUT), writes its exit code to OUT
# and powers the guest off (`systemctl poweroff -ff` after a sync: OUT is written through). The units are written
# into OUT/.etc and copied into the overlay's /etc by the init, so that a change to them needs no new initramfs. systemd.volatile=overlay is not used:
# it needs systemd in the initramfs.
#
# TCG (KVM aborts on these machines: numa-vm.sh, "The accelerator"); SYSD_VM_ACCEL=kvm tries KVM without a fallback.
# Environment: SYSD_VM_OUT a host folder for the outputs (default: a temporary one, removed on exit; the guest's
#              console is OUT/console.log); SYSD_VM_TIMEOUT seconds before the guest is killed (default 1200; exit
#              124); SYSD_VM_MB, SYSD_VM_CPUS, SYSD_VM_ACCEL; SYSD_VM_INIT (default /lib/systemd/systemd).
# Needs root, qemu-system-x86, busybox-static, cpio and kmod (installed with apt-get when missing, as numa-vm.sh).
# Exit status: COMMAND's; 124 on timeout; 125 when the guest could not be booted or gave no exit code.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: scripts/systemd/systemd-vm.sh COMMAND [ARGS...]" >&2; exit 2; }
CACHE=${NUMA_VM_CACHE:-/var/cache/engram-numa-vm}
MB=${SYSD_VM_MB:-2048}
CPUS=${SYSD_VM_CPUS:-1}
TIMEOUT=${SYSD_VM_TIMEOUT:-1200}
ACCEL=${SYSD_VM_ACCEL:-tcg}
GUEST_INIT=${SYSD_VM_INIT:-/lib/systemd/systemd}
say() { echo "systemd-vm: $*" >&2; }
die() { say "$*"; exit 125; }
. "$ROOT/scripts/lib/qemu-guest.sh"   # qg_need_tools, qg_kernel, qg_initrd, qg_9p_args (shared with the other guests)
[ -x "$GUEST_INIT" ] || die "$GUEST_INIT: no such executable on the host (the guest runs the host's root)"

qg_need_tools

# Debian's kernel, as numa-vm.sh caches it (same folder, same layout)
qg_kernel "$CACHE"
KVER=$QG_KVER KERNEL=$QG_KERNEL

# --- the initramfs: busybox, the modules for 9p and overlayfs, and /init --------------------------------------------
MODS=(virtio_pci 9pnet_virtio 9p overlay)
INITRD="$CACHE/initrd-systemd-$KVER.cpio.gz"
INIT_SRC=$(cat <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
fail() { echo "init: $*"; sleep 1; poweroff -f; }
arg() { sed -n "s/.*[ ^]$1=\([^ ]*\).*/\1/p" /proc/cmdline | head -1; }
for m in $(cat /modules.order); do insmod "/lib/modules/$m" || echo "init: insmod $m failed"; done
o9p=trans=virtio,version=9p2000.L,msize=524288
mkdir -p /lower /rw /newroot
mount -t 9p -o "$o9p,ro,cache=loose" hostroot /lower || fail "no 9p root"
mount -t tmpfs -o mode=0755 tmpfs /rw && mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot || fail "no overlay over the 9p root"
repo=$(arg sysd_vm_repo); out=$(arg sysd_vm_out); cache=$(arg sysd_vm_cache); init=$(arg init)
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
mkdir -p "/newroot$repo" "/newroot$out"
mount -t 9p -o "$o9p,ro,cache=loose" repo "/newroot$repo" || fail "no repository share"
mount -t 9p -o "$o9p" out "/newroot$out" || fail "no out share"
kv=$(uname -r)
mkdir -p "/newroot/lib/modules/$kv"
mount --bind "/newroot$cache/k/lib/modules/$kv" "/newroot/lib/modules/$kv" || echo "init: no modules for $kv"
cp -a "/newroot$out/.etc/." /newroot/etc/ || fail "no units in $out/.etc"
# the host may be a container (/.dockerenv): systemd would then take itself for a container's init, which ignores
# the kernel's command line (systemd.unit=) and changes much else
rm -f /newroot/.dockerenv /newroot/run/.containerenv
cut -d' ' -f1 /proc/uptime > "/newroot$out/.booted"
for d in dev proc sys; do mount --move "/$d" "/newroot/$d"; done
exec switch_root /newroot "${init:-/lib/systemd/systemd}" --unit=engram-vm.target
INIT
)
qg_initrd "$INITRD" "$INIT_SRC" "${MODS[@]}"

# --- the guest's units ------------------------------------------------------------------------------------------------
KEEP_OUT=1
if [ -n "${SYSD_VM_OUT:-}" ]; then
  OUT=$(mkdir -p "$SYSD_VM_OUT" && cd "$SYSD_VM_OUT" && pwd)
else
  OUT=$(mktemp -d /tmp/systemd-vm-out.XXXXXX); KEEP_OUT=0
fi
rm -rf "$OUT/.rc" "$OUT/.booted" "$OUT/.etc"
U="$OUT/.etc/systemd/system"
mkdir -p "$U"
cat > "$U/engram-vm.target" <<EOF
[Unit]
Description=engram-host's systemd guest: sysinit, then the command
Requires=sysinit.target engram-vm-command.service
After=sysinit.target engram-vm-command.service
AllowIsolate=yes
EOF
cat > "$U/engram-vm-command.service" <<EOF
[Unit]
Description=the command of scripts/systemd/systemd-vm.sh
After=sysinit.target
[Service]
Type=oneshot
WorkingDirectory=$ROOT
Environment=ENGRAM_SYSTEMD_VM=1 ENGRAM_SYSTEMD_VM_OUT=$OUT HOME=/root LANG=C.UTF-8 TERM=dumb
ExecStart=/bin/sh -c 'bash $OUT/.cmd; echo \$? > $OUT/.rc; sync; systemctl poweroff --force --force'
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity
# (SuccessAction=poweroff-immediate did not power the guest off under systemd 252 here; systemctl -ff does: reboot(2))
EOF
# units of the host's root that have nothing to do in the guest (no network, no persistent store)
for u in systemd-pstore.service systemd-timesyncd.service getty@tty1.service console-getty.service; do ln -sfn /dev/null "$U/$u"; done
: > "$OUT/.etc/fstab"
{ echo "export PATH=$(printf %q "$PATH")"; printf 'exec'; printf ' %q' "$@"; echo; } > "$OUT/.cmd"

QPID= CON=
cleanup() {
  if [ -n "$QPID" ]; then kill "$(cat "$CON/qemu.pid" 2>/dev/null)" 2>/dev/null || true; wait "$QPID" 2>/dev/null || true; fi
  [ -z "$CON" ] || rm -rf "$CON"
  rm -rf "$OUT/.cmd" "$OUT/.rc" "$OUT/.booted" "$OUT/.etc"
  [ "$KEEP_OUT" = 1 ] || rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
CON=$(mktemp -d /tmp/systemd-vm-con.XXXXXX)
qg_9p_args "$ROOT" "$OUT"
QEMU=(qemu-system-x86_64 -accel "$ACCEL" -cpu max -M q35 -m "${MB}M" -smp "$CPUS"
  -kernel "$KERNEL" -initrd "$INITRD" "${QG_9P[@]}" "${QG_QEMU_TAIL[@]}")
APPEND="console=ttyS0 panic=-1 printk.time=1 mitigations=off tsc=reliable quiet loglevel=3 init=$GUEST_INIT
  systemd.unit=engram-vm.target systemd.show_status=${SYSD_VM_SHOW_STATUS:-auto} systemd.firstboot=0 sysd_vm_out=$OUT sysd_vm_repo=$ROOT
  sysd_vm_cache=$CACHE"
APPEND=$(echo $APPEND)
say "guest: $KVER, $ACCEL, ${MB} MiB, $CPUS CPU(s), init $GUEST_INIT ($("$GUEST_INIT" --version | head -1)); $(qemu-system-x86_64 --version | head -1)"
t0=$(date +%s.%N)
: > "$OUT/console.log"
( "${QEMU[@]}" -append "$APPEND" </dev/null >>"$OUT/console.log" & echo $! > "$CON/qemu.pid"; wait $! ) 2>"$CON/qemu.err" &
QPID=$!
tail -s 0.5 -n +1 -f --pid="$QPID" "$OUT/console.log" | sed -u 's/\r$//' &
start=$(date +%s); qrc=
while kill -0 "$QPID" 2>/dev/null; do
  if [ $(( $(date +%s) - start )) -ge "$TIMEOUT" ]; then
    qrc=124; kill -TERM "$(cat "$CON/qemu.pid")" 2>/dev/null || true; sleep 5; kill -KILL "$(cat "$CON/qemu.pid")" 2>/dev/null || true
    break
  fi
  sleep 0.5
done
set +e; wait "$QPID"; rc=$?; set -e
QPID=
qrc=${qrc:-$rc}
cat "$CON/qemu.err" >&2
ran=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}')
say "guest ran $ran s under $ACCEL (the init at $(cat "$OUT/.booted" 2>/dev/null || echo '?') s of guest uptime)"
[ "$qrc" = 124 ] && { say "timed out after $TIMEOUT s"; exit 124; }
[ -f "$OUT/.rc" ] || die "the guest gave no exit code (qemu exit $qrc); its console: $OUT/console.log"
exit "$(cat "$OUT/.rc")"

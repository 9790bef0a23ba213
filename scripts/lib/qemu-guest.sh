# shellcheck shell=bash
# What the project's QEMU guests share, sourced by scripts/numa/numa-vm.sh, scripts/systemd/systemd-vm.sh and
# scripts/containers/podman-vm.sh (each keeps its own /init, boot and accelerator logic):
#   qg_need_tools           installs with apt-get what is missing of qemu-system-x86, busybox-static, cpio and kmod
#                           (root needed for that; nothing is installed when all is present)
#   qg_kernel CACHE         Debian's kernel, the package linux-image-amd64 depends on, unpacked (not installed) into
#                           CACHE/k once; sets QG_CACHE, QG_KVER and QG_KERNEL (the host's /boot is not touched)
#   qg_initrd INITRD INIT MODULE...   the initramfs: busybox (from busybox-static), the MODULEs with what they depend
#                           on (in modprobe's order), and INIT (the text of /init); rebuilt only when INIT or the
#                           MODULEs changed (INITRD.stamp), so each guest's cache stays valid
#   qg_9p_args ROOT OUT     sets QG_9P: the host's root read-only (mount tag hostroot), the checkout ROOT read-only
#                           (repo) and OUT read-write (out), over virtio-9p
#   QG_QEMU_TAIL            the devices and options every guest has: no defaults, the console on stdio, no network
# The caller defines say and die (one line each on stderr; die exits).

qg_need_tools() {
  local need=()
  command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
  dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || need+=(busybox-static)
  command -v cpio >/dev/null 2>&1 || need+=(cpio)
  command -v depmod >/dev/null 2>&1 || need+=(kmod)
  [ ${#need[@]} -gt 0 ] || return 0
  [ "$(id -u)" = 0 ] || die "missing ${need[*]}; install them (apt-get install ${need[*]}) or run as root"
  say "installing: ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq -o DPkg::Lock::Timeout=300 >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${need[@]}" >/dev/null
}

qg_kernel() {
  local cache=$1 kdir pkg dl
  QG_CACHE=$cache
  mkdir -p "$cache"
  kdir=$(ls -d "$cache"/k/lib/modules/*-amd64 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$kdir" ]; then
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -1)
    if [ -z "$pkg" ]; then
      apt-get update -qq -o DPkg::Lock::Timeout=300 >/dev/null
      pkg=$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -1)
    fi
    [ -n "$pkg" ] || die "cannot tell which kernel package linux-image-amd64 depends on"
    say "downloading $pkg into $cache"
    dl=$(mktemp -d "$cache/dl.XXXXXX")
    (cd "$dl" && chmod 777 . && apt-get download -qq "$pkg")
    rm -rf "$cache/k.new" && dpkg -x "$dl"/*.deb "$cache/k.new" && rm -rf "$dl" "$cache/k" && mv "$cache/k.new" "$cache/k"
    kdir=$(ls -d "$cache"/k/lib/modules/*-amd64 | sort -V | tail -1)
  fi
  QG_KVER=$(basename "$kdir")
  QG_KERNEL="$cache/k/boot/vmlinuz-$QG_KVER"
  [ -f "$kdir/modules.dep" ] || depmod -b "$cache/k" "$QG_KVER"
}

qg_initrd() {  # INITRD INIT_SRC MODULE...; after qg_kernel (its QG_CACHE and QG_KVER)
  local initrd=$1 init_src=$2 stamp ird m ko b
  shift 2
  stamp=$(printf '%s\n%s\n' "$init_src" "$*" | sha256sum | cut -c1-12)
  [ -f "$initrd" ] && [ "$(cat "$initrd.stamp" 2>/dev/null)" = "$stamp" ] && return 0
  ird=$(mktemp -d)
  mkdir -p "$ird"/{bin,proc,sys,dev,lib/modules}
  cp /bin/busybox "$ird/bin/busybox"
  printf '%s\n' "$init_src" > "$ird/init" && chmod 755 "$ird/init"
  # each module after what it depends on (modules.dep lists dependencies; modprobe --show-depends orders them)
  : > "$ird/modules.order"
  for m in "$@"; do
    modprobe -d "$QG_CACHE/k" -S "$QG_KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}' | while read -r ko; do
      b=$(basename "$ko")
      grep -qx "$b" "$ird/modules.order" || { cp "$ko" "$ird/lib/modules/$b"; echo "$b" >> "$ird/modules.order"; }
    done
  done
  (cd "$ird" && find . | cpio -o -H newc --quiet | gzip -1) > "$initrd.new" && mv "$initrd.new" "$initrd"
  echo "$stamp" > "$initrd.stamp"
  rm -rf "$ird"
}

qg_9p_args() {  # ROOT OUT
  QG_9P=(-fsdev "local,id=root,path=/,security_model=none,readonly=on,multidevs=remap"
    -device virtio-9p-pci,fsdev=root,mount_tag=hostroot
    -fsdev "local,id=repo,path=$1,security_model=none,readonly=on,multidevs=remap"
    -device virtio-9p-pci,fsdev=repo,mount_tag=repo
    -fsdev "local,id=out,path=$2,security_model=none,multidevs=remap"
    -device virtio-9p-pci,fsdev=out,mount_tag=out)
}
QG_QEMU_TAIL=(-nodefaults -no-user-config -display none -serial stdio -no-reboot -net none)

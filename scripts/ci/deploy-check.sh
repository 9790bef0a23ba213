#!/usr/bin/env bash
# CI check of the deployment recipes (deploy/):
#   1. systemd: `systemd-analyze verify` of deploy/systemd/engram-host.service against an unpacked release tarball, so
#      that ExecStart names a real executable. The unit names /opt/engram-host; a temporary copy has that prefix
#      rewritten (sed) to where the tarball was unpacked. Any output of systemd-analyze (it only warns, exit 0, for
#      an unknown key in systemd 252) fails the check, as does a RuntimeDirectoryMode the daemon would refuse.
#      The drop-in engram-host.service.d/fdstore-preserve.conf (FileDescriptorStorePreserve=yes, systemd 254+) is
#      verified with the unit: on systemd >= 254 any output fails; on an older one the only output allowed is the
#      one line saying that FileDescriptorStorePreserve is an unknown key, and the drop-in may hold nothing else.
#      The unit must be Type=notify with an fd store (docs/upgrade.md, "Under systemd: the fd store").
#      The seeding drop-in deploy/systemd/seed/seed.conf is verified with the unit too (any output fails), and its
#      ExecStart must be the unit's with $ENGRAM_HOST_SEED_FLAGS after $ENGRAM_HOST_FLAGS.
#   2. Kubernetes: every deploy/kubernetes/**/*.yaml against the Kubernetes schemas, offline, with unknown fields
#      refused (deploy/kubernetes/check/validate.mjs; `npm ci` there once, into its git-ignored node_modules).
#   3. Containers: the two Pods scripts/containers/podman-scenario.sh plays (the DaemonSet's template as a Pod, and
#      engine-example.yaml; written by scripts/containers/kube-pods.sh) validate as in 2, and differ from the
#      manifests only by their images and the checkpoint's hostPath; bash -n of the scenario's scripts.
#   4. Slurm: bash -n of deploy/slurm/*.sh.
# The tarball: the newest dist/engram-host-*.tar.gz, else scripts/release/dist.sh builds one from what `mvn package` built.
# Usage: scripts/ci/deploy-check.sh [TARBALL]   (prints its duration at the end)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
t0=$(date +%s)
step() { echo "== $* ($(($(date +%s) - t0)) s)"; }
fail() { echo "deploy-check: FAILED: $*" >&2; exit 1; }

for tool in systemd-analyze node npm; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is missing (Debian: apt-get install systemd nodejs npm; .ci/run does)"
done

if [ $# -ge 1 ]; then
  tarball=$1
else
  tarball=$(ls -t dist/engram-host-*-linux-x86_64.tar.gz 2>/dev/null | head -1 || true)
  if [ -z "$tarball" ]; then
    step "no tarball in dist/: scripts/release/dist.sh"
    if ! ls engram-host/cli/target/app/lib/engram-cli-*.jar >/dev/null 2>&1; then
      mvn -B -ntp -q -DskipTests package
    fi
    scripts/release/dist.sh
    tarball=$(ls -t dist/engram-host-*-linux-x86_64.tar.gz | head -1)
  fi
fi
[ -f "$tarball" ] || fail "no tarball at $tarball"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

step "systemd: unpacking $(basename "$tarball")"
mkdir -p "$tmp/opt"
tar -xzf "$tarball" -C "$tmp/opt"
home=$(ls -d "$tmp"/opt/engram-host-*)
[ -x "$home/bin/engram-host" ] || fail "no bin/engram-host in $tarball"
unit=deploy/systemd/engram-host.service
grep -q '^ExecStart=/opt/engram-host/bin/engram-host serve ' "$unit" || fail "$unit: ExecStart must run /opt/engram-host/bin/engram-host serve"
mkdir -p "$tmp/units"
sed "s|/opt/engram-host|$home|g" "$unit" > "$tmp/units/engram-host.service"
step "systemd: systemd-analyze verify (ExecStart: $home/bin/engram-host)"
set +e
out=$(SYSTEMD_LOG_COLOR=0 systemd-analyze verify --man=no "$tmp/units/engram-host.service" 2>&1)
rc=$?
set -e
if [ $rc -ne 0 ] || [ -n "$out" ]; then
  printf '%s\n' "$out" | sed "s|$tmp/units/||" >&2
  fail "systemd-analyze verify $unit: exit $rc, $(printf '%s\n' "$out" | grep -c .) lines of output"
fi
# What the daemon accepts for the socket directory (docs/security.md): owned by root, 0700 or 0755 (0755 so that
# uids admitted with --allow-uid reach the socket); never writable by group or others.
mode=$(sed -n 's/^RuntimeDirectoryMode=//p' "$unit")
grep -qx 'RuntimeDirectory=engram-host' "$unit" || fail "$unit: RuntimeDirectory=engram-host is missing"
case "$mode" in 0700|0755) ;; *) fail "$unit: RuntimeDirectoryMode=$mode: the daemon wants 0700 or 0755" ;; esac
grep -q -- '--socket /run/engram-host/' "$unit" || fail "$unit: the socket is not in the RuntimeDirectory"
grep -qx 'Type=notify' "$unit" || fail "$unit: Type=notify is missing (the daemon sends READY=1)"
grep -qx 'NotifyAccess=main' "$unit" || fail "$unit: NotifyAccess=main is missing"
grep -qx 'RuntimeDirectoryPreserve=restart' "$unit" || fail "$unit: RuntimeDirectoryPreserve=restart is missing (the socket file must outlive a restart)"
store=$(sed -n 's/^FileDescriptorStoreMax=//p' "$unit")
case "$store" in ''|*[!0-9]*) fail "$unit: FileDescriptorStoreMax= must be a number, got '$store'" ;; esac
[ "$store" -ge 3 ] || fail "$unit: FileDescriptorStoreMax=$store: the daemon needs regions + 2 (at least 3)"
echo "   ok (RuntimeDirectoryMode=$mode, Type=notify, FileDescriptorStoreMax=$store)"

dropin=deploy/systemd/engram-host.service.d/fdstore-preserve.conf
version=$(systemd-analyze --version | sed -n '1s/^systemd \([0-9]*\).*/\1/p')
step "systemd: the unit with $dropin (systemd $version)"
[ -f "$dropin" ] || fail "$dropin is missing"
body=$(grep -v '^[[:space:]]*\(#\|$\)' "$dropin")
[ "$body" = "$(printf '[Service]\nFileDescriptorStorePreserve=yes')" ] \
  || fail "$dropin must hold [Service] and FileDescriptorStorePreserve=yes only (what the systemd < 254 check allows)"
mkdir -p "$tmp/units2/engram-host.service.d"
cp "$tmp/units/engram-host.service" "$tmp/units2/"
cp "$dropin" "$tmp/units2/engram-host.service.d/"
set +e
out=$(SYSTEMD_LOG_COLOR=0 systemd-analyze verify --man=no "$tmp/units2/engram-host.service" 2>&1)
rc=$?
set -e
out=$(printf '%s\n' "$out" | sed "s|$tmp/units2/||")
allowed="engram-host.service.d/fdstore-preserve.conf:$(grep -n '^FileDescriptorStorePreserve=' "$dropin" | cut -d: -f1): Unknown key 'FileDescriptorStorePreserve' in section [Service], ignoring."
[ -n "$version" ] || fail "cannot tell the version of systemd-analyze"
if [ "$version" -ge 254 ]; then
  [ $rc -eq 0 ] && [ -z "$out" ] || { printf '%s\n' "$out" >&2; fail "systemd-analyze verify with $dropin: exit $rc"; }
  echo "   ok (systemd $version knows FileDescriptorStorePreserve=)"
else
  [ $rc -eq 0 ] && [ "$out" = "$allowed" ] || { printf '%s\n' "$out" >&2; fail "systemd-analyze verify with $dropin: exit $rc; systemd $version may only warn that FileDescriptorStorePreserve is unknown"; }
  echo "   ok (systemd $version < 254: only FileDescriptorStorePreserve= is unknown, as expected)"
fi

seed=deploy/systemd/seed/seed.conf
step "systemd: the unit with $seed (seeding)"
[ -f "$seed" ] && [ -f deploy/systemd/seed/seed.env ] || fail "$seed or deploy/systemd/seed/seed.env is missing"
grep -q '^ExecStart=/opt/engram-host/bin/engram-host serve .*\$ENGRAM_HOST_FLAGS \$ENGRAM_HOST_SEED_FLAGS$' "$seed" \
  || fail "$seed: ExecStart must be the unit's, with \$ENGRAM_HOST_SEED_FLAGS after \$ENGRAM_HOST_FLAGS"
[ "$(sed -n 's/^ExecStart=\(.*\) \$ENGRAM_HOST_SEED_FLAGS$/\1/p' "$seed")" = "$(sed -n 's/^ExecStart=//p' "$unit")" ] \
  || fail "$seed: its ExecStart is not the unit's ($unit) with \$ENGRAM_HOST_SEED_FLAGS added"
grep -q '^ENGRAM_HOST_SEED_FLAGS=.*--seed-key ' deploy/systemd/seed/seed.env || fail "seed.env: no --seed-key"
mkdir -p "$tmp/units3/engram-host.service.d"
cp "$tmp/units/engram-host.service" "$tmp/units3/"
sed "s|/opt/engram-host|$home|g" "$seed" > "$tmp/units3/engram-host.service.d/seed.conf"
set +e
out=$(SYSTEMD_LOG_COLOR=0 systemd-analyze verify --man=no "$tmp/units3/engram-host.service" 2>&1)
rc=$?
set -e
[ $rc -eq 0 ] && [ -z "$out" ] || { printf '%s\n' "$out" | sed "s|$tmp/units3/||" >&2; fail "systemd-analyze verify with $seed: exit $rc"; }
echo "   ok (ExecStart is the unit's with \$ENGRAM_HOST_SEED_FLAGS; After=network-online.target)"

step "kubernetes: npm ci"
check=deploy/kubernetes/check
if [ ! -f "$check/node_modules/.package-lock.json" ] || ! cmp -s "$check/package-lock.json" "$check/node_modules/.lock-copy"; then
  (cd "$check" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  cp "$check/package-lock.json" "$check/node_modules/.lock-copy"
else
  echo "   node_modules is current"
fi
step "kubernetes: schemas and unknown fields"
mapfile -t manifests < <(find deploy/kubernetes -name node_modules -prune -o -name '*.yaml' -print | LC_ALL=C sort)
[ ${#manifests[@]} -gt 0 ] || fail "no manifests under deploy/kubernetes"
node "$check/validate.mjs" "${manifests[@]}" || fail "the Kubernetes manifests do not validate"

step "containers: the Pods podman kube play gets (scripts/containers/kube-pods.sh), against the same schemas"
# the guest that plays them (scripts/containers/podman-scenario.sh kube) takes minutes and is not run here
pods=$(mktemp -d) && trap 'rm -rf "$tmp" "$pods"' EXIT
scripts/containers/kube-pods.sh "$pods" /checkpoint-of-the-scenario > "$pods/diff.txt" || fail "scripts/containers/kube-pods.sh failed"
changed=$(grep -c '^changed in [^:]*: [<>]' "$pods/diff.txt" || true)
[ "$changed" = 6 ] || { cat "$pods/diff.txt" >&2; fail "kube-pods.sh changed $changed lines of the manifests, not the 2 images and the checkpoint path (3 substitutions, 2 diff lines each)"; }
node "$check/validate.mjs" "$pods/daemon-pod.yaml" "$pods/engine.yaml" || fail "the Pods that podman kube play gets do not validate"
for s in scripts/containers/*.sh; do bash -n "$s" || fail "$s does not parse"; done
echo "   ok: $(wc -l < "$pods/daemon-pod.yaml") + $(wc -l < "$pods/engine.yaml") lines, as played; scripts/containers/*.sh parse"

step "slurm: bash -n"
for s in deploy/slurm/*.sh; do
  bash -n "$s" || fail "$s does not parse"
  echo "   $s ok"
done

echo "deploy-check: ok in $(($(date +%s) - t0)) s"

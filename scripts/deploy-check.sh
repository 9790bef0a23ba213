#!/usr/bin/env bash
# CI check of the deployment recipes (deploy/):
#   1. systemd: `systemd-analyze verify` of deploy/systemd/engram-host.service against an unpacked release tarball, so
#      that ExecStart names a real executable. The unit names /opt/engram-host; a temporary copy has that prefix
#      rewritten (sed) to where the tarball was unpacked. Any output of systemd-analyze (it only warns, exit 0, for
#      an unknown key in systemd 252) fails the check, as does a RuntimeDirectoryMode the daemon would refuse.
#   2. Kubernetes: every deploy/kubernetes/**/*.yaml against the Kubernetes schemas, offline, with unknown fields
#      refused (deploy/kubernetes/check/validate.mjs; `npm ci` there once, into its git-ignored node_modules).
#   3. Slurm: bash -n of deploy/slurm/*.sh.
# The tarball: the newest dist/engram-host-*.tar.gz, else scripts/dist.sh builds one from what `mvn package` built.
# Usage: scripts/deploy-check.sh [TARBALL]   (prints its duration at the end)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
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
    step "no tarball in dist/: scripts/dist.sh"
    if ! ls engram-host/cli/target/app/lib/engram-cli-*.jar >/dev/null 2>&1; then
      mvn -B -ntp -q -DskipTests package
    fi
    scripts/dist.sh
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
echo "   ok (RuntimeDirectoryMode=$mode)"

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

step "slurm: bash -n"
for s in deploy/slurm/*.sh; do
  bash -n "$s" || fail "$s does not parse"
  echo "   $s ok"
done

echo "deploy-check: ok in $(($(date +%s) - t0)) s"

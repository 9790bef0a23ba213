#!/usr/bin/env bash
# The Java runtime engram-host ships where there is no Java: one list of JDK modules and one jlink call, for
# scripts/gpu/gpu-bundle.sh (the GPU test bundle) and scripts/release/dist.sh (the release tarball).
#
# Modules: those jdeps finds in the given jars, always including java.base, java.logging, java.management,
# java.naming and jdk.unsupported (jnr reaches some of them only by reflection, and so does Chronicle in the GPU
# test bundle; the release bundles no Chronicle), and never java.desktop: only Chronicle's CPU-cooler toy
# (java.beans) and JNA's AWT helpers reference it, and no path of engram-host reaches them (the GPU test runs use
# a runtime without it: bench/gpu-runs.md). serve --metrics-port's HTTP server is Netty's (io.netty, whose jars jdeps
# reads like the others): it needs jdk.unsupported and java.logging, both listed. jdk.crypto.ec is always in too:
# TLS of the seed channel (serve --seed-tls-*) takes EC certificates and EC key exchange from its SunEC provider,
# which the JDK finds as a service, so jdeps cannot see it.
#
# Usage: scripts/release/jlink-runtime.sh [--print] [--add MODULE,...] [--compress N] OUTPUT_DIR JAR...
#   --print      only print the module list (comma-separated) and make nothing
#   --add        more modules (e.g. java.xml for the JUnit reports of the GPU bundle)
#   --compress   jlink's --compress level (default 0: the release's tar.gz compresses it anyway, and an
#                uncompressed modules file starts faster)
set -euo pipefail
print=0
add=""
compress=0
while [ $# -gt 0 ]; do
  case "$1" in
    --print) print=1; shift ;;
    --add) add="$2"; shift 2 ;;
    --compress) compress="$2"; shift 2 ;;
    *) break ;;
  esac
done
if [ "$print" = 0 ]; then
  [ $# -ge 2 ] || { echo "usage: $0 [--print] [--add MODULE,...] [--compress N] OUTPUT_DIR JAR..." >&2; exit 2; }
  out="$1"; shift
else
  [ $# -ge 1 ] || { echo "usage: $0 --print [--add MODULE,...] JAR..." >&2; exit 2; }
fi
found=$(jdeps --ignore-missing-deps --print-module-deps --multi-release 17 "$@")
modules=$(printf '%s\n' java.base java.logging java.management java.naming jdk.unsupported jdk.crypto.ec ${found//,/ } \
  ${add//,/ } \
  | grep -vx java.desktop | sort -u | paste -sd, -)
if [ "$print" = 1 ]; then
  echo "$modules"
  exit 0
fi
rm -rf "$out"
jlink --add-modules "$modules" --compress="$compress" --no-header-files --no-man-pages --strip-debug --output "$out"

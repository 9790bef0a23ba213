#!/usr/bin/env bash
# On the GPU machine: makes the gpu bundle (scripts/gpu/gpu-bundle.sh) stand where scripts/gpu/gpu-seed-run.sh looks
# for the release (/var/tmp/engram-seed/engram-host), so that one device call with .bundle carried runs both the
# gpu-tagged tests and a seed run (the tarball and the bundle together are over the 64 MiB a call may carry).
#   bash scripts/gpu/bundle-as-release.sh [BUNDLE_DIR]     (default .bundle)
set -euo pipefail
B=$(cd "${1:-.bundle}" && pwd)
W=/var/tmp/engram-seed
. "$(dirname "$0")/../lib/own-dir.sh"
own_dir "$W" bundle-as-release   # gpu-seed-run.sh's directory, marked as made by these scripts
mkdir -p "${WORK:-/tmp/engram-gpu}" "$W/engram-host/bin"
[ -x "${WORK:-/tmp/engram-gpu}/jre/bin/java" ] || tar -C "${WORK:-/tmp/engram-gpu}" -xzf "$B/jre.tar.gz"
printf '#!/bin/sh\nexec %s/engram-host "$@"\n' "$B" > "$W/engram-host/bin/engram-host"
printf '#!/bin/sh\nexec %s/engram-attach "$@"\n' "$B" > "$W/engram-host/bin/engram-attach"
chmod +x "$W/engram-host/bin/engram-host" "$W/engram-host/bin/engram-attach"
ln -sfn "$B/python" "$W/engram-host/python"
echo "the gpu bundle of commit $(cat "$B/COMMIT" 2>/dev/null), not the release tarball" > "$W/engram-host/BUILD"

# Sourced by the systemd scenarios on the host (not in the guest): prepare_out DIR makes DIR the run's output (a
# new or empty directory, or one an earlier scenario run made: it holds .engram-scenario-run; anything else is
# refused, so a run never empties a directory of the user's), copies the newest release tarball into it
# (scripts/release/dist.sh builds one when there is none) and unpacks it; it sets OUT, TARBALL and EH (that
# release's bin/engram-host, in a temporary directory removed at exit).
prepare_out() {
  local dir=$1
  mkdir -p "$dir"
  OUT=$(cd "$dir" && pwd)
  if [ -n "$(ls -A "$OUT")" ] && [ ! -e "$OUT/.engram-scenario-run" ]; then
    echo "$(basename "$0"): $OUT holds files no scenario run made: give a new or empty directory" >&2
    exit 2
  fi
  cd "$ROOT"
  TARBALL=$(ls -t dist/engram-host-*-linux-x86_64.tar.gz 2>/dev/null | head -1 || true)
  [ -n "$TARBALL" ] || { scripts/release/dist.sh; TARBALL=$(ls -t dist/engram-host-*-linux-x86_64.tar.gz | head -1); }
  rm -rf "${OUT:?}"/* && mkdir -p "$OUT/models" && touch "$OUT/.engram-scenario-run"
  cp "$TARBALL" "$OUT/"
  SCENARIO_WORK=$(mktemp -d) && trap 'rm -rf "$SCENARIO_WORK"' EXIT
  tar -xzf "$TARBALL" -C "$SCENARIO_WORK"
  EH=$(ls -d "$SCENARIO_WORK"/engram-host-*/bin/engram-host)
}

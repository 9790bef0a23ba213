#!/bin/sh
# PID 1 of the daemon's container in scripts/containers/podman-scenario.sh: starts `engram-host serve ARGS`, keeps the
# container up while a daemon serves (the first, or a successor that took over with `serve --takeover`, started by
# `podman exec`), and passes SIGTERM on to every daemon in the container. Exits with the first daemon's status once
# no daemon is left.
serving() {  # the pids of `engram-host serve` processes in this container (this script's is not one)
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = "$$" ] && continue
    case $(tr '\0' ' ' < "$p/cmdline" 2>/dev/null) in *io.engramhost.cli.Main*serve*) echo "${p#/proc/}" ;; esac
  done
}
trap 'for p in $(serving); do kill -TERM "$p"; done' TERM INT
/opt/engram-host/bin/engram-host serve "$@" &
first=$!
wait $first; rc=$?
while [ -n "$(serving)" ]; do sleep 1; done
wait $first 2>/dev/null && rc=0 || true
exit $rc

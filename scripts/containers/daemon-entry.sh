#!/bin/sh
# PID 1 of the daemon's container in scripts/containers/podman-scenario.sh: starts `engram-host serve ARGS`, keeps the
# container up while a daemon serves (the first, or a successor that took over with `serve --takeover`, started on
# SIGUSR1 to this PID 1, i.e. `podman kill -s USR1 CONTAINER`), and passes SIGTERM on to every daemon in the container.
# On SIGUSR1 it starts `engram-host serve ARGS --takeover`, its output in the container's log too. Exits with the first
# daemon's status once no daemon is left.
serving() {  # the pids of `engram-host serve` processes in this container (this script's is not one)
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = "$$" ] && continue
    case $(tr '\0' ' ' < "$p/cmdline" 2>/dev/null) in *io.engramhost.cli.Main*serve*) echo "${p#/proc/}" ;; esac
  done
}
trap 'for p in $(serving); do kill -TERM "$p"; done' TERM INT
trap '/opt/engram-host/bin/engram-host serve "$@" --takeover 1>&2 &' USR1
/opt/engram-host/bin/engram-host serve "$@" &
first=$!
while :; do wait $first; rc=$?; [ $rc -gt 128 ] && kill -0 $first 2>/dev/null || break; done  # a trap ends wait
while [ -n "$(serving)" ]; do sleep 1; done
exit $rc

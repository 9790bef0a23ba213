#!/usr/bin/env bash
# An example Slurm batch script: one engram-host daemon per node for the length of the job, then the engine steps.
# Submit with: sbatch --nodes=2 deploy/slurm/engram-host-job.sh
# Set ENGRAM_HOST_HOME (the unpacked release tarball), ENGRAM_HOST_CHECKPOINT and, optionally, ENGRAM_HOST_FLAGS.
#SBATCH --job-name=engram-engine
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
set -euo pipefail

ENGRAM_HOST_HOME=${ENGRAM_HOST_HOME:-/opt/engram-host}
ENGRAM_HOST_CHECKPOINT=${ENGRAM_HOST_CHECKPOINT:?set ENGRAM_HOST_CHECKPOINT to the checkpoint path}
ENGRAM_HOST_FLAGS=${ENGRAM_HOST_FLAGS:---backend memfd --numa auto}
engram=$ENGRAM_HOST_HOME/bin/engram-host

# One socket per job, in a directory of the job's user: /tmp/engram-host-<uid> is what the daemon uses for a user
# without XDG_RUNTIME_DIR, created 0700 (docs/security.md). Every step of the job inherits this variable, and
# the clients (Java, Python, C) read it when given no --socket.
export ENGRAM_HOST_SOCKET=/tmp/engram-host-$(id -u)/$SLURM_JOB_ID.sock

# The daemon: one task per node, overlapping the engine steps (--overlap) so they can run on the same nodes.
# shellcheck disable=SC2086
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --overlap --kill-on-bad-exit=0 \
  "$engram" serve --checkpoint "$ENGRAM_HOST_CHECKPOINT" $ENGRAM_HOST_FLAGS &
daemons=$!

stop_daemons() {
  # `stop` on every node: leases are closed and the tables freed; engines that still run keep their mappings.
  srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --overlap "$engram" stop >/dev/null 2>&1 || true
  wait "$daemons" 2>/dev/null || true
}
trap stop_daemons EXIT

# Wait until every node's daemon is ready (the load can take minutes). status --ready exits 0 only then.
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --overlap bash -c '
  for _ in $(seq 3600); do
    "$1" status --ready --timeout-ms 2000 && exit 0
    sleep 1
  done
  echo "engram-host on $(hostname) not ready after an hour" >&2
  exit 1' sh "$engram"

# The engine steps: they find the socket through ENGRAM_HOST_SOCKET. Replace with your engine.
srun --overlap "$engram" import --json

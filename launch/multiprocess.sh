#!/usr/bin/env bash
# N processes on one or more machines without a scheduler (also the local CPU test of multi-host code).
#
#   NUM_PROCESSES=2 COORDINATOR=localhost:12355 launch/multiprocess.sh configs/at_bible_tiny.py runs/mp
#
# On several machines run it on each with PROCESS_IDS set to that machine's ids (e.g. "2 3") and
# COORDINATOR pointing at the machine of process 0. Logs go to WORKDIR/process_<id>.log.
set -euo pipefail
CONFIG=${1:?usage: launch/multiprocess.sh CONFIG WORKDIR [--config.key=value ...]}
WORKDIR=${2:?workdir required}
shift 2
NUM_PROCESSES=${NUM_PROCESSES:-2}
COORDINATOR=${COORDINATOR:-localhost:12355}
PROCESS_IDS=${PROCESS_IDS:-$(seq 0 $((NUM_PROCESSES - 1)))}
mkdir -p "$WORKDIR"
pids=()
for id in $PROCESS_IDS; do
  python -m nat_jax.train --config="$CONFIG" --workdir="$WORKDIR" --coordinator_address="$COORDINATOR" \
      --num_processes="$NUM_PROCESSES" --process_id="$id" "$@" >"$WORKDIR/process_$id.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
tail -n 20 "$WORKDIR/process_0.log"
exit $status

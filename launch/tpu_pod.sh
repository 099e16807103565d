#!/usr/bin/env bash
# Train on every worker of a Cloud TPU VM pod slice with the same command as on a laptop.
#
#   TPU_NAME=my-v4-32 ZONE=us-central2-b launch/tpu_pod.sh configs/at_base.py /mnt/shared/runs/at_base \
#       [--config.total_steps=100000 ...]
#
# jax.distributed.initialize() (the --distributed flag) discovers the pod's workers by itself; every
# worker reads its own shard of each global batch. The workdir must be on a filesystem all workers
# share (e.g. a Filestore/NFS mount): checkpoints, config.json and spm.model live there.
# Set SETUP=1 once to copy this checkout to the workers and install the dependencies.
set -euo pipefail
CONFIG=${1:?usage: TPU_NAME=... ZONE=... launch/tpu_pod.sh CONFIG WORKDIR [--config.key=value ...]}
WORKDIR=${2:?workdir (shared filesystem) required}
shift 2
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
REMOTE_DIR=${REMOTE_DIR:-~/nat_jax}
ssh_all() { gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker=all --command="$1"; }

if [[ "${SETUP:-0}" == 1 ]]; then
  gcloud compute tpus tpu-vm scp --recurse --zone="$ZONE" --worker=all "$(dirname "$0")/.." "$TPU_NAME:$REMOTE_DIR"
  ssh_all "cd $REMOTE_DIR && pip install \"jax[tpu]==\$(grep '^jax==' constraints.txt | cut -d= -f3)\" && pip install -r requirements.txt -c constraints.txt"
fi
ssh_all "cd $REMOTE_DIR && python3 -m nat_jax.train --config=$CONFIG --workdir=$WORKDIR --distributed $*"

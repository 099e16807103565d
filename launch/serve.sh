#!/usr/bin/env bash
# Serve a trained run over HTTP with dynamic batching (README "Serve over HTTP").
#
#   launch/serve.sh RUN_DIR [PORT] [extra nat_jax.serve flags]
#
# e.g. launch/serve.sh runs/dat_bible_tiny 8000 --decoder=dag_beam --decoder.lm=runs/dat_bible_tiny/lm5.arpa
#
# Loopback only. To listen on every interface, add --host=0.0.0.0 AND --api_key_file=<a file holding a
# key>: without a key anyone who reaches the port can use the server. SIGTERM (docker stop, systemd,
# Kubernetes) finishes the requests in flight and exits 0; point a readiness probe at /health (503
# until warm-up has compiled) and a Prometheus scrape at /metrics.
# On a small CPU host a DA-Transformer decodes no faster in batches: add --max_batch=1 for it there
# (docs/lab-notes/2026-11-26-serving.md).
set -euo pipefail
RUN=${1:?usage: launch/serve.sh RUN_DIR [PORT] [flags]}
PORT=${2:-8000}
shift $(( $# >= 2 ? 2 : 1 ))
exec python -m nat_jax.serve --workdir="$RUN" --port="$PORT" --max_batch=64 --max_wait_ms=20 \
    --max_queue=4096 --timeout_s=60 "$@"

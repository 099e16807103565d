#!/usr/bin/env bash
# The accelerator suite on a lent GPU (docs/lab-notes/2026-11-25-accelerators.md; benchmarks/suite/accelerator_suite.py
# says what it runs): install what the machine lacks from the pack's wheels, then run the stages not done yet.
#
#   python -m benchmarks.suite.accelerator_pack --out=accelerator_pack            # here, on the CPU machine
#   benchmarks/suite/accelerator_suite.sh accelerator_pack [--smoke] [--stages=teacher,distill]   # there
#
# Rerun the same command after a time-out: finished stages are skipped, trainings resume.
set -euo pipefail
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
PACK="${1:?usage: benchmarks/suite/accelerator_suite.sh PACK_DIR [flags of benchmarks.suite.accelerator_suite]}"
shift
cd "$(dirname "$0")/../.."
missing=()
for pair in ml_collections:ml_collections tqdm:tqdm tensorboard:tensorboard absl:absl-py; do
  "$PYTHON" -c "import ${pair%%:*}" 2>/dev/null || missing+=("${pair##*:}")
done
if ((${#missing[@]})); then
  echo "installing from $PACK/wheels: ${missing[*]}"
  "$PYTHON" -m pip install -q --no-index --no-deps --find-links "$PACK/wheels" "${missing[@]}"
fi
exec "$PYTHON" -m benchmarks.suite.accelerator_suite --pack="$PACK" "$@"

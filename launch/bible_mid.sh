#!/usr/bin/env bash
# The mid-size Bible chain (docs/lab-notes/2026-11-26-speed-at-size.md): the d=256 E6D2 teacher, its greedy
# distillation, the AT student, DA-Transformer and HRT students of the same size, the DA-Transformer's 5-gram
# LM, the benchmark over all of them (CTranslate2 rows, and the AT student's exact drafted decoding with the
# DA-Transformer student drafting, included) and the AT student's CTranslate2 export.
#
#   launch/bible_mid.sh [RUNS_DIR]        (default: runs; about 9 CPU-hours on 2 cores in all)
#
# Run it again after any interruption (Ctrl-C, SIGTERM, a lost session): trainings resume from their
# last checkpoint, the distillation from its finished chunks, and a finished step (its
# test_results.json, manifest.json, lm5.arpa, export) is skipped, so one command carries the chain
# across sessions. Each training's CPU-hours are in its metrics.jsonl (cpu_hours).
set -euo pipefail
R=${1:-runs}
D="$R/distill_at_bible_mid"

train() {  # recipe workdir [--config.key=value ...]
  local recipe=$1 workdir=$2
  shift 2
  if [ -f "$workdir/test_results.json" ]; then
    echo "finished: $workdir"
    return
  fi
  python -m nat_jax.train --config="configs/$recipe.py" --workdir="$workdir" "$@"
}

train at_bible_mid "$R/at_bible_mid"
[ -f "$D/manifest.json" ] || python -m nat_jax.distill --workdir="$R/at_bible_mid" --out="$D" --decoder=greedy --average=3
train at_student_bible_mid "$R/at_student_bible_mid" --config.data.distill_dir="$D"
train dat_bible_mid "$R/dat_bible_mid" --config.data.distill_dir="$D" --config.init_from="$R/at_bible_mid"
train hrt_bible_mid "$R/hrt_bible_mid" --config.data.distill_dir="$D" --config.init_from="$R/at_bible_mid"
[ -f "$R/dat_bible_mid/lm5.arpa" ] || python -m nat_jax.lm --workdir="$R/dat_bible_mid" --order=5
[ -f "$R/benchmark_mid/results.json" ] || python -m nat_jax.benchmark --out="$R/benchmark_mid" --batch_sizes=1,64 \
    --average=3 --baseline="$R/at_student_bible_mid" \
    --runs="$R/at_student_bible_mid:greedy+beam+ct2_greedy/threads=1+ct2_greedy/threads=1/quantization=int8+drafted/drafter=$R/dat_bible_mid+drafted/drafter=$R/dat_bible_mid/update=redraft,$R/dat_bible_mid:dag_lookahead+dag_beam+dag_beam/lm=$R/dat_bible_mid/lm5.arpa/gamma=1.0,$R/hrt_bible_mid:hrt,$R/at_bible_mid:greedy+beam"
[ -d "$R/ct2_at_student_bible_mid" ] || python -m nat_jax.export --workdir="$R/at_student_bible_mid" --average=3 \
    --out="$R/ct2_at_student_bible_mid"

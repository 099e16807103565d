"""Mid-size DA-Transformer (d=256, E6D2) on the greedy distillation of configs/at_bible_mid.py,
warm-started from that teacher: DAG NLL with glancing, lambda = 4.

  python -m nat_jax.distill --workdir=runs/at_bible_mid --out=runs/distill_at_bible_mid --decoder=greedy --average=3
  python -m nat_jax.train --config=configs/dat_bible_mid.py --workdir=runs/dat_bible_mid
  python -m nat_jax.lm --workdir=runs/dat_bible_mid --order=5
  python -m nat_jax.translate --workdir=runs/dat_bible_mid --decoder=dag_beam --decoder.lm=runs/dat_bible_mid/lm5.arpa

configs/dat_bible_tiny.py's recipe (its 12 buckets, optimizer, glancing and warm start, measured
in docs/lab-notes/2026-11-24-students-cpu-budget.md) with the teacher's model size. Its budget: 1,000
updates; the mid-size model costs more per update than the tiny one (docs/lab-notes/2026-11-26-speed-at-size.md).
Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import at_bible_mid, dat_bible_tiny


def get_config():
  c = dat_bible_tiny.get_config()
  c.model.update(at_bible_mid.get_config().model)
  c.model.method = 'dat'
  c.data.distill_dir = 'runs/distill_at_bible_mid'
  c.init_from = 'runs/at_bible_mid'
  c.learning_rate = 1e-3
  return c

"""Mid-size autoregressive student on the greedy distillation of configs/at_bible_mid.py: the
like-for-like baseline of the mid-size DA-Transformer and HRT students (same model, same data).

  python -m nat_jax.train --config=configs/at_bible_mid.py --workdir=runs/at_bible_mid
  python -m nat_jax.distill --workdir=runs/at_bible_mid --out=runs/distill_at_bible_mid --decoder=greedy --average=3
  python -m nat_jax.train --config=configs/at_student_bible_mid.py --workdir=runs/at_student_bible_mid

The teacher's model (d=256, E6D2) and schedule shape, 1,200 updates of 4,096 tokens from scratch
(the tiny AT student's 1,000 scaled to the larger model; about 0.9 CPU-hours on 2 cores).
Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import at_bible_mid


def get_config():
  c = at_bible_mid.get_config()
  c.data.distill_dir = 'runs/distill_at_bible_mid'
  c.total_steps = 1200
  c.warmup_steps = 300
  c.cooldown_steps = 480
  c.eval_every = 400
  return c

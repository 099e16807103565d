"""The tiny autoregressive Transformer trained on distilled targets: the like-for-like baseline of the
non-autoregressive students. Same data and number of updates as configs/dat_bible_tiny.py (1,000
updates of 4,096 tokens), same model as its teacher configs/at_bible_tiny.py.

  python -m nat_jax.distill --workdir=runs/at_bible_tiny --out=runs/distill_at_bible_tiny --average=3
  python -m nat_jax.train --config=configs/at_student_bible_tiny.py --workdir=runs/at_student_bible_tiny

About 15 minutes on 2 CPU cores. Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import at_bible_tiny


def get_config():
  c = at_bible_tiny.get_config()
  c.data.distill_dir = 'runs/distill_at_bible_tiny'
  c.total_steps = 1000
  c.cooldown_steps = 400
  c.eval_every = 500
  return c

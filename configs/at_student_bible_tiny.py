"""The tiny autoregressive Transformer trained on distilled targets: the like-for-like baseline of the
non-autoregressive students (same data as configs/dat_bible_tiny.py, same model and budget as its
teacher configs/at_bible_tiny.py).

  python -m nat_jax.distill --workdir=runs/at_bible_tiny --out=runs/distill_at_bible_tiny --average=3
  python -m nat_jax.train --config=configs/at_student_bible_tiny.py --workdir=runs/at_student_bible_tiny

Smoke run: add --config.total_steps=30.
"""
from configs import at_bible_tiny


def get_config():
  c = at_bible_tiny.get_config()
  c.data.distill_dir = 'runs/distill_at_bible_tiny'
  return c

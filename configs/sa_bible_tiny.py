"""Tiny SA (h = 1, c = 2: two consecutive tokens per step, left to right) on the Bible corpus:
configs/ibdec_bible_tiny.py with (h, c) = (1, 2),
same model, distilled data and 1,000 updates as the AT student.

  python -m nat_jax.train --config=configs/sa_bible_tiny.py --workdir=runs/sa_bible_tiny
  python -m nat_jax.evaluate --workdir=runs/sa_bible_tiny --decoders=greedy,multiword_beam --average=3

About 15 minutes on 2 CPU cores. Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import ibdec_bible_tiny


def get_config():
  return ibdec_bible_tiny.get_config(h=1, c=2)

"""Tiny IBDecoder+SA (h = 2, c = 2: four tokens per step, two from each end) on the Bible corpus:
configs/ibdec_bible_tiny.py with (h, c) = (2, 2),
same model, distilled data and 1,000 updates as the AT student.

  python -m nat_jax.train --config=configs/ibsa_bible_tiny.py --workdir=runs/ibsa_bible_tiny
  python -m nat_jax.evaluate --workdir=runs/ibsa_bible_tiny --decoders=greedy,multiword_beam --average=3

About 15 minutes on 2 CPU cores. Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import ibdec_bible_tiny


def get_config():
  return ibdec_bible_tiny.get_config(h=2, c=2)

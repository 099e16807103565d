"""Tiny IMDecoder (h = 4, c = 1: two segments, each decoded from both ends; trainable direction embeddings)
on the Bible corpus: configs/ibdec_bible_tiny.py with (h, c) = (4, 1),
same model, distilled data and 1,000 updates as the AT student.

  python -m nat_jax.train --config=configs/imdec_bible_tiny.py --workdir=runs/imdec_bible_tiny
  python -m nat_jax.evaluate --workdir=runs/imdec_bible_tiny --decoders=greedy,multiword_beam --average=3

About 15 minutes on 2 CPU cores. Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import ibdec_bible_tiny


def get_config():
  return ibdec_bible_tiny.get_config(h=4, c=1)

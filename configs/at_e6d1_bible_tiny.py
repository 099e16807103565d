"""Tiny deep-encoder / shallow-decoder AT (6 encoder layers, 1 decoder layer, d=128) on distilled Bible data.

  python -m nat_jax.distill --workdir=runs/at_bible_tiny --out=runs/distill_at_bible_tiny --average=3
  python -m nat_jax.train --config=configs/at_e6d1_bible_tiny.py --workdir=runs/at_e6d1_bible_tiny
  python -m nat_jax.train --config=configs/hrt_e6d1_bible_tiny.py --workdir=runs/hrt_e6d1_bible_tiny

The CPU-sized RoyalFlush pair (configs/at_e12d1.py, configs/royalflush_e12d1.py are the accelerator
ones): the AT student's data and budget (pure distillation, 1,000 updates of 4,096 tokens) with the
layers moved from the decoder to the encoder, so decoding is cheap per step and the E/D trade-off
shows next to the 3+2-layer models. About 15 minutes on 2 CPU cores. Smoke run: --config.total_steps=30.
"""
from nat_jax.configs import at_student_bible_tiny


def get_config():
  c = at_student_bible_tiny.get_config()
  c.model.update(enc_layers=6, dec_layers=1, relative_window=16)
  return c

"""Tiny CMLM fine-tuned from the AT teacher: the like-for-like CMLM of configs/hrt_bible_tiny.py.

  python -m nat_jax.train --config=configs/at_bible_tiny.py --workdir=runs/at_bible_tiny
  python -m nat_jax.distill --workdir=runs/at_bible_tiny --out=runs/distill_at_bible_tiny --average=3
  python -m nat_jax.train --config=configs/cmlm_ft_bible_tiny.py --workdir=runs/cmlm_ft_bible_tiny
  python -m nat_jax.evaluate --workdir=runs/cmlm_ft_bible_tiny --decoders=mask_predict --decoder.iterations=4

configs/cmlm_bible_tiny.py trains from scratch (the AT student's budget); HRT starts from the AT
teacher. This recipe gives the CMLM HRT's start (runs/at_bible_tiny's parameters, a fresh length
head), learning-rate schedule and 1,000 updates on the same distilled targets, so "HRT above CMLM"
compares the methods, not their starting points. About 15 minutes on 2 CPU cores.
Smoke run: add --config.total_steps=30.
"""
from configs import cmlm_bible_tiny, hrt_bible_tiny


def get_config():
  c = cmlm_bible_tiny.get_config()
  hrt = hrt_bible_tiny.get_config()
  for key in ('init_from', 'learning_rate', 'warmup_steps', 'total_steps', 'cooldown_steps'):
    c[key] = hrt[key]
  return c

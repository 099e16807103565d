"""Tiny CMLM fine-tuned from the AT teacher: the like-for-like CMLM of configs/hrt_bible_tiny.py.

  python -m nat_jax.train --config=configs/at_bible_tiny.py --workdir=runs/at_bible_tiny
  python -m nat_jax.distill --workdir=runs/at_bible_tiny --out=runs/distill_at_bible_tiny --average=3
  python -m nat_jax.train --config=configs/cmlm_ft_bible_tiny.py --workdir=runs/cmlm_ft_bible_tiny
  python -m nat_jax.evaluate --workdir=runs/cmlm_ft_bible_tiny --decoders=mask_predict --decoder.iterations=4

configs/cmlm_bible_tiny.py starts from the AT teacher too, with the AT student's schedule. This
recipe gives the CMLM HRT's learning-rate schedule and 1,000 updates on the same distilled targets
(the teacher's parameters, a fresh length head), so "HRT above CMLM" compares the methods, not
their schedules. About 15 minutes on 2 CPU cores.
Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import cmlm_bible_tiny, hrt_bible_tiny


def get_config():
  c = cmlm_bible_tiny.get_config()
  hrt = hrt_bible_tiny.get_config()
  for key in ('init_from', 'learning_rate', 'warmup_steps', 'total_steps', 'cooldown_steps'):
    c[key] = hrt[key]
  return c

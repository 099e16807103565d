"""A DA-Transformer drafter for the tiny AT (drafted decoding, --decoder.update=redraft), warm-started
from that AT and trained on its own greedy translations.

  python -m nat_jax.train --config=configs/at_bible_tiny.py --workdir=runs/at_bible_tiny
  python -m nat_jax.distill --workdir=runs/at_bible_tiny --out=runs/distill_greedy_at_bible_tiny --decoder=greedy
  python -m nat_jax.train --config=configs/dat_drafter_bible_tiny.py --workdir=runs/dat_drafter_bible_tiny
  python -m nat_jax.translate --workdir=runs/at_bible_tiny --decoder=drafted \
      --decoder.drafter=runs/dat_drafter_bible_tiny --decoder.update=redraft

configs/dat_bible_tiny.py (lambda = 4, glancing 0.5 -> 0.1, warm-started from the AT) with one
change for drafting: the targets are the AT's greedy output (what verification accepts), not its
beam output. 300 updates, about 25 minutes on 2 CPU cores. Measured: validation BLEU 4.98 at 100
updates (docs/lab-notes/2026-11-24-drafted.md). Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import dat_bible_tiny


def get_config():
  c = dat_bible_tiny.get_config()
  c.data.distill_dir = 'runs/distill_greedy_at_bible_tiny'
  c.total_steps = 300
  c.warmup_steps = 40
  c.cooldown_steps = 120
  c.eval_every = 100
  return c

"""Tiny FA-DAT: fuzzy-alignment fine-tuning of the DA-Transformer from configs/dat_bible_tiny.py.

  python -m nat_jax.train --config=configs/dat_bible_tiny.py --workdir=runs/dat_bible_tiny
  python -m nat_jax.train --config=configs/fadat_bible_tiny.py --workdir=runs/fadat_bible_tiny \
      [--config.init_from=runs/dat_bible_tiny]

Starts from the latest NLL checkpoint (parameters and tokenizer; fresh optimizer) and trains on the
same distilled targets with the bigram (n = 2) fuzzy alignment loss with brevity penalty, glancing
fixed at tau = 0.1, a small learning rate with a short warm-up (the paper: lr 2e-4, warm-up 500,
5k updates of ~256k tokens "to stabilise the gradients"): here 4 micro-batches per update
(4 x the NLL recipe's tokens) for 40 updates (160 micro-batches, about 10 minutes on 2 CPU cores).
"""
from nat_jax.configs import dat_bible_tiny


def get_config():
  c = dat_bible_tiny.get_config()
  c.init_from = 'runs/dat_bible_tiny'
  c.dat.update(loss='fuzzy', ngram=2, glance_start=0.1, glance_end=0.1)
  c.grad_accum_steps = 4
  c.learning_rate = 3e-4
  c.warmup_steps = 5
  c.total_steps = 40
  c.cooldown_steps = 20
  c.eval_every = 20
  c.checkpoint_every = 5
  return c

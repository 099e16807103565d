"""Tiny autoregressive Transformer on the Bible corpus (en -> de); the README's CPU demo.

  python -m nat_jax.train --config=configs/at_bible_tiny.py --workdir=runs/at_bible_tiny

About 21 minutes on a 2-core CPU, then test BLEU against Elberfelder and Elberfelder+Schlachter
(measured: 9.37 and 11.69, docs/lab-notes/2026-11-21-at-tiny.md).
Smoke run: add --config.total_steps=30.

Sized for compute, not capacity: on 2 CPU cores a d=128 model sees ~5 epochs in the time a d=256
one sees 2, and scores higher at equal wall-clock (docs/lab-notes/2026-11-21-at-tiny.md). The learning rate cools
down linearly to 0 over the last 40% of the steps and the last 3 checkpoints are averaged.
"""
from nat_jax.recipes.defaults import base_config


def get_config():
  c = base_config()
  c.model.update(d_model=128, num_heads=4, d_ff=512, enc_layers=3, dec_layers=2, dropout=0.1)
  c.vocab_size = 4000
  c.max_len = 128
  c.tokens_per_batch = 4096
  c.num_buckets = 6
  c.learning_rate = 2e-3
  c.warmup_steps = 200
  c.total_steps = 2000
  c.cooldown_steps = 800
  c.log_every = 25
  c.eval_every = 1000
  c.checkpoint_every = 100
  c.keep_checkpoints = 3
  c.eval_max_sentences = 252
  c.test_decoder = 'beam'
  c.test_average = 3
  return c

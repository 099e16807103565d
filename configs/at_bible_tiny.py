"""Tiny autoregressive Transformer on the Bible corpus (en -> de); the README's CPU demo.

  python -m nat_jax.train --config=configs/at_bible_tiny.py --workdir=runs/at_bible_tiny

About 20 minutes on a 2-core CPU, then test BLEU against Elberfelder and Elberfelder+Schlachter.
Smoke run: add --config.total_steps=30.
"""
from nat_jax.config_defaults import base_config


def get_config():
  c = base_config()
  c.model.update(d_model=256, num_heads=4, d_ff=1024, enc_layers=3, dec_layers=2, dropout=0.1)
  c.vocab_size = 8000
  c.max_len = 128
  c.tokens_per_batch = 4096
  c.num_buckets = 4
  c.learning_rate = 1e-3
  c.warmup_steps = 400
  c.total_steps = 2400
  c.eval_every = 800
  c.checkpoint_every = 400
  c.eval_max_sentences = 252
  c.test_decoder = 'beam'
  return c

"""Transformer-base (d=512, 6+6 layers) for WMT-sized runs on accelerators.

  python -m nat_jax.train --config=configs/at_base.py --workdir=runs/at_base

WMT14 En-De (needs network for tfds to prepare it once):
  python -m nat_jax.train --config=configs/at_base.py --workdir=runs/at_base_wmt14 \
      --config.data.source=tfds --config.data.tfds_name=wmt14_translate/de-en \
      --config.data.source_lang=en --config.data.target_lang=de --config.vocab_size=32000
"""
from nat_jax.recipes.defaults import base_config


def get_config():
  c = base_config()
  c.model.update(d_model=512, num_heads=8, d_ff=2048, enc_layers=6, dec_layers=6, dropout=0.1, dtype='bfloat16')
  c.vocab_size = 32000
  c.max_len = 256
  c.tokens_per_batch = 32768
  c.num_buckets = 4
  c.learning_rate = 7e-4
  c.warmup_steps = 4000
  c.total_steps = 100_000
  c.eval_every = 2000
  c.checkpoint_every = 2000
  c.eval_max_sentences = 0
  c.test_average = 5
  return c

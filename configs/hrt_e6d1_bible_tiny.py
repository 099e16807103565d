"""Tiny RoyalFlush-style HRT E6D1 (k = 2): fine-tuned from configs/at_e6d1_bible_tiny.py on pure distillation.

  python -m nat_jax.train --config=configs/at_e6d1_bible_tiny.py --workdir=runs/at_e6d1_bible_tiny
  python -m nat_jax.train --config=configs/hrt_e6d1_bible_tiny.py --workdir=runs/hrt_e6d1_bible_tiny
  python -m nat_jax.evaluate --workdir=runs/hrt_e6d1_bible_tiny --decoders=hrt

RoyalFlush's recipe at CPU size: no raw references (data.raw_prob = 0), curriculum p_k = t / T
(T = 500 of the 1,000 updates, as configs/hrt_bible_tiny.py),
the AT's relative keys (the AT was trained with them), k = 2, decoding b_at = b_nat = 1 with
length penalty 0.6. 1,000 updates, about 15 minutes on 2 CPU cores. Smoke: --config.total_steps=30.
"""
from nat_jax.configs import hrt_bible_tiny


def get_config():
  c = hrt_bible_tiny.get_config()
  c.model.update(enc_layers=6, dec_layers=1)
  c.init_from = 'runs/at_e6d1_bible_tiny'
  c.data.raw_prob = 0.0
  return c

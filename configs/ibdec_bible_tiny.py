"""Tiny IBDecoder (h = 2, c = 1: two tokens per step, from both ends) on the Bible corpus, trained on
the AT student's distilled targets with the AT student's model, batch and 1,000 updates.

  python -m nat_jax.distill --workdir=runs/at_bible_tiny --out=runs/distill_at_bible_tiny --average=3
  python -m nat_jax.train --config=configs/ibdec_bible_tiny.py --workdir=runs/ibdec_bible_tiny
  python -m nat_jax.evaluate --workdir=runs/ibdec_bible_tiny --decoders=greedy,multiword_beam --average=3

Plain label-smoothed cross-entropy on the interleaved target (nat_jax.methods.ibdecoder). The
sibling recipes change only (h, c): configs/sa_bible_tiny.py (1, 2), configs/ibsa_bible_tiny.py
(2, 2), configs/imdec_bible_tiny.py (4, 1). About 15 minutes on 2 CPU cores.
Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import at_student_bible_tiny
from nat_jax.methods import ibdecoder
from nat_jax.recipes.defaults import section


def get_config(h: int = 2, c: int = 1):
  config = at_student_bible_tiny.get_config()
  config.model.method = 'ibdecoder'
  config.ibdecoder = section(ibdecoder.IbDecoderSettings)
  config.ibdecoder.update(h=h, c=c)
  config.eval_decoder = 'greedy'
  config.test_decoder = 'multiword_beam'
  return config

"""RoyalFlush's AT student: pre-norm Transformer, d=512, 12-layer encoder, 1-layer decoder, pure distillation.

  python -m nat_jax.train --config=configs/at_base.py --workdir=runs/at_base                     # the teacher
  python -m nat_jax.distill --workdir=runs/at_base --out=runs/distill_at_base --average=5
  python -m nat_jax.train --config=configs/at_e12d1.py --workdir=runs/at_e12d1
  python -m nat_jax.train --config=configs/royalflush_e12d1.py --workdir=runs/royalflush_e12d1

An accelerator recipe (docs/methods/hrt.md): the paper trains it 300k updates on WMT22 En-De distillation
data and reports 45.4 / 34.1 BLEU (newstest19 / 20) at 2.1k source words/s (batch 1, RTX 3090,
fp16). Here it trains on the corpus of configs/at_base.py (the Bible by default; WMT via the
data flags shown there) distilled by that teacher. Decoding: beam 4 for the test, max 200
sub-words. Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import at_base


def get_config():
  c = at_base.get_config()
  c.model.update(d_model=512, num_heads=8, d_ff=2048, enc_layers=12, dec_layers=1, pre_norm=True)
  c.data.distill_dir = 'runs/distill_at_base'
  c.data.raw_prob = 0.0
  c.max_decode_len = 200
  c.total_steps = 300_000
  return c

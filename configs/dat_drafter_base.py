"""A DA-Transformer drafter for the AT base (drafted decoding, --decoder.update=redraft), warm-started from
that AT and trained on its own greedy translations.

  python -m nat_jax.train --config=configs/at_base.py --workdir=runs/at_base
  python -m nat_jax.distill --workdir=runs/at_base --out=runs/distill_greedy_at_base --decoder=greedy
  python -m nat_jax.train --config=configs/dat_drafter_base.py --workdir=runs/dat_drafter_base
  python -m nat_jax.translate --workdir=runs/at_base --decoder=drafted \
      --decoder.drafter=runs/dat_drafter_base --decoder.update=redraft

configs/dat_drafter_bible_tiny.py at base size: the DA-Transformer of configs/dat_wmt14_ende.py (6+6,
d=512, graph 8 x source, glancing 0.5 -> 0.1, clip-norm 0.1, weight decay 0.01) on the AT base's data,
its encoder, decoder and embeddings from the AT base (the graph heads fresh), its targets the AT's
greedy output (what verification accepts), 50k updates of ~64k tokens. Compiled for TPUs and GPUs
from this CPU with the AT it drafts for (docs/lab-notes/2026-11-25-accelerators.md):
  python -m nat_jax.aot --config=configs/at_base.py --target=v5e:2x2 --decoders=drafted \
      --drafter=configs/dat_drafter_base.py --decoder.update=redraft
"""
from nat_jax.configs import dat_wmt14_ende


def get_config():
  c = dat_wmt14_ende.get_config()
  c.data.update(source='bible', tfds_name='', distill_dir='runs/distill_greedy_at_base')
  c.init_from = 'runs/at_base'
  c.total_steps = 50_000
  c.warmup_steps = 4000
  c.cooldown_steps = 10_000
  return c

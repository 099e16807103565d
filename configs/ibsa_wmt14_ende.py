"""IBDecoder+SA (two tokens from each end per step)
at Transformer-base size on WMT14 En-De: configs/ibdec_wmt14_ende.py with (h, c) = (2, 2).

  python -m nat_jax.train --config=configs/ibsa_wmt14_ende.py --workdir=runs/ibsa_wmt14_ende
  python -m nat_jax.evaluate --workdir=runs/ibsa_wmt14_ende --decoders=greedy,multiword_beam

Same data (the AT base's distillation of WMT14), model, batch (~32k tokens per update) and schedule
as the IBDecoder recipe. Reported (IBDecoder paper, WMT14 En-De with KD, GTX 1080, batch 1, against
Transformer beam 4): greedy 26.0 BLEU at 4.35x, beam 4 26.3 at 3.31x.

Compiled for TPUs and GPUs from this CPU (docs/lab-notes/2026-11-25-accelerators.md):
  python -m nat_jax.aot --config=configs/ibsa_wmt14_ende.py --target=v5e:2x2
"""
from nat_jax.configs import ibdec_wmt14_ende


def get_config():
  return ibdec_wmt14_ende.get_config(h=2, c=2)

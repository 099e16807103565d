"""SA (semi-autoregressive, two consecutive tokens per step)
at Transformer-base size on WMT14 En-De: configs/ibdec_wmt14_ende.py with (h, c) = (1, 2).

  python -m nat_jax.train --config=configs/sa_wmt14_ende.py --workdir=runs/sa_wmt14_ende
  python -m nat_jax.evaluate --workdir=runs/sa_wmt14_ende --decoders=greedy,multiword_beam

Same data (the AT base's distillation of WMT14), model, batch (~32k tokens per update) and schedule
as the IBDecoder recipe. Reported (IBDecoder paper, WMT14 En-De with KD, GTX 1080, batch 1, against
Transformer beam 4): SA (1, 2) 24.1 BLEU raw in the ablation (speed not reported for it alone).

Compiled for TPUs and GPUs from this CPU (docs/lab-notes/2026-11-25-accelerators.md):
  python -m nat_jax.aot --config=configs/sa_wmt14_ende.py --target=v5e:2x2
"""
from nat_jax.configs import ibdec_wmt14_ende


def get_config():
  return ibdec_wmt14_ende.get_config(h=1, c=2)

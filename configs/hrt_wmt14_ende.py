"""HRT (hybrid-regressive translation, chunk k = 2) at Transformer-base size on WMT14 En-De, fine-tuned
from the AT base (docs/methods/hrt.md).

  python -m nat_jax.train --config=configs/at_base.py --workdir=runs/at_base_wmt14 \
      --config.data.source=tfds --config.data.tfds_name=wmt14_translate/de-en --config.vocab_size=32000
  python -m nat_jax.distill --workdir=runs/at_base_wmt14 --out=runs/distill_wmt14 --decoder=beam
  python -m nat_jax.train --config=configs/hrt_wmt14_ende.py --workdir=runs/hrt_wmt14_ende
  python -m nat_jax.translate --workdir=runs/hrt_wmt14_ende --decoder=hrt

As the HRT paper trains it: one encoder and one shared decoder (d=512, 6+6) started from the trained
AT, key-only relative positions (w = 16), mixed distillation (raw reference with probability 0.2:
the paper's value was lost in extraction; tune on validation), the chunk curriculum p_k = t / T,
as many fine-tuning updates as the AT had (100k of ~32k tokens here). Decoding: Skip-AT greedy
(b_at = b_nat = 1) then one Skip-CMLM fill. Reported (WMT14 En-De): 27.85 BLEU against the AT's
27.45, at least 50% faster than the AT on GPU and CPU.
Compiled for TPUs and GPUs from this CPU (docs/lab-notes/2026-11-25-accelerators.md):
  python -m nat_jax.aot --config=configs/hrt_wmt14_ende.py --target=v5e:2x2
"""
from nat_jax.configs import at_base
from nat_jax.methods import hrt
from nat_jax.recipes.defaults import section


def get_config():
  c = at_base.get_config()
  c.model.method = 'hrt'
  c.model.relative_window = 16
  c.hrt = section(hrt.HrtSettings)
  c.hrt.update(chunk=2, curriculum_lambda=1.0)
  c.init_from = 'runs/at_base_wmt14'
  c.data.update(source='tfds', tfds_name='wmt14_translate/de-en', source_lang='en', target_lang='de',
                distill_dir='runs/distill_wmt14', raw_prob=0.2)
  c.eval_decoder = 'hrt'
  c.test_decoder = 'hrt'
  return c

"""IBDecoder (h = 2, c = 1) at Transformer-base size on WMT14 En-De, the paper's setting (docs/methods/ibdecoder.md).

  python -m nat_jax.distill --workdir=runs/at_base_wmt14 --out=runs/distill_wmt14 --decoder=beam
  python -m nat_jax.train --config=configs/ibdec_wmt14_ende.py --workdir=runs/ibdec_wmt14_ende
  python -m nat_jax.evaluate --workdir=runs/ibdec_wmt14_ende --decoders=greedy,multiword_beam

Needs tfds' wmt14_translate/de-en prepared once (network) and a distillation of it by an AT base
(configs/at_base.py with the WMT overrides in its docstring); drop data.distill_dir for raw data.
d=512, 6+6 layers, ~32k tokens per update, lr 7e-4 with 4k warm-up, 100k updates, checkpoints
averaged. SA / IBDecoder+SA / IMDecoder: configs/sa_wmt14_ende.py (h, c) = (1, 2), ibsa_wmt14_ende.py
(2, 2), imdec_wmt14_ende.py (4, 1).

Compiled for TPUs and GPUs from this CPU (docs/lab-notes/2026-11-25-accelerators.md):
  python -m nat_jax.aot --config=configs/ibdec_wmt14_ende.py --target=v5e:2x2
Reported (GTX 1080, batch 1, with KD): greedy 26.8 BLEU at 2.33x Transformer beam-4 speed;
multiword beam 27.1 at 1.90x.
"""
from nat_jax.configs import at_base
from nat_jax.methods import ibdecoder
from nat_jax.recipes.defaults import section


def get_config(h: int = 2, c: int = 1):
  config = at_base.get_config()
  config.model.method = 'ibdecoder'
  config.ibdecoder = section(ibdecoder.IbDecoderSettings)
  config.ibdecoder.update(h=h, c=c)
  config.data.update(source='tfds', tfds_name='wmt14_translate/de-en', source_lang='en', target_lang='de',
                     distill_dir='runs/distill_wmt14')
  config.eval_decoder = 'greedy'
  config.test_decoder = 'multiword_beam'
  return config

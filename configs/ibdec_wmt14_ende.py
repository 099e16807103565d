"""IBDecoder (h = 2, c = 1) at Transformer-base size on WMT14 En-De, the paper's setting (docs/methods.md §4).

  python -m nat_jax.distill --workdir=runs/at_base_wmt14 --out=runs/distill_wmt14 --decoder=beam
  python -m nat_jax.train --config=configs/ibdec_wmt14_ende.py --workdir=runs/ibdec_wmt14_ende
  python -m nat_jax.evaluate --workdir=runs/ibdec_wmt14_ende --decoders=greedy,multiword_beam

Needs tfds' wmt14_translate/de-en prepared once (network) and a distillation of it by an AT base
(configs/at_base.py with the WMT overrides in its docstring); drop data.distill_dir for raw data.
d=512, 6+6 layers, ~32k tokens per update, lr 7e-4 with 4k warm-up, 100k updates, checkpoints
averaged. SA / IBDecoder+SA / IMDecoder: --config.ibdecoder.h=1 --config.ibdecoder.c=2 (or 2, 2; 4, 1).
Reported (GTX 1080, batch 1, with KD): greedy 26.8 BLEU at 2.33x Transformer beam-4 speed;
multiword beam 27.1 at 1.90x.
"""
from configs import at_base
from nat_jax.methods import ibdecoder


def get_config():
  c = at_base.get_config()
  c.model.method = 'ibdecoder'
  c.ibdecoder = ibdecoder.default_config()
  c.data.update(source='tfds', tfds_name='wmt14_translate/de-en', source_lang='en', target_lang='de',
                distill_dir='runs/distill_wmt14')
  c.eval_decoder = 'greedy'
  c.test_decoder = 'multiword_beam'
  return c

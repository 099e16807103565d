"""CMLM (Mask-Predict) at Transformer-base size on WMT14 En-De, the paper's setting (docs/methods/cmlm.md).

  python -m nat_jax.distill --workdir=runs/at_base_wmt14 --out=runs/distill_wmt14 --decoder=beam
  python -m nat_jax.train --config=configs/cmlm_wmt14_ende.py --workdir=runs/cmlm_wmt14_ende
  python -m nat_jax.evaluate --workdir=runs/cmlm_wmt14_ende --decoders=mask_predict --average=5

Needs tfds' wmt14_translate/de-en prepared once (network) and its distillation by an AT base
(configs/at_base.py with the WMT overrides in its docstring). As Mask-Predict trains it: d=512, 6+6
layers, ~128k tokens per update (8 x 16k), lr 5e-4 with 10k inverse-sqrt warm-up, dropout 0.3,
300k updates, the 5 best checkpoints averaged; length loss weight 0.1 (fairseq's; the original
code weighs it 1). Decoding: 10 iterations, 5 length candidates. Reported (WMT14 En-De): 27.03 BLEU
with distillation (about 24 raw).
Compiled for TPUs and GPUs from this CPU (docs/lab-notes/2026-11-25-accelerators.md):
  python -m nat_jax.aot --config=configs/cmlm_wmt14_ende.py --target=v5e:2x2
"""
from nat_jax.configs import at_base
from nat_jax.methods import cmlm
from nat_jax.recipes.defaults import section


def get_config():
  c = at_base.get_config()
  c.model.method = 'cmlm'
  c.model.dropout = 0.3
  c.cmlm = section(cmlm.CmlmSettings)
  c.cmlm.length_loss_weight = 0.1
  c.data.update(source='tfds', tfds_name='wmt14_translate/de-en', source_lang='en', target_lang='de',
                distill_dir='runs/distill_wmt14')
  c.tokens_per_batch = 16384
  c.grad_accum_steps = 8     # 8 x 16k = ~128k tokens per update
  c.learning_rate = 5e-4
  c.warmup_steps = 10_000
  c.total_steps = 300_000
  c.eval_every = 5000
  c.checkpoint_every = 5000
  c.eval_max_sentences = 1000
  c.eval_decoder = 'mask_predict'
  c.test_decoder = 'mask_predict'
  c.test_average = 5
  return c

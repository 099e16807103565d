"""Tiny CMLM (Mask-Predict) on the Bible corpus (en -> de), trained on distilled targets.

  python -m nat_jax.distill --workdir=runs/at_bible_tiny --out=runs/distill_at_bible_tiny --average=3
  python -m nat_jax.train --config=configs/cmlm_bible_tiny.py --workdir=runs/cmlm_bible_tiny
  python -m nat_jax.evaluate --workdir=runs/cmlm_bible_tiny --decoders=mask_predict \
      --decoder.iterations=4 --average=3

The model, vocabulary, batch and data of the AT student (configs/at_student_bible_tiny.py): the
same distilled targets and 1,000 updates. Length loss weight 0.1 (fairseq), masking uniform, label
smoothing 0.1. Validation and test decode with Mask-Predict, 10 iterations and 5 length candidates.
About 15 minutes on 2 CPU cores.

Warm start (a departure from Mask-Predict, which trains from scratch): every parameter but the
length head starts from the AT teacher (`init_from`, nat_jax.methods.cmlm's adopt_params); the
decoder unlearns its causal training on the masked-token loss. The cold-vs-warm ablation at equal
updates is in docs/lab-notes/2026-11-24-students-cpu-budget.md. From scratch: --config.init_from=''.
Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import at_student_bible_tiny
from nat_jax.methods import cmlm
from nat_jax.recipes.defaults import section


def get_config():
  c = at_student_bible_tiny.get_config()
  c.model.method = 'cmlm'
  c.cmlm = section(cmlm.CmlmSettings)
  c.cmlm.length_loss_weight = 0.1
  c.init_from = 'runs/at_bible_tiny'
  c.eval_decoder = 'mask_predict'
  c.test_decoder = 'mask_predict'
  return c

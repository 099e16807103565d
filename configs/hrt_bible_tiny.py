"""Tiny HRT (hybrid-regressive translation, chunk k = 2) on the Bible corpus: fine-tuned from the AT teacher.

  python -m nat_jax.train --config=configs/at_bible_tiny.py --workdir=runs/at_bible_tiny
  python -m nat_jax.distill --workdir=runs/at_bible_tiny --out=runs/distill_at_bible_tiny --average=3
  python -m nat_jax.train --config=configs/hrt_bible_tiny.py --workdir=runs/hrt_bible_tiny
  python -m nat_jax.translate --workdir=runs/hrt_bible_tiny --decoder=hrt [--decoder.b_at=4]

Starts from runs/at_bible_tiny's latest parameters (the relative-key tables, w = 16, start at zero
and <B_2> as a copy of BOS, so step 0 is the AT model) and trains the four HRT tasks on the
distilled targets, 1,000 updates of 4,096 target tokens, lr 1e-3 with a short warm-up and a
linear cool-down. Curriculum p_k = t / T with T = 500: from update 500 on every pair trains the
Skip tasks (with T = 1,000, Skip-AT/Skip-CMLM get half the pairs on average). Chosen on validation
among T and raw_prob; measured (hrt decoder, k = 2): validation 8.78, test 6.16 BLEU
(docs/lab-notes/2026-11-23-cmlm-hrt-royalflush.md).
For k = 3: --config.hrt.chunk=3. With another --config.total_steps=N set --config.hrt.curriculum_steps
to about N / 2. About 23 minutes on 2 CPU cores. Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import at_bible_tiny
from nat_jax.methods import hrt
from nat_jax.recipes.defaults import section


def get_config():
  c = at_bible_tiny.get_config()
  c.model.method = 'hrt'
  c.model.relative_window = 16
  c.hrt = section(hrt.HrtSettings)
  c.hrt.update(chunk=2, curriculum_lambda=1.0, curriculum_steps=500)
  c.init_from = 'runs/at_bible_tiny'
  c.data.distill_dir = 'runs/distill_at_bible_tiny'
  c.data.raw_prob = 0.0  # mixed distillation (e.g. 0.2) measured no better on test, worse on validation
  c.learning_rate = 1e-3
  c.warmup_steps = 50
  c.total_steps = 1000
  c.cooldown_steps = 400
  c.eval_every = 500
  c.eval_decoder = 'hrt'
  c.test_decoder = 'hrt'
  return c

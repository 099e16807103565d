"""Tiny HRT (hybrid-regressive translation, chunk k = 2) on the Bible corpus: fine-tuned from the AT teacher.

  python -m nat_jax.train --config=configs/at_bible_tiny.py --workdir=runs/at_bible_tiny
  python -m nat_jax.distill --workdir=runs/at_bible_tiny --out=runs/distill_at_bible_tiny --average=3
  python -m nat_jax.train --config=configs/hrt_bible_tiny.py --workdir=runs/hrt_bible_tiny
  python -m nat_jax.translate --workdir=runs/hrt_bible_tiny --decoder=hrt [--decoder.b_at=4]

Starts from runs/at_bible_tiny's latest parameters (the relative-key tables, w = 16, start at zero
and <B_2> as a copy of BOS, so step 0 is the AT model) and trains the four HRT tasks with the
curriculum p_k = t / T on the distilled targets mixed with raw references (data.raw_prob = 0.2;
the paper's value was lost in extraction). 1,000 updates of 4,096 target tokens, lr 1e-3 with a
short warm-up and a linear cool-down. For k = 3: --config.hrt.chunk=3. About 25 minutes on 2 CPU
cores. Smoke run: add --config.total_steps=30.
"""
from configs import at_bible_tiny
from nat_jax.methods import hrt


def get_config():
  c = at_bible_tiny.get_config()
  c.model.method = 'hrt'
  c.model.relative_window = 16
  c.hrt = hrt.default_config()
  c.hrt.update(chunk=2, curriculum_lambda=1.0)
  c.init_from = 'runs/at_bible_tiny'
  c.data.distill_dir = 'runs/distill_at_bible_tiny'
  c.data.raw_prob = 0.2
  c.learning_rate = 1e-3
  c.warmup_steps = 50
  c.total_steps = 1000
  c.cooldown_steps = 400
  c.eval_every = 500
  c.eval_decoder = 'hrt'
  c.test_decoder = 'hrt'
  return c

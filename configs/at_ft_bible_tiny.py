"""The AT teacher fine-tuned on its own distillation with HRT's budget: the like-for-like AT of
configs/hrt_bible_tiny.py.

  python -m nat_jax.train --config=configs/at_bible_tiny.py --workdir=runs/at_bible_tiny
  python -m nat_jax.distill --workdir=runs/at_bible_tiny --out=runs/distill_at_bible_tiny --average=3
  python -m nat_jax.train --config=configs/at_ft_bible_tiny.py --workdir=runs/at_ft_bible_tiny

HRT starts from runs/at_bible_tiny and trains 1,000 more updates on the distilled targets; this
recipe gives the plain AT exactly that (same start, data, data.raw_prob, learning-rate schedule and
updates), so the two differ only in what HRT changes. The AT student
(configs/at_student_bible_tiny.py) is the other baseline: same data and updates, from scratch.
About 12 minutes on 2 CPU cores. Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import hrt_bible_tiny


def get_config():
  c = hrt_bible_tiny.get_config()
  c.model.method = 'at'
  c.model.relative_window = 0
  del c['hrt']
  c.eval_decoder = 'greedy'
  c.test_decoder = 'beam'
  return c

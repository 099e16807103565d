"""Mid-size HRT (chunk k = 2, d=256, E6D2) fine-tuned from configs/at_bible_mid.py on its greedy distillation.

  python -m nat_jax.distill --workdir=runs/at_bible_mid --out=runs/distill_at_bible_mid --decoder=greedy --average=3
  python -m nat_jax.train --config=configs/hrt_bible_mid.py --workdir=runs/hrt_bible_mid
  python -m nat_jax.translate --workdir=runs/hrt_bible_mid --decoder=hrt

configs/hrt_bible_tiny.py's recipe (relative keys w = 16, curriculum over the first half, pure
distillation) with the teacher's model size and a 1,200-update schedule (the tiny HRT's test gap to
its AT student was its missing second half of updates: docs/lab-notes/2026-11-24-students-cpu-budget.md).
Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import at_bible_mid, hrt_bible_tiny


def get_config():
  c = hrt_bible_tiny.get_config()
  c.model.update(at_bible_mid.get_config().model)
  c.model.update(method='hrt', relative_window=16)
  c.data.distill_dir = 'runs/distill_at_bible_mid'
  c.init_from = 'runs/at_bible_mid'
  c.total_steps = 1200
  c.hrt.curriculum_steps = 600
  c.cooldown_steps = 480
  c.eval_every = 400
  return c

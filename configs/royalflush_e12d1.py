"""RoyalFlush (WMT22 efficiency task): HRT E12D1 fine-tuned from configs/at_e12d1.py, chunk k = 2.

  python -m nat_jax.train --config=configs/royalflush_e12d1.py --workdir=runs/royalflush_e12d1
  python -m nat_jax.evaluate --workdir=runs/royalflush_e12d1 --decoders=hrt --dtype=float16 --batch_sizes=1

As the system description states it (docs/methods/hrt.md): pure distillation data (no raw mixing), the
curriculum p_k = t / T, no relative positions (the AT student has none; only <B_k> is added at
init, as a copy of BOS), 300k fine-tuning updates; decoding b_at = b_nat = 1 with length penalty
0.6 and at most 200 sub-words (Skip-AT: 100 steps), fp16. k = 3 / 4: --config.hrt.chunk=3|4.
Paper, newstest20 En-De: k = 2 / 3 / 4 at 1.81 / 2.33 / 2.90x the AT E12D1's source words/s for
-0.2 / -0.5 / -1.2 BLEU. Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import at_e12d1
from nat_jax.methods import hrt
from nat_jax.recipes.defaults import section


def get_config():
  c = at_e12d1.get_config()
  c.model.method = 'hrt'
  c.hrt = section(hrt.HrtSettings)
  c.hrt.update(chunk=2, curriculum_lambda=1.0)
  c.init_from = 'runs/at_e12d1'
  c.eval_decoder = 'hrt'
  c.test_decoder = 'hrt'
  return c

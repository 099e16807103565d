"""FA-DAT on WMT14 En-De (docs/methods/dat.md): fuzzy-alignment fine-tuning of configs/dat_wmt14_ende.py.

  python -m nat_jax.train --config=configs/fadat_wmt14_ende.py --workdir=runs/fadat_wmt14_ende \
      [--config.init_from=runs/dat_wmt14_ende]

Bigram fuzzy alignment loss with brevity penalty, 5k updates of ~256k tokens, lr 2e-4 with 500
warm-up steps, glancing fixed at tau = 0.1. Reported: ~27.5 BLEU with joint-Viterbi at 13.2x.
"""
from nat_jax.configs import dat_wmt14_ende


def get_config():
  c = dat_wmt14_ende.get_config()
  c.init_from = 'runs/dat_wmt14_ende'
  c.dat.update(loss='fuzzy', ngram=2, glance_start=0.1, glance_end=0.1)
  c.grad_accum_steps = 16    # 16 x 16k = ~256k tokens per update
  c.learning_rate = 2e-4
  c.warmup_steps = 500
  c.total_steps = 5000
  c.eval_every = 500
  c.checkpoint_every = 500
  c.test_decoder = 'dag_joint_viterbi'
  return c

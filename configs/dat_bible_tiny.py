"""Tiny DA-Transformer on the Bible corpus (en -> de): DAG NLL pre-training with glancing.

  python -m nat_jax.train --config=configs/dat_bible_tiny.py --workdir=runs/dat_bible_tiny

The model, vocabulary, data and batch size of configs/at_bible_tiny.py, with a graph of 4 x the
source length (the cheap setting) and glancing annealed 0.5 -> 0.1. One DAT step costs ~6x an AT
step on the 2-core CPU (two decoder passes over 4x as many positions, the Viterbi alignment and
the DAG forward algorithm), so it runs 600 updates (~37 minutes) where the AT recipe runs 2000
(~21 minutes); docs/benchmarks.md §4 has the results. Then FA-DAT: configs/fadat_bible_tiny.py.
Smoke run: add --config.total_steps=30.
"""
from configs import at_bible_tiny
from nat_jax.methods import dag


def get_config():
  c = at_bible_tiny.get_config()
  c.model.method = 'dat'
  c.dat = dag.default_config()
  c.dat.update(upsample_scale=4.0, loss='nll', glance_start=0.5, glance_end=0.1)
  c.label_smoothing = 0.0
  c.warmup_steps = 100
  c.total_steps = 600
  c.cooldown_steps = 240
  c.eval_every = 300
  c.checkpoint_every = 50
  c.eval_decoder = 'dag_lookahead'
  c.test_decoder = 'dag_lookahead'
  return c

"""Self-drafting head on the tiny AT (drafted decoding with no second model; nat_jax.methods.selfdraft).

  python -m nat_jax.train --config=configs/at_bible_tiny.py --workdir=runs/at_bible_tiny
  python -m nat_jax.distill --workdir=runs/at_bible_tiny --out=runs/distill_greedy_at_bible_tiny --decoder=greedy
  python -m nat_jax.train --config=configs/selfdraft_bible_tiny.py --workdir=runs/selfdraft_bible_tiny
  python -m nat_jax.translate --workdir=runs/selfdraft_bible_tiny --decoder=drafted
  python -m nat_jax.translate --workdir=runs/at_bible_tiny --decoder=drafted --decoder.drafter=runs/selfdraft_bible_tiny

The AT's latest parameters are the frozen verifier; a one-layer non-causal head (window W = 8,
attending the window, the AT's states of the final prefix and the source) is trained on the AT's
own greedy translations of train + validation (the distillation above: plain greedy, no averaging,
the same parameters), 4 boundaries per sentence, 1,500 updates of 4,096 target tokens at lr 3e-3.
Translations equal the AT's greedy output token for token; the head only decides how many
verifier passes they take. About 8 minutes on 2 CPU cores. Measured: 1.48 tokens per verifier pass
on the Acts test set (docs/lab-notes/2026-11-24-drafted.md). Smoke run: add --config.total_steps=30.
"""
from nat_jax.configs import at_bible_tiny
from nat_jax.methods import selfdraft
from nat_jax.recipes.defaults import section


def get_config():
  c = at_bible_tiny.get_config()
  c.model.method = 'selfdraft'
  c.selfdraft = section(selfdraft.SelfDraftSettings)
  c.init_from = 'runs/at_bible_tiny'
  c.data.distill_dir = 'runs/distill_greedy_at_bible_tiny'
  c.learning_rate = 3e-3
  c.warmup_steps = 100
  c.total_steps = 1500
  c.cooldown_steps = 600
  c.eval_every = 750
  c.eval_decoder = 'drafted'
  c.test_decoder = 'drafted'
  c.test_average = 1  # the verifier stays the AT's latest parameters, bit for bit
  return c

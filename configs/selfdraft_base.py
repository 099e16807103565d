"""Self-drafting head on the AT base (drafted decoding with no second model; nat_jax.methods.selfdraft).

  python -m nat_jax.train --config=configs/at_base.py --workdir=runs/at_base
  python -m nat_jax.distill --workdir=runs/at_base --out=runs/distill_greedy_at_base --decoder=greedy
  python -m nat_jax.train --config=configs/selfdraft_base.py --workdir=runs/selfdraft_base
  python -m nat_jax.translate --workdir=runs/selfdraft_base --decoder=drafted

configs/selfdraft_bible_tiny.py at base size: the AT base's latest parameters are the frozen verifier;
a one-layer non-causal head drafts a window of W = 8 tokens, trained on the AT's own greedy
translations (what exact verification accepts), 4 boundaries per sentence, 20k updates of ~32k target
tokens at lr 1e-3. Exact: translations equal the AT's greedy output. The reference drafter for
SpecDec is a separate 6+6 model accepting ~6 tokens per pass on WMT14 (~3x at batch 1, P100);
the tiny head accepted 1.48.
Compiled for TPUs and GPUs from this CPU (docs/lab-notes/2026-11-25-accelerators.md):
  python -m nat_jax.aot --config=configs/selfdraft_base.py --target=v5e:2x2
"""
from nat_jax.configs import at_base
from nat_jax.methods import selfdraft
from nat_jax.recipes.defaults import section


def get_config():
  c = at_base.get_config()
  c.model.method = 'selfdraft'
  c.selfdraft = section(selfdraft.SelfDraftSettings)
  c.init_from = 'runs/at_base'
  c.data.distill_dir = 'runs/distill_greedy_at_base'
  c.learning_rate = 1e-3
  c.warmup_steps = 1000
  c.total_steps = 20_000
  c.cooldown_steps = 5000
  c.eval_every = 2000
  c.checkpoint_every = 2000
  c.eval_decoder = 'drafted'
  c.test_decoder = 'drafted'
  c.test_average = 1  # the verifier stays the AT's latest parameters, bit for bit
  return c

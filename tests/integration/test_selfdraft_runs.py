"""A self-drafting head trained on a frozen AT run: the verifier kept, drafting both ways."""
import jax
import numpy as np
import pytest

from nat_jax import decode
from nat_jax.errors import ConfigError
from nat_jax.run.resources import Resources
from nat_jax.run.translation import translate_texts
from nat_jax.run.workdir import load_run
from nat_jax.training.loop import train_and_evaluate
from tests.support import tiny_config


# about a minute; the head's loss, states and drafts have unit tests (tests/unit/test_methods_selfdraft.py)
@pytest.mark.slow
def test_selfdraft_training_keeps_the_verifier_and_drafts_both_ways(trained_run, corpus, tmp_path, compile_cache):
  """init_from an AT run, a few updates: the verifier is that run bit for bit; `drafted` on the
  selfdraft run and on the AT run with the selfdraft run as drafter both give the AT's greedy output."""
  workdir = str(tmp_path / 'selfdraft')
  config = tiny_config(corpus, compile_cache, **{'model.method': 'selfdraft', 'total_steps': 4, 'eval_every': 4,
                                                 'init_from': trained_run, 'test_decoder': 'drafted'})
  train_and_evaluate(config, workdir)
  at, selfdraft = load_run(trained_run), load_run(workdir)
  for a, b in zip(jax.tree_util.tree_leaves(at.params), jax.tree_util.tree_leaves(selfdraft.params['verifier'])):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  lines = ['In the beginning God created the heavens and the earth.', 'And God said, Let there be light.']

  def translations(run, name, options):
    fn, _ = decode.build_decoder(run.method, name, options, resources=Resources(run.tokenizer, load=load_run))
    return translate_texts(run, lines, fn, 2)[0]
  want = translations(at, 'greedy', {})
  assert translations(selfdraft, 'drafted', {}) == want
  assert translations(at, 'drafted', {'drafter': workdir}) == want
  with pytest.raises(ConfigError, match='drafted needs a drafter'):
    decode.build_decoder(at.method, 'drafted', {}, resources=Resources(at.tokenizer))

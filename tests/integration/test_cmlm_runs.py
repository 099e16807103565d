"""CMLM runs end to end: trained from scratch and fine-tuned from an AT run."""
from __future__ import annotations

import numpy as np

from tests.support import tiny_config


def test_cmlm_trains_and_evaluates_end_to_end(corpus, compile_cache, tmp_path):
  from nat_jax.training.loop import train_and_evaluate
  config = tiny_config(corpus, compile_cache, total_steps=2, eval_every=2, eval_decoder='mask_predict',
                       test_decoder='mask_predict', **{'model.method': 'cmlm'})
  result = train_and_evaluate(config, str(tmp_path / 'cmlm'))
  assert result['decoder'] == 'mask_predict' and result['sentences'] == 16 and result['step'] == 2


def test_cmlm_fine_tunes_from_an_at_run(corpus, compile_cache, trained_run, tmp_path):
  """init_from an AT run: every AT parameter carries over unchanged (learning rate 0) and only the
  length head is new."""
  from flax import traverse_util

  from nat_jax.run.workdir import load_run
  from nat_jax.training.loop import train_and_evaluate
  config = tiny_config(corpus, compile_cache, total_steps=1, eval_every=1, learning_rate=0.0, init_from=trained_run,
                       eval_decoder='mask_predict', test_decoder='mask_predict', **{'model.method': 'cmlm'})
  workdir = str(tmp_path / 'cmlm_ft')
  train_and_evaluate(config, workdir)
  at = traverse_util.flatten_dict(load_run(trained_run).params)
  cmlm = traverse_util.flatten_dict(load_run(workdir).params)
  assert set(cmlm) - set(at) == {('length_embed',)} and set(at) <= set(cmlm)
  for key, value in at.items():
    np.testing.assert_array_equal(np.asarray(cmlm[key]), np.asarray(value), err_msg=str(key))

"""The IBDecoder family end to end: an IMDecoder run trains, evaluates and translates."""
import pytest

from nat_jax.decode import build_decoder
from nat_jax.run.translation import translate_texts
from nat_jax.run.workdir import load_run
from nat_jax.training.loop import train_and_evaluate
from tests.support import tiny_config


# about a minute; the IBDecoder family trains in tests/unit/test_methods_ibdecoder.py, end to end in the tour notebook
@pytest.mark.slow
def test_imdecoder_trains_and_translates_end_to_end(corpus, compile_cache, tmp_path):
  """A tiny IMDecoder (direction embeddings) through train / evaluate / translate: every line back, in
  order, with greedy, multiword beam and Jacobi (= greedy)."""
  config = tiny_config(corpus, compile_cache, total_steps=2, eval_every=2, eval_decoder='greedy',
                       test_decoder='multiword_beam', **{'model.method': 'ibdecoder', 'ibdecoder.h': 4})
  workdir = str(tmp_path / 'imdec')
  result = train_and_evaluate(config, workdir)
  assert result['decoder'] == 'multiword_beam' and result['sentences'] == 16
  run = load_run(workdir)
  assert 'direction_embed' in run.params
  texts = ['In the beginning God created the heaven and the earth.', '', 'And God said']
  outputs = {}
  for name in ('greedy', 'multiword_beam', 'jacobi_hgj'):
    fn, _ = build_decoder(run.method, name, {})
    hyps, _ = translate_texts(run, texts, fn, 2)
    assert len(hyps) == 3 and hyps[1] == '', name
    outputs[name] = hyps
  assert outputs['jacobi_hgj'] == outputs['greedy']

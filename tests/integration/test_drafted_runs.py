"""Drafted decoding with trained runs: a run drafting for itself gives greedy in few passes; a drafter of
another tokenizer, bad options and a drafter decoder that cannot run on the drafter are refused."""
import os
import shutil

import pytest

from nat_jax import decode
from nat_jax.data.tokenizer import train_model
from nat_jax.errors import ConfigError
from nat_jax.run.resources import Resources
from nat_jax.run.translation import translate_texts
from nat_jax.run.workdir import load_run


def test_a_run_drafting_for_itself_gives_greedy_in_few_passes(trained_run):
  """The verifier's own run as drafter (a perfect draft): greedy's output, ceil(n / block) + 1 passes
  or fewer; through translate_texts as translate / evaluate / distill run it."""
  run = load_run(trained_run)
  texts = ['In the beginning God created the heavens and the earth.', '', 'And God said, Let there be light.',
           'The end of it all.']
  greedy, _ = decode.build_decoder(run.method, 'greedy', {})
  want, want_aux = translate_texts(run, texts, greedy, 4)
  for block in ('2', '8'):
    fn, options = decode.build_decoder(run.method, 'drafted', {'drafter': f'{trained_run}:greedy', 'block': block},
                                       resources=Resources(run.tokenizer, load=load_run))
    got, aux = translate_texts(run, texts, fn, 4)
    assert got == want and options.block == int(block)
    keep = [0, 2, 3]
    steps = want_aux['steps'][keep]
    assert (aux['iterations'][keep] <= -(-steps // int(block)) + 1).all()
    assert (aux['accepted'][keep] >= steps - aux['iterations'][keep]).all()


def test_drafter_with_another_tokenizer_is_refused(trained_run, corpus, tmp_path):
  other = str(tmp_path / 'other')
  shutil.copytree(trained_run, other)
  run = load_run(trained_run)
  with open(corpus['train'], encoding='utf-8') as f:
    texts = [field[::-1] for line in f for field in line.rstrip('\n').split('\t')]  # another text, another model
  with open(os.path.join(other, 'spm.model'), 'wb') as f:
    f.write(train_model(texts, 350))
  with pytest.raises(ConfigError, match='another tokenizer than the verifier'):
    decode.build_decoder(run.method, 'drafted', {'drafter': other},
                         resources=Resources(run.tokenizer, load=load_run))


@pytest.mark.parametrize('overrides,message', [
    ({}, 'drafted needs a drafter'),
    ({'drafter': 'x', 'beta': '0'}, '--decoder.beta=0'),
    ({'drafter': 'x', 'update': 'sometimes'}, '--decoder.update=sometimes: drafted needs one of jacobi, draft'),
    ({'drafter': 'x', 'block': '0'}, '--decoder.block=0'),
    ({'drafter': 'x', 'tau': 'nan'}, '--decoder.tau=nan'),
])
def test_bad_drafted_options_are_config_errors(trained_run, overrides, message):
  run = load_run(trained_run)
  with pytest.raises(ConfigError) as e:
    decode.build_decoder(run.method, 'drafted', overrides, resources=Resources(run.tokenizer, load=load_run))
  assert message in str(e.value)


def test_drafter_decoder_must_run_on_the_drafter(trained_run):
  run = load_run(trained_run)
  with pytest.raises(ConfigError, match="needs a GraphPredictor"):
    decode.build_decoder(run.method, 'drafted', {'drafter': f'{trained_run}:dag_lookahead'},
                         resources=Resources(run.tokenizer, load=load_run))
  with pytest.raises(ConfigError, match="drafter decoder 'drafted'"):
    decode.build_decoder(run.method, 'drafted', {'drafter': f'{trained_run}:drafted'},
                         resources=Resources(run.tokenizer, load=load_run))

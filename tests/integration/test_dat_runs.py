"""DA-Transformer runs end to end: NLL training then FA-DAT fine-tuning, its TensorBoard counts, dagviz over
a trained run, and an n-gram LM of the training targets driving dag_beam."""
import html
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from nat_jax import decode
from nat_jax.decode.dag import DAG_PATHS
from nat_jax.errors import ConfigError
from nat_jax.run.resources import Resources
from nat_jax.run.translation import translate_texts
from nat_jax.run.workdir import load_run
from nat_jax.training.loop import train_and_evaluate
from nat_jax.viz import dag as dag_pictures
from tests.support import REPO, tensorboard_scalars, tiny_config


@pytest.fixture(scope='module')
def dat_run(tmp_path_factory, corpus, compile_cache) -> str:
  """A tiny DA-Transformer trained for 2 updates (NLL with glancing), logging every update."""
  workdir = str(tmp_path_factory.mktemp('dat_nll'))
  train_and_evaluate(tiny_config(corpus, compile_cache, total_steps=2, eval_every=2, log_every=1, **DAT_RUN),
                           workdir)
  return workdir


@pytest.mark.slow  # CI time
def test_fadat_fine_tuning_starts_from_the_nll_run(tmp_path, corpus, compile_cache, dat_run):
  nll_dir, ft_dir, dat = dat_run, str(tmp_path / 'fadat'), DAT_RUN
  # learning rate 0: the fine-tuned run must end with exactly the NLL run's parameters.
  train_and_evaluate(tiny_config(corpus, compile_cache, total_steps=2, eval_every=2, learning_rate=0.0,
                                       init_from=nll_dir, **{'dat.loss': 'fuzzy', **dat}), ft_dir)
  want, got = load_run(nll_dir).params, load_run(ft_dir).params
  for a, b in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(got)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  with open(f'{nll_dir}/spm.model', 'rb') as f1, open(f'{ft_dir}/spm.model', 'rb') as f2:
    assert f1.read() == f2.read()
  run = load_run(ft_dir)
  for name in decode.decoders_for(run.method):
    fn, _ = decode.build_decoder(run.method, name, {})
    hyps, _ = translate_texts(run, ['In the beginning', '', 'God said'], fn, 4)
    assert len(hyps) == 3 and hyps[1] == ''
  # A model of another size cannot start from it.
  with pytest.raises(ConfigError, match='do not fit this model'):
    train_and_evaluate(tiny_config(corpus, compile_cache, total_steps=1, init_from=nll_dir,
                                         **{'model.d_model': 48, **dat}), str(tmp_path / 'bad'))


def test_dat_training_logs_its_counts_to_tensorboard(dat_run):
  """The method's own counts reach TensorBoard: masked impossible pairs, and the share of target tokens
  glanced (0.5 x the unmatched share at step 0 with the default schedule)."""
  scalars = tensorboard_scalars(os.path.join(dat_run, 'tensorboard'))
  assert [s for s, _ in scalars['train/impossible']] == [1, 2]
  glanced = [v for _, v in scalars['train/glanced_per_token']]
  assert all(0 < g <= 0.5 for g in glanced), glanced
  assert 'validation/bleu' in scalars and 'train/tokens_per_s' in scalars


@pytest.mark.slow  # CI time
def test_dagviz_draws_each_decoders_path(dat_run, tmp_path):
  """The picture holds every DAG decoder's path: its translation is what the decoder outputs, the path
  runs 0 -> G-1 strictly increasing, dag_greedy always takes the drawn strongest transition, and the
  HTML lists each path vertex by vertex."""
  text = 'In the beginning God created the heavens and the earth.'
  result = subprocess.run([sys.executable, '-m', 'nat_jax.dagviz', f'--workdir={dat_run}', f'--text={text}',
                           f'--out={tmp_path}/graph'], cwd=REPO, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert (tmp_path / 'graph.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  page = (tmp_path / 'graph.html').read_text()
  run = load_run(dat_run)
  pic = dag_pictures.dag_picture(run, text, list(DAG_PATHS), edges=1)
  size = len(pic.top)
  strongest = {i: j for i, j, _ in pic.edges}
  for name, path in pic.paths.items():
    fn, _ = decode.build_decoder(run.method, name, {})
    assert path.translation == translate_texts(run, [text], fn, 1)[0][0], name
    assert path.vertices[0] == 0 and path.vertices[-1] == size - 1
    assert all(a < b for a, b in zip(path.vertices, path.vertices[1:]))
    assert ' '.join(f'{v}:{html.escape(t)}' for v, t in zip(path.vertices, path.pieces)) in page, name
  greedy = pic.paths['dag_greedy'].vertices
  assert all(strongest[a] == b for a, b in zip(greedy, greedy[1:]))
  not_dag = subprocess.run([sys.executable, '-m', 'nat_jax.dagviz', f'--workdir={REPO}/nowhere', '--text=x'],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
  assert not_dag.returncode == 2 and 'Train first' in not_dag.stderr


@pytest.mark.slow  # CI time
def test_lm_of_the_training_targets_drives_dag_beam(dat_run, tmp_path):
  """`python -m nat_jax.lm` writes an ARPA model of the run's training targets in its pieces;
  dag_beam reads it (--decoder.lm): with gamma 0 its output is dag_beam's without an LM, the host and
  device searches agree with it, and a missing file is a ConfigError naming the command that makes one."""
  from nat_jax.decode import arpa
  out = str(tmp_path / 'lm3.arpa')
  result = subprocess.run([sys.executable, '-m', 'nat_jax.lm', f'--workdir={dat_run}', '--order=3', f'--out={out}'],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
  assert result.returncode == 0, result.stderr[-2000:]
  assert '3-gram LM of 600 training targets' in result.stdout
  model = arpa.read_arpa(out)
  run = load_run(dat_run)
  pieces = run.tokenizer.word_ids()
  assert {g[0] for g in model if len(g) == 1} <= set(pieces)
  with open(os.path.join(os.path.dirname(run.config.data.train_files), 'train.tsv'), encoding='utf-8') as f:
    target = f.readline().split('\t')[1]  # the first training target (the first reference)
  words = [p for p, i in pieces.items() if i in run.tokenizer.encode(target)]
  assert words and all((w,) in model for w in words) and ('</s>',) in model
  texts = ['In the beginning', 'God said', '']
  plain, _ = decode.build_decoder(run.method, 'dag_beam', {})
  resources = Resources(run.tokenizer)
  with_lm, _ = decode.build_decoder(run.method, 'dag_beam', {'lm': out, 'gamma': '0'}, resources=resources)
  assert translate_texts(run, texts, plain, 4)[0] == translate_texts(run, texts, with_lm, 4)[0]
  on = {search: decode.build_decoder(run.method, 'dag_beam', {'lm': out, 'gamma': '0.5', 'search': search},
                                     resources=Resources(run.tokenizer))[0] for search in ('host', 'device')}
  assert translate_texts(run, texts, on['host'], 4)[0] == translate_texts(run, texts, on['device'], 4)[0]
  with pytest.raises(ConfigError, match='dag_beam needs one of auto, host, device'):
    decode.build_decoder(run.method, 'dag_beam', {'search': 'gpu'})
  with pytest.raises(ConfigError, match='nat_jax.lm'):
    decode.build_decoder(run.method, 'dag_beam', {'lm': str(tmp_path / 'none.arpa')}, resources=resources)


DAT_RUN = {'model.method': 'dat', 'dat.upsample_scale': 2.0, 'eval_decoder': 'dag_greedy',
           'test_decoder': 'dag_lookahead', 'label_smoothing': 0.0}

"""Training: resume (in-process, SIGTERM, SIGKILL) equals uninterrupted; corrupt checkpoints; sharding; errors."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest

from nat_jax.run import checkpoint
from nat_jax.run.workdir import load_run
from nat_jax.training.bookkeeping import PREEMPTED_EXIT, CpuClock, MetricsLog
from nat_jax.training.loop import train_and_evaluate
from tests.support import REPO, config_flags_for, tensorboard_scalars, tiny_config, xla_flags


def final_params(workdir):
  return jax.device_get(load_run(workdir).params)


def assert_same_params(a, b):
  leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
  assert len(leaves_a) == len(leaves_b)
  for x, y in zip(leaves_a, leaves_b):
    np.testing.assert_array_equal(x, y)


def train_cmd(config, workdir):
  return [sys.executable, '-m', 'nat_jax.train', '--config=configs/at_bible_tiny.py', f'--workdir={workdir}',
          *config_flags_for(config)]


def test_resumed_training_equals_uninterrupted(tmp_path, corpus, compile_cache, trained_run, capsys):
  workdir = str(tmp_path / 'resumed')
  train_and_evaluate(tiny_config(corpus, compile_cache, total_steps=3), workdir)
  meta = load_run(workdir).meta[0]
  assert meta['step'] == 3 and meta['cpu_seconds'] > 0
  capsys.readouterr()
  train_and_evaluate(tiny_config(corpus, compile_cache), workdir)  # 3 -> 8
  report = capsys.readouterr().out
  # the closing report says what so small a model is for, and where to go next
  after = report.split('Sample translations:')[1]
  assert 'This run is a model of method at trained on the raw references' in after and 'Next: distil it' in after
  assert 'docs/quickstart.md' in report
  assert_same_params(final_params(workdir), final_params(trained_run))
  logged = [json.loads(line) for line in open(os.path.join(workdir, 'metrics.jsonl'))]
  # training CPU time carries over the resume: every later row counts on from the step-3 checkpoint's
  cpu = [(entry['step'], entry['cpu_hours'] * 3600) for entry in logged]
  assert [s for s, _ in cpu] == sorted(s for s, _ in cpu) and all(c > 0 for _, c in cpu)
  assert all(c >= meta['cpu_seconds'] - 0.1 for s, c in cpu if s > 3)
  assert load_run(workdir).meta[0]['cpu_seconds'] >= max(c for _, c in cpu) - 0.1
  # TensorBoard holds exactly what metrics.jsonl holds, read back with the tensorboard package's reader
  scalars = tensorboard_scalars(os.path.join(workdir, 'tensorboard'))
  expected = {}
  for entry in logged:
    for key, value in entry.items():
      if key not in ('step', 'split', 'time'):
        expected.setdefault(f'{entry["split"]}/{key}', []).append((entry['step'], np.float32(value)))
  assert {'train/loss', 'train/lr', 'train/tokens_per_s', 'validation/bleu'} <= set(expected)
  assert scalars == expected




def test_cpu_clock_adds_the_resumed_seconds_and_leaves_out_excluded_blocks():
  ticks = iter([100.0, 103.0, 104.0, 110.0, 111.5, 120.0, 125.0, 130.0])
  clock = CpuClock(before=50.0, clock=lambda: next(ticks))  # starts at 100
  assert clock.seconds() == 53.0  # 50 spent before the resume + 3
  with clock.excluded():  # 104 -> 110: a validation
    pass
  assert clock.seconds() == 55.5  # 50 + (111.5 - 100) - 6
  with pytest.raises(RuntimeError), clock.excluded():  # 120 -> 125, left by an error: still excluded
    raise RuntimeError
  assert clock.seconds() == 69.0  # 50 + 30 - 11


def test_tensorboard_drops_steps_logged_after_the_resumed_checkpoint(tmp_path):
  """A run interrupted after logging step 6 but resumed from its step-4 checkpoint: TensorBoard shows
  the resumed run's step 6, not both."""
  first = MetricsLog(str(tmp_path), 0, True)
  for step in (2, 4, 6):
    first.write(step, 'train', {'loss': 10.0 - step})
  first.close()
  time.sleep(1.1)  # a new event file name (the writer names files by the second)
  resumed = MetricsLog(str(tmp_path), 4, True)
  resumed.write(6, 'train', {'loss': 0.5})
  resumed.close()
  assert tensorboard_scalars(str(tmp_path / 'tensorboard')) == {'train/loss': [(2, 8.0), (4, 6.0), (6, 0.5)]}
  assert [json.loads(line)['loss'] for line in open(tmp_path / 'metrics.jsonl')] == [8.0, 6.0, 0.5]


def wait_for(path, proc, timeout=300):
  t0 = time.time()
  while not os.path.exists(path):
    assert proc.poll() is None, proc.communicate()[0][-3000:]
    assert time.time() - t0 < timeout, f'{path} did not appear'
    time.sleep(0.05)


@pytest.mark.parametrize('sig', [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow),  # same path
                                 signal.SIGKILL])
def test_interrupted_run_resumes_to_the_same_parameters(tmp_path, corpus, compile_cache, trained_run, sig):
  workdir = str(tmp_path / 'interrupted')
  config = tiny_config(corpus, compile_cache)
  proc = subprocess.Popen(train_cmd(config, workdir), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
  wait_for(os.path.join(workdir, 'checkpoints', '2'), proc)
  proc.send_signal(sig)
  out, _ = proc.communicate(timeout=300)
  if sig != signal.SIGKILL:  # SIGTERM and Ctrl-C: saved, one stopped line, 128 + the signal (a scheduler can tell it)
    assert proc.returncode == 128 + sig and PREEMPTED_EXIT == 143, out[-3000:]
    stopped = [line for line in out.splitlines() if line.startswith('stopped by ')]
    assert len(stopped) == 1 and re.fullmatch(f'stopped by {sig.name}: saved checkpoint at step [0-9]+; '
                                              'rerun the same command to resume.', stopped[0]), out[-3000:]
    assert not [line for line in out.splitlines() if line.startswith('error: ')], out[-3000:]
    assert 'Test set' not in out and 'Traceback' not in out, out[-3000:]
  else:
    assert proc.returncode == -signal.SIGKILL
  resumed = subprocess.run(train_cmd(config, workdir), cwd=REPO, capture_output=True, text=True, timeout=600)
  assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
  assert 'Resumed from step' in resumed.stdout
  assert_same_params(final_params(workdir), final_params(trained_run))


def test_a_signal_in_the_final_test_pass_is_a_stopped_command(tmp_path, corpus, compile_cache, trained_run,
                                                               monkeypatch):
  """SIGTERM while the finished training tests (it ended with no message): the command line's one signal path
  raises errors.Stopped (status 143), no test_results.json is half-written, and rerunning tests again."""
  from nat_jax.commands import cli
  from nat_jax.errors import Stopped
  from nat_jax.training import loop
  from tests.support import copy_run
  workdir = copy_run(trained_run, tmp_path)
  os.remove(os.path.join(workdir, 'test_results.json'))
  evaluate = loop.evaluate_bleu
  monkeypatch.setattr(loop, 'evaluate_bleu', lambda *a: (os.kill(os.getpid(), signal.SIGTERM), evaluate(*a))[1])
  previous = cli.stop_on_signals()  # as every command runs
  try:
    with pytest.raises(Stopped) as e:
      train_and_evaluate(tiny_config(corpus, compile_cache), workdir)
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)
  assert e.value.exit_status == 143 and str(e.value).startswith('stopped by SIGTERM: ')
  assert not os.path.exists(os.path.join(workdir, 'test_results.json'))
  monkeypatch.setattr(loop, 'evaluate_bleu', evaluate)
  assert train_and_evaluate(tiny_config(corpus, compile_cache), workdir)['step'] == 8
  assert os.path.exists(os.path.join(workdir, 'test_results.json'))


def test_corrupt_latest_checkpoint_falls_back_to_previous(tmp_path, trained_run, capsys, caplog):
  workdir = str(tmp_path / 'copy')
  shutil.copytree(trained_run, workdir)
  state_dir = os.path.join(workdir, 'checkpoints', '8', 'state')
  for root, _, files in os.walk(state_dir):  # truncate every data file of the newest checkpoint
    for name in files:
      with open(os.path.join(root, name), 'wb'):
        pass
  run = load_run(workdir)
  assert run.meta[0]['step'] == 6
  # a warning, never on stdout
  assert 'checkpoint step 8 is unreadable' in caplog.text and capsys.readouterr().out == ''
  # And training restarts from it rather than crashing.
  ckpt = checkpoint.Checkpointer(workdir)
  from nat_jax.parallel.sharding import make_mesh
  from nat_jax.run.train_state import dummy_batch, make_optimizer, state_shardings
  abstract, _ = state_shardings(run.method, make_optimizer(run.config), dummy_batch(), make_mesh(1))
  state, meta = ckpt.restore_latest(abstract)
  assert meta['step'] == 6 and int(state.step) == 6


def test_missing_checkpoint_is_a_clear_error(tmp_path):
  with pytest.raises(checkpoint.CheckpointError, match='Train first'):
    load_run(str(tmp_path))


SHARDED_SCRIPT = textwrap.dedent('''
    import os
    os.environ['JAX_PLATFORMS'] = 'cpu'
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh
    from nat_jax.parallel import sharding
    from nat_jax.recipes.defaults import base_config
    from nat_jax.methods import get_method
    from nat_jax.training.steps import compile_steps
    from nat_jax.run.train_state import create_train_state, make_optimizer, state_shardings

    cfg = base_config()
    cfg.model.update(d_model=32, num_heads=4, d_ff=64, enc_layers=1, dec_layers=1, dropout=0.1)
    cfg.update(learning_rate=3e-3, warmup_steps=1)
    method = get_method(cfg, 50)
    tx = make_optimizer(cfg)

    def batch(step):
      rng = np.random.default_rng(step)
      src = rng.integers(3, 50, (8, 12)).astype(np.int32); src[:, 9:] = 0
      tgt = rng.integers(3, 50, (8, 12)).astype(np.int32); tgt[:, 10] = 1; tgt[:, 11:] = 0
      return {'source': src, 'target': tgt}

    def run(mesh):
      _, state_sh = state_shardings(method, tx, batch(0), mesh)
      state = create_train_state(method, tx, batch(0), mesh, jax.random.PRNGKey(0))
      grad_fn, apply_fn, _ = compile_steps(method, tx, mesh, state_sh)
      losses = []
      for step in range(3):
        g, s = grad_fn(state.params, sharding.global_batch(batch(step), mesh), jax.random.PRNGKey(step),
                       jnp.int32(step))
        state, m = apply_fn(state, g, s)
        losses.append(float(m['loss']))
      return losses, state

    one = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ('data', 'model'))
    eight = Mesh(np.array(jax.devices()).reshape(4, 2), ('data', 'model'))
    loss1, state1 = run(one)
    loss8, state8 = run(eight)
    spec = state8.params['decoder_0']['ffn']['wi']['kernel'].sharding.spec
    assert 'model' in tuple(spec), spec
    np.testing.assert_allclose(loss1, loss8, rtol=1e-5)
    for a, b in zip(jax.tree_util.tree_leaves(jax.device_get(state1.params)),
                    jax.tree_util.tree_leaves(jax.device_get(state8.params))):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    print('SHARDED-OK', loss1, loss8)
''')


def test_sharded_step_on_8_devices_equals_one_device():
  result = subprocess.run([sys.executable, '-c', SHARDED_SCRIPT], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**os.environ, 'XLA_FLAGS': xla_flags(devices=8)})
  assert result.returncode == 0 and 'SHARDED-OK' in result.stdout, result.stdout[-2000:] + result.stderr[-4000:]


@pytest.mark.parametrize('flag,message', [
    ('--config.no_such_key=1', 'no_such_key'),
    ('--config.total_steps=many', 'total_steps'),
    ('--config.data.train_files=/nonexistent/train.tsv', '/nonexistent/train.tsv'),
    ('--config.total_steps=0', '--config.total_steps=0: must be an integer >= 1'),
    ('--config.data.max_examples=-1', '--config.data.max_examples=-1: must be 0 (all) or an integer >= 1'),
])
def test_bad_config_is_a_clear_error(tmp_path, flag, message):
  cmd = [sys.executable, '-m', 'nat_jax.train', '--config=configs/at_bible_tiny.py', f'--workdir={tmp_path}/w',
         '--config.data.source=files', flag]
  result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert result.returncode == 2, result.stderr[-2000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith('error: ')]
  assert len(errors) == 1 and message in errors[0], result.stderr[-2000:]
  assert 'Traceback' not in result.stderr


REFUSED = [({'data.distill_dir': '/nonexistent/distilled'}, 'distill_dir'), ({'data.source': 'bogus'}, 'bogus'),
           ({'data.source': 'bible', 'data.pair': 'xx-yy'}, 'xx-yy'), ({'init_from': '/nonexistent/run'}, 'init_from'),
           ({'mesh.model_parallel': 3}, 'model_parallel')]


@pytest.mark.parametrize('overrides,message', REFUSED, ids=lambda x: ','.join(x) if isinstance(x, dict) else x)
def test_a_refused_setting_writes_nothing(tmp_path, corpus, trained_run, overrides, message):
  """Every refusal comes before anything is written: an existing run keeps its config.json byte for byte and
  its files, a fresh workdir is not even made (no tokenizer trained first)."""
  from nat_jax.errors import NatJaxError
  from tests.support import copy_run, with_overrides
  existing = copy_run(trained_run, tmp_path)
  before = {name: open(os.path.join(existing, name), 'rb').read() for name in os.listdir(existing)
            if os.path.isfile(os.path.join(existing, name))}
  config = with_overrides(tiny_config(corpus), {'total_steps': 40, **overrides})
  for workdir in (existing, str(tmp_path / 'fresh')):
    with pytest.raises(NatJaxError, match=message):
      train_and_evaluate(config, workdir)
  after = {name: open(os.path.join(existing, name), 'rb').read() for name in before}
  assert after == before and sorted(os.listdir(existing)) == sorted(os.listdir(trained_run))
  assert not os.path.exists(tmp_path / 'fresh')


def test_resuming_with_a_damaged_tokenizer_names_it(tmp_path, corpus, trained_run):
  """A truncated or garbage spm.model: a DataError naming the file, not sentencepiece's RuntimeError."""
  from nat_jax.errors import DataError
  from tests.support import copy_run
  workdir = copy_run(trained_run, tmp_path)
  model = os.path.join(workdir, 'spm.model')
  whole = open(model, 'rb').read()
  for damaged in (whole[:len(whole) // 3], b'garbage' * 100):
    with open(model, 'wb') as f:
      f.write(damaged)
    with pytest.raises(DataError, match='spm.model is not a readable sentencepiece model'):
      train_and_evaluate(tiny_config(corpus), workdir)


def test_another_methods_option_is_an_unknown_key(tmp_path):
  """The AT recipe holds no section for the DA-Transformer's options: overriding one is an error."""
  cmd = [sys.executable, '-m', 'nat_jax.train', '--config=configs/at_bible_tiny.py', f'--workdir={tmp_path}/w',
         '--config.dat.loss=fuzzy']
  result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert result.returncode == 2 and "section 'dat' holds the options of method 'dat'" in result.stderr
  assert 'Traceback' not in result.stderr and not os.path.exists(tmp_path / 'w')


def test_empty_data_file_is_a_clear_error(tmp_path):
  empty = tmp_path / 'train.tsv'
  empty.write_text('')
  cmd = [sys.executable, '-m', 'nat_jax.train', '--config=configs/at_bible_tiny.py', f'--workdir={tmp_path}/w',
         '--config.data.source=files', f'--config.data.train_files={empty}']
  result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert result.returncode == 2 and str(empty) in result.stderr, result.stderr[-2000:]


def test_checkpoint_averaging_and_best(trained_run):
  import json

  import orbax.checkpoint as ocp

  from nat_jax.parallel.sharding import make_mesh
  from nat_jax.run.train_state import dummy_batch, make_optimizer, state_shardings
  run = load_run(trained_run)
  abstract, _ = state_shardings(run.method, make_optimizer(run.config), dummy_batch(), make_mesh(1))
  manager = ocp.CheckpointManager(os.path.join(trained_run, 'checkpoints'))
  p8 = checkpoint.restore_newest(manager, abstract, steps=[8])[0].params
  p6 = checkpoint.restore_newest(manager, abstract, steps=[6])[0].params
  averaged = load_run(trained_run, average=2)
  assert [m['step'] for m in averaged.meta] == [8, 6]
  for avg, a, b in zip(*(jax.tree_util.tree_leaves(t) for t in (averaged.params, p8, p6))):
    np.testing.assert_allclose(avg, (np.asarray(a) + np.asarray(b)) / 2, rtol=1e-6, atol=1e-7)
  # best/: the kept checkpoint is the validation step with the highest BLEU.
  with open(os.path.join(trained_run, 'metrics.jsonl')) as f:
    validation = [json.loads(l) for l in f if '"validation"' in l]
  best = load_run(trained_run, which='best')
  assert best.meta[0]['bleu'] == max(v['bleu'] for v in validation)


def test_the_end_of_training_note_says_what_the_run_is_and_what_comes_next():
  """A 20-update DA-Transformer student with empty outputs is told it is a student that does not translate yet and
  to compare it with its teacher; a small AT teacher is told to distil; a DA-Transformer on raw references is
  told to get a teacher; no note calls a student the teacher of the chain."""
  from nat_jax.training.loop import run_note
  from tests.support import dat_config
  result = lambda bleu, step: {'first_ref': {'bleu': bleu}, 'sentences': 10, 'step': step}
  student = dat_config(**{'data.distill_dir': 'runs/distill_at', 'init_from': 'runs/at'})
  note = run_note(student, 'runs/dat', result(0.0, 20), 3_000_000, 10)
  assert 'a student of method dat, trained on the teacher translations in runs/distill_at' in note
  assert 'does not translate yet' in note and '10 of 10 outputs empty' in note
  assert 'python -m nat_jax.benchmark --runs=runs/at,runs/dat' in note and 'teacher of' not in note
  teacher = tiny_config({'train': '', 'validation': '', 'test': ''})
  note = run_note(teacher, 'runs/at_bible_tiny', result(9.5, 2000), 3_000_000, 0)
  assert 'a model of method at trained on the raw references' in note
  assert 'gets the gist' in note and 'python -m nat_jax.distill --workdir=runs/at_bible_tiny' in note
  raw_dat = dat_config()
  assert 'learns from a teacher' in run_note(raw_dat, 'runs/d', result(5.0, 1000), 30_000_000, 0)

"""The findings of the hostile probe of 2026-11-25 (issue 37), each reproduced: nothing lost behind
exit 0, every bad value refused before work with one `error:` line.

Outputs that are not regular files (device nodes made here with mknod, a closed pipe), trainings
into a workdir of another model or one another training holds, out-of-range settings, a loss that
turns NaN, size-like decoder options that could not fit, damaged run directories, invisible
characters in translations.
"""
import json
import os
import stat
import subprocess
import sys

import jax
import numpy as np
import pytest

from nat_jax import decode
from nat_jax.core.tokens import WIDTH_STEP, decode_length_bound
from nat_jax.data.tokenizer import one_line
from nat_jax.errors import CheckpointError, ConfigError, ResourceBusy, TrainingError
from nat_jax.files import exclusive
from nat_jax.methods import get_method
from nat_jax.parallel.sharding import make_mesh
from nat_jax.run import checkpoint
from nat_jax.run.train_state import dummy_batch, make_optimizer, state_shardings
from nat_jax.run.translation import encode_sources, translate_texts
from nat_jax.run.workdir import load_run, read_run_config
from nat_jax.training.bookkeeping import LOCK_FILE
from nat_jax.training.config import check_fits, estimated_parameters, fit_bytes
from nat_jax.training.loop import TrainLoop, check_finite_loss, train_and_evaluate
from tests.support import (
  REPO,
  THREE_LINES,
  assert_one_error_line,
  copy_run,
  device,  # a device node of its own in tmp_path, never the machine's /dev/full
  run_cli,
  tiny_config,
)


# --- outputs -------------------------------------------------------------------------------------
def test_translate_to_a_full_device_is_an_error_and_the_device_stays(trained_run, tmp_path):
  full = device(tmp_path, 'full', 7)
  result = run_cli('nat_jax.translate', f'--workdir={trained_run}', f'--output={full}')
  line = assert_one_error_line(result)
  assert full in line and 'No space left on device' in line
  assert stat.S_ISCHR(os.lstat(full).st_mode) and os.listdir(tmp_path) == ['full']


def test_translate_with_stdout_on_a_full_device_is_an_error(trained_run, tmp_path):
  full = device(tmp_path, 'full', 7)
  with open(full, 'wb') as out:
    result = subprocess.run([sys.executable, '-m', 'nat_jax.translate', f'--workdir={trained_run}'],
                            input=THREE_LINES, stdout=out, stderr=subprocess.PIPE, cwd=REPO, timeout=300)
  assert 'No space left on device' in assert_one_error_line(result)


def test_translate_into_a_pipe_closed_early_is_an_error(trained_run):
  """`translate | head -0`: the reader is gone before the first line; not exit 0, no traceback."""
  proc = subprocess.Popen([sys.executable, '-m', 'nat_jax.translate', f'--workdir={trained_run}'],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
  proc.stdout.close()
  _, err = proc.communicate(THREE_LINES, timeout=300)
  result = subprocess.CompletedProcess(proc.args, proc.returncode, b'', err)
  assert 'broken pipe' in assert_one_error_line(result)


def test_translate_through_a_symlink_keeps_the_link(trained_run, tmp_path):
  target = tmp_path / 'real.txt'
  target.write_text('old\n')
  (tmp_path / 'link.txt').symlink_to(target)
  result = run_cli('nat_jax.translate', f'--workdir={trained_run}', f'--output={tmp_path}/link.txt')
  assert result.returncode == 0, result.stderr[-2000:]
  assert (tmp_path / 'link.txt').is_symlink() and len(target.read_text().splitlines()) == 3


def test_lm_refuses_to_overwrite_without_overwrite(trained_run, tmp_path):
  workdir = copy_run(trained_run, tmp_path)
  config_before = open(os.path.join(workdir, 'config.json')).read()
  result = run_cli('nat_jax.lm', f'--workdir={workdir}', '--order=2', f'--out={workdir}/config.json', stdin=b'')
  assert 'exists; give another path, or add --overwrite' in assert_one_error_line(result)
  assert open(os.path.join(workdir, 'config.json')).read() == config_before
  out = tmp_path / 'lm2.arpa'
  out.write_text('old\n')
  done = run_cli('nat_jax.lm', f'--workdir={workdir}', '--order=2', f'--out={out}', '--overwrite', stdin=b'')
  assert done.returncode == 0, done.stderr[-2000:]
  assert out.read_text().lstrip().startswith('\\data\\')


# --- trainings -----------------------------------------------------------------------------------
def listing(workdir: str) -> dict[str, bytes]:
  """Every file under `workdir` with its bytes."""
  files = {}
  for root, _, names in os.walk(workdir):
    for name in names:
      path = os.path.join(root, name)
      files[os.path.relpath(path, workdir)] = open(path, 'rb').read()
  return files


@pytest.mark.parametrize('overrides,differs', [
    ({'model.d_model': 64, 'model.d_ff': 128}, 'model.d_model: 32 -> 64'),
    ({'model.method': 'ibdecoder'}, "model.method: 'at' -> 'ibdecoder'"),
    ({'vocab_size': 300}, 'vocab_size: 400 -> 300'),
])
def test_training_into_a_run_of_another_model_is_refused_before_any_work(trained_run, tmp_path, corpus, overrides,
                                                                          differs):
  workdir = copy_run(trained_run, tmp_path)
  before = listing(workdir)
  with pytest.raises(ConfigError) as e:
    train_and_evaluate(tiny_config(corpus, **overrides), workdir)
  assert 'holds a trained run of another model' in str(e.value) and differs in str(e.value)
  assert len(str(e.value)) < 360, str(e.value)  # a whole section's repr is cut, and at most 3 differences shown
  assert listing(workdir) == before  # config, results and checkpoints untouched, nothing set aside


def test_a_second_training_in_the_same_workdir_is_refused(tmp_path, corpus):
  workdir = tmp_path / 'w'
  workdir.mkdir()
  with exclusive(str(workdir / LOCK_FILE), 'x', 'a training'):  # what a running training holds
    with pytest.raises(ResourceBusy, match=f'--workdir={workdir} is in use: a training is running there'):
      train_and_evaluate(tiny_config(corpus), str(workdir))
  assert sorted(os.listdir(workdir)) == [LOCK_FILE]


@pytest.mark.parametrize('overrides,message', [
    ({'label_smoothing': 2.0}, '--config.label_smoothing=2.0: must be a finite number from 0 to below 1'),
    ({'learning_rate': 1e30}, '--config.learning_rate=1e+30: must be a finite number from 0 to 1'),
    ({'learning_rate': float('nan')}, '--config.learning_rate=nan: must be a finite number from 0 to 1'),
    ({'weight_decay': float('nan')}, '--config.weight_decay=nan: must be a finite number from 0 to 1'),
    ({'model.dropout': 1.5}, '--config.model.dropout=1.5: must be a finite number from 0 to below 1'),
    ({'clip_norm': -1.0}, '--config.clip_norm=-1.0: must be a finite number >= 0'),
    ({'adam_b1': 2.0}, '--config.adam_b1=2.0: must be a finite number from 0 to below 1'),
    ({'model.d_model': 0}, '--config.model.d_model=0: must be an integer >= 1'),
    ({'model.d_model': 33}, 'model.d_model=33 must be divisible by model.num_heads=2'),
    ({'max_len': 100_000, 'tokens_per_batch': 200_000}, '--config.max_len=100000: must be an integer from 8 to 4096'),
    ({'tokens_per_batch': 1_000_000_000}, 'tokens_per_batch must be <= 1048576'),
])
def test_out_of_range_settings_are_refused_before_any_work(tmp_path, corpus, overrides, message):
  workdir = tmp_path / 'w'
  with pytest.raises(ConfigError) as e:
    train_and_evaluate(tiny_config(corpus, **overrides), str(workdir))
  assert message in str(e.value) and not workdir.exists()


@pytest.mark.parametrize('overrides,fits', [
    ({}, True),  # the tiny recipe: well inside 1 GiB
    ({'tokens_per_batch': 1 << 20, 'vocab_size': 32000}, False),  # logits alone: 2^20 x 32000 x 8 B = 250 GiB
    ({'model.d_model': 4096, 'model.d_ff': 16384, 'model.num_heads': 8}, False),  # ~470M parameters: 7 GiB of state
])
def test_what_cannot_fit_one_device_is_refused_before_any_work(tmp_path, corpus, monkeypatch, overrides, fits):
  """Parameters + Adam state (16 B each) plus a micro-batch's logits and their gradient (8 B each),
  against a device of 1 GiB: the arithmetic of fit_bytes, by hand."""
  monkeypatch.setattr('nat_jax.training.config.device_memory_bytes', lambda: 1 << 30)
  config = tiny_config(corpus, **overrides)
  devices = jax.device_count()  # the micro-batch's rows are split over them (model_parallel 1)
  by_hand = 16 * estimated_parameters(config) + 8 * config.tokens_per_batch * config.vocab_size / devices
  assert sum(fit_bytes(config)) == pytest.approx(by_hand)
  assert (by_hand <= 1 << 30) == fits
  if fits:
    check_fits(config)
  else:
    with pytest.raises(ConfigError, match='need more than the 1.0 GiB one device has'):
      train_and_evaluate(config, str(tmp_path / 'w'))
    assert not (tmp_path / 'w').exists()


def test_a_loss_that_turns_nan_stops_training_before_anything_is_saved(tmp_path, corpus, compile_cache,
                                                                       monkeypatch):
  real_update = TrainLoop.update

  def diverging(self, state, step):  # the real update, whose loss turns NaN at step 3 only
    state, metrics = real_update(self, state, step)
    return state, dict(metrics, loss=metrics['loss'] * np.nan) if step == 2 else metrics
  monkeypatch.setattr(TrainLoop, 'update', diverging)
  workdir = tmp_path / 'w'
  # the losses are read (a device sync) where the loop logs or saves: steps 2, 4, ...
  with pytest.raises(TrainingError, match='the training loss is nan by step 4: training diverged'):
    train_and_evaluate(tiny_config(corpus, compile_cache), str(workdir))
  assert sorted(os.listdir(workdir / 'checkpoints')) == ['2']  # saved before; nothing from step 3 on
  assert not (workdir / 'test_results.json').exists()


def test_finite_losses_pass_the_check():
  cfg = tiny_config({'train': '', 'validation': '', 'test': ''})
  for loss in (0.0, 12.5, 1e30):
    check_finite_loss(loss, 1, cfg)
  for loss in (float('nan'), float('inf'), -float('inf')):
    with pytest.raises(TrainingError):
      check_finite_loss(loss, 1, cfg)


# --- decoder options and picture flags -----------------------------------------------------------
@pytest.mark.parametrize('decoder,overrides,message', [
    ('dag_beam', {'top_cand': '0'}, 'top_cand=0: dag_beam needs 1 to 1048576 candidate tokens'),
    ('dag_beam', {'gamma': 'nan'}, 'gamma=nan: dag_beam needs a finite number from 0 to 10'),
    ('dag_beam', {'lm_pool': '0'}, 'lm_pool=0'),
    ('beam', {'beam_size': '100000'}, 'beam_size=100000: beam needs 1 to 256 beams'),
    ('multiword_beam', {'beam_size': '100000'}, 'beam_size=100000: multiword_beam needs 1 to 256'),
    ('hrt', {'b_at': '100000'}, 'b_at=100000: hrt needs 1 to 256 beams'),
    ('mask_predict', {'length_beam': '100000'}, 'length_beam=100000'),
    ('beam', {'alpha': '1e300'}, 'alpha=1e+300: beam needs a finite number from 0 to 10'),  # overflowed (5+|y|)^alpha
    ('dag_beam', {'beta': '1e300'}, 'beta=1e+300: dag_beam needs a finite number from 0 to 10'),
    ('multiword_beam', {'alpha': '1e300'}, 'alpha=1e+300: multiword_beam needs a finite number from 0 to 10'),
    ('dag_beam', {'top_cand': '100000000'}, 'top_cand=100000000: dag_beam needs 1 to 1048576'),
])
def test_out_of_range_decoder_options_are_refused(decoder, overrides, message):
  with pytest.raises(ConfigError) as e:
    decode.parse_options(decoder, overrides)
  assert message in str(e.value)


@pytest.mark.parametrize('decoder,option', [('drafted', 'block'), ('jacobi_pgj', 'block_size'),
                                            ('hrt', 'jacobi_block')])
def test_blocks_longer_than_any_run_decodes_are_refused(decoder, option):
  """A block past a run's own bound decodes as one block of it (HRT's tests use one); past what any
  config decodes (4096) it is refused before anything is allocated."""
  with pytest.raises(ConfigError, match=f'--decoder.{option}=100000: {decoder} needs .*4096'):
    decode.parse_options(decoder, {option: '100000'})
  assert decode.parse_options(decoder, {option: '4096'}).kwargs()[option] == 4096


@pytest.mark.parametrize('command,args,message', [
    ('nat_jax.dagviz', ['--beta=nan'], '--beta=nan: must be a finite number >= 0'),
    ('nat_jax.dagviz', ['--top_tokens=0'], '--top_tokens=0: must be an integer from 1 to 100'),
    ('nat_jax.ddgviz', ['--max_len=100'], '--max_len=100: this run decodes at most 40 tokens'),
    ('nat_jax.ddgviz', ['--max_len=100000'], "--max_len=100000: must be 0 (the run's bound) or an integer "
                                         'from 1 to 4096'),
    ('nat_jax.ddgviz', ['--block_size=0'], '--block_size=0: must be an integer from 1 to 4096'),
])
def test_picture_flags_are_one_error_line(trained_run, tmp_path, command, args, message):
  result = run_cli(command, f'--workdir={trained_run}', '--text=Jesus wept.', f'--out={tmp_path}/pic', *args)
  assert message in assert_one_error_line(result) and result.stdout == b'' and os.listdir(tmp_path) == []


# --- damaged run directories ---------------------------------------------------------------------
def damage_config(workdir: str, edit):
  path = os.path.join(workdir, 'config.json')
  config = json.load(open(path))
  open(path, 'w').write(json.dumps(edit(config)))


@pytest.mark.parametrize('edit,message', [
    (lambda c: [c], 'holds a JSON list, not an object of settings'),
    (lambda c: dict(c, vocab_size='4000'), "vocab_size is '4000', not a whole number"),
    (lambda c: dict(c, model=dict(c['model'], d_model=None)), 'model.d_model is None'),
    (lambda c: {k: v for k, v in c.items() if k != 'model'}, 'has no "model" section'),
])
def test_a_damaged_config_is_a_checkpoint_error_naming_the_file(trained_run, tmp_path, edit, message):
  workdir = copy_run(trained_run, tmp_path)
  damage_config(workdir, edit)
  with pytest.raises(CheckpointError, match=f'{workdir}/config.json: ') as e:
    load_run(workdir)
  assert message in str(e.value)


def test_a_config_that_is_not_json_names_the_file(trained_run, tmp_path):
  workdir = copy_run(trained_run, tmp_path)
  open(os.path.join(workdir, 'config.json'), 'w').write('{"model": ')
  with pytest.raises(CheckpointError, match=f'{workdir}/config.json is not valid JSON'):
    load_run(workdir)


@pytest.mark.parametrize('content', [b'', b'garbage' * 10])
def test_a_damaged_tokenizer_is_a_checkpoint_error(trained_run, tmp_path, content):
  workdir = copy_run(trained_run, tmp_path)
  open(os.path.join(workdir, 'spm.model'), 'wb').write(content)
  with pytest.raises(CheckpointError, match='spm.model is not a readable sentencepiece model'):
    load_run(workdir)


def test_a_config_that_no_longer_matches_its_checkpoints_says_so(trained_run, tmp_path):
  """Said before any restore: every checkpoint would fail (and a resumed training would set them all
  aside), while what is wrong is the config."""
  workdir = copy_run(trained_run, tmp_path)
  damage_config(workdir, lambda c: dict(c, model=dict(c['model'], d_ff=128)))
  with pytest.raises(CheckpointError, match=r'describe different models .* stored \(32, 64\), the config makes '
                                            r'\(32, 128\)'):
    load_run(workdir)
  config = read_run_config(os.path.join(workdir, 'config.json'))
  method = get_method(config, config.vocab_size)
  abstract = state_shardings(method, make_optimizer(config), dummy_batch(), make_mesh(1))[0]
  ckpt = checkpoint.Checkpointer(workdir)
  with pytest.raises(CheckpointError, match='describe different models'):
    ckpt.restore_latest(abstract)
  ckpt.close()
  assert not os.path.exists(os.path.join(workdir, checkpoint.ASIDE))


# --- text ----------------------------------------------------------------------------------------
@pytest.mark.parametrize('text,want', [
    ('abc\u202edef', 'abcdef'),            # right-to-left override
    ('a\u2066b\u2069c', 'abc'),            # isolates
    ('\ufeffHallo', 'Hallo'),              # a byte-order mark inside a line
    ('x\ufffey\uffff', 'xy'),              # noncharacters
    ('\u0915\u094d\u200d\u0937', '\u0915\u094d\u200d\u0937'),  # ZWJ inside Devanagari: kept
    ('\u05e9\u200f!', '\u05e9\u200f!'),    # RLM in Hebrew: kept
])
def test_invisible_characters_that_reorder_a_line_are_removed(text, want):
  assert one_line(text) == want


# --- a sentence's output does not depend on its batch-mates ---------------------------------------
def test_a_short_line_beside_a_very_long_one_keeps_its_own_length_bound(trained_run):
  """The probe's case: "Jesus wept." translated beside a line of hundreds of tokens could run to
  1.5 x the long line's width + 10 tokens. Each sentence is now decoded at its own padded width: the
  same output as alone, and at most its own bound of tokens."""
  run = load_run(trained_run)
  greedy, _ = decode.build_decoder(run.method, 'greedy', {})
  short, long_line = 'Jesus wept.', ' '.join(['In the beginning God created the heavens and the earth.'] * 30)
  alone, alone_aux = translate_texts(run, [short], greedy, 8)
  mixed, mixed_aux = translate_texts(run, [long_line, short, long_line], greedy, 8)
  assert mixed[1] == alone[0] and mixed_aux['steps'][1] == alone_aux['steps'][0]
  width = len(encode_sources([short], run.tokenizer, run.config.max_len)[0])
  own = decode_length_bound(run.config.max_decode_len, -(-width // WIDTH_STEP) * WIDTH_STEP)
  assert mixed_aux['steps'][1] <= own


def test_loading_a_healthy_run_warns_nothing(trained_run, caplog):
  """The shape check before a restore reads orbax's metadata without its warning about the item
  directory; a healthy run loads without a line on stderr."""
  caplog.set_level('WARNING')
  load_run(trained_run)
  assert [r.getMessage() for r in caplog.records if r.levelname in ('WARNING', 'ERROR')] == []

"""Nothing lost, nothing misaligned, one clear error: each failure found by a hostile probe, reproduced.

Corrupt / bit-flipped / missing checkpoints, a full or read-only disk, bad flags and options, a
failed translate with an existing output file, control characters in translations, and the
numeric edge that broke dagviz (a probability a hair above 1).
"""
import collections
import errno
import io
import os
import shutil
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax import decode, recipes
from nat_jax.commands import cli
from nat_jax.commands.translate import translate_stream
from nat_jax.decode import DecodeOutput
from nat_jax.errors import CheckpointError, ConfigError
from nat_jax.files import atomic_output, remove_stale_temporaries
from nat_jax.methods import get_method
from nat_jax.parallel.sharding import make_mesh
from nat_jax.run import checkpoint
from nat_jax.run.train_state import dummy_batch, make_optimizer, state_shardings
from nat_jax.run.translation import translate_texts
from nat_jax.run.workdir import load_run
from nat_jax.training.distill import distill
from nat_jax.training.loop import train_and_evaluate
from nat_jax.viz.dag import DagPicture, DecoderPath, write_png
from nat_jax.viz.pictures import probabilities
from tests.support import REPO, THREE_LINES, assert_one_error_line, config_flags_for, copy_run, run_cli, tiny_config

DiskUsage = collections.namedtuple('DiskUsage', 'total used free')  # what shutil.disk_usage returns


def truncate_checkpoint(workdir: str, step: int, sub: str = 'checkpoints'):
  for root, _, files in os.walk(os.path.join(workdir, sub, str(step))):
    for name in files:
      open(os.path.join(root, name), 'wb').close()


def flip_bytes(workdir: str, step: int):
  """XOR 3 bytes of the largest data file of a checkpoint, size kept (bit rot)."""
  files = [os.path.join(root, n) for root, _, names in os.walk(os.path.join(workdir, 'checkpoints', str(step), 'state'))
           for n in names]
  path = max(files, key=os.path.getsize)
  data = bytearray(open(path, 'rb').read())
  for at in (len(data) // 3, len(data) // 2, 2 * len(data) // 3):
    data[at] ^= 0xFF
  open(path, 'wb').write(bytes(data))


def abstract_state(run):
  return state_shardings(run.method, make_optimizer(run.config), dummy_batch(), make_mesh(1))[0]


# --- severe: wrong output behind exit 0 ------------------------------------------------------------
def test_warnings_never_land_among_translations(trained_run, tmp_path):
  """Newest checkpoint truncated, and --average beyond what is there: stdout holds exactly one line
  per input line, the warnings (true ones) are on stderr."""
  workdir = copy_run(trained_run, tmp_path)
  truncate_checkpoint(workdir, 8)
  for extra in ([], ['--average=5']):
    result = run_cli('nat_jax.translate', f'--workdir={workdir}', *extra)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    out, err = result.stdout.decode(), result.stderr.decode()
    assert len(out.split('\n')) == 4 and out.endswith('\n') and 'warning' not in out.lower()
    assert 'checkpoint step 8' in err and 'using step 6 instead' in err
    if extra:
      assert 'asked to average 5 checkpoints, only 2 usable' in err


def test_bit_flipped_checkpoint_is_detected_and_skipped(trained_run, tmp_path, caplog):
  """Flipped bytes land in compressed chunks (the store cannot read them) or in raw array data (the
  arrays no longer match the checksum): which one depends on how tensorstore laid out the file, so
  either is a detection; the checksum's own path is pinned down below."""
  workdir = copy_run(trained_run, tmp_path)
  flip_bytes(workdir, 8)
  run = load_run(workdir)
  assert run.meta[0]['step'] == 6
  err = caplog.text
  assert 'checkpoint step 8' in err and ('checksum' in err or 'unreadable' in err) and 'using step 6 instead' in err
  # Every checkpoint of the run carries its checksum, and the intact ones pass it.
  assert all(len(m['checksum']) == 64 for m in load_run(trained_run, average=3).meta)


def test_arrays_that_do_not_match_their_checksum_are_skipped(trained_run, tmp_path, caplog):
  """A checkpoint whose arrays read fine but differ from what its checksum recorded (silent bit rot):
  detected by the checksum, reported, and the previous checkpoint used."""
  workdir = copy_run(trained_run, tmp_path)
  import orbax.checkpoint as ocp
  run = load_run(workdir)
  manager = ocp.CheckpointManager(os.path.join(workdir, 'checkpoints'))
  state, meta, _ = checkpoint.restore_newest(manager, abstract_state(run))
  meta['step'] = 10
  state = jax.tree_util.tree_map(lambda x: x + 1 if jnp.issubdtype(x.dtype, jnp.floating) else x, state)
  manager.save(10, args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)))
  manager.wait_until_finished()
  manager.close()
  caplog.clear()
  assert load_run(workdir).meta[0]['step'] == 8
  err = caplog.text
  assert 'checkpoint step 10' in err and 'checksum' in err and 'using step 8 instead' in err


def test_non_finite_parameters_are_an_unusable_checkpoint(trained_run, tmp_path, caplog):
  workdir = copy_run(trained_run, tmp_path)
  run = load_run(workdir)
  ckpt = checkpoint.Checkpointer(workdir)
  state, meta = ckpt.restore_latest(abstract_state(run))
  leaf = state.params['embed']['embedding']
  state = state.replace(params={**state.params, 'embed': {'embedding': leaf.at[0, 0].set(jnp.nan)}})
  ckpt.save(10, state, {**meta, 'step': 10})
  ckpt.close()
  assert load_run(workdir).meta[0]['step'] == 8
  assert "['embed']['embedding'] holds non-finite values" in caplog.text


def test_checkpoint_without_checksum_still_loads(trained_run, tmp_path):
  """Runs saved before checksums existed: nothing to verify, they load (bit rot there is not detectable)."""
  workdir = copy_run(trained_run, tmp_path)
  import orbax.checkpoint as ocp
  run = load_run(workdir)
  manager = ocp.CheckpointManager(os.path.join(workdir, 'checkpoints'))
  state, meta, _ = checkpoint.restore_newest(manager, abstract_state(run))
  del meta['checksum']
  meta['step'] = 10
  manager.save(10, args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)))
  manager.wait_until_finished()
  manager.close()
  newest = load_run(workdir).meta[0]
  assert newest['step'] == 10 and 'checksum' not in newest


@pytest.mark.parametrize('args,message', [
    (['--batch_size=-1'], '--batch_size=-1: must be an integer from 1 to 65536'),
    (['--batch_size=0'], '--batch_size=0: must be an integer from 1 to 65536'),
    (['--batch_size=100000'], '--batch_size=100000: must be an integer from 1 to 65536'),
    (['stray'], "unexpected arguments ['stray']"),
    (['--chunk_lines=0'], '--chunk_lines=0'),
    (['--average=0'], '--average=0'),
    (['--decoder=beam', '--decoder.beam_size=0'], '--decoder.beam_size=0: beam needs 1 to 256 beams'),
    (['--decoder=beam', '--decoder.beam_size=100000'], '--decoder.beam_size=100000: beam needs 1 to 256 beams'),
    (['--decoder=beam', '--decoder.alpha=nan'], '--decoder.alpha=nan'),
    (['--decoder.max_len=-3'], '--decoder.max_len=-3'),
    (['--decoder.max_len=100000'], 'decodes at most 40 tokens'),
    (['--decoder=jacobi_hgj', '--decoder.block_size=0'], '--decoder.block_size=0'),
    (['--decoder=dag_greedy'], 'needs a GraphPredictor'),
    (['--decoder=nosuch'], '--decoder=nosuch: must be one of beam, dag_beam'),
    (['--decoder.beam_size'], 'needs a value'),
    (['--input=/nonexistent/in.txt'], '/nonexistent/in.txt: no such file'),
    (['--output=/'], 'is a directory'),
    (['--nosuchflag=1'], 'nosuchflag'),
])
def test_translate_bad_input_is_one_error_line(trained_run, args, message):
  result = run_cli('nat_jax.translate', f'--workdir={trained_run}', *args)
  assert message in assert_one_error_line(result) and result.stdout == b''


def with_decoder(run, decode_fn, rows):
  """translate_stream's `translate` over a hand-made decode fn."""
  return lambda lines, first_line=1: translate_texts(run, lines, decode_fn, rows, first_line)[0]


def test_failed_translate_keeps_the_existing_output_file(trained_run, tmp_path):
  """An error once decoding has started (here: the second chunk) leaves --output as it was and no
  temporary file; a successful run replaces it."""
  run = load_run(trained_run)
  good, _ = decode.build_decoder(run.method, 'greedy', {})
  calls = []

  def failing(params, src):
    calls.append(1)
    if len(calls) > 1:
      raise RuntimeError('decoder failed')
    return good(params, src)
  output = tmp_path / 'out.txt'
  output.write_text('earlier translations\n')
  with pytest.raises(RuntimeError, match='decoder failed'):
    with atomic_output(str(output)) as sink:
      translate_stream(with_decoder(run, failing, 2), io.BytesIO(THREE_LINES * 3), sink, chunk_lines=4, describe='x')
  assert output.read_text() == 'earlier translations\n' and os.listdir(tmp_path) == ['out.txt']
  with atomic_output(str(output)) as sink:
    translate_stream(with_decoder(run, good, 2), io.BytesIO(THREE_LINES * 3), sink, chunk_lines=4, describe='x')
  assert len(output.read_text().split('\n')) == 10


def control_piece_ids(tokenizer) -> list[int]:
  """Ids of byte-fallback pieces that decode to line breaks and controls: \\n, \\r, NUL, U+001C,
  U+001E, NEL (C2 85) and U+2028 (E2 80 A8)."""
  pieces = ['<0x0A>', '<0x0D>', '<0x00>', '<0x1C>', '<0x1E>', '<0xC2>', '<0x85>', '<0xE2>', '<0x80>', '<0xA8>']
  ids = [tokenizer._sp.piece_to_id(p) for p in pieces]
  assert tokenizer.unk_id not in ids, 'the tokenizer has byte fallback'
  return ids


def test_control_characters_in_translations_never_break_lines(trained_run):
  run = load_run(trained_run)
  tok = run.tokenizer
  word = tok.encode('Gott')
  ids = control_piece_ids(tok)
  rows = [word + ids[:1] + word, ids[1:3] + word, word + ids[3:5], ids[5:7] + word + ids[7:10] + word]

  def forced(params, src):  # a decoder that emits these pieces, whatever the source
    out = np.zeros((src.shape[0], 16), np.int32)
    for r in range(src.shape[0]):
      row = rows[r % len(rows)] + [tok.eos_id]
      out[r, :len(row)] = row
    return DecodeOutput(jnp.asarray(out), jnp.zeros(src.shape[0]), {})
  texts = ['a b', 'c d', 'e f', 'g h', 'i j']
  raw = [tok._sp.decode([i for i in rows[k % 4] if i != tok.eos_id]) for k in range(5)]
  assert sum(len(r.splitlines()) for r in raw) > 5  # unsanitised, these would break the lines
  outputs, _ = translate_texts(run, texts, forced, 2)
  assert len(outputs) == 5 and all(o.strip() for o in outputs)
  joined = '\n'.join(outputs) + '\n'
  assert len(joined.splitlines()) == 5
  assert not any(c in joined.replace('\n', '') for c in '\x00\x1c\x1e\r\x85\u2028\u2029\t')
  sink = io.StringIO()
  translate_stream(with_decoder(run, forced, 2), io.BytesIO('\n'.join(texts).encode()), sink, chunk_lines=3,
                   describe='x')
  streamed = sink.getvalue()
  assert len(streamed.splitlines()) == 5 and not any(c in streamed for c in '\x00\x1c\x1e\r\x85\u2028\u2029\t')


# --- runs that could not complete ------------------------------------------------------------------
def test_resume_past_an_unreadable_checkpoint_completes_and_sets_it_aside(trained_run, tmp_path, corpus, compile_cache,
                                                                         caplog):
  """Newest checkpoint truncated: the rerun resumes at 6, moves step 8 (and best/8) aside, retrains to 8
  and ends with the parameters of the uninterrupted run; a second rerun is a no-op resume."""
  workdir = copy_run(trained_run, tmp_path)
  truncate_checkpoint(workdir, 8)
  config = tiny_config(corpus, compile_cache)
  train_and_evaluate(config, workdir)
  err = caplog.text
  assert 'moved checkpoint' in err and 'unreadable' in err
  aside = sorted(n.rsplit('-', 1)[0] for n in os.listdir(os.path.join(workdir, checkpoint.ASIDE)))
  assert 'checkpoints-8' in aside
  for a, b in zip(jax.tree_util.tree_leaves(load_run(workdir).params),
                  jax.tree_util.tree_leaves(load_run(trained_run).params)):
    np.testing.assert_array_equal(a, b)


def test_restart_after_every_checkpoint_was_deleted_handles_stale_best(trained_run, tmp_path, corpus, compile_cache,
                                                                      caplog):
  workdir = copy_run(trained_run, tmp_path)
  shutil.rmtree(os.path.join(workdir, 'checkpoints'))
  assert os.listdir(os.path.join(workdir, 'best'))
  train_and_evaluate(tiny_config(corpus, compile_cache), workdir)
  err = caplog.text
  assert 'training starts again from step 0' in err and 'newer than the resumed step 0' in err
  assert load_run(workdir).meta[0]['step'] == 8 and load_run(workdir, which='best').meta[0]['step'] in (4, 8)


def test_full_disk_at_checkpoint_time_is_a_checkpoint_error(trained_run, tmp_path, monkeypatch):
  workdir = copy_run(trained_run, tmp_path)
  run = load_run(workdir)
  ckpt = checkpoint.Checkpointer(workdir)
  state, meta = ckpt.restore_latest(abstract_state(run))
  monkeypatch.setattr(checkpoint.shutil, 'disk_usage', lambda path: DiskUsage(10, 10, 1000))
  with pytest.raises(CheckpointError, match=r'MiB free, a checkpoint needs about'):
    ckpt.save(10, state, meta)
  monkeypatch.undo()

  def full(step, **kwargs):  # what tensorstore raises when the disk fills during the write
    os.makedirs(os.path.join(workdir, 'checkpoints', f'{step}.orbax-checkpoint-tmp-123'))
    raise ValueError('RESOURCE_EXHAUSTED: Error writing "x": Failed to write: No space left on device')
  monkeypatch.setattr(ckpt.latest, 'save', full)
  with pytest.raises(CheckpointError, match='could not write checkpoint step 10 .*No space left on device'):
    ckpt.save(10, state, meta)
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == ['4', '6', '8']


FULL_DISK_TRAIN = textwrap.dedent('''
    import collections, sys
    from nat_jax.run import checkpoint
    from nat_jax.commands import cli, train
    DiskUsage = collections.namedtuple('DiskUsage', 'total used free')
    checkpoint.shutil.disk_usage = lambda path: DiskUsage(10, 10, 1000)
    sys.argv = ['train'] + sys.argv[1:]
    cli.define_flags(train.COMMAND_FLAGS)
    cli.run_command(train.main, None, train.COMMAND_FLAGS)
''')


def test_full_disk_during_training_is_one_error_line(tmp_path, corpus, compile_cache):
  config = tiny_config(corpus, compile_cache)
  result = subprocess.run([sys.executable, '-c', FULL_DISK_TRAIN, '--config=configs/at_bible_tiny.py',
                           f'--workdir={tmp_path}/w', *config_flags_for(config)], cwd=REPO, capture_output=True,
                          timeout=600)
  line = assert_one_error_line(result)
  assert f'{tmp_path}/w/checkpoints' in line and 'rerun the same command' in line


OS_ERROR = textwrap.dedent('''
    from nat_jax.commands import cli
    def main(argv):
      raise OSError(30, 'Read-only file system', '/ro/out.txt.tmp4242')
    cli.run_command(main)
''')


def test_os_errors_name_the_path_in_one_line():
  result = subprocess.run([sys.executable, '-c', OS_ERROR], cwd=REPO, capture_output=True, timeout=300)
  assert assert_one_error_line(result).startswith('error: /ro/out.txt: Read-only file system')


def test_distillation_on_a_full_disk_leaves_no_temporary_file(trained_run, tmp_path, monkeypatch):
  run = load_run(trained_run)
  out = str(tmp_path / 'out')
  real_fsync = os.fsync
  state = {'writes': 0}

  def fsync(fd):
    state['writes'] += 1
    if state['writes'] == 3:
      raise OSError(errno.ENOSPC, 'No space left on device')
    real_fsync(fd)
  monkeypatch.setattr(os, 'fsync', fsync)
  with pytest.raises(OSError, match='No space left'):
    distill(run, 'greedy', decode.run_options(run.method, 'greedy'), out, ['train'], limit=12, batch_size=4,
            chunk_sentences=4, teacher_workdir=trained_run)
  monkeypatch.undo()
  leftovers = [n for _, _, names in os.walk(out) for n in names if '.tmp' in n]
  assert leftovers == []
  # A temporary file left by a killed process is removed by the next run, which completes.
  stale = os.path.join(out, '.work', 'train', '000002.txt.tmp999999')
  open(stale, 'w').write('half a chunk')
  distill(run, 'greedy', decode.run_options(run.method, 'greedy'), out, ['train'], limit=12, batch_size=4,
          chunk_sentences=4, teacher_workdir=trained_run)
  assert not os.path.exists(stale) and len(open(os.path.join(out, 'train.tsv')).read().split('\n')) == 13


def test_remove_stale_temporaries_keeps_other_files(tmp_path):
  for name in ('a.txt', 'a.txt.tmp12', 'b.tmp', 'c.txt.tmpx', f'd.txt.tmp{os.getpid()}'):
    (tmp_path / name).write_text('x')
  assert remove_stale_temporaries(str(tmp_path)) == [str(tmp_path / 'a.txt.tmp12')]
  assert sorted(os.listdir(tmp_path)) == ['a.txt', 'b.tmp', 'c.txt.tmpx', f'd.txt.tmp{os.getpid()}']


# --- settings checked before any work --------------------------------------------------------------
@pytest.mark.parametrize('decoder,overrides,message', [
    ('beam', {'beam_size': '0'}, 'beam_size=0'),
    ('beam', {'alpha': '-1'}, 'alpha=-1.0'),
    ('mask_predict', {'iterations': '0'}, 'iterations=0'),
    ('mask_predict', {'length_beam': '-2'}, 'length_beam=-2'),
    ('hrt', {'b_at': '0'}, 'b_at=0'),
    ('hrt', {'b_nat': '0'}, 'b_nat=0'),
    ('hrt', {'jacobi_block': '-1'}, 'jacobi_block=-1'),
    ('jacobi_pgj', {'block_size': '0'}, 'block_size=0'),
    ('greedy', {'max_len': '-1'}, 'max_len=-1'),
    ('dag_joint_viterbi', {'beta': 'nan'}, 'beta=nan'),
    ('dag_greedy', {'remove_repeats': 'maybe'}, "remove_repeats='maybe': expected true or false"),
    ('multiword_beam', {'dedup': 'yes please'}, 'expected true or false'),
])
def test_bad_decoder_options_are_config_errors(decoder, overrides, message):
  with pytest.raises(ConfigError) as e:
    decode.parse_options(decoder, overrides)
  assert message in str(e.value)


def test_boolean_options_accept_only_true_or_false():
  for raw, want in (('true', True), ('False', False), ('1', True), ('0', False), ('yes', True), ('no', False)):
    assert decode.parse_options('dag_greedy', {'remove_repeats': raw}).remove_repeats is want


def test_method_dependent_options_are_checked_against_the_method(corpus):
  ibdec = get_method(tiny_config(corpus, **{'model.method': 'ibdecoder'}), 60)
  assert 'beam' not in decode.decoders_for(ibdec) and 'multiword_beam' in decode.decoders_for(ibdec)
  with pytest.raises(ConfigError, match='beam decodes one token per step; this model takes 2'):
    decode.build_decoder(ibdec, 'beam', {})
  hrt = get_method(tiny_config(corpus, **{'model.method': 'hrt'}), 60)
  for chunk in ('0', '1', '2'):
    decode.build_decoder(hrt, 'hrt', {'chunk': chunk})
  with pytest.raises(ConfigError, match='--decoder.chunk=3: this HRT model was trained with chunk k=2'):
    decode.build_decoder(hrt, 'hrt', {'chunk': '3'})
  with pytest.raises(ConfigError, match='b_nat <= b_at'):
    decode.build_decoder(hrt, 'hrt', {'b_at': '2', 'b_nat': '3'})
  at = get_method(tiny_config(corpus), 60)
  with pytest.raises(ConfigError, match='decodes at most 40 tokens'):
    decode.build_decoder(at, 'greedy', {'max_len': '41'})
  decode.build_decoder(at, 'greedy', {'max_len': '40'})


@pytest.mark.parametrize('overrides,message', [
    ({'test_decoder': 'nosuch'}, "config.test_decoder='nosuch': Unknown decoder"),
    ({'eval_decoder': 'dag_greedy'}, "config.eval_decoder='dag_greedy': Decoder 'dag_greedy' needs a GraphPredictor"),
    ({'model.method': 'nosuch'}, "Unknown model.method 'nosuch'"),
    ({'decode_batch_size': -1}, '--config.decode_batch_size=-1: must be an integer >= 1'),
    ({'eval_every': 0}, 'eval_every'),
])
def test_whole_config_is_checked_before_any_work(tmp_path, corpus, overrides, message):
  workdir = tmp_path / 'w'
  with pytest.raises(ConfigError) as e:
    train_and_evaluate(tiny_config(corpus, **overrides), str(workdir))
  assert message in str(e.value) and not workdir.exists()


@pytest.mark.parametrize('flag,message', [
    ('--config.modle.d_model=64', '--config.modle.d_model: recipe configs/at_bible_tiny.py has no such key; '
                                  'did you mean --config.model.d_model?'),
    ('--config.total_step=5', 'did you mean --config.total_steps?'),
    ('--config.dat.loss=fuzzy', "section 'dat' holds the options of method 'dat', but this recipe trains "
                                "model.method='at'"),
])
def test_unknown_config_key_names_the_closest_valid_one(flag, message):
  recipe = 'configs/at_bible_tiny.py'
  problem = cli.config_override_problem(recipe, ['train', f'--config={recipe}', flag])
  assert problem.startswith(flag.split('=')[0] + ': ') and message in problem


def test_train_command_line_errors_are_one_line(tmp_path):
  base = ['nat_jax.train', f'--workdir={tmp_path}/w']
  cases = [([*base, '--config=configs/at_bible_tiny.py', '--config.modle.d_model=64'],
            'did you mean --config.model.d_model'),
           ([*base, '--config=configs/nosuch.py'], 'configs/nosuch.py: no such recipe file'),
           ([*base, '--config=configs/at_bible_tiny.py', '--config.test_decoder=nosuch'], "Unknown decoder 'nosuch'")]
  for args, message in cases:
    assert message in assert_one_error_line(run_cli(*args, stdin=b''))
  assert not os.path.exists(tmp_path / 'w')


# --- numeric edges -------------------------------------------------------------------------------
def test_probabilities_from_fp32_log_probs_stay_in_range():
  log_p = np.asarray([2.5e-8, 0.0, -1e-30, -3.0, -np.inf], np.float32)
  p = probabilities(log_p)
  assert np.all((p >= 0) & (p <= 1)) and p[0] == 1.0 and p[-1] == 0.0


def test_dagviz_draws_an_edge_of_probability_one(tmp_path):
  """A transition whose fp32 log-probability rounds a hair above 0 (seen on a fresh machine: alpha
  1.0000000253 rejected by matplotlib) draws as probability 1."""
  edge = float(probabilities(np.float32(2.5e-8)))
  pic = DagPicture('a b', [[('a', 1.0)], [('b', 1.0)], [('</s>', 1.0)]], [(0, 1, edge), (1, 2, edge)],
                   {'dag_greedy': DecoderPath([0, 1, 2], ['a', 'b', '</s>'], 'a b')})
  write_png(pic, str(tmp_path / 'dag.png'))
  assert (tmp_path / 'dag.png').stat().st_size > 0


def test_recipes_are_found_by_name_and_by_path(tmp_path, monkeypatch):
  """--config=at_bible_tiny names the recipe in the configs package (from any directory);
  a path still works; an unknown name is None (the one-line error of parse_flags)."""
  monkeypatch.chdir(tmp_path)
  by_name = recipes.recipe_path('at_bible_tiny')
  assert by_name is not None and os.path.samefile(by_name, os.path.join(REPO, 'configs', 'at_bible_tiny.py'))
  assert os.path.samefile(recipes.recipe_path('at_bible_tiny.py'), by_name)
  assert recipes.recipe_path(os.path.join(REPO, 'configs', 'at_bible_tiny.py')) is not None
  assert recipes.recipe_path('no_such_recipe') is None and recipes.recipe_path('configs/at_bible_tiny.py') is None

"""Ahead-of-time compilation for accelerators we do not have (nat_jax.aot), and multi-device inference.

The TPU and GPU compilers run here against compile-only devices (`pip install -e .[aot]`; the tests
that need one skip, naming how to install it, where it is missing). Truths: the compiler's own
per-device byte counts against the shardings we asked for;
XLA counting a loop body once; the same outputs on one device and with rows split over four.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax import decode
from nat_jax.ahead_of_time import analysis, programs, report, targets
from nat_jax.decode import dag_beam
from tests.support import REPO, tiny_config, xla_flags

CORPUS = {'train': '', 'validation': '', 'test': ''}  # compiling reads no data
METHODS = {  # tiny configs of every method, each with the decoders its recipes use
    'at': {},
    'dat': {'model.method': 'dat', 'dat.upsample_scale': 2.0, 'eval_decoder': 'dag_lookahead',
            'test_decoder': 'dag_beam'},
    'fadat': {'model.method': 'dat', 'dat.upsample_scale': 2.0, 'dat.loss': 'fuzzy', 'eval_decoder': 'dag_lookahead',
              'test_decoder': 'dag_joint_viterbi'},
    'cmlm': {'model.method': 'cmlm', 'eval_decoder': 'mask_predict', 'test_decoder': 'mask_predict'},
    'hrt': {'model.method': 'hrt', 'hrt.chunk': 2, 'model.relative_window': 4, 'eval_decoder': 'hrt',
            'test_decoder': 'hrt'},
    'ibsa': {'model.method': 'ibdecoder', 'ibdecoder.h': 2, 'ibdecoder.c': 2, 'test_decoder': 'multiword_beam'},
    'selfdraft': {'model.method': 'selfdraft', 'weight_decay': 0.0, 'test_decoder': 'drafted'},
}
ENV = {**os.environ, 'JAX_PLATFORMS': 'cpu', 'ALLOW_MULTIPLE_LIBTPU_LOAD': '1'}


def target_or_skip(name: str) -> targets.Target:
  reason = targets.compiler_available('tpu' if ':' in name else 'gpu')
  if reason:
    pytest.skip(reason)
  return targets.get_target(name)


@pytest.fixture(scope='module')
def v5e():
  return target_or_skip('v5e:2x2')


_compiled: dict = {}


def compiled(target, method: str, model_parallel: int, kinds=('train', 'decode')) -> report.RecipeReport:
  """The train step (largest bucket) and the recipe's decoders at 8 sentences, once per test session."""
  key = (target.name, method, model_parallel, kinds)
  if key not in _compiled:
    config = tiny_config(CORPUS, **METHODS[method])
    _compiled[key] = report.compile_recipe(config, target, model_parallel, kinds, 'default', (8,),
                                           largest_only=True, verbose=False)
  return _compiled[key]


def check_programs(result: report.RecipeReport, model_parallel: int, kinds):
  """Every program compiled and fits, with no host callback or transfer and a cost."""
  assert result.mesh == {'data': 4 // model_parallel, 'model': model_parallel}
  names = [r.program for r in result.reports]
  assert any(n.startswith('train grad') for n in names) and 'train apply' in names
  assert ('decode' in kinds) == any(n.startswith('decode ') for n in names), names
  for r in result.reports:
    assert r.compiled and r.fits, (model_parallel, r.program, r.short_error())
    assert r.host_callbacks == 0 and r.host_transfers == 0, (model_parallel, r.program)
    assert r.flops and r.flops > 0 and r.bytes_accessed > 0, (model_parallel, r.program)


# at and dat in every run (the left-to-right and the graph families); the other methods under -m slow
# (about 20 s each on 2 cores).
@pytest.mark.parametrize('method', [m if m in ('at', 'dat') else pytest.param(m, marks=pytest.mark.slow)
                                    for m in METHODS])
def test_every_method_compiles_for_a_tpu_slice(v5e, method):
  """data=4 and data=2 x model=2 on a v5e 2x2 slice: the train step (and, with data=4, the recipe's
  decoders; with model=2 too for the AT, and for every method in the slow test below) compile and fit,
  with no host callback or host transfer; the compiled programs partition their arguments as we asked;
  the train state per device shrinks when `model` grows, the batch per device when `data` grows (in
  the compiler's own byte counts too, which include the TPU's tile padding of small arrays)."""
  kinds = {1: ('train', 'decode'), 2: ('train', 'decode') if method == 'at' else ('train',)}
  by_mesh = {mp: compiled(v5e, method, mp, kinds[mp]) for mp in (1, 2)}
  for mp, result in by_mesh.items():
    check_programs(result, mp, kinds[mp])
  setups = {mp: programs.make_setup(tiny_config(CORPUS, **METHODS[method]), v5e, mp) for mp in (1, 2)}
  grads = {mp: next(r for r in by_mesh[mp].reports if r.program.startswith('train grad')) for mp in (1, 2)}
  applies = {mp: next(r for r in by_mesh[mp].reports if r.program == 'train apply') for mp in (1, 2)}
  state = {mp: programs.per_device_bytes(setups[mp].state) for mp in (1, 2)}
  assert state[2] < state[1]
  assert applies[2].argument_bytes < applies[1].argument_bytes
  vocab = [(jax.tree_util.keystr(k), x.sharding.spec) for k, x in
           jax.tree_util.tree_leaves_with_path(setups[2].params) if k[-1].key == 'embedding']
  assert vocab and all(spec[0] == 'model' for _, spec in vocab), vocab  # the shared embedding: rows over `model`
  batch = {}
  for mp in (1, 2):
    rows, length = programs.batch_shapes(setups[mp])[-1]
    batch_tree = programs.train_batch(setups[mp], rows, length)
    want = [targets.shard_bytes(x) for x in jax.tree_util.tree_leaves((setups[mp].params, batch_tree))]
    got = grads[mp].input_bytes[:len(want)]
    assert all(g in (0, w) for g, w in zip(got, want)), (mp, got, want)  # 0: a parameter the step does not read
    batch[mp] = sum(got[-len(batch_tree):])
    assert batch[mp] == programs.per_device_bytes(batch_tree)
    assert grads[mp].argument_bytes >= sum(grads[mp].input_bytes)
  assert batch[1] < batch[2]  # data 4 against data 2: fewer rows per device


@pytest.mark.slow
@pytest.mark.parametrize('method', [m for m in METHODS if m != 'at'])
def test_every_method_decodes_with_model_parallelism(v5e, method):
  """data=2 x model=2: the recipe's decoders of every method compile and fit, without host callbacks."""
  check_programs(compiled(v5e, method, 2, ('train', 'decode')), 2, ('train', 'decode'))


def test_a_gpu_target_compiles_the_tiny_at():
  """One H100 (compile-only): the train step and greedy decoding compile and fit; FLOPs come from XLA's
  HLO cost analysis of the optimized GPU module (the GPU backend reports none)."""
  h100 = target_or_skip('h100')
  config = tiny_config(CORPUS)
  result = report.compile_recipe(config, h100, 1, ('train', 'decode'), 'greedy', (8,), largest_only=True,
                                 verbose=False)
  assert [r.program for r in result.reports][-1] == 'decode greedy b=8'
  for r in result.reports:
    assert r.compiled and r.fits and r.host_callbacks == 0, (r.program, r.short_error())
    assert r.flops and r.flops > 0 and r.cost_source == 'HLO cost analysis'


def test_dag_beam_never_calls_the_host_on_an_accelerator():
  """`search=auto` is the host search on a one-device CPU and the device search for a TPU or GPU (and
  with several devices): the traced program has a host callback only in the first case."""
  config = tiny_config(CORPUS, **METHODS['dat'])
  setup = programs.make_setup(config, targets.Target('cpu', targets.CHIPS['v5e'], tuple(jax.devices()[:1])))
  src = programs.source(setup, 4, 16)
  for platform, devices, want in (('cpu', 1, 1), ('tpu', 1, 0), ('gpu', 1, 0), ('cpu', 4, 0)):
    assert dag_beam.chosen_search('auto', False, platform, devices) == ('host' if want else 'device')
  for platform, want in (('cpu', 1), ('tpu', 0), ('gpu', 0)):
    fn, extra = decode.decode_program(setup.method, 'dag_beam', decode.parse_options('dag_beam', {}),
                                      platform=platform)
    assert analysis.count_callbacks(jax.jit(fn).trace(setup.params, extra, src).jaxpr) == want, platform


def cpu_cost(fn, *args) -> dict:
  return jax.jit(fn).lower(*args).compile().cost_analysis()


def test_cost_analysis_counts_a_loop_body_once():
  """Why decoders are costed per step: XLA's cost of a 12-step fori_loop is about one step's, and 12
  steps unrolled cost 12 steps; a step's cost x steps is the loop's real cost."""
  steps = 12
  x, w = jax.ShapeDtypeStruct((8, 64), jnp.float32), jax.ShapeDtypeStruct((64, 64), jnp.float32)
  step = lambda x, w: jnp.tanh(x @ w)

  def unrolled(x, w):
    for _ in range(steps):
      x = step(x, w)
    return x
  one = cpu_cost(step, x, w)['flops']
  looped = cpu_cost(lambda x, w: jax.lax.fori_loop(0, steps, lambda i, v: step(v, w), x), x, w)['flops']
  assert one > 0 and looped < 2 * one
  assert cpu_cost(unrolled, x, w)['flops'] == pytest.approx(steps * one, rel=0.01)


def aot_command(*args, timeout=900):
  return subprocess.run([sys.executable, '-m', 'nat_jax.aot', '--config=configs/at_bible_tiny.py',
                         '--config.model.d_model=32', '--config.model.d_ff=64', '--config.model.num_heads=2',
                         '--config.vocab_size=400', '--config.max_len=48', '--config.tokens_per_batch=384', *args],
                        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=timeout)


def test_aot_command_reports_and_exits_by_fit(v5e, tmp_path):
  """`python -m nat_jax.aot` compiles the tiny AT's train step and decoders for v5e:2x2: a table, the same
  in --json, zero host callbacks, exit 0; a batch too large for the chip: exit 1 and one error line."""
  out = tmp_path / 'aot.json'
  ok = aot_command('--target=v5e:2x2', '--decoders=default', '--batch_sizes=8', '--buckets=largest', f'--json={out}')
  assert ok.returncode == 0, ok.stderr[-3000:]
  assert '| v5e:2x2 | 4x1 | train grad' in ok.stdout and 'decode beam b=8' in ok.stdout
  data = json.loads(out.read_text())
  rows = data['results'][0]['programs']
  names = {r['program'] for r in rows}
  assert names >= {'train apply', 'decode greedy b=8', 'decode beam b=8'} and any(n.startswith('eval ') for n in names)
  assert all(r['compiled'] and r['fits'] and r['host_callbacks'] == 0 for r in rows)
  big = aot_command('--target=v5e:2x2', '--programs=train', '--buckets=largest', '--config.tokens_per_batch=400000000')
  errors = [line for line in big.stderr.splitlines() if line.startswith('error: ')]
  assert big.returncode == 1 and len(errors) == 1 and 'train grad' in errors[0], big.stderr[-3000:]
  bad = aot_command('--target=v9:2x2')
  assert bad.returncode == 2 and 'not a target' in bad.stderr and 'Traceback' not in bad.stderr


@pytest.mark.parametrize('everything', [False, pytest.param(True, marks=pytest.mark.slow)])
def test_decoding_on_four_devices_equals_one(everything):
  """Rows split over 4 fake CPU devices decode exactly as on one device (every decoder of every method in
  the slow run; one or two decoders of each method by default), and each device does a quarter of the
  arithmetic (tests/integration/multidevice_decode.py)."""
  env = {**ENV, 'XLA_FLAGS': xla_flags(devices=4)}
  command = [sys.executable, '-m', 'tests.integration.multidevice_decode', *(['all'] if everything else [])]
  out = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
  assert out.returncode == 0 and 'ALL-EQUAL' in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]


def test_translation_splits_rows_over_the_run_mesh(trained_run):
  """translate_texts hands the decoder a batch whose rows lie over the run's mesh (one device here: the
  batch as it was) and the same translations whatever the mesh."""
  from nat_jax.run.translation import translate_texts
  from nat_jax.run.workdir import load_run
  run = load_run(trained_run)
  assert run.mesh is not None and run.mesh.size == jax.device_count()
  fn, _ = decode.build_decoder(run.method, 'greedy', {})
  seen = []

  def spy(params, src):
    seen.append(src)
    return fn(params, src)
  lines = ['In the beginning God created the heavens and the earth.', '', 'And God said, Let there be light.']
  with_mesh = translate_texts(run, lines, spy, 4)[0]
  run.mesh = None
  assert translate_texts(run, lines, fn, 4)[0] == with_mesh and with_mesh[1] == ''
  assert seen and all(np.asarray(s).shape[0] == 4 for s in seen)


def test_a_mesh_axis_that_does_not_divide_a_dimension_leaves_it_whole():
  from types import SimpleNamespace

  from jax.sharding import PartitionSpec as P

  from nat_jax.parallel.sharding import fit_spec
  mesh = SimpleNamespace(shape={'data': 4, 'model': 2})
  assert fit_spec(P('model', None), (8000, 512), mesh) == P('model', None)
  assert fit_spec(P('model', None), (7999, 512), mesh) == P(None, None)
  assert fit_spec(P(None, ('data', 'model')), (3, 16), mesh) == P(None, ('data', 'model'))
  assert fit_spec(P(None, ('data', 'model')), (3, 12), mesh) == P(None, None)
  assert fit_spec(P('data'), (8, 3), mesh) == P('data', None)

"""What several test modules share (tests import shared helpers from here only, never from each other):
tiny configs and random tiny models of every method, a second-order Markov chain as a left-to-right
view, hand-written DAG decoders, graphs from tables, the repository root and a command-line runner,
and a device node made in a temporary directory."""
from __future__ import annotations

import itertools
import os
import shutil
import stat
import subprocess
import sys
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import linen as nn

from nat_jax import decode
from nat_jax.core.tokens import BOS_ID
from nat_jax.decode import Graph, GraphPredictor, LeftToRightScorer
from nat_jax.decode import dag as dag_decode
from nat_jax.methods import SETTINGS, dag, get_method
from nat_jax.recipes.defaults import base_config, section


def tiny_config(corpus: dict[str, str], compile_cache: str = '', **overrides) -> ml_collections.ConfigDict:
  """A model small enough to compile and train in seconds on one CPU core; overrides may name
  another method ('model.method') and keys of its config section."""
  c = base_config()
  c.model.update(d_model=32, num_heads=2, d_ff=64, enc_layers=1, dec_layers=1, dropout=0.1)
  c.data.update(source='files', train_files=corpus['train'], validation_files=corpus['validation'],
                test_files=corpus['test'])
  c.update(vocab_size=400, max_len=48, max_decode_len=40, tokens_per_batch=384, num_buckets=2, total_steps=8,
           learning_rate=3e-3, warmup_steps=2, log_every=2, eval_every=4, checkpoint_every=2, eval_max_sentences=6,
           decode_batch_size=8, test_decoder='greedy', num_samples=1, compilation_cache_dir=compile_cache)
  method = overrides.get('model.method', c.model.method)
  if method in SETTINGS:
    c[method] = section(SETTINGS[method])
  return with_overrides(c, overrides)


def with_overrides(config: ml_collections.ConfigDict, overrides: dict) -> ml_collections.ConfigDict:
  """config with dotted keys set, e.g. {'model.d_model': 48}."""
  for key, value in overrides.items():
    target = config
    *parents, leaf = key.split('.')
    for p in parents:
      target = target[p]
    target[leaf] = value
  return config


def config_flags_for(config: ml_collections.ConfigDict) -> list[str]:
  """The same config as --config.<key>=<value> flags over configs/at_bible_tiny.py (for subprocess runs)."""
  flat = {}

  def walk(prefix, node):
    for k, v in node.items():
      if isinstance(v, ml_collections.ConfigDict):
        walk(f'{prefix}{k}.', v)
      else:
        flat[f'{prefix}{k}'] = v
  walk('', config)
  return [f'--config.{k}={v}' for k, v in flat.items() if v != '' and not isinstance(v, (list, tuple))]


def random_tiny_model(corpus, vocab_size: int, seed: int = 3, logit_scale: float = 4.0):
  """(AT method, unboxed params) of a randomly initialised tiny model, dropout off. The output
  embedding is scaled so a tiny vocabulary gets peaked, varied next-token distributions."""
  import jax
  import jax.numpy as jnp
  from flax import linen as nn

  from nat_jax.methods.autoregressive import AutoregressiveMethod
  method = AutoregressiveMethod(tiny_config(corpus, **{'model.dropout': 0.0}), vocab_size=vocab_size)
  dummy = {'source': jnp.ones((1, 5), jnp.int32), 'target': jnp.ones((1, 5), jnp.int32)}
  params = nn.meta.unbox(method.init_params(jax.random.PRNGKey(seed), dummy))
  params['embed']['embedding'] = params['embed']['embedding'] * logit_scale
  return method, params


def random_model(corpus, vocab_size: int, seed: int = 3, logit_scale: float = 4.0, **overrides):
  """(method, unboxed params) of a randomly initialised tiny model of any method (overrides as in
  tiny_config, e.g. {'model.method': 'hrt', 'hrt.chunk': 2}), dropout off, output embedding scaled as
  in random_tiny_model."""
  import jax
  import jax.numpy as jnp
  from flax import linen as nn

  from nat_jax.methods import get_method
  method = get_method(tiny_config(corpus, **{'model.dropout': 0.0, **overrides}), vocab_size)
  dummy = {'source': jnp.ones((1, 5), jnp.int32), 'target': jnp.ones((1, 5), jnp.int32)}
  params = nn.meta.unbox(method.init_params(jax.random.PRNGKey(seed), dummy))
  model = params.get('verifier', params.get('backbone', params))  # selfdraft: the frozen verifier; DAT: its backbone
  model['embed']['embedding'] = model['embed']['embedding'] * logit_scale
  return method, params


def tiny_pairs(shapes, vocab: int, width: int, seed: int = 0):
  """{'source', 'target'} i32[len(shapes), width] of random pairs (token ids 5..vocab-1, then EOS, then 0);
  shapes: (source length, target length) per row, both < width."""
  import jax.numpy as jnp
  import numpy as np
  rng = np.random.default_rng(seed)
  src, tgt = np.zeros((len(shapes), width), np.int32), np.zeros((len(shapes), width), np.int32)
  for i, (n, m) in enumerate(shapes):
    src[i, :n], src[i, n] = rng.integers(5, vocab, n), 1
    tgt[i, :m], tgt[i, m] = rng.integers(5, vocab, m), 1
  return {'source': jnp.asarray(src), 'target': jnp.asarray(tgt)}


@flax.struct.dataclass
class MarkovScorer:
  """Slot s scores table[token at slot s - z, token at slot s] (slot s - z < 0: BOS): a second-order
  chain whose older token comes from the cache, so cache writes and beam reordering matter. A pytree,
  so it goes through jit as the "parameters" of `ViewMethod`."""
  table: Any           # f32[V, V, V] logits
  max_len: int = flax.struct.field(pytree_node=False)
  tokens_per_step: int = flax.struct.field(pytree_node=False, default=1)

  def encode(self, src):
    return {'rows': jnp.zeros((src.shape[0],), jnp.int32)}

  def init_cache(self, enc, num_slots: int):
    return {'tokens': jnp.full((enc['rows'].shape[0], num_slots), BOS_ID, jnp.int32)}

  def resize_cache(self, cache, num_slots: int):
    tokens = cache['tokens'][:, :num_slots]
    return {'tokens': jnp.pad(tokens, ((0, 0), (0, num_slots - tokens.shape[1])), constant_values=BOS_ID)}

  def step_logits(self, enc, cache, tokens, start):
    written = jax.lax.dynamic_update_slice_in_dim(cache['tokens'], tokens, start, axis=1)  # [B, C]
    slots = start + jnp.arange(tokens.shape[1])  # [T]
    older = jnp.take(written, jnp.maximum(slots - self.tokens_per_step, 0), axis=1)  # [B, T]
    older = jnp.where(slots[None] >= self.tokens_per_step, older, BOS_ID)
    return self.table[older, tokens], {'tokens': written}

  def max_decode_len(self, src_len: int) -> int:
    return self.max_len

  def read_out(self, tokens):
    return tokens

  def write_in(self, tokens):
    return tokens


def markov(vocab: int, seed: int, max_len: int, z: int = 1, scale: float = 3.0) -> MarkovScorer:
  table = np.random.default_rng(seed).normal(size=(vocab, vocab, vocab)) * scale
  return MarkovScorer(jnp.asarray(table, jnp.float32), max_len, z)


def _decode_path(path, log_probs, graph_lengths):
  tokens, _ = dag_decode.vertex_scores(log_probs, graph_lengths)
  return dag_decode.path_tokens(path, tokens), jnp.sum(path >= 0, axis=1).astype(jnp.int32)


def dag_greedy_path(log_trans, log_probs, graph_lengths):
  """Follow the most probable transition from vertex 0 to G - 1; argmax token per visited vertex."""
  bonus = jnp.zeros(log_trans.shape[:2], jnp.float32)  # [B, L]
  return _decode_path(dag_decode.follow_argmax(log_trans, bonus, graph_lengths), log_probs, graph_lengths)


def dag_lookahead_path(log_trans, log_probs, graph_lengths):
  """Like greedy, but next vertex = argmax_j log E_ij + max_y log P(y | j)."""
  _, bonus = dag_decode.vertex_scores(log_probs, graph_lengths)  # [B, L]
  return _decode_path(dag_decode.follow_argmax(log_trans, bonus, graph_lengths), log_probs, graph_lengths)


def reference_text_tokens(tokens, dedup, limit):
  """Plain-Python reference decoder post-processing: drop repeats (token equal to the one before it
  on the path), then BOS/EOS/PAD, keep limit - 1 tokens, then EOS."""
  kept = [t for k, t in enumerate(tokens) if not (dedup and k and tokens[k - 1] == t)]
  kept = [t for t in kept if t not in (0, 1, 2)][:limit - 1]
  return kept + [1]


def tensorboard_scalars(logdir):
  """{tag: [(step, value)]} of every scalar in the event files under logdir (TensorBoard's own reader)."""
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  events = EventAccumulator(logdir)
  events.Reload()
  return {tag: [(e.step, np.float32(e.value)) for e in events.Scalars(tag)] for tag in events.Tags()['scalars']}


def dat_config(**overrides):
  c = base_config()
  c.model.update(method='dat', d_model=32, num_heads=2, d_ff=64, enc_layers=1, dec_layers=1, dropout=0.0)
  c.dat = section(dag.DatSettings)
  c.dat.upsample_scale = 2.0
  c.update(max_len=16, max_decode_len=40, total_steps=100)
  return with_overrides(c, overrides)


def hrt_setup(corpus, k=2, seed=0, vocab=40, scale=4.0, **overrides):
  config = tiny_config(corpus, **{'model.method': 'hrt', 'model.dropout': 0.0, 'model.relative_window': 4,
                                  'hrt.chunk': k, **overrides})
  method = get_method(config, vocab)
  dummy = {'source': jnp.ones((1, 5), jnp.int32), 'target': jnp.ones((1, 5), jnp.int32)}
  params = nn.meta.unbox(method.init_params(jax.random.PRNGKey(seed), dummy))
  params['embed']['embedding'] = params['embed']['embedding'] * scale  # peaked, varied distributions
  return config, method, params


def run_decoder(method, params, src, name, **options):
  return decode.make_decode_fn(method, name, decode.parse_options(name, {k: str(v) for k, v in options.items()}))(
      params, src)


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def xla_flags(devices: int = 0) -> str:
  """XLA_FLAGS for a process the test starts: the test run's own (tests/conftest.py: cheap compiles), with
  `devices` fake CPU devices (0: JAX's one)."""
  kept = [f for f in os.environ.get('XLA_FLAGS', '').split() if not f.startswith('--xla_force_host_platform_device')]
  return ' '.join(kept + ([f'--xla_force_host_platform_device_count={devices}'] if devices else []))


THREE_LINES = b'In the beginning God created the heavens and the earth.\nAnd God said.\nThe end.\n'


def run_cli(*args, stdin=THREE_LINES, timeout=300, cwd=REPO):
  return subprocess.run([sys.executable, '-m', *args], input=stdin, cwd=cwd, capture_output=True, timeout=timeout)


def assert_one_error_line(result):
  err = result.stderr.decode()
  assert result.returncode == 2, err[-2000:]
  assert 'Traceback' not in err, err[-3000:]
  errors = [line for line in err.splitlines() if line.startswith('error: ')]
  assert len(errors) == 1, err[-2000:]
  return errors[0]


def copy_run(trained_run, tmp_path, name='copy') -> str:
  workdir = str(tmp_path / name)
  shutil.copytree(trained_run, workdir)
  return workdir


class ViewMethod:
  """A stand-in method that offers hand-written views (params = the view itself)."""
  name = 'hand-written'
  max_target_len = 4096  # the Method contract's attributes (nat_jax.methods.base), with tokens_per_step

  def __init__(self, protocol, tokens_per_step: int = 1):
    self.protocol, self.tokens_per_step = protocol, tokens_per_step

  def views(self):
    return {self.protocol: lambda params: params}


def run(view, name, src, **options):
  """Decoder `name` on a hand-written view (a MarkovScorer or a graph table) as a method offering it."""
  if isinstance(view, MarkovScorer):
    method = ViewMethod(LeftToRightScorer, view.tokens_per_step)
  else:
    method = ViewMethod(GraphPredictor)
  return run_decoder(method, view, src, name, **options)


@flax.struct.dataclass
class TableGraphs:
  """GraphPredictor of fixed graphs: hidden = vertex index, log P(y | v) read from a table."""
  log_trans: Any       # f32[B, L, L]
  log_probs: Any       # f32[B, L, V]
  graph_lengths: Any   # i32[B]
  max_len: int = flax.struct.field(pytree_node=False)

  def predict_graph(self, src) -> Graph:
    b, size = self.log_probs.shape[:2]
    hidden = jnp.broadcast_to(jnp.arange(size, dtype=jnp.float32)[None, :, None], (b, size, 1))
    return Graph(hidden=hidden, log_trans=self.log_trans, graph_lengths=self.graph_lengths)

  def vertex_log_probs(self, hidden):
    index = hidden[..., 0].astype(jnp.int32)  # [B, K]
    return jax.vmap(lambda table, rows: table[rows])(self.log_probs, index)  # [B, K, V]

  def max_decode_len(self, src_len: int) -> int:
    return self.max_len


def random_graphs(seed: int, batch: int = 5, size: int = 9, vocab: int = 7):
  rng = np.random.default_rng(seed)
  lengths = np.array([9, 6, 2, 1, 4])[:batch]
  v = np.arange(size)
  mask = (v[:, None] < v[None, :])[None] & (v[None, None, :] < lengths[:, None, None])
  logits = np.where(mask, rng.normal(size=(batch, size, size)) * 2, -1e9)
  log_trans = logits - np.log(np.maximum(np.sum(np.exp(logits - logits.max(-1, keepdims=True)), -1, keepdims=True),
                                         1e-30)) - logits.max(-1, keepdims=True)
  log_probs = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(batch, size, vocab)) * 2, jnp.float32))
  return jnp.asarray(log_trans, jnp.float32), log_probs, jnp.asarray(lengths, jnp.int32)


def device(tmp_path, name: str, minor: int) -> str:
  """A character device node 1:<minor> (7: full, 3: null) made in tmp_path."""
  path = str(tmp_path / name)
  try:
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
  except (PermissionError, OSError) as e:
    pytest.skip(f'mknod not allowed here: {e}')
  return path


def decode_all(method, params, src, max_len, configs):
  """{'greedy': out, (name, block_size): out} for greedy and the Jacobi configurations (name, options)."""
  outs = {'greedy': run_decoder(method, params, src, 'greedy', max_len=max_len)}
  for name, options in configs:
    outs[name, options.get('block_size')] = run_decoder(method, params, src, name, max_len=max_len, **options)
  return outs


def assert_same_as_greedy(outs, configs):
  """Every Jacobi configuration's tokens, steps and scores equal greedy's, in at most greedy's steps."""
  greedy = outs['greedy']
  steps = np.asarray(greedy.aux['steps'])
  for name, options in configs:
    out = outs[name, options.get('block_size')]
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(greedy.tokens), err_msg=f'{name} {options}')
    np.testing.assert_array_equal(np.asarray(out.aux['steps']), steps)
    np.testing.assert_allclose(np.asarray(out.scores), np.asarray(greedy.scores), rtol=1e-4, atol=1e-4)
    iterations = np.asarray(out.aux['iterations'])
    assert (iterations >= 1).all()
    # Every algorithm finalises at least one token per iteration and stops once an EOS is final:
    # iterations <= greedy steps (docs/methods/jacobi.md allows greedy length + 1).
    assert (iterations <= steps).all(), (name, options, iterations, steps)
    assert (np.asarray(out.aux['passes']) >= iterations).all()


# --- a padded batch of DAGs (tests of nat_jax.losses.dag / fuzzy and nat_jax.decode.dag) ---------------------------
# One padded batch mixes graph and target lengths: a normal pair, a short one, one with repeated reference n-grams, a
# target longer than its graph (no path), a one-vertex graph, and an empty padding row. Every ignored entry holds a
# large garbage value (|x| up to 1e4, exp() would overflow).
L, M, V = 7, 5, 3  # vertices, target tokens, vocabulary
GRAPH = np.array([7, 5, 6, 3, 1, 0])
TARGET = np.array([5, 3, 5, 5, 1, 0])  # row 3: T > G (impossible); row 5: padding


def _garbage(rng, shape):
  return rng.uniform(-1e4, 1e4, size=shape)


def _log_softmax(x, mask):
  x = np.where(mask, x, -np.inf)
  top = np.max(x, axis=-1, keepdims=True)
  top = np.where(np.isfinite(top), top, 0.0)
  out = x - top - np.log(np.sum(np.exp(x - top), axis=-1, keepdims=True) + 1e-300)
  return np.where(mask, out, -np.inf)


def dag_batch():
  """Normalized transitions, token distributions, targets and log_emit (garbage where ignored)."""
  rng = np.random.default_rng(0)
  b = len(GRAPH)
  v = np.arange(L)
  tmask = (v[:, None] < v[None, :])[None] & (v[None, None, :] < GRAPH[:, None, None])  # [B, L, L]
  log_trans = _log_softmax(rng.normal(size=(b, L, L)) * 1.5, tmask)
  log_trans = np.where(tmask, log_trans, _garbage(rng, (b, L, L)))
  log_probs = _log_softmax(rng.normal(size=(b, L, V)) * 1.5, np.ones((b, L, V), bool))  # [B, L, V]
  targets = rng.integers(0, V, size=(b, M))
  targets[2] = [1, 0, 1, 0, 1]  # repeated bigrams (1, 0) x2, (0, 1) x2 and unigrams
  targets[np.arange(M)[None] >= TARGET[:, None]] = V + 5  # ignored ids past the target
  emask = (v[None, :, None] < GRAPH[:, None, None]) & (np.arange(M)[None, None] < TARGET[:, None, None])
  gathered = np.take_along_axis(log_probs, np.minimum(targets, V - 1)[:, None, :].repeat(L, 1), axis=2)
  log_emit = np.where(emask, gathered, _garbage(rng, (b, L, M)))
  log_probs_garbage = np.where((v[None, :] < GRAPH[:, None])[..., None], log_probs, _garbage(rng, log_probs.shape))
  return dict(log_trans=log_trans, log_emit=log_emit, log_probs=log_probs, log_probs_garbage=log_probs_garbage,
              targets=targets, tmask=tmask, emask=emask)


def dag_batch_arrays(g):
  """The batch as jax arrays: (log_trans, log_emit, target_lengths, graph_lengths)."""
  return (jnp.asarray(g['log_trans'], jnp.float32), jnp.asarray(g['log_emit'], jnp.float32),
          jnp.asarray(TARGET, jnp.int32), jnp.asarray(GRAPH, jnp.int32))


def dag_paths(size, num_vertices=None):
  """Strictly increasing paths 0 -> size-1 (all lengths, or exactly num_vertices)."""
  if size == 1:
    return [(0,)] if num_vertices in (None, 1) else []
  if size < 1:
    return []
  out = []
  for k in range(size - 1):
    if num_vertices is None or k + 2 == num_vertices:
      out += [(0,) + mid + (size - 1,) for mid in itertools.combinations(range(1, size - 1), k)]
  return out


def path_log_prob(log_trans_b, path):
  return sum(log_trans_b[i, j] for i, j in zip(path[:-1], path[1:]))

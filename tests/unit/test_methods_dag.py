"""DA-Transformer method: transition head, glancing, masked impossible pairs, decoders on the model,
overfitting to exact reproduction, NLL -> FA-DAT fine-tuning via init_from."""
import itertools
import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from nat_jax import decode
from nat_jax.core.graph import vertex_chunk_count
from nat_jax.core.masks import NEG_INF
from nat_jax.data.tokenizer import BOS_ID, EOS_ID
from nat_jax.decode.dag import joint_viterbi
from nat_jax.methods import dag, get_method
from nat_jax.methods.dag import glance_inputs, glance_ratio
from nat_jax.models.dag_transformer import TransitionHead, vertex_end_tokens
from nat_jax.recipes.defaults import section
from tests.support import dag_greedy_path, dag_lookahead_path, dat_config, reference_text_tokens, tiny_config


def init(method, src, tgt, seed=0):
  return nn.meta.unbox(method.init_params(jax.random.PRNGKey(seed), {'source': src, 'target': tgt}))


@pytest.mark.parametrize('band, chunk', [(0, 0), (2, 0), (0, 40), (2, 100)])  # 40: 6 slices of 1 vertex, 100: 2 of 3
def test_transition_head_matches_the_gated_formula(band, chunk):
  b, size, d, heads = 2, 6, 8, 2
  hidden = jax.random.normal(jax.random.PRNGKey(0), (b, size, d))
  lengths = jnp.array([6, 4])
  head = TransitionHead(heads, d, size + 3, band, chunk)
  params = nn.meta.unbox(head.init(jax.random.PRNGKey(1), hidden, lengths))['params']
  got = np.asarray(head.apply({'params': params}, hidden, lengths))
  # Second implementation, loops in numpy: features [h; link position], per head softmax over
  # allowed j, mixed by the gate.
  positions = np.asarray(params['link_positions'], np.float64)[:size]
  x = np.concatenate([np.asarray(hidden, np.float64), np.broadcast_to(positions, (b, size, d))], axis=-1)
  q = np.einsum('bld,dhk->blhk', x, params['query']['kernel']) + params['query']['bias']
  k = np.einsum('bld,dhk->blhk', x, params['key']['kernel']) + params['key']['bias']
  g = x @ np.asarray(params['gate']['kernel']) + np.asarray(params['gate']['bias'])
  gate = np.exp(g - g.max(-1, keepdims=True))
  gate /= gate.sum(-1, keepdims=True)
  for r, i in itertools.product(range(b), range(size)):
    allowed = [j for j in range(size) if i < j < lengths[r] and (band == 0 or j - i <= band)]
    for j in range(size):
      if j not in allowed:
        assert got[r, i, j] == NEG_INF
    if not allowed:
      continue
    prob = np.zeros(len(allowed))
    for h in range(heads):
      s = np.array([q[r, i, h] @ k[r, j, h] for j in allowed]) / np.sqrt(d // heads)
      e = np.exp(s - s.max())
      prob += gate[r, i, h] * e / e.sum()
    np.testing.assert_allclose(np.exp(got[r, i, allowed]), prob, rtol=1e-5, atol=1e-6)


def _whole_graph_links(params, hidden, lengths, heads, band):
  """The transition head as one expression over [B, H, L, L] (no slices): the reference for its gradients."""
  size, d = hidden.shape[1:]
  x = jnp.concatenate([hidden, jnp.broadcast_to(params['link_positions'][None, :size], hidden.shape)], axis=-1)
  q = jnp.einsum('bld,dhk->blhk', x, params['query']['kernel']) + params['query']['bias']  # [B, L, H, Dh]
  k = jnp.einsum('bld,dhk->blhk', x, params['key']['kernel']) + params['key']['bias']
  v = jnp.arange(size)
  mask = (v[:, None] < v[None, :])[None] & (v[None, None, :] < lengths[:, None, None])  # [B, L, L]
  if band:
    mask &= (v[None, :] - v[:, None] <= band)[None]
  scores = jnp.where(mask[:, None], jnp.einsum('bihd,bjhd->bhij', q, k) / np.sqrt(d // heads), NEG_INF)
  log_gate = jax.nn.log_softmax(x @ params['gate']['kernel'] + params['gate']['bias'], axis=-1)  # [B, L, H]
  mixed = jax.nn.log_softmax(scores, axis=-1) + jnp.transpose(log_gate, (0, 2, 1))[..., None]  # [B, H, L, L]
  return jnp.where(mask, jax.nn.logsumexp(mixed, axis=1), NEG_INF), mask


@pytest.mark.parametrize('band, chunk', [(0, 0), (0, 40), (3, 100)])
def test_transition_head_slices_keep_values_and_gradients(band, chunk):
  """In slices of source vertices (chunk > 0) the head gives the values and gradients (parameters and
  input states) of the whole-graph formula."""
  b, size, d, heads = 2, 6, 8, 2
  hidden = jax.random.normal(jax.random.PRNGKey(0), (b, size, d))
  lengths = jnp.array([6, 4])
  head = TransitionHead(heads, d, size + 3, band, chunk)
  params = nn.meta.unbox(head.init(jax.random.PRNGKey(1), hidden, lengths))['params']
  weights = jax.random.normal(jax.random.PRNGKey(2), (b, size, size))  # [B, L, L]: a random cotangent

  mask = _whole_graph_links(params, hidden, lengths, heads, band)[1]  # [B, L, L]
  objective = lambda links: lambda p, h: jnp.sum(jnp.where(mask, links(p, h), 0.0) * weights)  # noqa: E731
  want_fn = objective(lambda p, h: _whole_graph_links(p, h, lengths, heads, band)[0])
  got_fn = objective(lambda p, h: head.apply({'params': p}, h, lengths))
  want, want_grads = jax.value_and_grad(want_fn, argnums=(0, 1))(params, hidden)
  got, got_grads = jax.jit(jax.value_and_grad(got_fn, argnums=(0, 1)))(params, hidden)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  for g, w in zip(jax.tree_util.tree_leaves(got_grads), jax.tree_util.tree_leaves(want_grads)):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_vertex_chunk_count_takes_the_fewest_equal_slices_within_the_budget():
  assert vertex_chunk_count(12, 60, 0) == 1  # no budget: the whole graph
  assert vertex_chunk_count(12, 60, 720) == 1
  assert vertex_chunk_count(12, 60, 200) == 4  # 3 vertices = 180 elements per slice
  assert vertex_chunk_count(12, 60, 30) == 12  # not even one vertex fits: one vertex per slice
  assert vertex_chunk_count(7, 10, 40) == 7  # L prime: 1 or 7 slices


@pytest.mark.parametrize('chunk', [0, 30, 200])  # 0: the whole graph; 30: slices of 1 vertex; 200: of 3 vertices
def test_emissions_in_slices_equal_the_gathered_vocabulary_log_probs(monkeypatch, chunk):
  """method.emissions (log P(y_m | v) and the argmax token per vertex, a slice of vertices at a time)
  equals gathering the full [B, L, V] log-probabilities, in value and in the gradients of a weighted
  sum with respect to the parameters and the vertex states."""
  monkeypatch.setattr(dag, 'CHUNK_ELEMENTS', chunk)
  vocab, b, size = 30, 2, 12
  method = get_method(dat_config(**{'dat.upsample_scale': 2.0}), vocab)
  src = jnp.array([[5, 6, 7, 8, 9, 1], [5, 6, 1, 0, 0, 0]])
  params = init(method, src, src)
  hidden = jax.random.normal(jax.random.PRNGKey(3), (b, size, 32))  # [B, L, D]
  targets = jnp.array([[2, 7, 7, 11, 1, 0, 0], [2, 29, 1, 0, 0, 0, 0]])  # [B, M]
  weights = jax.random.normal(jax.random.PRNGKey(4), (b, size, targets.shape[1]))  # [B, L, M]

  def reference(p, h):
    log_probs = method.vertex_log_probs(p, h)  # [B, L, V]
    index = jnp.broadcast_to(targets[:, None, :], (b, size, targets.shape[1]))
    return jnp.take_along_axis(log_probs, index, axis=2), jnp.argmax(log_probs, axis=-1)

  want_emit, want_top = reference(params, hidden)
  got_emit, got_top = jax.jit(method.emissions)(params, hidden, targets)
  np.testing.assert_allclose(got_emit, want_emit, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(got_top, want_top)
  objective = lambda fn: lambda p, h: jnp.sum(fn(p, h)[0] * weights)  # noqa: E731
  want = jax.grad(objective(reference), argnums=(0, 1))(params, hidden)
  got = jax.jit(jax.grad(objective(lambda p, h: method.emissions(p, h, targets)), argnums=(0, 1)))(params, hidden)
  for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('loss', [pytest.param('nll', marks=pytest.mark.slow), 'fuzzy'])  # slow: CI time
def test_sliced_training_loss_equals_the_whole_graph_loss(monkeypatch, loss):
  """A glancing training step (with dropout) of NLL and FA-DAT with the vocabulary and transition
  tensors formed in slices of vertices and the decoder rematerialised gives the sums and gradients
  of the whole-graph computation."""
  rng = np.random.default_rng(0)
  src, tgt = np.zeros((3, 8), np.int32), np.zeros((3, 8), np.int32)
  for r in range(3):
    n = rng.integers(3, 8)
    src[r, :n - 1], src[r, n - 1] = rng.integers(5, 40, n - 1), 1
    n = rng.integers(2, 7)
    tgt[r, :n - 1], tgt[r, n - 1] = rng.integers(5, 40, n - 1), 1
  batch = {'source': jnp.asarray(src), 'target': jnp.asarray(tgt)}

  config = dat_config(**{'dat.loss': loss, 'dat.glance_start': 0.9, 'dat.glance_end': 0.9, 'model.dropout': 0.1})

  def method_with_budget(chunk):
    monkeypatch.setattr(dag, 'CHUNK_ELEMENTS', chunk)
    return get_method(config, 40)

  whole, sliced = method_with_budget(0), method_with_budget(300)  # B = 3, L = 16, V = 40: 8 slices, remat
  params = init(whole, batch['source'], batch['target'])
  sliced_params = init(sliced, batch['source'], batch['target'])  # the same parameters (names and values)
  assert jax.tree_util.tree_structure(sliced_params) == jax.tree_util.tree_structure(params)
  for g, w in zip(jax.tree_util.tree_leaves(sliced_params), jax.tree_util.tree_leaves(params)):
    np.testing.assert_array_equal(g, w)

  def sums_and_grads(method):
    objective = lambda p: (lambda s: (s['loss'], s))(method.loss(p, batch, jax.random.PRNGKey(1)))  # noqa: E731
    return jax.jit(jax.grad(objective, has_aux=True))(params)[::-1]

  want_sums, want_grads = sums_and_grads(whole)
  got_sums, got_grads = sums_and_grads(sliced)
  assert float(want_sums['glanced_per_token']) > 0
  for key in want_sums:
    np.testing.assert_allclose(got_sums[key], want_sums[key], rtol=1e-5, atol=1e-6, err_msg=key)
  for g, w in zip(jax.tree_util.tree_leaves(got_grads), jax.tree_util.tree_leaves(want_grads)):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_glancing_count_and_placement():
  align = jnp.array([[0, 2, 3, 5, -1, -1], [0, 1, 2, 3, 4, 6]])  # [B, M]
  hit = jnp.array([[True, False, False, False, False, False], [False] * 6])
  targets = jnp.array([[7, 8, 9, 1, 0, 0], [11, 12, 13, 14, 15, 1]])
  for tau, expected in ((0.0, [0, 0]), (0.5, [2, 3]), (1.0, [3, 6])):  # round((T - correct) * tau)
    tokens, mask, glanced = glance_inputs(jax.random.PRNGKey(0), align, hit, targets, tau, 8)
    tokens, mask, glanced = np.asarray(tokens), np.asarray(mask), np.asarray(glanced)
    assert mask.sum(1).tolist() == expected
    for r in range(2):  # the glanced target positions are exactly those put on the masked vertices
      assert sorted(int(v) for v in np.asarray(align[r])[glanced[r]]) == np.flatnonzero(mask[r]).tolist()
    for r in range(2):
      vertex_of = {int(v): int(t) for v, t in zip(align[r], targets[r]) if v >= 0}
      for v in np.flatnonzero(mask[r]):
        assert tokens[r, v] == vertex_of[v]  # a glanced vertex gets the target token aligned to it
  np.testing.assert_allclose([glance_ratio(s, 0.5, 0.1, 100) for s in (0, 50, 100, 400)], [0.5, 0.3, 0.1, 0.1],
                             atol=1e-6)


def test_bos_and_eos_inputs_at_the_first_and_last_vertex():
  """Every graph length of a padded batch: vertex 0 reads BOS and vertex G - 1 EOS, so their learned
  graph queries have no effect; the queries of the vertices between them do (brute force on the table)."""
  size = 7
  lengths = jnp.arange(1, size + 1)  # G = 1 .. 7 in one padded batch
  ends = np.asarray(vertex_end_tokens(lengths, size))
  for b, g in enumerate(np.asarray(lengths)):
    want = [BOS_ID] + [0] * (size - 1)
    if g >= 2:
      want[g - 1] = EOS_ID
    assert ends[b].tolist() == want
  method = get_method(dat_config(**{'dat.upsample_scale': 1.0}), 30)
  src = jnp.tile(jnp.array([[5, 6, 7, 8, 9, 10, 1]]), (size, 1))
  src = jnp.where(jnp.arange(size)[None, :] < lengths[:, None], src, 0).at[jnp.arange(size), lengths - 1].set(1)
  params = init(method, src, src)
  hidden = lambda p: method.predict_graph(p, src).hidden  # [B, L, D]
  base = np.asarray(hidden(params))
  for vertex in range(size):
    moved = jax.tree_util.tree_map(lambda x: x, params)
    # not a constant: LN removes those
    kick = jax.random.normal(jax.random.PRNGKey(vertex), params['graph_queries'].shape[1:])
    moved['graph_queries'] = params['graph_queries'].at[vertex].add(kick)
    delta = np.abs(np.asarray(hidden(moved)) - base).max(axis=2)  # [B, L]
    for b, g in enumerate(np.asarray(lengths)):  # the states of the graph's own vertices (< G)
      assert (delta[b, :g].max() > 1e-4) == (0 < vertex < g - 1), (vertex, g)


def test_pairs_that_do_not_fit_their_graph_are_masked_and_counted():
  method = get_method(dat_config(**{'dat.upsample_scale': 1.0}), 30)
  src = jnp.array([[5, 6, 7, 1, 0, 0], [5, 1, 0, 0, 0, 0], [5, 6, 1, 0, 0, 0]])
  tgt = jnp.array([[8, 9, 1, 0, 0, 0], [8, 9, 10, 11, 1, 0], [0, 0, 0, 0, 0, 0]])  # row 1: 5 > G = 2; row 2 padding
  batch = {'source': src, 'target': tgt}
  params = init(method, src, tgt)
  sums = method.loss(params, batch, jax.random.PRNGKey(0), deterministic=True)
  # BOS 8 9 EOS: 4 graph-side tokens on G = 4 vertices; row 1: 6 > G = 2
  assert float(sums['impossible']) == 1 and float(sums['sentences']) == 1 and float(sums['tokens']) == 4
  grads = jax.grad(lambda p: method.loss(p, batch, jax.random.PRNGKey(0))['loss'])(params)
  assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree_util.tree_leaves(grads))
  # The loss of the valid row alone is the same number.
  alone = method.loss(params, {'source': src[:1], 'target': tgt[:1]}, jax.random.PRNGKey(0), deterministic=True)
  np.testing.assert_allclose(float(sums['loss']), float(alone['loss']), rtol=1e-5)


def test_registered_decoders_equal_the_graph_functions_on_the_full_graph():
  """dag_greedy projects only its path; lookahead / joint-Viterbi the whole graph: all must agree
  with the pure functions applied to the fully projected graph."""
  method = get_method(dat_config(**{'dat.upsample_scale': 3.0}), 40)
  rng = np.random.default_rng(0)
  src = np.zeros((6, 8), np.int32)
  for r in range(6):
    n = rng.integers(2, 8)
    src[r, :n - 1], src[r, n - 1] = rng.integers(5, 40, n - 1), 1
  src = jnp.asarray(src)
  params = init(method, src, src, seed=2)
  graph = method.predict_graph(params, src)
  log_probs = method.vertex_log_probs(params, graph.hidden)
  args = (graph.log_trans, log_probs, graph.graph_lengths)
  limit = method.max_decode_len(src.shape[1])
  for name, (want, want_len) in (('dag_greedy', dag_greedy_path(*args)), ('dag_lookahead', dag_lookahead_path(*args)),
                                 ('dag_joint_viterbi', joint_viterbi(*args, 1.0))):
    out = decode.make_decode_fn(method, name, decode.parse_options(name, {}))(params, src)
    want, want_len = np.asarray(want), np.asarray(want_len)
    for r in range(src.shape[0]):
      seq = reference_text_tokens(want[r, :want_len[r]].tolist(), True, limit)
      got = np.asarray(out.tokens[r]).tolist()
      assert got[:len(seq)] == seq and not any(got[len(seq):]), (name, r)


def test_tiny_dat_overfits_to_exact_reproduction():
  """A few pairs (target = a fixed function of the source, up to 1.5x longer, no token repeated in
  a row since the decoders remove repeats), trained with NLL and glancing: every decoder then
  reproduces every target."""
  method = get_method(dat_config(**{'model.d_model': 64, 'model.d_ff': 128, 'dat.upsample_scale': 3.0}), 24)
  rng = np.random.default_rng(1)
  src, tgt = np.zeros((4, 10), np.int32), np.zeros((4, 10), np.int32)
  for r in range(4):
    n = 4 + r
    words = rng.choice(np.arange(5, 13), n - 1, replace=False)
    src[r, :n] = [*words, 1]
    out = [w + 10 for w in words[::-1]] + [23] * (r % 2)
    tgt[r, :len(out) + 1] = [*out, 1]
  batch = {'source': jnp.asarray(src), 'target': jnp.asarray(tgt)}
  params = init(method, batch['source'], batch['target'])
  tx = optax.adam(3e-3)
  opt = tx.init(params)

  @jax.jit
  def step(params, opt, i):
    grads = jax.grad(lambda p: method.loss(p, batch, jax.random.fold_in(jax.random.PRNGKey(0), i), step=i)['loss'])(
        params)
    updates, opt = tx.update(grads, opt, params)
    return optax.apply_updates(params, updates), opt

  for i in range(400):
    params, opt = step(params, opt, i)
  for name in decode.decoders_for(method):
    out = decode.make_decode_fn(method, name, decode.parse_options(name, {}))(params, batch['source'])
    np.testing.assert_array_equal(np.asarray(out.tokens)[:, :10], tgt, err_msg=name)


def test_method_config_sections_are_checked(corpus):
  missing = dat_config()
  del missing['dat']
  with pytest.raises(ValueError, match="needs the config section 'dat'"):
    get_method(missing, 30)
  extra = dat_config()
  extra.dat.glance_stpes = 10  # a typo in a recipe
  with pytest.raises(ValueError, match=r"unknown keys \['glance_stpes'\]"):
    get_method(extra, 30)
  stray = tiny_config(corpus)
  stray.dat = section(dag.DatSettings)
  with pytest.raises(ValueError, match="section for method 'dat' but model.method='at'"):
    get_method(stray, 30)


def test_configs_of_runs_written_before_method_sections_are_refused_by_name(tmp_path):
  """A config.json of the layout before method sections (DA-Transformer settings in model / dag) is a
  CheckpointError naming the file and what to do, not a KeyError deep in get_method."""
  from nat_jax.errors import CheckpointError
  from nat_jax.run.workdir import read_run_config
  plain = dat_config().to_dict()
  assert get_method(ml_collections.ConfigDict(plain), 30).label().startswith('dat (lambda=')  # today's layout loads
  old = dict(plain, model=dict(plain['model'], upsample_scale=3.0, link_heads=2))
  old['dag'] = {'loss': 'fuzzy', 'ngram': 3}
  del old['dat']
  path = tmp_path / 'config.json'
  path.write_text(json.dumps(old))
  with pytest.raises(CheckpointError, match='before method sections.*retrain'):
    read_run_config(str(path))
  path.write_text(json.dumps(plain))
  assert read_run_config(str(path)).dat.upsample_scale == plain['dat']['upsample_scale']


def test_warm_start_from_an_at_run_takes_its_whole_transformer(corpus):
  """init_from an AT run: its parameters are the DAT backbone, unchanged; the graph queries and the
  transition heads keep the fresh initialisation; a DA-Transformer run's parameters pass as they are."""
  from tests.support import random_model
  at_method, at_params = random_model(corpus, vocab_size=9)
  method, fresh = random_model(corpus, vocab_size=9, seed=7, **{'model.method': 'dat'})
  adopted = method.adopt_params(at_params, fresh)
  assert set(adopted) == set(fresh)
  same = jax.tree_util.tree_map(lambda a, b: bool(jnp.array_equal(a, b)), adopted['backbone'], at_params)
  assert all(jax.tree_util.tree_leaves(same))
  for key in set(fresh) - {'backbone'}:
    assert all(jax.tree_util.tree_leaves(jax.tree_util.tree_map(jnp.array_equal, adopted[key], fresh[key])))
  assert method.adopt_params(fresh, None) is fresh
  shapes = lambda tree: jax.tree_util.tree_map(jnp.shape, tree)  # noqa: E731
  assert shapes(adopted) == shapes(fresh)

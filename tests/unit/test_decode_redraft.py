"""Re-drafting (drafted decoding, update=redraft) against independent truths: the prefix alignment
over a DA-Transformer graph against brute-force enumeration of vertex paths; its first draft against
`dag_lookahead`; its continuation against a plain-Python walk; the CMLM re-draft's input frame on a
hand-written mask predictor; exactness (the verifier's greedy output) with random DAT and CMLM
drafters, directly and through the decoder registry; the config errors."""
import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax import decode
from nat_jax.core.graph import IMPOSSIBLE
from nat_jax.decode.dag import dag_lookahead
from nat_jax.decode.drafted import drafted_decode
from nat_jax.decode.greedy import greedy_decode
from nat_jax.decode.redraft import MaskRedrafter, graph_redrafter, mask_redrafter
from nat_jax.errors import ConfigError
from nat_jax.run.resources import Resources
from nat_jax.views import Graph, GraphPredictor, LeftToRightScorer, MaskPredictor
from tests.support import random_model

EOS, BOS, PAD, MASK = 1, 2, 0, 4
SOURCES = jnp.array([[7, 8, 6, 5, 7, EOS, 0, 0], [8, 6, EOS, 0, 0, 0, 0, 0], [5, 6, 7, 8, 5, 6, 7, EOS]])  # ids < 9


@dataclasses.dataclass(frozen=True)
class FixedGraph:
  """A GraphPredictor that returns one hand-made graph whatever the source."""
  log_trans: jax.Array  # f32[B, L, L]
  log_probs: jax.Array  # f32[B, L, V]
  graph_lengths: jax.Array

  def predict_graph(self, src):
    return Graph(hidden=self.log_probs, log_trans=self.log_trans, graph_lengths=self.graph_lengths)

  def vertex_log_probs(self, hidden):
    return hidden

  def max_decode_len(self, src_len):
    return 40


def random_graph(seed: int, size: int, vocab: int, lengths) -> FixedGraph:
  rng = np.random.default_rng(seed)
  trans = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(len(lengths), size, size)) * 2, jnp.float32))
  probs = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(len(lengths), size, vocab)) * 3, jnp.float32))
  return FixedGraph(trans, probs, jnp.asarray(lengths, jnp.int32))


def brute_alignment(log_trans: np.ndarray, log_probs: np.ndarray, g: int, prefix: list[int]) -> np.ndarray:
  """alpha[v]: best log E + log P over vertex paths 0 < u_1 < ... < u_k = v < g emitting the prefix."""
  best = np.full(log_trans.shape[0], -np.inf)
  for path in itertools.combinations(range(1, g), len(prefix)):
    score, prev = 0.0, 0
    for u, y in zip(path, prefix):
      score += log_trans[prev, u] + log_probs[u, y]
      prev = u
    best[path[-1]] = max(best[path[-1]], score)
  return best


@pytest.mark.parametrize('g', [7, 5])
def test_prefix_alignment_equals_brute_force(g):
  graph = random_graph(0, 7, 6, [g])
  redrafter = graph_redrafter(graph, SOURCES[:1], window=4)
  tokens = jnp.asarray([[3, 5, 0, 4, 4, 2, 0, 0]], jnp.int32)
  alpha = redrafter.start(None, 0)
  for starts, fixed in ((0, 2), (2, 3), (3, 5)):  # the passes made outputs starts .. fixed - 1 final
    alpha = redrafter.absorb(alpha, tokens, jnp.array([starts]), jnp.array([fixed]))
    want = brute_alignment(np.asarray(graph.log_trans[0]), np.asarray(graph.log_probs[0]), g,
                           [int(t) for t in tokens[0, :fixed]])
    got = np.asarray(alpha[0])
    reachable = np.isfinite(want)
    np.testing.assert_allclose(got[reachable], want[reachable], rtol=1e-5, atol=1e-4)
    assert (got[~reachable] < IMPOSSIBLE).all(), (fixed, got)


def test_first_draft_is_dag_lookahead(corpus):
  """Before any token is final the re-drafter drafts dag_lookahead's output (its first W tokens)."""
  def both(params, window):
    view = method.views()[GraphPredictor](params)
    redrafter = graph_redrafter(view, SOURCES, window)
    return dag_lookahead(view, SOURCES).tokens, redrafter.first(redrafter.start(None, 0))

  for seed, window in ((0, 3), (1, 8)):
    method, params = random_model(corpus, vocab_size=9, seed=seed, **{'model.method': 'dat'})
    want, got = jax.jit(both, static_argnums=1)(params, window)
    np.testing.assert_array_equal(np.asarray(got), np.pad(np.asarray(want), ((0, 0), (0, window)))[:, :window],
                                  err_msg=f'{seed} {window}')


def plain_walk(log_trans, log_probs, g, vertex, last, window):
  """Plain-Python lookahead continuation: next = argmax_{v < j < g} log E_vj + max_y log P(y | j)."""
  bonus = log_probs.max(axis=1)
  out, prev = [], last
  if vertex >= g - 1:
    return [EOS]
  while len(out) < window and vertex < g - 1:
    vertex = max(range(vertex + 1, g), key=lambda j: log_trans[vertex, j] + bonus[j])
    token = int(log_probs[vertex].argmax())
    if token != prev and token not in (BOS, EOS, PAD):
      out.append(token)
    if vertex == g - 1:
      out.append(EOS)
    prev = token
  return out[:window]


def test_redraft_continues_from_the_best_end_vertex():
  for seed, g in ((1, 9), (2, 6), (3, 9)):
    graph = random_graph(seed, 9, 7, [g])
    trans, probs = np.asarray(graph.log_trans[0]), np.asarray(graph.log_probs[0])
    window = 4
    redrafter = graph_redrafter(graph, SOURCES[:1], window)
    tokens = jnp.asarray([[5, 3, 6, 3, 0, 0, 0, 0]], jnp.int32)
    for fixed in (1, 2, 3):
      alpha, drafts = redrafter.start(None, 0), None
      drafts, _ = redrafter.draft(alpha, None, jnp.array([0]), jnp.array([fixed]), tokens)
      prefix = [int(t) for t in tokens[0, :fixed]]
      vertex = int(np.argmax(brute_alignment(trans, probs, g, prefix)))
      want = plain_walk(trans, probs, g, vertex, prefix[-1], window)
      np.testing.assert_array_equal(np.asarray(drafts[0]), want + [0] * (window - len(want)),
                                    err_msg=f'seed {seed} g {g} fixed {fixed}')


@dataclasses.dataclass(frozen=True)
class NextTokenFiller:
  """A hand-written MaskPredictor: at every slot it predicts (the token in the slot before it) + 1
  (5 after a special token or MASK); length head: `length` tokens incl. EOS."""
  length: int
  vocab: int = 12

  def encode(self, src):
    return {'src': src}

  def length_log_probs(self, enc):
    return jax.nn.log_softmax(10.0 * jax.nn.one_hot(jnp.full((enc['src'].shape[0],), self.length), 20))

  def fill_logits(self, enc, tokens):
    before = jnp.pad(tokens[:, :-1], ((0, 0), (1, 0)))
    guess = jnp.where(before >= 5, 5 + (before - 5 + 1) % (self.vocab - 5), 5)
    return 10.0 * jax.nn.one_hot(guess, self.vocab)

  def max_decode_len(self, src_len):
    return 10


def test_cmlm_redraft_unmasks_the_prefix_and_keeps_the_length():
  view = NextTokenFiller(length=5)
  src = jnp.ones((1, 4), jnp.int32)
  redrafter = mask_redrafter(view, src, window=4, iterations=1, length_beam=1)
  np.testing.assert_array_equal(np.asarray(redrafter.first(None))[0, :6], [5, 5, 5, 5, EOS, 0])
  tokens = jnp.asarray([[9, 7, 11, 6, 8, 9, 0, 0, 0, 0]], jnp.int32)
  cases = {1: [10, 5, 5, EOS],     # prefix 9; masks until slot 3, EOS at slot 4 (length 5)
           3: [5, EOS, 0, 0],      # prefix 9 7 11: the slot after 11 predicts 5 (11 + 1 wraps)
           5: [EOS, 0, 0, 0],      # the prefix outran the length: it grows to prefix + 1
           6: [EOS, 0, 0, 0]}
  for fixed, want in cases.items():
    got, _ = redrafter.draft(None, None, jnp.array([0]), jnp.array([fixed]), tokens)
    np.testing.assert_array_equal(np.asarray(got[0]), want, err_msg=f'fixed {fixed}')
  assert isinstance(redrafter, MaskRedrafter)


def drafter_views(corpus):
  """(name, build(src, window) -> WindowDrafter, blocks) of random DAT (lambda 2 and 1) and CMLM drafters."""
  for name, overrides, protocol, make, blocks in (
      ('dat', {'model.method': 'dat', 'dat.upsample_scale': 2.0}, GraphPredictor, graph_redrafter, (1, 8)),
      ('dat lambda 1', {'model.method': 'dat', 'dat.upsample_scale': 1.0}, GraphPredictor, graph_redrafter, (3,)),
      ('cmlm', {'model.method': 'cmlm'}, MaskPredictor,
       functools.partial(mask_redrafter, iterations=2, length_beam=2), (4,))):
    method, params = random_model(corpus, vocab_size=9, seed=5, **overrides)
    yield name, functools.partial(make, method.views()[protocol](params)), blocks


def test_redrafting_is_exact(corpus):
  """Whatever the drafter, the verifier's greedy output; passes within greedy's steps."""
  method, params = random_model(corpus, vocab_size=9)
  scorer = method.views()[LeftToRightScorer](params)
  want = jax.jit(lambda s: greedy_decode(scorer, s))(SOURCES)
  steps = np.asarray(want.aux['steps'])
  for name, build, blocks in drafter_views(corpus):
    for block in blocks:
      got = jax.jit(lambda s, b=block, make=build: drafted_decode(scorer, s, head=make(s, b), block=b,
                                                                 update='redraft'))(SOURCES)
      np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(want.tokens), err_msg=f'{name} {block}')
      assert (np.asarray(got.aux['iterations']) <= steps).all(), (name, block)


def test_redrafting_a_batch_of_sixteen_is_exact(corpus):
  """At 16 rows and more the shared loop shrinks batches (nat_jax.decode.loop); a re-drafter's own
  per-sentence arrays must stay with their rows."""
  method, params = random_model(corpus, vocab_size=9)
  scorer = method.views()[LeftToRightScorer](params)
  sources = jnp.tile(SOURCES, (-(-16 // SOURCES.shape[0]), 1))[:16]
  want = jax.jit(lambda s: greedy_decode(scorer, s))(sources)
  name, build, _ = next(drafter_views(corpus))
  got = jax.jit(lambda s: drafted_decode(scorer, s, head=build(s, 4), block=4, update='redraft'))(sources)
  np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(want.tokens), err_msg=name)


@dataclasses.dataclass
class FakeRun:
  method: object
  params: object


def test_redraft_through_the_registry(corpus):
  """--decoder.drafter=<run>[:dag_lookahead] --decoder.update=redraft builds and gives greedy's output;
  the wrong drafter decoder, a drafter that cannot re-draft, a verifier that is not text-order, and
  redraft without a drafter are config errors."""
  at, at_params = random_model(corpus, vocab_size=9)
  dat, dat_params = random_model(corpus, vocab_size=9, seed=5, **{'model.method': 'dat'})
  runs = {'dat': FakeRun(dat, dat_params), 'at': FakeRun(at, at_params)}
  build = functools.partial(decode.build_decoder, at, 'drafted', resources=Resources(object(), load=runs.__getitem__))
  greedy, _ = decode.build_decoder(at, 'greedy', {})
  want = greedy(at_params, SOURCES)
  for spec in ('dat', 'dat:dag_lookahead'):
    fn, _ = build({'drafter': spec, 'update': 'redraft', 'block': '4'})
    np.testing.assert_array_equal(np.asarray(fn(at_params, SOURCES).tokens), np.asarray(want.tokens))
  for overrides, message in (({'drafter': 'dat:dag_greedy', 'update': 'redraft'}, "continues the drafter decoder"),
                             ({'drafter': 'at', 'update': 'redraft'}, 'cannot re-draft'),
                             ({'update': 'redraft'}, 're-drafts with a drafter run')):
    with pytest.raises(ConfigError, match=message):
      build(overrides)
  hrt, _ = random_model(corpus, vocab_size=9, **{'model.method': 'hrt', 'hrt.chunk': 2})
  with pytest.raises(ConfigError, match='one token per step in text order'):
    decode.build_decoder(hrt, 'drafted', {'drafter': 'dat', 'update': 'redraft'}, resources=Resources(object(),
                         load=runs.__getitem__))

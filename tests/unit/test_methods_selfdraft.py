"""Self-drafting (a draft head on a frozen AT) against independent truths: drafted decoding with any
head (hand-written: always right, always wrong, right on a random subset; a random trained-shape
head) equals the verifier's greedy output, passes within greedy's steps and, for a perfect head,
ceil(n / block) passes or fewer; the states the head reads while decoding are the teacher-forced
states it is trained on; the verifier stays bit for bit the AT it was initialised from."""
import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax.decode import LeftToRightScorer
from nat_jax.decode.drafted import drafted_decode, rows_step
from nat_jax.decode.greedy import greedy_decode
from nat_jax.errors import ConfigError
from nat_jax.methods import get_method
from nat_jax.methods.autoregressive import autoregressive_inputs
from nat_jax.methods.selfdraft import sample_boundaries, window_targets
from nat_jax.models.transformer import Transformer
from tests.support import random_model, tiny_config

EOS, BOS = 1, 2
VOCAB = 16  # above every id in SOURCES (an id outside the vocabulary embeds as NaN)
SOURCES = jnp.array([[7, 8, 9, 10, 11, EOS, 0, 0], [12, 13, EOS, 0, 0, 0, 0, 0], [5, 6, 7, 8, 9, 10, 11, EOS]])


@flax.struct.dataclass
class TableHead:
  """A hand-written WindowDrafter: drafts output token o as table[b, o] (i32[B, P], 0 past the end).
  A pytree (the table traced), so one compiled decode serves every table of a window size."""
  table: jax.Array
  window: int = flax.struct.field(pytree_node=False, default=8)
  reads_states = False

  def start(self, enc, num_slots):
    return None

  def first(self, head_state):
    return self.lookup(jnp.zeros((self.table.shape[0],), jnp.int32))

  def draft(self, head_state, states, starts, fixed, tokens):
    return self.lookup(fixed), head_state

  def lookup(self, fixed):
    index = fixed[:, None] + jnp.arange(self.window)  # [B, W]
    padded = jnp.pad(self.table, ((0, 0), (0, self.window)))
    return jnp.take_along_axis(padded, jnp.minimum(index, padded.shape[1] - 1), axis=1)


def tables(greedy_tokens: np.ndarray, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
  """What hand-written heads draft: the greedy output, never it, it on a random subset."""
  rng = np.random.default_rng(seed)
  perfect = np.asarray(greedy_tokens)
  wrong = np.where(perfect == EOS, 6, 5 + (np.maximum(perfect, 5) - 5 + 1) % (vocab - 5))
  subset = np.where(rng.random(perfect.shape) < 0.5, perfect, rng.integers(5, vocab, perfect.shape))
  return {'perfect': perfect, 'wrong': wrong, 'subset': subset}


@pytest.mark.parametrize('rows', [slice(None), pytest.param(slice(2, 3), marks=pytest.mark.slow)])  # batch 3, batch 1
def test_any_head_gives_greedy_output(corpus, rows):
  method, params = random_model(corpus, vocab_size=VOCAB)
  scorer, src = method.scorer(params), SOURCES[rows]
  want = jax.jit(lambda s: greedy_decode(scorer, s))(src)
  steps = np.asarray(want.aux['steps'])
  for block, window in ((1, 1), (2, 2), (3, 3), (8, 8), (8, 4), (2, 8)):
    fn = jax.jit(lambda s, head, block=block: drafted_decode(scorer, s, head=head, block=block))  # one compile
    for name, table in tables(np.asarray(want.tokens), VOCAB).items():
      got = fn(src, TableHead(jnp.asarray(table), window))
      np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(want.tokens), err_msg=f'{name} {block} {window}')
      np.testing.assert_allclose(np.asarray(got.scores), np.asarray(want.scores), rtol=1e-5, atol=1e-5)
      passes = np.asarray(got.aux['iterations'])
      assert (passes <= steps).all(), (name, block, window, passes, steps)
      if name == 'perfect' and window >= block:
        assert (passes <= -(-steps // block)).all(), (block, window, passes, steps)
      if name == 'wrong':
        np.testing.assert_array_equal(passes, steps)  # nothing accepted: one token per pass


@pytest.mark.parametrize('head_layers', [0, 1])
def test_a_selfdraft_run_drafts_for_its_own_verifier(corpus, head_layers):
  """The run's LeftToRightScorer is its frozen verifier carrying the head: drafted = greedy."""
  method, params = random_model(corpus, vocab_size=VOCAB, **{'model.method': 'selfdraft',
                                                         'selfdraft.head_layers': head_layers})
  scorer = method.views()[LeftToRightScorer](params)
  assert scorer.draft_head.window == 8
  want = jax.jit(lambda s: greedy_decode(scorer, s))(SOURCES)
  got = jax.jit(lambda s: drafted_decode(scorer, s, head=scorer.draft_head, block=8))(SOURCES)
  np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(want.tokens))
  assert (np.asarray(got.aux['iterations']) <= np.asarray(want.aux['steps'])).all()


def test_decoding_states_are_the_teacher_forced_states(corpus):
  """After a pass, the head reads the verifier's state at the last final token from the cached
  window; training reads it from a teacher-forced pass over the whole output: the same numbers."""
  method, params = random_model(corpus, vocab_size=VOCAB, **{'model.method': 'selfdraft'})
  scorer = method.views()[LeftToRightScorer](params)
  want = jax.jit(lambda s: greedy_decode(scorer, s))(SOURCES)
  target = want.tokens  # [B, T]
  inputs = autoregressive_inputs(target)
  enc = scorer.encode(SOURCES)
  _, taught, _ = method.model.apply({'params': params['verifier']}, inputs.tokens, inputs.positions,
                                    inputs.self_mask(), enc['encoded'], enc['src_valid'],
                                    method=Transformer.decode_states)  # [B, T, D]
  cache = scorer.init_cache(enc, target.shape[1] + 4)
  first, second = inputs.tokens[:, :3], inputs.tokens[:, 3:7]  # two passes: slots 0..2, then 3..6
  _, h1, cache = rows_step(scorer, enc, cache, first, jnp.zeros((3,), jnp.int32), states=True)
  _, h2, _ = rows_step(scorer, enc, cache, second, jnp.full((3,), 3, jnp.int32), states=True)
  np.testing.assert_allclose(np.asarray(jnp.concatenate([h1, h2], axis=1)), np.asarray(taught[:, :7]),
                             rtol=1e-4, atol=1e-4)


def test_the_head_drafts_in_decoding_as_in_training(corpus):
  """The head's memory filled pass by pass (window states written at each pass's start, later slots
  hidden) drafts what the training path drafts from the teacher-forced states of the prefix."""
  method, params = random_model(corpus, vocab_size=VOCAB, **{'model.method': 'selfdraft'})
  scorer = method.views()[LeftToRightScorer](params)
  head = scorer.draft_head
  target = jax.jit(lambda s: greedy_decode(scorer, s))(SOURCES).tokens  # [B, T]
  inputs = autoregressive_inputs(target)
  enc = scorer.encode(SOURCES)
  _, taught, _ = method.model.apply({'params': params['verifier']}, inputs.tokens, inputs.positions,
                                    inputs.self_mask(), enc['encoded'], enc['src_valid'],
                                    method=Transformer.decode_states)  # [B, T, D]
  size = target.shape[1] + 8
  memory = head.memory(jnp.pad(taught, ((0, 0), (0, 8), (0, 0))))  # the whole output's states, [B, size, ...]
  state = head.start(enc, size)
  rows = jnp.ones((3,), jnp.int32)
  for start, fixed in ((0, 3), (3, 4), (4, 8)):  # passes: slots start .. start + 7 scored, outputs < fixed final
    window = jax.lax.dynamic_slice_in_dim(jnp.pad(taught, ((0, 0), (0, 8), (0, 0))), start, 8, axis=1)
    got, state = head.draft(state, window, start * rows, fixed * rows, target)
    visible = jnp.arange(size)[None] < fixed
    want = head.draft_logits(state, taught[:, fixed - 1], target[:, fixed - 1], fixed * rows, memory,
                             jnp.broadcast_to(visible, (3, size)))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(jnp.argmax(want, -1)), err_msg=f'pass at {start}')


def test_window_targets_and_boundaries():
  target = jnp.array([[5, 6, 7, EOS, 0], [8, EOS, 0, 0, 0]])
  got = window_targets(target, jnp.array([[0, 2], [1, 0]]), 3)
  np.testing.assert_array_equal(np.asarray(got), [[[5, 6, 7], [7, EOS, 0]], [[EOS, 0, 0], [8, EOS, 0]]])
  t = np.asarray(sample_boundaries(jax.random.PRNGKey(0), jnp.array([4, 1, 2]), 4000))
  assert sorted(set(t[0])) == [-1, 0, 1, 2] and set(t[1]) == {-1} and sorted(set(t[2])) == [-1, 0]
  np.testing.assert_allclose(np.bincount(t[0] + 1) / 4000, 0.25, atol=0.03)  # uniform over -1 .. n - 2


def test_loss_reaches_the_head_only(corpus):
  method, params = random_model(corpus, vocab_size=VOCAB, **{'model.method': 'selfdraft', 'model.dropout': 0.1})
  batch = {'source': SOURCES, 'target': jnp.array([[5, 6, 7, EOS, 0, 0], [8, EOS, 0, 0, 0, 0], [5, 5, 6, 6, 7, EOS]])}
  grads = jax.grad(lambda p: method.loss(p, batch, jax.random.PRNGKey(1))['loss'])(params)
  assert all(float(jnp.max(jnp.abs(g))) == 0.0 for g in jax.tree_util.tree_leaves(grads['verifier']))
  assert any(float(jnp.max(jnp.abs(g))) > 0.0 for g in jax.tree_util.tree_leaves(grads['head']))


def test_weight_decay_is_refused(corpus):
  with pytest.raises(ConfigError, match='weight_decay'):
    get_method(tiny_config(corpus, **{'model.method': 'selfdraft', 'weight_decay': 0.01}), VOCAB)

"""Drafted (speculative) decoding against independent truths: exact mode equals the verifier's greedy
output for every verifier view (AT, HRT's Skip-AT, IBDecoder family) and every drafter (perfect,
always wrong, right on a random subset, all [PAD], another run through the registry); pass counts
against their bounds; relaxed mode against a sequential plain-Python implementation of SpecDec's
rule on a Markov-chain verifier; beta = 1 relaxed equals exact."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax.decode import LeftToRightScorer
from nat_jax.decode.drafted import drafted_decode, parse_drafter
from nat_jax.decode.greedy import greedy_decode
from nat_jax.errors import ConfigError
from tests.support import markov, random_model

EOS, BOS = 1, 2
SOURCES = jnp.array([[7, 8, 6, 5, 7, EOS, 0, 0], [8, 6, EOS, 0, 0, 0, 0, 0], [5, 6, 7, 8, 5, 6, 7, EOS]])  # ids < 9


def drafts_of(greedy_tokens: np.ndarray, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
  """Text-order drafts of a greedy output i32[B, T]: perfect, always wrong, right on a random subset,
  all PAD, and the perfect draft cut short (no EOS)."""
  rng = np.random.default_rng(seed)
  perfect = np.asarray(greedy_tokens)
  wrong = np.where(perfect > 0, 5 + (perfect - 5 + 1) % (vocab - 5), 5)  # a real token, never the right one
  wrong[perfect == EOS] = 6
  subset = np.where(rng.random(perfect.shape) < 0.5, perfect, rng.integers(5, vocab, perfect.shape))
  short = perfect.copy()
  short[:, 2:] = 0
  return {'perfect': perfect, 'wrong': wrong, 'subset': subset, 'pad': np.zeros_like(perfect), 'short': short}


def every_kth(tokens: np.ndarray, k: int) -> np.ndarray:
  """A text-order draft whose every k-th token is `tokens` (what HRT's Skip-AT writes), filler 7 between."""
  text = np.full((tokens.shape[0], k * tokens.shape[1]), 7, np.int32)
  text[:, k - 1::k] = tokens
  return text


def check_exact(scorer, src, vocab, blocks=(1, 2, 3, 8), to_text=lambda tokens: tokens):
  """Every draft x block x update: the greedy output, passes within greedy's steps; a perfect draft of
  n tokens (incl. EOS) in ceil(n / block) + 1 passes or fewer. `to_text` turns what greedy returns
  into a text-order draft (HRT's Skip-AT view returns every k-th token only)."""
  z = scorer.tokens_per_step
  want = jax.jit(lambda s: greedy_decode(scorer, s))(src)
  steps = -(-np.asarray(want.aux['steps']) // z)  # greedy's decoding steps per row
  drafts = {name: jnp.asarray(to_text(draft)) for name, draft in drafts_of(np.asarray(want.tokens), vocab).items()}
  for block in blocks:
    for update in ('jacobi', 'draft'):
      fn = jax.jit(functools.partial(drafted_decode, scorer, block=block, update=update))  # one compile per pair
      for name, draft in drafts.items():
        got = fn(src, draft)
        np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(want.tokens),
                                      err_msg=f'{name} {block} {update}')
        np.testing.assert_allclose(np.asarray(got.scores), np.asarray(want.scores), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(got.aux['steps']), np.asarray(want.aux['steps']))
        passes = np.asarray(got.aux['iterations'])
        assert (passes <= steps).all(), (name, block, update, passes, steps)
        if name == 'perfect':
          assert (passes <= -(-steps // block) + 1).all(), (block, passes, steps)
        if name == 'wrong' and update == 'draft':
          np.testing.assert_array_equal(passes, steps)  # nothing to accept: one step per pass


def test_exact_on_an_autoregressive_verifier(corpus):
  method, params = random_model(corpus, vocab_size=9)
  check_exact(method.scorer(params), SOURCES, 9)


def test_exact_on_hrt_skip_at_views(corpus):
  """HRT's Skip-AT writes every k-th token: a text-order draft is read through write_in."""
  for k in (2, 3):
    method, params = random_model(corpus, vocab_size=9, **{'model.method': 'hrt', 'hrt.chunk': k,
                                                            'model.relative_window': 4})
    scorer = method.views()[LeftToRightScorer](params)
    check_exact(scorer, SOURCES, 9, blocks=(1, 3), to_text=lambda tokens: every_kth(tokens, k))
    # write_in of a text y_1..y_n EOS 0... is the Skip-AT sample s_k, s_2k, ..., s_N (padded with EOS).
    text = jnp.array([[11, 12, 13, 14, 15, EOS, 0, 0, 0], [11, 12, EOS, 0, 0, 0, 0, 0, 0]])
    want = {2: [[12, 14, EOS, 0, 0], [12, EOS, 0, 0, 0]], 3: [[13, EOS, 0], [EOS, 0, 0]]}[k]
    assert np.asarray(scorer.write_in(text)).tolist() == want


@pytest.mark.parametrize('h,c', [(2, 1)] + [pytest.param(h, c, marks=pytest.mark.slow)  # slow: CI time
                                   for h, c in ((1, 2), (2, 2), (4, 1))])
def test_exact_on_ibdecoder_family_views(corpus, h, c):
  method, params = random_model(corpus, vocab_size=9, **{'model.method': 'ibdecoder', 'ibdecoder.h': h,
                                                          'ibdecoder.c': c})
  check_exact(method.scorer(params), SOURCES, 9, blocks=(1, 2, 4))


# --- relaxed acceptance: a second, sequential implementation ------------------------------------
def reference_speculative(table: np.ndarray, draft: list[int], block: int, beta: int, tau: float, t_max: int):
  """SpecDec's loop for one sentence on the Markov chain (logits of output t = table[y_(t-2), y_(t-1)],
  BOS before the start), token by token: (output with EOS, passes). The draft stays in place."""
  out, passes = [], 0
  while not (EOS in out or len(out) >= t_max):
    passes += 1
    for j in range(block):
      older = out[-2] if len(out) >= 2 else BOS
      current = out[-1] if out else BOS
      logits = table[older, current].astype(np.float64)
      logp = logits - np.log(np.sum(np.exp(logits - logits.max()))) - logits.max()
      d = draft[len(out)] if len(out) < len(draft) else 0
      ok = np.sum(logp > logp[d]) < beta and logp[d] >= logp.max() - tau
      out.append(int(d) if ok else int(np.argmax(logp)))
      if not ok or EOS in out or len(out) >= t_max:
        break
  return out, passes


@pytest.mark.parametrize('beta,tau', [(1, 3.0), (2, 1.0), (3, 3.0), (5, 0.5)])
def test_relaxed_acceptance_matches_a_sequential_reference(beta, tau):
  vocab, t_max = 7, 10
  view = markov(vocab, seed=11, max_len=t_max)
  src = jnp.zeros((6, 3), jnp.int32)
  rng = np.random.default_rng(beta)
  drafts = rng.integers(3, vocab, (6, t_max + 4)).astype(np.int32)
  drafts[:, 0] = np.asarray(jax.jit(lambda s: greedy_decode(view, s))(src).tokens)[:, 0]
  for block in (1, 3, 4):
    got = jax.jit(lambda s, d: drafted_decode(view, s, d, block=block, beta=beta, tau=tau, update='draft'))(
        src, jnp.asarray(drafts))
    table = np.asarray(view.table)
    for r in range(6):
      want, passes = reference_speculative(table, drafts[r].tolist(), block, beta, tau, t_max)
      n = len(want)
      assert np.asarray(got.tokens)[r, :n].tolist() == want, (beta, tau, block, r)
      assert int(got.aux['iterations'][r]) == passes


def test_relaxed_with_beta_one_is_exact():
  view = markov(7, seed=5, max_len=10)
  src = jnp.zeros((4, 3), jnp.int32)
  drafts = jnp.asarray(np.random.default_rng(0).integers(3, 7, (4, 14)), jnp.int32)
  want = jax.jit(lambda s: greedy_decode(view, s))(src)
  for tau in (0.0, 2.0, 100.0):
    got = jax.jit(lambda s, d: drafted_decode(view, s, d, block=3, beta=1, tau=tau))(src, drafts)
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(want.tokens))


def test_relaxed_outputs_keep_accepted_tokens_within_beta():
  """With a large tau and beta = V every draft token is accepted: the output is the draft."""
  vocab = 7
  view = markov(vocab, seed=3, max_len=10)
  draft = np.array([[4, 5, 6, 3, EOS, 0, 0, 0, 0, 0]] * 2, np.int32)
  got = jax.jit(lambda s, d: drafted_decode(view, s, d, block=4, beta=vocab, tau=1e9))(
      jnp.zeros((2, 3), jnp.int32), jnp.asarray(draft))
  assert np.asarray(got.tokens)[0, :5].tolist() == [4, 5, 6, 3, EOS]
  assert np.asarray(got.aux['iterations']).tolist() == [2, 2]  # 4 + (EOS) with blocks of 4


# --- the registered decoder: another run drafts -----------------------------------------------------
def test_parse_drafter():
  assert parse_drafter('runs/dat') == ('runs/dat', '', {})
  assert parse_drafter('runs/dat:dag_lookahead') == ('runs/dat', 'dag_lookahead', {})
  assert parse_drafter('r:mask_predict:iterations=2:length_beam=3') == ('r', 'mask_predict',
                                                                         {'iterations': '2', 'length_beam': '3'})
  for bad in ('', ':greedy', 'r:', 'r:greedy:oops'):
    with pytest.raises(ConfigError, match='expected <workdir>'):
      parse_drafter(bad)

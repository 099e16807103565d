"""HRT: the chunk_samples contract, the curriculum, causality and relative positions, adopting an AT
run, the hrt decoder (C_d = 1 equals greedy AT, Skip-AT tokens kept, score = teacher-forced
rescoring) and overfitting to exact reproduction."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn

from nat_jax.core.masks import attention_mask
from nat_jax.data.tokenizer import Tokenizer
from nat_jax.decode import build_decoder
from nat_jax.decode.greedy import greedy_decode
from nat_jax.decode.mask_predict import NEVER_FILLED
from nat_jax.methods.autoregressive import AutoregressiveMethod
from nat_jax.methods.hrt import chunk_samples, skip_probability, skip_rows
from nat_jax.models.layers import relative_buckets
from tests.support import hrt_setup, tiny_config, tiny_pairs

BOS, EOS, MASK = Tokenizer.bos_id, Tokenizer.eos_id, Tokenizer.mask_id
SKIP_BOS = 99


def contract_samples(row: list[int], k: int, bos: int) -> dict[str, list[int]]:
  """docs/methods/hrt.md's `chunk_samples` written out for one row, 1-indexed as there."""
  t = len(row)
  u = math.ceil(t / k)
  n = sum(1 for x in row if x > 0)
  big_n = k * math.ceil(n / k)
  s = {i: (row[i - 1] if i <= n else EOS) for i in range(1, big_n + 1)}
  pad = lambda xs, w: xs + [0] * (w - len(xs))
  skip_targets = [s[j * k] for j in range(1, big_n // k + 1)]
  return {'skip_at_inputs': pad(([bos] + skip_targets[:-1]) if n else [], u),
          'skip_at_positions': [j * k for j in range(u)],
          'skip_at_targets': pad(skip_targets, u),
          'skip_cmlm_inputs': pad([s[i] if i % k == 0 else MASK for i in range(1, big_n + 1)], k * u),
          'skip_cmlm_targets': pad([0 if i % k == 0 else s[i] for i in range(1, big_n + 1)], k * u)}


def test_chunk_samples_paper_example():
  y1, y2, y3, y4 = 11, 12, 13, 14
  out = chunk_samples(jnp.array([[y1, y2, y3, y4, EOS, 0]]), 2, SKIP_BOS, EOS, MASK)
  assert out['skip_at_inputs'][0].tolist() == [SKIP_BOS, y2, y4]
  assert out['skip_at_positions'][0].tolist() == [0, 2, 4]
  assert out['skip_at_targets'][0].tolist() == [y2, y4, EOS]
  assert out['skip_cmlm_inputs'][0].tolist() == [MASK, y2, MASK, y4, MASK, EOS]
  assert out['skip_cmlm_targets'][0].tolist() == [y1, 0, y3, 0, EOS, 0]


def test_chunk_samples_royalflush_example():
  words = 'Der nächste große Arbeits streik trifft Oregon'.split()
  ids = {w: 20 + i for i, w in enumerate(words)}
  name = {v: k for k, v in ids.items()} | {EOS: 'EOS', 0: None, MASK: 'M'}
  out = chunk_samples(jnp.array([[ids[w] for w in words] + [EOS]]), 2, SKIP_BOS, EOS, MASK)
  assert [name[x] for x in out['skip_at_targets'][0].tolist()] == ['nächste', 'Arbeits', 'trifft', 'EOS']
  assert [name[x] for x in out['skip_cmlm_targets'][0].tolist() if x] == ['Der', 'große', 'streik', 'Oregon']


@pytest.mark.parametrize('k', [1, 2, 3, 4])
def test_chunk_samples_match_the_contract_on_padded_batches(k):
  rng = np.random.default_rng(k)
  for width in (1, 5, 7, 12):
    rows = []
    for n in [0, 1, width] + list(rng.integers(1, width + 1, 5)):
      row = list(rng.integers(5, 50, n - 1)) + [EOS] if n else []
      rows.append(row + [0] * (width - len(row)))
    out = {k_: np.asarray(v) for k_, v in chunk_samples(jnp.array(rows), k, SKIP_BOS, EOS, MASK).items()}
    for i, row in enumerate(rows):
      want = contract_samples(row, k, SKIP_BOS)
      live = sum(1 for x in row if x > 0)
      live = math.ceil(live / k)  # N / k: the Skip-AT entries that count
      for key, value in want.items():
        got = out[key][i].tolist()
        if key == 'skip_at_positions':
          got, value = got[:live], value[:live]
        assert got == value, (key, k, row)
  if k == 1:  # Skip-AT is AT and Skip-CMLM has no loss position
    assert not out['skip_cmlm_targets'].any()


def test_curriculum_share():
  for t, p in ((0, 0.0), (50, 0.5), (100, 1.0), (150, 1.0)):
    assert float(skip_probability(t, 100, 1.0)) == p
  assert float(skip_probability(50, 100, 2.0)) == 0.25
  targets = jnp.array([[5, EOS]] * 3 + [[0, 0]] + [[6, EOS]] * 4)  # 7 real rows, one padding row
  for p, want in ((0.0, 0), (0.5, 3), (1.0, 7), (0.3, 2)):
    rows = np.asarray(skip_rows(targets, p))
    real_rows = [0, 1, 2, 4, 5, 6, 7]
    assert rows.tolist() == [i in real_rows[:want] for i in range(8)]  # the first `want` real rows


def test_curriculum_in_the_loss(corpus):
  _, method, params = hrt_setup(corpus)
  batch = {'source': jnp.array([[7, 8, EOS]] * 8), 'target': jnp.array([[9, 10, 11, EOS]] * 8)}
  steps = method.curriculum[0]
  for step, want in ((0, 0), (steps // 2, 4), (steps, 8)):
    assert float(method.loss(params, batch, jax.random.PRNGKey(0), step=step)['skip_rows']) == want


def test_skip_at_is_causal(corpus):
  _, method, params = hrt_setup(corpus, k=3)
  src = jnp.array([[7, 8, 9, EOS]])
  tokens = jnp.array([[SKIP_BOS, 11, 12, 13, 14]])
  positions = jnp.arange(5)[None] * 3
  mask = attention_mask(jnp.arange(5)[None])
  logits = lambda tok: method.model.apply({'params': params}, src, tok, positions, mask)
  base = logits(tokens.at[0, 0].set(40))  # <B_k> is id = vocab size
  for i in range(4):
    changed = logits(tokens.at[0, 0].set(40).at[0, i + 1].set(30))
    np.testing.assert_allclose(changed[0, :i + 1], base[0, :i + 1], atol=1e-5)
    assert not np.allclose(changed[0, i + 1:], base[0, i + 1:])


def test_relative_buckets_stay_in_range():
  w = 16
  q = jnp.array([[0, 2, 4, 100, 300]])
  kv = jnp.array([[0, 2, 4, 6, 8, 200, 400]])
  buckets = np.asarray(relative_buckets(q, kv, w))
  assert buckets.min() >= 0 and buckets.max() <= 2 * w
  for i, qp in enumerate(q[0].tolist()):  # by cases: far left, far right, inside the window
    for j, kp in enumerate(kv[0].tolist()):
      want = 0 if kp < qp - w else 2 * w if kp > qp + w else w + (kp - qp)
      assert buckets[0, i, j] == want, (qp, kp)
  assert buckets[0, 0, 0] == w and buckets[0, 1, 3] == w + 4 and buckets[0, 3, 0] == 0


def at_twin(corpus, config, params):
  """The AT method with the same model sections, and the HRT params without <B_k>."""
  at = AutoregressiveMethod(config, vocab_size=40)
  at_params = jax.tree_util.tree_map(lambda x: x, params)
  del at_params['embed']['start_embeddings']
  return at, at_params


def test_adopting_an_at_run_keeps_its_function(corpus):
  config = tiny_config(corpus, **{'model.dropout': 0.0})  # an AT without relative keys
  at = AutoregressiveMethod(config, vocab_size=40)
  dummy = {'source': jnp.ones((1, 5), jnp.int32), 'target': jnp.ones((1, 5), jnp.int32)}
  at_params = nn.meta.unbox(at.init_params(jax.random.PRNGKey(1), dummy))
  _, method, fresh = hrt_setup(corpus)
  params = method.adopt_params(at_params, fresh)
  assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(fresh)
  np.testing.assert_array_equal(params['embed']['start_embeddings'][0], at_params['embed']['embedding'][BOS])
  src = jnp.array([[7, 8, 9, EOS, 0]])
  tgt = jnp.array([[11, 12, 13, EOS]])
  at_out = greedy_decode(at.scorer(at_params), src)
  hrt_out = build_decoder(method, 'hrt', {'chunk': '1'})[0](params, src)
  np.testing.assert_array_equal(at_out.tokens, hrt_out.tokens)
  at_scorer, hrt_scorer = at.scorer(at_params), method.view(params).skip_scorer(1)
  prefix = jnp.concatenate([jnp.array([[BOS]]), tgt[:, :-1]], axis=1)  # teacher-forced [1, 4]
  encoded = [s.encode(src) for s in (at_scorer, hrt_scorer)]
  logits = [s.step_logits(enc, s.init_cache(enc, 4), prefix, jnp.array(0))[0]
            for s, enc in zip((at_scorer, hrt_scorer), encoded)]
  np.testing.assert_allclose(logits[1], logits[0], rtol=1e-5, atol=1e-5)  # same function at step 0


def test_chunk_larger_than_max_target_length_is_a_config_error(corpus):
  with pytest.raises(ValueError, match='larger than the maximum target length'):
    hrt_setup(corpus, k=49)


@pytest.mark.parametrize('k', [1, 2])
def test_k1_decoding_equals_greedy_at(corpus, k):
  config, method, params = hrt_setup(corpus, k=k, seed=2)
  at, at_params = at_twin(corpus, config, params)
  src = jnp.array([[7, 8, 9, 10, EOS, 0], [12, EOS, 0, 0, 0, 0], [5, 6, 7, 8, 9, EOS]])
  want = greedy_decode(at.scorer(at_params), src)
  got = build_decoder(method, 'hrt', {'chunk': '1'} if k > 1 else {})[0](params, src)
  np.testing.assert_array_equal(got.tokens[:, :want.tokens.shape[1]], want.tokens)
  np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5)


def rescore(method, params, src, skips, k):
  """S by teacher forcing without any cache: the Skip-AT log-probabilities of z_1..z_m (through the first
  EOS) plus, at each [MASK] of the Skip-CMLM input, the best fillable token's log-probability."""
  m = len(skips)
  tokens = jnp.array([[method.skip_start] + skips[:-1]])
  positions = jnp.arange(m)[None] * k
  logp = jax.nn.log_softmax(method.model.apply({'params': params}, src, tokens, positions,
                                               attention_mask(jnp.arange(m)[None])))
  score = float(sum(logp[0, j, z] for j, z in enumerate(skips)))
  fill = [z if i % k == k - 1 else MASK for i, z in enumerate(np.repeat(skips, k))]
  fill_in = jnp.array([fill])
  fill_logp = np.array(jax.nn.log_softmax(method.model.apply(  # 0 (a random model's PAD) = no slot, as in the decoder
      {'params': params}, src, fill_in, jnp.arange(len(fill))[None],
      attention_mask(jnp.zeros_like(fill_in), fill_in > 0))))[0]
  fill_logp[:, list(NEVER_FILLED)] = -np.inf
  return score + sum(fill_logp[i].max() for i, x in enumerate(fill) if x == MASK)


@pytest.mark.parametrize('k', [pytest.param(2, marks=pytest.mark.slow), 3])  # slow: CI time
def test_hrt_keeps_skip_tokens_and_scores_like_teacher_forcing(corpus, k):
  _, method, params = hrt_setup(corpus, k=k, seed=5)
  src = jnp.array([[7, 8, 9, 10, EOS, 0], [12, 13, EOS, 0, 0, 0], [5, 6, 7, 8, 9, EOS]])
  skip_view = method.views()[next(p for p in method.views() if p.__name__ == 'LeftToRightScorer')](params)
  z = np.asarray(greedy_decode(skip_view, src).tokens)
  out = build_decoder(method, 'hrt', {})[0](params, src)
  tokens = np.asarray(out.tokens)
  for row in range(src.shape[0]):
    skips = z[row][:int(np.argmax(z[row] == EOS)) + 1] if (z[row] == EOS).any() else z[row]
    skips = [int(x) for x in skips]
    length = int(out.aux['length'][row])
    for j, token in enumerate(skips):  # every Skip-AT token before the cut is in place
      if (j + 1) * k <= length:
        assert tokens[row, (j + 1) * k - 1] == token
    assert int(out.aux['steps'][row]) == len(skips)
    np.testing.assert_allclose(float(out.scores[row]), rescore(method, params, src[row:row + 1], skips, k),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('k', [1, 2, 3])
def test_hrt_with_jacobi_skip_at_equals_greedy_skip_at(corpus, k):
  """jacobi_block = n: the Skip-AT phase by Jacobi (HGJ) gives greedy's tokens, so the whole hrt
  output and its score are the same, in no more decoder passes than greedy's steps."""
  _, method, params = hrt_setup(corpus, k=max(k, 2), seed=5)
  src = jnp.array([[7, 8, 9, 10, EOS, 0], [12, 13, EOS, 0, 0, 0], [5, 6, 7, 8, 9, EOS]])
  chunk = {'chunk': '1'} if k == 1 else {}
  want = build_decoder(method, 'hrt', chunk)[0](params, src)
  for block in ('1', '3', '50'):
    got = build_decoder(method, 'hrt', {**chunk, 'jacobi_block': block})[0](params, src)
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(want.tokens), err_msg=block)
    np.testing.assert_allclose(np.asarray(got.scores), np.asarray(want.scores), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(got.aux['steps']), np.asarray(want.aux['steps']))
    assert (np.asarray(got.aux['iterations']) <= np.asarray(want.aux['iterations'])).all()
  np.testing.assert_array_equal(np.asarray(want.aux['iterations']), np.asarray(want.aux['steps']))
  with pytest.raises(ValueError, match='b_at = 1'):
    build_decoder(method, 'hrt', {'b_at': '2', 'jacobi_block': '3'})[0](params, src)


def test_hrt_beam_and_bound_give_one_output_each(corpus):
  _, method, params = hrt_setup(corpus, k=2, seed=5)
  src = jnp.array([[7, 8, 9, 10, EOS, 0], [12, 13, EOS, 0, 0, 0]])
  out = build_decoder(method, 'hrt', {'b_at': '4', 'b_nat': '2'})[0](params, src)
  assert out.tokens.shape[0] == 2 and np.isfinite(np.asarray(out.scores)).all()
  short = build_decoder(method, 'hrt', {'max_len': '4'})[0](params, src)  # bound hit without EOS: still an output
  assert short.tokens.shape == (2, 4) and (np.asarray(short.aux['length']) <= 4).all()
  with pytest.raises(ValueError, match='b_nat'):
    build_decoder(method, 'hrt', {'b_at': '1', 'b_nat': '2'})[0](params, src)
  with pytest.raises(ValueError, match='trained with chunk k=2'):
    build_decoder(method, 'hrt', {'chunk': '3'})[0](params, src)


def test_tiny_hrt_overfits_to_exact_reproduction(corpus):
  # 900 updates, p_k ends at 0.6 (both modes trained). At 600 the last token of one pair was still at
  # the margin: summing the same gradients in another order (the start-token lookup, 2026-11-26) flipped it.
  _, method, params = hrt_setup(corpus, k=2, vocab=24, scale=1.0, label_smoothing=0.0, total_steps=900,
                                **{'hrt.curriculum_steps': 1500})
  batch = tiny_pairs([(3, 4), (5, 3), (4, 6), (6, 7)], 24, 8)
  tx = optax.adam(3e-3)

  @jax.jit
  def step(params, opt, rng, t):  # rows shuffled: the curriculum gives the first rows of a batch the Skip samples
    order = jax.random.permutation(rng, 4)
    shuffled = {key: value[order] for key, value in batch.items()}
    grads = jax.grad(lambda p: method.loss(p, shuffled, rng, step=t)['loss'] / 20)(params)
    updates, opt = tx.update(grads, opt, params)
    return optax.apply_updates(params, updates), opt

  opt = tx.init(params)
  for i in range(900):
    params, opt = step(params, opt, jax.random.PRNGKey(i), jnp.int32(i))
  for options in ({}, {'chunk': '1'}):
    out = build_decoder(method, 'hrt', options)[0](params, batch['source'])
    np.testing.assert_array_equal(np.asarray(out.tokens)[:, :8], batch['target'], err_msg=str(options))

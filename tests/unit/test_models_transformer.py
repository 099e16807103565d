"""Model properties: KV-cache decoding equals full recomputation, positions, masking."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax.core.masks import attention_mask
from nat_jax.methods.autoregressive import AutoregressiveMethod, shift_right
from nat_jax.models import sinusoidal_positions
from nat_jax.models.layers import Attention
from tests.support import tiny_config


def make_method(corpus, **overrides):
  cfg = tiny_config(corpus, **overrides)
  return AutoregressiveMethod(cfg, vocab_size=37)


@pytest.mark.parametrize('pre_norm,relative_window,block', [(True, 0, 1), (False, 0, 1), (True, 3, 1), (True, 3, 3)])
def test_cached_decoding_equals_full_recomputation(corpus, pre_norm, relative_window, block):
  method = make_method(corpus, **{'model.pre_norm': pre_norm, 'model.relative_window': relative_window,
                                  'model.dec_layers': 2})
  rng = np.random.default_rng(0)
  src = jnp.asarray(rng.integers(5, 37, (3, 7)), jnp.int32).at[1, 4:].set(0)  # row 1 padded
  tgt = jnp.asarray(rng.integers(5, 37, (3, 9)), jnp.int32)
  params = method.init_params(jax.random.PRNGKey(1), {'source': src, 'target': tgt})
  params = jax.tree_util.tree_map(lambda x: x.unbox() if hasattr(x, 'unbox') else x, params,
                                  is_leaf=lambda x: hasattr(x, 'unbox'))
  tokens = shift_right(tgt, 2)
  positions = jnp.broadcast_to(jnp.arange(9), tgt.shape)
  full = method.model.apply({'params': params}, src, tokens, positions, attention_mask(positions))

  scorer = method.scorer(params)
  enc = scorer.encode(src)
  cache = scorer.init_cache(enc, 12)
  pieces = []
  for start in range(0, 9, block):
    logits, cache = scorer.step_logits(enc, cache, tokens[:, start:start + block], start)
    pieces.append(logits)
  np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize('tq,start', [(1, 0), (1, 5), (3, 2), (3, 5)])  # (3, 5): past C - Tq, moved back to 3
def test_cached_attention_is_attention_over_the_cache_it_writes(tq, start):
  """A step reads the cache as it was and its own keys apart (Attention.__call__): it must equal plain attention
  over the cache with the new keys/values written where dynamic_update_slice puts them, and return that cache."""
  attn = Attention(num_heads=2, d_model=8)
  rng = np.random.default_rng(3)
  x = jnp.asarray(rng.normal(size=(2, tq, 8)), jnp.float32)
  slots = 6
  mask = jnp.asarray(rng.random((2, tq, slots)) < 0.7).at[:, :, 0].set(True)  # [B, Tq, C]
  params = attn.init(jax.random.PRNGKey(0), x, x, mask[:, :, :tq], deterministic=True)
  cache = {'k': jnp.asarray(rng.normal(size=(2, 2, 4, slots)), jnp.float32),  # [B, H, Dh, C]
           'v': jnp.asarray(rng.normal(size=(2, 2, slots, 4)), jnp.float32)}  # [B, H, C, Dh]
  out, written = attn.apply(params, x, x, mask, deterministic=True, cache=cache, cache_start=jnp.int32(start))

  new = attn.apply(params, x, method=Attention.project_kv)
  at = min(start, slots - tq)
  expected = {'k': np.asarray(cache['k']).copy(), 'v': np.asarray(cache['v']).copy()}
  expected['k'][..., at:at + tq] = new['k']
  expected['v'][:, :, at:at + tq] = new['v']
  reference, _ = attn.apply(params, x, None, mask, deterministic=True,
                            precomputed_kv={name: jnp.asarray(kv) for name, kv in expected.items()})
  for name in ('k', 'v'):
    np.testing.assert_array_equal(written[name], expected[name])
  np.testing.assert_allclose(out, reference, atol=1e-5, rtol=1e-5)


def test_sinusoidal_positions_formula_and_negative_positions():
  pos = jnp.array([-3, -1, 0, 1, 3])
  emb = np.asarray(sinusoidal_positions(pos, 8, 'tensor2tensor'))
  freqs = np.exp(-np.log(10000.0) * np.arange(4) / 3)
  expected = np.concatenate([np.sin(np.outer([-3, -1, 0, 1, 3], freqs)), np.cos(np.outer([-3, -1, 0, 1, 3], freqs))], 1)
  np.testing.assert_allclose(emb, expected, atol=1e-6)
  assert not np.allclose(emb[1], emb[3])  # -1 and +1 are distinguishable
  np.testing.assert_allclose(emb[1, :4], -emb[3, :4], atol=1e-6)  # sin odd
  np.testing.assert_allclose(emb[1, 4:], emb[3, 4:], atol=1e-6)  # cos even


def test_fully_masked_attention_row_is_finite():
  attn = Attention(num_heads=2, d_model=8)
  x = jnp.ones((1, 3, 8))
  mask = jnp.zeros((1, 3, 3), bool)
  params = attn.init(jax.random.PRNGKey(0), x, x, mask, deterministic=True)
  out, _ = attn.apply(params, x, x, mask, deterministic=True)
  assert np.isfinite(np.asarray(out)).all()


def test_shift_right():
  tgt = jnp.array([[5, 0, 6, 1, 0]])
  np.testing.assert_array_equal(shift_right(tgt, 2), [[2, 5, 0, 6, 1]])


def test_embedding_with_start_tokens_equals_the_concatenated_table():
  """Embed looks start tokens (ids V .. V + n - 1, HRT's <B_k>) up in their own table: values and
  gradients equal a lookup in the two tables concatenated, without copying the vocabulary."""
  from nat_jax.models.layers import Embed
  vocab, d, n = 11, 6, 2
  embed = Embed(vocab, d, start_tokens=n)
  tokens = jnp.array([[0, 3, 10, 11, 12, 5]], jnp.int32)
  params = embed.init(jax.random.PRNGKey(0), tokens)['params']
  params = jax.tree_util.tree_map(lambda x: getattr(x, 'value', x), params, is_leaf=lambda x: hasattr(x, 'value'))

  def reference(p):
    table = jnp.concatenate([p['embedding'], p['start_embeddings']], axis=0)
    return jnp.take(table, tokens, axis=0) * np.sqrt(d)
  np.testing.assert_array_equal(embed.apply({'params': params}, tokens), reference(params))
  weights = jax.random.normal(jax.random.PRNGKey(1), (1, 6, d))
  loss = lambda f: jax.grad(lambda p: jnp.sum(f(p) * weights))(params)
  got, want = loss(lambda p: embed.apply({'params': p}, tokens)), loss(reference)
  for key in ('embedding', 'start_embeddings'):
    np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=1e-6)

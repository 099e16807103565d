"""Model properties: KV-cache decoding equals full recomputation, positions, masking."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nat_jax.methods.autoregressive import AutoregressiveMethod, shift_right
from nat_jax.models import sinusoidal_positions
from nat_jax.core.masks import attention_mask
from nat_jax.models.layers import Attention
from tests.conftest import tiny_config


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


def test_sinusoidal_positions_formula_and_negative_positions():
  pos = jnp.array([-3, -1, 0, 1, 3])
  emb = np.asarray(sinusoidal_positions(pos, 8))
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

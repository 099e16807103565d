"""A small non-causal draft head on a frozen autoregressive Transformer (self-drafting, nat_jax.methods.selfdraft).

From the verifier's final decoder states of the final prefix and the last final token, the head
writes drafts of the next W tokens at once. Each of its W slots starts from the verifier's state
at the last final token (plus a learned projection of it), the embedding of that token at the
slot's own position and a learned offset embedding; then `layers` decoder layers attend every slot
of the window (no causal mask), the verifier's states of the final prefix (the head's memory:
keys and values of each state, computed once per state) and the source through the verifier's
encoder output. The token embedding and the output projection are the verifier's (tied, frozen);
the head owns only what is listed here.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from nat_jax.models.layers import CACHE_SLOT_AXIS, FeedForward, default_init, layer_norm, slot_count
from nat_jax.models.transformer import DecoderLayer, TransformerConfig, residual


class DraftHead(nn.Module):
  cfg: TransformerConfig  # the verifier's sizes; dec_layers = the head's layers (0: one feed-forward block)
  window: int             # W, tokens drafted per call

  def setup(self):
    c = self.cfg
    self.boundary = nn.Dense(c.d_model, dtype=c.dtype, name='boundary',
                             kernel_init=nn.with_logical_partitioning(default_init, ('embed', 'mlp')),
                             bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ('mlp',)))
    self.offset_embed = self.param('offset_embed', nn.with_logical_partitioning(nn.initializers.normal(0.02),
                                                                                (None, 'embed')),
                                   (self.window, c.d_model), jnp.float32)
    self.layers = [DecoderLayer(c, name=f'layer_{i}') for i in range(c.dec_layers)]
    if not c.dec_layers:
      self.ffn = FeedForward(c.d_model, c.d_ff, c.dropout, dtype=c.dtype, weights=c.weights)
      self.norm_ffn = layer_norm('norm_ffn', c.dtype, c.layer_norm_epsilon)
    self.norm = layer_norm('norm', c.dtype, c.layer_norm_epsilon)
    self.dropout = nn.Dropout(c.dropout)

  def adapt(self, states):
    """The verifier's final states [..., D] -> the head's input space: state + a learned projection."""
    return states + self.boundary(states)

  def cross_kv(self, encoded):
    """Per head layer, the keys/values of the encoder output [N, S, D]: computed once per sentence."""
    return [layer.cross_kv(encoded) for layer in self.layers]

  def memory_kv(self, states):
    """Per head layer, the self-attention keys/values of verifier states [N, P, D] (Attention.project_kv's
    layout: {'k': [N, H, Dh, P], 'v': [N, H, P, Dh]})."""
    x = self.adapt(states)
    return [layer.self_attention.project_kv(layer.norm_self(x)) for layer in self.layers]

  def __call__(self, state, token_embeddings, encoded, src_valid, *, memory=None, memory_visible=None,
               cross_kv=None, deterministic: bool = True):
    """state [N, D] (the verifier's final hidden state at the last final token, zeros before the
    first), token_embeddings [N, W, D] (that token embedded at positions fixed .. fixed + W - 1),
    encoded [N, S, D], src_valid bool[N, S]; memory: `memory_kv` of the verifier's states of P slots
    and memory_visible bool[N, P] the final ones (or neither) -> hidden [N, W, D] of the W drafted tokens."""
    c = self.cfg
    n, w = token_embeddings.shape[:2]
    x = token_embeddings + self.adapt(state)[:, None] + self.offset_embed[None, :w].astype(c.dtype)  # [N, W, D]
    x = self.dropout(x, deterministic=deterministic)
    window_mask = jnp.ones((n, w, w), bool)  # every drafted slot sees the whole window
    cross_mask = jnp.broadcast_to(src_valid[:, None, :], (n, w, src_valid.shape[1]))
    positions = jnp.zeros((n, w), jnp.int32)  # unused: the head has no relative keys
    for i, layer in enumerate(self.layers):
      cache, start, mask = None, None, window_mask
      if memory is not None:  # the window's keys go after the P memory slots
        size = slot_count(memory[i])
        cache = {name: jnp.pad(kv, [(0, w if axis == CACHE_SLOT_AXIS[name] else 0) for axis in range(kv.ndim)])
                 for name, kv in memory[i].items()}
        start = size
        mask = jnp.concatenate([jnp.broadcast_to(memory_visible[:, None, :], (n, w, size)), window_mask], axis=2)
      x, _ = layer(x, mask, encoded, cross_mask, deterministic=deterministic, positions=positions,
                   kv_positions=jnp.zeros(mask.shape[::2], jnp.int32),
                   cross_kv=None if cross_kv is None else cross_kv[i], cache=cache, cache_start=start)
    if not c.dec_layers:
      x, _ = residual(lambda h: (self.ffn(h, deterministic=deterministic), None), x, self.norm_ffn, self.dropout,
                      c.pre_norm, deterministic)
    return self.norm(x)


def boundary_states(hidden: jax.Array, index: jax.Array) -> jax.Array:
  """hidden [B, T, D], index i32[B] (-1: before the first token) -> [B, D]: hidden[b, index[b]], zeros at -1."""
  picked = jnp.take_along_axis(hidden, jnp.maximum(index, 0)[:, None, None], axis=1)[:, 0]  # [B, D]
  return jnp.where((index >= 0)[:, None], picked, jnp.zeros_like(picked))

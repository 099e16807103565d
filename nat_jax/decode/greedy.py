"""Greedy left-to-right decoding: one jitted lax.while_loop over a fixed-size KV cache."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from nat_jax.data.tokenizer import Tokenizer
from nat_jax.decode import DecodeOutput, register_decoder


def resolve_max_len(method, src, max_len: int) -> int:
  return max_len if max_len > 0 else method.max_decode_len(src.shape[1])


def through_first_eos(tokens):
  """tokens i32[B, T] -> (valid bool[B, T]: positions up to and including the first EOS,
  lengths i32[B]: their count, T where a row has no EOS)."""
  is_eos = tokens == Tokenizer.eos_id
  valid = (jnp.cumsum(is_eos, axis=1) - is_eos) == 0
  return valid, jnp.sum(valid, axis=1).astype(jnp.int32)


@register_decoder('greedy', max_len=0)
def greedy_decode(method, params, src, max_len: int = 0) -> DecodeOutput:
  """Argmax token per step until every row emitted EOS or `max_len` tokens (0: method's bound).

  Returns tokens i32[B, T] (0 after EOS), the sum of log-probabilities, and aux['steps'] i32[B],
  the number of decoder steps (= tokens incl. EOS) each sentence needed.
  """
  t_max = resolve_max_len(method, src, max_len)
  b = src.shape[0]
  enc = method.encode(params, src)
  cache = method.init_cache(params, enc, t_max)
  tokens = jnp.zeros((b, t_max + 1), jnp.int32).at[:, 0].set(Tokenizer.bos_id)  # [B, T+1], BOS first

  def cond(state):
    step, _, done, _, _, _ = state
    return (step < t_max) & ~jnp.all(done)

  def body(state):
    step, tokens, done, logp_sum, lengths, cache = state
    prev = jax.lax.dynamic_slice_in_dim(tokens, step, 1, axis=1)  # [B, 1]
    logits, cache = method.step_logits(params, enc, cache, prev, step)
    logp = jax.nn.log_softmax(logits[:, 0].astype(jnp.float32))  # [B, V]
    nxt = jnp.argmax(logp, axis=-1).astype(jnp.int32)  # [B]
    logp_sum = logp_sum + jnp.where(done, 0.0, jnp.max(logp, axis=-1))
    lengths = lengths + (~done).astype(jnp.int32)
    nxt = jnp.where(done, 0, nxt)
    tokens = jax.lax.dynamic_update_slice_in_dim(tokens, nxt[:, None], step + 1, axis=1)
    return step + 1, tokens, done | (nxt == Tokenizer.eos_id), logp_sum, lengths, cache

  zeros = jnp.zeros((b,), jnp.int32)
  init = (jnp.int32(0), tokens, jnp.zeros((b,), bool), jnp.zeros((b,), jnp.float32), zeros, cache)
  _, tokens, _, logp_sum, lengths, _ = jax.lax.while_loop(cond, body, init)
  return DecodeOutput(tokens[:, 1:], logp_sum, {'steps': lengths})

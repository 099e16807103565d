"""Greedy left-to-right decoding: fixed-shape lax.while_loops (nat_jax.decode.loop).

Runs on any LeftToRightScorer; a step feeds the scorer's z = tokens_per_step slots and takes the
argmax of each (AT: one token per step; SA / IBDecoder: z tokens per step). A row ends at its
first EOS; tokens a step predicts after it are dropped. The output is the scorer's `read_out` of
the slot-order tokens (IBDecoder: de-interleaved).
"""
from __future__ import annotations

from typing import Any

import flax
import jax
import jax.numpy as jnp

from nat_jax.core.reduce import scored_argmax
from nat_jax.core.tokens import BOS_ID, EOS_ID, ceil_div, through_first_eos
from nat_jax.decode.lengths import decode_steps
from nat_jax.decode.loop import decode_loop
from nat_jax.decode.options import Bounded
from nat_jax.decode.registry import register_decoder
from nat_jax.views import DecodeOutput, LeftToRightScorer


@flax.struct.dataclass
class GreedyState:
  step: jax.Array     # i32[]: decoding steps taken
  tokens: jax.Array   # i32[B, z + P]: z start slots (BOS), then the output tokens (0 after EOS)
  done: jax.Array     # bool[B]: the row emitted EOS
  logp: jax.Array     # f32[B]: summed log-probabilities of the emitted tokens
  lengths: jax.Array  # i32[B]: emitted tokens incl. EOS
  cache: Any


def greedy_step(scorer: LeftToRightScorer, enc, state: GreedyState) -> GreedyState:
  """One decoding step: feed the step's z slots, append the argmax of each prediction."""
  z = scorer.tokens_per_step
  start = state.step * z
  inputs = jax.lax.dynamic_slice_in_dim(state.tokens, start, z, axis=1)  # [B, z]
  logits, cache = scorer.step_logits(enc, state.cache, inputs, start)
  nxt, best, _ = scored_argmax(logits.astype(jnp.float32))  # [B, z]: the argmax and its log-probability
  live = ~state.done[:, None] & through_first_eos(nxt)[0]  # [B, z]: tokens the row keeps
  nxt = jnp.where(live, nxt, 0)
  tokens = jax.lax.dynamic_update_slice_in_dim(state.tokens, nxt, start + z, axis=1)
  return GreedyState(
      step=state.step + 1, tokens=tokens, done=state.done | jnp.any(nxt == EOS_ID, axis=1),
      logp=state.logp + jnp.sum(jnp.where(live, best, 0.0), axis=1),
      lengths=state.lengths + jnp.sum(live, axis=1).astype(jnp.int32), cache=cache)


def greedy_search(scorer: LeftToRightScorer, enc, batch: int, num_steps: int) -> GreedyState:
  """At most `num_steps` steps of argmax decoding from an encoder state (`scorer.encode`'s)."""
  z = scorer.tokens_per_step
  width = num_steps * z
  init = GreedyState(step=jnp.int32(0),
                     tokens=jnp.zeros((batch, z + width), jnp.int32).at[:, :z].set(BOS_ID),
                     done=jnp.zeros((batch,), bool), logp=jnp.zeros((batch,), jnp.float32),
                     lengths=jnp.zeros((batch,), jnp.int32), cache=scorer.init_cache(enc, width))
  return decode_loop(scorer, lambda s: (s.step < num_steps) & ~jnp.all(s.done),
                     lambda e, s: greedy_step(scorer, e, s), enc, init, width, z, lambda s: (s.step + 1) * z,
                     batch, live=lambda s: ~s.done)


@register_decoder('greedy', LeftToRightScorer, Bounded, row_bounds=True,
                  about='The most probable token at every step until EOS. On the IBDecoder family each step writes '
                        'z = h x c tokens (the argmax of each slot), then the output is de-interleaved; on an HRT run '
                        "it decodes the Skip-AT view alone (every k-th token: use `hrt` for translations).")
def greedy_decode(scorer: LeftToRightScorer, src: jax.Array, max_len: int = 0) -> DecodeOutput:
  """Argmax tokens until every row emitted EOS or `max_len` tokens (0: the scorer's bound; with
  z tokens per step, rounded up to a multiple of z).

  Returns tokens i32[B, P] (0 after EOS), the sum of log-probabilities, and aux['steps'] i32[B],
  the tokens (incl. EOS) each sentence needed, and aux['iterations'] i32[B], its decoder passes
  (steps / z rounded up; what Jacobi decoding's iterations compare with).
  """
  z = scorer.tokens_per_step
  num_steps = decode_steps(scorer, src, max_len)
  final = greedy_search(scorer, scorer.encode(src), src.shape[0], num_steps)
  return DecodeOutput(scorer.read_out(final.tokens[:, z:]), final.logp,
                      {'steps': final.lengths, 'iterations': ceil_div(final.lengths, z)})

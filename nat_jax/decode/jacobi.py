"""Jacobi parallel decoding (PJ, PGJ, HGJ): greedy's output from parallel fixed-point iterations.

Greedy decoding solves the triangular system y_t = argmax p(. | y_<t, x), t = 1..T, by substitution.
Jacobi iteration solves every equation of a block at once from a draft, feeding the block's draft
tokens to the scorer's `step_logits` in one call, and repeats. Written only against the
LeftToRightScorer Protocol (nat_jax.views), so it runs on every left-to-right method
unchanged: AT (one token per step), HRT's Skip-AT view, and the IBDecoder family (z = h * c slots
per step); the output goes through the scorer's `read_out` as greedy's does.

Finality. Slots 0 .. z-1 hold the start token and slot z + o the draft of output token o; slot i
predicts output token i, seeing every slot of its own step (i // z) and of earlier steps. An
iteration feeds the draft inputs of slots [s, s + W) (s and W multiples of z) and predicts output
tokens s .. s+W-1. The first step group of them (tokens s .. s+z-1) reads only final inputs
(s never passes a row's final prefix), so it is final; group g is final when group g - 1 was,
and its prediction equals the draft it replaced. So each iteration extends a row's final prefix
by z x (1 + the leading run of unchanged step groups): at least one step per iteration, hence
at most greedy's number of steps, and no extra "nothing changed" confirmation pass is needed.
Final tokens are never overwritten. With z = 1 a group is one token.

Blocks and the batch. PGJ cuts the target into consecutive blocks of `block_size` decoding steps
(block_size x z tokens);
Jacobi runs inside the current block until it is final, then moves on. PJ is the same with one
block spanning the maximum length. The block start is common to the batch (blocks sit at fixed
multiples of b for every row anyway): the batch moves to the next block when every unfinished
row has finalised the current one, and a row that is ahead waits. Its waiting passes are not
counted: aux['iterations'] is each row's own number of iterations (what it needs at batch 1);
aux['passes'] is the number of decoder passes the batch ran. The common start keeps
`step_logits` scalar-start, so the cache of the final prefix is reused as-is: slots < s are
final, slots of the block are rewritten by every call before anything reads them. (PJ's one block
starts at slot 0, so with fixed shapes it re-scores the whole draft every iteration.)

Output: greedy's format (tokens 0 after the first EOS, summed log-probabilities) with aux
'iterations', 'passes' and 'steps' (tokens incl. EOS = greedy's steps). The first draft comes
from `init_draft(batch, length) -> i32[B, length]` (default all [PAD]); `jacobi_decode` takes
any such function.

PGJ vs HGJ. The paper's PGJ knows the target length beforehand (an oracle) and HGJ, its practical
variant, needs none: it keeps decoding blocks until a converged block holds an EOS (bounded by the
maximum length). Here a block counts as converged once every position up to its first EOS is
final (positions past an EOS are not part of any output, and docs/methods/jacobi.md bounds every
algorithm by greedy length + 1 iterations), so HGJ stops exactly where the oracle length would have stopped
PGJ: with a per-row EOS check the two coincide, and `jacobi_pgj` / `jacobi_hgj` share one stop
rule. Both names are kept for parity with the paper's tables; PJ is one block over the maximum length.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp

from nat_jax.core.reduce import scored_argmax
from nat_jax.core.tokens import BOS_ID, EOS_ID, ceil_div, through_first_eos
from nat_jax.decode.lengths import decode_steps
from nat_jax.decode.loop import decode_loop
from nat_jax.decode.options import Bounded, steps
from nat_jax.decode.registry import register_decoder
from nat_jax.views import DecodeOutput, LeftToRightScorer


def pad_draft(batch: int, length: int) -> jax.Array:
  """Default initialisation: an all-[PAD] draft i32[B, length]."""
  return jnp.zeros((batch, length), jnp.int32)


@flax.struct.dataclass
class JacobiState:
  tokens: jax.Array      # i32[B, z+P]: start slots, then draft/final output tokens 0..P-1
  logp: jax.Array        # f32[B, z+P]: log-probability of each draft token when it was predicted
  fixed: jax.Array       # i32[B]: output tokens 0..fixed-1 are final
  done: jax.Array        # bool[B]
  iterations: jax.Array  # i32[B]: iterations the row itself needed
  start: jax.Array       # i32[]: first input slot of the current block (common to the batch)
  passes: jax.Array      # i32[]: decoder passes run
  cache: Any
  z: int = flax.struct.field(pytree_node=False, default=1)  # slots per decoding step

  def drafts(self) -> tuple[jax.Array, jax.Array]:
    """(tokens i32[B, P], log-probabilities f32[B, P]) of output tokens 0..P-1."""
    return self.tokens[:, self.z:], self.logp[:, self.z:]


def final_eos(outputs, fixed, t_max):
  """Stop rule of every algorithm: an EOS is final (its block converged up to it), or the maximum length is. bool[B]."""
  return has_eos(outputs, fixed) | (fixed >= t_max)


def has_eos(outputs, upto):
  """outputs i32[B, P], upto i32[B] -> bool[B]: EOS among output tokens 0..upto-1."""
  index = jnp.arange(outputs.shape[1])  # [P]
  return jnp.any((outputs == EOS_ID) & (index < upto[:, None]), axis=1)


def init_state(scorer: LeftToRightScorer, enc, batch: int, width: int, t_max: int,
               init_draft: Callable) -> JacobiState:
  """Draft of P = ceil(t_max / width) * width output tokens after z start slots, nothing final, block 0."""
  z = scorer.tokens_per_step
  padded = ceil_div(t_max, width) * width
  starts = jnp.full((batch, z), BOS_ID, jnp.int32)
  tokens = jnp.concatenate([starts, init_draft(batch, padded).astype(jnp.int32)], axis=1)  # [B, z+P]
  zeros = jnp.zeros((batch,), jnp.int32)
  return JacobiState(tokens, jnp.zeros(tokens.shape, jnp.float32), zeros, jnp.zeros((batch,), bool), zeros,
                     jnp.int32(0), jnp.int32(0), scorer.init_cache(enc, padded), z)


def leading_run(same):
  """bool[B, W] -> i32[B]: how many leading entries are True."""
  return jnp.sum(jnp.cumprod(same.astype(jnp.int32), axis=1), axis=1)


def jacobi_iteration(scorer: LeftToRightScorer, enc, state: JacobiState, width: int, t_max: int) -> JacobiState:
  """One decoder pass over the current block of every row; the single implementation of an iteration."""
  z, s, block_end = state.z, state.start, state.start + width
  batch = state.tokens.shape[0]
  inputs = jax.lax.dynamic_slice_in_dim(state.tokens, s, width, axis=1)  # [B, W]: slots s..s+W-1
  logits, cache = scorer.step_logits(enc, state.cache, inputs, s)
  new, new_logp, _ = scored_argmax(logits.astype(jnp.float32))  # [B, W]: output tokens s..s+W-1 (slots s+z..)
  old = jax.lax.dynamic_slice_in_dim(state.tokens, s + z, width, axis=1)  # [B, W]
  old_logp = jax.lax.dynamic_slice_in_dim(state.logp, s + z, width, axis=1)  # [B, W]
  keep = (s + jnp.arange(width) < state.fixed[:, None]) | state.done[:, None]  # [B, W]
  new, new_logp = jnp.where(keep, old, new), jnp.where(keep, old_logp, new_logp)
  same_group = jnp.all((new == old).reshape(batch, width // z, z), axis=2)  # [B, W/z]
  grown = jnp.minimum(s + z * (1 + leading_run(same_group)), block_end)  # [B]
  fixed = jnp.where(state.done, state.fixed, jnp.maximum(state.fixed, grown))
  tokens = jax.lax.dynamic_update_slice_in_dim(state.tokens, new, s + z, axis=1)
  all_logp = jax.lax.dynamic_update_slice_in_dim(state.logp, new_logp, s + z, axis=1)
  working = ~state.done & (state.fixed < block_end)  # [B]: rows not waiting for the rest of the batch
  done = state.done | final_eos(tokens[:, z:], fixed, t_max)
  advance = jnp.all(done | (fixed >= block_end))
  return state.replace(tokens=tokens, logp=all_logp, fixed=fixed, done=done,
                       iterations=state.iterations + working.astype(jnp.int32),
                       start=jnp.where(advance, block_end, s), passes=state.passes + 1, cache=cache)


def running(state: JacobiState) -> jax.Array:
  return ~jnp.all(state.done) & (state.start < state.tokens.shape[1] - state.z)


def finish(scorer: LeftToRightScorer, state: JacobiState, t_max: int) -> DecodeOutput:
  """Greedy's output format: tokens i32[B, t_max] 0 after the first EOS (read out by the scorer),
  summed log-probs, aux."""
  drafts, drafts_logp = state.drafts()
  tokens, logp = drafts[:, :t_max], drafts_logp[:, :t_max]  # [B, T]
  valid, steps = through_first_eos(tokens)  # [B, T], [B]
  aux = {'iterations': state.iterations, 'steps': steps,
         'passes': jnp.full_like(steps, state.passes)}
  return DecodeOutput(scorer.read_out(jnp.where(valid, tokens, 0)), jnp.sum(jnp.where(valid, logp, 0.0), axis=1), aux)


def block_width(z: int, t_max: int, block_size: int) -> int:
  """Static block width in slots: blocks of `block_size` steps of z tokens (<= 0: one block, PJ)."""
  return t_max if block_size <= 0 else min(block_size * z, t_max)


def jacobi_search(scorer: LeftToRightScorer, enc, batch: int, num_steps: int, block_size: int,
                  init_draft: Callable = pad_draft) -> JacobiState:
  """Jacobi decoding of at most `num_steps` steps of z tokens from an encoder state (`scorer.encode`'s,
  batch `batch`) in blocks of `block_size` steps (<= 0: one block, PJ), in the shared loop
  (nat_jax.decode.loop); the counterpart of greedy_search (HRT's Skip-AT phase runs either)."""
  t_max = num_steps * scorer.tokens_per_step
  width = block_width(scorer.tokens_per_step, t_max, block_size)
  state = init_state(scorer, enc, batch, width, t_max, init_draft)
  body = functools.partial(jacobi_iteration, scorer, width=width, t_max=t_max)
  return decode_loop(scorer, running, body, enc, state, state.tokens.shape[1] - state.z, width,
                     lambda s: s.start + width, batch, live=lambda s: ~s.done)


def jacobi_decode(scorer: LeftToRightScorer, src, *, block_size: int, max_len: int,
                  init_draft: Callable = pad_draft) -> DecodeOutput:
  """Jacobi decoding of src i32[B, S] in blocks of `block_size` steps (<= 0: one block, PJ)."""
  num_steps = decode_steps(scorer, src, max_len)
  final = jacobi_search(scorer, scorer.encode(src), src.shape[0], num_steps, block_size, init_draft)
  return finish(scorer, final, num_steps * scorer.tokens_per_step)


def jacobi_start(scorer: LeftToRightScorer, src, width: int, t_max: int, init_draft: Callable):
  """(encoder output, initial state) for src i32[B, S]."""
  enc = scorer.encode(src)
  return enc, init_state(scorer, enc, src.shape[0], width, t_max, init_draft)


def trace_jacobi(build: Callable[[Any], LeftToRightScorer], params, src, *, block_size: int, max_len: int,
                 init_draft: Callable = pad_draft) -> tuple[list[JacobiState], DecodeOutput]:
  """The same iteration stepped from Python, for inspection (DDGviz): (state after each iteration, output).

  build(params) -> the scorer (a method's LeftToRightScorer view), so params stay jit arguments.
  """
  scorer = build(params)
  t_max = decode_steps(scorer, src, max_len) * scorer.tokens_per_step
  width = block_width(scorer.tokens_per_step, t_max, block_size)
  enc, state = jax.jit(lambda p, x: jacobi_start(build(p), x, width, t_max, init_draft))(params, src)
  step = jax.jit(lambda p, e, st: jacobi_iteration(build(p), e, st, width, t_max))
  states = []
  while bool(running(state)):
    state = step(params, enc, state)
    states.append(jax.device_get(state.replace(cache=None)))
  return states, finish(scorer, state, t_max)


ALGORITHMS = {  # name -> whether block_size applies (without it the whole length is one block)
    'pj': False, 'pgj': True, 'hgj': True}


def algorithm_options(name: str, block_size: int) -> dict:
  """The jacobi_decode / trace_jacobi keyword arguments of algorithm `name` ('pj', 'pgj', 'hgj')."""
  return {'block_size': block_size if ALGORITHMS[name] else 0}


@register_decoder('jacobi_pj', LeftToRightScorer, Bounded, row_bounds=True,
                  about="Jacobi decoding with one block over the whole length: greedy's output token for token, in at "
                        'most as many decoder passes as greedy has steps, each pass re-scoring the whole draft.')
def jacobi_pj(scorer: LeftToRightScorer, src, max_len: int = 0) -> DecodeOutput:
  """Parallel Jacobi: the whole maximum length is one block."""
  return jacobi_decode(scorer, src, max_len=max_len, **algorithm_options('pj', 0))


@dataclasses.dataclass(frozen=True)
class BlockOptions(Bounded):
  block_size: int = steps(3, 'decoding steps per block (z tokens each on the IBDecoder family)')


@register_decoder('jacobi_pgj', LeftToRightScorer, BlockOptions, row_bounds=True,
                  about="Jacobi decoding in consecutive blocks (Gauss-Seidel-Jacobi): greedy's output token for "
                        'token; a block is iterated until it stops changing, then the next one starts.')
def jacobi_pgj(scorer: LeftToRightScorer, src, block_size: int = 3, max_len: int = 0) -> DecodeOutput:
  """Parallel Gauss-Seidel-Jacobi: blocks of `block_size`; a row stops once an EOS is final."""
  return jacobi_decode(scorer, src, max_len=max_len, **algorithm_options('pgj', block_size))


@register_decoder('jacobi_hgj', LeftToRightScorer, BlockOptions, row_bounds=True,
                  about="Hybrid Gauss-Seidel-Jacobi: blocks as `jacobi_pgj`, no oracle length; a sentence stops once "
                        "its converged prefix holds EOS. Greedy's output token for token on every left-to-right view.")
def jacobi_hgj(scorer: LeftToRightScorer, src, block_size: int = 3, max_len: int = 0) -> DecodeOutput:
  """Hybrid GS-Jacobi: blocks of `block_size`, no oracle length; a row stops once its converged prefix holds an EOS."""
  return jacobi_decode(scorer, src, max_len=max_len, **algorithm_options('hgj', block_size))

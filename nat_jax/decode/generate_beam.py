"""Beam search as Hugging Face's generate searches: a converted OPUS-MT run's default decoder.

It differs from `beam` (GNMT's) in four rules, each as generate has it: a finished score is
log p / |y| ** alpha; every candidate that ends may finish (not only those among the K best); a sentence
stops by generate's rule (`early_stopping`); and after max_len tokens every hypothesis ends with an EOS.
The search loop, its state and the hypotheses' read-out are beam's (nat_jax.decode.beam).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from nat_jax.core.masks import NEG_INF
from nat_jax.decode.beam import BeamState, beam_step, best_output, one_token_per_step, search
from nat_jax.decode.lengths import resolve_max_len
from nat_jax.decode.options import Bounded, choice, hypotheses, weight
from nat_jax.decode.registry import register_decoder
from nat_jax.views import DecodeOutput, LeftToRightScorer, require_one_token_per_step

EARLY_STOPPING = ('false', 'true', 'never')  # generate's early_stopping: False, True, 'never'


def generate_penalty(length, alpha: float):
  """generate's length penalty: |y| ** alpha (|y|: tokens incl. EOS)."""
  return jnp.asarray(length, jnp.float32) ** alpha


def generate_ends(early_stopping: str):
  """generate's rule of which ended candidates finish: every one; none once a row holds K finished
  (early_stopping 'true')."""
  def ends(state: BeamState, ended: jax.Array) -> jax.Array:
    if early_stopping == 'true':
      return ended & ~jnp.all(state.fin_scores > NEG_INF / 2, axis=1, keepdims=True)
    return ended
  return ends


def generate_open_rows(state: BeamState, alpha: float, early_stopping: str, num_steps: int) -> jax.Array:
  """bool[B]: rows generate steps on (its beam search's loop condition, per sentence): some finished slot
  is empty or below the best alive hypothesis scored at its current length (at the bound's with
  early_stopping 'never' and alpha > 0); with 'true', none once K have finished."""
  filled = state.fin_scores > NEG_INF / 2  # [B, K]
  length = num_steps if (early_stopping == 'never' and alpha > 0) else jnp.maximum(state.step, 1)
  best = jnp.max(state.alive_logp, axis=1) / generate_penalty(length, alpha)  # [B]
  worst = jnp.where(jnp.all(filled, axis=1), jnp.min(state.fin_scores, axis=1), NEG_INF)  # [B]
  still = (best > worst) | (state.step == 0)
  return still & ~(jnp.all(filled, axis=1) & (early_stopping == 'true'))


def generate_beam_search(scorer: LeftToRightScorer, enc, batch: int, beam_size: int, alpha: float, t_max: int,
                         early_stopping: str = 'false', shrink: bool = True) -> BeamState:
  """generate's beam search from an encoder state (batch `batch`): t_max tokens, then an EOS forced (t_max
  + 1 steps); shrink: as beam.search's."""
  steps, ends = t_max + 1, generate_ends(early_stopping)
  return search(scorer, enc, batch, beam_size, alpha, steps,
                lambda e, s: beam_step(scorer, e, s, alpha, generate_penalty, ends, forced_eos_step=t_max), shrink,
                open_fn=lambda s: generate_open_rows(s, alpha, early_stopping, steps))


@dataclasses.dataclass(frozen=True)
class GenerateBeamOptions(Bounded):
  beam_size: int = hypotheses(4, 'hypotheses kept per sentence (generate: num_beams)')
  alpha: float = weight(1.0, 'length penalty (generate: length_penalty): a finished score is log p / length^alpha; '
                             '0 compares raw log-probabilities')
  early_stopping: str = choice('false', "generate's early_stopping: 'false', 'true' (stop once beam_size have "
                                        "finished) or 'never'", EARLY_STOPPING)


@register_decoder('generate_beam', LeftToRightScorer, GenerateBeamOptions, check=one_token_per_step('generate_beam'),
                  about="Beam search as Hugging Face's generate searches (length^alpha, its stopping rule, EOS forced "
                        'after max_len tokens): a converted OPUS-MT run decodes with it by default and gives '
                        "generate's tokens.")
def generate_beam_decode(scorer: LeftToRightScorer, src: jax.Array, beam_size: int = 4, alpha: float = 1.0,
                         max_len: int = 0, early_stopping: str = 'false') -> DecodeOutput:
  """generate's best hypothesis per row (beam.best_output with its length penalty)."""
  require_one_token_per_step(scorer, 'generate_beam')
  final = generate_beam_search(scorer, scorer.encode(src), src.shape[0], beam_size, alpha,
                               resolve_max_len(scorer, src, max_len), early_stopping)
  return best_output(scorer, src, final, alpha, generate_penalty)

"""What a decoder sees of a model: one Protocol per decoding family, and what every decoder returns.

A decoder never sees a method or its parameters. A method offers *views* (`method.views()`:
Protocol -> build(params) -> object implementing it), and a decoder registered for a Protocol
runs on every method that offers it. Views are built inside the jitted decode function, so
their parameters are traced arguments, not constants. Tests drive decoders with small
hand-written views (tests/unit/test_decode.py), as t5x's decoding tests use a Markov
`tokens_to_logits`. Nor does a decoder read a file or load a run: what a decoder's `prepare` needs
from outside (another run to draft with, an n-gram model) the run layer hands it as `RunResources`.
This module imports no decoder and no method: both sides import it.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import flax
import jax

from nat_jax.errors import ConfigError


class DecodeOutput(NamedTuple):
  tokens: jax.Array  # i32[B, T], 0-padded after EOS
  scores: jax.Array  # f32[B], the decoder's own score of the returned sequence
  aux: dict          # decoder-specific per-sentence statistics (e.g. steps), each [B]


class LeftToRightScorer(Protocol):
  """Encode once, then score T new slots against a cache (greedy, beam, Jacobi).

  Slot i of the target side holds the input of decoding position i: slots 0 .. z-1 are start
  slots (BOS), slot z + t the t-th output token (0-indexed), z = `tokens_per_step`. One decoding
  step feeds the z slots of its step and reads z predictions; a Jacobi iteration feeds a block.
  """
  tokens_per_step: int  # slots one decoding step takes: AT 1, SA / IBDecoder h * c

  def encode(self, src: jax.Array) -> Any:
    """src i32[B, S] (0 = pad) -> encoder state (pytree, batch on axis 0; beam search repeats it)."""

  def init_cache(self, enc: Any, num_slots: int) -> Any:
    """Empty cache of `num_slots` target slots (pytree, batch on axis 0; beam search reorders it)."""

  def resize_cache(self, cache: Any, num_slots: int) -> Any:
    """The cache's first `num_slots` slots, or it with empty slots appended up to `num_slots` (a
    decoding loop attends over the part it has filled, nat_jax.decode.loop)."""

  def step_logits(self, enc: Any, cache: Any, tokens: jax.Array, start: jax.Array) -> tuple[jax.Array, Any]:
    """tokens i32[B, T] written to slots [start, start + T) -> (logits f32[B, T, V] of what each
    slot predicts, updated cache). Slots past start + T are never read."""

  def max_decode_len(self, src_len: int) -> int:
    """Output-length bound for a padded source width (static, so a few shapes compile)."""

  def read_out(self, tokens: jax.Array) -> jax.Array:
    """Decoded tokens in slot order i32[B, P] (0 after the first EOS) -> text order, EOS after the text
    (AT: unchanged; IBDecoder: de-interleaved). Every left-to-right decoder returns what this gives."""

  def write_in(self, tokens: jax.Array) -> jax.Array:
    """A whole output in text order i32[B, P] (EOS after the text, 0 after it) -> the tokens this view
    would write, in slot order (AT: unchanged; HRT's Skip-AT: every k-th token; IBDecoder:
    interleaved): how a draft of the output is laid out for verification (drafted decoding)."""


class WindowDrafter(Protocol):
  """A drafter that re-drafts after every pass of a one-token-per-step verifier (drafted decoding):
  a draft head on the verifier's decoder states (self-drafting), or a whole-output drafter
  conditioned on the accepted prefix (nat_jax.decode.redraft). Verifiers that feed a head which
  `reads_states` offer `step_states` (step_logits + those states)."""
  window: int         # W, tokens drafted per call
  reads_states: bool  # whether `draft` reads the verifier's states (else it gets None)

  def start(self, enc: Any, num_slots: int) -> Any:
    """Per-sentence state of the drafter (pytree, batch on axis 0) from the verifier's encoder
    state, with room for the verifier's states of `num_slots` output slots."""

  def first(self, head_state: Any) -> jax.Array:
    """i32[B, >= W]: drafts of output tokens 0, 1, ..., before any token is final."""

  def draft(self, head_state: Any, states: Any, starts: jax.Array, fixed: jax.Array,
            tokens: jax.Array) -> tuple[jax.Array, Any]:
    """states [B, W, D] (or None): the verifier's final states of the window it just scored (slot
    starts + j predicted output token starts + j); output tokens i32[B, P], of which 0 .. fixed - 1
    are now final (fixed > starts) -> (i32[B, W] drafts of output tokens fixed .. fixed + W - 1,
    head_state)."""


def one_token_per_step_message(decoder: str, tokens_per_step: int) -> str:
  return (f'{decoder} decodes one token per step; this model takes {tokens_per_step} (use a decoder that '
          f'handles several tokens per step: greedy, multiword_beam, jacobi_*).')


def require_one_token_per_step(scorer: LeftToRightScorer, decoder: str):
  """Decoders that extend a hypothesis one token at a time (beam) refuse other scorers."""
  if scorer.tokens_per_step != 1:
    raise ConfigError(one_token_per_step_message(decoder, scorer.tokens_per_step))


@flax.struct.dataclass
class Graph:
  """A predicted DA-Transformer graph (nat_jax.decode.dag)."""
  hidden: jax.Array         # [B, L, D] decoder states of the L vertices
  log_trans: jax.Array      # f32[B, L, L] log E_ij, ignored outside 0 <= i < j < G
  graph_lengths: jax.Array  # i32[B] G, the vertices of each row's graph


class GraphPredictor(Protocol):
  """A directed acyclic graph of decoder positions per sentence (dag_* decoders)."""

  def predict_graph(self, src: jax.Array) -> Graph:
    """src i32[B, S] -> the graph of each sentence."""

  def vertex_log_probs(self, hidden: jax.Array) -> jax.Array:
    """hidden [B, K, D] (all vertices or a gathered subset) -> log P(y | v) f32[B, K, V]."""

  def max_decode_len(self, src_len: int) -> int:
    """Output-length bound for a padded source width."""


class MaskPredictor(Protocol):
  """A non-autoregressive decoder over [MASK] inputs with a length predictor (mask_predict)."""

  def encode(self, src: jax.Array) -> Any:
    """src i32[B, S] -> encoder state (pytree, batch on axis 0)."""

  def length_log_probs(self, enc: Any) -> jax.Array:
    """log P(target length incl. EOS) f32[B, C] over lengths 0 .. C - 1."""

  def fill_logits(self, enc: Any, tokens: jax.Array) -> jax.Array:
    """tokens i32[B, W] (MASK where unknown, 0 = no slot) -> logits f32[B, W, V] of every slot."""

  def max_decode_len(self, src_len: int) -> int:
    """Output-length bound for a padded source width."""


class HybridScorer(Protocol):
  """HRT: a Skip-AT left-to-right view that writes every k-th token and a Skip-CMLM pass that
  fills the k - 1 tokens between them (the hrt decoder)."""
  chunk: int  # k, the chunk size the model was trained with

  def skip_scorer(self, chunk: int) -> LeftToRightScorer:
    """The left-to-right view that writes every `chunk`-th token (chunk = 1: plain left-to-right);
    its `encode` output is what `fill_logits` takes."""

  def fill_logits(self, enc: Any, tokens: jax.Array) -> jax.Array:
    """tokens i32[B, W] (MASK where unknown, 0 = no slot) -> logits f32[B, W, V] of every slot."""


class RunResources(Protocol):
  """What the run layer (nat_jax.run.resources.Resources) hands a decoder's `prepare`: the decoding run's
  tokenizer and the other things a decoder may need, loaded and checked there."""
  tokenizer: Any  # the decoding run's tokenizer (word_ids(), vocab_size), or None when there is none

  def drafter_run(self, workdir: str) -> Any:
    """The run in `workdir` (.method, .params, .config), refused unless it shares the tokenizer."""

  def ngram_model(self, path: str) -> Any:
    """The backoff n-gram model of an ARPA file (nat_jax.decode.arpa.Ngrams), read and checked."""

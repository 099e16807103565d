"""Interleaved bidirectional (IBDecoder), semi-autoregressive (SA) and IMDecoder decoding
('ibdecoder', Zhang, Titov and Sennrich): z = h * c target tokens per decoding step.

One Transformer decoder writes the target in a *slot order* instead of left to right: h streams
(h = 1: left to right; h = 2: from both ends towards the middle; h = 4: two segments, each from
both ends) and c consecutive tokens per stream per step. The slot-order target is
`reorder(y, h) + EOS` (EOS and padding in place); reading out = cut at the first EOS, then
`restore`. Training is teacher forcing with plain label-smoothed cross-entropy on that sequence:
inputs shifted right by z start slots, a block-causal mask with blocks of z slots (slot i sees
slots j with j // z <= i // z), so one decoding step predicts z tokens at once.

  (h, c)   name            z   y1..y5 decoded in steps
  (1, 1)   AT              1   y1 | y2 | y3 | y4 | y5 | EOS
  (2, 1)   IBDecoder       2   (y1, y5) (y2, y4) (y3, EOS)
  (1, 2)   SA              2   (y1, y2) (y3, y4) (y5, EOS)
  (2, 2)   IBDecoder + SA  4   (y1, y5, y2, y4) (y3, EOS, -, -)
  (4, 1)   IMDecoder       4   (y1, y3, y4, y5) (y2, EOS, -, -)

The contract functions `interleave`, `deinterleave`, `ib_positions` and
`block_causal_mask` (docs/methods/ibdecoder.md) are here; `reorder` / `restore` generalise interleave to any h.

Our choices where the paper is silent (docs/methods/ibdecoder.md):
- Slot order for h = 2m streams (IMDecoder: h = 4): the n tokens before EOS are split into m
  consecutive segments of near-equal size (the first n mod m one token longer); every segment is
  read by a forward and a backward stream that meet in its middle; the h streams take turns in
  the order (segment 1 forward, segment 1 backward, segment 2 forward, ...), a stream whose
  segment is used up is skipped, and EOS follows the last token. With h = 2 this is exactly
  `interleave`. Segment sizes differ by at most one, so only the last step can be short.
- Start slots read BOS (the reference feeds zero vectors): with h = c = 1 the method is exactly
  the AT method on the same parameters (a test checks loss and logits).
- Positions (sinusoidal, what the model embeds at the slot that predicts the t-th slot-order
  token): h = 1: t - 1 (AT's); h = 2: the forward stream 0, 1, 2, ... and the backward stream
  -1, -2, ... (ib_positions(t) - 1 where positive, ib_positions(t) where negative, so (1, 1) is AT);
  h > 2: the round index (t - 1) // h plus a trainable direction embedding of (t - 1) mod h.
  All of them are independent of c. The label (t - 1) mod h names a slot's place within its
  round, which is its stream in every full round; in the last round, where used-up streams are
  skipped, it can name a different stream than the one that writes the slot (the model sees the
  same labels in training and decoding, so this is consistent, not a mismatch).
- h must be 1 or even, c >= 1.

Decoding: the method's LeftToRightScorer declares z = h * c slots per step and reads out through
`restore`, so `greedy` (per-slot argmax), `multiword_beam` and the Jacobi decoders run on it unchanged.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from nat_jax.core.masks import attention_mask
from nat_jax.core.tokens import BOS_ID, EOS_ID, through_first_eos
from nat_jax.errors import ConfigError
from nat_jax.methods.autoregressive import TransformerScorer
from nat_jax.methods.base import Method
from nat_jax.methods.registry import register
from nat_jax.methods.teacher_forcing import DecoderInputs, batch_view, teacher_forced_loss
from nat_jax.models.transformer import Transformer, transformer_config
from nat_jax.settings import setting
from nat_jax.views import LeftToRightScorer

NAMES = {(1, 1): 'AT', (2, 1): 'IBDecoder', (1, 2): 'SA', (2, 2): 'IBDecoder+SA', (4, 1): 'IMDecoder'}


@dataclasses.dataclass(frozen=True)
class IbDecoderSettings:
  """The `config.ibdecoder` section: (h, c) = (2, 1) IBDecoder, (1, 2) SA, (2, 2) both, (4, 1) IMDecoder."""
  h: int = setting(2, 'streams: 1 left to right, 2 both ends, 4 two segments from both ends (1 or even)', low=1)
  c: int = setting(1, 'consecutive tokens per stream per step', low=1)


def check_layout(h: int, c: int):
  """The relation of the two settings (each >= 1: IbDecoderSettings' rules): h is 1 or even."""
  if h > 1 and h % 2:
    raise ConfigError(f'ibdecoder.h={h}, ibdecoder.c={c}: h must be 1 or even (2: IBDecoder, 4: IMDecoder).')


# --- slot order ---------------------------------------------------------------------------------
def reading_order(n: int, h: int) -> list[int]:
  """Slot-order permutation of n tokens for h streams: slot s holds token order[s] (0-indexed)."""
  if h == 1:
    return list(range(n))
  segments = h // 2
  base, extra = divmod(n, segments)
  bounds, lo = [], 0
  for i in range(segments):
    size = base + (i < extra)
    bounds.append([lo, lo + size - 1])  # [next forward, next backward]
    lo += size
  order = []
  while len(order) < n:
    for seg in bounds:
      for backward in (False, True):
        if seg[0] <= seg[1]:
          order.append(seg[1] if backward else seg[0])
          seg[1 if backward else 0] += -1 if backward else 1
  return order


@functools.lru_cache(maxsize=None)
def order_tables(width: int, h: int) -> tuple[np.ndarray, np.ndarray]:
  """(gather i32[width + 1, width], inverse): row n permutes the first n slots by reading_order(n, h)
  and leaves the rest in place; `inverse` undoes it."""
  gather = np.tile(np.arange(width, dtype=np.int32), (width + 1, 1))
  for n in range(width + 1):
    gather[n, :n] = reading_order(n, h)
  return gather, np.argsort(gather, axis=1).astype(np.int32)


def text_length(tokens: jax.Array) -> jax.Array:
  """i32[B, T] -> i32[B]: tokens before the first EOS (T where there is none)."""
  _, length = through_first_eos(tokens)
  return length - jnp.any(tokens == EOS_ID, axis=1)


def reorder(targets: jax.Array, h: int) -> jax.Array:
  """Rows y_1..y_n, EOS, 0... (i32[B, T]) -> the n tokens in slot order, EOS and padding in place."""
  gather, _ = order_tables(targets.shape[1], h)
  return jnp.take_along_axis(targets, jnp.asarray(gather)[text_length(targets)], axis=1)


def restore(tokens: jax.Array, h: int) -> jax.Array:
  """Inverse of `reorder` on rows in slot order (the n tokens before the first EOS; rows without EOS
  are n = T tokens)."""
  _, inverse = order_tables(tokens.shape[1], h)
  return jnp.take_along_axis(tokens, jnp.asarray(inverse)[text_length(tokens)], axis=1)


def interleave(targets: jax.Array) -> jax.Array:
  """y_1..y_n, EOS, 0... -> y_1, y_n, y_2, y_(n-1), ..., EOS, 0... (i32[B, T])."""
  return reorder(targets, 2)


def deinterleave(tokens: jax.Array) -> jax.Array:
  """The inverse of `interleave` (out[0::2] + reversed(out[1::2]) over the n tokens before EOS)."""
  return restore(tokens, 2)


def ib_positions(length: int) -> jax.Array:
  """i32[T], the position of the slot predicting the t-th token: (-1)^(t-1) ceil(t/2)."""
  t = np.arange(1, length + 1)
  return jnp.asarray(np.where(t % 2 == 1, 1, -1) * ((t + 1) // 2), jnp.int32)


def block_causal_mask(length: int, z: int) -> jax.Array:
  """bool[T, T], slot i may attend slot j iff ceil(i/z) >= ceil(j/z) (1-indexed)."""
  return attention_mask(jnp.arange(length) // z)


def slot_positions(slots: jax.Array, h: int) -> jax.Array:
  """i32[T] slot indices (slot i predicts the (i+1)-th slot-order token) -> embedded positions."""
  if h == 1:
    return slots
  if h == 2:
    return jnp.where(slots % 2 == 0, slots // 2, -(slots // 2) - 1)  # forward 0, 1, ...; backward -1, -2, ...
  return slots // h


def slot_directions(slots: jax.Array, h: int):
  """i32[T] -> the direction embedding of each slot (h > 2), or None (h <= 2 encode direction by sign)."""
  return slots % h if h > 2 else None


def ibdecoder_inputs(target: jax.Array, h: int, c: int) -> DecoderInputs:
  """target i32[B, T] (y + EOS, 0-padded) -> the teacher-forced view: slot i reads the slot-order
  token i - z (BOS for the z start slots), is embedded at `slot_positions(i)`, decodes in step i // z
  and predicts the slot-order token i."""
  z = h * c
  ordered = reorder(target, h)  # [B, T]
  tokens = jnp.concatenate([jnp.full_like(ordered[:, :z], BOS_ID), ordered[:, :-z]],
                           axis=1)[:, :target.shape[1]]
  slots = jnp.arange(target.shape[1])  # [T]
  directions = slot_directions(slots, h)
  return DecoderInputs(tokens=tokens, positions=jnp.broadcast_to(slot_positions(slots, h), target.shape),
                       groups=jnp.broadcast_to(slots // z, target.shape), valid=jnp.ones(target.shape, bool),
                       targets=ordered,
                       directions=None if directions is None else jnp.broadcast_to(directions, target.shape))


@dataclasses.dataclass(frozen=True)
class IbDecoderScorer(TransformerScorer):
  """The left-to-right view with z = h * c slots per step, slot positions / directions of the layout,
  and read-out through `restore`."""
  h: int = 1

  def slot_positions(self, slots):
    return slot_positions(slots, self.h)

  def slot_directions(self, slots):
    return slot_directions(slots, self.h)

  def read_out(self, tokens):
    return restore(tokens, self.h)

  def write_in(self, tokens):
    return reorder(tokens, self.h)


@register('ibdecoder', IbDecoderSettings)
class IbDecoderMethod(Method):
  """IBDecoder / SA / IMDecoder: a Transformer trained on the slot-order target with a block-causal mask."""
  normalizer = 'tokens'
  packable = True

  def __init__(self, config, vocab_size: int):
    super().__init__(config, vocab_size)
    self.h, self.c = config.ibdecoder.h, config.ibdecoder.c
    check_layout(self.h, self.c)
    self.slot_multiple = self.h * self.c  # a packed pair keeps its last step's z slots
    self.model = Transformer(transformer_config(config.model, vocab_size, directions=self.h if self.h > 2 else 0))
    self.label_smoothing = config.label_smoothing

  @property
  def tokens_per_step(self) -> int:
    return self.h * self.c

  def inputs(self, target: jax.Array) -> DecoderInputs:
    return ibdecoder_inputs(target, self.h, self.c)

  def init_params(self, rng, batch):
    inputs = self.inputs(batch['target'])
    return self.model.init(rng, batch['source'], inputs.tokens, inputs.positions, inputs.self_mask(),
                           directions=inputs.directions)['params']

  def loss(self, params, batch, rng, step=0, deterministic: bool = False):
    inputs, packing = batch_view(batch, self.inputs, self.max_segments)
    return teacher_forced_loss(self.model, params, batch['source'], inputs, rng, label_smoothing=self.label_smoothing,
                               deterministic=deterministic, packing=packing)

  def scorer(self, params) -> IbDecoderScorer:
    return IbDecoderScorer(self.model, params, self.max_target_len, tokens_per_step=self.tokens_per_step, h=self.h)

  def views(self):
    return {LeftToRightScorer: self.scorer}

  def label(self) -> str:
    """Short description for tables."""
    return f'{NAMES.get((self.h, self.c), self.name)} (h={self.h}, c={self.c})'

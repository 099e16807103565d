"""Hybrid-regressive translation ('hrt', Wang et al.; the RoyalFlush WMT22 system builds on it).

One encoder and ONE shared decoder trained on four tasks. For chunk size k a target (y + EOS,
padded with EOS to a multiple of k: s_1 .. s_N) gives (`chunk_samples`; docs/methods/hrt.md):
  Skip-AT    causal: from the start token <B_k> at position 0, write s_k, s_2k, ..., s_N, the
             input s_jk sitting at its original position jk;
  Skip-CMLM  non-causal: given s_k, s_2k, ... in place and [MASK] elsewhere, fill the k - 1
             tokens of every chunk;
  AT / CMLM  the same with k = 1 (plain left-to-right from BOS) and random masking (`random_mask`
             over every token incl. EOS; CMLM's own length-known convention masks text only).
Curriculum: at update t a batch's first floor(n p_k) real pairs become {Skip-AT, Skip-CMLM}
samples, the rest {AT, CMLM}, p_k = (t / T)^lambda (T = hrt.curriculum_steps, 0 = total_steps).
Every pair thus gives one causal and one non-causal sample; the two passes share one encoder pass,
and their label-smoothed cross-entropies are summed with equal weight and normalized per target
token. Mixed distillation comes from the data pipeline: data.distill_dir + data.raw_prob.

Our choices (docs/methods/hrt.md):
- <B_k> is an input-only start token (id = vocab size, Transformer start_tokens=1), so Skip-AT's
  first step differs from AT's although both start at position 0.
- Key-only relative positions in decoder self-attention (model.relative_window, w = 16 in the
  recipes) over the positions actually fed, so Skip-AT's distances are original positions (0, k, 2k).
- Fine-tuning from an AT run (init_from) whose tree lacks the relative-key tables and <B_k>:
  `adopt_params` adds them, relative keys as zeros and <B_k> as a copy of BOS's embedding, so the
  starting HRT model computes exactly the AT model's function in AT mode (a test checks this).
  Any other difference (sizes, vocabulary) is an error naming the parameters.
- Skip-CMLM and CMLM slots sit at positions 0 .. W - 1 (slot w holds s_(w+1)).

Decoding: the `hrt` decoder (nat_jax.decode.hrt); the method's LeftToRightScorer is the Skip-AT
view (every k-th token), so greedy, beam and the Jacobi decoders run on Skip-AT unchanged.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import traverse_util

from nat_jax.core.packing import Packing
from nat_jax.core.tokens import BOS_ID, EOS_ID, MASK_ID, ceil_div, skip_frame
from nat_jax.errors import ConfigError
from nat_jax.losses.cross_entropy import smoothed_cross_entropy
from nat_jax.methods.autoregressive import TransformerScorer, autoregressive_inputs, init_transformer
from nat_jax.methods.base import Method
from nat_jax.methods.cmlm import masked_inputs, random_mask
from nat_jax.methods.registry import register
from nat_jax.methods.teacher_forcing import DecoderInputs, source_args
from nat_jax.models.transformer import Transformer, transformer_config
from nat_jax.settings import setting
from nat_jax.views import HybridScorer, LeftToRightScorer


@dataclasses.dataclass(frozen=True)
class HrtSettings:
  """The `config.hrt` section of an HRT recipe."""
  chunk: int = setting(2, 'k: Skip-AT writes every k-th token', low=1)
  curriculum_lambda: float = setting(1.0, 'the Skip share p_k = (t / T)^lambda', low=0.01)
  curriculum_steps: int = setting(0, 'T of the curriculum', low=1, zero='total_steps')


def chunk_samples(targets: jax.Array, k: int, bos_id: int, eos_id: int, mask_id: int) -> dict[str, jax.Array]:
  """Skip-AT and Skip-CMLM samples of targets i32[B, T] (y + EOS, 0-padded) for chunk size k (docs/methods/hrt.md).

  Returns i32 arrays: skip_at_inputs / skip_at_positions / skip_at_targets [B, U] and
  skip_cmlm_inputs / skip_cmlm_targets [B, k U], U = ceil(T / k).
  """
  b, t = targets.shape
  u = ceil_div(t, k)
  n = jnp.sum(targets > 0, axis=1)  # [B] tokens incl. EOS
  big_n = k * ceil_div(n, k)  # [B] N = k ceil(n / k)
  idx = jnp.arange(k * u)[None, :]  # [1, kU] 0-indexed (1-indexed i = idx + 1)
  s = jnp.pad(targets, ((0, 0), (0, k * u - t)))
  s = jnp.where((idx >= n[:, None]) & (idx < big_n[:, None]), eos_id, s)  # [B, kU]: EOS-padded to N, 0 past N
  skip_targets = s[:, k - 1::k]  # [B, U]: s_k, s_2k, ..., 0 past N / k
  j = jnp.arange(u)[None, :]
  first = jnp.where(n[:, None] > 0, bos_id, 0)  # [B, 1]; an all-padding row stays all 0
  skip_inputs = jnp.where(j < (big_n // k)[:, None], jnp.concatenate([first, skip_targets[:, :-1]], axis=1), 0)
  on_skip = (idx + 1) % k == 0
  in_row = idx < big_n[:, None]
  return {'skip_at_inputs': skip_inputs.astype(jnp.int32),
          'skip_at_positions': jnp.broadcast_to(j * k, (b, u)).astype(jnp.int32),
          'skip_at_targets': skip_targets.astype(jnp.int32),
          'skip_cmlm_inputs': jnp.where(n[:, None] > 0, skip_frame(skip_targets, k, mask_id)[0], 0).astype(jnp.int32),
          'skip_cmlm_targets': jnp.where(in_row & ~on_skip, s, 0).astype(jnp.int32)}


def skip_probability(step, steps: int, lam: float) -> jax.Array:
  """p_k = (t / T)^lambda, t clipped to [0, T]."""
  return jnp.clip(jnp.asarray(step, jnp.float32) / max(steps, 1), 0.0, 1.0) ** lam


def skip_rows(targets: jax.Array, p) -> jax.Array:
  """bool[B]: the first floor(n p) real rows (n = rows with a target) take the Skip samples."""
  real = jnp.any(targets > 0, axis=1)  # [B]
  n_skip = jnp.floor(jnp.sum(real).astype(jnp.float32) * p)
  return real & (jnp.cumsum(real) <= n_skip)


def pad_to(x: jax.Array, width: int) -> jax.Array:
  """[B, w] -> [B, width] (w <= width), 0-padded on the right."""
  return jnp.pad(x, ((0, 0), (0, width - x.shape[1])))


def mixed_views(targets: jax.Array, skip: jax.Array, k: int, skip_start: int,
                rng) -> tuple[DecoderInputs, DecoderInputs]:
  """(causal view [B, T], non-causal view [B, k U]) of a batch: Skip-AT / Skip-CMLM samples on the
  rows where skip bool[B] is set, AT / randomly masked CMLM samples on the others."""
  t = targets.shape[1]
  sk = chunk_samples(targets, k, skip_start, EOS_ID, MASK_ID)
  at = autoregressive_inputs(targets)
  row = skip[:, None]
  causal = DecoderInputs(tokens=jnp.where(row, pad_to(sk['skip_at_inputs'], t), at.tokens),
                         positions=jnp.where(row, pad_to(sk['skip_at_positions'], t), at.positions),
                         groups=at.groups, valid=at.valid,
                         targets=jnp.where(row, pad_to(sk['skip_at_targets'], t), at.targets))
  width = sk['skip_cmlm_inputs'].shape[1]
  cmlm = masked_inputs(pad_to(targets, width), random_mask(rng, pad_to(targets, width) > 0))
  tokens = jnp.where(row, sk['skip_cmlm_inputs'], cmlm.tokens)
  noncausal = DecoderInputs(tokens=tokens, positions=cmlm.positions, groups=cmlm.groups, valid=tokens > 0,
                            targets=jnp.where(row, sk['skip_cmlm_targets'], cmlm.targets))
  return causal, noncausal


@register('hrt', HrtSettings)
class HrtMethod(Method):
  """HRT: Skip-AT + Skip-CMLM + AT + CMLM on one shared decoder, with the Skip-share curriculum."""
  normalizer = 'tokens'
  packable = True

  def __init__(self, config, vocab_size: int):
    super().__init__(config, vocab_size)
    h = config.hrt
    if h.chunk > config.max_len:
      raise ConfigError(f'hrt.chunk={h.chunk} is larger than the maximum target length max_len={config.max_len}: '
                       'Skip-AT would write nothing but EOS; use a chunk of a few tokens (2-4).')
    self.chunk = h.chunk
    self.slot_multiple = h.chunk  # a packed pair keeps its EOS padding to a multiple of k
    self.curriculum = (h.curriculum_steps or config.total_steps, h.curriculum_lambda)
    self.skip_start = vocab_size  # <B_k>: the first input-only start token
    self.model = Transformer(transformer_config(config.model, vocab_size, start_tokens=1))
    self.label_smoothing = config.label_smoothing

  def init_params(self, rng, batch):
    return init_transformer(self.model, rng, batch)

  def loss(self, params, batch, rng, step=0, deterministic: bool = False):
    """Sums over both samples of every pair: loss, nll, correct, tokens; skip_rows = pairs given the
    Skip samples, sentences = pairs."""
    src = batch['source']
    packing = Packing.of(batch, self.max_segments)
    targets = batch['target'] if packing is None else packing.unpack_target(batch['target'])  # [B, T]: a pair per row
    mask_rng, enc_rng, ar_rng, nar_rng = jax.random.split(rng, 4)
    skip = skip_rows(targets, skip_probability(step, *self.curriculum))
    start = self.skip_start if self.chunk > 1 else BOS_ID  # k = 1: Skip-AT is AT
    views = mixed_views(targets, skip, self.chunk, start, mask_rng)
    if packing is not None:
      views = tuple(view.pack(packing) for view in views)
    apply = lambda r, *a, **k: self.model.apply({'params': params}, *a, deterministic=deterministic,
                                                rngs={'dropout': r}, **k)
    args = source_args(src, packing)
    encoded = apply(enc_rng, src, positions=args['src_positions'], mask=args['src_mask'], method=Transformer.encode)
    sums = None
    for view, r in zip(views, (ar_rng, nar_rng)):
      logits, _ = apply(r, view.tokens, view.positions, view.self_mask(), encoded, args['cross_mask'],
                        method=Transformer.decode)
      s = smoothed_cross_entropy(logits, view.targets, (view.targets > 0).astype(jnp.float32), self.label_smoothing)
      sums = s if sums is None else {key: sums[key] + s[key] for key in s}
    sums.update(skip_rows=jnp.sum(skip).astype(jnp.float32),
                sentences=jnp.sum(jnp.any(targets > 0, axis=1)).astype(jnp.float32))
    return sums

  def adopt_params(self, loaded, fresh):
    """An AT run's params (`init_from`) completed with what HRT adds: relative-key tables (zeros)
    and <B_k> (a copy of BOS's embedding). Other differences are left for the caller's check."""
    have, want = traverse_util.flatten_dict(loaded), traverse_util.flatten_dict(fresh)
    for key, like in want.items():
      if key in have:
        continue
      if key[-1] == 'relative_keys':
        have[key] = jnp.zeros(like.shape, like.dtype)
      elif key[-1] == 'start_embeddings' and key[:-1] + ('embedding',) in have:
        bos = have[key[:-1] + ('embedding',)][BOS_ID]
        if bos.shape == like.shape[1:]:  # else the embeddings differ in size: the caller's check names them
          have[key] = jnp.broadcast_to(bos, like.shape).astype(like.dtype)
    return traverse_util.unflatten_dict(have)

  def view(self, params) -> 'HrtView':
    return HrtView(self.model, params, self.max_target_len, self.chunk, self.skip_start)

  def views(self):
    return {LeftToRightScorer: lambda params: self.view(params).skip_scorer(self.chunk), HybridScorer: self.view}

  def label(self) -> str:
    """Short description for tables."""
    return f'{self.name} (k={self.chunk})'


@dataclasses.dataclass(frozen=True)
class HrtView:
  """HybridScorer of an HRT model with bound parameters."""
  model: Transformer
  params: Any
  max_target_len: int
  chunk: int
  skip_start: int

  def skip_scorer(self, chunk: int) -> TransformerScorer:
    if chunk not in (1, self.chunk):
      raise ConfigError(f'This HRT model was trained with chunk k={self.chunk}; it decodes with chunk {self.chunk} '
                       f'or 1 (left to right), not {chunk}.')
    start = self.skip_start if chunk > 1 else BOS_ID
    return TransformerScorer(self.model, self.params, self.max_target_len, position_stride=chunk, start_token=start)

  def fill_logits(self, enc, tokens):
    return self.skip_scorer(1).fill_logits(enc, tokens)

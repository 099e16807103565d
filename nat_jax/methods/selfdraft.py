"""Self-drafting ('selfdraft'): a small draft head trained on a frozen autoregressive run, so that
drafted decoding needs no second model (nat_jax.decode.drafted).

The run holds the verifier's parameters, unchanged (`params['verifier']`, taken from `init_from`
and frozen: no gradient reaches them and weight decay must be 0), and the head's
(`params['head']`, nat_jax.models.draft_head). Trained on the verifier's own greedy translations
of the training set (`distill --decoder=greedy`), so that the head learns to predict what the
verifier will accept:

  a boundary t is sampled per sentence (`boundaries` of them, uniform over -1 .. n - 2 for a
  target of n tokens incl. EOS); the verifier's teacher-forced final state at slot t (it predicted
  y_t; zeros for t = -1) and y_t (BOS for t = -1) go in; the loss is the cross-entropy of the
  W = `window` tokens y_(t+1) .. y_(t+W) (those past the EOS are not scored).

That is exactly what the decoder has after a verifier pass: its state at the last final token.
One training step costs a forward pass of the frozen verifier and a forward/backward pass of the
head over `boundaries` x W slots.

Views: the frozen verifier as a LeftToRightScorer (greedy / beam / Jacobi give the verifier's
output) that carries its draft head, so `--decoder=drafted` on this run drafts with its own head;
and the head as a WindowDrafter, so a plain AT run may name this run as its drafter
(`--decoder.drafter=<this workdir>`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from nat_jax.core.reduce import argmax
from nat_jax.core.rows import row_updates
from nat_jax.core.tokens import BOS_ID
from nat_jax.errors import ConfigError
from nat_jax.losses.cross_entropy import smoothed_cross_entropy
from nat_jax.methods.autoregressive import TransformerScorer, autoregressive_inputs, init_transformer
from nat_jax.methods.base import Method
from nat_jax.methods.registry import register
from nat_jax.models.draft_head import DraftHead, boundary_states
from nat_jax.models.layers import CACHE_SLOT_AXIS, slot_count
from nat_jax.models.transformer import Transformer, transformer_config
from nat_jax.settings import setting
from nat_jax.views import LeftToRightScorer, WindowDrafter


@dataclasses.dataclass(frozen=True)
class SelfDraftSettings:
  """The `config.selfdraft` section of a self-drafting recipe."""
  window: int = setting(8, 'W: tokens the head drafts per call', low=1)
  head_layers: int = setting(1, 'non-causal decoder layers of the head (0: one feed-forward block, no attention)',
                             low=0)
  boundaries: int = setting(4, 'boundaries sampled per sentence and training step', low=1)


def sample_boundaries(rng, lengths: jax.Array, count: int) -> jax.Array:
  """i32[B, count] uniform over -1 .. lengths[b] - 2 (-1: before the first token); lengths i32[B] >= 1."""
  u = jax.random.uniform(rng, (lengths.shape[0], count))
  return jnp.floor(u * jnp.maximum(lengths, 1)[:, None]).astype(jnp.int32) - 1


def window_targets(target: jax.Array, fixed: jax.Array, window: int) -> jax.Array:
  """target i32[B, T], fixed i32[B, K] -> i32[B, K, W]: target[b, fixed + j], 0 past the end."""
  index = fixed[..., None] + jnp.arange(window)  # [B, K, W]
  padded = jnp.pad(target, ((0, 0), (0, window)))
  return jax.vmap(lambda row, idx: row[idx])(padded, index)


@dataclasses.dataclass(frozen=True)
class HeadDrafter:
  """The WindowDrafter view: the head on the verifier's states, with the verifier's embeddings."""
  model: Transformer
  head: DraftHead
  params: Any  # {'verifier': ..., 'head': ...}
  window: int
  reads_states = True

  def _head(self, *args, method=None, **kwargs):
    return self.head.apply({'params': self.params['head']}, *args, method=method, **kwargs)

  def memory(self, states):
    """Verifier states [N, P, D] -> the head's keys/values of them (per layer {'k','v': [N, P, H, Dh]})."""
    return self._head(states, method=DraftHead.memory_kv)

  def draft_logits(self, prepared, state, last, fixed, memory=None, visible=None, deterministic: bool = True,
                   rng=None):
    """state [N, D], last i32[N], fixed i32[N]; memory of the verifier's states and visible bool[N, P]
    (the final ones) -> logits f32[N, W, V] of output tokens fixed .. fixed + W - 1."""
    n = last.shape[0]
    positions = fixed[:, None] + jnp.arange(self.window)  # [N, W]
    tokens = jnp.broadcast_to(last[:, None], (n, self.window))
    verifier = {'params': self.params['verifier']}
    embedded = self.model.apply(verifier, tokens, positions, deterministic=True, method=Transformer.embed_tokens)
    hidden = self._head(state, embedded, prepared['encoded'], prepared['src_valid'], memory=memory,
                        memory_visible=visible, cross_kv=prepared.get('cross_kv'), deterministic=deterministic,
                        rngs=None if rng is None else {'dropout': rng})
    return self.model.apply(verifier, hidden, method=Transformer.logits)

  def start(self, enc, num_slots: int):
    """Per-sentence state: the head's view of the source and an empty memory of num_slots states."""
    encoded = enc['encoded']
    batch, d = encoded.shape[0], encoded.shape[-1]
    shapes = jax.eval_shape(self.memory, jax.ShapeDtypeStruct((batch, num_slots, d), encoded.dtype))
    return {'encoded': encoded, 'src_valid': enc['src_valid'],
            'cross_kv': self._head(encoded, method=DraftHead.cross_kv),
            'memory': jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)}

  def first(self, head_state):
    """i32[B, W]: drafts of output tokens 0 .. W - 1 (zero state, BOS, nothing in memory)."""
    encoded = head_state['encoded']
    batch = encoded.shape[0]
    zeros = jnp.zeros((batch,), jnp.int32)
    memory = head_state['memory']
    visible = jnp.zeros((batch, slot_count(memory[0])), bool) if memory else None  # [B, P]
    logits = self.draft_logits(head_state, jnp.zeros((batch, encoded.shape[-1]), encoded.dtype),
                               jnp.full((batch,), BOS_ID, jnp.int32), zeros,
                               memory or None, visible)
    return argmax(logits)

  def draft(self, head_state, states, starts, fixed, tokens):
    """The verifier's states [B, W, D] of its window (slots starts .. starts + W - 1) into memory, then
    drafts i32[B, W] of output tokens fixed .. fixed + W - 1 from the state of slot fixed - 1 and
    the last final token (the one it predicted; tokens i32[B, P]). -> (drafts, head_state)."""
    last = jnp.take_along_axis(tokens, (fixed - 1)[:, None], axis=1)[:, 0]  # [B]
    new = self.memory(states)  # per layer, keys [B, H, Dh, W] and values [B, H, W, Dh]
    memory = [{name: row_updates(old[name], upd.astype(old[name].dtype), starts, axis=CACHE_SLOT_AXIS[name])
               for name, upd in layer_new.items()} for old, layer_new in zip(head_state['memory'], new)]
    slots = slot_count(memory[0]) if memory else 0
    visible = jnp.arange(slots)[None] < fixed[:, None]  # [B, P]
    boundary = boundary_states(states, fixed - starts - 1)
    logits = self.draft_logits(head_state, boundary, last, fixed, memory or None, visible)
    return argmax(logits), dict(head_state, memory=memory)


@dataclasses.dataclass(frozen=True)
class SelfDraftScorer(TransformerScorer):
  """The frozen verifier's left-to-right view, carrying its draft head (`drafted` without a drafter uses it)."""
  draft_head: Any = None


@register('selfdraft', SelfDraftSettings)
class SelfDraftMethod(Method):
  """A draft head over a frozen AT: windowed cross-entropy on the AT's own greedy translations."""
  normalizer = 'tokens'
  feeds_draft_heads = True  # the frozen AT verifier (another selfdraft run's head may draft for it)

  def __init__(self, config, vocab_size: int):
    super().__init__(config, vocab_size)
    section = config.selfdraft
    if config.weight_decay != 0:
      raise ConfigError(f'weight_decay={config.weight_decay}: selfdraft keeps the verifier frozen (no gradient '
                        'reaches it), and weight decay would still change it; set weight_decay=0.')
    model_cfg = transformer_config(config.model, vocab_size)
    self.model = Transformer(model_cfg)
    self.head = DraftHead(dataclasses.replace(model_cfg, dec_layers=section.head_layers), section.window)
    self.window, self.boundaries = section.window, section.boundaries

  def init_params(self, rng, batch):
    verifier_rng, head_rng = jax.random.split(rng)
    d = self.model.cfg.d_model
    rows = batch['source'].shape[0]
    head = self.head.init(head_rng, jnp.zeros((rows, d)), jnp.zeros((rows, self.window, d)),
                          jnp.zeros(batch['source'].shape + (d,)), batch['source'] > 0)['params']
    return {'verifier': init_transformer(self.model, verifier_rng, batch), 'head': head}

  def drafter(self, params) -> HeadDrafter:
    return HeadDrafter(self.model, self.head, params, self.window)

  def loss(self, params, batch, rng, step=0, deterministic: bool = False):
    """Sums of the windowed cross-entropy {'loss', 'nll', 'correct', 'tokens'} and 'first_correct'
    (the first drafted token, which the verifier checks first)."""
    src, target = batch['source'], batch['target']
    params = {'verifier': jax.lax.stop_gradient(params['verifier']), 'head': params['head']}
    verifier = TransformerScorer(self.model, params['verifier'], self.max_target_len)
    enc = verifier.encode(src)
    inputs = autoregressive_inputs(target)
    _, hidden, _ = self.model.apply({'params': params['verifier']}, inputs.tokens, inputs.positions,
                                    inputs.self_mask(), enc['encoded'], enc['src_valid'],
                                    method=Transformer.decode_states)  # [B, T, D]
    sample_rng, dropout_rng = jax.random.split(rng)
    lengths = jnp.sum(target > 0, axis=1)  # [B] incl. EOS
    t = sample_boundaries(sample_rng, lengths, self.boundaries)  # [B, K]
    b, k = t.shape
    state = jax.vmap(boundary_states, in_axes=(None, 1), out_axes=1)(hidden, t)  # [B, K, D]
    last = jnp.where(t >= 0, jnp.take_along_axis(target, jnp.maximum(t, 0), axis=1), BOS_ID)  # [B, K]
    goal = window_targets(target, t + 1, self.window)  # [B, K, W]
    goal = jnp.where((lengths > 0)[:, None, None], goal, 0)  # padding rows score nothing
    repeat = lambda x: jnp.repeat(x, k, axis=0)  # [B, ...] -> [B*K, ...]
    drafter = self.drafter(params)
    prepared = {'encoded': repeat(enc['encoded']), 'src_valid': repeat(enc['src_valid'])}
    memory = jax.tree_util.tree_map(repeat, drafter.memory(hidden))  # per layer [B*K, H, T, Dh]
    visible = jnp.arange(target.shape[1])[None] <= t.reshape(-1)[:, None]  # [B*K, T]: states up to the boundary
    logits = drafter.draft_logits(prepared, state.reshape(b * k, -1), last.reshape(-1), (t + 1).reshape(-1),
                                  memory or None, visible, deterministic=deterministic, rng=dropout_rng)  # [B*K, W, V]
    goal = goal.reshape(b * k, self.window)
    weights = (goal > 0).astype(jnp.float32)
    sums = smoothed_cross_entropy(logits, goal, weights, 0.0)
    sums['first_correct'] = jnp.sum(weights[:, 0] * (argmax(logits[:, 0]) == goal[:, 0]))
    sums['first_tokens'] = jnp.sum(weights[:, 0])
    return sums

  def adopt_params(self, loaded, fresh):
    """`init_from` an AT run: its parameters become the frozen verifier, the head starts fresh
    (from a selfdraft run: taken whole)."""
    if set(loaded) == {'verifier', 'head'}:
      return loaded
    return {'verifier': loaded, 'head': fresh['head']}

  def views(self):
    def scorer(params):
      return SelfDraftScorer(self.model, params['verifier'], self.max_target_len, draft_head=self.drafter(params))
    return {LeftToRightScorer: scorer, WindowDrafter: self.drafter}

  def label(self) -> str:
    """Short description for tables."""
    return f'{self.name} W={self.window}'

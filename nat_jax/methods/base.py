"""The method contract as code: what train, translate, evaluate and the benchmark call on a method.

A method is registered under a name (`@register('name', settings)` in nat_jax.methods) and
built from the whole config and the vocabulary size. It turns the batch {'source', 'target'} into
its decoder inputs with pure functions, computes its loss sums, and offers *views*: Protocol ->
build(params) -> an object implementing it (nat_jax.views); every registered decoder
whose Protocol is offered runs on it. t5x's BaseModel plays the same part there.
"""
from __future__ import annotations

import abc
from typing import Any, Callable

import ml_collections


class Method(abc.ABC):
  """What every method is: train, translate, evaluate and the benchmark call only this.

  Attributes:
    name: its registry name (`model.method`; set by `register`).
    normalizer: 'tokens' or 'sentences': the count in `loss`'s sums that the summed loss is divided by.
    feeds_draft_heads: its left-to-right view offers step_states, one token per step (self-drafting heads).
    packable: its loss takes packed batches, several pairs per row (`data.pack`).
    max_segments: the most pairs a packed row holds (`data.pack`; set by `get_method`).
    slot_multiple: target slots reserved per packed pair are a multiple of this (a view in blocks: HRT's k).
    tokens_per_step: target tokens its left-to-right view writes per step (IBDecoder / SA: more than one).
    max_target_len: the longest target its views decode (`max_decode_len`).
    decoder_defaults: {decoder: {option: value}}: the run's own decoder defaults (`decoder_defaults`).
    model: its network, a flax Module whose `cfg` is its TransformerConfig.
  """
  name: str = ''                   # its registry name (set by @register)
  normalizer: str = 'tokens'       # 'tokens' or 'sentences': the count in `loss`'s sums the summed loss is divided by
  feeds_draft_heads: bool = False  # its left-to-right view offers step_states, one token per step (self-drafting)
  packable: bool = False           # its loss takes packed batches: several pairs per row (config data.pack)
  max_segments: int = 0            # the most pairs a packed row holds: data.pack of its config (set by get_method)
  slot_multiple: int = 1           # target slots reserved per packed pair: a multiple of this (a view in blocks)
  tokens_per_step: int = 1         # target tokens its left-to-right view writes per step (IBDecoder / SA: more)
  max_target_len: int              # the longest target its views decode: config.max_decode_len
  decoder_defaults: dict           # {decoder: {option: value}}: the run's own defaults (config.decoder_defaults)
  model: Any                       # its network (a flax Module whose `cfg` is its TransformerConfig)

  def __init__(self, config: ml_collections.ConfigDict, vocab_size: int):
    """A method checks its settings (ConfigError naming the key) and builds its model; every method
    calls this first."""
    self.max_target_len = config.max_decode_len
    self.decoder_defaults = {name: dict(options) for name, options in config.decoder_defaults.items()}

  @abc.abstractmethod
  def init_params(self, rng, batch: dict) -> Any:
    """Parameters (boxed with logical axis names), shaped by a batch {'source', 'target'}."""

  @abc.abstractmethod
  def loss(self, params, batch: dict, rng, step=0, deterministic: bool = False) -> dict:
    """Sums over the batch: {'loss', 'nll', 'correct', 'tokens', <normalizer>, ...method counts};
    step i32[] is the update number (schedules such as glancing use it)."""

  @abc.abstractmethod
  def views(self) -> dict[type, Callable[[Any], Any]]:
    """{Protocol: build(params) -> view}: what its decoders see."""

  def label(self) -> str:
    """Short description for tables (the name, plus what distinguishes a variant)."""
    return self.name

  def adopt_params(self, loaded: Any, fresh: Any) -> Any:
    """Parameters to start from when `init_from` names another run: its `loaded` parameters,
    completed with what this method adds from the `fresh` initialisation. Default: as loaded."""
    return loaded

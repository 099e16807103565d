"""Method registry: `config.model.method` -> an object bundling module, inputs, loss and decoders.

A method implements:
  init_params(rng, batch) -> params                  (boxed with logical axis names)
  loss(params, batch, rng, step, deterministic) -> sums
      {'loss', 'nll', 'correct', 'tokens'} (+ 'weight', the loss normaliser if not tokens, + counts);
      step i32[] is the update number (schedules such as glancing use it)
  decoders: tuple of decoder names it supports       (see nat_jax.decode.DECODERS)
and, when it decodes left to right, the autoregressive interface used by greedy, beam and Jacobi:
  encode(params, src) -> enc                         (pytree, batch on axis 0)
  init_cache(params, enc, num_slots) -> cache        (pytree, batch on axis 0)
  step_logits(params, enc, cache, tokens, start) -> (logits f32[B, T, V], cache)
      scores T new tokens written to cache slots [start, start + T)
  max_decode_len(src_len) -> int
a non-autoregressive graph method (DA-Transformer) instead provides predict_graph and
vertex_log_probs (see nat_jax.methods.dag, nat_jax.decode.dag).
Adding a method = a module in this package + `@register('name')`; train/translate/evaluate never change.
"""
from __future__ import annotations

from typing import Callable

METHODS: dict[str, Callable] = {}


def register(name: str):
  def wrap(cls):
    METHODS[name] = cls
    return cls
  return wrap


def get_method(config, vocab_size: int):
  """Builds the method named by `config.model.method`."""
  name = config.model.method
  if name not in METHODS:
    raise ValueError(f'Unknown model.method {name!r}; registered methods: {sorted(METHODS)}.')
  return METHODS[name](config, vocab_size)


from nat_jax.methods import autoregressive, dag  # noqa: E402,F401  (register 'at', 'dat')

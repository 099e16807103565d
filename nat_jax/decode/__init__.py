"""Decoder registry: `--decoder=<name> [--decoder.<opt>=<v>]` -> a jitted (params, src) -> DecodeOutput.

Autoregressive decoders (greedy, beam, ...) are written once against a method's
`encode / init_cache / step_logits` interface (see nat_jax.methods); others are plain functions
of the method's encoder output. Each decoder declares its options with typed defaults, so an
unknown or mistyped option is an error naming the valid ones.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax


class DecodeOutput(NamedTuple):
  tokens: jax.Array  # i32[B, T], 0-padded after EOS
  scores: jax.Array  # f32[B], the decoder's own score of the returned sequence
  aux: dict          # decoder-specific per-sentence statistics (e.g. steps), each [B]


@dataclasses.dataclass(frozen=True)
class Decoder:
  name: str
  fn: Callable[..., DecodeOutput]  # fn(method, params, src, **options)
  defaults: dict[str, Any]


DECODERS: dict[str, Decoder] = {}


def register_decoder(name: str, **defaults):
  def wrap(fn):
    DECODERS[name] = Decoder(name, fn, defaults)
    return fn
  return wrap


def parse_options(name: str, overrides: dict[str, str]) -> dict[str, Any]:
  """Typed options of decoder `name` from string overrides; clear errors for unknown names/values."""
  if name not in DECODERS:
    raise ValueError(f'Unknown decoder {name!r}; available: {sorted(DECODERS)}.')
  options = dict(DECODERS[name].defaults)
  for key, raw in overrides.items():
    if key not in options:
      raise ValueError(f'Decoder {name!r} has no option {key!r}; its options: {sorted(options)}.')
    kind = type(options[key])
    try:
      options[key] = (raw.lower() in ('1', 'true', 'yes')) if kind is bool else kind(raw)
    except ValueError:
      raise ValueError(f'--decoder.{key}={raw!r}: expected {kind.__name__}.') from None
  return options


def make_decode_fn(method, name: str, options: dict[str, Any]) -> Callable[[Any, jax.Array], DecodeOutput]:
  """jit(params, src i32[B, S]) -> DecodeOutput for a method that supports decoder `name`."""
  if name not in method.decoders:
    raise ValueError(f'Method {type(method).__name__} does not support decoder {name!r}; '
                     f'it supports {list(method.decoders)}.')
  fn = DECODERS[name].fn
  return jax.jit(lambda params, src: fn(method, params, src, **options))


from nat_jax.decode import beam, dag, greedy, jacobi  # noqa: E402,F401  (register decoders)

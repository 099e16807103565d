"""Decoder registry: `--decoder=<name> [--decoder.<opt>=<v>]` -> a jitted (params, src) -> DecodeOutput.

A decoder registers with the Protocol its view must implement and its options with typed
defaults, so an unknown or mistyped option is an error naming the valid ones. Which decoders a
method supports follows from the views it offers; no method lists decoder names.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax

from nat_jax.decode.interfaces import DecodeOutput


@dataclasses.dataclass(frozen=True)
class Decoder:
  name: str
  fn: Callable[..., DecodeOutput]  # fn(view, src i32[B, S], **options)
  needs: type                      # the Protocol (nat_jax.decode.interfaces) its view implements
  defaults: dict[str, Any]


DECODERS: dict[str, Decoder] = {}


def register_decoder(name: str, needs: type, **defaults):
  def wrap(fn):
    DECODERS[name] = Decoder(name, fn, needs, defaults)
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


def decoders_for(method) -> list[str]:
  """Names of the registered decoders whose Protocol the method offers a view for."""
  offered = method.views()
  return [name for name, d in DECODERS.items() if d.needs in offered]


def method_view(method, protocol: type, user: str) -> Callable[[Any], Any]:
  """build(params) -> the method's view implementing `protocol`; a clear error naming `user` (who
  needs it) and the method's decoders when it offers none."""
  build = method.views().get(protocol)
  if build is None:
    raise ValueError(f'{user} needs a {protocol.__name__}, which method {method.name!r} does not offer; '
                     f'its decoders: {decoders_for(method)}.')
  return build


def make_decode_fn(method, name: str, options: dict[str, Any]) -> Callable[[Any, jax.Array], DecodeOutput]:
  """jit(params, src i32[B, S]) -> DecodeOutput: decoder `name` on the method's view of `params`."""
  decoder = DECODERS[name]
  build = method_view(method, decoder.needs, f'Decoder {name!r}')
  return jax.jit(lambda params, src: decoder.fn(build(params), src, **options))


def build_decoder(method, name: str, overrides: dict[str, str]):
  """(jitted decode fn, parsed options) from a decoder name and its string options."""
  options = parse_options(name, overrides)
  return make_decode_fn(method, name, options), options

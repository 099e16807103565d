"""The method registry: `@register(name, default_config)`, `get_method(config, vocab_size)`, and the
checks of a recipe's method section (nat_jax.methods says how a method is added)."""
from __future__ import annotations

from typing import Callable, Optional

import ml_collections

from nat_jax.errors import ConfigError
from nat_jax.methods.base import Method

METHODS: dict[str, type] = {}
DEFAULTS: dict[str, Callable[[], ml_collections.ConfigDict]] = {}  # method -> its config section's defaults


def register(name: str, default_config: Optional[Callable[[], ml_collections.ConfigDict]] = None):
  def wrap(cls):
    if not issubclass(cls, Method):
      raise TypeError(f'method {name!r}: {cls.__name__} must subclass nat_jax.methods.base.Method')
    cls.name = name
    METHODS[name] = cls
    if default_config is not None:
      DEFAULTS[name] = default_config
    return cls
  return wrap


def check_method_config(config):
  """The recipe has the section of its method (and no other method's), with exactly its keys."""
  name = config.model.method
  if name not in METHODS:
    raise ConfigError(f'Unknown model.method {name!r}; registered methods: {sorted(METHODS)}.')
  strays = sorted(m for m in DEFAULTS if m != name and m in config)
  if strays:
    raise ConfigError(f'The config has a section for method {strays[0]!r} but model.method={name!r}; '
                     f'a recipe holds only the section of its own method.')
  if name not in DEFAULTS:
    return
  module = METHODS[name].__module__
  if name not in config:
    raise ConfigError(f'model.method={name!r} needs the config section {name!r}: add '
                     f'`c.{name} = {module}.default_config()` to the recipe (see configs/).')
  known, have = set(DEFAULTS[name]().keys()), set(config[name].keys())
  if have != known:
    raise ConfigError(f'config.{name}: unknown keys {sorted(have - known)}, missing keys {sorted(known - have)}; '
                     f'its keys are those of {module}.default_config(): {sorted(known)}.')


def get_method(config, vocab_size: int) -> Method:
  """Builds the method named by `config.model.method`."""
  check_method_config(config)
  method = METHODS[config.model.method](config, vocab_size)
  pack = config.data.get('pack', 0)
  if pack < 0:
    raise ConfigError(f'data.pack must be >= 0 (0: one pair per row; K: up to K pairs per row), got {pack}.')
  if pack and not method.packable:
    packable = sorted(name for name, cls in METHODS.items() if cls.packable)
    raise ConfigError(f'data.pack={pack}: model.method={config.model.method!r} does not train on packed rows '
                      f'(methods that do: {packable}); set data.pack=0 (and tighten num_buckets instead).')
  method.max_segments = pack
  return method

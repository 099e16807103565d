"""Method registry: `config.model.method` -> the object that trains a model and offers its decoding views.

A method subclasses `nat_jax.methods.base.Method` (the contract as code: name, normalizer,
init_params, loss, views, label, adopt_params, upgrade_config).
A method turns the batch {'source', 'target'} into its decoder inputs with one pure function
(e.g. `autoregressive_inputs`) and token-level methods share one loss over those inputs
(nat_jax.methods.teacher_forcing). A method with options of its own has a config section named
after it, with defaults from `default_config()` in its module; its recipes copy the section in
(configs/dat_bible_tiny.py) and `get_method` checks it.

Adding a method = a module in this package + `@register('name')` + its import below;
train / translate / evaluate never change.
"""
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


def upgrade_config(plain: dict) -> dict:
  """A run's config.json (as a dict) in today's layout: every method's `upgrade_config` in turn."""
  for cls in METHODS.values():
    plain = cls.upgrade_config(plain)
  return plain


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


# register 'at', 'cmlm', 'dat', 'hrt', 'ibdecoder', 'selfdraft'
from nat_jax.methods import autoregressive, cmlm, dag, hrt, ibdecoder, selfdraft  # noqa: E402,F401

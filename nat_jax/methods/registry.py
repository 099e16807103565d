"""The method registry: `@register(name, settings)`, `get_method(config, vocab_size)`, and the checks of a
recipe: its values against their declared rules (nat_jax.recipes.defaults) and its method's section (nat_jax.methods
says how a method is added)."""
from __future__ import annotations

from typing import Optional

from nat_jax.errors import ConfigError
from nat_jax.methods.base import Method
from nat_jax.recipes.defaults import check_config

METHODS: dict[str, type] = {}
SETTINGS: dict[str, type] = {}  # method -> the dataclass declaring its config section (config.<method>)


def register(name: str, settings: Optional[type] = None):
  """A class decorator: registers a Method subclass as model.method `name`.

  Args:
    name: the method's name in recipes (`model.method`) and tables.
    settings: the frozen dataclass declaring its config section `config.<name>`, each field a
      `nat_jax.settings.setting(default, help, rule)`; None for a method without settings of its own.

  Example::

    @dataclasses.dataclass(frozen=True)
    class MySettings:
      depth: int = setting(2, 'layers of the extra head', low=1)

    @register('mine', MySettings)
    class MyMethod(Method):
      ...
  """
  def wrap(cls):
    if not issubclass(cls, Method):
      raise TypeError(f'method {name!r}: {cls.__name__} must subclass nat_jax.methods.base.Method')
    cls.name = name
    METHODS[name] = cls
    if settings is not None:
      SETTINGS[name] = settings
    return cls
  return wrap


def check_method_config(config):
  """The recipe has the section of its method (and no other method's), and every value of it and of the rest of
  the recipe keeps its declared rule."""
  name = config.model.method
  if name not in METHODS:
    raise ConfigError(f'Unknown model.method {name!r}; registered methods: {sorted(METHODS)}.')
  strays = sorted(m for m in SETTINGS if m != name and m in config)
  if strays:
    raise ConfigError(f'The config has a section for method {strays[0]!r} but model.method={name!r}; '
                      f'a recipe holds only the section of its own method.')
  own = {name: SETTINGS[name]} if name in SETTINGS else {}
  if own and name not in config:
    declared = f'{own[name].__module__}.{own[name].__name__}'
    raise ConfigError(f'model.method={name!r} needs the config section {name!r}: add `c.{name} = section({declared})` '
                      'to the recipe (nat_jax.recipes.defaults.section; see configs/).')
  check_config(config, own)


def get_method(config, vocab_size: int) -> Method:
  """The method a recipe names, built.

  Args:
    config: a recipe's config (`nat_jax.recipes.load_recipe`, or a run's config.json read by `load_run`): every
      value is checked against its declared rule first, and the section of its method must be there.
    vocab_size: the vocabulary's size (the run's tokenizer's).

  Returns:
    The Method named by `config.model.method`, its model built (no parameters yet: `method.init_params`).

  Raises:
    ConfigError: an unknown method, a missing or foreign section, or a value that breaks its rule.

  Example::

    from nat_jax.methods import get_method
    from nat_jax.recipes import load_recipe, recipe_path

    config = load_recipe(recipe_path('dat_bible_tiny'))
    method = get_method(config, config.vocab_size)
  """
  check_method_config(config)
  method = METHODS[config.model.method](config, vocab_size)
  pack = config.data.pack
  if pack and not method.packable:
    packable = sorted(name for name, cls in METHODS.items() if cls.packable)
    raise ConfigError(f'data.pack={pack}: model.method={config.model.method!r} does not train on packed rows '
                      f'(methods that do: {packable}); set data.pack=0 (and tighten num_buckets instead).')
  method.max_segments = pack
  return method

"""Settings declared once: a dataclass field with its default, help and what its value must be.

A library's settings object (nat_jax.deploy.server.ServeConfig) declares each field with `setting(...)`;
`check_settings` refuses a value that breaks its rule when the object is made (from Python or a command
line alike), and `nat_jax.commands.cli.flags_of` makes the command's flags, their --help and the
command-line reference from the same fields.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

from nat_jax.errors import ConfigError

MAX_ROWS = 65536  # sentences decoded at once (a batch): 64k rows of 4,096 tokens is past any device's memory


def setting(default: Any, help: str, *, low: Optional[float] = None, high: Optional[float] = None,
            choices: tuple[str, ...] = (), flag: bool = True):
  """A field: its default (whose type is the setting's), what it sets, its bounds (numbers) or choices
  (strings, or each item of a tuple), and whether a command line sets it as `--<name>` (`flag`)."""
  return dataclasses.field(default=default, metadata={'help': help, 'low': low, 'high': high, 'choices': choices,
                                                      'flag': flag})


def setting_problem(name: str, value: Any, field: dataclasses.Field) -> Optional[str]:
  """Why `value` breaks the rule of setting `name` (one line naming it as a flag), or None."""
  low, high, choices = (field.metadata.get(k) for k in ('low', 'high', 'choices'))
  if isinstance(field.default, bool):
    return None if isinstance(value, bool) else f'--{name}={value!r}: must be true or false.'
  if isinstance(field.default, (int, float)):
    kind = int if isinstance(field.default, int) else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value) \
        or (low is not None and value < low) or (high is not None and value > high):
      what = 'an integer' if isinstance(field.default, int) else 'a finite number'
      bounds = f' from {low:g} to {high:g}' if low is not None and high is not None else \
          f' >= {low:g}' if low is not None else ''
      return f'--{name}={value!r}: must be {what}{bounds}.'
    return None
  if isinstance(field.default, tuple):  # a list of names
    if isinstance(value, str) or not isinstance(value, (tuple, list)) or not all(isinstance(i, str) for i in value):
      return f'--{name}={value!r}: must be a list of names.'
    bad = [i for i in value if choices and i not in choices]
    return f'--{name}={",".join(value)}: {bad[0]!r} is not one of {", ".join(choices)}.' if bad else None
  if value is not None and not isinstance(value, str):
    return f'--{name}={value!r}: must be text.'
  if choices and value not in choices:
    return f'--{name}={value!r}: must be one of {", ".join(choices)}.'
  return None


def check_settings(obj) -> None:
  """ConfigError naming the first field of the dataclass `obj` whose value breaks its rule."""
  for field in dataclasses.fields(obj):
    if 'help' in field.metadata:
      problem = setting_problem(field.name, obj.__dict__[field.name], field)
      if problem:
        raise ConfigError(problem)

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


@dataclasses.dataclass(frozen=True)
class Rule:
  """What a setting's value must be, the one rule of a command's flags (nat_jax.commands.cli.Flag), a library
  settings object's fields (`setting`) and a decoder's options (nat_jax.decode.options): a finite number within
  [low, high] (0 allowed too where `zero` says what it means), or one of `choices`. `words` says it in the
  setting's own terms ('1 to 256 beams') where the generated words (`says`) would not. `below`: high itself is
  out (a probability below 1)."""
  low: Optional[float] = None
  high: Optional[float] = None
  choices: tuple[str, ...] = ()
  zero: str = ''
  words: str = ''
  below: bool = False

  def holds(self, value) -> bool:
    if self.choices:
      return value in self.choices
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
      return False
    if self.zero and value == 0:
      return True
    under = self.high is None or (value < self.high if self.below else value <= self.high)
    return (self.low is None or value >= self.low) and under

  def says(self, what: str = 'a finite number') -> str:
    """What a value must be, in words: `what` ('an integer') with the bounds, or the choices."""
    if self.words:
      return self.words
    if self.choices:
      return 'one of ' + ', '.join(self.choices)
    if self.low is not None and self.high is not None:
      rule = f'{what} from {number_text(self.low)} to {"below " if self.below else ""}{number_text(self.high)}'
    elif self.low is not None:
      rule = f'{what} >= {number_text(self.low)}'
    else:
      rule = what
    return f'0 ({self.zero}) or {rule}' if self.zero else rule


BATCH_RULE = Rule(1, MAX_ROWS)  # sentences per decoding batch: --batch_size and the Translator's batch_size


def number_text(x: float) -> str:
  """A bound as a user reads it: 256, not 256.0."""
  return str(int(x)) if float(x).is_integer() else f'{x:g}'


def setting(default: Any, help: str, *, low: Optional[float] = None, high: Optional[float] = None,
            choices: tuple[str, ...] = (), flag: bool = True, zero: str = '', below: bool = False):
  """A field: its default (whose type is the setting's), what it sets, its bounds (numbers; `zero`: what 0
  means where 0 is allowed below `low`; `below`: `high` itself is out) or choices (strings, or each item of a
  tuple), and whether a command line sets it as `--<name>` (`flag`)."""
  return dataclasses.field(default=default, metadata={'help': help, 'rule': Rule(low, high, choices, zero, '', below),
                                                      'flag': flag})


def setting_problem(name: str, value: Any, field: dataclasses.Field) -> Optional[str]:
  """Why `value` breaks the rule of setting `name` (one line naming it as a flag), or None."""
  rule = field.metadata['rule']
  if isinstance(field.default, bool):
    return None if isinstance(value, bool) else f'--{name}={value!r}: must be true or false.'
  if isinstance(field.default, (int, float)):
    integer = isinstance(field.default, int)
    if (integer and isinstance(value, float)) or not rule.holds(value):
      return f'--{name}={value!r}: must be {rule.says("an integer" if integer else "a finite number")}.'
    return None
  if isinstance(field.default, tuple):  # a list of names
    if isinstance(value, str) or not isinstance(value, (tuple, list)) or not all(isinstance(i, str) for i in value):
      return f'--{name}={value!r}: must be a list of names.'
    bad = [i for i in value if rule.choices and not rule.holds(i)]
    return f'--{name}={",".join(value)}: {bad[0]!r} is not one of {", ".join(rule.choices)}.' if bad else None
  if value is not None and not isinstance(value, str):
    return f'--{name}={value!r}: must be text.'
  if rule.choices and not rule.holds(value):
    return f'--{name}={value!r}: must be {rule.says()}.'
  return None


def check_settings(obj) -> None:
  """ConfigError naming the first field of the dataclass `obj` whose value breaks its rule."""
  for field in dataclasses.fields(obj):
    if 'help' in field.metadata:
      problem = setting_problem(field.name, obj.__dict__[field.name], field)
      if problem:
        raise ConfigError(problem)

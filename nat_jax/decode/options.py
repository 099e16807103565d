"""Decoder options: one frozen, hashable dataclass per decoder, declared beside it.

Each field is one option: its type (its default's), its default, what a value must be (a `Rule`), what it
sets (help) and whether it names a file (`names_file`: the run layer loads it; a server request never sets
it). Strings (a command line's `--decoder.<opt>=<v>`, an HTTP request's JSON values, the `Translator`'s
keyword arguments) become typed options once, at those edges (`parse`); below them the dataclass travels
unchanged and is its own cache key. The command-line reference, `--help`, the server and the fuzzer read
the same fields.

    @dataclasses.dataclass(frozen=True)
    class BeamOptions(Bounded):
      beam_size: int = hypotheses(4, 'hypotheses kept per sentence')
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from nat_jax.errors import ConfigError
from nat_jax.settings import Rule

MAX_BLOCK = 4096  # tokens (steps) per block: what the longest config decodes; a block past a run's bound is the whole
MAX_HYPOTHESES = 256  # beams (beam_size, b_at, b_nat, length_beam) per sentence: more would not fit a batch's memory
TRUE, FALSE = ('true', '1', 'yes'), ('false', '0', 'no')


def option(default, help: str = '', rule: Optional[Rule] = None, names_file: bool = False):
  """One option field: its default (whose type is the option's), what it sets, its rule, and whether its value
  names a file (set by the command line or the server, never by a request)."""
  return dataclasses.field(default=default, metadata={'help': help, 'rule': rule, 'names_file': names_file})


# The options several decoders share, each declared once (a decoder's own help may say what one means for it).
def hypotheses(default: int, help: str, unit: str = 'beams'):
  return option(default, help, Rule(1, MAX_HYPOTHESES, words=f'1 to {MAX_HYPOTHESES} {unit}'))


def steps(default: int, help: str):
  return option(default, help, Rule(1, MAX_BLOCK))


MAX_WEIGHT = 10.0  # exponents and weights: |y|^10 and 10 x a log-probability stay far inside float32's range


def weight(default: float, help: str):
  return option(default, help, Rule(0, MAX_WEIGHT))


def choice(default: str, help: str, choices: tuple[str, ...]):
  return option(default, help, Rule(choices=choices))


def remove_repeats():
  return option(True, 'drop a token equal to the one before it on the path (as the DA-Transformer reference does)')


@dataclasses.dataclass(frozen=True)
class Options:
  """A decoder's options (a subclass per decoder). Build one with `parse`, which checks every rule."""

  def kwargs(self) -> dict[str, Any]:
    """The options as the decoder function's keyword arguments."""
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Bounded(Options):
  """Options of a decoder whose output length a `max_len` option may fix."""
  max_len: int = option(0, "the most tokens to write; 0: the run's bound for each source (1.5 x its padded width + "
                           '10, at most config.max_decode_len)',
                        Rule(1, zero="the model's bound", words="0 (the model's bound) or a positive number of tokens"))


def fixed_length(options: Options) -> int:
  """The output length `options` fix (max_len), 0 when the run's bound for each source decides."""
  return options.max_len if isinstance(options, Bounded) else 0


def spec(options_type: type, name: str) -> dataclasses.Field:
  """The field of option `name`."""
  return {f.name: f for f in dataclasses.fields(options_type)}[name]


def names_files(options_type: type) -> list[str]:
  """The options whose values name files."""
  return [f.name for f in dataclasses.fields(options_type) if f.metadata['names_file']]


def value_text(value: Any, key: str) -> str:
  """An option value as the string a command line gives (True -> 'true'); strings, numbers or booleans only."""
  if isinstance(value, bool):
    return 'true' if value else 'false'
  if not isinstance(value, (str, int, float)):
    raise ConfigError(f'decoder option {key!r}: expected a string, number or boolean, got {type(value).__name__}.')
  return str(value)


def typed_value(key: str, raw: str, kind: type):
  """One option value from its string form: bools only as true/false (1/0, yes/no)."""
  if kind is bool:
    if raw.lower() in TRUE + FALSE:
      return raw.lower() in TRUE
    raise ConfigError(f'--decoder.{key}={raw!r}: expected true or false.')
  try:
    return kind(raw)
  except ValueError:
    raise ConfigError(f'--decoder.{key}={raw!r}: expected {kind.__name__}.') from None


def rule_words(field: dataclasses.Field) -> str:
  """What option `field`'s value must be, in words (--help, the reference, the error refusing a value)."""
  return field.metadata['rule'].says('an integer' if isinstance(field.default, int) else 'a finite number')


def check(decoder: str, options: Options):
  """ConfigError naming the first option of `options` (of decoder `decoder`) whose value breaks its rule."""
  for f in dataclasses.fields(options):
    value, rule = options.__dict__[f.name], f.metadata['rule']
    if rule is not None and not rule.holds(value):
      raise ConfigError(f'--decoder.{f.name}={value}: {decoder} needs {rule_words(f)}.')


def parse(decoder: str, base: Options, given: Mapping[str, Any]) -> Options:
  """`base` with the options `given` as strings (or as strings, numbers and booleans, which read as their
  string form) laid over it, every rule checked; ConfigError naming an unknown option or a bad value."""
  fields = {f.name: f for f in dataclasses.fields(base)}
  typed = {}
  for key, value in sorted(given.items()):
    if key not in fields:
      raise ConfigError(f'Decoder {decoder!r} has no option {key!r}; its options: {sorted(fields)}.')
    typed[key] = typed_value(key, value_text(value, key), type(fields[key].default))
  options = dataclasses.replace(base, **typed)
  check(decoder, options)
  return options

"""nat_jax.decode.options: every decoder's options parse from their string form, keep their rules at the
bounds, and are the hashable value that names a built decoder."""
import dataclasses
import re

import pytest

from nat_jax import decode
from nat_jax.decode import options as options_lib
from nat_jax.errors import ConfigError

FIELDS = [(name, field) for name, decoder in sorted(decode.DECODERS.items())
          for field in dataclasses.fields(decoder.options)]


def text(value) -> str:
  return ('true' if value else 'false') if isinstance(value, bool) else str(value)


@pytest.mark.parametrize('name', sorted(decode.DECODERS))
def test_defaults_round_trip_through_their_string_form(name):
  defaults = decode.DECODERS[name].options()
  given = {key: text(value) for key, value in dataclasses.asdict(defaults).items()}
  parsed = decode.parse_options(name, given)
  assert parsed == defaults and hash(parsed) == hash(defaults) and type(parsed) is type(defaults)
  assert decode.parse_options(name, {}) == defaults


@pytest.mark.parametrize('name,field', [(n, f) for n, f in FIELDS if f.metadata['rule'] is not None],
                         ids=lambda x: x if isinstance(x, str) else x.name)
def test_every_rule_holds_at_its_bounds_and_fails_past_them(name, field):
  rule = field.metadata['rule']
  if rule.choices:
    for value in rule.choices:
      assert decode.parse_options(name, {field.name: value}).kwargs()[field.name] == value
    with pytest.raises(ConfigError, match=f'--decoder.{field.name}=nope: {name} needs one of'):
      decode.parse_options(name, {field.name: 'nope'})
    return
  step = 1 if isinstance(field.default, int) else 1e-3
  for bound, outside in ((rule.low, None if rule.low is None else rule.low - step),
                         (rule.high, None if rule.high is None else rule.high + step)):
    if bound is None:
      continue
    kind = type(field.default)
    assert decode.parse_options(name, {field.name: str(kind(bound))}).kwargs()[field.name] == bound
    if outside == 0 and rule.zero:
      continue  # 0 is allowed too, and means what rule.zero says
    words = re.escape(options_lib.rule_words(field))
    with pytest.raises(ConfigError, match=f'--decoder.{field.name}=.*: {name} needs {words}'):
      decode.parse_options(name, {field.name: str(kind(outside))})
  if isinstance(field.default, float):
    for value in ('nan', 'inf', '-inf'):
      with pytest.raises(ConfigError):
        decode.parse_options(name, {field.name: value})


def test_values_of_python_and_json_read_as_their_string_form():
  assert decode.parse_options('beam', {'beam_size': 2, 'alpha': 0}) == decode.parse_options(
      'beam', {'beam_size': '2', 'alpha': '0.0'})
  assert decode.parse_options('dag_greedy', {'remove_repeats': False}).remove_repeats is False
  for bad in ({'beam_size': 2.5}, {'beam_size': True}, {'beam_size': [2]}, {'beam_size': None}):
    with pytest.raises(ConfigError):
      decode.parse_options('beam', bad)


def test_options_built_elsewhere_are_checked_before_use():
  """A typed value made by hand (dataclasses.replace past a bound, another decoder's class) is refused
  by check_decoder, which every build runs."""
  from nat_jax.methods import get_method
  from tests.support import tiny_config
  at = get_method(tiny_config({'train': 'train.tsv', 'validation': 'validation.tsv', 'test': 'test.tsv'}), 40)
  beyond = dataclasses.replace(decode.parse_options('beam', {}), beam_size=0)
  with pytest.raises(ConfigError, match='beam_size=0: beam needs 1 to 256 beams'):
    decode.check_decoder(at, 'beam', beyond)
  with pytest.raises(ConfigError, match="Decoder 'greedy' takes Bounded, got BeamOptions"):
    decode.check_decoder(at, 'greedy', decode.parse_options('beam', {}))


def test_files_are_named_only_by_the_options_that_say_so():
  assert options_lib.names_files(decode.DECODERS['dag_beam'].options) == ['lm']
  assert options_lib.names_files(decode.DECODERS['drafted'].options) == ['drafter']
  assert not any(options_lib.names_files(d.options) for n, d in decode.DECODERS.items() if n not in ('dag_beam',
                                                                                                      'drafted'))

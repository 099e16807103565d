"""nat_jax.settings: the server's settings are declared once; its flags (cli.flags_of) and its own checks
(ServeConfig) refuse the same values, and the command builds the same config the library would."""
import dataclasses

import pytest
from absl import flags

from nat_jax.commands import cli
from nat_jax.deploy.server import ServeConfig
from nat_jax.errors import ConfigError


def outside(flag: cli.Flag) -> list:
  """Values just past a flag's rule, and of the wrong kind."""
  if flag.kind in ('int', 'float'):
    step = 1 if flag.kind == 'int' else 1e-3
    return [v for v in (None if flag.low is None else flag.low - step,
                        None if flag.high is None else flag.high + step) if v is not None] + [float('nan'), True]
  if flag.kind == 'enum':
    return ['nope']
  return []


def inside(flag: cli.Flag) -> list:
  if flag.kind in ('int', 'float'):
    return [v for v in (flag.low, flag.high) if v is not None]
  return list(flag.choices[:2])


def command_line_refuses(flag: cli.Flag, value) -> bool:
  """Whether `--<flag>=<value>` is refused by the command line: absl's parse (types, enums) or cli.check_flags."""
  values = flags.FlagValues()
  cli.define_flags((flag,), values)
  try:
    values(['serve', f'--{flag.name}={value}'])
    cli.check_flags((flag,), values)
  except (flags.Error, ConfigError):
    return True
  return False


@pytest.mark.parametrize('flag', cli.flags_of(ServeConfig), ids=lambda f: f.name)
def test_the_flag_and_the_config_refuse_the_same_values(flag):
  field = {f.name: f for f in dataclasses.fields(ServeConfig)}[flag.name]
  assert flag.default == (list(field.default) if isinstance(field.default, tuple) else field.default)
  for value in outside(flag):
    assert command_line_refuses(flag, value), (flag.name, value)
    with pytest.raises(ConfigError, match=f'--{flag.name}='):
      ServeConfig(**{flag.name: value})
  for value in inside(flag):
    value = int(value) if flag.kind == 'int' else value
    assert not command_line_refuses(flag, value), (flag.name, value)
    assert ServeConfig(**{flag.name: value}).__dict__[flag.name] == value


def test_every_setting_but_the_key_is_a_flag():
  names = [f.name for f in cli.flags_of(ServeConfig)]
  assert names == [f.name for f in dataclasses.fields(ServeConfig) if f.name != 'api_key']


def test_the_command_line_builds_the_config_of_its_flags():
  values = flags.FlagValues()
  cli.define_flags(cli.flags_of(ServeConfig), values)
  values(['serve', '--max_batch=8', '--allowed_decoders=beam,greedy', '--compose=arrival', '--timeout_s=2.5'])
  config = cli.settings_from_flags(ServeConfig, values, api_key='k')
  assert config == ServeConfig(max_batch=8, allowed_decoders=('beam', 'greedy'), compose='arrival', timeout_s=2.5,
                               api_key='k')
  with pytest.raises(ConfigError, match="--allowed_decoders='beam': must be a list of names"):
    ServeConfig(allowed_decoders='beam')

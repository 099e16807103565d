"""Every recipe in configs/ loads, names a registered method with a valid section, decodes its
validation and test sets with decoders that method supports, and documents commands that parse."""
import glob
import importlib
import os
import subprocess
import sys

import pytest

from nat_jax.decode import decoders_for
from nat_jax.methods import get_method
from tests.support import REPO

RECIPES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, 'configs', '*.py'))
                 if not p.endswith('__init__.py'))


@pytest.mark.parametrize('name', RECIPES)
def test_recipe_builds_its_method(name):
  config = importlib.import_module(f'configs.{name}').get_config()
  assert isinstance(config.total_steps, int) and isinstance(config.seed, int)
  module = importlib.import_module(f'configs.{name}')
  assert 'python -m nat_jax.train' in module.__doc__ and name in module.__doc__  # the command that runs it
  method = get_method(config, 4000)
  supported = decoders_for(method)
  assert config.eval_decoder in supported and config.test_decoder in supported, (supported, config.eval_decoder)


def docstring_commands(name: str) -> list[tuple[str, list[str]]]:
  """(module, its arguments) of every `python -m nat_jax.<module> ...` command in a recipe's docstring
  (continuation lines joined, comments and the [ ] around optional flags dropped)."""
  doc = importlib.import_module(f'configs.{name}').__doc__.replace('\\\n', ' ')
  commands = []
  for line in doc.splitlines():
    line = line.split('#', 1)[0].strip()
    if line.startswith('python -m nat_jax.'):
      module, *args = line[len('python -m nat_jax.'):].replace('[', ' ').replace(']', ' ').split()
      commands.append((module, args))
  return commands


def defined_flags(module: str) -> set[str]:
  """The flags nat_jax.commands.<module> defines (its COMMAND_FLAGS, in a fresh process)."""
  code = (f'import importlib; from absl import flags; from nat_jax.commands import cli; '
          f'm = importlib.import_module("nat_jax.commands.{module}"); '
          'cli.define_flags(m.COMMAND_FLAGS); '
          'print(" ".join(f for f in flags.FLAGS '
          'if (flags.FLAGS.find_module_defining_flag(f) or "").startswith("nat_jax") or f == "config"))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=REPO, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  return set(out.stdout.split())


def test_recipe_docstring_commands_use_real_flags():
  """Every command a recipe's docstring tells the reader to run names flags its command defines,
  `--config.<key>` keys the recipe has and `--decoder.<opt>` options its decoder has."""
  from nat_jax.commands.cli import _flat_keys
  from nat_jax.decode import DECODERS
  commands = {name: docstring_commands(name) for name in RECIPES}
  flags_of = {module: defined_flags(module) for module in {m for cs in commands.values() for m, _ in cs}}
  problems = []
  for name, cs in commands.items():
    keys = set(_flat_keys(importlib.import_module(f'configs.{name}').get_config()))
    for module, args in cs:
      named = {a.split('=', 1)[1] for a in args if a.startswith(('--decoder=', '--decoders='))}
      decoders = {d for spec in named for d in spec.split(',')}
      for arg in args:
        if not arg.startswith('--'):
          continue
        flag = arg[2:].split('=', 1)[0]
        if flag.startswith('config.'):
          ok = flag[len('config.'):] in keys
        elif flag.startswith('decoder.'):
          ok = any(flag[len('decoder.'):] in DECODERS[d].option_names for d in decoders if d in DECODERS)
        else:
          ok = flag in flags_of[module]
        if not ok:
          problems.append(f'configs/{name}.py: python -m nat_jax.{module} ... {arg}')
  assert not problems, 'recipe docstrings name flags their commands lack:\n' + '\n'.join(problems)

"""What the command lines share: one entry point with one error path, `--decoder.<opt>=<v>` flags,
checks of paths and sizes, and the load-a-run prologue.

Every command runs through `run_command(main)`: bad flags, a bad `--config.<key>` override, a
missing recipe, a `NatJaxError` (bad settings, data, checkpoints) or an OSError (a full disk, a
read-only directory) print one line `error: ...` on stderr and exit with status 2, without a
traceback; warnings are `warning: ...` lines on stderr (nat_jax.errors.log).
"""
from __future__ import annotations

import contextlib
import difflib
import errno
import importlib.util
import logging
import math
import os
import sys
from typing import Any, Callable, Optional

from absl import app, flags
from absl import logging as absl_logging

from nat_jax.errors import ConfigError, NatJaxError, setup_logging
from nat_jax.files import TMP_SUFFIX
from nat_jax.runs import Run, load_run


def quiet_logs():
  """Keep orbax/absl INFO chatter out of the user's terminal (warnings still show); our own
  diagnostics as `warning: ...` lines on stderr."""
  absl_logging.set_verbosity(absl_logging.WARNING)
  logging.getLogger('absl').setLevel(logging.WARNING)
  setup_logging()


def fail(message: str):
  """The one way a command line stops on bad input: `error: <message>` on stderr, exit status 2."""
  print(f'error: {message}', file=sys.stderr, flush=True)
  _settle_stdout()
  sys.exit(2)


def _settle_stdout():
  """Flush stdout; when it cannot take more (a closed pipe, a full device), send what is left to
  os.devnull, so that the interpreter's own flush at exit adds no second message."""
  try:
    sys.stdout.flush()
  except (OSError, ValueError):
    with contextlib.suppress(OSError, ValueError):
      devnull = os.open(os.devnull, os.O_WRONLY)
      os.dup2(devnull, sys.stdout.fileno())


def os_error_message(e: OSError) -> str:
  """An OSError as one line naming the path: 'cannot write /x/y: No space left on device'."""
  where = TMP_SUFFIX.sub('', str(e.filename)) if e.filename else ''  # name the file the user asked for
  if getattr(e, 'filename2', None):
    where += f' -> {e.filename2}'
  what = e.strerror or str(e)
  if e.errno == errno.EPIPE:
    return f'{where or "the output"}: closed by its reader before everything was written (broken pipe)'
  return (f'{where}: {what}' if where else what) + ' (check the path, its permissions and free disk space)'


def run_command(main: Callable[[list[str]], Any], decoder_overrides: Optional[dict[str, str]] = None):
  """Runs a command line's `main` under absl: `--decoder.<opt>=<v>` moved into `decoder_overrides`
  (when given), flags parsed by `parse_flags`, and every user-caused error turned into `fail`."""
  argv = sys.argv
  if decoder_overrides is not None:
    try:
      argv, found = split_decoder_flags(argv)
    except ConfigError as e:
      fail(str(e))
    decoder_overrides.update(found)

  def guarded(args):
    quiet_logs()
    try:
      return main(args)
    except app.UsageError as e:
      fail(str(e))
    except NatJaxError as e:
      fail(str(e))
    except OSError as e:
      fail(os_error_message(e))
    except ValueError as e:  # settings checked by libraries outside nat_jax (and our older ValueErrors)
      fail(str(e))
  app.run(guarded, argv=argv, flags_parser=parse_flags)


# --- flags ---------------------------------------------------------------------------------------
def parse_flags(argv: list[str]) -> list[str]:
  """absl's parse with one-line errors: an unknown flag, a bad value, a missing recipe file and an
  unknown `--config.<key>` (naming the closest valid key, or the method a section belongs to)."""
  recipe = next((a.split('=', 1)[1] for a in argv[1:] if a.startswith('--config=')), None)
  if recipe is not None:
    given, _, rest = recipe.partition(':')
    path = recipe_path(given)
    if path is None:
      fail(f'--config={recipe}: no such recipe file or recipe name; recipes are the files in configs/, by path '
           f'(--config=configs/at_bible_tiny.py) or by name (--config=at_bible_tiny).')
    recipe = path + (':' + rest if rest else '')
    argv = [f'--config={recipe}' if a.startswith('--config=') else a for a in argv]
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    fail(str(e).splitlines()[0])
  except Exception as e:  # ml_collections raises KeyError / AttributeError / TypeError for overrides
    fail(config_override_problem(recipe, argv) or f'{type(e).__name__}: {str(e).splitlines()[0]}')


def recipe_path(given: str) -> Optional[str]:
  """A recipe file: `given` itself if it is a file, else the recipe of that name in the `configs`
  package (installed with nat_jax: `--config=at_bible_tiny` works from any directory), else None."""
  if os.path.isfile(given):
    return given
  if os.sep in given or '/' in given:
    return None
  spec = importlib.util.find_spec('configs')
  if spec is None or not spec.submodule_search_locations:
    return None
  name = given if given.endswith('.py') else given + '.py'
  path = os.path.join(list(spec.submodule_search_locations)[0], name)
  return path if os.path.isfile(path) else None


def _flat_keys(config, prefix: str = '') -> list[str]:
  keys = []
  for key, value in config.items():
    keys.append(prefix + key)
    if hasattr(value, 'items'):
      keys += _flat_keys(value, f'{prefix}{key}.')
  return keys


def load_recipe(path: str):
  """The ConfigDict of a recipe file (its get_config())."""
  spec = importlib.util.spec_from_file_location('nat_jax_recipe', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def config_override_problem(recipe: Optional[str], argv: list[str]) -> Optional[str]:
  """What is wrong with the first `--config.<key>=<v>` whose key the recipe lacks, or None."""
  if recipe is None:
    return None
  try:
    config = load_recipe(recipe.split(':', 1)[0])
  except Exception as e:  # a recipe that does not load: say so
    return f'--config={recipe} does not load: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ""}'
  from nat_jax.methods import DEFAULTS
  keys = _flat_keys(config)
  for arg in argv[1:]:
    if not arg.startswith('--config.'):
      continue
    key = arg[len('--config.'):].split('=', 1)[0]
    if key in keys:
      continue
    section = key.split('.', 1)[0]
    if section in DEFAULTS and section not in config:
      return (f'--config.{key}: section {section!r} holds the options of method {section!r}, but this recipe '
              f'trains model.method={config.model.method!r}; use a recipe of method {section!r} '
              f'(e.g. configs/{section}_bible_tiny.py).')
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    hint = f'; did you mean --config.{close[0]}?' if close else '; see the recipe file for its keys.'
    return f'--config.{key}: recipe {recipe} has no such key{hint}'
  return None


def split_decoder_flags(argv: list[str]) -> tuple[list[str], dict[str, str]]:
  """Pull `--decoder.<opt>=<value>` out of argv (absl cannot declare dotted flags)."""
  rest, opts = [], {}
  for arg in argv:
    if arg.startswith('--decoder.'):
      key, sep, value = arg[len('--decoder.'):].partition('=')
      if not sep:
        raise ConfigError(f'{arg!r} needs a value: --decoder.{key}=<value>')
      opts[key] = value
    else:
      rest.append(arg)
  return rest, opts


# --- checks --------------------------------------------------------------------------------------
def check_positive(**values: float):
  """ConfigError naming the first flag whose value is not a positive number."""
  for name, value in values.items():
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
      raise ConfigError(f'--{name}={value}: must be a positive number.')


def check_non_negative(**values: float):
  """ConfigError naming the first flag whose value is not a finite number >= 0 (NaN included)."""
  for name, value in values.items():
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
      raise ConfigError(f'--{name}={value}: must be a finite number >= 0.')


def check_input_file(path: str, flag: str = 'input'):
  if not os.path.exists(path):
    raise ConfigError(f'--{flag}={path}: no such file.')
  if os.path.isdir(path):
    raise ConfigError(f'--{flag}={path} is a directory; give a file.')


def check_output_file(path: str, flag: str = 'output'):
  if os.path.isdir(path):
    raise ConfigError(f'--{flag}={path} is a directory; give a file path.')
  parent = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(parent):
    raise ConfigError(f'--{flag}={path}: directory {parent} does not exist.')


def cli_prologue(argv, workdir: str, which: str, average: int, prepare: Callable[[Run], Any],
                 dtype: str = 'float32') -> tuple[Run, Any]:
  """Shared start of translate/distill/ddgviz/dagviz: argument checks, the run, and `prepare(run)`
  (decoders etc.); errors are raised for `run_command` to print."""
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if not workdir:
    raise app.UsageError('--workdir=<dir of a trained run> is required.')
  check_positive(average=average)
  run = load_run(workdir, which, average, dtype)
  return run, prepare(run)

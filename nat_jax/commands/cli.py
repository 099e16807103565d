"""What the command lines share: one entry point with one error path, `--decoder.<opt>=<v>` flags,
checks of paths and sizes, and the load-a-run prologue.

Every command runs through `run_command(main)`: bad flags, a bad `--config.<key>` override, a
missing recipe, a `NatJaxError` (bad settings, data, checkpoints) or an OSError (a full disk, a
read-only directory) print one line `error: ...` on stderr and exit with status 2, without a
traceback; any other exception is a bug and keeps its traceback. Warnings are `warning: ...` lines
on stderr (nat_jax.errors.log).
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import errno
import logging
import os
import signal
import sys
from typing import Any, Callable, Optional, Sequence

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from nat_jax.commands.launch import prepare_process
from nat_jax.commands.names import COMMAND_NAMES
from nat_jax.decode import DECODERS, describe_options
from nat_jax.errors import ConfigError, NatJaxError, Stopped, setup_logging
from nat_jax.files import TMP_SUFFIX
from nat_jax.kernels import onednn
from nat_jax.models.transformer import DTYPES, QUANTIZATIONS
from nat_jax.recipes import load_recipe, recipe_path
from nat_jax.run.workdir import Run, load_run
from nat_jax.settings import BATCH_RULE, MAX_ROWS, Rule  # noqa: F401 (MAX_ROWS: the commands read cli.MAX_ROWS)
from nat_jax.version import VERSION


def quiet_logs():
  """Keep orbax/absl INFO chatter out of the user's terminal (warnings still show); our own
  diagnostics as `warning: ...` lines on stderr."""
  absl_logging.set_verbosity(absl_logging.WARNING)
  logging.getLogger('absl').setLevel(logging.WARNING)
  setup_logging()


def fail(message: str, status: int = 2, prefix: str = 'error: '):
  """The one way a command line stops on bad input: `error: <message>` on stderr, exit status 2 (1: a check
  the command made does not hold, errors.CheckFailed). A command stopped by a signal (errors.Stopped) says
  `stopped by SIGTERM: <what was kept>` (no prefix: nothing was wrong), status 128 + the signal."""
  print(f'{prefix}{message}', file=sys.stderr, flush=True)
  _settle_stdout()
  sys.exit(status)


def _settle_stdout():
  """Flush stdout; when it cannot take more (a closed pipe, a full device), send what is left to
  os.devnull, so that the interpreter's own flush at exit adds no second message."""
  if sys.stdout is None:  # started with stdout closed
    return
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


def run_command(main: Callable[..., Any], decoder_options: bool = False, command_flags: Sequence['Flag'] = ()):
  """Runs a command line's `main` under absl: with `decoder_options`, `--decoder.<opt>=<v>` taken out of
  argv and given to `main(argv, {opt: value string})`; flags parsed by `parse_flags` and checked against
  `command_flags` (`check_flags`) before any work, and every user-caused error turned into `fail`. The process is
  a command line's (`launch.prepare_process`: a no-op where the command's entry point did it already)."""
  prepare_process()
  argv, found = sys.argv, None
  if decoder_options:
    try:
      argv, found = split_decoder_flags(argv)
    except ConfigError as e:
      fail(str(e))

  def guarded(args):
    quiet_logs()
    previous = stop_on_signals()
    utf8_streams()
    try:
      if len(args) > 1:
        raise ConfigError(f'unexpected arguments {args[1:]}: every value is given as --<flag>=<value> '
                          '(see --help).')
      check_flags(command_flags)
      return main(args) if found is None else main(args, found)
    except app.UsageError as e:
      fail(str(e))
    except NatJaxError as e:
      fail(str(e), e.exit_status)
    except Stopped as e:
      fail(str(e), e.exit_status, prefix='')
    except OSError as e:
      fail(os_error_message(e))
    finally:  # a caller in the same process (a test) gets its own handlers back
      for signum, handler in previous.items():
        signal.signal(signum, handler)
    # Any other exception is a bug: it ends with its traceback (exit 1), for the report.
  app.run(guarded, argv=argv, flags_parser=parse_flags)


def utf8_streams():
  """stdout and stderr written as UTF-8 whatever the locale says (PYTHONIOENCODING=ascii, LANG=C): input is read
  as UTF-8 bytes, so translations and messages leave the same way (stderr's unwritable characters escaped)."""
  if sys.stderr is None:  # started with stderr closed: messages go nowhere, not into stdout (print's fallback)
    sys.stderr = open(os.devnull, 'w')
  for stream, errors in ((sys.stdout, 'strict'), (sys.stderr, 'backslashreplace')):
    if stream is not None and hasattr(stream, 'reconfigure') and stream.encoding.lower().replace('-', '') != 'utf8':
      with contextlib.suppress(ValueError, OSError):
        stream.flush()
        stream.reconfigure(encoding='utf-8', errors=errors)


def standard_stream(name: str, flag: str):
  """sys.stdin / sys.stdout, or a ConfigError when the process was started with it closed (`<&-`, `>&-`)."""
  stream = getattr(sys, name)
  if stream is None:
    raise ConfigError(f'{name} is closed (the command was started without one); give --{flag}=<file>.')
  return stream


def _stop(signum, frame):
  raise Stopped(signum)


def stop_on_signals():
  """The one signal path of every command: SIGTERM and SIGINT (Ctrl-C) raise errors.Stopped where the command
  is, so the files it was writing are removed on the way out and it ends with one `stopped by ...` line
  and status 128 + the signal. A command that saves on a signal first (train: its checkpoint) or drains
  (serve) installs its own handlers inside this. Returns the handlers it replaced."""
  return {signum: signal.signal(signum, _stop) for signum in (signal.SIGTERM, signal.SIGINT)}


# --- each command's flags: what they are, what each value must be ---------------------------------


@dataclasses.dataclass(frozen=True)
class Flag:
  """One flag of a command line with what its value must be. A command declares its flags as a tuple
  of these (its COMMAND_FLAGS): `define_flags` makes them absl flags whose --help says the rule,
  `check_flags` refuses a value that breaks it before any work, and the fuzzer (tests/integration/test_fuzz.py)
  draws hostile values for every flag of every command from the same table."""
  name: str
  kind: str  # 'int' | 'float' | 'str' | 'bool' | 'enum' | 'list' | 'config' (a recipe, --config.<key> overrides)
  default: Any
  help: str
  low: Optional[float] = None   # int / float, and each item of an int list: at least this
  high: Optional[float] = None  # ... and at most this
  zero: str = ''                # int / float: 0 is allowed too, and means this ('all', 'off', 'the run's bound')
  choices: tuple[str, ...] = ()  # enum: its values; str / list: what the value (each item) must be one of
  path: str = ''  # str: 'file' (an existing file), 'dir' (an existing directory), 'run' (an existing directory,
                  # a trained run's), 'new_file' (a file to write), 'new_dir' (a directory to write, not a file)
  items: str = ''  # list: 'int' (each item an integer within low..high)
  required: bool = False  # must be given (a list: non-empty)

  @property
  def rule(self) -> Rule:
    """The flag's rule (nat_jax.settings.Rule: the one rule of flags, settings and decoder options)."""
    return Rule(self.low, self.high, self.choices, self.zero)

  def requirement(self) -> str:
    """What a value must be, in words (shown in --help, and in the error that refuses one)."""
    if self.kind in ('int', 'float') or self.items == 'int':
      rule = self.rule.says('an integer' if self.kind == 'int' or self.items == 'int' else 'a finite number')
      return f'comma-separated, each {rule}' if self.kind == 'list' else rule
    if self.choices:
      return ('comma-separated, each ' if self.kind == 'list' else '') + self.rule.says()
    return {'file': 'an existing file', 'dir': 'an existing directory', 'run': 'the directory of a trained run',
            'new_file': 'a file path in an existing directory', 'new_dir': 'a directory path (not a file)'
            }.get(self.path, '')

  def documented_rule(self) -> str:
    """What a value must be, as the command-line reference (docs/reference/cli.md) states it."""
    return self.rule_line(self.requirement() or {'bool': 'true or false', 'config': 'a recipe file or name'
                                                 }.get(self.kind, 'any text'))

  def documented_default(self) -> str:
    """The default as the command-line reference shows it ('' when there is none)."""
    shown = ','.join(self.default) if self.kind == 'list' and self.default else self.default
    return f'`{shown}`' if shown not in (None, '', []) else ''

  def rule_line(self, rule: str) -> str:
    """'required; <rule>', 'required', '<rule>' or '': what --help and the flags table say of a value (a required
    flag with a default is a list that may not be empty: 'not empty')."""
    need = 'not empty' if self.default not in (None, '', []) else 'required'
    return '; '.join(([need] if self.required else []) + ([rule] if rule else []))

  def problem(self, value) -> Optional[str]:
    """Why `value` breaks the rule (one line naming the flag), or None."""
    if value is None or (isinstance(value, (str, list)) and not value):
      return f'--{self.name} is required: {self.requirement() or self.help}' if self.required else None
    if self.kind in ('int', 'float'):
      return None if self.rule.holds(value) else f'--{self.name}={value}: must be {self.requirement()}.'
    if self.kind == 'list':
      for item in value:
        if self.items == 'int':
          try:
            number = int(item)
          except ValueError:
            number = None
          if number is None or not self.rule.holds(number):
            return f'--{self.name}={",".join(value)}: {item!r} is not {self.requirement().split("each ", 1)[1]}.'
        elif self.choices and not self.rule.holds(item):
          return f'--{self.name}={",".join(value)}: {item!r} is not {self.rule.says()}.'
      return None
    if self.kind == 'str' and self.choices and not self.rule.holds(value):
      return f'--{self.name}={value}: must be {self.rule.says()}.'
    if self.kind == 'str' and self.path:
      return path_problem(self.name, value, self.path)
    return None


def path_problem(name: str, path: str, kind: str) -> Optional[str]:
  """Why `path` cannot be what flag `name` needs (Flag.path: file, dir, run, new_file, new_dir), or None."""
  if '\x00' in path:
    return f'--{name}={path!r}: a path cannot hold a NUL character.'
  if kind == 'file':
    if not os.path.exists(path):
      return f'--{name}={path}: no such file.'
    if os.path.isdir(path):
      return f'--{name}={path} is a directory; give a file.'
  elif kind == 'run':
    if not os.path.isdir(path):
      return (f'--{name}={path}: no such directory; give the workdir of a trained run. Train first: '
              f'python -m nat_jax.train --config=configs/at_bible_tiny.py --workdir={path}'
              if not os.path.exists(path) else f'--{name}={path} is a file; give the workdir of a trained run.')
  elif kind == 'dir':
    if not os.path.isdir(path):
      return f'--{name}={path}: no such directory.' if not os.path.exists(path) else \
          f'--{name}={path} is a file; give a directory.'
  elif kind == 'new_file':
    if os.path.isdir(path):
      return f'--{name}={path} is a directory; give a file path.'
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
      return f'--{name}={path}: directory {parent} does not exist.'
  elif kind == 'new_dir':
    if os.path.exists(path) and not os.path.isdir(path):
      return f'--{name}={path} is a file; give a directory.'
  return None


_DEFINE = {'int': flags.DEFINE_integer, 'float': flags.DEFINE_float, 'str': flags.DEFINE_string,
           'bool': flags.DEFINE_bool, 'list': flags.DEFINE_list}


def define_flags(command_flags: Sequence[Flag], flag_values: flags.FlagValues = flags.FLAGS):
  """The absl flags of `command_flags`, each --help line ending with what its value must be; key flags of the
  program (sys.argv[0]), so `--help` lists them (absl lists the main module's key flags only)."""
  for f in command_flags:
    line = f.rule_line('' if f.kind == 'enum' else f.requirement())  # absl's help lists an enum's values itself
    text = f'{f.help} [{line}]' if line else f.help
    if f.kind == 'enum':
      flags.DEFINE_enum(f.name, f.default, list(f.choices), text, flag_values=flag_values)
    elif f.kind == 'config':
      config_flags.DEFINE_config_file(f.name, f.default, text, flag_values=flag_values, lock_config=True)
    else:
      _DEFINE[f.kind](f.name, f.default, text, flag_values=flag_values)
    flag_values.register_key_flag_for_module(sys.argv[0], flag_values[f.name])


def check_flags(command_flags: Sequence[Flag], flag_values: flags.FlagValues = flags.FLAGS):
  """ConfigError naming the first flag whose value breaks its rule (Flag.problem)."""
  for f in command_flags:
    problem = f.problem(flag_values[f.name].value)
    if problem:
      raise ConfigError(problem)


def command(command_flags: Sequence[Flag], main: Callable[..., Any],
            decoder_options: bool = False) -> Callable[[], None]:
  """A command line's `console()` (what its console script and `python -m` run, through nat_jax.commands.launch):
  its flags, and `main` under `run_command` (with `decoder_options`: `main(argv, {opt: value string})` of the
  `--decoder.<opt>=<v>` flags)."""
  def console():
    if sys.argv[1:] == ['--version']:
      print(f'nat_jax {VERSION}')
      return
    define_flags(command_flags)
    run_command(main, decoder_options, command_flags)
  return console


def flags_of(settings_type: type) -> tuple[Flag, ...]:
  """The flags of a settings dataclass (fields declared with nat_jax.settings.setting) that a command line
  sets: name, type, default, help and rule from the field, so they are declared once."""
  out = []
  for field in dataclasses.fields(settings_type):
    meta, default = field.metadata, field.default
    if not meta.get('flag'):
      continue
    kind = ('bool' if isinstance(default, bool) else 'int' if isinstance(default, int) else 'float'
            if isinstance(default, float) else 'list' if isinstance(default, tuple) else 'enum' if meta['rule'].choices
            else 'str')
    rule = meta['rule']
    out.append(Flag(field.name, kind, list(default) if kind == 'list' else default, meta['help'], low=rule.low,
                    high=rule.high, zero=rule.zero, choices=rule.choices))
  return tuple(out)


def settings_from_flags(settings_type: type, flag_values: flags.FlagValues = flags.FLAGS, **others):
  """A settings dataclass from the command line's values of its flags (`flags_of`), and `others`."""
  values = {f.name: flag_values[f.name].value for f in flags_of(settings_type)}
  return settings_type(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}, **others)


COMMANDS = COMMAND_NAMES  # each nat_jax.commands.<name>, launched by nat_jax/<name>.py (names.py)


def every_flag() -> dict[str, tuple[Flag, ...]]:
  """Every command's flags (each command module's COMMAND_FLAGS): with the decoders' option dataclasses
  (nat_jax.decode.options), every option a user can set."""
  import importlib
  return {name: importlib.import_module(f'nat_jax.commands.{name}').COMMAND_FLAGS
          for name in COMMANDS}


# The flags several commands share.
def workdir_flag(help_text: str = 'Run directory written by nat_jax.train.') -> Flag:
  return Flag('workdir', 'str', None, help_text, path='run', required=True)


def recipe_flag() -> Flag:
  """--config: a recipe, by file or by name, with --config.<key>=<value> overrides."""
  return Flag('config', 'config', None, 'Recipe file (configs/*.py) or recipe name; --config.<key>=<value> overrides '
              'a setting (checked before any work).', required=True)


# Which decoder a command uses when --decoder is not given.
RUN_DEFAULT_DECODER = "greedy where the method decodes left to right, else the run's test decoder"


def decoder_flag(help_text: str, default: Optional[str] = None, name: str = 'decoder', kind: str = 'str') -> Flag:
  """A flag naming registered decoders (evaluate's --decoders: kind 'list'); every decoder's options follow its
  help (they are set as --decoder.<opt>=<v>)."""
  return Flag(name, kind, default, f'{help_text}\n{describe_options()}', choices=tuple(sorted(DECODERS)))


def dtype_flag(default: Optional[str] = 'float32', help_text: str = 'Inference precision') -> Flag:
  """--dtype: the activations' precision a run is loaded in (default None: the command's own, said in help_text)."""
  return Flag('dtype', 'enum' if default else 'str', default,
              f'{help_text}: parameters cast once at load (bfloat16, float16), softmax statistics in fp32.',
              choices=tuple(DTYPES))


def quantization_flag(help_text: str = '') -> Flag:
  """--quantization: how a run's weight matrices are held at inference (int8: quantized once at load)."""
  return Flag('quantization', 'enum', 'none', 'Weight matrices quantized once at load: int8 (per-channel scales, '
              f'float32 activations; --int8_kernel picks the product){"; " + help_text if help_text else ""}, or none.',
              choices=tuple(QUANTIZATIONS))


def checkpoint_flag() -> Flag:
  return Flag('checkpoint', 'enum', 'latest', 'Which checkpoints to load.', choices=('latest', 'best'))


def average_flag() -> Flag:
  return Flag('average', 'int', 1, 'Average the parameters of this many checkpoints.', low=1, high=1000)


def int8_kernel_flag() -> Flag:
  return Flag('int8_kernel', 'enum', 'auto', "The int8 matrix product of --quantization=int8: auto (the packed oneDNN "
              "kernel on x86-64 CPUs with VNNI, else XLA's int8 dot), onednn (the kernel, or an error saying why it "
              "cannot run), xla (XLA's dot). Both give the same results.", choices=onednn.CHOICES)


def batch_size_flag() -> Flag:
  return Flag('batch_size', 'int', 64, 'Sentences per decoding batch.', low=BATCH_RULE.low, high=BATCH_RULE.high)


# --- parsing -------------------------------------------------------------------------------------
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
  except SystemExit as e:  # absl's --help / --helpfull print and exit 1; asking for help is not a failure
    asked = {'--help', '-help', '-h', '--helpshort', '--helpfull', '-?'} & set(argv[1:])
    sys.exit(0 if asked and e.code == 1 else e.code)
  except flags.Error as e:
    fail(str(e).splitlines()[0])
  except Exception as e:  # ml_collections raises KeyError / AttributeError / TypeError for overrides
    fail(config_override_problem(recipe, argv) or f'{type(e).__name__}: {str(e).splitlines()[0]}')


def _flat_keys(config, prefix: str = '') -> list[str]:
  keys = []
  for key, value in config.items():
    keys.append(prefix + key)
    if hasattr(value, 'items'):
      keys += _flat_keys(value, f'{prefix}{key}.')
  return keys


def config_override_problem(recipe: Optional[str], argv: list[str]) -> Optional[str]:
  """What is wrong with the first `--config.<key>=<v>` whose key the recipe lacks, or None."""
  if recipe is None:
    return None
  try:
    config = load_recipe(recipe.split(':', 1)[0])
  except Exception as e:  # a recipe that does not load: say so
    return f'--config={recipe} does not load: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ""}'
  from nat_jax.methods import SETTINGS
  keys = _flat_keys(config)
  for arg in argv[1:]:
    if not arg.startswith('--config.'):
      continue
    key = arg[len('--config.'):].split('=', 1)[0]
    if key in keys:
      continue
    section = key.split('.', 1)[0]
    if section in SETTINGS and section not in config:
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
def cli_prologue(workdir: str, which: str, average: int, prepare: Callable[[Run], Any],
                 dtype: str = 'float32', quantization: str = 'none', int8_kernel: str = 'auto') -> tuple[Run, Any]:
  """Shared start of translate/distill/ddgviz/dagviz (their flags already checked): the run, and
  `prepare(run)` (decoders etc.); errors are raised for `run_command` to print."""
  run = load_run(workdir, which, average, dtype, quantization, int8_kernel)
  return run, prepare(run)

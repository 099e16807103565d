"""What the command lines share: quiet logs, `--decoder.<opt>=<v>` flags, the load-a-run prologue."""
from __future__ import annotations

import logging
import sys
from typing import Any, Callable

from absl import app
from absl import logging as absl_logging

from nat_jax import checkpoint
from nat_jax.runs import Run, load_run


def quiet_logs():
  """Keep orbax/absl INFO chatter out of the user's terminal (warnings still show)."""
  absl_logging.set_verbosity(absl_logging.WARNING)
  logging.getLogger('absl').setLevel(logging.WARNING)


def split_decoder_flags(argv: list[str]) -> tuple[list[str], dict[str, str]]:
  """Pull `--decoder.<opt>=<value>` out of argv (absl cannot declare dotted flags)."""
  rest, opts = [], {}
  for arg in argv:
    if arg.startswith('--decoder.'):
      key, sep, value = arg[len('--decoder.'):].partition('=')
      if not sep:
        raise SystemExit(f'error: {arg!r} needs a value: --decoder.{key}=<value>')
      opts[key] = value
    else:
      rest.append(arg)
  return rest, opts


def run_with_decoder_flags(main: Callable, overrides: dict[str, str]):
  """app.run(main) after moving `--decoder.<opt>=<v>` out of sys.argv into `overrides`."""
  argv, found = split_decoder_flags(sys.argv)
  overrides.update(found)
  app.run(main, argv=argv)


def cli_prologue(argv, workdir: str, which: str, average: int, prepare: Callable[[Run], Any],
                 dtype: str = 'float32') -> tuple[Run, Any]:
  """Shared start of translate/distill/ddgviz/dagviz: argument checks, quiet logs, the run, and
  `prepare(run)` (decoders etc.); a missing run or a bad decoder option prints `error: ...` and exits 2."""
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if not workdir:
    raise app.UsageError('--workdir=<dir of a trained run> is required.')
  quiet_logs()
  try:
    run = load_run(workdir, which, average, dtype)
    return run, prepare(run)
  except (checkpoint.CheckpointError, ValueError) as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)

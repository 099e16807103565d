"""One root for the errors a user can cause, and one logger for every diagnostic.

Imports nothing from nat_jax, so any module may use it. Every command line turns a `NatJaxError`
(and an OSError such as a full disk or a read-only directory) into one line
`error: <what is wrong and what to do>` on stderr and exit status 2 (`nat_jax.commands.cli.run_command`;
1 for `CheckFailed`: the work was done and its check does not hold).
Warnings go through `log` to stderr, never to stdout, where translations are written: the
command lines call `setup_logging()` (lines `warning: ...`); a library user without logging set up
still sees warnings on stderr (Python's last-resort handler).
"""
from __future__ import annotations

import logging
import sys

log = logging.getLogger('nat_jax')


class NatJaxError(Exception):
  """Bad input, settings or files: the message names the problem and what to do."""
  exit_status = 2  # of a command line that ends with it


class CheckFailed(NatJaxError):
  """A command did its work and what it checks does not hold (nat_jax.aot: a program does not fit): exit 1."""
  exit_status = 1


class Stopped(BaseException):
  """A command stopped by SIGTERM or SIGINT (Ctrl-C) before it finished: raised where the command was (a
  BaseException, like KeyboardInterrupt, so no `except Exception` keeps it), every file it was writing removed
  on the way out (nat_jax.files), and the command's exit status 128 + the signal's number, as a shell reports
  it (143, 130). The message says what was kept and how to go on."""

  def __init__(self, signum: int, kept: str = 'no output was left half-written; rerun the same command'):
    import signal
    super().__init__(f'stopped by {signal.Signals(signum).name}: {kept}.')
    self.signum, self.exit_status = signum, 128 + signum


class ConfigError(NatJaxError, ValueError):
  """A setting (config key, flag, decoder option) that cannot work."""


class CheckpointError(NatJaxError, RuntimeError):
  """A run directory without a readable checkpoint (or without its config / tokenizer)."""


class DataError(NatJaxError, ValueError):
  """Data that cannot be read as the settings say."""


class DataNotFoundError(NatJaxError, FileNotFoundError):
  """A data file or prepared dataset that is not there."""


class DistillError(NatJaxError, ValueError):
  """A distillation directory that does not fit the command or the data."""


class TrainingError(NatJaxError, RuntimeError):
  """Training that cannot go on as configured (a non-finite loss, a workdir another training holds)."""


class ResourceBusy(NatJaxError, RuntimeError):
  """A file or directory another process holds (a workdir a training is writing)."""


class _StderrHandler(logging.StreamHandler):
  """Writes to whatever sys.stderr is at the time (pytest's capture replaces it)."""

  @property
  def stream(self):
    return sys.stderr

  @stream.setter
  def stream(self, value):
    pass


def setup_logging(level: int = logging.INFO):
  """`log` prints `warning: ...` (and plain info lines) on stderr, once, whoever calls it first."""
  if not any(isinstance(h, _StderrHandler) for h in log.handlers):
    handler = _StderrHandler()
    handler.setFormatter(_Formatter())
    log.addHandler(handler)
  log.setLevel(level)
  log.propagate = False


class _Formatter(logging.Formatter):
  def format(self, record):
    message = record.getMessage()
    if record.levelno >= logging.WARNING:
      return f'{record.levelname.lower()}: {message}'
    return message

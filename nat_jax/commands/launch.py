"""How a command line starts: the process set-up its entry point does, never an import.

`launch(name)` is what `python -m nat_jax.<name>` and the `nat-jax-<name>` console script run (through the one-line
modules nat_jax/<name>.py): `prepare_process()` first, while nothing heavy is loaded, then the command's `console()`
(nat_jax.commands.<name>). `prepare_process()` re-executes the process once with glibc's huge-page malloc
(nat_jax.hugepages) and keeps JAX on the CPU where a CUDA plugin or the TPU compiler is installed without the device
(nat_jax.backends); `cli.run_command` calls it too, so `python -m benchmarks.<room>.<name>` gets the same process
(after its imports). Importing nat_jax as a library does neither."""
from __future__ import annotations

import importlib

from nat_jax import backends, hugepages


def prepare_process():
  """The command-line process: huge-page malloc (a re-execution, once), JAX on the CPU where no accelerator is
  visible. Does nothing the second time."""
  hugepages.reexec_command_line()
  backends.use_cpu_where_no_accelerator()


def launch(name: str):
  """Run command `name` (a module of nat_jax.commands) as a command line."""
  prepare_process()
  importlib.import_module(f'nat_jax.commands.{name}').console()

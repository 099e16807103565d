"""The command lines: one per console script of nat_jax that runs `nat_jax.commands.<name>:console`
(pyproject.toml's [project.scripts]). A new command is its module here plus that line; its `python -m
nat_jax.<name>` alias (nat_jax/__init__.py), its place in the command-line reference and the fuzzer follow.
Kept light: the package imports it to resolve `python -m nat_jax.<name>` before anything heavy loads."""
from __future__ import annotations

import functools
import importlib.metadata

PACKAGE = 'nat_jax.commands.'


@functools.lru_cache(maxsize=1)
def command_names() -> tuple[str, ...]:
  """The commands (the installed console scripts of this package: `pip install -e .` again after adding one)."""
  names = []
  for entry in importlib.metadata.entry_points(group='console_scripts'):
    module, _, attr = entry.value.partition(':')
    if module.startswith(PACKAGE) and attr.strip() == 'console' and module[len(PACKAGE):] not in names:
      names.append(module[len(PACKAGE):])
  return tuple(names)

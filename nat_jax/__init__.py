"""nat_jax: fast machine translation in JAX/Flax."""
import importlib.abc
import importlib.util
import os
import sys

if sys.argv[:1] == ['-m']:  # Python is locating a `python -m nat_jax.<command>` (or benchmarks.<name>) module
  from nat_jax import hugepages
  hugepages.reexec_command_line()  # returns only when the process keeps running as started
  del sys.modules['nat_jax.hugepages']  # `python -m nat_jax.hugepages` then runs as a fresh __main__

from nat_jax import backends as _backends  # noqa: E402

_backends.use_cpu_where_no_accelerator()  # before any module of ours imports JAX


def __getattr__(name):
  """`from nat_jax import Translator` (the public Python API), imported on first use so that
  `import nat_jax` stays light."""
  if name in ('Translator', 'Translation'):
    from nat_jax.run import translator
    return getattr(translator, name)
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


class _CommandAlias(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
  """`python -m nat_jax.<command>` for every command (nat_jax.commands.names): the alias module that runs
  its console() is made here, not kept as a file (for a command that is also a library package, nat_jax.aot,
  its `__main__`). Consulted after the path finders, so a real module wins."""

  def find_spec(self, fullname, path=None, target=None):
    parts = fullname.split('.')
    if parts[0] != __name__ or len(parts) not in (2, 3) or parts[2:] not in ([], ['__main__']):
      return None
    name = parts[1]
    from nat_jax.commands.names import command_names
    if name not in command_names():
      return None
    origin = os.path.join(os.path.dirname(__file__), 'commands', f'{name}.py')  # what argv[0] and --help show
    return importlib.util.spec_from_loader(fullname, self, origin=origin)

  def get_source(self, fullname):
    name = fullname.split('.')[1]
    return (f'"""`python -m nat_jax.{name}`: the command line of nat_jax/commands/{name}.py."""\n'
            f'from nat_jax.commands.{name} import console\n\n'
            "if __name__ == '__main__':\n  console()\n")

  def is_package(self, fullname):
    return False


sys.meta_path.append(_CommandAlias())

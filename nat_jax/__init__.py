"""nat_jax: fast machine translation in JAX/Flax."""
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

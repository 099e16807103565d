"""nat_jax: fast machine translation in JAX/Flax.

Importing it does nothing but define the package: the command lines set their process up in their entry point
(nat_jax.commands.launch), and `from nat_jax import Translator` loads the Python API on first use.
"""
from nat_jax.version import VERSION as __version__  # noqa: F401


def __getattr__(name):
  """`from nat_jax import Translator` (the public Python API), imported on first use so that
  `import nat_jax` stays light."""
  if name in ('Translator', 'Translation'):
    from nat_jax.run import translator
    return getattr(translator, name)
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')

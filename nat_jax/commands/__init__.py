"""The command lines: each module is a command's flags (COMMAND_FLAGS, nat_jax.commands.cli.Flag) and a
`main` over the libraries below it; `cli.command` builds its `console()` (console script `nat-jax-<name>`,
and `python -m nat_jax.<name>` through the import hook in nat_jax/__init__.py; names.py lists the commands:
the package's console scripts). No command imports
another. This package imports nothing at import time (`nat_jax.commands.aot` sets JAX's platform first).
"""

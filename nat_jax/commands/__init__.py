"""The command lines: each module is a command's flags (COMMAND_FLAGS, nat_jax.commands.cli.Flag) and a
`main` over the libraries below it; `cli.command` builds its `console()` (console script `nat-jax-<name>`,
and `python -m nat_jax.<name>`, both through the one-line module nat_jax/<name>.py and launch.py, which sets the
process up first; names.py lists the commands). No command imports another. This package imports nothing at
import time (`nat_jax.commands.aot` sets JAX's platform first).
"""

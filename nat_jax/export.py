"""`python -m nat_jax.export`: the command line; it lives in nat_jax/commands/export.py."""
from nat_jax.commands.export import console

if __name__ == '__main__':
  console()

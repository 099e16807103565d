"""`python -m nat_jax.convert`: the command line; it lives in nat_jax/commands/convert.py."""
from nat_jax.commands.convert import console

if __name__ == '__main__':
  console()

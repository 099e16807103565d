"""`python -m nat_jax.lm`: the command line; it lives in nat_jax/commands/lm.py."""
from nat_jax.commands.lm import console

if __name__ == '__main__':
  console()

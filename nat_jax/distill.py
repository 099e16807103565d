"""`python -m nat_jax.distill`: the command line; it lives in nat_jax/commands/distill.py."""
from nat_jax.commands.distill import console

if __name__ == '__main__':
  console()

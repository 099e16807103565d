"""`python -m nat_jax.evaluate`: the command line; it lives in nat_jax/commands/evaluate.py."""
from nat_jax.commands.evaluate import console

if __name__ == '__main__':
  console()

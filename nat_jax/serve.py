"""`python -m nat_jax.serve`: the command line; it lives in nat_jax/commands/serve.py."""
from nat_jax.commands.serve import console

if __name__ == '__main__':
  console()
